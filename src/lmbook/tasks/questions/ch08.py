"""Thinking questions of exercise 8 (the Transformer): count, predict, derive.

Each answer is a small function of the configuration, so that the hidden cases, on other configurations,
cannot be answered by copying a number. The references are the closed forms; the mutants are the answers
a student reaches with one step wrong.

* ``block_parameters(d_model, d_ff, kind)``: the weights of one block as chapter 8 builds it (attention
  with biases: W_q, W_k, W_v, W_o, 4 d² + 4 d; the FFN, 2 d d_ff + d_ff + d; a LayerNorm's gain and bias,
  2 d each). An encoder block has one attention and two LayerNorms; a decoder block two attentions
  (self and cross) and three LayerNorms.
* ``block_flops(n, d_model, d_ff)``: the floating-point operations of one encoder block's forward pass on
  n positions, counting the matrix products only, 2 per multiply-add: the four projections 8 n d², the
  scores Q Kᵀ and the weighted sum A V 2 n² d each, the FFN 4 n d d_ff. The heads do not change it.
* ``doubling_cost(n, d_model, d_ff)``: block_flops(2n) / block_flops(n) = 2 (2d + 2n + d_ff) / (2d + n +
  d_ff): between 2 (short sequences, where the projections and the FFN dominate) and 4 (long ones).
* ``smoothed_loss_floor(V, eps)``: the lowest cross-entropy against the smoothed target
  q = (1 − ε) one_hot(y) + ε/V that any predicted distribution reaches: the entropy of q, reached by p = q.
"""

from __future__ import annotations

import math

from ...grading.checks import Case, Check, Mutant
from ...grading.compare import describe_scalar_mismatch
from .. import earlier
from ..common import compare_whole_number


def _args(*args, **kwargs):
    def make(g, device):
        return (args, kwargs)
    return make


def _number_compare(out, ref) -> str | None:
    return describe_scalar_mismatch(out, ref, rtol=1e-6, atol=1e-9, accept=("number", "tensor"))


# ----------------------------------------------------------------------------- Question 1: a block's parameters


def _attention(d: int) -> int:
    return 4 * d * d + 4 * d


def _ffn(d: int, d_ff: int) -> int:
    return 2 * d * d_ff + d_ff + d


def _params_ref(d_model: int, d_ff: int, kind: str) -> int:
    if kind == "encoder":
        return _attention(d_model) + _ffn(d_model, d_ff) + 2 * 2 * d_model
    if kind == "decoder":
        return 2 * _attention(d_model) + _ffn(d_model, d_ff) + 3 * 2 * d_model
    raise ValueError(f"kind must be 'encoder' or 'decoder', got {kind!r}")


def _params_with(mistake: str):
    def fn(d_model, d_ff, kind):
        d, n_att, n_ln = d_model, (1 if kind == "encoder" else 2), (2 if kind == "encoder" else 3)
        att, ffn, ln = _attention(d), _ffn(d, d_ff), 2 * d
        if mistake == "no_biases":
            att, ffn = 4 * d * d, 2 * d * d_ff
        elif mistake == "gain_only":
            ln = d
        elif mistake == "no_norms":
            ln = 0
        elif mistake == "no_out_proj":
            att = 3 * d * d + 3 * d
        elif mistake == "d_ff_4d":
            ffn = _ffn(d, 4 * d)
        elif mistake == "one_attention":
            n_att = 1
        elif mistake == "two_norms":
            n_ln = 2
        return n_att * att + ffn + n_ln * ln
    return fn


def _params_cases(configs) -> list[Case]:
    return [Case(f"{kind} block, d_model = {d}, d_ff = {f}", _args(d, f, kind))
            for d, f in configs for kind in ("encoder", "decoder")]


BLOCK_PARAMETERS = Check(
    task="block_parameters",
    what="attention 4d² + 4d, FFN 2·d·d_ff + d_ff + d, LayerNorm 2d: encoder 1 attention + 2 norms, decoder "
         "2 attentions + 3 norms",
    reference=_params_ref,
    compare=compare_whole_number("parameters"),
    cases=_params_cases([(64, 256), (512, 2048)]),
    hidden_cases=_params_cases([(8, 20), (768, 3072), (100, 50), (1, 1)]),
    mutants=[
        Mutant(_params_with("no_biases"), "left out the biases: each of W_q, W_k, W_v, W_o and the FFN's two "
                                          "layers has one, as nn.Linear does by default"),
        Mutant(_params_with("gain_only"), "counted one vector per LayerNorm: it has a gain γ and a bias β, "
                                          "d_model each"),
        Mutant(_params_with("no_norms"), "left out the LayerNorms: each holds a gain and a bias"),
        Mutant(_params_with("no_out_proj"), "counted three maps in attention: W_q, W_k, W_v and the output "
                                            "projection W_o are four"),
        Mutant(_params_with("d_ff_4d"), "took d_ff as 4 d_model: the FFN's width is the d_ff given"),
        Mutant(_params_with("one_attention"), "gave the decoder block one attention: it has masked "
                                              "self-attention and cross-attention, each with its own four maps"),
        Mutant(_params_with("two_norms"), "gave the decoder block two LayerNorms: each of its three sub-layers "
                                          "has its own Add & Norm"),
    ],
)


# ----------------------------------------------------------------------------- Question 2: a block's FLOPs


def _flops_ref(n: int, d_model: int, d_ff: int) -> int:
    d = d_model
    return 8 * n * d * d + 4 * n * n * d + 4 * n * d * d_ff


def _flops_with(mistake: str):
    def fn(n, d_model, d_ff):
        d = d_model
        proj, scores, ffn = 8 * n * d * d, 4 * n * n * d, 4 * n * d * d_ff
        if mistake == "multiply_adds":
            return (proj + scores + ffn) // 2
        if mistake == "no_scores":
            return proj + ffn
        if mistake == "one_n2":
            return proj + scores // 2 + ffn
        if mistake == "no_out_proj":
            return 6 * n * d * d + scores + ffn
        if mistake == "d_ff_4d":
            return proj + scores + 16 * n * d * d
        if mistake == "ffn_one_layer":
            return proj + scores + ffn // 2
        raise ValueError(mistake)
    return fn


def _flops_cases(configs) -> list[Case]:
    return [Case(f"n = {n}, d_model = {d}, d_ff = {f}", _args(n, d, f)) for n, d, f in configs]


BLOCK_FLOPS = Check(
    task="block_flops",
    what="8 n d² (W_q, W_k, W_v, W_o) + 4 n² d (Q Kᵀ and A V) + 4 n d d_ff (the FFN), 2 FLOPs per multiply-add",
    reference=_flops_ref,
    compare=compare_whole_number("FLOPs"),
    cases=_flops_cases([(16, 64, 256), (128, 512, 2048)]),
    hidden_cases=_flops_cases([(1, 8, 32), (1024, 768, 3072), (4096, 64, 100), (7, 30, 11)]),
    mutants=[
        Mutant(_flops_with("multiply_adds"), "counted multiply-adds: a product of an (a, b) and a (b, c) matrix "
                                             "is a·b·c multiply-adds, 2·a·b·c FLOPs"),
        Mutant(_flops_with("no_scores"), "left out the attention itself: Q Kᵀ and the weighted sum A V are two "
                                         "products of n × n × d multiply-adds each"),
        Mutant(_flops_with("one_n2"), "counted one of the two n² products: the scores Q Kᵀ and the weighted sum "
                                      "A V each cost n² d multiply-adds"),
        Mutant(_flops_with("no_out_proj"), "left out the output projection W_o: attention has four d × d maps"),
        Mutant(_flops_with("d_ff_4d"), "took d_ff as 4 d_model: the FFN's width is the d_ff given"),
        Mutant(_flops_with("ffn_one_layer"), "counted one of the FFN's two layers: W_1 (d × d_ff) and W_2 "
                                             "(d_ff × d) cost the same"),
    ],
)


# ----------------------------------------------------------------------------- Question 3: doubling the context


def _doubling_ref(n: int, d_model: int, d_ff: int) -> float:
    return _flops_ref(2 * n, d_model, d_ff) / _flops_ref(n, d_model, d_ff)


def _doubling_with(mistake: str):
    def fn(n, d_model, d_ff):
        if mistake == "linear":
            return 2.0
        if mistake == "quadratic":
            return 4.0
        if mistake == "only_attention_grows":  # the projections and the FFN counted once, at n
            d = d_model
            grown = 8 * n * d * d + 4 * (2 * n) ** 2 * d + 4 * n * d * d_ff
            return grown / _flops_ref(n, d_model, d_ff)
        if mistake == "attention_only":  # the ratio of the n² terms alone
            return 4.0 if n else 0.0
        if mistake == "inverted":
            return _flops_ref(n, d_model, d_ff) / _flops_ref(2 * n, d_model, d_ff)
        raise ValueError(mistake)
    return fn


DOUBLING_COST = Check(
    task="doubling_cost",
    what="block_flops(2n) / block_flops(n): between 2 (the projections and FFN dominate) and 4 (attention does)",
    reference=_doubling_ref,
    builds_on=(("block_flops", earlier.block_flops),),
    compare=_number_compare,
    cases=[Case("n = 128, d_model = 512, d_ff = 2048", _args(128, 512, 2048)),
           Case("n = 1024, d_model = 64, d_ff = 256", _args(1024, 64, 256))],
    hidden_cases=[Case("GPT-2 small, n = 1024, d_model = 768, d_ff = 3072", _args(1024, 768, 3072)),
                  Case("one position, n = 1, d_model = 64, d_ff = 256", _args(1, 64, 256)),
                  Case("very long, n = 100000, d_model = 128, d_ff = 512", _args(100_000, 128, 512)),
                  Case("n = 6 d_model, d_model = 100, d_ff = 400", _args(600, 100, 400))],
    mutants=[
        Mutant(_doubling_with("linear"), "said 2: the projections and the FFN double with n, but the attention "
                                         "scores Q Kᵀ and the sum A V grow with n²"),
        Mutant(_doubling_with("quadratic"), "said 4: only the attention products grow with n²; the projections "
                                            "and the FFN, most of the cost for short sequences, double"),
        Mutant(_doubling_with("only_attention_grows"), "let only attention grow: the projections and the FFN "
                                                       "run at every position, so they double too"),
        Mutant(_doubling_with("inverted"), "divided the cost at n by the cost at 2n: doubling the context "
                                           "costs more, a ratio above 1"),
    ],
)


# ----------------------------------------------------------------------------- Question 4: label smoothing's floor


def _xlogx(x: float) -> float:
    return x * math.log(x) if x > 0 else 0.0


def _floor_ref(V: int, eps: float) -> float:
    right, other = 1 - eps + eps / V, eps / V
    return -_xlogx(right) - (V - 1) * _xlogx(other)


def _floor_with(mistake: str):
    def fn(V, eps):
        if mistake == "zero":
            return 0.0
        if mistake == "right_word_only":  # the loss of the right word alone, -ln q_y
            return -math.log(1 - eps + eps / V)
        if mistake == "spread_over_wrong":  # ε over the V - 1 wrong words, 1 - ε on the right one
            return -_xlogx(1 - eps) - (V - 1) * _xlogx(eps / (V - 1))
        if mistake == "bits":
            return _floor_ref(V, eps) / math.log(2)
        if mistake == "eps_log_v":
            return eps * math.log(V)
        raise ValueError(mistake)
    return fn


SMOOTHED_LOSS_FLOOR = Check(
    task="smoothed_loss_floor",
    what="the entropy of q = (1 − ε) one_hot(y) + ε/V, in nats: the lowest smoothed loss, reached when p = q",
    reference=_floor_ref,
    compare=_number_compare,
    cases=[Case("V = 10, ε = 0.1", _args(10, 0.1)), Case("V = 37000, ε = 0.1 (the paper's)", _args(37000, 0.1))],
    hidden_cases=[Case("no smoothing, V = 50, ε = 0", _args(50, 0.0)),
                  Case("two words, V = 2, ε = 0.2", _args(2, 0.2)),
                  Case("all smoothing, V = 8, ε = 1 (the uniform target)", _args(8, 1.0)),
                  Case("V = 60, ε = 0.3", _args(60, 0.3))],
    mutants=[
        Mutant(_floor_with("zero"), "returned 0: a perfect model reaches 0 only against a one-hot target; "
                                    "against the smoothed target the best it can do is to predict that target"),
        Mutant(_floor_with("right_word_only"), "returned −ln of the right word's target probability: the "
                                               "smoothed loss also charges the ε/V of every other word"),
        Mutant(_floor_with("spread_over_wrong"), "spread ε over the V − 1 wrong words only: here (as in "
                                                 "F.cross_entropy) the ε/V go to all V words, the right one "
                                                 "included"),
        Mutant(_floor_with("bits"), "gave the answer in bits: the loss uses natural logarithms, nats"),
        Mutant(_floor_with("eps_log_v"), "used ε ln V: that is the uniform part's cross-entropy alone, without "
                                         "the right word's term"),
    ],
)

QUESTIONS = [BLOCK_PARAMETERS, BLOCK_FLOPS, DOUBLING_COST, SMOOTHED_LOSS_FLOOR]
