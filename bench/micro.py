"""Small measurements that need a process of their own (not a test), printed as JSON; bench/run.py calls them.

    python bench/micro.py kv --lengths 64 256 1024 --repeats 5
    python bench/micro.py attention --impl course --n 2048

``kv``: chapter 9's generation with and without a KV cache, timed single-threaded (each generation step is a
few small matrix products: with several threads, the time is mostly the threads waiting for each other and
for whatever else the machine runs). The two are timed alternately, ``repeats`` times each.

``attention``: one call of causal attention at length n, in a fresh process: the bytes its operators allocate
(``lmbook.profiling.allocated_bytes``, what the GPU appendix reports) and how far it raises the process's peak
resident memory (what the machine has to have). The second counts the fused kernel's scratch memory and the
allocator's rounding, which the first does not see.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

# Chapter 9's model for the KV cache (book/ch09_gpt.md): 4 blocks of d = 256, room for 1,088 positions, and the
# vocabulary of its tokenizer (256 bytes + 2,000 merges + one special token). The weights are random: the time
# does not depend on them.
KV_CONFIG = {"vocab_size": 256 + 2000 + 1, "block_size": 1088, "n_layer": 4, "n_head": 4, "d_model": 256}


def kv(lengths: list[int], repeats: int) -> dict:
    from lmbook.gpt import GPT, GPTConfig, generate

    torch.manual_seed(0)
    model = GPT(GPTConfig(**KV_CONFIG)).eval()
    start = torch.zeros(1, 1, dtype=torch.long)
    out = {"threads": torch.get_num_threads(), "config": KV_CONFIG, "repeats": repeats, "lengths": {}}
    for use_cache in (True, False):  # warm-up: the first call of each path pays for allocations
        generate(model, start, 8, use_cache=use_cache, greedy=True)
    for n in lengths:
        seconds: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(repeats):
            for use_cache in (True, False):  # alternately, so that a slow spell of the machine hits both
                t0 = time.perf_counter()
                generate(model, start, n, use_cache=use_cache, greedy=True)
                seconds[use_cache].append(time.perf_counter() - t0)
        ratios = [b / a for a, b in zip(seconds[True], seconds[False], strict=True)]
        out["lengths"][str(n)] = {"cached_s": seconds[True], "uncached_s": seconds[False], "speedup": ratios}
    return out


def _vm(field: str) -> int:
    """A line of /proc/self/status, in bytes (VmRSS: resident now; VmHWM: the peak since the last reset)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def attention(impl: str, n: int) -> dict:
    import torch.nn.functional as F

    from lmbook.profiling import allocated_bytes
    from lmbook.self_attention import causal_mask, scaled_dot_product_attention

    # The GPU appendix's shapes: one sequence of 4 heads of size 32, float32.
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 4, n, 32, generator=g) for _ in range(3))
    if impl == "course":
        def fn():
            return scaled_dot_product_attention(q, k, v, causal_mask(n))
    else:
        def fn():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    # The peak first, in this fresh process: the call under the allocation counter would raise it first.
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current resident size (Linux 4.0+)
    before = _vm("VmRSS")
    out = fn()
    peak = _vm("VmHWM") - before
    del out
    return {"impl": impl, "n": n, "threads": torch.get_num_threads(), "peak_rss_increase_bytes": peak,
            "allocated_bytes": allocated_bytes(fn)}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    k = sub.add_parser("kv")
    k.add_argument("--lengths", type=int, nargs="+", default=[64, 256, 1024])
    k.add_argument("--repeats", type=int, default=5)
    k.add_argument("--threads", type=int, default=1)
    a = sub.add_parser("attention")
    a.add_argument("--impl", choices=["course", "sdpa"], required=True)
    a.add_argument("--n", type=int, default=2048)
    args = ap.parse_args(argv)
    if args.what == "kv":
        torch.set_num_threads(args.threads)
        result = kv(args.lengths, args.repeats)
    else:
        result = attention(args.impl, args.n)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
