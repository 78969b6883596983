"""The exercise checks: right answers pass, known wrong ones fail with their misconception named."""

import math

import pytest
import torch
import torch.nn.functional as F
from test_verdict import grader_verdict, kernel_verdict

import lmbook.functional
import lmbook.word2vec
from lmbook.grading.checks import CheckFailed, run_check
from lmbook.tasks.ch01 import CHECKS, check

BY_TASK = {c.task: c for c in CHECKS}


# Right answers, written differently from the references (loops, other ops), as a student might.
def log_softmax(x, dim=-1):
    m = x.max(dim=dim, keepdim=True).values
    return (x - m) - torch.log(torch.exp(x - m).sum(dim=dim, keepdim=True))


def cross_entropy(logits, targets, ignore_index=-100):
    logp = log_softmax(logits, -1).reshape(-1, logits.shape[-1])
    total, count = 0.0, 0
    for row, t in zip(logp, targets.reshape(-1).tolist(), strict=True):
        if t != ignore_index:
            total, count = total - row[t], count + 1
    return total / count


def perplexity(logits, targets, ignore_index=-100):
    return math.exp(float(cross_entropy(logits, targets, ignore_index)))


def ffnn_forward(context, E, W, b, U, c):
    x = torch.cat([F.embedding(context[:, i], E) for i in range(context.shape[1])], dim=1)
    return F.linear(torch.tanh(F.linear(x, W, b)), U, c)


def sgns_loss(v_c, u_o, u_neg):
    pos = F.logsigmoid(torch.einsum("bd,bd->b", u_o, v_c))
    neg = F.logsigmoid(-torch.einsum("bkd,bd->bk", u_neg, v_c)).sum(1)
    return -(pos + neg).mean()


RIGHT = {"log_softmax": log_softmax, "cross_entropy": cross_entropy, "perplexity": perplexity,
         "ffnn_forward": ffnn_forward, "sgns_loss": sgns_loss}


@pytest.mark.parametrize("task", RIGHT)
@pytest.mark.parametrize("hidden", [False, True])
def test_a_correct_but_different_answer_passes_in_jupyter_and_in_the_grader(task, hidden, capsys):
    kernel = kernel_verdict(BY_TASK[task], RIGHT[task], hidden=hidden, seed=11, capsys=capsys)
    grader = grader_verdict(BY_TASK[task], RIGHT[task], hidden=hidden, seed=11)
    assert kernel[0] and grader[0], f"Jupyter: {kernel[1]}\ngrader: {grader[1]}"


def test_float64_inputs_are_accepted_by_a_correct_answer():
    run_check(BY_TASK["log_softmax"], log_softmax, hidden=True, seed=3)  # a hidden case is float64


def test_a_float32_result_for_float64_inputs_is_named():
    # exercise 1's float64 case is hidden: its feedback names the kind of mistake, not the types the answer chose
    with pytest.raises(CheckFailed, match=r"\[float64 logits around 1000 \(the result stays float64\)\] your code "
                                          "returned another floating dtype than its inputs'"):
        run_check(BY_TASK["log_softmax"], lambda x, dim=-1: log_softmax(x.float(), dim), hidden=True, seed=3)


def test_a_stub_says_it_is_not_implemented():
    def stub(x, dim=-1):
        raise NotImplementedError()
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check("log_softmax", stub)


def test_a_crash_is_reported_with_the_case_and_the_error():
    with pytest.raises(CheckFailed, match=r"\[a \(4, 10\) batch of logits\] your code raised ZeroDivisionError"):
        check("log_softmax", lambda x, dim=-1: 1 / 0)


def test_a_wrong_shape_is_named_before_values():
    with pytest.raises(CheckFailed, match=r"returned shape \(4,\), expected \(4, 10\)"):
        check("log_softmax", lambda x, dim=-1: log_softmax(x, dim).sum(-1))


def test_check_returns_none_so_nbgrader_sees_no_partial_credit():
    assert check("log_softmax", log_softmax) is None


@pytest.mark.parametrize("answer", [
    lmbook.functional.log_softmax,
    torch.log_softmax,
    lambda x, dim=-1: torch.log_softmax(x, dim),
    lambda x, dim=-1: x.log_softmax(dim),
    lambda x, dim=-1: x - torch.logsumexp(x, dim, keepdim=True),
    lambda x, dim=-1: lmbook.functional.log_softmax(x, dim),
])
def test_ready_made_log_softmax_gets_no_credit(answer):
    with pytest.raises(CheckFailed, match="not graded"):
        check("log_softmax", answer)


def _helper_that_cheats(x, dim):
    return torch.log_softmax(x, dim)


def test_a_ready_made_op_hidden_in_a_helper_is_found(monkeypatch):
    def answer(x, dim=-1):
        return _helper_that_cheats(x, dim)
    monkeypatch.setattr(_helper_that_cheats, "__module__", "__main__")  # as if written in the notebook
    with pytest.raises(CheckFailed, match="not graded"):
        check("log_softmax", answer)


def test_lmbook_word2vec_answer_gets_no_credit():
    with pytest.raises(CheckFailed, match="not graded"):
        check("sgns_loss", lmbook.word2vec.sgns_loss)


def test_own_log_softmax_may_be_used_in_cross_entropy():
    check("cross_entropy", cross_entropy)  # calls the student's own log_softmax: allowed


def test_failure_renders_without_a_traceback_of_grading_code():
    with pytest.raises(CheckFailed) as err:
        check("log_softmax", lambda x, dim=-1: x)
    rendered = "\n".join(err.value._render_traceback_())
    assert "checks.py" not in rendered and "Traceback" not in rendered
    assert "log_softmax" in rendered


def test_feedback_preprocessor_strips_tracebacks_that_quote_hidden_tests():
    import nbformat

    from lmbook.grading.feedback import HideHiddenTestTracebacks

    hidden = "### BEGIN HIDDEN TESTS\ncheck('x', f, hidden=True, seed=99)\n### END HIDDEN TESTS"
    cell = nbformat.v4.new_code_cell(hidden)
    cell.outputs = [nbformat.v4.new_output("error", ename="NameError", evalue="name 'f' is not defined",
                                           traceback=["----> 2 check('x', f, hidden=True, seed=99)", "NameError"])]
    nb = nbformat.v4.new_notebook(cells=[cell])
    out, _ = HideHiddenTestTracebacks()(nb, {})
    assert out.cells[0].outputs[0]["traceback"] == ["NameError: name 'f' is not defined"]


def test_train_lm_is_retrained_when_the_student_redefines_it(monkeypatch):
    from lmbook.tasks.ch01 import train_lm as ch01

    calls = []

    def make_answer(tag):
        def train_lm(train_ids, vocab_size):
            calls.append(tag)
            raise ValueError("stop here")  # enough to see which definition ran
        return train_lm

    for tag in ("first", "second"):
        with pytest.raises(ValueError):
            check("train_lm", make_answer(tag))
    assert calls == ["first", "second"], calls
    assert len(ch01._trained) == 0


def test_bigram_baseline_matches_a_hand_count():
    from lmbook.tasks.ch01.train_lm import bigram_perplexity

    train, test = torch.tensor([0, 1, 0, 1, 0, 0]), torch.tensor([0, 1, 0])
    # add-k counts, k=0.01, V=2: from 0 -> (0: 1, 1: 2) ; from 1 -> (0: 2, 1: 0)
    p01 = 2.01 / 3.02
    p10 = 2.01 / 2.02
    expected = math.exp(-(math.log(p01) + math.log(p10)) / 2)
    assert bigram_perplexity(train, test, 2) == pytest.approx(expected)


# ----------------------------------------------------------------------------- train_lm's diagnosis
# Logits built by hand stand for trained models: each symptom gets its own advice, not one fixed hint.

def _eval_set(V=10, n=2000, seed=0):
    from lmbook.tasks.ch01.train_lm import EvalSet

    g = torch.Generator().manual_seed(seed)
    freq = torch.softmax(torch.randn(V, generator=g), 0)
    targets = torch.multinomial(freq, n, replacement=True, generator=g)
    targets[0] = V - 1  # every word id appears: V is read from the targets
    unigram = math.exp(float(F.cross_entropy(freq.log().expand(n, V), targets)))
    ev = EvalSet(torch.zeros(n, 12, dtype=torch.long), targets, floor=2.0, bigram=5.0, where="held-out text",
                 unigram=unigram)
    return ev, freq


def _judge(ev, logits, window=4):
    from lmbook.tasks.ch01.train_lm import judge_model

    return judge_model(ev, logits, window, seconds=1.0)


def test_train_lm_a_good_model_passes():
    ev, _ = _eval_set()
    ok, message = _judge(ev, 8.0 * F.one_hot(ev.targets, 10).float())
    assert ok and message.startswith("✓"), message


def test_train_lm_nan_logits_say_training_diverged():
    ev, _ = _eval_set()
    logits = F.one_hot(ev.targets, 10).float()
    logits[5, 3] = float("nan")
    ok, message = _judge(ev, logits)
    assert not ok and "NaN or inf for 1 of 2000" in message and "diverged" in message, message


def test_train_lm_perplexity_above_the_vocabulary_says_confidently_wrong():
    ev, _ = _eval_set()
    ok, message = _judge(ev, 10.0 * F.one_hot((ev.targets + 1) % 10, 10).float())  # shifted by one
    assert not ok and "confidently wrong" in message and "window of 3" not in message, message


def test_train_lm_unigram_level_says_the_context_is_not_used():
    ev, freq = _eval_set()
    ok, message = _judge(ev, freq.log().expand(len(ev.targets), 10).clone())
    assert not ok and "does not use its context" in message, message


def test_train_lm_a_one_word_window_is_told_it_cannot_beat_the_bigram():
    ev, _ = _eval_set()
    logits = 1.1 * F.one_hot(ev.targets, 10).float()  # perplexity 4: between the target (3.5) and the bigram
    ok, message = _judge(ev, logits, window=1)
    assert not ok and "window of 1 word" in message, message
    ok, message = _judge(ev, logits, window=4)
    assert not ok and "window of 1 word" not in message and "does not use its context" not in message, message
