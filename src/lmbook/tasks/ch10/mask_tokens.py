"""Task 1 of exercise 10: BERT's masked-LM corruption (mask_tokens)."""

from __future__ import annotations

import hashlib
from collections import OrderedDict

import torch

from ... import bert as _course_bert
from ...grading.checks import Case, Check, Mutant
from .mask_law import MaskLaw
from .shared import ATTRS, BERT_VOCAB, MODULES, PAIR, SCATTERED, SMALL, TINY, Layout, make_batch

_BERT = _course_bert


# Laws of the mistakes' draws, by the draw's content: a mistake's output (a draw) is judged against its law.
_DRAWN: OrderedDict[bytes, MaskLaw] = OrderedDict()


def _fingerprint(out) -> bytes | None:
    if not (isinstance(out, tuple | list) and len(out) == 2 and all(isinstance(t, torch.Tensor) for t in out)):
        return None
    h = hashlib.sha256()
    for t in out:
        t = t.detach().cpu()
        h.update(f"{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.contiguous().numpy().tobytes())
    return h.digest()


def _mask_ref(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15, generator=None) -> MaskLaw:
    return MaskLaw.of(ids, mask_id, vocab_size, special_ids, pad_id, p)


def _mask_with(in_place: bool = False, **mistake):
    """A mistake: draws from its law (torch's global generator), and remembers the law of what it drew."""
    def fn(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15, generator=None):
        law = MaskLaw.of(ids, mask_id, vocab_size, special_ids, pad_id, p, **mistake)
        inputs, labels = law.draw()
        inputs, labels = inputs.to(ids.device), labels.to(ids.device)
        if in_place:  # written into ids itself: the caller's tensor is the corrupted one
            ids.copy_(inputs)
            inputs = ids
        _DRAWN[_fingerprint((inputs, labels))] = law
        while len(_DRAWN) > 32:  # only the latest is looked up (right after the draw)
            _DRAWN.popitem(last=False)
        return inputs, labels
    return fn


def _mask_compare(out, ref) -> str | None:
    law = ref if isinstance(ref, MaskLaw) else _DRAWN.get(_fingerprint(ref) or b"")
    if law is not None:
        return law.problem(out)
    # a draw whose law is unknown: only the same draw agrees with it
    return None if _fingerprint(out) == _fingerprint(ref) else "returned another draw"


def _mask_case(B: int, n: int, layout: Layout, p: float = 0.15, specials: str = "cls_sep", lengths=None,
               pair: bool = True, unk_rate: float = 0.0, mask_rate: float = 0.0, words: int | None = None):
    def make(g, device):
        ids, _ = make_batch(g, B, n, layout, lengths, pair, unk_rate, mask_rate, words)
        return ((ids.to(device), layout.mask, layout.V, layout.specials(specials), layout.pad, p), {})
    return make


def _mask_cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [Case("128 pairs [CLS] a [SEP] b [SEP] of up to 64 tokens, padded; a 40-token vocabulary (0-4 "
                     "special); p = 0.15", _mask_case(128, 64, SMALL)),
                Case("BERT's vocabulary (30,522 ids; [PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103), 96 "
                     "pairs of up to 96 tokens, special_ids = all five, some [UNK] in the text",
                     _mask_case(96, 96, BERT_VOCAB, specials="all", unk_rate=0.03)),
                Case("p = 0.4; a tiny vocabulary of 16 ids, 5 of them special and scattered ([PAD] 0, [UNK] 3, "
                     "[CLS] 7, [SEP] 11, [MASK] 14)", _mask_case(96, 48, TINY, p=0.4, specials="cls_sep_unk")),
                Case("BERT's vocabulary, a text of 60 distinct words: the random replacements come from the whole "
                     "vocabulary, so few of them are words of this batch", _mask_case(128, 64, BERT_VOCAB, words=60)),
                Case("p = 1; a vocabulary of 7 ids, 5 special and 2 ordinary ones: a random replacement is the "
                     "original token half the time", _mask_case(64, 256, PAIR, p=1.0, specials="cls_sep_unk"))]
    return [Case("fresh: 160 pairs of up to 64 tokens, a 40-token vocabulary", _mask_case(160, 64, SMALL)),
            Case("fresh: BERT's vocabulary, 128 pairs of up to 128 tokens, special_ids = [CLS], [SEP]",
                 _mask_case(128, 128, BERT_VOCAB, unk_rate=0.02)),
            Case("special ids scattered through 64 ids ([PAD] 0, [UNK] 5, [CLS] 17, [SEP] 33, [MASK] 50), "
                 "special_ids = [CLS], [SEP] only (padding and [MASK] passed apart), p = 0.3",
                 _mask_case(128, 48, SCATTERED, p=0.3)),
            Case("fresh: the tiny vocabulary of 16 ids, 5 special, p = 0.5", _mask_case(128, 32, TINY, p=0.5,
                                                                                       specials="all")),
            Case("the text already holds [MASK] and [UNK] tokens ([UNK] in special_ids): neither is chosen",
                 _mask_case(128, 40, SMALL, specials="cls_sep_unk", unk_rate=0.1, mask_rate=0.1)),
            Case("a batch of one: a single sequence of 512 tokens", _mask_case(1, 512, BERT_VOCAB, lengths=[512])),
            Case("length one: every sequence is a lone [CLS], nothing to choose",
                 _mask_case(4, 1, SMALL, lengths=[1, 1, 1, 1])),
            Case("all but one sequence padded down to [CLS] [SEP]",
                 _mask_case(6, 200, SMALL, lengths=[2, 200, 2, 2, 2, 2])),
            Case("p = 1: every eligible token is chosen", _mask_case(64, 32, SMALL, p=1.0)),
            Case("p = 0: nothing is chosen", _mask_case(16, 16, SMALL, p=0.0)),
            Case("single sentences [CLS] a [SEP], no b; BERT's vocabulary",
                 _mask_case(128, 40, BERT_VOCAB, specials="all", pair=False)),
            Case("fresh: BERT's vocabulary, a text of 40 distinct words", _mask_case(160, 48, BERT_VOCAB, words=40)),
            Case("fresh: p = 1, 2 ordinary ids and 5 special ones", _mask_case(48, 320, PAIR, p=1.0,
                                                                               specials="cls_sep_unk"))]


MASK_TOKENS = Check(
    task="mask_tokens",
    what="each eligible token chosen with probability p; of the chosen, 80% [MASK], 10% a random non-special "
         "token, 10% unchanged; labels the original ids at the chosen positions, −100 elsewhere",
    reference=_mask_ref,
    compare=_mask_compare,
    cases=_mask_cases(hidden=False),
    hidden_cases=_mask_cases(hidden=True),
    mutants=[
        Mutant(_mask_with(choose="all"), "chose among all positions, [CLS], [SEP] and padding included: only the "
                                         "eligible tokens (not padding, [MASK] or special_ids) may be chosen"),
        Mutant(_mask_with(choose="no_pad"), "left out the padding but chose [CLS] and [SEP] (and the other special "
                                            "tokens) too: a token of special_ids, or [MASK], is never chosen"),
        Mutant(_mask_with(corrupt="all"), "applied the 80/10/10 to every position instead of to the chosen ones "
                                          "only (the [MASK] / random decisions were not combined with `& chosen`): "
                                          "a position that was not chosen stays as it is"),
        Mutant(_mask_with(labels="all"), "kept the original token as the label at every position (labels = "
                                         "ids.clone() with nothing set to −100), so the loss would read every "
                                         "position: set the labels off the chosen positions to −100"),
        Mutant(_mask_with(fates=(1.0, 0.0, 0.0)), "replaced every chosen token by [MASK]: of the chosen, only 80% "
                                                  "become [MASK]; 10% become a random token and 10% stay as they "
                                                  "are, so the model cannot trust a token just because it is not "
                                                  "[MASK]"),
        Mutant(_mask_with(fates=(0.8, 0.02, 0.18)), "drew the random 10% with a fresh `torch.rand(...) < 0.1` among "
                                                    "the chosen tokens left after [MASK]: that makes 0.2 × 0.1 = 2% "
                                                    "of the chosen random; of the 20% left, half (0.5) become "
                                                    "random"),
        Mutant(_mask_with(pool="all"), "drew the random replacements from the whole vocabulary "
                                       "(torch.randint(vocab_size, ...)), special tokens included: draw them from "
                                       "the non-special tokens only"),
        Mutant(_mask_with(in_place=True, labels="corrupted"),
               "took the labels from the corrupted tokens (typically: ids itself corrupted, with no .clone(), then "
               "the labels read from it), so they hold [MASK] and random tokens instead of the originals: corrupt "
               "a copy, inputs = ids.clone(), and take the labels from the untouched ids"),
        Mutant(_mask_with(per="row"), "drew one random number per sequence (torch.rand(B, 1) < p) or one for the "
                                      "whole batch, so a sequence is chosen entirely or not at all: draw one per "
                                      "token, torch.rand(ids.shape) < p"),
        Mutant(_mask_with(per="floor"), "chose exactly ⌊p × m⌋ of a row's m eligible tokens (int() or floor cuts "
                                        "p × m down): round p × m, as BERT's script does, or draw one coin per "
                                        "token"),
        Mutant(_mask_with(pool="batch"), "drew the random replacements from the batch's own tokens (ids[...] at "
                                         "random positions): draw them from the whole non-special vocabulary, ids "
                                         "0 … vocab_size − 1 that are not special"),
        Mutant(_mask_with(redraw="never"), "never let a random replacement be the original token (drawn from the "
                                           "vocabulary without it): the statement draws it uniformly from the whole "
                                           "non-special vocabulary, so it may be the original"),
        Mutant(_mask_with(labels="inverted"), "inverted the labels: −100 at the chosen positions and the original "
                                              "token everywhere else; the loss reads the chosen positions, so they "
                                              "hold the original and the others −100"),
        Mutant(_mask_with(labels="zero"), "set the labels of the positions that were not chosen to 0 (ids * chosen, "
                                          "or torch.where(chosen, ids, 0)): use −100, which F.cross_entropy skips "
                                          "(ignore_index); 0 is a real token"),
    ],
    forbidden=(_BERT.mask_tokens,),
    forbidden_attrs=(*ATTRS, "mask_tokens", "torch_mask_tokens", "DataCollatorForLanguageModeling"),
    forbidden_modules=MODULES,
)
