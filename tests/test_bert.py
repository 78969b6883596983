"""lmbook.bert: BERT's logits given Hugging Face's weights (padding and two segments included), the parameter count
from its formula, BERT's 15% / 80-10-10 masking within binomial bounds, [CLS] a [SEP] b [SEP] inputs, and span
extraction's loss and decoding against a brute-force search."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from lmbook.bert import (
    BERT,
    BertConfig,
    BertPretraining,
    best_span,
    build_inputs,
    count_parameters,
    load_hf_bert,
    mask_tokens,
    pretraining_loss,
    span_loss,
)
from lmbook.transformer import LayerNorm

transformers = pytest.importorskip("transformers")

V, N, L, H, D = 60, 16, 2, 4, 32  # vocab, max_position, layers, heads, d_model
TOL64 = 1e-10  # |ours − HF's| in float64 (measured ~2e-15)
TOL32 = 1e-5  # in float32 (measured ~1e-6)
WRONG = 1e-4  # a known wrong implementation misses HF's outputs by more than this, 10 × TOL32 (measured: 3e-4 and up)
PAD, CLS, SEP, MASK = 0, 1, 2, 3


def _hf_config(**overrides) -> transformers.BertConfig:
    kwargs = dict(vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=H, intermediate_size=4 * D,
                  max_position_embeddings=N, type_vocab_size=2, hidden_act="gelu", layer_norm_eps=1e-12,
                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=PAD,
                  attn_implementation="eager")
    return transformers.BertConfig(**{**kwargs, **overrides})


def _config(**overrides) -> BertConfig:
    return BertConfig(**{**dict(vocab_size=V, n_layer=L, n_head=H, d_model=D, max_position=N), **overrides})


@pytest.fixture(scope="module")
def hf() -> nn.Module:
    """A random BertForPreTraining in float64 whose every parameter matters: HF starts gains at 1 and biases at 0;
    here every linear map has unit-variance outputs, so the GELU's input is large enough for tanh and erf to
    differ, and the embeddings are small enough (std 0.1) for the LayerNorms' ε to show."""
    torch.manual_seed(0)
    model = transformers.BertForPreTraining(_hf_config()).double().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():  # the tied decoder weight is word_embeddings, listed once
            if "embeddings" in name and "LayerNorm" not in name:
                p.normal_(0.0, 0.1)
            elif p.dim() == 2:  # nn.Linear (out, in)
                p.normal_(0.0, p.shape[1] ** -0.5)
            elif "LayerNorm" in name and name.endswith("weight"):
                p.add_(0.1 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.1)
    return model


@pytest.fixture(scope="module")
def ours(hf) -> BertPretraining:
    return load_hf_bert(BertPretraining(_config()).double(), hf).eval()


def _batch(padded: bool) -> dict[str, torch.Tensor]:
    """Three sequences of N positions: random tokens, segment B from a split point on; with ``padded``, lengths
    N, 11 and 5 (padding after, attention_mask 0 there). Without, one segment and no mask."""
    ids = torch.randint(4, V, (3, N), generator=torch.Generator().manual_seed(1))
    pos = torch.arange(N)
    if not padded:
        return dict(ids=ids, segments=torch.zeros_like(ids), attention_mask=torch.ones_like(ids))
    mask = (pos < torch.tensor([N, 11, 5])[:, None]).long()
    segments = (pos >= torch.tensor([8, 6, 3])[:, None]).long() * mask
    return dict(ids=ids.masked_fill(mask == 0, PAD), segments=segments, attention_mask=mask)


def _hf_pretraining(hf: nn.Module, batch: dict[str, torch.Tensor]):
    with torch.no_grad():
        return hf(input_ids=batch["ids"], token_type_ids=batch["segments"], attention_mask=batch["attention_mask"])


def _max_diff(model: BertPretraining, hf: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[float, float]:
    """max |mlm logits − HF's|, max |nsp logits − HF's|."""
    theirs = _hf_pretraining(hf, batch)
    with torch.no_grad():
        mlm, nsp = model(batch["ids"], batch["segments"], batch["attention_mask"])
    d_mlm = (mlm - theirs.prediction_logits).abs().max().item()
    return d_mlm, (nsp - theirs.seq_relationship_logits).abs().max().item()


# ----------------------------------------------------------------------------- Hugging Face's BERT as the oracle


@pytest.mark.parametrize("padded", [False, True], ids=["one_segment_no_padding", "two_segments_padded"])
def test_mlm_and_nsp_logits_equal_hugging_faces_bert_for_pretraining_given_its_weights(hf, ours, padded):
    mlm, nsp = _max_diff(ours, hf, _batch(padded))
    assert mlm < TOL64, f"max |MLM logits − HF's| = {mlm:.2e} in float64"
    assert nsp < TOL64, f"max |NSP logits − HF's| = {nsp:.2e} in float64"


def test_logits_equal_hugging_faces_to_float32_rounding(hf, ours):
    mlm, nsp = _max_diff(copy.deepcopy(ours).float(), copy.deepcopy(hf).float(), _batch(padded=True))
    assert mlm < TOL32, f"max |MLM logits − HF's| = {mlm:.2e} in float32"
    assert nsp < TOL32, f"max |NSP logits − HF's| = {nsp:.2e} in float32"


def test_logits_equal_hugging_faces_with_its_default_sdpa_attention_too(hf, ours):
    sdpa = transformers.BertForPreTraining(_hf_config(attn_implementation="sdpa")).double().eval()
    sdpa.load_state_dict(hf.state_dict())
    mlm, nsp = _max_diff(ours, sdpa, _batch(padded=True))
    assert max(mlm, nsp) < TOL64, f"max |logits − HF's (sdpa)| = MLM {mlm:.2e}, NSP {nsp:.2e}"


def test_hidden_states_and_pooled_output_equal_hugging_faces_bert_model(hf):
    body = load_hf_bert(BERT(_config()).double(), hf.bert).eval()  # a BertModel into a BERT
    batch = _batch(padded=True)
    with torch.no_grad():
        h, pooled = body(batch["ids"], batch["segments"], batch["attention_mask"])
        theirs = hf.bert(input_ids=batch["ids"], token_type_ids=batch["segments"],
                         attention_mask=batch["attention_mask"])
    assert h.shape == (3, N, D) and pooled.shape == (3, D), f"h {tuple(h.shape)}, pooled {tuple(pooled.shape)}"
    dh = (h - theirs.last_hidden_state).abs().max().item()
    dp = (pooled - theirs.pooler_output).abs().max().item()
    assert dh < TOL64, f"max |h − HF's last_hidden_state| = {dh:.2e}"
    assert dp < TOL64, f"max |pooled − HF's pooler_output| = {dp:.2e}"


def test_pretraining_loss_equals_hugging_faces_loss(hf, ours):
    batch = _batch(padded=True)
    labels = torch.full_like(batch["ids"], -100)
    labels[:, 1:4] = batch["ids"][:, 1:4]  # three chosen positions per sequence
    is_random_next = torch.tensor([0, 1, 1])
    with torch.no_grad():
        theirs = hf(input_ids=batch["ids"], token_type_ids=batch["segments"], attention_mask=batch["attention_mask"],
                    labels=labels, next_sentence_label=is_random_next).loss
        got = pretraining_loss(*ours(batch["ids"], batch["segments"], batch["attention_mask"]), labels, is_random_next)
    assert abs(got.item() - theirs.item()) < TOL64, f"loss {got.item():.10f}, HF's {theirs.item():.10f}"


def test_padding_changes_no_real_positions_outputs(ours):
    """Independent of HF: each sequence alone gives what it gives inside a padded batch, at its real positions."""
    batch = _batch(padded=True)
    lengths = batch["attention_mask"].sum(1).tolist()
    with torch.no_grad():
        mlm, nsp = ours(batch["ids"], batch["segments"], batch["attention_mask"])
        for i, n in enumerate(lengths):
            mlm_i, nsp_i = ours(batch["ids"][i : i + 1, :n], batch["segments"][i : i + 1, :n])
            d_mlm = (mlm[i, :n] - mlm_i[0]).abs().max().item()
            d_nsp = (nsp[i] - nsp_i[0]).abs().max().item()
            assert max(d_mlm, d_nsp) < TOL64, f"sequence {i} (length {n}): padding moved the logits by " \
                                              f"{max(d_mlm, d_nsp):.2e}"


def _gelu_tanh(model: BertPretraining) -> None:
    for block in model.bert.blocks:
        block.ffn.activation = "gelu_tanh"  # GPT-2's approximation, where BERT uses erf


def _eps_1e_5(model: BertPretraining) -> None:
    for m in model.modules():
        if isinstance(m, LayerNorm):
            m.eps = 1e-5  # torch's default, where BERT has 1e-12


def _no_segment_embeddings(model: BertPretraining) -> None:
    model.bert.segment_emb.weight.zero_()


def _pre_ln(model: BertPretraining) -> None:
    for block in model.bert.blocks:
        block.norm_first = True  # x + f(LN(x)), where BERT has LN(x + f(x))


def _queries_and_keys_swapped(model: BertPretraining) -> None:
    """HF's query and key packed as [W_k; W_q; W_v]."""
    for block in model.bert.blocks:
        for p in (block.self_attn.in_proj.weight, block.self_attn.in_proj.bias):
            q, k, v = p.chunk(3)
            p.copy_(torch.cat([k, q, v]))


def _untied_decoder(model: BertPretraining) -> None:
    model.mlm_decoder.weight = nn.Parameter(0.1 * torch.randn(V, D, dtype=torch.float64))


@pytest.mark.parametrize("mistake", [_gelu_tanh, _eps_1e_5, _no_segment_embeddings, _pre_ln, _queries_and_keys_swapped,
                                     _untied_decoder], ids=lambda f: f.__name__.strip("_"))
def test_known_wrong_implementations_miss_hugging_faces_logits(hf, ours, mistake):
    wrong = copy.deepcopy(ours)
    with torch.no_grad():
        mistake(wrong)
    diff = max(_max_diff(wrong, hf, _batch(padded=True)))
    assert diff > WRONG, f"{mistake.__name__} gives logits within {diff:.2e} of HF's: the comparison cannot see it"


def test_ignoring_the_attention_mask_misses_hugging_faces_logits(hf, ours):
    batch = _batch(padded=True)
    theirs = _hf_pretraining(hf, batch)
    with torch.no_grad():
        mlm, _ = ours(batch["ids"], batch["segments"])  # padding attended to
    diff = (mlm - theirs.prediction_logits).abs().max().item()
    assert diff > WRONG, f"without the mask the logits are within {diff:.2e} of HF's: padding is not exercised"


@pytest.mark.parametrize("override, field", [
    (dict(hidden_act="gelu_new"), "exact_gelu"), (dict(layer_norm_eps=1e-5), "ln_eps"),
    (dict(position_embedding_type="relative_key"), "position_embedding_type"), (dict(is_decoder=True), "is_decoder"),
    (dict(intermediate_size=3 * D), "d_ff"), (dict(tie_word_embeddings=False), "tied_decoder"),
], ids=["gelu_tanh", "eps", "relative_positions", "decoder", "d_ff", "untied"])
def test_loading_refuses_a_hugging_face_model_that_computes_something_else(override, field):
    other = transformers.BertForPreTraining(_hf_config(**override))
    with pytest.raises(ValueError, match=f"Hugging Face model has.*differ at .*'{field}'"):
        load_hf_bert(BertPretraining(_config()), other)


def test_loading_heads_from_a_model_without_them_is_refused():
    with pytest.raises(ValueError, match="BertForPreTraining"):
        load_hf_bert(BertPretraining(_config()), transformers.BertModel(_hf_config()))


def test_reading_more_than_max_position_tokens_raises_naming_max_position(ours):
    with pytest.raises(ValueError, match="max_position"):
        ours(torch.zeros(1, N + 1, dtype=torch.long))


# ----------------------------------------------------------------------------- parameters


def _large_hf_config() -> transformers.BertConfig:
    return transformers.BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                                   intermediate_size=4096)


@pytest.mark.parametrize("ours_config, hf_config, want", [
    (BertConfig.base(), transformers.BertConfig, 109_482_240), (BertConfig.large(), _large_hf_config, 335_141_888),
], ids=["base", "large"])
def test_bert_base_and_large_have_the_published_counts_by_the_formula_and_in_hugging_faces_model(ours_config,
                                                                                                 hf_config, want):
    with torch.device("meta"):
        hf_model = transformers.BertModel(hf_config())  # with the pooler
    theirs = sum(p.numel() for p in hf_model.parameters())
    got = count_parameters(ours_config)
    assert got == want == theirs, f"formula {got:,}, want {want:,}, HF's BertModel {theirs:,}"


def test_count_with_heads_equals_hugging_faces_bert_for_pretraining_counting_the_tied_decoder_once():
    with torch.device("meta"):
        hf_model = transformers.BertForPreTraining(transformers.BertConfig())
    theirs = sum(p.numel() for p in hf_model.parameters())  # parameters() lists a shared tensor once
    got = count_parameters(BertConfig.base(), heads=True)
    assert got == theirs == 110_106_428, f"formula {got:,}, HF's BertForPreTraining {theirs:,}"


def test_lmbooks_bert_base_has_as_many_parameters_as_the_formula():
    with torch.device("meta"):
        body, full = BERT(BertConfig.base()), BertPretraining(BertConfig.base())
    got_body, got_full = (sum(p.numel() for p in m.parameters()) for m in (body, full))
    assert got_body == count_parameters(BertConfig.base()), f"BERT(base()) has {got_body:,} parameters"
    assert got_full == count_parameters(BertConfig.base(), heads=True), f"BertPretraining has {got_full:,}"
    assert full.mlm_decoder.weight is full.bert.token_emb.weight, "the MLM decoder should be E_tok itself"


@pytest.mark.parametrize("config", [_config(), _config(n_layer=3, n_head=2, d_model=8, d_ff=20, type_vocab_size=3)],
                         ids=["tiny", "d_ff_20_three_segments"])
@pytest.mark.parametrize("heads", [False, True], ids=["body", "heads"])
def test_count_parameters_equals_the_models_for_small_configs(config, heads):
    model = BertPretraining(config) if heads else BERT(config)
    got = sum(p.numel() for p in model.parameters())
    assert count_parameters(config, heads=heads) == got, f"formula {count_parameters(config, heads=heads)}, " \
                                                         f"model {got} for {config}, heads={heads}"


# ----------------------------------------------------------------------------- inputs


def test_build_inputs_puts_cls_and_sep_around_the_texts_with_segments_zero_then_one():
    ids, segments = build_inputs([7, 8], [9], cls=CLS, sep=SEP)
    assert ids == [CLS, 7, 8, SEP, 9, SEP], f"ids {ids}"
    assert segments == [0, 0, 0, 0, 1, 1], f"segments {segments}: 0 for [CLS] a [SEP], 1 for b [SEP]"
    assert build_inputs([7, 8], cls=CLS, sep=SEP) == ([CLS, 7, 8, SEP], [0, 0, 0, 0])


# ----------------------------------------------------------------------------- masked LM

MV = 100  # the masking tests' vocabulary: 0-3 pad, [CLS], [SEP], [MASK]; 4 another special ([UNK])
SPECIAL = (CLS, SEP, MASK, 4)
ORDINARY = MV - 5  # the tokens a random replacement may be


def _corpus(B: int = 200, n: int = 128, seed: int = 0) -> torch.Tensor:
    """[CLS] a [SEP] b [SEP] then padding, random lengths; ordinary tokens drawn from 5 … MV − 1."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, MV, (B, n), generator=g)
    for i in range(B):
        length = int(torch.randint(n // 2, n + 1, (1,), generator=g))
        split = int(torch.randint(2, length - 2, (1,), generator=g))
        ids[i, 0], ids[i, split], ids[i, length - 1] = CLS, SEP, SEP
        ids[i, length:] = PAD
    return ids


def _mask(ids: torch.Tensor, p: float = 0.15, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    return mask_tokens(ids, mask_id=MASK, vocab_size=MV, special_ids=SPECIAL, pad_id=PAD, p=p,
                       generator=torch.Generator().manual_seed(seed))


def _binomial_misses(name: str, k: int, n: int, p: float, z: float = 5.0) -> list[str]:
    """[] if k of n lies within z standard deviations of n p, else a line saying by how much it misses."""
    mean, sd = n * p, math.sqrt(n * p * (1 - p))
    return [] if abs(k - mean) <= z * sd else [f"{name}: {k} of {n}, expected {mean:.0f} ± {z:g}·{sd:.1f}"]


def _masking_problems(ids: torch.Tensor, inputs: torch.Tensor, labels: torch.Tensor) -> list[str]:
    """Everything wrong with (inputs, labels) as BERT's masking of ids, with the rates p = 0.15, 80/10/10."""
    special = torch.isin(ids, torch.tensor([PAD, *SPECIAL]))
    chosen = labels != -100
    problems = []
    if (chosen & special).any():
        problems.append(f"{int((chosen & special).sum())} special or padding positions chosen")
    if not torch.equal(inputs[special], ids[special]):
        problems.append("a special or padding position was changed")
    if not torch.equal(labels[chosen], ids[chosen]):
        problems.append("labels at chosen positions are not the original ids")
    if ((inputs != ids) & ~chosen).any():
        problems.append(f"{int(((inputs != ids) & ~chosen).sum())} positions changed but labelled -100")
    eligible, k = int((~special).sum()), int(chosen.sum())
    problems += _binomial_misses("chosen among eligible", k, eligible, 0.15)
    masked, kept = chosen & (inputs == MASK), chosen & (inputs == ids)
    other = chosen & ~masked & ~kept
    problems += _binomial_misses("[MASK] among chosen", int(masked.sum()), k, 0.8)
    problems += _binomial_misses("unchanged among chosen", int(kept.sum()), k, 0.1 + 0.1 / ORDINARY)  # or drawn back
    problems += _binomial_misses("random among chosen", int(other.sum()), k, 0.1 * (1 - 1 / ORDINARY))
    if torch.isin(inputs[other], torch.tensor([PAD, *SPECIAL])).any():
        problems.append("a random replacement is a special token")
    return problems


def test_masking_chooses_15_percent_of_eligible_tokens_and_splits_them_80_10_10_within_binomial_bounds():
    ids = _corpus()
    inputs, labels = _mask(ids)
    assert _masking_problems(ids, inputs, labels) == []


def _always_mask(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Every chosen token becomes [MASK] (no 10% random, no 10% unchanged)."""
    inputs, labels = _mask(ids)
    return inputs.masked_fill(labels != -100, MASK), labels


def _specials_eligible(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Chooses among every position, [CLS], [SEP] and padding included."""
    chosen = torch.rand(ids.shape, generator=torch.Generator().manual_seed(0)) < 0.15
    return ids.masked_fill(chosen, MASK), torch.where(chosen, ids, -100)


def _p_of_all_positions(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Chooses 15% of all positions' worth among the eligible ones (too many, where padding is common)."""
    eligible = ~torch.isin(ids, torch.tensor([PAD, *SPECIAL]))
    return _mask(ids, p=0.15 * ids.numel() / int(eligible.sum()))


@pytest.mark.parametrize("wrong, named", [(_always_mask, "[MASK] among chosen"),
                                          (_specials_eligible, "special or padding positions chosen"),
                                          (_p_of_all_positions, "chosen among eligible")],
                         ids=["always_mask", "specials_eligible", "p_of_all_positions"])
def test_the_masking_checks_catch_known_wrong_maskers(wrong, named):
    ids = _corpus()
    problems = _masking_problems(ids, *wrong(ids))
    assert any(named in line for line in problems), f"{wrong.__name__}: no problem names {named!r}: {problems}"


def test_masking_leaves_its_input_unchanged_and_repeats_with_the_same_seed():
    ids = _corpus(B=20)
    before = ids.clone()
    first, second, other = _mask(ids, seed=5), _mask(ids, seed=5), _mask(ids, seed=6)
    assert torch.equal(ids, before), "mask_tokens modified the tensor it was given"
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1]), "the same seed gave other masks"
    assert not torch.equal(first[1], other[1]), "another seed gave the same choice"


@pytest.mark.parametrize("p", [0.0, 1.0])
def test_masking_with_p_0_chooses_nothing_and_with_p_1_every_eligible_token(p):
    ids = _corpus(B=10)
    inputs, labels = _mask(ids, p=p)
    eligible = ~torch.isin(ids, torch.tensor([PAD, *SPECIAL]))
    assert torch.equal(labels != -100, eligible & (p == 1.0)), f"p={p}: chose {int((labels != -100).sum())} " \
                                                                 f"of {int(eligible.sum())} eligible"


# ----------------------------------------------------------------------------- span extraction


def test_span_loss_is_the_mean_of_the_start_and_end_cross_entropies():
    g = torch.Generator().manual_seed(0)
    start_logits, end_logits = torch.randn(4, 10, generator=g), torch.randn(4, 10, generator=g)
    start, end = torch.tensor([0, 3, 5, 9]), torch.tensor([2, 3, 8, 9])
    want = (F.cross_entropy(start_logits, start) + F.cross_entropy(end_logits, end)) / 2
    got = span_loss(start_logits, end_logits, start, end)
    assert torch.allclose(got, want, rtol=0, atol=1e-6), f"span_loss {got.item():.6f}, want {want.item():.6f}"


def _brute_force_span(s: torch.Tensor, e: torch.Tensor, mask: torch.Tensor, max_len: int | None) -> tuple[int, int]:
    best, arg = -math.inf, (-1, -1)
    n = len(s)
    for i in range(n):
        for j in range(i, n):
            if mask[i] and mask[j] and (max_len is None or j - i < max_len) and s[i] + e[j] > best:
                best, arg = float(s[i] + e[j]), (i, j)
    return arg


@pytest.mark.parametrize("max_len", [None, 1, 3])
def test_best_span_equals_a_brute_force_search_over_all_start_end_pairs(max_len):
    g = torch.Generator().manual_seed(0)
    B, n = 40, 12
    s, e = torch.randn(B, n, generator=g), torch.randn(B, n, generator=g)
    first = torch.randint(1, n - 1, (B,), generator=g)  # [CLS] question [SEP] | passage from `first` on
    pos = torch.arange(n)
    mask = (pos >= first[:, None]) & (pos < n - 1)  # the last position is the final [SEP]
    mask[::3] &= torch.rand(len(mask[::3]), n, generator=g) < 0.7  # holes in some passages
    mask[torch.arange(B), first] = True  # every passage keeps at least one position
    start, end = best_span(s, e, mask, max_len)
    for i in range(B):
        want = _brute_force_span(s[i], e[i], mask[i], max_len)
        got = (int(start[i]), int(end[i]))
        assert got == want, f"sequence {i}, max_len={max_len}: best_span {got}, brute force {want}"
        assert got[0] <= got[1] and mask[i, got[0]] and mask[i, got[1]], f"sequence {i}: {got} is not a valid span"


def test_best_span_takes_a_single_sequence_and_refuses_an_empty_passage():
    s, e = torch.tensor([5.0, 0.0, 1.0, 0.0]), torch.tensor([0.0, 9.0, 0.0, 2.0])
    start, end = best_span(s, e, torch.tensor([False, True, True, True]))
    assert (int(start), int(end)) == (1, 1), f"got {(int(start), int(end))}: position 0 is outside the passage"
    with pytest.raises(ValueError, match="no span"):
        best_span(s, e, torch.zeros(4, dtype=torch.bool))


def test_train_mlm_lowers_the_masked_lm_loss_on_a_repetitive_text():
    from lmbook.bert import train_mlm

    torch.manual_seed(0)
    windows = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]] * 32)  # one sentence: every masked word is predictable
    model = BertPretraining(BertConfig(vocab_size=12, n_layer=1, n_head=2, d_model=16, max_position=8))
    losses, seconds = train_mlm(model, windows, mask_id=10, pad_id=11, steps=150, batch_size=16, lr=1e-2)
    assert seconds > 0 and len(losses) == 150
    assert sum(losses[-20:]) / 20 < 0.3 * sum(losses[:20]) / 20, (losses[:3], losses[-3:])


def test_train_mlm_shows_on_step_the_model_after_each_step_without_changing_the_training():
    from lmbook.bert import train_mlm

    windows = torch.randint(0, 20, (64, 10))
    config = BertConfig(vocab_size=24, n_layer=1, n_head=2, d_model=16, max_position=10)
    torch.manual_seed(0)
    plain = BertPretraining(config)
    torch.manual_seed(0)
    watched = BertPretraining(config)
    snapshots = {}

    def keep(step, model):
        snapshots[step] = copy.deepcopy(model.state_dict())

    kwargs = dict(mask_id=22, pad_id=21, steps=5, batch_size=8, seed=1)
    losses, _ = train_mlm(plain, windows, **kwargs)
    watched_losses, _ = train_mlm(watched, windows, on_step=keep, **kwargs)
    assert watched_losses == losses, "a callback that only reads the model changed the training"
    assert sorted(snapshots) == [1, 2, 3, 4, 5], f"on_step saw steps {sorted(snapshots)}, not 1 to 5"
    assert all(torch.equal(snapshots[5][k], v) for k, v in plain.state_dict().items()), \
        "the model on_step saw after the last step is not the trained model"
    assert not torch.equal(snapshots[1]["bert.token_emb.weight"], snapshots[5]["bert.token_emb.weight"]), \
        "the snapshots after steps 1 and 5 are equal: on_step is shown the same weights every time"


def test_train_mlm_loss_is_the_cross_entropy_of_the_full_logits_at_the_chosen_positions():
    # train_mlm runs the head only at the chosen positions; its first loss (before any update) must equal the
    # loss of the whole model's logits at every position, positions not chosen ignored, on the same batch.
    from lmbook.bert import mask_tokens, train_mlm

    torch.manual_seed(0)
    windows = torch.randint(0, 20, (64, 10))
    windows[:5, 7:] = 21  # padded rows: never chosen, never attended
    model = BertPretraining(BertConfig(vocab_size=24, n_layer=2, n_head=2, d_model=16, max_position=10))
    before = copy.deepcopy(model).eval()  # dropout is 0 by default, so training and evaluation agree
    losses, _ = train_mlm(model, windows, mask_id=22, pad_id=21, special_ids=[23], steps=1, batch_size=16, seed=3)
    g = torch.Generator().manual_seed(3)  # the same draws as train_mlm's first step
    x = windows[torch.randint(len(windows), (16,), generator=g)]
    inputs, labels = mask_tokens(x, mask_id=22, vocab_size=24, special_ids=[23], pad_id=21, generator=g)
    logits, _ = before(inputs, attention_mask=x != 21)
    expected = F.cross_entropy(logits.reshape(-1, 24), labels.reshape(-1), ignore_index=-100).item()
    assert math.isclose(losses[0], expected, rel_tol=1e-5), f"first loss {losses[0]:.6f}, full logits {expected:.6f}"
