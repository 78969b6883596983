"""Task 4 of exercise 2: gradient clipping by the global norm."""

from __future__ import annotations

import torch
from torch import nn

from ... import rnn as lmbook_rnn
from ...grading.checks import Case, Check, Mutant
from ...grading.compare import describe_scalar_mismatch, describe_tensor_mismatch, describe_value
from ..common import randn as _randn
from .inputs import f64


def _grads_case(shapes, scale, max_norm, zeros=False):
    def make(g, device):
        grads = tuple(_randn(s, g, device, scale) * (0.0 if zeros else 1.0) for s in shapes)
        return ((grads, max_norm), {})
    return make


def _clip_ref(grads, max_norm):
    params = [nn.Parameter(torch.zeros_like(gr)) for gr in grads]
    for p, gr in zip(params, grads, strict=True):
        p.grad = gr.clone()
    total = nn.utils.clip_grad_norm_(params, max_norm)
    return tuple(p.grad for p in params), total


def _clip_compare(out, ref) -> str | None:
    clipped_ref, total_ref = ref
    if not isinstance(out, tuple | list) or len(out) != 2:
        return f"returned {describe_value(out)}, expected a tuple (clipped_grads, total_norm)"
    clipped, total = out
    # the statement allows a 0-d tensor or a Python number for the norm (torch returns a tensor)
    problem = describe_scalar_mismatch(total, total_ref, rtol=1e-4, atol=1e-6, accept=("tensor", "number"))
    if problem:
        return f"total_norm: {problem}"
    if not isinstance(clipped, tuple | list) or len(clipped) != len(clipped_ref):
        return (f"clipped_grads: returned {describe_value(clipped)}, expected {len(clipped_ref)} tensors, "
                "one per gradient")
    for i, (o, r) in enumerate(zip(clipped, clipped_ref, strict=True)):
        problem = describe_tensor_mismatch(o, r, rtol=1e-4, atol=1e-6, dim=None)
        if problem:
            return f"clipped_grads[{i}]: {problem}"
    return None


def _clip_with(per_tensor=False, always=False, by_value=False, norm="l2", after=False, no_eps=False):
    def fn(grads, max_norm):
        if no_eps:  # normalise to length 1, then stretch: 0 / 0 for all-zero gradients
            joint = torch.sqrt(sum((gr ** 2).sum() for gr in grads))
            return tuple(gr / joint * torch.clamp(joint, max=max_norm) for gr in grads), joint
        joint = torch.sqrt(sum((gr ** 2).sum() for gr in grads))
        if norm == "squared":
            joint = joint ** 2
        if by_value:
            return tuple(gr.clamp(-max_norm, max_norm) for gr in grads), joint
        if per_tensor:
            return tuple(gr * min(1.0, max_norm / (float(gr.norm()) + 1e-6)) for gr in grads), joint
        total = sum(gr.norm() for gr in grads) if norm == "sum" else joint
        scale = max_norm / (total + 1e-6) if always else torch.clamp(max_norm / (total + 1e-6), max=1.0)
        out = tuple(gr * scale for gr in grads)
        if after:
            total = torch.sqrt(sum((gr ** 2).sum() for gr in out))
        return out, total
    return fn


CLIP_GRAD_NORM = Check(
    task="clip_grad_norm",
    what="scale all gradients by min(1, max_norm / ‖g‖), ‖g‖ their joint L2 norm; equal to clip_grad_norm_",
    reference=_clip_ref,
    compare=_clip_compare,
    cases=[Case("three gradients, joint norm above max_norm = 1", _grads_case([(3, 4), (4,), (2, 2)], 1.0, 1.0)),
           Case("joint norm below max_norm = 100: nothing changes", _grads_case([(5,), (3, 3)], 1.0, 100.0))],
    hidden_cases=[Case("a single gradient tensor", _grads_case([(6, 5)], 2.0, 0.5)),
                  Case("exploding gradients (norm ~ 1e4)", _grads_case([(10, 10), (10,), (1,)], 1000.0, 5.0)),
                  Case("all-zero gradients (norm 0: nothing changes, no NaN)", _grads_case([(3,), (2, 2)], 1.0, 1.0,
                                                                                         zeros=True)),
                  Case("many small tensors, each under max_norm, jointly over it",
                       _grads_case([(4,)] * 9, 0.5, 2.0)),
                  Case("joint norm near max_norm", _grads_case([(2, 3), (3,)], 1.0, 2.5)),
                  Case("float64 gradients", f64(_grads_case([(3, 2), (5,)], 3.0, 1.0))),
                  Case("max_norm = 0.01: gradients shrink a lot", _grads_case([(4, 4)], 1.0, 0.01))],
    keep_dtype=True,
    inputs_kept=False,  # the statement allows scaling the gradients in place, as clip_grad_norm_ does
    mutants=[
        Mutant(_clip_with(per_tensor=True), "clipped each gradient tensor on its own: the norm is the norm of all "
                                            "gradients together, and one scale applies to all"),
        Mutant(_clip_with(always=True), "rescaled even when the norm was already below max_norm: the scale is "
                                        "min(1, max_norm / ‖g‖)"),
        Mutant(_clip_with(by_value=True), "clipped each value to [-max_norm, max_norm] (clip_grad_value_); "
                                          "norm clipping rescales the whole gradient, keeping its direction"),
        Mutant(_clip_with(norm="sum"), "added up the tensors' norms: the joint norm is sqrt of the sum of all "
                                       "squared entries"),
        Mutant(_clip_with(norm="squared"), "forgot the square root: ‖g‖ is the square root of the sum of all "
                                           "squared entries"),
        Mutant(_clip_with(no_eps=True), "divided by the norm without the ε: all-zero gradients give 0 / 0 = NaN; "
                                        "scale by min(1, max_norm / (‖g‖ + ε))"),
        Mutant(_clip_with(after=True), "returned the norm after clipping; return the norm before (as torch does)"),
    ],
    forbidden=(lmbook_rnn.clip_grad_norm,),
    forbidden_attrs=("clip_grad_norm_", "clip_grad_norm", "clip_grad_value_", "clip_grads_with_norm_",
                     "get_total_norm"),
)
