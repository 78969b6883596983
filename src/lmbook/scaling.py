"""Scaling up: the arithmetic of training cost and how well the hardware is used (appendix "Scaling up on a GPU").

**Model FLOPs per token.** A linear layer with N weights does N multiply-adds per token, 2N FLOPs. Training
runs it forwards once (2N) and backwards twice as much (2N for the gradient of the input, 2N for the gradient
of the weights): 6N per token. Attention also multiplies activations by activations, Q Kᵀ and A V, which no
weight counts: for each of n_layer layers and each token, 2 · d_model · T FLOPs for each of the two products
forward (T = block_size, the length of the context read), so 4 · n_layer · d_model · T forwards and three
times that for training:

    flops_per_token = 6 N + 12 · n_layer · d_model · T

This is nanoGPT's ``estimate_mfu`` (6N + 12 L H Q T, with H · Q = d_model heads × head size) and PaLM's
(Chowdhery et al., 2022, appendix B). It counts the full T × T score matrix, as they do, not the causal half.

**N leaves out the position table.** Looking up a row of wpe (or wte) is a copy, not a multiply: it costs no
FLOPs. The token table still counts, because tied to the output layer it is also the (d_model × vocab) matrix
that makes the logits. :func:`non_embedding_params` is N for :class:`lmbook.gpt.GPT`.

**MFU** (model FLOPs utilisation) is the fraction of the hardware's peak that the model's own FLOPs reach:

    mfu = tokens_per_second · flops_per_token / peak_flops

Work the model does not need (recomputation, padding) does not count, so for one model on one machine a higher
MFU is always a faster run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

# Dense (no 2:4 sparsity) bf16/fp16 tensor-core peaks, in FLOP/s, from NVIDIA's datasheets: "NVIDIA A100 Tensor
# Core GPU" (312 TFLOPS bf16; the 624 quoted beside it is with sparsity), "NVIDIA H100 Tensor Core GPU" (SXM 1,979
# and PCIe 1,513 TFLOPS bf16 *with sparsity*, so 989 and 756 dense), "NVIDIA H200 Tensor Core GPU" (same compute
# as H100 SXM, more and faster memory).
PEAK_FLOPS: dict[str, float] = {
    "A100 (bf16)": 312e12,
    "H100 SXM (bf16)": 989e12,
    "H100 PCIe (bf16)": 756e12,
    "H200 (bf16)": 989e12,
}


def flops_per_token(n_params: int, n_layer: int, d_model: int,
                    block_size: int) -> float:
    """Training FLOPs per token: 6 N (forward and backward through the weights)
    + 12 · n_layer · d_model · block_size (attention's Q Kᵀ and A V).

    ``n_params`` is N without the position table (:func:`non_embedding_params`)."""
    return 6.0 * n_params + 12.0 * n_layer * d_model * block_size


def non_embedding_params(model: nn.Module) -> int:
    """N for :func:`flops_per_token`: the distinct parameters of ``model`` less its position table ``wpe``, if any.

    Tied weights are one tensor, counted once (``model.parameters()`` yields each tensor once)."""
    n = sum(p.numel() for p in model.parameters())
    wpe = getattr(model, "wpe", None)
    return n - (wpe.weight.numel() if isinstance(wpe, nn.Embedding) else 0)


def mfu(tokens_per_second: float, flops_per_token: float, peak_flops: float) -> float:
    """Model FLOPs utilisation: the model's FLOP/s (tokens/s × FLOPs per token) as a fraction of ``peak_flops``."""
    if peak_flops <= 0:
        raise ValueError(f"peak_flops must be positive, got {peak_flops}")
    return tokens_per_second * flops_per_token / peak_flops


def _sync(device: torch.device | str) -> None:
    """Wait for the device: CUDA runs kernels asynchronously, so a timer must wait before reading the clock."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def best_seconds(fn, repeats: int = 5, warmup: int = 1, device: torch.device | str = "cpu") -> float:
    """The fastest of ``repeats`` timed calls of ``fn()`` after ``warmup`` untimed ones. The minimum, not the mean:
    other work on the machine only ever adds time, so the fastest run is the closest to the cost itself."""
    for _ in range(warmup):
        fn()
    _sync(device)
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        best = min(best, time.perf_counter() - t0)
    return best


def measured_matmul_flops(n: int = 1024, dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu",
                          repeats: int = 5) -> float:
    """FLOP/s of an n × n by n × n matmul (2 n³ FLOPs), the best of ``repeats``: a practical peak for a device
    that has no datasheet figure, such as a CPU (with however many threads torch uses)."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    return 2.0 * n**3 / best_seconds(lambda: a @ b, repeats=repeats, device=device)


@contextmanager
def autocast(device: torch.device | str, dtype: torch.dtype | None) -> Iterator[None]:
    """``torch.autocast(device.type, dtype)`` around the block, or nothing when ``dtype`` is None or float32."""
    if dtype is None or dtype == torch.float32:
        yield
        return
    with torch.autocast(torch.device(device).type, dtype=dtype):
        yield


def sdpa_backend(device: torch.device | str) -> str:
    """Which kernel ``F.scaled_dot_product_attention`` can choose from on ``device``, in words.

    On a CPU there is one fused CPU kernel (a flash-attention-style loop over blocks of keys) and the math
    fallback; the ``torch.backends.cuda.*_sdp_enabled()`` flags apply to CUDA only. On CUDA the flags say which
    backends are allowed; which one runs also depends on dtype, head size and mask (the profiler names it)."""
    device = torch.device(device)
    if device.type != "cuda":
        return f"{device.type}: the fused CPU kernel (or the math fallback); the CUDA backend flags do not apply"
    b = torch.backends.cuda
    allowed = {"flash": b.flash_sdp_enabled(), "memory-efficient": b.mem_efficient_sdp_enabled(),
               "math": b.math_sdp_enabled()}
    if hasattr(b, "cudnn_sdp_enabled"):
        allowed["cuDNN"] = b.cudnn_sdp_enabled()
    return "cuda: allowed backends " + ", ".join(name for name, on in allowed.items() if on)
