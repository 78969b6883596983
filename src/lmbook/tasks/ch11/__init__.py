"""Checks for exercise 11 (chapter 11: from GPT-2 to today's language models).

The references are written here, independently of the course's answers in ``lmbook.llama``, ``lmbook.dpo``,
``lmbook.instruct`` and ``lmbook.scaling_laws``: RMSNorm and SwiGLU from their formulas, grouped-query attention
from torch's own ``F.scaled_dot_product_attention`` with ``enable_gqa``, the instruction loss and the DPO loss
written out with ``logsumexp`` and ``softplus``, the compute-optimal split solved from C = 6 N D. The tests prove
them equal to Hugging Face's ``LlamaRMSNorm``, ``LlamaMLP`` and ``LlamaAttention`` (with its ``DynamicCache``)
given the same weights, to the DPO loss computed from its closed form, and to lmbook's modules. Usage in a
notebook: ``from lmbook.tasks.ch11 import check``.

Conventions, as in the chapter:

- **Weights** are stored as ``nn.Linear`` stores them, (d_out, d_in), in dicts named as Hugging Face's Llama
  modules' ``state_dict()`` (``gate_proj.weight``, ``q_proj.weight``, ...); no biases anywhere.
- **RMSNorm** over the last dimension, ε inside the root: g ⊙ x / sqrt(mean(x²) + ε).
- **Attention.** n_head query heads, n_kv_head key/value heads of d_head = q_proj rows / n_head; query head h
  reads key/value head h // (n_head / n_kv_head). RoPE as Llama's: u cos + rotate_half(u) sin with
  rotate_half(u) = cat(−u[..., d_head/2:], u[..., :d_head/2]), on queries and keys, cos and sin (n_new, d_head)
  given for the new positions. The cache is None or {"k": K, "v": V}, (B, n_kv_head, t, d_head) each, keys
  already rotated; the new positions come after it.
- **Instruction loss.** logits (B, n, V) of ids (B, n); logits[:, t − 1] predicts ids[:, t]; the mean is over
  every response token of the batch (response_mask True), never the prompt or the padding.
- **DPO.** Sequence log-probabilities (B,) of the chosen and rejected responses under the policy and the
  reference; the loss is the mean over the pairs.
"""

from __future__ import annotations

from ...grading.checks import Registry
from ..questions.ch11 import QUESTIONS
from .compute_optimal import COMPUTE_OPTIMAL
from .dpo_loss import DPO_LOSS
from .gqa_attention import GQA_ATTENTION
from .instruction_loss import INSTRUCTION_LOSS
from .rms_norm import RMS_NORM
from .swiglu import SWIGLU

CHECKS = [RMS_NORM, SWIGLU, GQA_ATTENTION, INSTRUCTION_LOSS, DPO_LOSS, COMPUTE_OPTIMAL]
check = Registry(CHECKS + QUESTIONS)
