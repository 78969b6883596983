"""Exercise 7's checks: right answers pass, ready-made ones earn nothing, the references are what the papers say,
and the library and the grader agree."""

import math

import pytest
import torch
from check_contract import contract_tests, library_agrees

import lmbook.positions
from lmbook.grading.checks import CheckFailed, case_inputs
from lmbook.tasks.ch07 import CHECKS, check

BY_TASK = {c.task: c for c in CHECKS}
CPU = torch.device("cpu")
NEG_INF = float("-inf")


# Right answers, written differently from the references (exp-log frequencies, rotation matrices, triu, gather).
def sinusoidal_encoding(n_pos, d):
    pe = torch.zeros(n_pos, d)
    pos = torch.arange(n_pos, dtype=torch.float32)[:, None]
    pe[:, 0::2] = torch.sin(pos * torch.exp(-math.log(10000.0) * torch.arange(0, d, 2) / d))
    pe[:, 1::2] = torch.cos(pos * torch.exp(-math.log(10000.0) * torch.arange(0, d, 2) / d))
    return pe


def apply_rope(x, positions):
    d = x.shape[-1]
    theta = torch.exp(-math.log(10000.0) * torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    a = positions.double()[:, None] * theta
    c, s = a.cos().to(x.dtype), a.sin().to(x.dtype)
    R = torch.stack([c, -s, s, c], -1).view(*a.shape, 2, 2)
    return torch.einsum("tpij,...tpj->...tpi", R, x.unflatten(-1, (d // 2, 2))).flatten(-2)


def alibi_bias(n_head, n):
    m = 2 ** math.floor(math.log2(n_head))
    slopes = [2 ** (-8 * (h + 1) / m) for h in range(m)] + [2 ** (-8 * (h + 1) / (2 * m)) for h in range(0, 2 * m, 2)]
    slopes = torch.tensor(slopes[:n_head])
    distance = (torch.arange(n)[:, None] - torch.arange(n)[None, :]).float()
    return (-slopes[:, None, None] * distance).masked_fill(distance < 0, NEG_INF)


def relative_position_bias(table, n_q, n_k):
    D = (table.shape[0] - 1) // 2
    keys, queries = torch.arange(n_k, device=table.device), torch.arange(n_k - n_q, n_k, device=table.device)
    offset = keys[None, :] - queries[:, None]
    index = (offset.clamp(-D, D) + D).flatten()
    return table.gather(0, index[:, None].expand(-1, table.shape[1])).T.reshape(-1, n_q, n_k)


RIGHT = {"sinusoidal_encoding": sinusoidal_encoding, "apply_rope": apply_rope, "alibi_bias": alibi_bias,
         "relative_position_bias": relative_position_bias}

(test_every_task_has_a_right_answer_here,
 test_a_correct_but_different_answer_passes_in_jupyter_and_in_the_grader,
 test_a_correct_answer_passes_on_a_gpu_too) = contract_tests(CHECKS, RIGHT)


def _lib_alibi(n_head, n):
    return lmbook.positions.alibi_bias(n_head, n).masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), NEG_INF)


def _lib_relative(table, n_q, n_k):
    module = lmbook.positions.RelativePositionBias(table.shape[1], (table.shape[0] - 1) // 2).to(table.dtype)
    with torch.no_grad():
        module.table.copy_(table)
    return module(n_q, n_k)


def test_the_book_library_agrees_with_the_grader():
    """The chapter's lmbook.positions and the exercise's references are two implementations: they must agree."""
    for task, ours in (("sinusoidal_encoding", lmbook.positions.sinusoidal), ("apply_rope", lmbook.positions.rope),
                       ("alibi_bias", _lib_alibi), ("relative_position_bias", _lib_relative)):
        c = BY_TASK[task]
        assert library_agrees(c, ours) == len(c.cases) + len(c.hidden_cases), task


def test_the_sinusoid_reference_starts_at_sin_0_cos_0_and_pairs_sin_with_cos():
    pe = BY_TASK["sinusoidal_encoding"].reference(3, 6)
    assert pe[0].tolist() == [0.0, 1.0] * 3
    torch.testing.assert_close(pe[:, 0::2] ** 2 + pe[:, 1::2] ** 2, torch.ones(3, 3, dtype=pe.dtype))
    assert pe[1, 0] == pytest.approx(math.sin(1.0)) and pe[2, 4] == pytest.approx(math.sin(2 * 10000 ** (-4 / 6)))


def test_the_rope_reference_gives_scores_that_depend_only_on_the_offset():
    ref = BY_TASK["apply_rope"].reference
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 8, generator=g, dtype=torch.float64).unbind()
    pos = torch.arange(40)
    rq, rk = ref(q.expand(40, 8), pos), ref(k.expand(40, 8), pos)
    for offset in (0, 1, 7):
        scores = (rq[: 40 - offset] * rk[offset:]).sum(-1)
        assert float(scores.max() - scores.min()) < 1e-12, f"offset {offset}: the scores vary with the position"
    assert not torch.allclose(rq[0] @ rk[1], rq[0] @ rk[2])


def test_the_rope_reference_leaves_position_zero_alone_and_keeps_lengths():
    ref = BY_TASK["apply_rope"].reference
    x = torch.randn(3, 5, 6, dtype=torch.float64)
    out = ref(x, torch.tensor([0, 4, 9, 1, 0]))
    torch.testing.assert_close(out[:, 0], x[:, 0])
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1))


@pytest.mark.parametrize(("n_head", "slopes"), [
    (8, [2.0 ** -k for k in range(1, 9)]),
    (4, [2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8]),
    (6, [2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8, 2.0 ** -1, 2.0 ** -3]),  # 4 heads' slopes, then 8 heads' 1st, 3rd
    (1, [2.0 ** -8]),
])
def test_the_alibi_reference_has_the_papers_slopes(n_head, slopes):
    bias = BY_TASK["alibi_bias"].reference(n_head, 3)
    torch.testing.assert_close(-bias[:, 1, 0], torch.tensor(slopes, dtype=bias.dtype))
    assert torch.isinf(bias[:, 0, 1]).all() and (bias[:, 2, 2] == 0).all()


def test_the_relative_reference_reads_row_D_on_the_diagonal_and_clips_far_offsets():
    table = torch.arange(10.0).view(5, 2)  # D = 2, offsets -2 … 2 in rows 0 … 4
    out = BY_TASK["relative_position_bias"].reference(table, 4, 4)
    assert out[0].diagonal().tolist() == [4.0] * 4  # row D, head 0
    assert out[1, 3, 0] == 1.0 and out[1, 0, 3] == 9.0  # offsets -3 and +3 clipped to rows 0 and 4


def test_the_relative_bias_lets_the_gradient_reach_the_table():
    table = torch.randn(7, 2, requires_grad=True)
    relative_position_bias(table, 3, 5).sum().backward()
    assert table.grad is not None and table.grad.sum() == 2 * 3 * 5


def _positions_held(n_pos, d, pe=lmbook.positions.sinusoidal):
    return pe(n_pos, d)


@pytest.mark.parametrize(("task", "answer"), [
    ("sinusoidal_encoding", lmbook.positions.sinusoidal),
    ("sinusoidal_encoding", _positions_held),
    ("apply_rope", lmbook.positions.rope),
    ("alibi_bias", _lib_alibi),
    ("relative_position_bias", _lib_relative),
])
def test_a_ready_made_implementation_gets_no_credit(task, answer):
    with pytest.raises(CheckFailed, match="not graded"):
        check(task, answer)


def test_the_inputs_follow_the_statement():
    for c in CHECKS:
        for i, case in enumerate([*c.cases, *c.hidden_cases]):
            args, _ = case_inputs(case, 0, i, CPU)
            if c.task == "apply_rope":
                x, positions = args
                assert positions.dtype == torch.int64 and positions.shape == (x.shape[-2],) and x.shape[-1] % 2 == 0
            elif c.task == "relative_position_bias":
                table, n_q, n_k = args
                assert table.shape[0] % 2 == 1 and 1 <= n_q <= n_k
            else:
                assert all(isinstance(a, int) and a >= 1 for a in args)


# ----------------------------------------------------------------------------- the thinking questions


def test_pe_dot_reference_is_the_dot_product_of_the_encodings_at_every_position():
    from lmbook.tasks.questions.ch07 import PE_DOT

    for k, d in ((1, 4), (3, 8), (10, 16), (-7, 32), (1000, 64)):
        pe = lmbook.positions.sinusoidal(1200, d).double()
        p = torch.arange(max(0, -k), 1200 - max(k, 0))
        dots = (pe[p] * pe[p + k]).sum(-1)  # every position p the table holds
        want = PE_DOT.reference(k, d)
        assert torch.allclose(dots, torch.full_like(dots, want), atol=2e-4), (k, d, want, dots[:3])


def test_position_parameters_reference_counts_what_the_models_hold():
    """The book's models with each scheme, against the same model with none: the difference is the count."""
    from lmbook.causal_lm import CausalLM, LMConfig
    from lmbook.tasks.questions.ch07 import POSITION_PARAMETERS

    size = dict(vocab_size=30, block_size=12, d_model=32, n_layer=3, d_ff=64, n_head=4)
    base = sum(p.numel() for p in CausalLM(LMConfig(**size, positions="none")).parameters())
    for scheme in ("learned", "sinusoidal", "rope", "alibi", "relative"):
        model = CausalLM(LMConfig(**size, positions=scheme))
        extra = sum(p.numel() for p in model.parameters()) - base
        want = POSITION_PARAMETERS.reference(scheme, n_layer=3, n_head=4, d_model=32, block_size=12,
                                             max_distance=12)  # the book's D is the block size
        assert extra == want, f"{scheme}: the model adds {extra}, the reference says {want}"


def test_position_parameters_reference_counts_shaws_tables_as_tensor2tensor_builds_them():
    """Per layer, one (2k + 1, d_head) table for the keys and one for the values, shared by the heads."""
    from lmbook.tasks.questions.ch07 import POSITION_PARAMETERS

    n_layer, n_head, d_model, k = 6, 8, 512, 16  # Shaw et al.'s base model
    per_layer = 2 * (2 * k + 1) * (d_model // n_head)
    assert POSITION_PARAMETERS.reference("shaw", n_layer, n_head, d_model, 100, k) == n_layer * per_layer


def test_alibi_weight_ratio_reference_is_the_softmax_of_biased_equal_scores():
    from lmbook.tasks.questions.ch07 import ALIBI_WEIGHT_RATIO

    n = 12
    for head, near, far in ((0, 1, 3), (3, 0, 8), (7, 2, 11)):
        scores = torch.zeros(n, dtype=torch.float64)  # equal content scores for every key
        bias = lmbook.positions.alibi_bias(8, n)[head, n - 1]  # the last query's row: -m (i - j)
        w = torch.softmax(scores + bias, dim=-1)
        m = lmbook.positions.alibi_slopes(8)[head].item()
        got = (w[n - 1 - near] / w[n - 1 - far]).item()
        assert got == pytest.approx(ALIBI_WEIGHT_RATIO.reference(m, near, far), rel=1e-12)
