"""Task 3 of exercise 11: grouped-query attention with rotary positions and a KV cache."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ... import llama as _course_llama
from ...grading.checks import Case, Check, Mutant
from ...grading.reproduce import sized
from ..common import NEG_INF, TORCH_ATTENTION, TORCH_ATTENTION_ATTRS, compare_step_and_cache, in_dtype
from ..common import randn as _randn
from .shared import ATTRS, MODULES

_L = _course_llama

ATTN_NAMES = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight")


def rope_tables(positions: torch.Tensor, d_head: int, base: float = 10000.0,
                dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin (n, d_head) of the given positions, as Llama's rotary embedding makes them: frequency i of the
    d_head / 2 is base^(−2i / d_head), and both halves of a row hold the same angles."""
    inv_freq = base ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)
    angles = positions.double()[:, None] * inv_freq[None, :]
    emb = torch.cat([angles, angles], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _rotate(u: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = u.shape[-1] // 2
    return u * cos + torch.cat([-u[..., half:], u[..., :half]], dim=-1) * sin


def _project(x, w, heads):
    B, n, _ = x.shape
    return F.linear(x, w).view(B, n, heads, -1).transpose(1, 2)


def _gqa_ref(x_new, cache, params, n_head, n_kv_head, cos, sin):
    """torch's own attention with its grouped-query option (enable_gqa), the cache holding n_kv_head heads."""
    B, n_new, _ = x_new.shape
    params = {k: v.to(x_new.dtype) for k, v in params.items()}
    q = _rotate(_project(x_new, params["q_proj.weight"], n_head), cos, sin)
    k = _rotate(_project(x_new, params["k_proj.weight"], n_kv_head), cos, sin)
    v = _project(x_new, params["v_proj.weight"], n_kv_head)
    if cache is not None:
        k, v = torch.cat([cache["k"].to(k.dtype), k], dim=2), torch.cat([cache["v"].to(v.dtype), v], dim=2)
    t = k.shape[2] - n_new
    allowed = torch.ones(n_new, t + n_new, dtype=torch.bool, device=x_new.device).tril(diagonal=t)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)
    return F.linear(y.transpose(1, 2).reshape(B, n_new, -1), params["o_proj.weight"]), {"k": k, "v": v}


def _gqa_with(repeat="interleave", cache_repeated=False, rope_keys=True, cache_unrotated=False, mask="end",
              scale="d_head", pairs="halves", rope_values=False):
    def fn(x_new, cache, params, n_head, n_kv_head, cos, sin):
        B, n_new, d = x_new.shape
        d_head = params["q_proj.weight"].shape[0] // n_head
        group = n_head // n_kv_head

        def rot(u):
            if pairs == "interleaved":  # pairs (0, 1), (2, 3), ...: the paper's layout, not Hugging Face's Llama's
                c = cos[..., : d_head // 2].repeat_interleave(2, -1)
                s = sin[..., : d_head // 2].repeat_interleave(2, -1)
                turned = torch.stack([-u[..., 1::2], u[..., 0::2]], dim=-1).flatten(-2)
                return u * c + turned * s
            return _rotate(u, cos, sin)

        q = (x_new @ params["q_proj.weight"].T).view(B, n_new, n_head, d_head).transpose(1, 2)
        k_raw = (x_new @ params["k_proj.weight"].T).view(B, n_new, n_kv_head, d_head).transpose(1, 2)
        v = (x_new @ params["v_proj.weight"].T).view(B, n_new, n_kv_head, d_head).transpose(1, 2)
        q = rot(q)
        k = rot(k_raw) if rope_keys else k_raw
        if rope_values:
            v = rot(v)
        to_cache = k_raw if cache_unrotated else k
        if cache is not None:
            k_all, v_all = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
            stored_k, stored_v = torch.cat([cache["k"], to_cache], dim=2), v_all
        else:
            k_all, v_all, stored_k, stored_v = k, v, to_cache, v
        if repeat == "tile":  # kv 0, kv 1, kv 0, kv 1, ...: query head h reads kv head h % n_kv_head
            k_rep, v_rep = k_all.repeat(1, group, 1, 1), v_all.repeat(1, group, 1, 1)
        else:
            k_rep, v_rep = k_all.repeat_interleave(group, dim=1), v_all.repeat_interleave(group, dim=1)
        n_k = k_rep.shape[2]
        scores = q @ k_rep.transpose(-2, -1) / math.sqrt(d if scale == "d" else d_head)
        allowed = torch.ones(n_new, n_k, dtype=torch.bool, device=x_new.device)
        allowed = allowed.tril() if mask == "start" else allowed.tril(diagonal=n_k - n_new)
        y = torch.softmax(scores.masked_fill(~allowed, NEG_INF), dim=-1) @ v_rep
        y = y.transpose(1, 2).reshape(B, n_new, n_head * d_head) @ params["o_proj.weight"].T
        if cache_repeated:
            stored_k, stored_v = k_rep, v_rep
        return y, {"k": stored_k, "v": stored_v}
    return fn


def _gqa_compare(out, ref) -> str | None:
    return compare_step_and_cache(out, ref, kv_heads=True)


def _gqa_case(B: int, t: int, n_new: int, n_head: int, n_kv_head: int, d_head: int, d: int | None = None,
              scale: float = 1.0, base: float = 10000.0, dtype=torch.float32, seed: int | None = None):
    """A sequence of t + n_new positions: the cache holds the first t (their true, rotated keys and values),
    x_new the rest, with the cos and sin of positions t … t + n_new − 1. ``seed`` fixes the sequence and weights
    (the steps of one generation loop)."""
    d = d or n_head * d_head

    def make(g, device):
        g = torch.Generator().manual_seed(seed) if seed is not None else g
        x = in_dtype(_randn((B, t + n_new, d), g, device, scale), dtype)
        params = {"q_proj.weight": _randn((n_head * d_head, d), g, device, 1 / math.sqrt(d)),
                  "k_proj.weight": _randn((n_kv_head * d_head, d), g, device, 1 / math.sqrt(d)),
                  "v_proj.weight": _randn((n_kv_head * d_head, d), g, device, 1 / math.sqrt(d)),
                  "o_proj.weight": _randn((d, n_head * d_head), g, device, 1 / math.sqrt(n_head * d_head))}
        params = {k: in_dtype(v, dtype) for k, v in params.items()}
        cos, sin = rope_tables(torch.arange(t + n_new), d_head, base, dtype)
        cos, sin = cos.to(device), sin.to(device)
        cache = None
        if t > 0:
            k = _rotate(_project(x[:, :t], params["k_proj.weight"], n_kv_head), cos[:t], sin[:t])
            cache = {"k": k, "v": _project(x[:, :t], params["v_proj.weight"], n_kv_head)}
        return ((x[:, t:].clone(), cache, params, n_head, n_kv_head, cos[t:].clone(), sin[t:].clone()), {})
    return make


def _loop(prompt: int, step: int, seed: int, **sizes):
    """Step ``step`` of a generation loop over one sequence: the prompt with no cache, then one token at a time."""
    t, n_new = (0, prompt) if step == 0 else (prompt + step - 1, 1)
    return _gqa_case(t=t, n_new=n_new, seed=seed, **sizes)


def _gqa_sized(B: int, t: int, n_new: int, n_kv_head: int, group: int, d_head: int, dtype=torch.float32):
    return _gqa_case(B, t, n_new, n_kv_head * group, n_kv_head, d_head, dtype=dtype)


SHRINK = {"B": 1, "t": 0, "n_new": 1, "n_kv_head": 1, "group": 1, "d_head": 2}


def _even_head(p: dict) -> dict | None:
    """RoPE turns pairs of dimensions: a smaller version keeps an even head size."""
    return p if p["d_head"] % 2 == 0 else None


def _cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [sized("the prompt: no cache, 4 new positions, 4 query heads sharing 2 key/value heads",
                      _gqa_sized, B=2, t=0, n_new=4, n_kv_head=2, group=2, d_head=4, floors=SHRINK, fit=_even_head),
                sized("one new token after 5 cached positions, 6 query heads, 2 key/value heads", _gqa_sized, B=2,
                      t=5, n_new=1, n_kv_head=2, group=3, d_head=4, floors=SHRINK, fit=_even_head),
                sized("3 new tokens after 4 cached positions, 4 query heads, 1 key/value head (multi-query)",
                      _gqa_sized, B=1, t=4, n_new=3, n_kv_head=1, group=4, d_head=6, floors=SHRINK, fit=_even_head),
                sized("float64, 2 new after 3 cached, 4 heads sharing 2", _gqa_sized, B=2, t=3, n_new=2, n_kv_head=2,
                      group=2, d_head=4, dtype=torch.float64, floors=SHRINK, fit=_even_head),
                *[Case(f"a generation loop, step {s}: " + ("the prompt of 3 tokens, no cache" if s == 0 else
                                                          f"one new token, the cache holding {2 + s} positions"),
                       _loop(3, s, 11301, B=2, n_head=4, n_kv_head=2, d_head=4)) for s in range(4)]]
    return [Case("a batch of one, no cache, one token", _gqa_case(1, 0, 1, 4, 2, 4)),
            Case("every head its own key/value head (n_kv_head = n_head: GPT-2's attention)",
                 _gqa_case(2, 3, 2, 4, 4, 4)),
            Case("8 query heads in 4 groups, 2 new after 6", _gqa_case(2, 6, 2, 8, 4, 4)),
            Case("12 query heads, 3 key/value heads, no cache, 7 new", _gqa_case(2, 0, 7, 12, 3, 2)),
            Case("d_model larger than n_head · d_head", _gqa_case(2, 4, 3, 4, 2, 4, d=24)),
            Case("positions far out (a cache of 60), RoPE base 500000 as Llama 3", _gqa_case(1, 60, 2, 4, 2, 8,
                                                                                              base=500000.0)),
            Case("float64, 4 new after 5", _gqa_case(2, 5, 4, 6, 2, 4, dtype=torch.float64)),
            Case("large inputs (std 10), 1 new after 9", _gqa_case(2, 9, 1, 4, 2, 4, scale=10.0)),
            *[Case(f"a generation loop, step {s}", _loop(4, s, 11353, B=3, n_head=6, n_kv_head=3, d_head=4))
              for s in range(5)]]


GQA_ATTENTION = Check(
    task="gqa_attention",
    what="n_head query heads share n_kv_head key/value heads (query head h reads key/value head h // (n_head / "
         "n_kv_head)), queries and keys rotated, the new queries attending to the cache and to the new keys up to "
         "themselves; the cache grows by n_new positions of n_kv_head heads",
    reference=_gqa_ref,
    compare=_gqa_compare,
    cases=_cases(hidden=False),
    hidden_cases=_cases(hidden=True),
    mutants=[
        Mutant(_gqa_with(repeat="tile"), "repeated the key/value heads as a whole (kv 0, kv 1, kv 0, kv 1, ...: "
                                         "repeat): each key/value head serves its group of neighbouring query "
                                         "heads, so query head h reads head h // (n_head / n_kv_head): "
                                         "repeat_interleave"),
        Mutant(_gqa_with(cache_repeated=True), "cached the keys and values after repeating them for every query "
                                               "head: the cache holds the n_kv_head heads themselves (that is the "
                                               "memory grouped-query attention saves)"),
        Mutant(_gqa_with(rope_keys=False), "rotated the queries only: RoPE turns the keys too, so that q·k depends "
                                           "on the distance between their positions"),
        Mutant(_gqa_with(cache_unrotated=True), "stored the new keys in the cache before rotating them: the cache "
                                                "keeps rotated keys (the cos and sin of their positions are not "
                                                "given again at the next step)"),
        Mutant(_gqa_with(mask="start"), "aligned the causal mask at the start, torch.ones(n_new, t + n_new).tril(): "
                                        "the new queries are the last n_new positions, so new query i sees keys "
                                        "0 … t + i, .tril(diagonal=t)"),
        Mutant(_gqa_with(scale="d"), "scaled the scores by 1/sqrt(d_model): each head's scores are divided by "
                                     "sqrt(d_head)"),
        Mutant(_gqa_with(pairs="interleaved"), "rotated neighbouring pairs (x[0::2], x[1::2]): Llama's rotation "
                                               "pairs dimension i with i + d_head/2, rotate_half(u) = "
                                               "cat(−u[..., d_head/2:], u[..., :d_head/2])"),
        Mutant(_gqa_with(rope_values=True), "rotated the values too: RoPE turns the queries and the keys only; "
                                            "the values are read as they are"),
    ],
    forbidden=(*TORCH_ATTENTION, _L.GroupedQueryAttention, _L.Block, _L.Llama, _L.repeat_kv),
    forbidden_attrs=(*ATTRS, *TORCH_ATTENTION_ATTRS, "GroupedQueryAttention", "repeat_kv", "LlamaAttention"),
    forbidden_modules=MODULES,
    keep_dtype=True,
)
