"""Thinking questions of exercise 1 (chapter 1): count the feedforward LM's parameters, derive a
perplexity, Adam's first step and the variance dropout adds, each as a function of its configuration.

The references are the closed forms; each question's mutants are the mistakes a student makes on the
way (a bias forgotten, an arithmetic mean where a geometric one is meant, the bias correction left out).
"""

from __future__ import annotations

import math
import numbers

import torch

from ...ffnn import FeedforwardLM
from ...grading.checks import Case, Check, Mutant
from ...grading.compare import describe_scalar_mismatch, describe_tensor_mismatch, describe_value
from ..common import randn


def exact_int(out, ref) -> str | None:
    """A count: an int (or a one-element integer tensor) equal to the reference. (A reference that is
    not a whole number is a known mistake's answer, compared with the student's as a number.)"""
    if isinstance(ref, float) and not ref.is_integer():
        return number()(out, ref)
    if isinstance(out, torch.Tensor) and out.numel() == 1 and not out.is_floating_point():
        out = out.item()
    if isinstance(out, float) and out.is_integer():
        out = int(out)
    if isinstance(out, bool) or not isinstance(out, numbers.Integral):
        return f"returned {describe_value(out)}, expected a whole number (an int)"
    if int(out) == int(ref):
        return None
    return f"returned {int(out):,}, expected {int(ref):,} ({abs(int(out) - int(ref)):,} too " \
           f"{'few' if out < ref else 'many'})"


def number(rtol: float = 1e-6, atol: float = 1e-12):
    return lambda out, ref: describe_scalar_mismatch(out, ref, rtol=rtol, atol=atol, accept=("number",))


def given(*args):
    """A case whose inputs are the numbers given."""
    return lambda g, device: (tuple(args), {})


# ----------------------------------------------------------------------------- the feedforward LM's parameters

def _ffnn_parameters(V, m, d, H):
    return V * d + H * m * d + H + V * H + V  # E, W, b, U, c


FFNN_PARAMETERS = Check(
    task="ffnn_parameters",
    what="V·d + H·m·d + H + V·H + V: E, W, b, U and c",
    reference=_ffnn_parameters,
    compare=exact_int,
    cases=[Case("V = 47, m = 3, d = 32, H = 128 (the chapter's window-3 model)", given(47, 3, 32, 128)),
           Case("V = 10, m = 1, d = 4, H = 8", given(10, 1, 4, 8))],
    hidden_cases=[Case("V = 20000, m = 4, d = 60, H = 100", given(20000, 4, 60, 100)),
                  Case("the smallest model: V = 2, m = 1, d = 1, H = 1", given(2, 1, 1, 1)),
                  Case("V = 47, m = 8, d = 16, H = 512", given(47, 8, 16, 512)),
                  Case("V = 1000, m = 12, d = 3, H = 7", given(1000, 12, 3, 7)),
                  Case("V = 5, m = 2, d = 10, H = 3", given(5, 2, 10, 3))],
    mutants=[
        Mutant(lambda V, m, d, H: V * d + H * m * d + V * H,
               "left out the biases: b has H entries and c has V"),
        Mutant(lambda V, m, d, H: m * V * d + H * m * d + H + V * H + V,
               "counted one embedding matrix per slot of the window: the m slots share E, V × d counted once"),
        Mutant(lambda V, m, d, H: V * d + H * d + H + V * H + V,
               "gave W the columns of one embedding: it reads z, the concatenation of m embeddings, so W is "
               "H × md"),
        Mutant(lambda V, m, d, H: H * m * d + H + V * H + V,
               "left out the embedding matrix E: its V × d entries are learned like the others"),
        Mutant(lambda V, m, d, H: V * d + H * m * d + H,
               "left out the output layer: U is V × H and c has V entries"),
        Mutant(lambda V, m, d, H: V * d + H * (m + 1) * d + H + V * H + V,
               "counted m + 1 words in the window: it holds the m words before w_t, which is predicted, not read"),
    ],
    forbidden=(FeedforwardLM,),
    forbidden_attrs=("FeedforwardLM",),
)


# ----------------------------------------------------------------------------- perplexity as a geometric mean

def _perplexity_mixed(p, q, f):
    return math.exp(-(f * math.log(p) + (1 - f) * math.log(q)))


PERPLEXITY_MIXED = Check(
    task="perplexity_mixed",
    what="exp(-(f log p + (1 - f) log q)): the geometric mean of 1/p over the positions",
    reference=_perplexity_mixed,
    compare=number(),
    cases=[Case("p = 0.5 at half the positions, q = 0.1 at the rest", given(0.5, 0.1, 0.5)),
           Case("p = 0.9 at 80% of the positions, q = 0.01 at the rest", given(0.9, 0.01, 0.8))],
    hidden_cases=[Case("p = 1 at half the positions, q = 0.25 at the rest", given(1.0, 0.25, 0.5)),
                  Case("p = q = 0.2 everywhere", given(0.2, 0.2, 0.3)),
                  Case("p = 0.05 at 10% of the positions, q = 0.6 at the rest", given(0.05, 0.6, 0.1)),
                  Case("uniform over 47 words everywhere", given(1 / 47, 1 / 47, 1.0)),
                  Case("p = 0.999 at 99% of the positions, q = 0.001 at the rest", given(0.999, 0.001, 0.99)),
                  Case("f = 0: q = 0.25 at every position", given(0.5, 0.25, 0.0))],
    mutants=[
        Mutant(lambda p, q, f: f / p + (1 - f) / q,
               "averaged 1/p over the positions: perplexity is exp of the average of -log p, a geometric mean, "
               "not an arithmetic one"),
        Mutant(lambda p, q, f: 1 / (f * p + (1 - f) * q),
               "took 1 / (the average probability): perplexity averages log-probabilities, not probabilities"),
        Mutant(lambda p, q, f: -(f * math.log(p) + (1 - f) * math.log(q)),
               "returned the cross-entropy: perplexity is its exponential"),
        Mutant(lambda p, q, f: _perplexity_mixed(p, q, 1 - f),
               "gave p the weight 1 - f: the model gives p at a fraction f of the positions"),
        Mutant(lambda p, q, f: 1 / math.sqrt(p * q),
               "weighed p and q equally: the average is over positions, a fraction f of them with p"),
        Mutant(lambda p, q, f: 2 ** (-(f * math.log(p) + (1 - f) * math.log(q))),
               "raised 2 to a cross-entropy in nats: with natural logs, perplexity is exp(cross-entropy)"),
    ],
)


# ----------------------------------------------------------------------------- Adam's first step

def _adam_case(shape, scale=1.0, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, zeros=0, dtype=torch.float32):
    def make(g, device):
        grad = randn(shape, g, device, scale).to(dtype)
        if zeros:
            grad.view(-1)[:zeros] = 0.0
        return ((grad, lr, betas[0], betas[1], eps), {})
    return make


def _adam_first_step(g, lr, beta1, beta2, eps):
    m_hat = (1 - beta1) * g / (1 - beta1)  # m_1 = (1 - β1) g, bias-corrected
    v_hat = (1 - beta2) * g * g / (1 - beta2)
    return -lr * m_hat / (v_hat.sqrt() + eps)


ADAM_FIRST_STEP = Check(
    task="adam_first_step",
    what="θ_1 - θ_0 = -η m̂_1 / (√v̂_1 + ε) = -η g / (|g| + ε)",
    reference=_adam_first_step,
    compare=lambda out, ref: describe_tensor_mismatch(out, ref, rtol=1e-5, atol=1e-12, dim=None),
    cases=[Case("5 gradients, η = 1e-3, the default β1, β2, ε", _adam_case((5,))),
           Case("gradients of size 0.1 and ε = 0.1", _adam_case((6,), scale=0.1, lr=0.01, eps=0.1))],
    hidden_cases=[Case("a (3, 4) gradient, η = 0.1", _adam_case((3, 4), lr=0.1)),
                  Case("tiny gradients (1e-9), ε = 1e-8", _adam_case((5,), scale=1e-9)),
                  Case("huge gradients (1e4)", _adam_case((4,), scale=1e4)),
                  Case("β1 = 0.5, β2 = 0.6, ε = 0.5", _adam_case((5,), betas=(0.5, 0.6), eps=0.5, lr=0.2)),
                  Case("some gradients exactly 0", _adam_case((6,), zeros=2)),
                  Case("float64 gradients", _adam_case((4,), dtype=torch.float64, eps=1e-3))],
    mutants=[
        Mutant(lambda g, lr, b1, b2, eps: -lr * (1 - b1) * g / (((1 - b2) * g * g).sqrt() + eps),
               "left out the bias correction: after one step m_1 = (1 - β1) g and v_1 = (1 - β2) g² are too "
               "small; divide them by 1 - β1 and 1 - β2"),
        Mutant(lambda g, lr, b1, b2, eps: -lr * g / (((1 - b2) * g * g).sqrt() + eps),
               "bias-corrected m but not v: v_1 = (1 - β2) g² is divided by 1 - β2 too"),
        Mutant(lambda g, lr, b1, b2, eps: -lr * g,
               "took SGD's step -η g: Adam divides the average gradient by the root of the average squared "
               "gradient"),
        Mutant(lambda g, lr, b1, b2, eps: lr * g / (g.abs() + eps),
               "moved along the gradient: Adam subtracts its step, θ_1 = θ_0 - η m̂ / (√v̂ + ε)"),
        Mutant(lambda g, lr, b1, b2, eps: -lr * g / (g * g + eps).sqrt(),
               "put ε inside the square root: it is added to √v̂"),
        Mutant(lambda g, lr, b1, b2, eps: -lr * torch.sign(g),
               "left out ε: it is added to √v̂, so a gradient much smaller than ε moves its parameter by much "
               "less than η"),
    ],
    keep_dtype=True,
    forbidden=(torch.optim.Adam, torch.optim.AdamW),
    forbidden_attrs=("Adam", "AdamW", "adam", "_single_tensor_adam", "_multi_tensor_adam"),
)


# ----------------------------------------------------------------------------- the noise dropout adds

def _dropout_variance(x, p):
    return x * x * p / (1 - p)


DROPOUT_VARIANCE = Check(
    task="dropout_variance",
    what="Var[r x / (1 - p)] with r ~ Bernoulli(1 - p): x² p / (1 - p)",
    reference=_dropout_variance,
    compare=number(),
    cases=[Case("x = 1, p = 0.5", given(1.0, 0.5)), Case("x = 2, p = 0.1", given(2.0, 0.1))],
    hidden_cases=[Case("x = -3, p = 0.3", given(-3.0, 0.3)), Case("x = 0.5, p = 0.9", given(0.5, 0.9)),
                  Case("x = 10, p = 0.01", given(10.0, 0.01)),
                  Case("p = 0: nothing is dropped", given(1.5, 0.0)), Case("x = 0", given(0.0, 0.5))],
    mutants=[
        Mutant(lambda x, p: x * x * p * (1 - p),
               "left out the rescaling: the entries kept are divided by 1 - p, which multiplies the variance by "
               "1 / (1 - p)²"),
        Mutant(lambda x, p: x * x * (1 - p) / p,
               "took p as the probability of keeping an entry: p is the probability of dropping it"),
        Mutant(lambda x, p: x * x / (1 - p),
               "returned E[x̃²]: the variance subtracts the squared mean, E[x̃]² = x²"),
        Mutant(lambda x, p: x * p / (1 - p), "the variance grows with x², not with x"),
        Mutant(lambda x, p: 0.0,
               "the mean is unchanged, but each output is x / (1 - p) or 0 at random: the variance is not zero"),
    ],
    forbidden=(torch.nn.Dropout, torch.nn.functional.dropout),
    forbidden_attrs=("dropout", "Dropout"),
)

QUESTIONS = [FFNN_PARAMETERS, PERPLEXITY_MIXED, ADAM_FIRST_STEP, DROPOUT_VARIANCE]
