"""lmbook.rnn against torch's own recurrent modules, given the same weights."""

import pytest
import torch
from torch import nn

from lmbook.rnn import (
    RNNLM,
    GRUCell,
    LSTMCell,
    RNNCell,
    clip_grad_norm,
    gradient_by_distance,
    pool,
    train_tbptt,
    unroll,
)

torch.manual_seed(0)
PAIRS = [(RNNCell, nn.RNNCell), (LSTMCell, nn.LSTMCell), (GRUCell, nn.GRUCell)]


def _twins(ours_cls, theirs_cls, D=5, H=7):
    ours, theirs = ours_cls(D, H).double(), theirs_cls(D, H).double()
    theirs.load_state_dict(ours.state_dict())  # same names, same shapes: the layouts agree
    return ours, theirs


@pytest.mark.parametrize("ours_cls, theirs_cls", PAIRS)
def test_one_step_equals_torchs_cell(ours_cls, theirs_cls):
    ours, theirs = _twins(ours_cls, theirs_cls)
    x = torch.randn(4, 5, dtype=torch.double)
    if ours_cls is LSTMCell:
        state = (torch.randn(4, 7, dtype=torch.double), torch.randn(4, 7, dtype=torch.double))
        for a, b in zip(ours(x, state), theirs(x, state), strict=True):
            torch.testing.assert_close(a, b)
    else:
        h = torch.randn(4, 7, dtype=torch.double)
        torch.testing.assert_close(ours(x, h), theirs(x, h))


@pytest.mark.parametrize("cell_cls, torch_cls", [(RNNCell, nn.RNN), (LSTMCell, nn.LSTM), (GRUCell, nn.GRU)])
def test_unrolled_over_a_padded_batch_equals_torchs_packed_sequence(cell_cls, torch_cls):
    cell = cell_cls(3, 6).double()
    net = torch_cls(3, 6, batch_first=True).double()
    net.load_state_dict({f"{k}_l0": v for k, v in cell.state_dict().items()})
    x = torch.randn(3, 8, 3, dtype=torch.double)
    lengths = torch.tensor([8, 5, 1])
    states, final = unroll(cell, x, lengths)
    packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    out, last = net(packed)
    out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=8)
    mask = torch.arange(8)[None, :] < lengths[:, None]
    torch.testing.assert_close(states[mask], out[mask])  # real positions agree
    h_final = final[0] if isinstance(final, tuple) else final
    h_last = last[0] if isinstance(last, tuple) else last
    torch.testing.assert_close(h_final, h_last[0])  # the final state is the last real step's


def test_pooling_ignores_padding():
    states = torch.tensor([[[1.0], [5.0], [-9.0]], [[2.0], [100.0], [3.0]]])
    mask = torch.tensor([[True, True, False], [True, True, True]])
    assert pool(states, mask, "last").tolist() == [[5.0], [3.0]]
    assert pool(states, mask, "mean").tolist() == [[3.0], [35.0]]
    assert pool(states, mask, "max").tolist() == [[5.0], [100.0]]
    with pytest.raises(ValueError, match="last"):
        pool(states, mask, "sum")


@pytest.mark.parametrize("max_norm", [0.1, 1.0, 1e6])
def test_clipping_equals_torchs_clip_grad_norm(max_norm):
    a, b = nn.Linear(4, 3), nn.Linear(4, 3)
    b.load_state_dict(a.state_dict())
    x = torch.randn(8, 4) * 10
    for m in (a, b):
        m(x).pow(2).sum().backward()
    norm_ours = clip_grad_norm(a.parameters(), max_norm)
    norm_torch = nn.utils.clip_grad_norm_(b.parameters(), max_norm)
    torch.testing.assert_close(norm_ours, norm_torch)
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)


def test_a_wrong_lstm_is_caught():
    # forgetting the forget gate (c_t = c_{t-1} + i ⊙ g) must not pass for an LSTM
    ours, theirs = _twins(LSTMCell, nn.LSTMCell)
    x, h, c = (torch.randn(2, n, dtype=torch.double) for n in (5, 7, 7))
    i, f, g, o = (x @ ours.weight_ih.T + ours.bias_ih + h @ ours.weight_hh.T + ours.bias_hh).chunk(4, -1)
    wrong_c = c + torch.sigmoid(i) * torch.tanh(g)
    assert not torch.allclose(wrong_c, theirs(x, (h, c))[1])


def test_the_language_model_trains_and_carries_state_across_chunks():
    torch.manual_seed(0)
    model = RNNLM(vocab_size=5, d_emb=8, hidden_size=16)
    ids = torch.tensor([[0, 1, 2, 3, 4] * 4])  # a deterministic cycle: learnable to near-zero loss
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(60):
        logits, _ = model(ids[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, 5), ids[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.1
    whole, _ = model(ids)
    first, state = model(ids[:, :7])
    second, _ = model(ids[:, 7:], state)
    torch.testing.assert_close(torch.cat([first, second], 1), whole)  # chunks + carried state = one pass


def test_truncated_bptt_equals_a_loop_with_torchs_clipping():
    """train_tbptt against the loop written out with torch's clip_grad_norm_, same start, same data."""
    ids = torch.randint(0, 7, (203,), generator=torch.Generator().manual_seed(1))
    torch.manual_seed(0)
    ours = RNNLM(vocab_size=7, d_emb=4, hidden_size=8, cell="gru")
    theirs = RNNLM(vocab_size=7, d_emb=4, hidden_size=8, cell="gru")
    theirs.load_state_dict(ours.state_dict())
    losses = train_tbptt(ours, ids, n_streams=4, chunk=10, epochs=2, lr=0.01, clip=0.5)

    opt = torch.optim.Adam(theirs.parameters(), lr=0.01)
    data = ids[:200].view(4, 50)  # 4 streams of 50 words; the last 3 words are dropped
    expected = []
    for _ in range(2):
        state = None
        for start in range(0, 49, 10):
            x, y = data[:, start : start + 10], data[:, start + 1 : start + 11]
            x = x[:, : y.shape[1]]
            logits, state = theirs(x, state)
            loss = nn.functional.cross_entropy(logits.reshape(-1, 7), y.reshape(-1))
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(theirs.parameters(), 0.5)
            opt.step()
            state = state.detach()
            expected.append(loss.item())
    assert losses == pytest.approx(expected, rel=1e-5), "the chunk losses differ from the written-out loop"
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters(), strict=True):
        torch.testing.assert_close(p, q, msg=lambda m, name=name: f"{name} after training: {m}")


def test_gradient_by_distance_equals_the_jacobian():
    cell = RNNCell(3, 4).double()
    x = torch.randn(2, 6, 3, dtype=torch.double)
    jac = torch.autograd.functional.jacobian(lambda inp: unroll(cell, inp)[0][:, -1].sum(), x)  # (2, 6, 3)
    torch.testing.assert_close(gradient_by_distance(cell, x), jac.norm(dim=-1).mean(0))


def test_a_vanilla_rnn_with_no_recurrence_forgets_at_once():
    cell = RNNCell(3, 4)
    with torch.no_grad():
        cell.weight_hh.zero_()
    g = gradient_by_distance(cell, torch.randn(5, 10, 3))
    assert (g[:-1] == 0).all() and g[-1] > 0
