"""Task 3 of exercise 1: the feedforward LM's forward pass."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...ffnn import FeedforwardLM
from ...grading.checks import Case, Check, Mutant
from ...grading.compare import describe_tensor_mismatch
from ..common import randn as _randn


def _ffnn_case(batch, window, V, d, H, repeat=False, dtype=torch.float32):
    def make(g, device):
        context = torch.randint(0, V, (batch, window), generator=g)
        if repeat:
            context[:, 1:] = context[:, :1]
        weights = [_randn(s, g, device, 0.5).to(dtype) for s in ((V, d), (H, window * d), (H,), (V, H), (V,))]
        return ((context.to(device), *weights), {})
    return make


def _ffnn_ref(context, E, W, b, U, c):
    # torch's own layers, given the student's weights
    x = F.embedding(context, E).flatten(start_dim=1)
    return F.linear(torch.tanh(F.linear(x, W, b)), U, c)


def _ffnn_with(act=torch.tanh, flip=False, use_b=True, use_c=True, post=None, b_outside=False, interleave=False):
    def fn(context, E, W, b, U, c):
        ctx = context.flip(1) if flip else context
        emb = F.embedding(ctx, E)
        z = emb.transpose(1, 2).flatten(1) if interleave else emb.flatten(1)
        h = act(z @ W.T + (b if use_b and not b_outside else 0))
        h = h + b if b_outside else h
        out = h @ U.T + (c if use_c else 0)
        return post(out) if post else out
    return fn


FFNN_FORWARD = Check(
    task="ffnn_forward",
    what="logits = U tanh(W z + b) + c, z = [e_{t-m}; ...; e_{t-1}]",
    reference=_ffnn_ref,
    grad_of=(1, 2, 3, 4, 5),  # E, W, b, U and c: the model is trained through its forward pass
    compare=lambda out, ref: describe_tensor_mismatch(out, ref, rtol=1e-4, atol=1e-4, dim=None),
    cases=[
        Case("batch 4, window 3, V=12, d=5, H=7", _ffnn_case(4, 3, 12, 5, 7)),
        Case("window 1", _ffnn_case(6, 1, 10, 4, 8)),
    ],
    hidden_cases=[
        Case("a batch of one", _ffnn_case(1, 4, 15, 3, 6)),
        Case("window 5 with a repeated word", _ffnn_case(3, 5, 20, 4, 9, repeat=True)),
        Case("V=47, d=16, H=32, batch 64", _ffnn_case(64, 3, 47, 16, 32)),
        Case("a square W (H = window * d = 12)", _ffnn_case(5, 3, 9, 4, 12)),
        Case("float64 weights (the logits stay float64)", _ffnn_case(4, 2, 11, 3, 5, dtype=torch.float64)),
        Case("the longest window (12 words)", _ffnn_case(3, 12, 25, 2, 6)),
    ],
    mutants=[
        Mutant(_ffnn_with(flip=True), "concatenated the window's embeddings in reverse order: keep e_1 first"),
        Mutant(_ffnn_with(act=lambda z: z), "left out the tanh non-linearity"),
        Mutant(_ffnn_with(act=torch.sigmoid), "used a sigmoid; this model uses tanh"),
        Mutant(_ffnn_with(act=torch.relu), "used ReLU; this model uses tanh"),
        Mutant(_ffnn_with(use_b=False), "left out the hidden bias b"),
        Mutant(_ffnn_with(use_c=False), "left out the output bias c"),
        Mutant(_ffnn_with(interleave=True), "flattened the (B, m, d) embeddings after transposing them to (B, d, m): "
                                            "z must hold e_{t-m}'s d values, then e_{t-m+1}'s, and so on"),
        Mutant(_ffnn_with(b_outside=True), "added the hidden bias b after the tanh; it goes inside: tanh(W z + b)"),
        Mutant(_ffnn_with(post=lambda z: torch.softmax(z, -1)), "returned probabilities; the task asks for logits"),
        Mutant(_ffnn_with(post=lambda z: torch.log_softmax(z, -1)),
               "returned log-probabilities; the task asks for logits (before any softmax)"),
    ],
    keep_dtype=True,
    forbidden=(FeedforwardLM,),
    forbidden_attrs=("FeedforwardLM",),
)
