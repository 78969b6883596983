"""A loss the course trains through is checked for the gradient it gives, not only its value.

The reference's gradient comes from torch.autograd on the task's reference in float64; the answers here are
written as students write them: right in value and wrong in gradient, right in both, or changing an input.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from lmbook.grading import gradients, judge, runner, values
from lmbook.grading.checks import CheckFailed, case_inputs, run_check
from lmbook.tasks.ch01 import CROSS_ENTROPY
from lmbook.tasks.ch06 import MULTIHEAD_ATTENTION
from lmbook.tasks.ch11 import DPO_LOSS, SWIGLU

CPU = torch.device("cpu")


def _verdict(check, answer, hidden=False) -> str:
    try:
        run_check(check, answer, hidden=hidden, device=CPU, verbose=False)
    except CheckFailed as e:
        return str(e)
    return "passed"


def dpo_right(pc, pr, rc, rr, beta):
    return F.softplus(-beta * ((pc - rc) - (pr - rr))).mean()


def dpo_detached(pc, pr, rc, rr, beta):
    return F.softplus(-beta * ((pc.detach() - rc) - (pr.detach() - rr))).mean()


def dpo_item(pc, pr, rc, rr, beta):
    return torch.tensor(dpo_right(pc, pr, rc, rr, beta).item(), dtype=pc.dtype)


def dpo_nan_branch(pc, pr, rc, rr, beta):
    z = beta * ((pc - rc) - (pr - rr))
    return torch.where(z > 0, torch.log1p(torch.exp(-z)), -z + torch.log1p(torch.exp(z))).mean()


def ce_constant_normaliser(logits, targets, ignore_index=-100):
    logp = logits - torch.logsumexp(logits, -1, keepdim=True).detach()
    keep = targets != ignore_index
    return -logp[keep].gather(-1, targets[keep].unsqueeze(-1)).mean()


def ce_right(logits, targets, ignore_index=-100):
    keep = targets != ignore_index
    return -torch.log_softmax(logits[keep], -1).gather(-1, targets[keep].unsqueeze(-1)).mean()


@pytest.mark.parametrize("answer", [dpo_detached, dpo_item], ids=["detached", "item"])
def test_a_loss_with_the_right_value_and_no_gradient_fails_and_says_which_input(answer):
    said = _verdict(DPO_LOSS, answer)
    assert "the value is right, but no gradient reaches `policy_chosen`" in said, said
    hidden = _verdict(DPO_LOSS, answer, hidden=True)
    assert "returned the right value, but no gradient reaches `policy_chosen`" in hidden, hidden


def test_a_loss_with_part_of_its_graph_detached_is_told_its_gradient_differs():
    said = _verdict(CROSS_ENTROPY, ce_constant_normaliser)
    assert "another gradient than the formula (at one entry the formula's gradient is" in said, said
    hidden = _verdict(CROSS_ENTROPY, ce_constant_normaliser, hidden=True)
    assert "another gradient than the formula:" in hidden and "at one entry" not in hidden, hidden


def test_a_nan_gradient_from_a_branch_torch_where_drops_is_named():
    said = _verdict(DPO_LOSS, dpo_nan_branch, hidden=True)
    assert "holds nan or inf where the formula's is finite" in said, said


@pytest.mark.parametrize("check, answer", [(DPO_LOSS, dpo_right), (CROSS_ENTROPY, ce_right)], ids=["dpo", "ce"])
def test_a_right_loss_passes_visible_and_hidden(check, answer):
    assert _verdict(check, answer) == "passed"
    assert _verdict(check, answer, hidden=True) == "passed"


def test_the_input_a_loss_is_trained_through_keeps_its_layout_and_can_be_changed_only_as_an_input():
    seen = []

    def ce_in_place(logits, targets, ignore_index=-100):
        seen.append(logits.is_contiguous())
        logits -= logits.amax(-1, keepdim=True)  # autograd would refuse this on a leaf; the task says why
        return ce_right(logits, targets, ignore_index)

    said = _verdict(CROSS_ENTROPY, ce_in_place)
    assert "changed its input `logits` in place" in said and "leaf" not in said, said
    assert False in seen, "the sliced logits reached the answer contiguous"


def _across_the_wall(check, answer):
    """The first case's inputs, the answer's result in its own process, and the grader's outcome of its reply
    (sent as JSON, as the sandbox sends it)."""
    args, kwargs = case_inputs(check.cases[0], 0, 0, CPU)
    result = values.call_once(answer, list(args), kwargs, 0, grad_of=check.grad_of)
    arrays: values.Arrays = {}
    reply = json.loads(json.dumps(runner.reply_of(result, "c0", arrays)))
    outcome = judge.outcome_of(reply, check, check.cases[0], 0, args, kwargs, None,
                               json.loads(json.dumps(values.to_wire(arrays))))
    return (args, kwargs), result, outcome


def test_the_gradient_is_the_same_in_jupyter_and_across_the_sandbox_wall():
    _, result, outcome = _across_the_wall(CROSS_ENTROPY, ce_constant_normaliser)
    torch.testing.assert_close(outcome.grads[0], result["grads"][0], rtol=0, atol=0)


def test_a_reply_that_carries_no_gradient_earns_nothing():
    args, kwargs = case_inputs(CROSS_ENTROPY.cases[0], 0, 0, CPU)
    result = values.call_once(ce_right, list(args), kwargs, 0, grad_of=CROSS_ENTROPY.grad_of)
    arrays: values.Arrays = {}
    reply = runner.reply_of(result, "c0", arrays)
    del reply["grads"]  # what a sandbox whose reply was tampered with sends
    outcome = judge.outcome_of(reply, CROSS_ENTROPY, CROSS_ENTROPY.cases[0], 0, args, kwargs, None,
                               values.to_wire(arrays))
    said = gradients.gradient_problem(CROSS_ENTROPY, args, kwargs, outcome.grads)
    assert said and said.startswith("no gradient reaches `logits`"), said


def test_a_backward_pass_that_raises_is_the_answers_error():
    class Broken(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            raise ValueError("my backward is not written yet")

    def ce_broken(logits, targets, ignore_index=-100):
        return ce_right(Broken.apply(logits), targets, ignore_index)

    said = _verdict(CROSS_ENTROPY, ce_broken)
    assert "computing the gradient through your result raised an error: ValueError: my backward" in said, said


def test_the_weights_of_a_result_with_many_elements_are_fixed_and_not_all_equal():
    w = gradients.cotangent(torch.zeros(2, 3))
    assert torch.equal(w, gradients.cotangent(torch.ones(2, 3))) and len(set(w.flatten().tolist())) == 6
    assert gradients.cotangent(torch.tensor(5.0)).item() == 1.0


def swiglu_down_detached(x, params):  # "the last layer is frozen": its weight is read through .detach()
    h = F.silu(x @ params["gate_proj.weight"].T) * (x @ params["up_proj.weight"].T)
    return h @ params["down_proj.weight"].detach().T


def swiglu_right(x, params):
    return F.linear(F.silu(F.linear(x, params["gate_proj.weight"])) * F.linear(x, params["up_proj.weight"]),
                    params["down_proj.weight"])


def test_each_parameter_of_a_dict_is_checked_and_named_as_the_statement_names_it():
    said = _verdict(SWIGLU, swiglu_down_detached)
    assert "no gradient reaches `params['down_proj.weight']`" in said, said
    for hidden in (False, True):
        assert _verdict(SWIGLU, swiglu_right, hidden=hidden) == "passed", "a right SwiGLU failed"


def test_a_dict_of_parameters_gets_its_gradients_across_the_sandbox_wall():
    (args, kwargs), _, outcome = _across_the_wall(SWIGLU, swiglu_down_detached)
    assert len(outcome.grads) == 1 + len(args[1]), "one gradient for x and one per parameter"
    assert outcome.grads[-1] is None, "the detached down_proj.weight got a gradient across the wall"
    problem = gradients.gradient_problem(SWIGLU, args, kwargs, outcome.grads)
    assert problem is not None and "params['down_proj.weight']" in problem, problem


def mha_weights_detached_for_plotting(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight,
                                      out_proj_bias, n_head, key_padding_mask, causal):
    """Right: the weights returned beside the output are detached (to be plotted); the output is not."""
    y, a = torch.nn.functional.multi_head_attention_forward(
        query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1), query.shape[-1], n_head, in_proj_weight,
        in_proj_bias, None, None, False, 0.0, out_proj_weight, out_proj_bias, key_padding_mask=key_padding_mask,
        need_weights=True, attn_mask=torch.ones(query.shape[1], key.shape[1], dtype=torch.bool,
                                                device=query.device).triu(1) if causal else None,
        average_attn_weights=False)
    return y.transpose(0, 1), a.detach()


def test_attention_weights_returned_to_be_plotted_are_not_trained_through():
    result = values.call_once(mha_weights_detached_for_plotting,
                              list(case_inputs(MULTIHEAD_ATTENTION.cases[0], 0, 0, CPU)[0]), {}, 0,
                              grad_of=MULTIHEAD_ATTENTION.grad_of, trained_outputs=MULTIHEAD_ATTENTION.trained_outputs)
    assert all(g is not None for g in result["grads"]), "the output's gradient did not reach every input"


def lstm_cell_detached_c(x, h, c, W_ih, W_hh, b_ih, b_hh):
    i, f, g, o = (x @ W_ih.T + b_ih + h @ W_hh.T + b_hh).chunk(4, -1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c.detach()


def test_every_output_a_model_is_trained_through_carries_the_gradient():
    """An LSTM cell is trained through h and c (trained_outputs = 2): a detached c, right in value, is caught,
    though h alone gives every input a gradient; the same answer with c attached passes."""
    from lmbook.tasks.ch02 import LSTM_CELL

    def attached(*args):
        h, c = lstm_cell_detached_c(*args)
        i, f, g, _ = (args[0] @ args[3].T + args[5] + args[1] @ args[4].T + args[6]).chunk(4, -1)
        return h, torch.sigmoid(f) * args[2] + torch.sigmoid(i) * torch.tanh(g)

    assert LSTM_CELL.trained_outputs == 2
    args, kwargs = case_inputs(LSTM_CELL.cases[0], 0, 0, CPU)
    for answer, passes in ((lstm_cell_detached_c, False), (attached, True)):
        result = values.call_once(answer, list(args), kwargs, 0, grad_of=LSTM_CELL.grad_of, trained_outputs=2)
        problem = gradients.gradient_problem(LSTM_CELL, args, kwargs, result["grads"])
        assert (problem is None) == passes, (answer.__name__, problem)


def _checks_trained_through():
    import importlib

    for c in range(1, 12):
        for check in importlib.import_module(f"lmbook.tasks.ch{c:02d}").check.checks.values():
            if check.grad_of:
                yield check


@pytest.mark.parametrize("check", list(_checks_trained_through()), ids=lambda c: c.task)
def test_the_reference_passes_a_gradient_to_every_input_the_task_is_trained_through(check):
    """A reference computed outside autograd (a .detach() inside it) would make the gradient check pass anything."""
    reached = None
    for i, case in enumerate([*check.cases, *check.hidden_cases]):
        args, kwargs = case_inputs(case, 0, i, CPU)
        grads = gradients.reference_grads(check, args, kwargs)
        got = [g is not None and bool(g.abs().max() > 0) for g in grads]
        reached = got if reached is None else [a or b for a, b in zip(reached, got, strict=True)]
    names = gradients._names(check, case_inputs(check.cases[0], 0, 0, CPU)[0])
    missing = [n for n, ok in zip(names, reached, strict=True) if not ok]
    assert not missing, f"{check.task}: the reference gives no gradient to {missing} on any case"


def test_a_reference_gradient_is_remembered_by_the_inputs_values_not_their_objects():
    args, kwargs = case_inputs(CROSS_ENTROPY.cases[0], 0, 0, CPU)
    first = gradients.reference_grads(CROSS_ENTROPY, args, kwargs)
    again = gradients.reference_grads(CROSS_ENTROPY, tuple(a.clone() if torch.is_tensor(a) else a for a in args),
                                      kwargs)
    assert again is first, "the same inputs, copied, computed the reference's gradient again"
    moved = (args[0] + 1.0, *args[1:])
    other = gradients.reference_grads(CROSS_ENTROPY, moved, kwargs)
    assert other is not first, "other inputs got the gradient remembered for the first ones"
    direct = gradients.answer_grads(*_reference_out(CROSS_ENTROPY, moved, kwargs))
    torch.testing.assert_close(other[0], direct[0])


def _reference_out(check, args, kwargs):
    args, leaves = gradients.tracked(list(gradients.to_reference(args)), check.grad_of)
    with torch.enable_grad():
        return check.reference(*args, **gradients.to_reference(kwargs)), leaves


def _statements() -> dict[str, str]:
    """Each task's statement in the solutions: the '## Task' cell above the answer cell that defines it."""
    import re
    from pathlib import Path

    import nbformat

    found: dict[str, str] = {}
    for path in sorted((Path(__file__).resolve().parent.parent / "solutions").glob("ch*/*.ipynb")):
        statement = ""
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "markdown" and cell.source.startswith("## Task"):
                statement = cell.source
            if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution"):
                for name in re.findall(r"^def (\w+)\(", cell.source, flags=re.MULTILINE):
                    found.setdefault(name, statement)
    return found


@pytest.mark.parametrize("check", list(_checks_trained_through()), ids=lambda c: c.task)
def test_the_statement_of_a_task_trained_through_says_its_gradient_is_checked(check):
    """A student should learn from the statement, not from a failed check, that `.detach()` loses the points."""
    statement = _statements().get(check.task)
    assert statement is not None, f"no statement found for {check.task}"
    assert "gradient" in statement and "detach" in statement, f"{check.task}'s statement:\n{statement[:400]}"


def rnn_cell_right(x, h, W_x, W_h, b):
    return torch.tanh(x @ W_x.T + h @ W_h.T + b)


def rnn_cell_detached(x, h, W_x, W_h, b):
    return torch.tanh(x @ W_x.T + h @ W_h.T + b).detach()


def test_a_saturated_tanh_whose_float32_gradient_rounds_to_zero_is_not_a_cut_graph():
    """Pre-activations near ±15: 1 - tanh² is 0 in float32 (for torch's own RNNCell as for the answer), and about
    4e-13 in float64, where the check's reference is computed."""
    from lmbook.tasks.ch02 import RNN_CELL

    g = torch.Generator().manual_seed(0)
    args = (torch.randn(3, 4, generator=g), torch.randn(3, 5, generator=g), 0.1 * torch.randn(5, 4, generator=g),
            0.1 * torch.randn(5, 5, generator=g), torch.tensor([15.0, -15.0, 15.0, -15.0, 15.0]))
    for answer, problem in ((rnn_cell_right, None), (rnn_cell_detached, "no gradient reaches `x`")):
        passed, leaves = gradients.tracked(args, RNN_CELL.grad_of)
        grads = gradients.answer_grads(answer(*passed), leaves)
        if answer is rnn_cell_right:
            assert all(float(g.abs().max()) == 0 for g in grads), "every pre-activation should saturate"
        got = gradients.gradient_problem(RNN_CELL, args, {}, grads)
        assert (got is None) if problem is None else (problem in got), (answer.__name__, got)
