"""Exercise 3's checks: right answers pass, known wrong ones fail with their misconception named,
and the grader's own references agree with brute force, sacrebleu and the book's library."""

import itertools
import math
from collections import Counter

import pytest
import sacrebleu
import torch
import torch.nn.functional as F
from check_contract import contract_tests, library_agrees

import lmbook.decoding
import lmbook.functional
import lmbook.metrics
from lmbook.grading.checks import CheckFailed, case_inputs
from lmbook.grading.compare import to_reference
from lmbook.grading.verdict import case_problem
from lmbook.tasks.ch03 import CHECKS, check
from lmbook.tasks.ch03.beam import _beam_with
from lmbook.tasks.ch03.bleu import _bleu_ref, _bleu_with
from lmbook.tasks.ch03.greedy import _greedy_with
from lmbook.tasks.ch03.teacher_forcing import _tf_loss_ref, _tf_with
from lmbook.tasks.ch03.toy_decoder import _table, beam_ref, greedy_ref

BY_TASK = {c.task: c for c in CHECKS}
CPU = torch.device("cpu")


# Right answers, written differently from the references (logsumexp, tensor top-k over the beam, Counters).
def teacher_forcing_loss(logits, y, pad_id):
    targets = y[:, 1:]
    nll = logits.logsumexp(-1) - logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return nll[targets != pad_id].mean()


def greedy_decode(log_probs, bos, eos, max_len):
    out = [bos]
    while len(out) <= max_len and (len(out) == 1 or out[-1] != eos):
        out.append(int(log_probs[len(out) - 1, out[-1]].argmax()))
    return torch.tensor(out[1:])  # a tensor of ids is fine too


def beam_search(log_probs, bos, eos, beam_size, max_len, alpha):
    V = log_probs.shape[-1]
    prefixes, scores = [[]], torch.zeros(1, dtype=log_probs.dtype, device=log_probs.device)
    done = []
    for t in range(max_len):
        last = torch.tensor([p[-1] if p else bos for p in prefixes], device=log_probs.device)
        total = (scores[:, None] + log_probs[t, last]).flatten()  # (live * V,)
        best = total.topk(min(beam_size, total.numel())).indices.tolist()
        new_prefixes, new_scores = [], []
        for i in best:
            prefix = prefixes[i // V] + [i % V]
            if i % V == eos:
                done.append((prefix, float(total[i])))
            else:
                new_prefixes.append(prefix)
                new_scores.append(total[i])
        prefixes = new_prefixes
        if not prefixes:
            break
        scores = torch.stack(new_scores)
    hyps = done + ([(p, float(s)) for p, s in zip(prefixes, scores, strict=True)] if prefixes else [])
    tokens, s = max(hyps, key=lambda h: h[1] / len(h[0]) ** alpha)
    return tokens, s / len(tokens) ** alpha


def corpus_bleu(candidates, references):
    matches, totals = [0] * 4, [0] * 4
    c = r = 0
    for cand, refs in zip(candidates, references, strict=True):
        c += len(cand)
        r += sorted((len(x) for x in refs), key=lambda n: (abs(n - len(cand)), n))[0]
        for n in range(1, 5):
            grams = Counter(zip(*(cand[i:] for i in range(n)), strict=False))
            most = Counter()
            for ref in refs:
                most |= Counter(zip(*(ref[i:] for i in range(n)), strict=False))
            matches[n - 1] += sum((grams & most).values())
            totals[n - 1] += max(len(cand) - n + 1, 0)
    if 0 in matches:
        return 0.0
    bp = 1.0 if c > r else math.exp(1 - r / c)
    return 100 * bp * math.exp(sum(math.log(m / t) for m, t in zip(matches, totals, strict=True)) / 4)


RIGHT = {"teacher_forcing_loss": teacher_forcing_loss, "greedy_decode": greedy_decode, "beam_search": beam_search,
         "corpus_bleu": corpus_bleu}


(test_every_task_has_a_right_answer_here,
 test_a_correct_but_different_answer_passes_in_jupyter_and_in_the_grader,
 test_a_correct_answer_passes_on_a_gpu_too) = contract_tests(CHECKS, RIGHT)


@pytest.mark.parametrize("seed", [0, 1, 2, 123])
def test_cases_are_deterministic_and_the_mutants_settings_are_right_by_default(seed):
    """Each case draws the same inputs for a seed; the mutants' generic implementations are right when unmutated."""
    defaults = {"teacher_forcing_loss": _tf_with(), "greedy_decode": _greedy_with(),
                "beam_search": _beam_with(), "corpus_bleu": _bleu_with()}
    for c in CHECKS:
        for i, case in enumerate([*c.cases, *c.hidden_cases]):
            args, kwargs = case_inputs(case, seed, i, CPU)
            again, _ = case_inputs(case, seed, i, CPU)
            assert all(torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b
                       for a, b in zip(args, again, strict=True)), case.name
            assert case_problem(c, case, defaults[c.task](*args, **kwargs), args, kwargs) is None, case.name


# ----------------------------------------------------------------------------- the references themselves


def _log_prob(log_probs, bos, y):
    return sum(float(log_probs[t, ([bos, *y])[t], y[t]]) for t in range(len(y)))


def _brute_force(log_probs, bos, eos, max_len, alpha):
    """Every hypothesis (eos only at its end; ending in eos or max_len long), best by sum log p / len**alpha."""
    V = log_probs.shape[-1]
    hyps = [list(y) for n in range(1, max_len + 1) for y in itertools.product(range(V), repeat=n)
            if eos not in y[:-1] and (y[-1] == eos or n == max_len)]
    return max(((y, _log_prob(log_probs, bos, y) / len(y) ** alpha) for y in hyps), key=lambda h: h[1])


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("alpha", [0.0, 0.7, 1.0])
def test_an_exhaustive_reference_beam_is_brute_force(seed, alpha):
    V, max_len, bos, eos = 4, 4, 3, 1
    log_probs = _table(torch.Generator().manual_seed(seed), max_len, V, eos).double()
    tokens, score = beam_ref(log_probs, bos, eos, V ** max_len, max_len, alpha)
    best, best_score = _brute_force(log_probs, bos, eos, max_len, alpha)
    assert tokens == best
    assert score == pytest.approx(best_score, abs=1e-12)
    assert score == pytest.approx(_log_prob(log_probs, bos, tokens) / len(tokens) ** alpha, abs=1e-12)


@pytest.mark.parametrize("seed", range(20))
def test_the_reference_beam_of_one_is_the_reference_greedy(seed):
    V, max_len, bos, eos = 5, 6, 0, 2
    log_probs = _table(torch.Generator().manual_seed(seed), max_len, V, eos).double()
    tokens, score = beam_ref(log_probs, bos, eos, 1, max_len, 1.0)
    assert tokens == greedy_ref(log_probs, bos, eos, max_len)
    assert score == pytest.approx(_log_prob(log_probs, bos, tokens) / len(tokens))


def test_a_narrow_beam_is_not_exact_and_the_cases_show_it():
    """Beam search is a heuristic: a visible case is chosen where the beam beats greedy, and some where it is not
    the exhaustive optimum (so a student's brute force would fail, as it should)."""
    c = BY_TASK["beam_search"]
    not_exact = 0
    for seed in range(5):
        for i, case in enumerate(c.cases):
            args, _ = case_inputs(case, seed, i, CPU)
            log_probs, bos, eos, beam, max_len, alpha = args
            tokens, _ = beam_ref(log_probs.double(), bos, eos, beam, max_len, alpha)
            not_exact += tokens != _brute_force(log_probs.double(), bos, eos, max_len, alpha)[0]
            if i == 0:
                assert tokens != greedy_ref(log_probs.double(), bos, eos, max_len)
    assert not_exact > 0


def test_the_bleu_reference_reproduces_the_course_example_and_sacrebleu():
    cand = "the cat the cat on the mat".split()
    refs = ["the cat is on the mat".split(), "there is a cat on the mat".split()]
    # p_1 = 5/7, p_2 = 4/6 (clipping), p_3 = 2/5, p_4 = 1/4; c = 7, r = 7: BP = 1
    expected = 100 * math.exp((math.log(5 / 7) + math.log(4 / 6) + math.log(2 / 5) + math.log(1 / 4)) / 4)
    assert _bleu_ref([cand], [refs]) == pytest.approx(expected, abs=1e-9)
    assert sacrebleu.corpus_bleu([" ".join(cand)], [[" ".join(refs[0])], [" ".join(refs[1])]],
                                 tokenize="none", smooth_method="none").score == pytest.approx(expected, abs=1e-9)


def test_the_bleu_cases_exercise_ties_brevity_and_zero():
    c = BY_TASK["corpus_bleu"]
    by_name = {case.name: (i, case) for i, case in enumerate(c.hidden_cases)}
    i, case = next(v for k, v in by_name.items() if "equally close" in k)
    (cands, refs), _ = case_inputs(case, 0, i, CPU)
    assert all(sorted(len(r) for r in rs)[:2] == [len(cd) - 1, len(cd) + 1] for cd, rs in zip(cands, refs, strict=True))
    assert any(len(rs) == 3 for rs in refs)  # a third, longest reference: "longest" and "ties to the longer" differ
    i, case = next(v for k, v in by_name.items() if "BLEU is 0" in k)
    args, _ = case_inputs(case, 0, i, CPU)
    assert _bleu_ref(*args) == 0 and _bleu_with(mean="arithmetic")(*args) > 0


# ----------------------------------------------------------------------------- the book's library agrees


def _lmbook_beam(log_probs, bos, eos, beam_size, max_len, alpha):
    step = lambda prefix: log_probs[len(prefix) - 1, prefix[-1]]  # noqa: E731
    (tokens, score), *_ = lmbook.decoding.beam_search(step, bos, eos, beam_size, max_len, length_penalty=alpha)
    return tokens, score


@pytest.mark.parametrize(("task", "ours"), [
    ("teacher_forcing_loss", lambda logits, y, pad_id: lmbook.functional.cross_entropy(logits, y[:, 1:], pad_id)),
    ("greedy_decode", lambda log_probs, bos, eos, max_len: lmbook.decoding.greedy_decode(
        lambda prefix: log_probs[len(prefix) - 1, prefix[-1]], bos, eos, max_len)),
    ("beam_search", _lmbook_beam),
    ("corpus_bleu", lmbook.metrics.corpus_bleu),
])
@pytest.mark.parametrize("seed", [0, 7])
def test_the_book_library_agrees_with_the_grader(task, ours, seed):
    """The chapter's lmbook code and the exercise's references are two implementations: they must agree."""
    c = BY_TASK[task]
    assert library_agrees(c, lambda *args, **kwargs: ours(*to_reference(args), **kwargs), seed) == (
        len(c.cases) + len(c.hidden_cases))


@pytest.mark.parametrize(("task", "answer"), [
    ("teacher_forcing_loss", lambda logits, y, pad_id: F.cross_entropy(logits.transpose(1, 2), y[:, 1:],
                                                                       ignore_index=pad_id)),
    ("teacher_forcing_loss", lambda logits, y, pad_id: lmbook.functional.cross_entropy(logits, y[:, 1:], pad_id)),
    ("greedy_decode", lambda log_probs, bos, eos, max_len: lmbook.decoding.greedy_decode(
        lambda prefix: log_probs[len(prefix) - 1, prefix[-1]], bos, eos, max_len)),
    ("beam_search", _lmbook_beam),
    ("corpus_bleu", lmbook.metrics.corpus_bleu),
    ("corpus_bleu", lambda cands, refs: sacrebleu.corpus_bleu([" ".join(c) for c in cands],
                                                              [[" ".join(r[0]) for r in refs]]).score),
])
def test_a_ready_made_implementation_gets_no_credit(task, answer):
    with pytest.raises(CheckFailed, match="not graded"):
        check(task, answer)


def test_a_beam_search_without_its_score_is_a_format_error():
    with pytest.raises(CheckFailed, match=r"expected a tuple \(tokens, score\)"):
        check("beam_search", lambda *args: beam_search(*args)[0])


def test_greedy_tokens_as_floats_or_a_list_of_tensors_are_accepted(capsys):
    check("greedy_decode", lambda *args: [float(t) for t in greedy_decode(*args)])
    check("greedy_decode", lambda *args: list(greedy_decode(*args)))
    assert capsys.readouterr().out.count("✓") == 2


def test_a_bleu_on_the_wrong_scale_is_named():
    with pytest.raises(CheckFailed, match="0-1 scale"):
        check("corpus_bleu", lambda cands, refs: corpus_bleu(cands, refs) / 100)


# ----------------------------------------------------------------------------- the adversarial hidden cases


def _hidden(task, words, seed):
    c = BY_TASK[task]
    i, case = next((i, case) for i, case in enumerate(c.hidden_cases) if words in case.name)
    return case_inputs(case, seed, i, CPU)[0]


@pytest.mark.parametrize("seed", [0, 5, 1234])
def test_the_beam_cases_against_brute_force(seed):
    """Where the beam holds every candidate the reference is the brute force; where the case says so, the best
    output of all ends in <eos> and the beam prunes it (an exhaustive search would be marked wrong)."""
    for words in ("holds every candidate", "3^5"):
        log_probs, bos, eos, beam, max_len, alpha = _hidden("beam_search", words, seed)
        assert beam_ref(log_probs.double(), bos, eos, beam, max_len, alpha)[0] == \
            _brute_force(log_probs.double(), bos, eos, max_len, alpha)[0]
    log_probs, bos, eos, beam, max_len, alpha = _hidden("beam_search", "pruned it", seed)
    best = _brute_force(log_probs.double(), bos, eos, max_len, alpha)[0]
    assert best[-1] == eos and beam_ref(log_probs.double(), bos, eos, beam, max_len, alpha)[0] != best


@pytest.mark.parametrize("seed", [0, 5, 1234])
def test_the_loss_cases_spread_the_rows_and_let_padding_dominate(seed):
    logits, y, pad_id = _hidden("teacher_forcing_loss", "90 apart", seed)
    real = y[:, 1:] != pad_id
    maxima = logits.amax(-1)
    assert float(maxima[real].max() - maxima[real].min()) > 70  # one max for the batch underflows some rows
    assert float(maxima[~real].min()) > float(maxima[real].max()) + 100  # padding would dominate
    assert math.isfinite(float(_tf_loss_ref(logits, y, pad_id)))


@pytest.mark.parametrize("seed", [0, 5, 1234])
def test_the_bleu_cases_tell_the_shortest_reference_from_no_brevity_penalty(seed):
    for words in ("cut short, and", "both shorter and longer"):
        if words == "cut short, and":
            cands, refs = _hidden("corpus_bleu", words, seed)
        else:
            c = BY_TASK["corpus_bleu"]
            i = next(i for i, case in enumerate(c.cases) if words in case.name)
            (cands, refs), _ = case_inputs(c.cases[i], seed, i, CPU)
        c_len = sum(map(len, cands))
        shortest = sum(min(len(r) for r in rs) for rs in refs)
        closest = sum(sorted((abs(len(r) - len(cd)), len(r)) for r in rs)[0][1]
                      for cd, rs in zip(cands, refs, strict=True))
        assert c_len <= shortest < closest, words  # BP with the shortest reference: below 1, not the right one


def test_bleu_as_a_tensor_is_not_what_the_statement_asks():
    with pytest.raises(CheckFailed, match="expected a number"):
        check("corpus_bleu", lambda cands, refs: torch.tensor(corpus_bleu(cands, refs)))
