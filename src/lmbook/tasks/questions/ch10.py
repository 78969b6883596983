"""Exercise 10's thinking questions: derive what BERT's masking shows, count answer spans, predict T5's lengths.

Each answer is a small function of the configuration, graded like a code task on other configurations (hidden
cases), so an answer cannot be copied as a number. The references are the derivations written out; the tests
check them against simulation (lmbook's ``mask_tokens`` over many draws), brute-force enumeration of spans, and
T5's span corruption done by hand.

- ``shown_true_share``: the expected share of a masked input's eligible positions that show their true token.
- ``true_given_shown``: at a chosen position that shows a real token (not [MASK]), the chance it is the answer.
- ``span_candidates``: how many answer spans a span extractor chooses from in a passage.
- ``span_corruption_lengths``: the lengths of T5's encoder input and decoder target after span corruption.
"""

from __future__ import annotations

import torch

from ...grading.checks import Case, Check, Mutant
from ...grading.compare import describe_scalar_mismatch
from ..common import compare_whole_number, compare_whole_numbers

MODULES = ("lmbook.bert", "lmbook.bert_finetune", "lmbook.transformer", "lmbook.gpt", "transformers",
           "tokenizers")
ATTRS = ("bert", "bert_finetune", "transformers", "tokenizers", "mask_tokens", "best_span")


def _fixed(*args):
    def make(g, device):
        return (tuple(args), {})
    return make


def _prob_compare(out, ref) -> str | None:
    # tight: forgetting a 1 / vocab_size term with BERT's 30,522 tokens changes the answer by about 5e-7
    return describe_scalar_mismatch(out, ref, rtol=1e-9, atol=1e-12, accept=("number", "tensor"))




def _draw_rates(g):
    """A masking rule other than BERT's: p_choose in [0.05, 0.5], p_mask and p_random summing to at most 0.95."""
    u = torch.rand(3, generator=g, dtype=torch.float64).tolist()
    p_choose = 0.05 + 0.45 * u[0]
    p_mask = 0.2 + 0.6 * u[1]
    p_random = (0.95 - p_mask) * (0.2 + 0.8 * u[2])
    return round(p_choose, 4), round(p_mask, 4), round(p_random, 4)


# ----------------------------------------------------------------------------- Q1: shown_true_share


def _shown_ref(p_choose, p_mask, p_random, vocab_size) -> float:
    # a position shows another token only if it is chosen and then masked, or replaced by a different token
    return 1.0 - p_choose * (p_mask + p_random * (1.0 - 1.0 / vocab_size))


def _shown_with(mistake: str):
    def fn(p_choose, p_mask, p_random, vocab_size):
        if mistake == "random_never_same":
            return 1.0 - p_choose * (p_mask + p_random)
        if mistake == "mask_only":
            return 1.0 - p_choose * p_mask
        if mistake == "chosen_all_hidden":
            return 1.0 - p_choose
        if mistake == "chosen_only":  # among the chosen positions only
            return (1.0 - p_mask - p_random) + p_random / vocab_size
        raise ValueError(mistake)
    return fn


def _shown_random(g, device):
    p_choose, p_mask, p_random = _draw_rates(g)
    return ((p_choose, p_mask, p_random, int(torch.randint(3, 2000, (1,), generator=g))), {})


SHOWN_TRUE_SHARE = Check(
    task="shown_true_share",
    what="the expected share of the eligible positions of a masked input whose token is still the true one",
    reference=_shown_ref,
    compare=_prob_compare,
    cases=[Case("BERT's rule (0.15; 0.8, 0.1, 0.1) with BERT's 30,522 tokens", _fixed(0.15, 0.8, 0.1, 30522)),
           Case("BERT's rule with a vocabulary of 4 tokens", _fixed(0.15, 0.8, 0.1, 4))],
    hidden_cases=[Case("every chosen token masked (0.15; 1, 0, 0)", _fixed(0.15, 1.0, 0.0, 100)),
                  Case("half the tokens chosen, all replaced at random, 2 tokens", _fixed(0.5, 0.0, 1.0, 2)),
                  Case("a fresh rule and vocabulary", _shown_random),
                  Case("another fresh rule and vocabulary", _shown_random)],
    mutants=[
        Mutant(_shown_with("random_never_same"), "treated every random replacement as hiding the token: the "
                                                 "random token is drawn from the whole vocabulary, so with "
                                                 "probability 1 / vocab_size it is the true token again"),
        Mutant(_shown_with("mask_only"), "counted only [MASK] as hiding the token: a random replacement "
                                         "(another token) hides it too"),
        Mutant(_shown_with("chosen_all_hidden"), "took every chosen position as hidden: a chosen token stays "
                                                 "as it was with probability 1 − p_mask − p_random, and a "
                                                 "random replacement can draw it back"),
        Mutant(_shown_with("chosen_only"), "computed the share among the chosen positions only: the question "
                                           "asks about every eligible position, and the unchosen ones all "
                                           "show their true token"),
    ],
    forbidden_modules=MODULES,
    forbidden_attrs=ATTRS,
)


# ----------------------------------------------------------------------------- Q2: true_given_shown


def _given_ref(p_mask, p_random, vocab_size) -> float:
    p_keep = 1.0 - p_mask - p_random
    return (p_keep + p_random / vocab_size) / (p_keep + p_random)


def _given_with(mistake: str):
    def fn(p_mask, p_random, vocab_size):
        p_keep = 1.0 - p_mask - p_random
        if mistake == "random_never_same":
            return p_keep / (p_keep + p_random)
        if mistake == "unconditional":
            return p_keep + p_random / vocab_size
        if mistake == "keep_share":
            return p_keep
        if mistake == "over_mask":
            return (p_keep + p_random / vocab_size) / (p_keep + p_mask)
        raise ValueError(mistake)
    return fn


def _given_random(g, device):
    _, p_mask, p_random = _draw_rates(g)
    return ((p_mask, p_random, int(torch.randint(3, 2000, (1,), generator=g))), {})


TRUE_GIVEN_SHOWN = Check(
    task="true_given_shown",
    what="P(the token shown is the true one | the position was chosen and does not show [MASK])",
    reference=_given_ref,
    compare=_prob_compare,
    cases=[Case("BERT's 0.8 / 0.1 / 0.1 with 30,522 tokens", _fixed(0.8, 0.1, 30522)),
           Case("another rule: 0.6 / 0.3 / 0.1 with 10 tokens", _fixed(0.6, 0.3, 10))],
    hidden_cases=[Case("nothing replaced at random (0.5, 0, 100 tokens)", _fixed(0.5, 0.0, 100)),
                  Case("no [MASK] at all (0, 0.5, 3 tokens)", _fixed(0.0, 0.5, 3)),
                  Case("a fresh rule and vocabulary", _given_random),
                  Case("another fresh rule and vocabulary", _given_random)],
    mutants=[
        Mutant(_given_with("random_never_same"), "left out that the random token can be the true one again "
                                                 "(probability 1 / vocab_size): it adds p_random / vocab_size "
                                                 "to the numerator"),
        Mutant(_given_with("unconditional"), "did not condition on the position showing a real token: divide "
                                             "by the probability of that, p_keep + p_random (1 − p_mask)"),
        Mutant(_given_with("keep_share"), "gave the share of chosen tokens left unchanged, p_keep: among the "
                                          "chosen positions that do not show [MASK], the unchanged ones are "
                                          "p_keep / (p_keep + p_random) of them, plus the random draws that "
                                          "hit the true token"),
        Mutant(_given_with("over_mask"), "divided by p_keep + p_mask: the positions that show a real token are "
                                         "the unchanged and the randomly replaced ones, p_keep + p_random"),
    ],
    forbidden_modules=MODULES,
    forbidden_attrs=ATTRS,
)


# ----------------------------------------------------------------------------- Q3: span_candidates


def _spans_ref(passage_len, max_len) -> int:
    # spans of length L = 1 … min(max_len, n) start at n − L + 1 places
    n = passage_len
    return sum(n - length + 1 for length in range(1, min(max_len, n) + 1))


def _spans_with(mistake: str):
    def fn(passage_len, max_len):
        n, m = passage_len, max_len
        if mistake == "all_pairs":
            return n * n
        if mistake == "no_single":
            return sum(n - length + 1 for length in range(2, min(m, n) + 1))
        if mistake == "no_limit":
            return n * (n + 1) // 2
        if mistake == "limit_plus_one":
            return sum(n - length + 1 for length in range(1, min(m + 1, n) + 1))
        if mistake == "past_the_end":
            return n * min(m, n)
        raise ValueError(mistake)
    return fn


def _spans_random(g, device):
    n = int(torch.randint(5, 400, (1,), generator=g))
    return ((n, int(torch.randint(1, n, (1,), generator=g))), {})


SPAN_CANDIDATES = Check(
    task="span_candidates",
    what="the spans (i, j) with i ≤ j inside a passage of passage_len tokens, of at most max_len tokens each",
    reference=_spans_ref,
    compare=compare_whole_number("spans"),
    cases=[Case("a passage of 5 tokens, answers of at most 2", _fixed(5, 2)),
           Case("a passage of 384 tokens, answers of at most 30 (BERT's SQuAD set-up)", _fixed(384, 30))],
    hidden_cases=[Case("a limit longer than the passage (10 tokens, 50)", _fixed(10, 50)),
                  Case("one-token answers only", _fixed(20, 1)),
                  Case("a passage of one token", _fixed(1, 3)),
                  Case("fresh lengths", _spans_random),
                  Case("more fresh lengths", _spans_random)],
    mutants=[
        Mutant(_spans_with("all_pairs"), "counted every (start, end) pair, passage_len²: the end may not come "
                                         "before the start (i ≤ j), and the answer is at most max_len long"),
        Mutant(_spans_with("no_single"), "left out the one-token spans (i = j): an answer can be a single "
                                         "token"),
        Mutant(_spans_with("no_limit"), "ignored max_len: spans longer than max_len tokens are not "
                                        "candidates"),
        Mutant(_spans_with("limit_plus_one"), "allowed spans of max_len + 1 tokens (j − i ≤ max_len): an answer "
                                              "of at most max_len tokens has j − i + 1 ≤ max_len"),
        Mutant(_spans_with("past_the_end"), "gave every start max_len ends: near the end of the passage a "
                                            "start has fewer, since the span must end inside it"),
    ],
    forbidden_modules=MODULES,
    forbidden_attrs=ATTRS,
)


# ----------------------------------------------------------------------------- Q4: span_corruption_lengths


def _t5_ref(n_tokens, n_spans, n_corrupted) -> tuple[int, int]:
    # the input keeps the uncorrupted tokens and one sentinel per span; the target writes each span after its
    # sentinel, and a last sentinel ends it
    return n_tokens - n_corrupted + n_spans, n_corrupted + n_spans + 1


def _t5_with(mistake: str):
    def fn(n_tokens, n_spans, n_corrupted):
        n, k, m = n_tokens, n_spans, n_corrupted
        if mistake == "no_final":
            return n - m + k, m + k
        if mistake == "no_target_sentinels":
            return n - m + k, m
        if mistake == "no_input_sentinels":
            return n - m, m + k + 1
        if mistake == "mask_per_token":  # BERT-style: one mask per corrupted token
            return n, m + k + 1
        if mistake == "whole_input":
            return n - m + k, n + k + 1
        raise ValueError(mistake)
    return fn


def _t5_random(g, device):
    n = int(torch.randint(20, 600, (1,), generator=g))
    k = int(torch.randint(1, max(2, n // 10), (1,), generator=g))
    m = int(torch.randint(k, max(k + 1, n // 3), (1,), generator=g))
    return ((n, k, m), {})


SPAN_CORRUPTION_LENGTHS = Check(
    task="span_corruption_lengths",
    what="T5's span corruption: (encoder input length, decoder target length)",
    reference=_t5_ref,
    compare=compare_whole_numbers(("the encoder input", "the decoder target"),
                                  "(encoder_length, decoder_length)", "tokens"),
    cases=[Case("the chapter's example: 8 tokens, 2 spans, 3 corrupted tokens", _fixed(8, 2, 3)),
           Case("T5's set-up: 512 tokens, 15% in spans of 3 on average (26 spans, 77 tokens)",
                _fixed(512, 26, 77))],
    hidden_cases=[Case("one span of one token", _fixed(10, 1, 1)),
                  Case("one span covering the whole input", _fixed(7, 1, 7)),
                  Case("fresh lengths", _t5_random),
                  Case("more fresh lengths", _t5_random)],
    mutants=[
        Mutant(_t5_with("no_final"), "left out the target's final sentinel: after the last span the target "
                                     "writes one more sentinel, which ends it"),
        Mutant(_t5_with("no_target_sentinels"), "left out the sentinels of the target: each span is written "
                                                "after its own sentinel, so the decoder knows which gap it fills"),
        Mutant(_t5_with("no_input_sentinels"), "left out the sentinels of the input: each corrupted span is "
                                               "replaced by one sentinel, not removed"),
        Mutant(_t5_with("mask_per_token"), "replaced every corrupted token by its own sentinel, as BERT masks "
                                           "token by token: T5 replaces each whole span by one sentinel"),
        Mutant(_t5_with("whole_input"), "made the decoder write the whole input: T5's target holds only the "
                                        "corrupted spans, each after its sentinel"),
    ],
    forbidden_modules=MODULES,
    forbidden_attrs=ATTRS,
)

QUESTIONS = [SHOWN_TRUE_SHARE, TRUE_GIVEN_SHOWN, SPAN_CANDIDATES, SPAN_CORRUPTION_LENGTHS]
