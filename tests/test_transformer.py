"""lmbook.transformer against independent oracles: torch's nn.LayerNorm, nn.TransformerEncoderLayer,
nn.TransformerDecoderLayer and nn.Transformer given the same weights, lmbook.decoding, and the training loop
of chapter 4 (lmbook.seq2seq_train.fit) run unchanged on the Transformer."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from lmbook.decoding import beam_search, greedy_decode
from lmbook.multihead import merge_heads, split_heads
from lmbook.positions import sinusoidal
from lmbook.self_attention import causal_mask, key_padding_to_mask, scaled_dot_product_attention
from lmbook.seq2seq import BOS, EOS, PAD, translate
from lmbook.seq2seq_train import fit, inverse_sqrt, smoothed_loss, teacher_forced_exact_match, warmup_cosine
from lmbook.transformer import DecoderBlock, EncoderBlock, FeedForward, LayerNorm, Transformer
from lmbook.translation import sample_pairs, vocabularies

D, H, D_FF = 8, 2, 16  # an even number of heads, or torch never takes its fast path
SRC_V, TGT_V = 11, 9
TOL = dict(rtol=1e-10, atol=1e-10)  # float64 throughout, except where a test says otherwise
BLOCKS = [(nf, act) for nf in (False, True) for act in ("relu", "gelu")]
BLOCK_IDS = [f"{'pre' if nf else 'post'}-LN-{act}" for nf, act in BLOCKS]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """The models are tiny: one thread is faster, and steady when the CPU is shared."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _randn(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


@torch.no_grad()
def _randomise(module: nn.Module, seed: int = 0) -> nn.Module:
    """torch starts LayerNorm at g = 1, b = 0 and attention biases at 0: give every one of them a value."""
    g = torch.Generator().manual_seed(seed)
    for name, p in module.named_parameters():
        if "norm" in name or name.endswith("bias"):
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.5 + ("norm" in name and "weight" in name))
    return module


def _key_mask(lengths, n):
    """(B, n) True at the first lengths[b] positions: lmbook's convention (torch's is the opposite)."""
    return torch.arange(n)[None, :] < torch.tensor(lengths)[:, None]


def _close(got, want, what, **tol):
    torch.testing.assert_close(got, want, **(tol or TOL), msg=lambda m: f"{what}: {m}")


# ----------------------------------------------------------------------------- LayerNorm, FFN


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_layernorm_equals_torch_layernorm(dtype):
    ref = _randomise(nn.LayerNorm(6, dtype=dtype))
    ours = LayerNorm(6).to(dtype)
    ours.load_state_dict(ref.state_dict())
    x = _randn(3, 4, 6, dtype=dtype) * 3 + 1
    torch.testing.assert_close(ours(x), ref(x), msg=lambda m: f"LayerNorm vs nn.LayerNorm ({dtype}): {m}")


def test_annotated_transformers_layernorm_fails_the_comparison_on_small_d():
    """g (x − μ) / (unbiased std + ε) + b: on d = 4 it is sqrt(4/3) ≈ 1.15 times nn.LayerNorm's (x − μ)/σ."""
    d = 4
    ref = _randomise(nn.LayerNorm(d, dtype=torch.float64))
    x = _randn(5, d) * 2

    def annotated(x, eps=1e-6):
        return ref.weight * (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + eps) + ref.bias

    with pytest.raises(AssertionError):
        torch.testing.assert_close(annotated(x), ref(x))
    normalised = (ref(x) - ref.bias) / ref.weight  # (x − μ)/σ, undone from both outputs
    ratio = normalised / ((annotated(x) - ref.bias) / ref.weight)
    torch.testing.assert_close(ratio, torch.full_like(ratio, math.sqrt(d / (d - 1))), rtol=1e-4, atol=0,
                               msg=lambda m: f"the ratio should be sqrt(d/(d-1)) up to eps: {m}")


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_feedforward_is_two_linear_maps_with_the_activation_between(activation):
    ffn = FeedForward(D, D_FF, activation).double()
    x = _randn(2, 3, D)
    act = torch.relu if activation == "relu" else (lambda z: 0.5 * z * (1 + torch.erf(z / math.sqrt(2))))
    want = act(x @ ffn.W_1.weight.T + ffn.W_1.bias) @ ffn.W_2.weight.T + ffn.W_2.bias
    _close(ffn(x), want, f"FFN with {activation}")


# ----------------------------------------------------------------------------- blocks vs torch's layers


def _enc_pair(norm_first, activation, seed=0):
    torch.manual_seed(seed)
    ref = nn.TransformerEncoderLayer(D, H, D_FF, dropout=0.0, activation=activation, batch_first=True,
                                     norm_first=norm_first, dtype=torch.float64)
    ref = _randomise(ref, seed).eval()
    return ref, EncoderBlock(D, H, D_FF, activation=activation, norm_first=norm_first).double().load_torch(ref)


def _dec_pair(norm_first, activation, seed=0):
    torch.manual_seed(seed)
    ref = nn.TransformerDecoderLayer(D, H, D_FF, dropout=0.0, activation=activation, batch_first=True,
                                     norm_first=norm_first, dtype=torch.float64)
    ref = _randomise(ref, seed).eval()
    return ref, DecoderBlock(D, H, D_FF, activation=activation, norm_first=norm_first).double().load_torch(ref)


@pytest.mark.parametrize("path", ["fast", "slow"])
@pytest.mark.parametrize(("norm_first", "activation"), BLOCKS, ids=BLOCK_IDS)
def test_encoder_block_equals_torch_encoder_layer(norm_first, activation, path, monkeypatch):
    """In eval mode with autograd off torch runs a fused kernel (the fast path); with autograd on, its Python
    code. Both must agree with the block at the real positions, given torch's True-means-padding mask."""
    ref, ours = _enc_pair(norm_first, activation)
    fused = torch._transformer_encoder_layer_fwd
    calls = []
    monkeypatch.setattr(torch, "_transformer_encoder_layer_fwd", lambda *a: calls.append(1) or fused(*a))
    x, mask = _randn(3, 6, D, seed=1), _key_mask([6, 4, 1], 6)
    with torch.set_grad_enabled(path == "slow"):
        want = ref(x, src_key_padding_mask=~mask)
    assert bool(calls) == (path == "fast"), f"expected torch's {path} path, the fused kernel ran {len(calls)} times"
    got, weights = ours(x, mask)
    _close(got[mask], want[mask], f"EncoderBlock vs nn.TransformerEncoderLayer ({path} path)")
    assert (weights[~mask[:, None, None, :].expand_as(weights)] == 0).all(), "a padded key got attention"


@pytest.mark.parametrize("path", ["no_grad", "grad"])
@pytest.mark.parametrize(("norm_first", "activation"), BLOCKS, ids=BLOCK_IDS)
def test_decoder_block_equals_torch_decoder_layer(norm_first, activation, path):
    ref, ours = _dec_pair(norm_first, activation)
    y, memory, mem_mask = _randn(3, 5, D, seed=2), _randn(3, 6, D, seed=3), _key_mask([6, 4, 1], 6)
    with torch.set_grad_enabled(path == "grad"):  # torch: True = masked, for tgt_mask and the padding mask
        want = ref(y, memory, tgt_mask=~causal_mask(5), memory_key_padding_mask=~mem_mask)
    _close(ours(y, memory, mem_mask)[0], want, f"DecoderBlock vs nn.TransformerDecoderLayer ({path})")


def test_load_torch_refuses_a_layer_that_computes_something_else():
    ref, _ = _enc_pair(norm_first=True, activation="relu")
    with pytest.raises(ValueError, match="norm_first"):
        EncoderBlock(D, H, D_FF, norm_first=False).load_torch(ref)
    ref, _ = _dec_pair(norm_first=False, activation="gelu")
    with pytest.raises(ValueError, match="activation"):
        DecoderBlock(D, H, D_FF, activation="relu").load_torch(ref)


# ----------------------------------------------------------------------------- cross-attention


def test_changing_the_memory_changes_the_decoder_output():
    _, block = _dec_pair(False, "relu")
    y, memory, mem_mask = _randn(2, 4, D, seed=2), _randn(2, 5, D, seed=3), _key_mask([5, 3], 5)
    out = block(y, memory, mem_mask)[0]
    changed = memory.clone()
    changed[:, 0] += 1.0  # a real position in both sentences
    diff = (block(y, changed, mem_mask)[0] - out).abs().amax(dim=(1, 2))
    assert (diff > 1e-3).all(), f"a new memory left the output (nearly) unchanged: max changes {diff.tolist()}"


def test_padded_memory_positions_are_ignored():
    _, block = _dec_pair(True, "relu")
    y, memory, mem_mask = _randn(2, 4, D, seed=2), _randn(2, 5, D, seed=3), _key_mask([5, 3], 5)
    out, weights = block(y, memory, mem_mask)
    garbage = memory.clone()
    garbage[~mem_mask] = 100.0
    _close(block(y, garbage, mem_mask)[0], out, "output after changing the padded memory positions")
    assert (weights[1, :, :, 3:] == 0).all(), "cross-attention weights on padded source positions"


def test_cross_attention_with_keys_from_the_decoder_fails_the_torch_comparison(monkeypatch):
    """A known-wrong variant: K = x W_k from the decoder (V still from the memory). It must not pass."""
    ref, block = _dec_pair(False, "relu")
    y, memory, mem_mask = _randn(2, 5, D, seed=2), _randn(2, 5, D, seed=3), _key_mask([5, 5], 5)
    want = ref(y, memory, tgt_mask=~causal_mask(5), memory_key_padding_mask=~mem_mask)
    _close(block(y, memory, mem_mask)[0], want, "the correct block")
    mha = block.cross_attn

    def keys_from_decoder(x, context, *, key_mask=None):
        (w_q, w_k, w_v), (b_q, b_k, b_v) = mha.in_proj.weight.chunk(3), mha.in_proj.bias.chunk(3)
        q, k, v = F.linear(x, w_q, b_q), F.linear(x, w_k, b_k), F.linear(context, w_v, b_v)  # k: the bug
        out, weights = scaled_dot_product_attention(split_heads(q, H), split_heads(k, H), split_heads(v, H),
                                                    key_padding_to_mask(key_mask))
        return mha.out_proj(merge_heads(out)), weights

    monkeypatch.setattr(mha, "forward", keys_from_decoder)
    with pytest.raises(AssertionError):
        torch.testing.assert_close(block(y, memory, mem_mask)[0], want)


# ----------------------------------------------------------------------------- the translator


def _model(seed=0, **kw) -> Transformer:
    torch.manual_seed(seed)
    cfg = dict(d_model=D, n_head=H, n_layer=2, d_ff=D_FF, dropout=0.0) | kw
    return Transformer(SRC_V, TGT_V, **cfg).double().eval()


def _batch(seed=0, lengths=(5, 3, 1, 4)):
    """A padded source batch: random real tokens (ids >= 3), <eos> last, <pad> after."""
    g = torch.Generator().manual_seed(seed)
    x = torch.full((len(lengths), max(lengths)), PAD)
    for i, n in enumerate(lengths):
        x[i, : n - 1] = torch.randint(3, SRC_V, (n - 1,), generator=g)
        x[i, n - 1] = EOS
    return x, torch.tensor(lengths)


def _targets(seed=0, lengths=(4, 6, 2, 3)):
    g = torch.Generator().manual_seed(seed + 100)
    y = torch.full((len(lengths), max(lengths) + 1), PAD)
    for i, n in enumerate(lengths):
        y[i, 0] = BOS
        y[i, 1:n] = torch.randint(3, TGT_V, (n - 1,), generator=g)
        y[i, n] = EOS
    return y


def test_embedding_is_sqrt_d_times_the_token_vector_plus_the_sinusoidal_position():
    model = _model()
    x, _ = _batch()
    want = model.src_E.weight[x] * math.sqrt(D) + sinusoidal(x.shape[1], D).double()
    _close(model.embed(x, model.src_E), want, "embedding")


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_model_is_causal_in_the_target(norm_first):
    model = _model(norm_first=norm_first)
    x, lengths = _batch()
    y_in = _targets()[:, :-1]
    ref = model(x, lengths, y_in)
    for t in range(1, y_in.shape[1]):
        changed = y_in.clone()
        changed[:, t] = (changed[:, t] + 1 - 3) % (TGT_V - 3) + 3  # another real token
        got = model(x, lengths, changed)
        _close(got[:, :t], ref[:, :t], f"logits before the changed target position {t}")
        assert (got[:, t] - ref[:, t]).abs().max() > 1e-6, f"position {t} did not see its own new input"


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_logits_do_not_depend_on_source_padding(norm_first):
    model = _model(norm_first=norm_first)
    x, lengths = _batch()
    y_in = _targets()[:, :-1]
    ref = model(x, lengths, y_in)
    garbage = x.clone()
    garbage[x == PAD] = 5  # fill the padding with a real word
    wider = torch.cat([x, torch.full((len(x), 3), PAD)], 1)  # and pad further
    _close(model(garbage, lengths, y_in), ref, "logits with words in the source padding")
    _close(model(wider, lengths, y_in), ref, "logits with more source padding")
    for i, n in enumerate(lengths.tolist()):  # each sentence alone, with no padding at all
        _close(model(x[i : i + 1, :n], lengths[i : i + 1], y_in[i : i + 1]), ref[i : i + 1], f"sentence {i} alone")


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors", "ignore:enable_nested_tensor is True")
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_model_equals_nn_transformer_with_the_same_weights(norm_first):
    """nn.Transformer always ends encoder and decoder with a LayerNorm: final_norm=True, even for post-LN.
    Run without autograd, so torch takes its fast path (for post-LN its encoder returns zeros at padded
    positions: only real positions are compared)."""
    torch.manual_seed(0)
    ref = nn.Transformer(D, H, 2, 2, D_FF, dropout=0.0, batch_first=True, norm_first=norm_first,
                         dtype=torch.float64)
    ref = _randomise(ref).eval()
    model = _model(norm_first=norm_first, final_norm=True).load_torch(ref)
    x, lengths = _batch()
    y_in = _targets()[:, :-1]
    src, tgt = model.embed(x, model.src_E), model.embed(y_in, model.tgt_E)
    memory = model.encode(x, lengths)
    with torch.no_grad():
        want_memory = ref.encoder(src, src_key_padding_mask=~memory.mask)
        want = model.W_y(ref(src, tgt, tgt_mask=~causal_mask(y_in.shape[1]), src_key_padding_mask=~memory.mask,
                             memory_key_padding_mask=~memory.mask))
    _close(memory.H[memory.mask], want_memory[memory.mask], "encoder output vs nn.TransformerEncoder")
    _close(model.decode(y_in, memory), want, "logits vs nn.Transformer")


def test_loading_nn_transformer_needs_the_final_norms():
    ref = nn.Transformer(D, H, 2, 2, D_FF, dropout=0.0, batch_first=True)
    with pytest.raises(ValueError, match="final_norm=True"):
        Transformer(SRC_V, TGT_V, D, H, 2, D_FF, norm_first=False).load_torch(ref)


def _copy_task(n: int = 128, V: int = 10, seed: int = 0):
    """Sources of 1 to 4 random tokens and <eos>; the targets are the same tokens between <bos> and <eos>."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, 6, (n,), generator=g)  # real tokens, then <eos>
    x = torch.full((n, 6), PAD)
    y = torch.full((n, 7), PAD)
    for i, m in enumerate(lengths.tolist()):
        tokens = torch.randint(3, V, (m - 1,), generator=g)
        x[i, : m - 1], x[i, m - 1] = tokens, EOS
        y[i, 0], y[i, 1:m], y[i, m] = BOS, tokens, EOS
    return x, lengths, y


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_fit_lowers_the_loss_on_a_tiny_copy_task(norm_first):
    """Chapter 4's training loop, unchanged: targets are the sources themselves."""
    torch.manual_seed(0)
    model = Transformer(10, 10, d_model=32, n_head=2, n_layer=1, d_ff=64, dropout=0.0, norm_first=norm_first)
    log = fit(model, _copy_task(), steps=40, batch_size=32, lr=3e-3)
    first, last = log.loss[0], sum(log.loss[-5:]) / 5
    assert last < 0.5 * first, f"loss went from {first:.3f} to {last:.3f} (mean of the last 5 steps)"


def test_warmup_makes_the_first_update_that_fraction_of_the_learning_rate():
    """Adam's first step moves each weight by about lr; with a warm-up of W steps, by lr / W."""
    moved = {}
    for warmup in (0, 10):
        torch.manual_seed(0)
        model = Transformer(10, 10, d_model=16, n_head=2, n_layer=1, d_ff=32, dropout=0.0)
        before = torch.cat([p.detach().flatten().clone() for p in model.parameters()])
        fit(model, _copy_task(), steps=1, batch_size=32, lr=1e-3, warmup=warmup)
        moved[warmup] = (torch.cat([p.detach().flatten() for p in model.parameters()]) - before).norm().item()
    assert moved[10] / moved[0] == pytest.approx(0.1, rel=0.01), f"update sizes {moved}"


def test_inverse_sqrt_is_the_papers_formula_and_peaks_at_the_end_of_the_warmup():
    """Vaswani et al., section 5.3: lrate = d^-0.5 min(step^-0.5, step warmup^-1.5), base model d = 512, 4000."""
    rates = [inverse_sqrt(s, 512, 4000) for s in range(1, 20_001)]
    assert max(range(len(rates)), key=rates.__getitem__) + 1 == 4000, "the rate should peak at step 4000"
    assert rates[3999] == pytest.approx((512 * 4000) ** -0.5, rel=1e-12)
    assert rates[99] == pytest.approx(100 * 512**-0.5 * 4000**-1.5, rel=1e-12), "linear during the warm-up"
    assert rates[15_999] == pytest.approx(rates[3999] / 2, rel=1e-12), "four times the steps, half the rate"
    with pytest.raises(ValueError, match="from 1"):
        inverse_sqrt(0, 512, 4000)


def test_warmup_cosine_is_the_learning_rate_fit_applies_at_every_step(monkeypatch):
    torch.manual_seed(0)
    model = Transformer(10, 10, d_model=16, n_head=2, n_layer=1, d_ff=32, dropout=0.0)
    seen = []
    original = torch.optim.Adam.step

    def spy(self, *args, **kwargs):
        seen.append(self.param_groups[0]["lr"])
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.Adam, "step", spy)
    fit(model, _copy_task(), steps=30, batch_size=32, lr=2e-3, warmup=8, decay=True)
    want = [2e-3 * warmup_cosine(k, 30, 8, True) for k in range(30)]
    assert seen == pytest.approx(want, rel=1e-12), "fit's learning rates are not warmup_cosine's"
    assert seen[7] == pytest.approx(2e-3 * (0.1 + 0.45 * (1 + math.cos(math.pi * 7 / 30))), rel=1e-12)


def test_smoothed_loss_is_the_cross_entropy_against_the_smoothed_target():
    """(1 − ε) one_hot(y) + ε/V, written out, against F.cross_entropy's label_smoothing; padding left out."""
    logits, eps, V = _randn(3, 5, 7, seed=1), 0.1, 7
    targets = torch.tensor([[3, 1, 4, PAD, PAD], [5, 2, 6, 6, 2], [1, PAD, PAD, PAD, PAD]])
    q = (1 - eps) * F.one_hot(targets, V).double() + eps / V
    per_token = -(q * logits.log_softmax(-1)).sum(-1)
    real = targets != PAD
    want = per_token[real].mean()
    _close(smoothed_loss(logits, targets, eps), want, "smoothed loss")
    _close(smoothed_loss(logits, targets, 0.0), F.cross_entropy(logits[real], targets[real]), "ε = 0")


def test_fit_with_label_smoothing_trains_on_the_smoothed_loss_of_its_first_batch():
    from lmbook.seq2seq_train import _trim, length_bucketed_batches

    data = _copy_task()
    torch.manual_seed(0)
    model = Transformer(10, 10, d_model=16, n_head=2, n_layer=1, d_ff=32, dropout=0.0)
    same = Transformer(10, 10, d_model=16, n_head=2, n_layer=1, d_ff=32, dropout=0.0)
    same.load_state_dict(model.state_dict())
    log = fit(model, data, steps=1, batch_size=32, seed=3, label_smoothing=0.1)
    idx = next(length_bucketed_batches(data[1], 32, torch.Generator().manual_seed(3)))
    x, lengths, y = _trim(data[0][idx], data[1][idx], data[2][idx])
    want = smoothed_loss(same(x, lengths, y[:, :-1]), y[:, 1:], 0.1).item()
    assert log.loss[0] == pytest.approx(want, rel=1e-6), "fit's first loss is not the smoothed loss"
    plain = F.cross_entropy(same(x, lengths, y[:, :-1]).flatten(0, 1), y[:, 1:].flatten(),
                            ignore_index=PAD).item()
    assert abs(log.loss[0] - plain) > 1e-3, "the smoothed and the plain loss should differ here"


def test_smoothed_loss_is_lowest_when_the_model_gives_the_right_word_one_minus_eps_plus_eps_over_v():
    eps, V = 0.1, 6
    best = (1 - eps) * F.one_hot(torch.tensor([[2]]), V).double() + eps / V  # the smoothed target itself
    at_target = smoothed_loss(best.log(), torch.tensor([[2]]), eps).item()
    entropy = -(best * best.log()).sum().item()
    assert at_target == pytest.approx(entropy, rel=1e-12), "the minimum is the entropy of the smoothed target"
    sharper = (best.log() + 3 * F.one_hot(torch.tensor([[2]]), V)).log_softmax(-1)  # more confident
    assert smoothed_loss(sharper, torch.tensor([[2]]), eps).item() > at_target, "more confidence costs loss"


def test_fit_records_the_training_seconds_at_each_check():
    torch.manual_seed(0)
    model = Transformer(10, 10, d_model=16, n_head=2, n_layer=1, d_ff=32, dropout=0.0)
    data = _copy_task()
    log = fit(model, data, data, steps=6, batch_size=32, eval_every=2)
    assert log.val_steps == [2, 4, 6] and len(log.val_seconds) == 3
    assert 0 < log.val_seconds[0] <= log.val_seconds[1] <= log.val_seconds[2] <= log.seconds, log.val_seconds


def test_teacher_forced_exact_match_is_greedy_decodings_exact_match():
    """A half-trained copier gets some sentences right: the one-pass count must pick out exactly those."""
    torch.manual_seed(0)
    model = Transformer(10, 10, d_model=32, n_head=2, n_layer=1, d_ff=64, dropout=0.0)
    x, lengths, y = _copy_task(n=256)
    fit(model, (x, lengths, y), steps=60, batch_size=32, lr=3e-3)
    hyps = model.greedy(x, lengths, max_len=8)
    greedy = sum(h == row[1:][row[1:] != PAD].tolist() for h, row in zip(hyps, y, strict=True)) / len(y)
    assert 0.05 < greedy < 0.95, f"greedy exact match {greedy:.2f}: train for a number of steps that leaves some wrong"
    assert teacher_forced_exact_match(model, (x, lengths, y), batch_size=100) == greedy


def test_translate_returns_each_sentence_where_it_was_whatever_its_length():
    """translate() batches sentences of similar lengths together; the answers must come back in input order."""
    src_vocab, tgt_vocab = vocabularies()
    torch.manual_seed(0)
    model = Transformer(len(src_vocab), len(tgt_vocab), d_model=D, n_head=H, n_layer=1, d_ff=D_FF).eval()
    sources = [s for s, _ in sample_pairs(7, seed=1)]
    assert len({len(s) for s in sources}) > 3, "the test needs sources of different lengths"
    one_by_one = [translate(model, [s], src_vocab, tgt_vocab, max_len=6)[0] for s in sources]
    assert translate(model, sources, src_vocab, tgt_vocab, max_len=6, batch_size=2) == one_by_one


# ----------------------------------------------------------------------------- decoding


def test_greedy_batched_equals_greedy_decode_through_step_fn():
    model = _model(seed=3)
    x, lengths = _batch(2)
    batched = model.greedy(x, lengths, max_len=7)
    for i, n in enumerate(lengths.tolist()):  # lmbook.decoding, one unpadded sentence at a time
        assert batched[i] == greedy_decode(model.step_fn(x[i, :n].tolist()), BOS, EOS, 7), f"sentence {i}"


def test_greedy_returns_cross_attention_rows_that_sum_to_one_and_skip_padding():
    model = _model(seed=3)
    x, lengths = _batch(2)
    hyps, alpha = model.greedy(x, lengths, max_len=7, return_alpha=True)
    assert alpha.shape == (len(x), max(map(len, hyps)), x.shape[1])
    _close(alpha.sum(-1), torch.ones(alpha.shape[:2], dtype=alpha.dtype), "cross-attention row sums")
    assert (alpha.transpose(1, 2)[x == PAD] == 0).all(), "attention on padded source positions"


def test_step_fn_agrees_with_sequence_logprob():
    model = _model(seed=4)
    x, lengths = _batch(3)
    y = _targets(3)
    total = model.sequence_logprob(x, lengths, y)
    for i, n in enumerate(lengths.tolist()):
        fn = model.step_fn(x[i, :n].tolist())
        tokens = y[i][y[i] != PAD].tolist()  # bos ... eos
        by_steps = sum(float(fn(tokens[:t])[tokens[t]]) for t in range(1, len(tokens)))
        assert by_steps == pytest.approx(float(total[i]), abs=1e-9), f"sentence {i}"


def test_beam_search_through_step_fn_returns_valid_hypotheses():
    model = _model(seed=5)
    src = [3, 4, 5, EOS]
    fn = model.step_fn(src)
    hyps = beam_search(fn, BOS, EOS, beam_size=3, max_len=6)
    assert 1 <= len(hyps) <= 3
    for y, score in hyps:
        assert all(0 <= t < TGT_V for t in y) and 1 <= len(y) <= 6, y
        assert (y[-1] == EOS or len(y) == 6) and EOS not in y[:-1], f"eos misplaced in {y}"
        want = sum(float(fn([BOS, *y[:t]])[y[t]]) for t in range(len(y))) / len(y)  # length_penalty = 1
        assert score == pytest.approx(want, abs=1e-9), f"score of {y}"
    assert beam_search(fn, BOS, EOS, beam_size=1, max_len=6)[0][0] == greedy_decode(fn, BOS, EOS, 6)


def test_translate_runs_the_transformer_greedy_and_with_a_beam():
    src_vocab, tgt_vocab = vocabularies()
    torch.manual_seed(0)
    model = Transformer(len(src_vocab), len(tgt_vocab), d_model=D, n_head=H, n_layer=1, d_ff=D_FF)
    sources = [s for s, _ in sample_pairs(3, seed=0, max_len=8)]
    for beam_size in (1, 2):
        out = translate(model, sources, src_vocab, tgt_vocab, beam_size=beam_size, max_len=5)
        assert len(out) == 3 and all(len(o) <= 5 and "<eos>" not in o for o in out), out
