"""Task 4 of exercise 1: the skip-gram negative-sampling loss."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ... import word2vec as lmbook_word2vec
from ...grading.checks import Case, Check, Mutant
from ..common import in_dtype
from ..common import randn as _randn
from .inputs import scalar_tensor


def _sgns_case(batch, k, d, scale=1.0, zeros=False, dtype=torch.float32):
    def make(g, device):
        shapes = ((batch, d), (batch, d), (batch, k, d))
        ts = [in_dtype(_randn(s, g, device, scale) * (0 if zeros else 1), dtype) for s in shapes]
        return (tuple(ts), {})
    return make


def _sgns_ref(v_c, u_o, u_neg):
    # Independent of the formula students write: k+1 binary classifications, via torch's BCE-with-logits.
    scores = torch.cat([(u_o * v_c).sum(-1, keepdim=True), torch.einsum("bkd,bd->bk", u_neg, v_c)], dim=1)
    labels = torch.zeros_like(scores)
    labels[:, 0] = 1.0
    return F.binary_cross_entropy_with_logits(scores, labels, reduction="none").sum(-1).mean()


def _sgns_mean_of_all_terms(v_c, u_o, u_neg):
    scores = torch.cat([(u_o * v_c).sum(-1, keepdim=True), -torch.einsum("bkd,bd->bk", u_neg, v_c)], dim=1)
    return -F.logsigmoid(scores).mean()


def _sgns_with(neg_sign=-1.0, reduce="mean", naive=False, with_neg=True, neg_reduce="sum"):
    def fn(v_c, u_o, u_neg):
        logsig = (lambda z: torch.log(torch.sigmoid(z))) if naive else F.logsigmoid
        pos = logsig((u_o * v_c).sum(-1))
        neg = logsig(neg_sign * torch.einsum("bkd,bd->bk", u_neg, v_c))
        neg = neg.sum(-1) if neg_reduce == "sum" else neg.mean(-1)
        per = -(pos + (neg if with_neg else 0))
        return per.mean() if reduce == "mean" else per.sum()
    return fn


SGNS_LOSS = Check(
    task="sgns_loss",
    what="-log σ(u_o·v_c) - Σ_j log σ(-u_{n_j}·v_c), averaged over the batch",
    reference=_sgns_ref,
    grad_of=(0, 1, 2),  # the three embedding tables are trained through the loss
    compare=scalar_tensor(rtol=1e-4, atol=1e-5),  # the statement: a tensor holding one value
    cases=[
        Case("batch 8, d=5, k=3 negatives", _sgns_case(8, 3, 5)),
        Case("a single negative (k=1)", _sgns_case(4, 1, 6)),
        Case("large dot products (|u·v| ~ 100)", _sgns_case(5, 4, 10, scale=4.0)),
    ],
    hidden_cases=[
        Case("a batch of one", _sgns_case(1, 5, 8)),
        Case("k=10, d=50", _sgns_case(16, 10, 50)),
        Case("huge dot products (|u·v| ~ 1000)", _sgns_case(3, 2, 20, scale=10.0)),
        Case("all-zero vectors (loss = (k+1) log 2)", _sgns_case(4, 3, 5, zeros=True)),
        Case("as many negatives as pairs (k = B = 4)", _sgns_case(4, 4, 6)),
        Case("float64 vectors, k=3, d=7", _sgns_case(6, 3, 7, dtype=torch.float64)),
    ],
    mutants=[
        Mutant(_sgns_with(neg_sign=1.0), "used σ(u_k·v_c) for the negatives; noise words need σ(-u_k·v_c)"),
        Mutant(_sgns_with(reduce="sum"), "summed over the batch; the loss is the batch mean"),
        Mutant(_sgns_with(with_neg=False), "left out the negative samples' term"),
        Mutant(_sgns_with(naive=True), "computed log σ(x) in a form that is infinite for a large |x|: log(sigmoid(x)) "
                                       "is log(0) = -inf once σ(x) underflows to 0, and log(1 / (1 + exp(-x))) "
                                       "overflows in exp(-x) first, at the same x; use "
                                       "torch.nn.functional.logsigmoid"),
        Mutant(_sgns_with(neg_reduce="mean"), "averaged over the k negatives; they are summed"),
        Mutant(_sgns_mean_of_all_terms, "took one mean over the batch and the k+1 terms: sum a pair's k+1 terms, "
                                        "then average over the batch"),
    ],
    forbidden=(lmbook_word2vec.sgns_loss, lmbook_word2vec.SkipGram),
    forbidden_attrs=("sgns_loss", "SkipGram"),
)
