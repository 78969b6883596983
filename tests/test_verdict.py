"""The one decision for Jupyter and the grader: values cross the wall unchanged in type, a verdict is the same
both ways, side effects are seen, and a known mistake is named only when it explains every case."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

from lmbook.grading import judge, runner, values
from lmbook.grading.checks import (
    CallWatch,
    Case,
    Check,
    CheckFailed,
    Mutant,
    case_inputs,
    case_seed,
    find_forbidden_use,
    planned,
    run_check,
)
from lmbook.grading.compare import describe_scalar_mismatch, describe_tensor_mismatch
from lmbook.grading.verdict import Outcome, decide, forbidden_message

CPU = torch.device("cpu")


def grader_verdict(check: Check, answer, *, hidden: bool, seed: int) -> tuple[bool, str]:
    """The grader's path without the sandbox process: inputs encoded by the judge and decoded by the runner, the
    result encoded by the runner and decoded by the judge (through JSON, as on the pipes), then the shared
    decision."""
    reason = find_forbidden_use(answer, check)  # the runner's second opinion to the static analysis
    if reason:
        return False, forbidden_message(check, reason)
    outcomes = []
    for i, (case, index, parent) in enumerate(planned(check, hidden)):
        args, kwargs = case_inputs(case, seed, index, CPU)
        sent: values.Arrays = {}  # what the judge sends, and the runner's reply, as they cross the pipes
        specs = [judge._write(v, f"c{i}_a{n}", sent) for n, v in enumerate(args)]
        kw_specs = {k: judge._write(v, f"c{i}_{k}", sent) for k, v in kwargs.items()}
        wire = json.loads(json.dumps(values.to_wire(sent)))
        a = [runner._load(spec, wire, CPU) for spec in specs]
        kw = {k: runner._load(spec, wire, CPU) for k, spec in kw_specs.items()}
        watch = CallWatch(check)  # the runner's run-time second opinion
        got = values.call_once(answer, a, kw, case_seed(seed, index), around=watch, grad_of=check.grad_of,
                               stand_ins=check.builds_on, trained_outputs=check.trained_outputs)
        if watch.found:
            return False, forbidden_message(check, watch.found)
        reply: values.Arrays = {}
        sent_back = json.loads(json.dumps(runner.reply_of(got, f"c{i}", reply)))
        outcomes.append(judge.outcome_of(sent_back, check, case, case_seed(seed, index), args, kwargs, parent,
                                         json.loads(json.dumps(values.to_wire(reply)))))
    return decide(check, outcomes, hidden)


def kernel_verdict(check: Check, answer, *, hidden: bool, seed: int, capsys) -> tuple[bool, str]:
    try:
        run_check(check, answer, hidden=hidden, seed=seed, device=CPU)
    except CheckFailed as e:
        return False, str(e)
    return True, capsys.readouterr().out.strip()


# ----------------------------------------------------------------------------- values across the wall


@pytest.mark.parametrize("value", [3, 2.5, True, np.float32(1.5), np.int64(7), "mean", None, [1, 2], (1, "a"),
                                   {"k": 1.0}, [[1, [2.0, ("x",)]]]])
def test_plain_values_keep_their_type_across_the_wall(value):
    back = values.round_trip(value)
    assert back == value and type(back) is type(value), (value, back)


def test_a_string_arrives_as_a_new_object_in_jupyter_as_in_the_grader():
    literal = "mean"
    assert values.round_trip(literal) == literal and values.round_trip(literal) is not literal


def test_tensors_keep_dtype_and_gradient_tracking():
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.bool):
        t = torch.arange(6).reshape(2, 3).to(dtype)
        back = values.round_trip(t)
        assert back.dtype == dtype and torch.equal(back, t)
    assert values.round_trip(torch.ones(2, requires_grad=True) * 2).requires_grad
    assert not values.round_trip(torch.ones(2)).requires_grad


LAYOUTS = {"a slice of a longer sequence": lambda x: x[:, :-1], "a transpose": lambda x: x.transpose(1, 2),
           "every other position": lambda x: x[:, ::2], "a bfloat16 slice": lambda x: x.bfloat16()[1:, 1:],
           "float64, all axes permuted": lambda x: x.double().permute(2, 0, 1)}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_an_input_that_is_not_contiguous_crosses_the_wall_with_its_layout(layout):
    x = LAYOUTS[layout](torch.randn(3, 5, 4))
    back = values.round_trip(x, inputs=True)
    assert not back.is_contiguous() and back.stride() == x.stride(), (back.stride(), x.stride())
    assert back.dtype == x.dtype and torch.equal(back, x)
    assert values.round_trip(x).is_contiguous(), "a student's result is read as values, whatever its layout"


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_input_shown_to_paste_keeps_its_layout(layout):
    from lmbook.grading.reproduce import tensor_code

    x = values.round_trip(LAYOUTS[layout](torch.randn(3, 5, 4)), inputs=True)  # as the sandbox has it
    made = eval(tensor_code(x), {"torch": torch})  # noqa: S307 - the grader's own code for a tensor
    assert made.stride() == x.stride() and made.dtype == x.dtype and torch.equal(made, x), tensor_code(x)


def test_a_slice_is_shown_as_a_slice_of_the_larger_tensor():
    from lmbook.grading.reproduce import tensor_code

    code = tensor_code(torch.arange(12.0).reshape(2, 3, 2)[:, :-1])
    assert code.endswith("[:, :2]"), code


def test_a_result_is_bounded_but_the_graders_inputs_are_not():
    long = list(range(values.MAX_ITEMS + 10))
    assert len(values.round_trip(long)) == values.MAX_ITEMS
    assert values.round_trip(long, inputs=True) == long
    deep = [[[[["x"]]]]]
    assert type(values.round_trip(deep)[0][0][0][0]).__name__ == "list"  # a stand-in named after the type
    assert values.round_trip(deep, inputs=True) == deep


def test_an_unknown_object_becomes_a_stand_in_that_names_its_type():
    class Weird:
        pass
    assert type(values.round_trip(Weird())).__name__ == "Weird"


# ----------------------------------------------------------------------------- one verdict, both ways


def _double(x):
    return 2 * x


def _cases(*shapes):
    return [Case(f"shape {s}", lambda g, d, s=s: ((torch.randn(*s, generator=g).to(d),), {})) for s in shapes]


DOUBLE = Check(task="double", what="doubles", reference=_double, cases=_cases((3, 4), (2, 2)),
               hidden_cases=_cases((5, 1)), compare=lambda out, ref: describe_tensor_mismatch(out, ref),
               mutants=[Mutant(lambda x: 3 * x, "tripled instead of doubled")])


def _in_place(x):
    x.mul_(2)
    return x


def _as_numpy(x):
    return (2 * x).numpy()


def _float32_scalar(x):
    return np.float32(2 * float(x.sum()))


def _detached_list(x):
    return (2 * x).tolist()


ANSWERS = {"right": _double, "in place": _in_place, "numpy array": _as_numpy, "list": _detached_list,
           "tripled": lambda x: 3 * x, "raises": lambda x: x @ torch.ones(7)}


@pytest.mark.parametrize("name", ANSWERS)
@pytest.mark.parametrize("hidden", [False, True])
def test_a_verdict_is_the_same_in_jupyter_and_in_the_grader(name, hidden, capsys):
    kernel = kernel_verdict(DOUBLE, ANSWERS[name], hidden=hidden, seed=4, capsys=capsys)
    grader = grader_verdict(DOUBLE, ANSWERS[name], hidden=hidden, seed=4)
    assert kernel == grader
    assert kernel[0] == (name == "right"), kernel[1]


def test_changing_an_input_in_place_fails_and_says_so():
    ok, message = grader_verdict(DOUBLE, _in_place, hidden=False, seed=0)
    assert not ok and "changed its input `x` in place" in message, message


SUM = Check(task="total", what="sum", reference=lambda x: float(x.sum()), cases=_cases((3,)), hidden_cases=(),
            compare=lambda out, ref: describe_scalar_mismatch(out, ref))
SUM_TENSOR_ONLY = Check(task="total", what="sum", reference=lambda x: float(x.sum()), cases=_cases((3,)),
                        hidden_cases=(),
                        compare=lambda out, ref: describe_scalar_mismatch(out, ref, accept=("tensor",)))


def test_a_numpy_scalar_gets_the_same_verdict_both_ways(capsys):
    def answer(x):
        return np.float32(float(x.sum()))
    for check in (SUM, SUM_TENSOR_ONLY):
        assert kernel_verdict(check, answer, hidden=False, seed=1, capsys=capsys) == \
            grader_verdict(check, answer, hidden=False, seed=1)
    assert grader_verdict(SUM, answer, hidden=False, seed=1)[0]


def test_a_python_float_fails_where_the_statement_asks_for_a_tensor():
    ok, message = grader_verdict(SUM_TENSOR_ONLY, lambda x: float(x.sum()), hidden=False, seed=1)
    assert not ok and "returned a float, expected a one-element tensor" in message, message


def test_a_function_without_return_is_told_it_returned_none_and_why(capsys):
    def answer(x):
        y = 2 * x  # computed, never returned: the function gives None  # noqa: F841

    for verdict in (grader_verdict(DOUBLE, answer, hidden=False, seed=0),
                    kernel_verdict(DOUBLE, answer, hidden=False, seed=0, capsys=capsys)):
        ok, message = verdict
        assert not ok and "returned None (a function that ends without a return statement gives None)" in message, \
            message
        assert "NoneType" not in message, message


def test_a_type_is_named_with_its_article():
    message = grader_verdict(SUM_TENSOR_ONLY, lambda x: int(x.sum() > 0), hidden=False, seed=1)[1]
    assert "returned an int, expected a one-element tensor" in message and "a int" not in message, message


def test_comparing_strings_with_is_fails_in_jupyter_as_in_the_grader(capsys):
    with warnings.catch_warnings():  # the student's mistake under test: Python warns of it when compiling
        warnings.simplefilter("ignore", SyntaxWarning)
        namespace: dict = {}
        exec(compile('def pick(x, how):\n    return x.mean() if how is "mean" else x.sum()', "<student>", "exec"),
             namespace)
    pick = namespace["pick"]
    check = Check(task="pick", what="pools", reference=lambda x, how: x.mean() if how == "mean" else x.sum(),
                  cases=[Case("mean", lambda g, d: ((torch.randn(4, generator=g),), {"how": "mean"}))],
                  hidden_cases=(), compare=lambda out, ref: describe_scalar_mismatch(out, ref))
    kernel = kernel_verdict(check, pick, hidden=False, seed=0, capsys=capsys)
    assert kernel == grader_verdict(check, pick, hidden=False, seed=0)
    assert not kernel[0]


def test_a_tensor_left_tracking_gradients_fails_where_the_statement_says_none():
    weight = torch.ones(1, requires_grad=True)
    check = Check(task="double", what="doubles", reference=_double, cases=_cases((3,)), hidden_cases=(),
                  compare=lambda out, ref: describe_tensor_mismatch(out, ref), no_grad=True)
    ok, message = grader_verdict(check, lambda x: 2 * x * weight, hidden=False, seed=0)
    assert not ok and "still tracks gradients" in message, message


# ----------------------------------------------------------------------------- naming a mistake


def _scale_cases():
    # the first case is degenerate (all zeros: every scaling mistake gives the right answer there)
    return [Case("zeros", lambda g, d: ((torch.zeros(3, device=d),), {})),
            Case("signed", lambda g, d: ((torch.tensor([-1.5, 2.0, -3.0], device=d),), {}))]


SCALE = Check(task="double", what="doubles", reference=_double, cases=_scale_cases(), hidden_cases=(),
              compare=lambda out, ref: describe_tensor_mismatch(out, ref),
              mutants=[Mutant(lambda x: 3 * x, "multiplied by 3"), Mutant(lambda x: x + x + x, "added x three times"),
                       Mutant(lambda x: x.abs() * 2, "took the absolute value")])


def test_a_mistake_is_named_when_it_explains_every_case():
    ok, message = decide(SCALE, _outcomes(SCALE, lambda x: x.abs() * 2), hidden=False)
    assert not ok and "likely cause: took the absolute value" in message, message


def test_two_mistakes_that_explain_the_outputs_are_both_said():
    ok, message = decide(SCALE, _outcomes(SCALE, lambda x: 3 * x), hidden=False)
    assert "multiplied by 3; or added x three times" in message and "likely cause" not in message, message


def test_a_mistake_that_matches_only_the_degenerate_case_is_not_named():
    ok, message = decide(SCALE, _outcomes(SCALE, lambda x: 4 * x), hidden=False)
    assert not ok and "likely cause" not in message and "known mistake" not in message, message
    assert "2 times the expected one" in message, message  # said precisely instead


def _outcomes(check: Check, answer) -> list[Outcome]:
    outs = []
    for i, case in enumerate(check.cases):
        args, kwargs = case_inputs(case, 0, i, CPU)
        outs.append(Outcome(case, case_seed(0, i), args, kwargs, answer(*args, **kwargs)))
    return outs


# ----------------------------------------------------------------------------- what differs, said precisely


@pytest.mark.parametrize(("out", "says"), [
    (lambda r: -r, "opposite sign"),
    (lambda r: r / 8 ** 0.5, "0.3536 times the expected one"),
    (lambda r: r.transpose(-1, -2), "transpose of the expected matrix"),
    (lambda r: torch.cat([r[:1], r[1:] + 1]), "off by a constant"),
    (lambda r: torch.cat([r[:2], r[2:] * torch.rand(r[2:].shape, generator=torch.Generator().manual_seed(0))]),
     "only at indices 2–3 of dimension 0 (0–1 are right)"),
    (lambda r: r.reshape(4, 2, 2).transpose(0, 1), "the same sizes in another order"),
    (lambda r: r.unsqueeze(0), "a dimension of size 1 too many"),
])
def test_a_mismatch_is_described_by_its_pattern(out, says):
    ref = torch.randn(4, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    if says == "the same sizes in another order":
        ref = ref.reshape(4, 2, 2)
        problem = describe_tensor_mismatch(ref.transpose(0, 1), ref)
    else:
        problem = describe_tensor_mismatch(out(ref), ref)
    assert problem and says in problem, problem


# ----------------------------------------------------------------------------- the ready-made answer, in Jupyter

SOFTMAX = Check(task="softmax", what="softmax", reference=lambda x: torch.softmax(x, -1), cases=_cases((2, 3)),
                hidden_cases=(), compare=lambda out, ref: describe_tensor_mismatch(out, ref),
                forbidden=(torch.softmax, torch.nn.functional.softmax), forbidden_attrs=("softmax",))


def _decorated():
    @torch.no_grad()
    def answer(x):
        return torch.nn.functional.softmax(x, -1)
    return answer


def _default_argument():
    def answer(x, op=torch.softmax):
        return op(x, -1)
    return answer


def _closure():
    op = torch.nn.functional.softmax

    def answer(x):
        return op(x, -1)
    return answer


@pytest.mark.parametrize("make", [_decorated, _default_argument, _closure])
def test_a_ready_made_answer_behind_a_decorator_default_or_closure_gets_no_credit(make):
    with pytest.raises(CheckFailed, match="not graded"):
        run_check(SOFTMAX, make(), device=CPU)


def test_an_own_softmax_behind_a_decorator_is_graded():
    @torch.no_grad()
    def answer(x):
        e = (x - x.amax(-1, keepdim=True)).exp()
        return e / e.sum(-1, keepdim=True)
    assert run_check(SOFTMAX, answer, device=CPU, verbose=False) == 1


# ----------------------------------------------------------------------------- the seed a sampling answer draws from


def test_a_case_seed_draws_what_torch_manual_seed_draws():
    """The checks seed torch's generator without torch.manual_seed (its cost, see values.seed_all): a sampling
    answer must draw exactly the numbers it drew before, in Jupyter and in the grader alike."""
    torch.manual_seed(1234)
    expected = (torch.rand(5), torch.randint(0, 10, (5,)), torch.multinomial(torch.ones(7), 3))
    torch.manual_seed(99)  # whatever state the notebook left
    values.seed_all(1234)
    got = (torch.rand(5), torch.randint(0, 10, (5,)), torch.multinomial(torch.ones(7), 3))
    for e, g in zip(expected, got, strict=True):
        assert torch.equal(e, g), f"seed_all(1234) drew {g.tolist()}, torch.manual_seed(1234) {e.tolist()}"
