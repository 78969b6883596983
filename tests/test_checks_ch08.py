"""Exercise 8's checks: right answers pass, ready-made ones earn nothing, the references are torch's layers and agree
with the formulas written out, and the library and the grader agree."""

import math

import pytest
import torch
import torch.nn.functional as F
from check_contract import contract_tests, library_agrees
from torch import nn

import lmbook.transformer
from lmbook.grading.checks import CheckFailed, case_inputs
from lmbook.grading.verdict import case_problem
from lmbook.tasks.ch08 import CHECKS, check

BY_TASK = {c.task: c for c in CHECKS}
CPU = torch.device("cpu")
NEG_INF = float("-inf")


# Right answers, written differently from the references (loops over the sub-layers, one function for every
# attention, masks as -inf biases, F.layer_norm where a block may use it).
def layer_norm(x, weight, bias, eps=1e-5):
    d = x.shape[-1]
    centred = x - x.sum(-1, keepdim=True) / d
    return centred * torch.rsqrt(centred.square().sum(-1, keepdim=True) / d + eps) * weight + bias


def feed_forward(x, w1, b1, w2, b2):
    return torch.clamp(x @ w1.mT + b1, min=0.0) @ w2.mT + b2


def _mha(h, context, params, name, n_head, blocked):
    """Multi-head attention; ``blocked`` (broadcast to (B, h, n_q, n_k)) is True where attention is not allowed."""
    B, n_q, d = h.shape
    w, b = params[f"{name}.in_proj_weight"], params[f"{name}.in_proj_bias"]
    q = F.linear(h, w[:d], b[:d]).view(B, n_q, n_head, -1).transpose(1, 2)
    k = F.linear(context, w[d:2 * d], b[d:2 * d]).view(B, context.shape[1], n_head, -1).transpose(1, 2)
    v = F.linear(context, w[2 * d:], b[2 * d:]).view(B, context.shape[1], n_head, -1).transpose(1, 2)
    bias = torch.zeros(blocked.shape, dtype=h.dtype, device=h.device).masked_fill(blocked, NEG_INF)
    a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // n_head) + bias, dim=-1)
    y = (a @ v).transpose(1, 2).reshape(B, n_q, d)
    return F.linear(y, params[f"{name}.out_proj.weight"], params[f"{name}.out_proj.bias"])


def _sublayers(x, steps, params, norm_first):
    def norm(h, i):
        return F.layer_norm(h, h.shape[-1:], params[f"norm{i}.weight"], params[f"norm{i}.bias"])

    for f, i in steps:
        x = x + f(norm(x, i)) if norm_first else norm(x + f(x), i)
    return x


def _ffn(params):
    return lambda h: feed_forward(h, params["linear1.weight"], params["linear1.bias"], params["linear2.weight"],
                                  params["linear2.bias"])


def encoder_block(x, key_padding_mask, params, n_head, norm_first):
    padded = key_padding_mask[:, None, None, :]
    steps = [(lambda h: _mha(h, h, params, "self_attn", n_head, padded), 1), (_ffn(params), 2)]
    return _sublayers(x, steps, params, norm_first)


def decoder_block(y, memory, memory_key_padding_mask, params, n_head, norm_first):
    T = y.shape[1]
    future = torch.ones(T, T, dtype=torch.bool, device=y.device).triu(1)
    padded = memory_key_padding_mask[:, None, None, :]
    steps = [(lambda h: _mha(h, h, params, "self_attn", n_head, future), 1),
             (lambda h: _mha(h, memory, params, "multihead_attn", n_head, padded), 2), (_ffn(params), 3)]
    return _sublayers(y, steps, params, norm_first)


RIGHT = {"layer_norm": layer_norm, "feed_forward": feed_forward, "encoder_block": encoder_block,
         "decoder_block": decoder_block}

(test_every_task_has_a_right_answer_here,
 test_a_correct_but_different_answer_passes_in_jupyter_and_in_the_grader,
 test_a_correct_answer_passes_on_a_gpu_too) = contract_tests(CHECKS, RIGHT)


def _torch_encoder(params, n_head, norm_first):
    d, d_ff = params["linear1.weight"].shape[1], params["linear1.weight"].shape[0]
    layer = nn.TransformerEncoderLayer(d, n_head, d_ff, dropout=0.0, batch_first=True, norm_first=norm_first)
    layer = layer.to(params["linear1.weight"].dtype)  # first: loaded into float32, float64 weights lose digits
    layer.load_state_dict(params)
    return layer.eval()


def _torch_decoder(params, n_head, norm_first):
    d, d_ff = params["linear1.weight"].shape[1], params["linear1.weight"].shape[0]
    layer = nn.TransformerDecoderLayer(d, n_head, d_ff, dropout=0.0, batch_first=True, norm_first=norm_first)
    layer = layer.to(params["linear1.weight"].dtype)  # first: loaded into float32, float64 weights lose digits
    layer.load_state_dict(params)
    return layer.eval()


# ----------------------------------------------------------------------------- the course's library agrees


def _lib_layer_norm(x, weight, bias, eps):
    ln = lmbook.transformer.LayerNorm(x.shape[-1], eps).to(x.dtype)
    ln.weight.copy_(weight)
    ln.bias.copy_(bias)
    return ln(x)


def _lib_feed_forward(x, w1, b1, w2, b2):
    ffn = lmbook.transformer.FeedForward(w1.shape[1], w1.shape[0]).to(x.dtype)
    for linear, w, b in ((ffn.W_1, w1, b1), (ffn.W_2, w2, b2)):
        linear.weight.copy_(w)
        linear.bias.copy_(b)
    return ffn(x)


def _lib_encoder(x, key_padding_mask, params, n_head, norm_first):
    d, d_ff = x.shape[-1], params["linear1.weight"].shape[0]
    block = lmbook.transformer.EncoderBlock(d, n_head, d_ff, norm_first=norm_first).to(x.dtype).eval()
    block.load_torch(_torch_encoder(params, n_head, norm_first))
    return block(x, key_mask=~key_padding_mask)[0]  # lmbook's mask is True at real tokens


def _lib_decoder(y, memory, memory_key_padding_mask, params, n_head, norm_first):
    d, d_ff = y.shape[-1], params["linear1.weight"].shape[0]
    block = lmbook.transformer.DecoderBlock(d, n_head, d_ff, norm_first=norm_first).to(y.dtype).eval()
    block.load_torch(_torch_decoder(params, n_head, norm_first))
    return block(y, memory, memory_mask=~memory_key_padding_mask)[0]


def test_the_book_library_agrees_with_the_grader():
    """The chapter's lmbook.transformer and the exercise's references (torch's) must agree on every case."""
    for task, ours in (("layer_norm", _lib_layer_norm), ("feed_forward", _lib_feed_forward),
                       ("encoder_block", _lib_encoder), ("decoder_block", _lib_decoder)):
        c = BY_TASK[task]
        assert library_agrees(c, ours) == len(c.cases) + len(c.hidden_cases), task


# ----------------------------------------------------------------------------- the references, independently


def _cases(task):
    c = BY_TASK[task]
    return [(case, *case_inputs(case, 0, i, CPU)) for i, case in enumerate([*c.cases, *c.hidden_cases])]


def test_the_layer_norm_reference_is_the_formula_in_plain_python():
    """μ and the biased σ² of each vector with math.fsum, ε inside the square root."""
    c = BY_TASK["layer_norm"]
    for case, (x, w, b, eps), _ in _cases("layer_norm"):
        ref = c.reference(x.double(), w.double(), b.double(), eps)
        rows, out = x.double().reshape(-1, x.shape[-1]).tolist(), ref.reshape(-1, x.shape[-1]).tolist()
        for row, got in zip(rows[:5], out[:5], strict=True):
            d = len(row)
            mu = math.fsum(row) / d
            var = math.fsum((v - mu) ** 2 for v in row) / d
            want = [float(w[i]) * (row[i] - mu) / math.sqrt(var + eps) + float(b[i]) for i in range(d)]
            assert got == pytest.approx(want, rel=1e-9, abs=1e-9), case.name


def test_with_one_feature_layer_norm_gives_the_bias():
    c = BY_TASK["layer_norm"]
    x, b = torch.randn(3, 4, 1, dtype=torch.float64) * 5, torch.tensor([0.7], dtype=torch.float64)
    assert torch.equal(c.reference(x, torch.tensor([2.0], dtype=torch.float64), b, 1e-5), b.expand(3, 4, 1))


def test_the_large_mean_case_is_the_one_the_shortcut_variance_fails():
    """Catastrophic cancellation: E[x²] − E[x]² in float32 is far off where the mean is 250 spreads away, while
    the two-pass variance stays within the tolerance (so a right float32 answer passes)."""
    c = BY_TASK["layer_norm"]
    (i, case), = [(i, cs) for i, cs in enumerate(c.hidden_cases) if "large mean" in cs.name]
    (x, w, b, eps), _ = case_inputs(case, 0, i, CPU)
    ref = c.reference(x.double(), w.double(), b.double(), eps)
    mu = x.mean(-1, keepdim=True)
    two_pass = w * (x - mu) / torch.sqrt(((x - mu) ** 2).mean(-1, keepdim=True) + eps) + b
    shortcut = w * (x - mu) / torch.sqrt((x * x).mean(-1, keepdim=True) - mu * mu + eps) + b
    assert c.compare(two_pass, ref) is None
    assert c.compare(shortcut, ref) is not None


def test_the_feed_forward_reference_is_torchs_linear_relu_linear():
    c = BY_TASK["feed_forward"]
    for case, (x, w1, b1, w2, b2), _ in _cases("feed_forward"):
        net = nn.Sequential(nn.Linear(w1.shape[1], w1.shape[0]), nn.ReLU(), nn.Linear(w1.shape[0], w1.shape[1]))
        net = net.to(x.dtype)  # before loading: float64 weights loaded into float32 layers lose their digits
        net.load_state_dict({"0.weight": w1, "0.bias": b1, "2.weight": w2, "2.bias": b2})
        with torch.no_grad():
            assert case_problem(c, case, net(x), (x, w1, b1, w2, b2), {}) is None, case.name


def test_the_weights_are_named_and_shaped_as_torchs_layers_state_dicts():
    for task, kind in (("encoder_block", nn.TransformerEncoderLayer), ("decoder_block", nn.TransformerDecoderLayer)):
        for case, args, _ in _cases(task):
            params, n_head, norm_first = args[-3:]
            d, d_ff = args[0].shape[-1], params["linear1.weight"].shape[0]
            want = kind(d, n_head, d_ff, batch_first=True).state_dict()
            assert list(params) == list(want), case.name
            assert all(params[k].shape == want[k].shape and params[k].dtype == args[0].dtype for k in want)
            assert isinstance(n_head, int) and d % n_head == 0 and isinstance(norm_first, bool)


def test_the_padding_convention_of_the_statement():
    """True = padding, at the end; every sequence has a real first token; the decoder's target has no padding."""
    for task in ("encoder_block", "decoder_block"):
        for case, args, _ in _cases(task):
            pad = args[1] if task == "encoder_block" else args[2]
            assert pad.dtype == torch.bool and not pad[:, 0].any(), case.name
            assert (~pad[:, :-1] | pad[:, 1:]).all(), f"{case.name}: padding comes at the end"


def test_both_orders_of_the_norms_are_tried_visibly_and_hidden():
    for task in ("encoder_block", "decoder_block"):
        c = BY_TASK[task]
        for cases in (c.cases, c.hidden_cases):
            orders = {case_inputs(case, 0, i, CPU)[0][-1] for i, case in enumerate(cases)}
            assert orders == {False, True}, task


def _by_hand_encoder(x, pad, p, n_head, norm_first):
    """The block from torch's functional pieces (not the layer): attention, layer_norm, linear, relu."""
    d = x.shape[-1]

    def attn(h):
        out, _ = F.multi_head_attention_forward(
            h.transpose(0, 1), h.transpose(0, 1), h.transpose(0, 1), d, n_head, p["self_attn.in_proj_weight"],
            p["self_attn.in_proj_bias"], None, None, False, 0.0, p["self_attn.out_proj.weight"],
            p["self_attn.out_proj.bias"], training=False, key_padding_mask=pad, need_weights=False)
        return out.transpose(0, 1)

    def ffn(h):
        return F.linear(F.relu(F.linear(h, p["linear1.weight"], p["linear1.bias"])), p["linear2.weight"],
                        p["linear2.bias"])

    def ln(h, i):
        return F.layer_norm(h, (d,), p[f"norm{i}.weight"], p[f"norm{i}.bias"], 1e-5)

    if norm_first:
        x = x + attn(ln(x, 1))
        return x + ffn(ln(x, 2))
    x = ln(x + attn(x), 1)
    return ln(x + ffn(x), 2)


def test_the_encoder_reference_is_the_block_written_from_torchs_functions_at_real_positions():
    c = BY_TASK["encoder_block"]
    for case, (x, pad, params, n_head, norm_first), _ in _cases("encoder_block"):
        params = {k: v.double() for k, v in params.items()}
        with torch.no_grad():
            ref = c.reference(x.double(), pad, params, n_head, norm_first)
            want = _by_hand_encoder(x.double(), pad, params, n_head, norm_first)
        assert torch.isnan(ref[pad]).all() and torch.isfinite(ref[~pad]).all(), case.name
        torch.testing.assert_close(ref[~pad], want[~pad], rtol=1e-9, atol=1e-9, msg=case.name)


def test_torchs_encoder_layer_fast_and_slow_paths_agree_at_real_positions():
    """The reference may take torch's fused fast path (eval, no grad, even heads): it computes the same block."""
    for case, (x, pad, params, n_head, norm_first), _ in _cases("encoder_block"):
        layer = _torch_encoder(params, n_head, norm_first)
        with torch.no_grad():
            fast = layer(x, src_key_padding_mask=pad)
            before = torch.backends.mha.get_fastpath_enabled()
            torch.backends.mha.set_fastpath_enabled(False)
            try:
                slow = layer(x, src_key_padding_mask=pad)
            finally:
                torch.backends.mha.set_fastpath_enabled(before)
        torch.testing.assert_close(fast[~pad], slow[~pad], rtol=1e-5, atol=1e-5, msg=case.name)


def test_values_at_padded_positions_are_not_graded_and_real_ones_are():
    c = BY_TASK["encoder_block"]
    (x, pad, params, n_head, norm_first), _ = case_inputs(c.cases[0], 0, 0, CPU)
    right = encoder_block(x, pad, params, n_head, norm_first)
    anything = right.masked_fill(pad.unsqueeze(-1), float("nan"))
    off = right.clone()
    off[0, 0, 0] += 0.01
    assert case_problem(c, c.cases[0], anything, (x, pad, params, n_head, norm_first), {}) is None
    # one wrong entry of a real position: named by its index in each dimension (batch row 0 of 2)
    said = case_problem(c, c.cases[0], off, (x, pad, params, n_head, norm_first), {})
    assert "only at index 0 of dimension 0 (1 is right)" in said, said


def _by_hand_decoder(y, memory, pad, p, n_head, norm_first):
    """The decoder block from torch's functional pieces (not the layer)."""
    d, T = y.shape[-1], y.shape[1]

    def attn(name, h, ctx, key_padding_mask, attn_mask):
        out, _ = F.multi_head_attention_forward(
            h.transpose(0, 1), ctx.transpose(0, 1), ctx.transpose(0, 1), d, n_head, p[f"{name}.in_proj_weight"],
            p[f"{name}.in_proj_bias"], None, None, False, 0.0, p[f"{name}.out_proj.weight"],
            p[f"{name}.out_proj.bias"], training=False, key_padding_mask=key_padding_mask, need_weights=False,
            attn_mask=attn_mask)
        return out.transpose(0, 1)

    def ffn(h):
        return F.linear(F.relu(F.linear(h, p["linear1.weight"], p["linear1.bias"])), p["linear2.weight"],
                        p["linear2.bias"])

    def ln(h, i):
        return F.layer_norm(h, (d,), p[f"norm{i}.weight"], p[f"norm{i}.bias"], 1e-5)

    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    if norm_first:
        h = ln(y, 1)
        x = y + attn("self_attn", h, h, None, future)
        x = x + attn("multihead_attn", ln(x, 2), memory, pad, None)
        return x + ffn(ln(x, 3))
    x = ln(y + attn("self_attn", y, y, None, future), 1)
    x = ln(x + attn("multihead_attn", x, memory, pad, None), 2)
    return ln(x + ffn(x), 3)


def test_the_decoder_reference_is_the_block_written_from_torchs_functions():
    c = BY_TASK["decoder_block"]
    for case, (y, memory, pad, params, n_head, norm_first), _ in _cases("decoder_block"):
        p = {k: v.double() for k, v in params.items()}
        with torch.no_grad():
            ref = c.reference(y.double(), memory.double(), pad, p, n_head, norm_first)
            want = _by_hand_decoder(y.double(), memory.double(), pad, p, n_head, norm_first)
        torch.testing.assert_close(ref, want, rtol=1e-9, atol=1e-9, msg=case.name)


def test_the_decoder_reference_is_causal_and_ignores_padded_memory():
    c = BY_TASK["decoder_block"]
    (y, memory, pad, params, n_head, norm_first), _ = case_inputs(c.cases[0], 0, 0, CPU)
    with torch.no_grad():
        ref = c.reference(y, memory, pad, params, n_head, norm_first)
        later = y.clone()
        later[:, -1] += 5.0  # the last target token changed: the earlier positions do not see it
        changed = c.reference(later, memory, pad, params, n_head, norm_first)
        torch.testing.assert_close(changed[:, :-1], ref[:, :-1])
        assert not torch.allclose(changed[:, -1], ref[:, -1])
        other = memory.masked_fill(pad.unsqueeze(-1), -7.0)  # other made-up vectors at the padded positions
        torch.testing.assert_close(c.reference(y, other, pad, params, n_head, norm_first), ref)


# ----------------------------------------------------------------------------- ready-made answers


def _torch_layer_norm(x, weight, bias, eps):
    return F.layer_norm(x, x.shape[-1:], weight, bias, eps)


def _torch_module_layer_norm(x, weight, bias, eps):
    ln = nn.LayerNorm(x.shape[-1], eps=eps).to(x.dtype)
    with torch.no_grad():
        ln.weight.copy_(weight)
        ln.bias.copy_(bias)
    return ln(x)


def _group_norm_trick(x, weight, bias, eps):  # one group over each row: LayerNorm by another name
    rows = x.reshape(-1, x.shape[-1], 1)
    return F.group_norm(rows, 1, eps=eps).reshape(x.shape) * weight + bias


def _instance_norm_trick(x, weight, bias, eps):
    return torch.instance_norm(x.reshape(1, -1, x.shape[-1]), None, None, None, None, True, 0.0, eps,
                               False).reshape(x.shape) * weight + bias


def _torch_encoder_layer(x, key_padding_mask, params, n_head, norm_first):
    with torch.no_grad():
        return _torch_encoder(params, n_head, norm_first)(x, src_key_padding_mask=key_padding_mask)


def _encoder_with_torch_attention(x, key_padding_mask, params, n_head, norm_first):
    d = x.shape[-1]
    mha = nn.MultiheadAttention(d, n_head, batch_first=True).to(x.dtype)
    mha.load_state_dict({k.removeprefix("self_attn."): v for k, v in params.items() if k.startswith("self_attn.")})
    steps = [(lambda h: mha(h, h, h, key_padding_mask=key_padding_mask, need_weights=False)[0], 1),
             (_ffn(params), 2)]
    with torch.no_grad():
        return _sublayers(x, steps, params, norm_first)


def _torch_decoder_layer(y, memory, memory_key_padding_mask, params, n_head, norm_first):
    T = y.shape[1]
    with torch.no_grad():
        return _torch_decoder(params, n_head, norm_first)(
            y, memory, tgt_mask=torch.ones(T, T, dtype=torch.bool).triu(1),
            memory_key_padding_mask=memory_key_padding_mask)


def _decoder_with_sdpa(y, memory, memory_key_padding_mask, params, n_head, norm_first):
    def attn(name, h, ctx, mask=None, causal=False):
        d = h.shape[-1]
        w, b = params[f"{name}.in_proj_weight"], params[f"{name}.in_proj_bias"]
        q, k, v = (F.linear(t, w[i * d:(i + 1) * d], b[i * d:(i + 1) * d]).unflatten(-1, (n_head, -1)).transpose(1, 2)
                   for i, t in enumerate((h, ctx, ctx)))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        return F.linear(out.transpose(1, 2).flatten(2), params[f"{name}.out_proj.weight"],
                        params[f"{name}.out_proj.bias"])
    steps = [(lambda h: attn("self_attn", h, h, causal=True), 1),
             (lambda h: attn("multihead_attn", h, memory, ~memory_key_padding_mask[:, None, None, :]), 2),
             (_ffn(params), 3)]
    return _sublayers(y, steps, params, norm_first)


@pytest.mark.parametrize(("task", "answer"), [
    ("layer_norm", _torch_layer_norm),
    ("layer_norm", _torch_module_layer_norm),
    ("layer_norm", _group_norm_trick),
    ("layer_norm", _instance_norm_trick),
    ("layer_norm", _lib_layer_norm),
    ("feed_forward", _lib_feed_forward),
    ("encoder_block", _torch_encoder_layer),
    ("encoder_block", _encoder_with_torch_attention),
    ("encoder_block", _lib_encoder),
    ("decoder_block", _torch_decoder_layer),
    ("decoder_block", _decoder_with_sdpa),
    ("decoder_block", _lib_decoder),
])
def test_a_ready_made_implementation_gets_no_credit(task, answer):
    with pytest.raises(CheckFailed, match="not graded"):
        check(task, answer)


def test_a_block_may_use_torchs_layer_norm():
    """Tasks 3 and 4 are about the wiring: the statement allows torch's layer_norm there (the right answers here
    use it), and only Task 1 refuses it."""
    check("encoder_block", encoder_block)
    check("decoder_block", decoder_block)
    with pytest.raises(CheckFailed, match="not graded"):
        check("layer_norm", _torch_layer_norm)


# ----------------------------------------------------------------------------- the thinking questions


@pytest.mark.parametrize(("d", "d_ff", "n_head"), [(64, 256, 2), (8, 20, 2), (30, 11, 3)])
def test_block_parameters_reference_counts_the_book_blocks_and_torchs_layers(d, d_ff, n_head):
    from lmbook.tasks.questions.ch08 import BLOCK_PARAMETERS

    def count(m):
        return sum(p.numel() for p in m.parameters())

    enc, dec = BLOCK_PARAMETERS.reference(d, d_ff, "encoder"), BLOCK_PARAMETERS.reference(d, d_ff, "decoder")
    assert count(lmbook.transformer.EncoderBlock(d, n_head, d_ff)) == enc
    assert count(lmbook.transformer.DecoderBlock(d, n_head, d_ff)) == dec
    assert count(nn.TransformerEncoderLayer(d, n_head, d_ff)) == enc
    assert count(nn.TransformerDecoderLayer(d, n_head, d_ff)) == dec


@pytest.mark.parametrize(("n", "d", "d_ff"), [(16, 64, 256), (7, 30, 11), (33, 8, 40)])
def test_block_flops_reference_is_what_torchs_flop_counter_counts_in_an_encoder_block(n, d, d_ff):
    from torch.utils.flop_counter import FlopCounterMode

    from lmbook.tasks.questions.ch08 import BLOCK_FLOPS

    block = lmbook.transformer.EncoderBlock(d, 2 if d % 2 == 0 else 1, d_ff)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        block(torch.randn(1, n, d))
    assert counter.get_total_flops() == BLOCK_FLOPS.reference(n, d, d_ff)


def test_doubling_cost_lies_between_two_and_four_and_is_the_ratio_of_the_counts():
    from lmbook.tasks.questions.ch08 import BLOCK_FLOPS, DOUBLING_COST

    for n, d, d_ff in ((1, 64, 256), (128, 512, 2048), (100_000, 128, 512)):
        r = DOUBLING_COST.reference(n, d, d_ff)
        assert r == pytest.approx(BLOCK_FLOPS.reference(2 * n, d, d_ff) / BLOCK_FLOPS.reference(n, d, d_ff))
        assert 2 < r < 4, r


@pytest.mark.parametrize(("V", "eps"), [(10, 0.1), (2, 0.2), (60, 0.3), (8, 1.0)])
def test_smoothed_loss_floor_is_the_smoothed_loss_at_its_minimum(V, eps):
    """Minimise F.cross_entropy(label_smoothing=ε) over the logits: it ends at the reference, from above."""
    from lmbook.tasks.questions.ch08 import SMOOTHED_LOSS_FLOOR

    logits = torch.zeros(1, V, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([logits], max_iter=200, line_search_fn="strong_wolfe")
    target = torch.tensor([1])

    def closure():
        opt.zero_grad()
        loss = F.cross_entropy(logits, target, label_smoothing=eps)
        loss.backward()
        return loss

    opt.step(closure)
    reached = F.cross_entropy(logits, target, label_smoothing=eps).item()
    assert reached == pytest.approx(SMOOTHED_LOSS_FLOOR.reference(V, eps), abs=1e-7)
