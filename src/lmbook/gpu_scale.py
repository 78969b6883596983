"""The appendix "Scaling up on a GPU": its sizes per device, the memory they need, and a GPT with fused attention.

**Sizes per device.** On a CPU the page keeps the course's small sizes (its 2-minute budget). On a GPU those sizes
only measure kernel-launch overhead: a GPU shows what bfloat16, fused attention and ``torch.compile`` do only on
matrices large enough to keep its cores busy. :data:`SIZES` holds one :class:`Sizes` per device kind and
:func:`sizes_for` picks it; ``LMBOOK_APPENDIX_SIZES`` (``cpu``, ``mps``, ``cuda``, ``cuda-tiny``) overrides the
choice, so that the GPU's code path can be run on a CPU at tiny sizes (``cuda-tiny``) to catch its mistakes.

**Memory.** A size must fit the card it runs on: :func:`train_bytes` estimates the bytes of one float32 training
step (weights, gradients, AdamW's two moments, and the activations kept for backward), :func:`fit_batch_size`
takes the largest power-of-two batch whose estimate stays under ``fraction`` (60%) of the card, and
:func:`attention_lengths` drops the sequence lengths whose n × n score matrices would not fit.
:func:`halve_on_oom` is the fallback when an estimate was wrong: it halves the batch and tries again.

**Fused attention in chapter 9's GPT.** :func:`use_fused_attention` makes each block of a :class:`lmbook.gpt.GPT`
call ``F.scaled_dot_product_attention`` with the same weights (no KV cache), instead of building the n × n scores.
"""

from __future__ import annotations

import gc
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

import torch
import torch.nn.functional as F

from .gpt import GPT, CausalSelfAttention, GPTConfig, KVCache
from .multihead import merge_heads, split_heads

T = TypeVar("T")
ENV = "LMBOOK_APPENDIX_SIZES"


@dataclass(frozen=True)
class Sizes:
    """What the appendix runs on one kind of device."""

    kind: str  # "cpu", "mps" or "cuda": which code path the page follows (CUDA-only calls also check the device)
    d_model: int  # the page's GPT, timed in float32, bfloat16 and compiled, and its MFU
    n_layer: int
    n_head: int
    block_size: int  # its context T, in tokens
    max_batch: int  # the batch, unless the card's memory calls for a smaller one (fit_batch_size)
    warmup_steps: int  # untimed steps before the timed ones (the first call of a compiled model is timed apart)
    timed_steps: int  # the timed steps: the best of them is the step's time
    attn_lengths: tuple[int, ...]  # sequence lengths n of the attention comparison
    attn_batch: int  # sequences × heads of size attn_d_head in it
    attn_heads: int
    attn_d_head: int
    attn_repeats: int  # timed calls (forward and backward) per length: the best is kept
    peak_n: int  # the n × n matrix product whose speed is the measured peak
    compile_gpt: bool = True  # compile the page's GPT (False: its first call would eat the page's time budget)
    fraction: float = 0.6  # the most of the card's memory a size may plan to use

    @property
    def tokens_per_step(self) -> int:
        return self.max_batch * self.block_size

    def gpt_config(self, vocab_size: int) -> GPTConfig:
        return GPTConfig(vocab_size=vocab_size, block_size=self.block_size, n_layer=self.n_layer,
                         n_head=self.n_head, d_model=self.d_model)


SIZES: dict[str, Sizes] = {
    # a 2-core CPU, about 2 minutes for the whole page: the course's sizes
    # (timed steps are few: a CPU without bfloat16 instructions runs a bfloat16 step 10 to 30 times slower)
    "cpu": Sizes(kind="cpu", d_model=256, n_layer=4, n_head=8, block_size=128, max_batch=8, warmup_steps=1,
                 timed_steps=2, attn_lengths=(128, 256, 512, 1024, 2048), attn_batch=1, attn_heads=4,
                 attn_d_head=32, attn_repeats=2, peak_n=1024, compile_gpt=False),
    # an Apple GPU shares the laptop's memory and has no Triton: middle sizes, eager
    "mps": Sizes(kind="mps", d_model=512, n_layer=6, n_head=8, block_size=512, max_batch=8, warmup_steps=2,
                 timed_steps=5, attn_lengths=(256, 512, 1024, 2048), attn_batch=2, attn_heads=8, attn_d_head=64,
                 attn_repeats=3, peak_n=4096, compile_gpt=False),
    # an NVIDIA GPU: a GPT of about 100 million weights, 1,024-token contexts, 32k tokens a step on a large card;
    # attention at 512 … 4,096 tokens, 4 sequences × 16 heads of 64 (GPT-2 medium's head size and count)
    "cuda": Sizes(kind="cuda", d_model=1024, n_layer=8, n_head=16, block_size=1024, max_batch=32, warmup_steps=3,
                  timed_steps=10, attn_lengths=(512, 1024, 2048, 4096), attn_batch=4, attn_heads=16,
                  attn_d_head=64, attn_repeats=5, peak_n=8192),
}
# the CUDA code path at sizes a CPU runs in seconds: a smoke test of the page's GPU branch, not a measurement
SIZES["cuda-tiny"] = replace(SIZES["cuda"], d_model=64, n_layer=2, n_head=4, block_size=64, max_batch=4,
                             warmup_steps=1, timed_steps=2, attn_lengths=(64, 128), attn_batch=1, attn_heads=2,
                             attn_d_head=16, attn_repeats=1, peak_n=256)


def sizes_for(device: torch.device | str, override: str | None = None) -> Sizes:
    """The sizes for ``device``'s kind; ``override`` (else the environment's ``LMBOOK_APPENDIX_SIZES``) names
    another entry of :data:`SIZES`."""
    name = override or os.environ.get(ENV) or torch.device(device).type
    if name not in SIZES:
        raise ValueError(f"no appendix sizes for {name!r}: choose one of {', '.join(SIZES)}")
    return SIZES[name]


def total_memory(device: torch.device | str) -> int | None:
    """The card's memory in bytes (CUDA), or None where the device does not say (CPU, MPS)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return None


def train_bytes(config: GPTConfig, batch_size: int) -> int:
    """An upper estimate of the memory of one float32 training step of ``GPT(config)`` with fused attention.

    16 bytes per weight (the weight, its gradient and AdamW's two moments, float32), and per token and layer the
    activations backward needs: about 44 · d_model float32 numbers (the two LayerNorms' inputs and intermediates,
    q, k, v and the attention's output, the MLP's 4 · d_model input, pre-activation and GELU output), and the
    logits with their softmax and gradient (3 · vocab). A third more covers the allocator's rounding and the
    temporaries of backward."""
    from .gpt import count_parameters

    c = config
    weights = count_parameters(c)
    per_token = 4 * (44 * c.n_layer * c.d_model + 3 * c.vocab_size)
    return int(16 * weights + 4 / 3 * per_token * batch_size * c.block_size)


def fit_batch_size(config: GPTConfig, max_batch: int, memory: int | None, fraction: float = 0.6) -> int:
    """The largest power of two ≤ ``max_batch`` whose :func:`train_bytes` is at most ``fraction`` of ``memory``
    (at least 1; ``max_batch`` itself when the memory is unknown)."""
    if memory is None:
        return max_batch
    batch = 1 << (max_batch.bit_length() - 1)  # the largest power of two ≤ max_batch
    while batch > 1 and train_bytes(config, batch) > fraction * memory:
        batch //= 2
    return batch


def attention_bytes(batch_heads: int, n: int, dtype_bytes: int) -> int:
    """An upper estimate of the peak memory of the course's attention, forward and backward: six tensors of
    batch · heads · n² (scores, scaled, masked, softmax; in backward the weights' gradient and the softmax's)."""
    return 6 * batch_heads * n * n * dtype_bytes


def attention_lengths(sizes: Sizes, memory: int | None, dtype_bytes: int = 4) -> tuple[int, ...]:
    """The lengths of ``sizes.attn_lengths`` whose :func:`attention_bytes` fit in ``fraction`` of ``memory``."""
    if memory is None:
        return sizes.attn_lengths
    bh = sizes.attn_batch * sizes.attn_heads
    fit = tuple(n for n in sizes.attn_lengths if attention_bytes(bh, n, dtype_bytes) <= sizes.fraction * memory)
    return fit or sizes.attn_lengths[:1]


def halve_on_oom(run: Callable[[int], T], batch: int) -> tuple[T, int]:
    """``run(batch)``, and if the device runs out of memory, ``run(batch // 2)``, …, down to 1.
    Returns the result and the batch that ran."""
    while True:
        try:
            return run(batch), batch
        except torch.OutOfMemoryError:
            if batch == 1:
                raise
        batch //= 2  # outside the handler: the failed attempt's tensors are free by now
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def gpt_flops_per_token(config: GPTConfig) -> float:
    """6 N + 12 · n_layer · d_model · T for ``GPT(config)`` from its sizes alone (N without the position table),
    as :func:`lmbook.scaling.flops_per_token` counts it."""
    from .gpt import count_parameters
    from .scaling import flops_per_token

    n = count_parameters(config) - config.block_size * config.d_model
    return flops_per_token(n, config.n_layer, config.d_model, config.block_size)


class FusedCausalSelfAttention(CausalSelfAttention):
    """:class:`lmbook.gpt.CausalSelfAttention`'s weights and function, with ``F.scaled_dot_product_attention``
    (is_causal) in place of the n × n scores; with a KV cache it falls back to the course's attention."""

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        if cache is not None:
            return super().forward(x, cache)
        q, k, v = (split_heads(t, self.n_head) for t in self.in_proj(x).chunk(3, dim=-1))
        return self.out_proj(merge_heads(F.scaled_dot_product_attention(q, k, v, is_causal=True)))


def use_fused_attention(model: GPT) -> GPT:
    """Make every block of ``model`` attend with ``F.scaled_dot_product_attention``: same weights, same function
    (to float rounding). Returns ``model``."""
    for module in model.modules():
        if type(module) is CausalSelfAttention:
            module.__class__ = FusedCausalSelfAttention
    return model


def fused_adamw(params, device: torch.device | str, **kwargs) -> torch.optim.AdamW:
    """AdamW, with its update fused into one kernel on CUDA (``fused=True``); the default loop elsewhere."""
    if torch.device(device).type == "cuda":
        kwargs["fused"] = True
    return torch.optim.AdamW(params, **kwargs)


def step_seconds(step: Callable[[], object], steps: int, warmup: int, device: torch.device | str) -> float:
    """The mean seconds of ``steps`` calls of ``step()`` timed together, after ``warmup`` untimed ones; the device
    is synchronised before the clock is read at both ends (CUDA runs kernels asynchronously)."""
    from .scaling import _sync

    for _ in range(warmup):
        step()
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(device)
    return (time.perf_counter() - t0) / steps


@dataclass(frozen=True)
class GPURun:
    """A page's figures from one GPU run, as ``bench/gpu_check.py`` stores them in bench/results.json."""

    gpu: str  # the GPU's name
    date: str
    commit: str  # its first 7 characters
    torch: str | None
    values: dict[str, float]  # headline key → the run's value (the median, where there were several)
    labels: dict[str, str]  # headline key → its label
    kinds: dict[str, str]  # headline key → its kind (lmbook.expected.KINDS)


def gpu_rows(results: str | Path, chapter: str) -> GPURun | None:
    """The CUDA row of ``chapter`` in ``results`` (bench/results.json), or None when the page has not run on a GPU.

    ``bench/gpu_check.py`` writes it: ``chapters[chapter]["cuda"]`` holds the date, the commit, the device as
    ``"cuda (<GPU name>)"`` and each headline under ``models``; ``gpu_check`` holds the run's torch version."""
    from .expected import headline_kind

    path = Path(results)
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    row = data.get("chapters", {}).get(chapter, {}).get("cuda")
    if not row or not row.get("models"):
        return None
    device = row.get("device", "")
    name = device[device.find("(") + 1:device.rfind(")")] if "(" in device else (data.get("gpu_check", {})
                                                                                  .get("gpu") or "a CUDA GPU")
    models = row["models"]
    return GPURun(gpu=name, date=row.get("date", "?"), commit=str(row.get("commit", "?"))[:7],
                  torch=data.get("gpu_check", {}).get("torch"),
                  values={k: float(m["median"]) for k, m in models.items()},
                  labels={k: m["label"] for k, m in models.items()},
                  kinds={k: m.get("kind") or headline_kind(m["label"], k) for k, m in models.items()})
