"""Right versions of the functions a later task calls from an earlier one: one mistake costs one task.

``cross_entropy`` may call the student's ``log_softmax`` of Task 1, ``multihead_attention`` their
``split_heads`` and ``merge_heads``, a Transformer block their ``layer_norm`` and ``feed_forward``. While a
later task's answer runs, the grader puts these in place of the student's own (by the name the statement
gives them, :class:`~lmbook.grading.earlier.EarlierTasks`), so a slip in Task 1 is graded once, in Task 1.

They are written with tensor primitives only: none of them is a ready-made answer the later task forbids
(torch's ``F.cross_entropy`` inside ``perplexity``, say), and each computes in its inputs' dtype and on their
device, as a right answer does.
"""

from __future__ import annotations

import torch


def log_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return x - torch.logsumexp(x, dim=dim, keepdim=True)


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    keep = targets != ignore_index
    return -log_softmax(logits[keep], -1).gather(-1, targets[keep].unsqueeze(-1)).mean()


def rnn_cell(x, h, W_x, W_h, b) -> torch.Tensor:
    """h_t = tanh(W_x x_t + W_h h_{t−1} + b): (B, H)."""
    return torch.tanh(x @ W_x.T + h @ W_h.T + b)


def filter_probs(logits, temperature: float = 1.0, top_k: int | None = None,
                 top_p: float | None = None) -> torch.Tensor:
    """softmax(logits / T) over the top-k tokens (ties with the k-th kept), then over the smallest set of them
    whose probability reaches top_p (ties with its last kept), renormalised: (B, V) in the logits' dtype."""
    # the sums that decide the top-p boundary, as exactly as the device allows (MPS has no float64)
    z = logits.to(torch.float32 if logits.device.type == "mps" else torch.float64) / temperature
    keep = torch.ones_like(z, dtype=torch.bool)
    if top_k is not None:
        keep = z >= z.topk(min(top_k, z.shape[-1]), dim=-1).values[..., -1:]
    if top_p is not None and top_p < 1:
        p = torch.softmax(z.masked_fill(~keep, float("-inf")), dim=-1)
        ranked = p.sort(dim=-1, descending=True).values
        before = ranked.cumsum(dim=-1) - ranked  # the probability of the tokens ranked above each one
        last = (before < top_p).sum(dim=-1, keepdim=True) - 1  # the one that makes the total reach top_p
        keep = keep & (p >= ranked.gather(-1, last))
    return torch.softmax(z.masked_fill(~keep, float("-inf")), dim=-1).to(logits.dtype)


def block_flops(n: int, d_model: int, d_ff: int) -> int:
    """8 n d² + 4 n² d + 4 n d d_ff: one encoder block's matrix products, 2 FLOPs per multiply-add."""
    return 8 * n * d_model * d_model + 4 * n * n * d_model + 4 * n * d_model * d_ff


def additive_scores(s, H, mask, W1, W2, v) -> torch.Tensor:
    """e_bj = vᵀ tanh(W1 h_bj + W2 s_b) at real positions, −∞ at padding: (B, T)."""
    e = torch.tanh(H @ W1.T + (s @ W2.T).unsqueeze(1)) @ v
    return e.masked_fill(~mask.bool(), float("-inf"))


def attend(scores, H, mask) -> tuple[torch.Tensor, torch.Tensor]:
    """α = softmax over the real positions of the scores, context = Σ_j α_j h_j: (B, d_h) and (B, T)."""
    real = mask.bool()
    alpha = torch.softmax(scores.masked_fill(~real, float("-inf")), dim=-1)
    context = (alpha.unsqueeze(-1) * H.masked_fill(~real.unsqueeze(-1), 0.0)).sum(dim=1)
    return context, alpha


def split_heads(x: torch.Tensor, n_head: int) -> torch.Tensor:
    """(B, n, d) → (B, n_head, n, d / n_head)."""
    B, n, d = x.shape
    return x.reshape(B, n, n_head, d // n_head).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, n_head, n, d_head) → (B, n, n_head · d_head)."""
    B, h, n, d_head = x.shape
    return x.transpose(1, 2).reshape(B, n, h * d_head)


def layer_norm(x, weight, bias, eps: float = 1e-5) -> torch.Tensor:
    """(x − mean) / sqrt(var + ε) · g + b over the last dimension, the variance without Bessel's correction."""
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * weight + bias


def feed_forward(x, w1, b1, w2, b2) -> torch.Tensor:
    """W2 ReLU(W1 x + b1) + b2, the weights laid out as nn.Linear's."""
    return torch.relu(x @ w1.T + b1) @ w2.T + b2
