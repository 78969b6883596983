"""Exercise 3's toy decoder (a table of log-probabilities), its reference decoders and comparisons."""

from __future__ import annotations

import math
import numbers

import torch

from ...grading.compare import describe_scalar_mismatch, describe_value

COURSE = ("lmbook.seq2seq",)  # the chapter's translator: its decoding is the course's answer
MARGIN = 1e-3  # the smallest gap between two scores a decision of the reference may hinge on


def _table(g, L, V, eos, eos_bias=0.0, first_eos_bias=None) -> torch.Tensor:
    """(L, V, V) random log-probabilities; ``eos_bias`` shifts <eos>'s logits (at step 0 by ``first_eos_bias``)."""
    logits = torch.randn(L, V, V, generator=g) * 2.0
    logits[:, :, eos] += eos_bias
    if first_eos_bias is not None:
        logits[0, :, eos] += first_eos_bias - eos_bias
    return torch.log_softmax(logits, -1)


def _greedy_trace(log_probs, bos, eos, max_len):
    """Greedy decoding in plain Python; also the smallest gap between the best and second-best token."""
    lp = log_probs.tolist()
    y, prev, gap = [], bos, math.inf
    for t in range(max_len):
        row = lp[t][prev]
        order = sorted(range(len(row)), key=lambda v: -row[v])
        gap = min(gap, row[order[0]] - row[order[1]]) if len(row) > 1 else gap
        prev = order[0]
        y.append(prev)
        if prev == eos:
            break
    return y, gap


def greedy_ref(log_probs, bos, eos, max_len):
    return _greedy_trace(log_probs, bos, eos, max_len)[0]


def _beam_trace(log_probs, bos, eos, beam_size, max_len, alpha):
    """Beam search in plain Python: (tokens, normalised score, smallest decisive gap)."""
    lp = log_probs.tolist()
    live: list[tuple[tuple[int, ...], float]] = [((), 0.0)]
    finished: list[tuple[tuple[int, ...], float]] = []
    gap = math.inf
    for t in range(max_len):
        cands = [(s + lpv, toks + (v,)) for toks, s in live for v, lpv in enumerate(lp[t][toks[-1] if toks else bos])]
        cands.sort(key=lambda c: -c[0])
        if len(cands) > beam_size:
            gap = min(gap, cands[beam_size - 1][0] - cands[beam_size][0])
        live = []
        for s, toks in cands[:beam_size]:
            (finished if toks[-1] == eos else live).append((toks, s))
        if not live:
            break
    ranked = sorted(((s / len(toks) ** alpha, toks) for toks, s in finished + live), reverse=True)
    if len(ranked) > 1:
        gap = min(gap, ranked[0][0] - ranked[1][0])
    return list(ranked[0][1]), ranked[0][0], gap


def beam_ref(log_probs, bos, eos, beam_size, max_len, alpha):
    tokens, score, _ = _beam_trace(log_probs, bos, eos, beam_size, max_len, alpha)
    return tokens, score


def _as_tokens(x) -> list[int] | str:
    """A token list from a list/tuple of integers (or integral floats, 0-d tensors) or a 1-D tensor."""
    if isinstance(x, torch.Tensor):
        if x.dim() != 1:
            return f"returned a tensor of shape {tuple(x.shape)}, expected a list of token ids"
        x = x.detach().cpu().tolist()
    if not isinstance(x, tuple | list):
        return f"returned {describe_value(x)}, expected a list of token ids"
    tokens = []
    for v in x:
        if isinstance(v, torch.Tensor) and v.numel() == 1:
            v = v.item()
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or v != int(v):
            return f"returned {list(x)!r}: every token id must be an integer"
        tokens.append(int(v))
    return tokens


def tokens_compare(out, ref) -> str | None:
    tokens = _as_tokens(out)
    if isinstance(tokens, str):
        return tokens
    if tokens != list(ref):
        return f"returned the tokens {tokens}, expected {list(ref)}"
    return None


def beam_compare(out, ref) -> str | None:
    ref_tokens, ref_score = ref
    if not isinstance(out, tuple | list) or len(out) != 2:
        return f"returned {describe_value(out)}, expected a tuple (tokens, score)"
    problem = tokens_compare(out[0], ref_tokens)
    if problem:
        return f"tokens: {problem}"
    problem = describe_scalar_mismatch(out[1], ref_score, rtol=1e-4, atol=1e-5)
    return f"score: {problem}" if problem else None


def decoder_case(V, max_len, bos, eos, *, steps=None, eos_bias=0.0, first_eos_bias=None, beam=None, alpha=1.0,
                  when=None, dtype=torch.float32):
    """A random toy decoder, drawn again until ``when(log_probs)`` holds and no decision is a near-tie: a seeded
    search over up to 5000 random tables for one that shows the property (``dtype``: the table's, as given)."""
    def make(g, device):
        for _ in range(5000):
            log_probs = _table(g, steps or max_len, V, eos, eos_bias, first_eos_bias)
            if _greedy_trace(log_probs, bos, eos, max_len)[1] < MARGIN:
                continue
            if beam is not None and _beam_trace(log_probs, bos, eos, beam, max_len, alpha)[2] < MARGIN:
                continue
            if when is None or when(log_probs):
                break
        else:
            raise RuntimeError("no toy decoder with the required property was found")  # a bug in the case
        log_probs = log_probs.to(device, dtype)
        args = (log_probs, bos, eos, max_len) if beam is None else (log_probs, bos, eos, beam, max_len, alpha)
        return (args, {})
    return make
