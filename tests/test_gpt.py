"""lmbook.gpt: GPT-2's logits given Hugging Face's weights, a KV cache that saves work without changing a token,
the parameter count from its formula, and GPT-1's fine-tuning format and classifier."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from lmbook.gpt import (
    GPT,
    GPTClassifier,
    GPTConfig,
    KVCache,
    count_parameters,
    format_pair,
    format_single,
    generate,
    last_token_state,
    load_hf_gpt2,
    pad_batch,
)
from lmbook.transformer import LayerNorm

transformers = pytest.importorskip("transformers")

V, N, L, H, D = 50, 16, 2, 4, 32  # vocab, block_size, layers, heads, d_model
TOL = 1e-5  # |logits − HF's logits|, float64 (rounding there is ~1e-15)
WRONG = 1e-4  # a known wrong implementation misses HF's logits by more than this, 10 × TOL (measured: 5e-4 and up)


def _hf_config(**overrides) -> transformers.GPT2Config:
    kwargs = dict(vocab_size=V, n_positions=N, n_embd=D, n_layer=L, n_head=H, resid_pdrop=0.0, embd_pdrop=0.0,
                  attn_pdrop=0.0, layer_norm_epsilon=1e-5, activation_function="gelu_new", bos_token_id=0,
                  eos_token_id=0, attn_implementation="eager")
    return transformers.GPT2Config(**{**kwargs, **overrides})


@pytest.fixture(scope="module")
def hf() -> nn.Module:
    """A random GPT-2 in float64 whose every parameter matters: HF starts gains at 1 and biases at 0, and its
    0.02-std weights leave the GELU's input so small that tanh and erf barely differ."""
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(_hf_config()).double().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("transformer.w"):  # wte (also the head), wpe
                p.normal_(0.0, 0.1)
            elif p.dim() == 2:  # Conv1D (in, out): unit-variance outputs
                p.normal_(0.0, p.shape[0] ** -0.5)
            elif "ln" in name and name.endswith("weight"):
                p.add_(0.1 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.1)
    return model


@pytest.fixture(scope="module")
def ours(hf) -> GPT:
    return load_hf_gpt2(GPT(GPTConfig(V, N, L, H, D)).double(), hf).eval()


@pytest.fixture
def model32(ours) -> GPT:
    return copy.deepcopy(ours).float()


def _max_diff(model: GPT, hf: nn.Module, ids: torch.Tensor) -> float:
    with torch.no_grad():
        return (model(ids) - hf(ids).logits).abs().max().item()


# ----------------------------------------------------------------------------- Hugging Face's GPT-2 as the oracle


@pytest.mark.parametrize("B, n", [(1, 1), (1, 7), (3, N)], ids=["one_token", "batch_of_one", "full_block"])
def test_logits_equal_hugging_faces_gpt2_given_its_weights(hf, ours, B, n):
    ids = torch.randint(0, V, (B, n), generator=torch.Generator().manual_seed(n))
    diff = _max_diff(ours, hf, ids)
    assert diff < TOL, f"max |logits − HF's| = {diff:.2e} in float64 for ids {tuple(ids.shape)}"


def test_logits_equal_hugging_faces_to_float32_rounding(hf, model32):
    ids = torch.randint(0, V, (2, N), generator=torch.Generator().manual_seed(1))
    diff = _max_diff(model32, copy.deepcopy(hf).float(), ids)
    assert diff < TOL, f"max |logits − HF's| = {diff:.2e} in float32"


def _conv1d_not_transposed(model: GPT, hf: nn.Module) -> None:
    """HF's (in, out) weights reshaped to nn.Linear's (out, in) instead of transposed."""
    for block, theirs in zip(model.h, hf.transformer.h, strict=True):
        pairs = [(block.attn.in_proj, theirs.attn.c_attn), (block.attn.out_proj, theirs.attn.c_proj),
                 (block.mlp.W_1, theirs.mlp.c_fc), (block.mlp.W_2, theirs.mlp.c_proj)]
        for dst, src in pairs:
            dst.weight.copy_(src.weight.reshape(dst.weight.shape))


def _exact_gelu(model: GPT, hf: nn.Module) -> None:
    for block in model.h:
        block.mlp.activation = "gelu"  # erf, where GPT-2 trained with the tanh approximation


def _untied_head(model: GPT, hf: nn.Module) -> None:
    model.lm_head = nn.Linear(D, V, bias=False, dtype=torch.float64)  # its own matrix, not wte


def _eps_1e_6(model: GPT, hf: nn.Module) -> None:
    for m in model.modules():
        if isinstance(m, LayerNorm):
            m.eps = 1e-6


@pytest.mark.parametrize("mistake", [_conv1d_not_transposed, _exact_gelu, _untied_head, _eps_1e_6],
                         ids=lambda f: f.__name__.strip("_"))
def test_known_wrong_implementations_miss_hugging_faces_logits(hf, ours, mistake):
    wrong = copy.deepcopy(ours)
    with torch.no_grad():
        mistake(wrong, hf)
    ids = torch.randint(0, V, (2, N), generator=torch.Generator().manual_seed(2))
    diff = _max_diff(wrong, hf, ids)
    assert diff > WRONG, f"{mistake.__name__} gives logits within {diff:.2e} of HF's: the comparison cannot see it"


@pytest.mark.parametrize("override", [dict(activation_function="gelu"), dict(layer_norm_epsilon=1e-6),
                                      dict(n_inner=3 * D)], ids=["erf_gelu", "eps", "d_ff"])
def test_loading_refuses_a_hugging_face_model_that_computes_something_else(override):
    other = transformers.GPT2LMHeadModel(_hf_config(**override))
    with pytest.raises(ValueError, match="Hugging Face model has"):
        load_hf_gpt2(GPT(GPTConfig(V, N, L, H, D)), other)


# ----------------------------------------------------------------------------- the KV cache


def test_feeding_tokens_through_the_cache_one_at_a_time_gives_the_full_pass_logits(model32):
    ids = torch.randint(0, V, (2, 12), generator=torch.Generator().manual_seed(3))
    P = 5
    with torch.no_grad():
        full = model32(ids)
        cache = KVCache()
        steps = [model32(ids[:, :P], cache)] + [model32(ids[:, t : t + 1], cache) for t in range(P, 12)]
    for t, got in enumerate(torch.cat(steps, dim=1).unbind(1)):
        diff = (got - full[:, t]).abs().max().item()
        assert diff < TOL, f"position {t}: cached logits differ from the full pass by {diff:.2e}"


def test_the_cache_holds_every_layers_keys_and_values_for_every_position_read(model32):
    B, P, n = 2, 5, 4
    cache = KVCache()
    with torch.no_grad():
        model32(torch.zeros(B, P, dtype=torch.long), cache)
        for _ in range(n):
            model32(torch.zeros(B, 1, dtype=torch.long), cache)
    assert len(cache.k) == len(cache.v) == L, f"{len(cache.k)} layers of keys, {len(cache.v)} of values, want {L}"
    want = (B, H, P + n, D // H)
    for layer, (k, v) in enumerate(zip(cache.k, cache.v, strict=True)):
        assert k.shape == v.shape == want, f"layer {layer}: k {tuple(k.shape)}, v {tuple(v.shape)}, want {want}"
    assert cache.length == P + n


def test_greedy_generation_with_the_cache_is_token_identical_to_recomputation(model32):
    prompt = torch.randint(0, V, (3, 4), generator=torch.Generator().manual_seed(4))
    cached = generate(model32, prompt, 10, greedy=True)
    recomputed = generate(model32, prompt, 10, greedy=True, use_cache=False)
    assert cached.shape == (3, 14)
    assert torch.equal(cached, recomputed), f"with the cache {cached.tolist()}, recomputing {recomputed.tolist()}"


@pytest.mark.parametrize("options", [dict(), dict(temperature=0.7, top_k=10, top_p=0.9)], ids=["plain", "filtered"])
def test_sampled_generation_with_the_cache_draws_the_same_tokens_from_the_same_seed(model32, options):
    prompt = torch.randint(0, V, (3, 4), generator=torch.Generator().manual_seed(5))
    cached = generate(model32, prompt, 10, generator=torch.Generator().manual_seed(6), **options)
    recomputed = generate(model32, prompt, 10, use_cache=False, generator=torch.Generator().manual_seed(6), **options)
    assert torch.equal(cached, recomputed), f"with the cache {cached.tolist()}, recomputing {recomputed.tolist()}"


def _positions_read(model: GPT, **generate_options) -> int:
    """How many positions go through the model (through wte, the first layer) while it generates."""
    read: list[int] = []
    hook = model.wte.register_forward_hook(lambda module, args, out: read.append(args[0].shape[1]))
    try:
        generate(model, **generate_options)
    finally:
        hook.remove()
    return sum(read)


def test_the_cache_reads_each_position_once_where_recomputation_rereads_the_prefix(model32):
    P, n = 4, 10
    prompt = torch.zeros(1, P, dtype=torch.long)
    with_cache = _positions_read(model32, ids=prompt, max_new_tokens=n, greedy=True)
    without = _positions_read(model32, ids=prompt, max_new_tokens=n, greedy=True, use_cache=False)
    assert with_cache == P + n - 1, f"{with_cache} positions read with the cache, want {P + n - 1}"  # last not fed
    assert without == sum(P + i for i in range(n)), f"{without} positions read recomputing"


def test_reading_more_than_block_size_positions_raises_naming_block_size(model32):
    with pytest.raises(ValueError, match="block_size"):
        model32(torch.zeros(1, N + 1, dtype=torch.long))
    cache = KVCache()
    model32(torch.zeros(1, N, dtype=torch.long), cache)
    with pytest.raises(ValueError, match="block_size"):
        model32(torch.zeros(1, 1, dtype=torch.long), cache)


def test_generation_that_would_read_more_than_block_size_positions_is_refused(model32):
    with pytest.raises(ValueError, match="block_size"):
        generate(model32, torch.zeros(1, N, dtype=torch.long), 2)
    assert generate(model32, torch.zeros(1, N, dtype=torch.long), 1).shape == (1, N + 1)  # last token is not read


# ----------------------------------------------------------------------------- parameters


def test_gpt2_small_has_124_439_808_parameters_by_the_formula_and_in_hugging_faces_model():
    with torch.device("meta"):
        hf_small = transformers.GPT2LMHeadModel(transformers.GPT2Config())
    theirs = sum(p.numel() for p in hf_small.parameters())
    assert count_parameters(GPTConfig.gpt2()) == 124_439_808 == theirs, f"formula, 124,439,808, HF: {theirs:,}"


def test_lmbooks_gpt2_small_has_as_many_parameters_as_the_formula():
    with torch.device("meta"):
        model = GPT(GPTConfig.gpt2())
    got = sum(p.numel() for p in model.parameters())
    assert got == count_parameters(GPTConfig.gpt2()), f"GPT(gpt2()) has {got:,} parameters"
    assert model.lm_head.weight is model.wte.weight, "the head should be wte itself"


@pytest.mark.parametrize("config", [GPTConfig(V, N, L, H, D), GPTConfig(V, N, 3, 2, 8, d_ff=20, tie_weights=False),
                                    GPTConfig(V, N, 1, 2, 8, bias=False)], ids=["tied", "untied_d_ff_20", "no_bias"])
def test_count_parameters_equals_the_models_for_small_configs(config):
    got = sum(p.numel() for p in GPT(config).parameters())
    assert count_parameters(config) == got, f"formula {count_parameters(config)}, model {got} for {config}"


def test_residual_projections_start_with_std_scaled_by_one_over_sqrt_two_n_layer():
    torch.manual_seed(0)
    model = GPT(GPTConfig(V, N, n_layer=8, n_head=4, d_model=64))
    want = 0.02 / (2 * 8) ** 0.5
    for name in ("attn.out_proj", "mlp.W_2"):
        std = torch.cat([b.get_submodule(name).weight.flatten() for b in model.h]).std().item()
        assert abs(std - want) < 0.05 * want, f"{name}: std {std:.5f}, want {want:.5f}"
    assert abs(model.h[0].mlp.W_1.weight.std().item() - 0.02) < 0.002, "other weights: std 0.02"


# ----------------------------------------------------------------------------- fine-tuning format and head (GPT-1)

START, DELIM, EXTRACT, PAD = 46, 47, 48, 49


def test_format_pair_puts_start_delim_and_extract_around_the_two_texts():
    assert format_pair([1, 2], [3, 4, 5], START, DELIM, EXTRACT) == [START, 1, 2, DELIM, 3, 4, 5, EXTRACT]
    assert format_single([1, 2], START, EXTRACT) == [START, 1, 2, EXTRACT]


def test_pad_batch_pads_on_the_right_and_returns_the_lengths():
    ids, lengths = pad_batch([[1, 2, 3], [4], [5, 6]], PAD)
    assert ids.tolist() == [[1, 2, 3], [4, PAD, PAD], [5, 6, PAD]]
    assert lengths.tolist() == [3, 1, 2]


def test_last_token_state_picks_index_length_minus_one_of_each_row():
    h = torch.randn(3, 5, 4)
    lengths = torch.tensor([5, 1, 3])
    want = torch.stack([h[i, int(lengths[i]) - 1] for i in range(3)])
    assert torch.equal(last_token_state(h, lengths), want)


def test_classifier_logits_ignore_padding_after_the_last_real_token(ours):
    torch.manual_seed(0)
    clf = GPTClassifier(copy.deepcopy(ours), n_classes=3).double().eval()
    seqs = [format_pair([1, 2], [3], START, DELIM, EXTRACT), format_single([4, 5, 6, 7], START, EXTRACT)]
    ids, lengths = pad_batch(seqs, PAD)
    longer = torch.cat([ids, torch.randint(0, V, (2, 5))], dim=1)  # any tokens at all after the real ones
    with torch.no_grad():
        alone = torch.cat([clf(torch.tensor([s]), torch.tensor([len(s)])) for s in seqs])
        padded, padded_more = clf(ids, lengths), clf(longer, lengths)
    assert padded.shape == (2, 3)
    torch.testing.assert_close(padded, alone, rtol=0, atol=TOL, msg="padding changed the class logits")
    torch.testing.assert_close(padded_more, alone, rtol=0, atol=TOL, msg="more padding changed the class logits")
