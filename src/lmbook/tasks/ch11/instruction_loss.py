"""Task 4 of exercise 11: the instruction-tuning loss, on the response tokens only."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ... import instruct as _course_instruct
from ...grading.checks import Case, Check, Mutant
from ...grading.compare import describe_scalar_mismatch
from ...grading.reproduce import sized
from ..common import in_dtype
from .shared import ATTRS, MODULES

_I = _course_instruct


def _loss_ref(logits, ids, response_mask):
    """−(1/R) Σ_{b, t ≥ 1, mask[b, t]} ln softmax(logits[b, t − 1])[ids[b, t]], R the batch's response tokens."""
    logp = logits[:, :-1] - torch.logsumexp(logits[:, :-1], dim=-1, keepdim=True)
    picked = logp.gather(-1, ids[:, 1:, None].long())[..., 0]  # (B, n − 1): ln P(ids[t] | ids[<t])
    counted = response_mask[:, 1:].to(picked.dtype)
    return -(picked * counted).sum() / counted.sum()


def _loss_with(mistake: str):
    def fn(logits, ids, response_mask):
        V = logits.shape[-1]
        if mistake == "no_shift":  # logits[t] scored against ids[t]
            nll = F.cross_entropy(logits.reshape(-1, V), ids.reshape(-1), reduction="none").view(ids.shape)
            m = response_mask.float().to(nll.dtype)
            return (nll * m).sum() / m.sum()
        if mistake == "naive":
            logp = logits[:, :-1] - torch.log(torch.exp(logits[:, :-1]).sum(-1, keepdim=True))
            nll = -logp.gather(-1, ids[:, 1:, None])[..., 0]
        else:
            nll = F.cross_entropy(logits[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1),
                                  reduction="none").view(ids.shape[0], -1)
        m = (response_mask[:, :-1] if mistake == "input_mask" else response_mask[:, 1:]).to(nll.dtype)
        if mistake == "zero_is_padding":  # ignore_index=0: every target 0 left out, padding or not
            m = m * (ids[:, 1:] != 0).to(nll.dtype)
        if mistake == "every_token":
            return nll.mean()
        if mistake == "every_position":
            return (nll * m).sum() / nll.numel()
        if mistake == "per_sequence":
            return ((nll * m).sum(1) / m.sum(1)).mean()
        return (nll * m).sum() / m.sum()
    return fn


def _batch(g, B: int, n: int, V: int, prompt_lengths=None, response_lengths=None, zeros: bool = False):
    """ids (B, n): a prompt, a response, then padding (id 0); the response mask True on the response.
    ``zeros``: token 0 is also written in every response (an id like any other: only the mask tells padding)."""
    ids = torch.zeros(B, n, dtype=torch.long)
    mask = torch.zeros(B, n, dtype=torch.bool)
    for b in range(B):
        p = prompt_lengths[b] if prompt_lengths else int(torch.randint(1, max(2, n // 2), (1,), generator=g))
        r = response_lengths[b] if response_lengths else int(torch.randint(1, n - p + 1, (1,), generator=g))
        ids[b, :p + r] = torch.randint(1, V, (p + r,), generator=g)
        mask[b, p:p + r] = True
    if not prompt_lengths:  # one row fills the batch
        b = int(torch.randint(0, B, (1,), generator=g))
        if not mask[b, -1]:
            mask[b, int(mask[b].nonzero()[0]):] = True
            ids[b, ids[b] == 0] = torch.randint(1, V, (int((ids[b] == 0).sum()),), generator=g)
    if zeros:
        for b in range(B):
            at = mask[b].nonzero()[:, 0]
            ids[b, at[int(torch.randint(0, len(at), (1,), generator=g))]] = 0
    return ids, mask


def _loss_case(B: int, n: int, V: int, scale: float = 2.0, dtype=torch.float32, prompt_lengths=None,
               response_lengths=None, zeros: bool = False):
    def make(g, device):
        ids, mask = _batch(g, B, n, V, prompt_lengths, response_lengths, zeros)
        logits = torch.randn(B, n, V, generator=g) * scale
        return ((in_dtype(logits, dtype).to(device), ids.to(device), mask.to(device)), {})
    return make


def _loss_compare(out, ref) -> str | None:
    # nan matches nan: a known mistake's 0 · inf = nan (masked positions whose exp overflowed) is the student's too
    # (the reference itself is never nan)
    if isinstance(out, torch.Tensor) and out.numel() == 1 and out.is_floating_point() and bool(out.isnan()) \
            and isinstance(ref, torch.Tensor) and bool(ref.isnan()):
        return None
    return describe_scalar_mismatch(out, ref, rtol=1e-4, atol=1e-6, accept=("tensor",))


SHRINK = {"B": 1, "n": 2, "V": 2}


INSTRUCTION_LOSS = Check(
    task="instruction_loss",
    what="the mean of −ln P(ids[t] | ids[<t]) over the batch's response tokens (logits[:, t − 1] predicts "
         "ids[:, t]), prompt and padding left out",
    reference=_loss_ref,
    grad_of=(0,),  # the model is fine-tuned through it
    compare=_loss_compare,
    cases=[sized("3 sequences of 10 positions, 12 tokens", _loss_case, B=3, n=10, V=12, floors=SHRINK),
           Case("responses of 1 and 6 tokens after prompts of 2 and 3",
                _loss_case(2, 9, 8, prompt_lengths=[2, 3], response_lengths=[1, 6])),
           sized("float64 logits, 2 sequences of 7", _loss_case, B=2, n=7, V=5, dtype=torch.float64, floors=SHRINK),
           Case("token 0 inside each response (padding is 0 too: only the mask tells them apart)",
                _loss_case(2, 8, 6, prompt_lengths=[2, 3], response_lengths=[4, 3], zeros=True))],
    hidden_cases=[Case("a batch of one", _loss_case(1, 8, 10)),
                  Case("a response of one token", _loss_case(2, 6, 7, prompt_lengths=[5, 1], response_lengths=[1, 1])),
                  Case("responses of very different lengths", _loss_case(3, 20, 9, prompt_lengths=[1, 2, 10],
                                                                         response_lengths=[19, 1, 3])),
                  Case("no padding: every row ends with its response", _loss_case(3, 6, 9, prompt_lengths=[2, 3, 4],
                                                                                  response_lengths=[4, 3, 2])),
                  Case("large logits (std 100): exp overflows", _loss_case(3, 10, 12, scale=100.0)),
                  Case("float64 logits", _loss_case(4, 12, 16, dtype=torch.float64)),
                  Case("fresh: 16 sequences of 40, 50 tokens", _loss_case(16, 40, 50)),
                  Case("token 0 inside the responses", _loss_case(4, 12, 9, zeros=True))],
    mutants=[
        Mutant(_loss_with("every_token"), "averaged the loss over the prompt tokens too (and the padding): only the "
                                          "response tokens are counted, the prompt is given, never written"),
        Mutant(_loss_with("every_position"), "summed over the response tokens but divided by every position: divide "
                                             "by the number of response tokens, response_mask[:, 1:].sum()"),
        Mutant(_loss_with("per_sequence"), "averaged each sequence's response tokens, then the sequences: the mean is "
                                           "over all the batch's response tokens at once, so a long response counts "
                                           "for more tokens than a short one"),
        Mutant(_loss_with("no_shift"), "scored logits[:, t] against ids[:, t]: the logits at position t predict the "
                                       "next token, so logits[:, :-1] are scored against ids[:, 1:]"),
        Mutant(_loss_with("input_mask"), "masked with response_mask[:, :-1], the inputs' mask: the targets are "
                                         "ids[:, 1:], so their mask is response_mask[:, 1:]"),
        Mutant(_loss_with("zero_is_padding"), "left out the response tokens whose id is 0 (ignore_index=0, or a "
                                              "mask from ids != 0): 0 is a token like any other; response_mask "
                                              "alone says which tokens count"),
        Mutant(_loss_with("naive"), "computed the softmax from exp(logits) itself: exp overflows for large logits; "
                                    "use torch.log_softmax, logsumexp or F.cross_entropy"),
    ],
    forbidden=(_I.response_loss,),
    forbidden_attrs=(*ATTRS, "response_loss"),
    forbidden_modules=MODULES,
    keep_dtype=True,
)
