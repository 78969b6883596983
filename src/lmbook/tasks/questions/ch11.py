"""Exercise 11's thinking questions: count a Llama's parameters, predict how much context a grouped-query cache
holds, derive how hard DPO pushes a pair.

Each answer is a small function of the configuration, graded like a code task on other configurations (hidden
cases), so an answer cannot be copied as a number. The references are the derivations written out; the tests
check them against transformers' ``LlamaForCausalLM`` built on the meta device (every weight counted), against
lmbook's measured cache, and against autograd's derivative of the DPO loss.

- ``llama_parameters``: the parameters of a Llama-style decoder from its config.
- ``max_cached_tokens``: how many positions a KV cache of grouped-query attention holds in a memory budget.
- ``dpo_margin_gradient``: the derivative of one pair's DPO loss with respect to its margin.
"""

from __future__ import annotations

import math

import torch

from ...grading.checks import Case, Check, Mutant
from ...grading.compare import describe_scalar_mismatch
from ..ch11.shared import ATTRS, MODULES
from ..common import compare_whole_number


def _fixed(*args):
    def make(g, device):
        return (tuple(args), {})
    return make




def _draw(g, lo: int, hi: int) -> int:
    return int(torch.randint(lo, hi + 1, (1,), generator=g))


# ----------------------------------------------------------------------------- Q1: llama_parameters


def _llama_ref(config: dict) -> int:
    V, L, d = config["vocab_size"], config["n_layer"], config["d_model"]
    d_head = d // config["n_head"]
    attn = 2 * d * config["n_head"] * d_head + 2 * d * config["n_kv_head"] * d_head  # W_q, W_o; W_k, W_v
    mlp = 3 * d * config["d_ff"]  # gate, up, down
    block = attn + mlp + 2 * d  # two RMSNorm gains
    output = 0 if config["tie_weights"] else V * d
    return V * d + L * block + d + output  # embeddings, blocks, final RMSNorm, output layer


def _llama_with(mistake: str):
    def fn(config):
        c = dict(config)
        V, L, d = c["vocab_size"], c["n_layer"], c["d_model"]
        full = _llama_ref(c)
        if mistake == "kv_per_head":
            return _llama_ref({**c, "n_kv_head": c["n_head"]})
        if mistake == "two_matrices":
            return full - L * d * c["d_ff"]
        if mistake == "no_final_norm":
            return full - d
        if mistake == "layernorm":  # a gain and a bias per norm
            return full + (2 * L + 1) * d
        if mistake == "biases":  # as GPT-2's linear layers have
            d_head = d // c["n_head"]
            return full + L * ((c["n_head"] + 2 * c["n_kv_head"]) * d_head + d + 2 * c["d_ff"] + d)
        if mistake == "tied_twice":
            return full + (V * d if c["tie_weights"] else 0)
        raise ValueError(mistake)
    return fn


def _config(V, L, d, n_head, n_kv_head, d_ff, tie):
    return {"vocab_size": V, "n_layer": L, "d_model": d, "n_head": n_head, "n_kv_head": n_kv_head, "d_ff": d_ff,
            "tie_weights": tie}


def _llama_random(g, device):
    n_kv = _draw(g, 1, 4)
    n_head = n_kv * _draw(g, 1, 4)
    d = n_head * 2 * _draw(g, 2, 16)
    return ((_config(_draw(g, 50, 50000), _draw(g, 1, 12), d, n_head, n_kv, _draw(g, 1, 4 * d), bool(_draw(g, 0, 1))),),
            {})


LLAMA_PARAMETERS = Check(
    task="llama_parameters",
    what="V·d + L·(2·d·n_head·d_head + 2·d·n_kv_head·d_head + 3·d·d_ff + 2d) + d (+ V·d untied)",
    reference=_llama_ref,
    compare=compare_whole_number("parameters"),
    cases=[Case("Llama 2 7B: 32,000 tokens, 32 layers, d = 4,096, 32 heads, 32 key/value heads, d_ff = 11,008",
                _fixed(_config(32000, 32, 4096, 32, 32, 11008, False))),
           Case("a small tied model: 100 tokens, 2 layers, d = 16, 4 heads sharing 2, d_ff = 48",
                _fixed(_config(100, 2, 16, 4, 2, 48, True)))],
    hidden_cases=[Case("Llama 2 70B: 80 layers, d = 8,192, 64 heads, 8 key/value heads, d_ff = 28,672",
                       _fixed(_config(32000, 80, 8192, 64, 8, 28672, False))),
                  Case("multi-query: one key/value head", _fixed(_config(500, 3, 64, 8, 1, 160, False))),
                  Case("one layer, one head", _fixed(_config(10, 1, 4, 1, 1, 8, True))),
                  Case("a fresh config", _llama_random),
                  Case("another fresh config", _llama_random)],
    mutants=[
        Mutant(_llama_with("kv_per_head"), "gave W_k and W_v n_head heads: they have n_kv_head heads of d_head "
                                           "each, (n_kv_head · d_head) × d, smaller than W_q"),
        Mutant(_llama_with("two_matrices"), "counted two matrices in the feed-forward network: SwiGLU has three, "
                                            "W_gate and W_up (d → d_ff) and W_down (d_ff → d)"),
        Mutant(_llama_with("no_final_norm"), "left out the final RMSNorm before the output layer: its gain has d "
                                             "numbers"),
        Mutant(_llama_with("layernorm"), "gave each RMSNorm a bias: RMSNorm has a gain only, d numbers"),
        Mutant(_llama_with("biases"), "counted biases in the linear layers: a Llama has none"),
        Mutant(_llama_with("tied_twice"), "counted the output layer when it is tied: a tied output layer is the "
                                          "embedding table itself, counted once"),
    ],
    forbidden_modules=MODULES,
    forbidden_attrs=(*ATTRS, "count_parameters"),
)


# ----------------------------------------------------------------------------- Q2: max_cached_tokens


def _tokens_ref(memory_bytes, n_layer, n_head, n_kv_head, d_head, bytes_per_value) -> int:
    # a key and a value per layer and key/value head: the query heads share them and add nothing
    return memory_bytes // (2 * n_layer * n_kv_head * d_head * bytes_per_value)


def _tokens_with(mistake: str):
    def fn(memory_bytes, n_layer, n_head, n_kv_head, d_head, bytes_per_value):
        M, L, H, K, dh, b = memory_bytes, n_layer, n_head, n_kv_head, d_head, bytes_per_value
        if mistake == "all_heads":
            return M // (2 * L * H * dh * b)
        if mistake == "keys_only":
            return M // (L * K * dh * b)
        if mistake == "one_layer":
            return M // (2 * K * dh * b)
        if mistake == "rounded":
            return round(M / (2 * L * K * dh * b))
        if mistake == "queries_too":  # the queries cached as well
            return M // ((2 * K + H) * L * dh * b)
        raise ValueError(mistake)
    return fn


def _tokens_random(g, device):
    n_kv = _draw(g, 1, 8)
    return ((_draw(g, 10**6, 10**11), _draw(g, 1, 96), n_kv * _draw(g, 1, 8), n_kv, 16 * _draw(g, 1, 8),
             (1, 2, 4)[_draw(g, 0, 2)]), {})


MAX_CACHED_TOKENS = Check(
    task="max_cached_tokens",
    what="⌊memory_bytes / (2 · n_layer · n_kv_head · d_head · bytes_per_value)⌋ positions",
    reference=_tokens_ref,
    compare=compare_whole_number("positions"),
    cases=[Case("Llama 2 70B (80 layers, 64 query heads, 8 key/value heads of 128) in 40 GB of float16",
                _fixed(40 * 10**9, 80, 64, 8, 128, 2)),
           Case("4 layers, 8 query heads sharing 2 key/value heads of 16, 1 MB of float32",
                _fixed(10**6, 4, 8, 2, 16, 4))],
    hidden_cases=[Case("GPT-2 style (n_kv_head = n_head): 12 layers, 12 heads of 64, 1 GB of float32",
                       _fixed(10**9, 12, 12, 12, 64, 4)),
                  Case("multi-query (one key/value head), 24 GB of bfloat16", _fixed(24 * 10**9, 32, 32, 1, 128, 2)),
                  Case("a budget that just holds one position", _fixed(2 * 2 * 4 * 8 * 1, 2, 8, 4, 8, 1)),
                  Case("a budget one byte short of two positions", _fixed(2 * (2 * 3 * 2 * 16 * 2) - 1, 3, 4, 2, 16,
                                                                          2)),
                  Case("fresh sizes", _tokens_random),
                  Case("more fresh sizes", _tokens_random)],
    mutants=[
        Mutant(_tokens_with("all_heads"), "cached every query head's keys and values: with grouped-query attention "
                                          "only the n_kv_head key/value heads are cached, shared by their groups"),
        Mutant(_tokens_with("keys_only"), "counted the keys only: the cache holds the values as well, a factor "
                                          "of 2"),
        Mutant(_tokens_with("one_layer"), "counted one layer: each of the n_layer layers keeps its own keys and "
                                          "values"),
        Mutant(_tokens_with("rounded"), "rounded to the nearest whole position: a position that does not fit "
                                        "whole is not cached, so round down (//)"),
        Mutant(_tokens_with("queries_too"), "cached the queries too: a query is used once, at its own step; only "
                                            "keys and values are read again"),
    ],
    forbidden_modules=MODULES,
    forbidden_attrs=(*ATTRS, "kv_cache_bytes"),
)


# ----------------------------------------------------------------------------- Q3: dpo_margin_gradient


def _grad_ref(margin, beta) -> float:
    # d/dΔ [−ln σ(β Δ)] = −β (1 − σ(β Δ)) = −β σ(−β Δ)
    z = beta * margin
    s = 1.0 / (1.0 + math.exp(z)) if z > -700 else 1.0  # σ(−z)
    return -beta * s


def _grad_with(mistake: str):
    def fn(margin, beta):
        z = beta * margin
        sig = 1.0 / (1.0 + math.exp(-z))  # σ(z)
        if mistake == "sigma_plus":
            return -beta * sig
        if mistake == "no_beta":
            return -(1.0 - sig)
        if mistake == "positive":
            return beta * (1.0 - sig)
        if mistake == "beta_outside":
            return -beta * (1.0 - 1.0 / (1.0 + math.exp(-margin)))
        if mistake == "no_log":  # the derivative of −σ(β Δ)
            return -beta * sig * (1.0 - sig)
        raise ValueError(mistake)
    return fn


def _grad_random(g, device):
    return ((round(float(torch.randn(1, generator=g)) * 8, 4), round(float(torch.rand(1, generator=g)) * 2, 4)), {})


DPO_MARGIN_GRADIENT = Check(
    task="dpo_margin_gradient",
    what="d/dΔ [−ln σ(β Δ)] = −β σ(−β Δ) = −β / (1 + e^(β Δ))",
    reference=_grad_ref,
    compare=lambda out, ref: describe_scalar_mismatch(out, ref, rtol=1e-9, atol=1e-12, accept=("number", "tensor")),
    cases=[Case("a pair the policy has not moved (Δ = 0), β = 0.1", _fixed(0.0, 0.1)),
           Case("a pair already ranked right by 20 nats, β = 0.1", _fixed(20.0, 0.1)),
           Case("a pair ranked wrong by 5 nats, β = 0.5", _fixed(-5.0, 0.5))],
    hidden_cases=[Case("β = 1, Δ = 3", _fixed(3.0, 1.0)),
                  Case("ranked wrong by 40 nats, β = 1", _fixed(-40.0, 1.0)),
                  Case("ranked right by 40 nats, β = 1", _fixed(40.0, 1.0)),
                  Case("β = 0: no push at all", _fixed(2.0, 0.0)),
                  Case("a fresh pair and β", _grad_random),
                  Case("another fresh pair and β", _grad_random)],
    mutants=[
        Mutant(_grad_with("sigma_plus"), "gave −β σ(β Δ): the push is −β σ(−β Δ), strongest for a pair ranked "
                                         "wrong (Δ < 0) and fading once it is ranked right"),
        Mutant(_grad_with("no_beta"), "left out the factor β of the chain rule: d/dΔ [−ln σ(β Δ)] = −β σ(−β Δ)"),
        Mutant(_grad_with("positive"), "gave the derivative the wrong sign: the loss falls as the margin grows, so "
                                       "its derivative is negative, −β σ(−β Δ)"),
        Mutant(_grad_with("beta_outside"), "left β out of the sigmoid: the loss is −ln σ(β Δ), so the sigmoid "
                                           "reads β Δ, −β σ(−β Δ)"),
        Mutant(_grad_with("no_log"), "differentiated −σ(β Δ), without the logarithm: d/dz [−ln σ(z)] = −(1 − σ(z)) "
                                     "= −σ(−z)"),
    ],
    forbidden_modules=MODULES,
    forbidden_attrs=(*ATTRS, "dpo_loss"),
)

QUESTIONS = [LLAMA_PARAMETERS, MAX_CACHED_TOKENS, DPO_MARGIN_GRADIENT]
