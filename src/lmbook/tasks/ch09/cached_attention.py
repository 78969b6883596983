"""Task 4 of exercise 9: attention with a KV cache."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ... import gpt as _course_gpt
from ...grading.checks import Case, Check, Mutant
from ...grading.reproduce import sized
from ..blocks import attention_params
from ..common import NEG_INF, TORCH_ATTENTION, TORCH_ATTENTION_ATTRS, compare_step_and_cache, in_dtype
from ..common import randn as _randn
from .shared import ATTRS, MODULES

_G = _course_gpt




def project_kv(x, params: dict, n_head: int) -> tuple[torch.Tensor, torch.Tensor]:
    """k, v (B, n_head, n, d_head) of the positions x (B, n, d): what a cache holds for them."""
    B, n, d = x.shape
    _, w_k, w_v = params["in_proj_weight"].chunk(3)
    _, b_k, b_v = params["in_proj_bias"].chunk(3)
    return tuple(F.linear(x, w, b).view(B, n, n_head, d // n_head).transpose(1, 2) for w, b in ((w_k, b_k), (w_v, b_v)))


def _sequence(g, device, B: int, t: int, n_new: int, d: int, n_head: int, scale: float, dtype):
    x = in_dtype(_randn((B, t + n_new, d), g, device, scale), dtype)
    params = {k: in_dtype(v, dtype) for k, v in attention_params(g, device, d).items()}
    return x, params


def _cache_of(x_prev, params, n_head):
    if x_prev.shape[1] == 0:
        return None
    k, v = project_kv(x_prev, params, n_head)
    return {"k": k, "v": v}


def _cached_case(B: int, t: int, n_new: int, d: int, n_head: int, scale: float = 1.0, dtype=torch.float32):
    """A sequence of t + n_new positions: the cache holds the first t (their true k and v), x_new the rest."""
    def make(g, device):
        x, params = _sequence(g, device, B, t, n_new, d, n_head, scale, dtype)
        return ((x[:, t:].clone(), _cache_of(x[:, :t], params, n_head), params, n_head), {})
    return make


def _loop_case(prompt: int, step: int, seed: int, B: int = 2, d: int = 8, n_head: int = 2):
    """Step ``step`` of a generation loop over one fixed sequence (drawn from ``seed``, the same at every step):
    step 0 reads the prompt with no cache, step s ≥ 1 one new token with the cache of the prompt and s − 1 tokens."""
    def make(g, device):
        x, params = _sequence(torch.Generator().manual_seed(seed), device, B, prompt + 8, 0, d, n_head, 1.0,
                              torch.float32)
        t, n_new = (0, prompt) if step == 0 else (prompt + step - 1, 1)
        return ((x[:, t:t + n_new].clone(), _cache_of(x[:, :t], params, n_head), params, n_head), {})
    return make


def _cached_ref(x_new, cache, params, n_head):
    B, n_new, d = x_new.shape
    params = {k: v.to(x_new.dtype) for k, v in params.items()}
    w_q, w_k, w_v = params["in_proj_weight"].chunk(3)
    b_q, b_k, b_v = params["in_proj_bias"].chunk(3)
    q, k, v = (F.linear(x_new, w, b).view(B, n_new, n_head, d // n_head).transpose(1, 2)
               for w, b in ((w_q, b_q), (w_k, b_k), (w_v, b_v)))
    if cache is not None:
        k, v = torch.cat([cache["k"].to(k.dtype), k], dim=2), torch.cat([cache["v"].to(v.dtype), v], dim=2)
    t = k.shape[2] - n_new
    allowed = torch.ones(n_new, t + n_new, dtype=torch.bool, device=x_new.device).tril(diagonal=t)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    y = F.linear(y.transpose(1, 2).reshape(B, n_new, d), params["out_proj.weight"], params["out_proj.bias"])
    return y, {"k": k, "v": v}


def _cached_with(order="append_first", extend=True, mask="end", where="append", scale="d_head"):
    def fn(x_new, cache, params, n_head):
        B, n_new, d = x_new.shape
        w_q, w_k, w_v = params["in_proj_weight"].chunk(3)
        b_q, b_k, b_v = params["in_proj_bias"].chunk(3)
        q, k, v = ((x_new @ w.T + b).view(B, n_new, n_head, d // n_head).transpose(1, 2)
                   for w, b in ((w_q, b_q), (w_k, b_k), (w_v, b_v)))
        if cache is None:
            k_all, v_all = k, v
        elif where == "prepend":
            k_all, v_all = torch.cat([k, cache["k"]], dim=2), torch.cat([v, cache["v"]], dim=2)
        else:
            k_all, v_all = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
        # attention after appending, or (the mistake) over the cached keys only, the new ones appended after
        k_att, v_att = (k_all, v_all) if order == "append_first" or cache is None else (cache["k"], cache["v"])
        n_k = k_att.shape[2]
        scores = q @ k_att.transpose(-2, -1) / math.sqrt(d if scale == "d" else d // n_head)
        if mask == "end":
            allowed = torch.ones(n_new, n_k, dtype=torch.bool, device=x_new.device).tril(diagonal=n_k - n_new)
        elif mask == "start":
            allowed = torch.ones(n_new, n_k, dtype=torch.bool, device=x_new.device).tril()
        elif mask == "prefill_only":  # causal when there is no cache, no mask among several new tokens otherwise
            allowed = (torch.ones(n_new, n_k, dtype=torch.bool, device=x_new.device).tril() if cache is None
                       else torch.ones(n_new, n_k, dtype=torch.bool, device=x_new.device))
        else:
            allowed = torch.ones(n_new, n_k, dtype=torch.bool, device=x_new.device)
        if order != "append_first" and cache is not None:
            allowed = torch.ones(n_new, n_k, dtype=torch.bool, device=x_new.device)
        y = torch.softmax(scores.masked_fill(~allowed, NEG_INF), dim=-1) @ v_att
        y = y.transpose(1, 2).reshape(B, n_new, d) @ params["out_proj.weight"].T + params["out_proj.bias"]
        return y, ({"k": k_all, "v": v_all} if extend else cache)
    return fn


def _cached_compare(out, ref) -> str | None:
    return compare_step_and_cache(out, ref)


def _cached_sized(B: int, t: int, n_new: int, n_head: int, d_head: int, dtype=torch.float32):
    return _cached_case(B, t, n_new, n_head * d_head, n_head, dtype=dtype)


SHRINK = {"B": 1, "t": 0, "n_new": 1, "n_head": 1, "d_head": 1}


def _cached_cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [sized("the prompt: no cache, 4 new positions, d=8, n_head=2", _cached_sized, B=2, t=0, n_new=4,
                      n_head=2, d_head=4, floors=SHRINK),
                sized("one new token after 5 cached positions", _cached_sized, B=2, t=5, n_new=1, n_head=2, d_head=4,
                      floors=SHRINK),
                sized("3 new tokens after 4 cached positions (causal among the new ones)", _cached_sized, B=2, t=4,
                      n_new=3, n_head=4, d_head=2, floors=SHRINK),
                sized("float64 inputs, 2 new tokens after 3 cached positions, d=4, n_head=2", _cached_sized, B=2, t=3,
                      n_new=2, n_head=2, d_head=2, dtype=torch.float64, floors=SHRINK),
                *[Case(f"a generation loop over one sequence, step {s}: "
                       + ("the prompt of 3 tokens, no cache" if s == 0 else
                          f"one new token, the cache holding the prompt and {s - 1} generated"),
                       _loop_case(3, s, 9401)) for s in range(4)]]
    return [Case("a batch of one, no cache, one token (the first step)", _cached_case(1, 0, 1, 8, 2)),
            Case("fresh: no cache, 6 new positions", _cached_case(3, 0, 6, 12, 3)),
            Case("one new token after 1 cached position", _cached_case(2, 1, 1, 8, 2)),
            Case("5 new tokens after 3 cached positions", _cached_case(2, 3, 5, 8, 2)),
            Case("2 new tokens after 7 cached positions, n_head=1", _cached_case(2, 7, 2, 6, 1)),
            Case("n_head = d (heads of size 1), 3 new after 2", _cached_case(2, 2, 3, 4, 4)),
            Case("float64, 2 new after 6", _cached_case(2, 6, 2, 8, 2, dtype=torch.float64)),
            Case("large inputs (std 10), 1 new after 9", _cached_case(2, 9, 1, 8, 2, scale=10.0)),
            *[Case(f"a generation loop over one sequence, step {s}: "
                   + ("the prompt of 4 tokens, no cache" if s == 0 else
                      f"one new token, the cache holding the prompt and {s - 1} generated"),
                   _loop_case(4, s, 9453, B=3, d=12, n_head=3)) for s in range(6)]]


CACHED_ATTENTION = Check(
    task="cached_attention",
    what="the new queries attend to the cached keys and to the new ones up to themselves; the cache grows by n_new "
         "positions",
    reference=_cached_ref,
    compare=_cached_compare,
    cases=_cached_cases(hidden=False),
    hidden_cases=_cached_cases(hidden=True),
    mutants=[
        Mutant(_cached_with(order="attend_first"), "attended to the cached positions only and appended the new k, v "
                                                   "afterwards: a new token must see itself too (and the new tokens "
                                                   "before it), so append first, then attend"),
        Mutant(_cached_with(extend=False), "returned the cache as it came in: return it with the new positions' k "
                                           "and v appended (dim 2), t + n_new positions, for the next step"),
        Mutant(_cached_with(mask="start"), "aligned the causal mask at the start, torch.ones(n_new, t + n_new)"
                                           ".tril(): the new queries are the last n_new positions, so new query i "
                                           "sees keys 0 … t + i, .tril(diagonal=t)"),
        Mutant(_cached_with(where="prepend"), "put the new k, v before the cached ones: they come after, "
                                              "torch.cat([cache['k'], k_new], dim=2)"),
        Mutant(_cached_with(mask="prefill_only"), "left out the mask among several new tokens when there is a "
                                                  "cache: new query i must not see the new tokens after it "
                                                  "(keys 0 … t + i)"),
        Mutant(_cached_with(scale="d"), "scaled the scores by 1/sqrt(d_model): each head's scores are divided by "
                                        "sqrt(d_head)"),
    ],
    forbidden=(*TORCH_ATTENTION, _G.CausalSelfAttention, _G.KVCache, _G.Block, _G.GPT),
    forbidden_attrs=(*ATTRS, *TORCH_ATTENTION_ATTRS, "CausalSelfAttention", "KVCache"),
    forbidden_modules=MODULES,
    keep_dtype=True,
)
