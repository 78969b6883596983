"""lmbook.llama: Hugging Face's LlamaForCausalLM (built from a LlamaConfig, no download) as the oracle for the whole
decoder and for each part (RMSNorm, SwiGLU, grouped-query attention), the KV cache's size computed and measured,
and known wrong versions of each part that must miss the oracle."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from lmbook.gpt import GPT, GPTConfig, KVCache, generate
from lmbook.llama import (
    GroupedQueryAttention,
    Llama,
    LlamaConfig,
    RMSNorm,
    SwiGLU,
    cache_nbytes,
    count_parameters,
    d_ff_for,
    kv_cache_bytes,
    load_hf_llama,
    repeat_kv,
)

transformers = pytest.importorskip("transformers")
from transformers.models.llama import modeling_llama as hf_llama  # noqa: E402

V, N, L, H, KV, D, FF = 50, 64, 2, 4, 2, 32, 48  # vocab, positions, layers, heads, kv heads, d_model, d_ff
TOL = 1e-5  # |logits − HF's|; HF computes RoPE's angles in float32, so even float64 models differ by ~1e-6


def _hf_config(**overrides) -> transformers.LlamaConfig:
    kwargs = dict(vocab_size=V, hidden_size=D, intermediate_size=FF, num_hidden_layers=L, num_attention_heads=H,
                  num_key_value_heads=KV, max_position_embeddings=N, rms_norm_eps=1e-6, tie_word_embeddings=False,
                  attn_implementation="eager")
    return transformers.LlamaConfig(**{**kwargs, **overrides})


def _randomise(model: torch.nn.Module) -> torch.nn.Module:
    """Unit-variance outputs from every matrix and gains away from 1, so that every weight changes the logits."""
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, p.shape[1] ** -0.5)
            else:
                p.add_(0.1 * torch.randn_like(p))
    return model


@pytest.fixture(scope="module")
def hf() -> torch.nn.Module:
    torch.manual_seed(0)
    return _randomise(transformers.LlamaForCausalLM(_hf_config())).eval()


@pytest.fixture(scope="module")
def ours(hf) -> Llama:
    return load_hf_llama(Llama(LlamaConfig(V, N, L, H, D, n_kv_head=KV, d_ff=FF)), hf).eval()


def _ids(B: int, n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, V, (B, n), generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------- the whole decoder


@pytest.mark.parametrize("B, n", [(1, 1), (2, 9), (3, N)], ids=["one_token", "short", "full_context"])
def test_logits_equal_hugging_faces_llama_with_grouped_query_attention(hf, ours, B, n):
    assert hf.config.num_key_value_heads < hf.config.num_attention_heads
    ids = _ids(B, n, seed=n)
    with torch.no_grad():
        diff = (ours(ids) - hf(ids).logits).abs().max().item()
    assert diff < TOL, f"logits differ from LlamaForCausalLM's by {diff:.2e} (allowed {TOL:.0e})"


@pytest.mark.parametrize("n_kv_head", [1, 4], ids=["multi_query", "multi_head"])
def test_logits_equal_hugging_faces_llama_for_multi_query_and_multi_head(n_kv_head):
    torch.manual_seed(1)
    hf = _randomise(transformers.LlamaForCausalLM(_hf_config(num_key_value_heads=n_kv_head))).eval()
    ours = load_hf_llama(Llama(LlamaConfig(V, N, L, H, D, n_kv_head=n_kv_head, d_ff=FF)), hf).eval()
    ids = _ids(2, 20)
    with torch.no_grad():
        diff = (ours(ids) - hf(ids).logits).abs().max().item()
    assert diff < TOL, f"n_kv_head={n_kv_head}: logits differ from HF's by {diff:.2e}"


def test_logits_equal_hugging_faces_llama_with_tied_embeddings():
    torch.manual_seed(2)
    hf = _randomise(transformers.LlamaForCausalLM(_hf_config(tie_word_embeddings=True))).eval()
    ours = load_hf_llama(Llama(LlamaConfig(V, N, L, H, D, n_kv_head=KV, d_ff=FF, tie_weights=True)), hf).eval()
    assert ours.lm_head.weight is ours.wte.weight
    with torch.no_grad():
        diff = (ours(_ids(2, 12)) - hf(_ids(2, 12)).logits).abs().max().item()
    assert diff < TOL, f"tied: logits differ from HF's by {diff:.2e}"


def test_parameter_count_formula_matches_the_model_and_hugging_face(hf, ours):
    for tie in (False, True):
        cfg = LlamaConfig(V, N, L, H, D, n_kv_head=KV, d_ff=FF, tie_weights=tie)
        assert count_parameters(cfg) == sum(p.numel() for p in Llama(cfg).parameters())
    assert count_parameters(ours.config) == sum(p.numel() for p in hf.parameters())


def test_d_ff_for_matches_a_gpt_of_the_same_size_to_within_one_column():
    gpt = sum(p.numel() for p in GPT(GPTConfig(V, 32, 2, 4, 64)).parameters())
    cfg = LlamaConfig(V, 32, 2, 4, 64, n_kv_head=2)
    cfg.d_ff = d_ff_for(gpt, cfg)
    assert abs(count_parameters(cfg) - gpt) <= 3 * 64 * 2 / 2, (count_parameters(cfg), gpt)


def test_loading_refuses_a_hugging_face_model_that_computes_something_else():
    hf = transformers.LlamaForCausalLM(_hf_config(attention_bias=True))
    with pytest.raises(ValueError, match="bias"):
        load_hf_llama(Llama(LlamaConfig(V, N, L, H, D, n_kv_head=KV, d_ff=FF)), hf)


def test_rope_pairing_matters_interleaved_pairs_miss_hugging_faces_logits(hf, ours, monkeypatch):
    """Llama pairs dimension i with i + d/2; the RoPE paper's (2i, 2i+1) is another function of the same weights."""
    from lmbook import llama as module

    original = module.rope
    monkeypatch.setattr(module, "rope", lambda x, p, base, interleaved: original(x, p, base, interleaved=True))
    with torch.no_grad():
        diff = (ours(_ids(2, 16)) - hf(_ids(2, 16)).logits).abs().max().item()
    assert diff > 100 * TOL, f"interleaved RoPE pairs should change the logits, changed them by {diff:.1e}"


# ----------------------------------------------------------------------------- each part against HF's


def test_rms_norm_equals_llama_rms_norm_and_torchs():
    x = torch.randn(3, 5, D, generator=torch.Generator().manual_seed(3)) * 4 + 1
    ours, theirs = RMSNorm(D, eps=1e-6), hf_llama.LlamaRMSNorm(D, eps=1e-6)
    with torch.no_grad():
        ours.weight.normal_()
        theirs.weight.copy_(ours.weight)
        torch_rms = F.rms_norm(x, (D,), ours.weight, eps=1e-6)
        assert torch.allclose(ours(x), theirs(x), atol=1e-6), (ours(x) - theirs(x)).abs().max()
        assert torch.allclose(ours(x), torch_rms, atol=1e-6)


def test_rms_norm_is_not_layer_norm_for_inputs_with_a_mean():
    """Subtracting the mean (LayerNorm without a bias) is the mistake RMSNorm is defined against."""
    x = torch.randn(4, D, generator=torch.Generator().manual_seed(4)) + 3.0
    with torch.no_grad():
        assert (RMSNorm(D)(x) - F.layer_norm(x, (D,), eps=1e-6)).abs().max() > 0.5


def test_swiglu_equals_llama_mlp():
    ours = SwiGLU(D, FF)
    theirs = hf_llama.LlamaMLP(_hf_config())
    with torch.no_grad():
        for a, b in ((ours.W_gate, theirs.gate_proj), (ours.W_up, theirs.up_proj), (ours.W_down, theirs.down_proj)):
            a.weight.copy_(b.weight)
        x = torch.randn(2, 7, D, generator=torch.Generator().manual_seed(5))
        assert torch.allclose(ours(x), theirs(x), atol=1e-6), (ours(x) - theirs(x)).abs().max()
        swapped = ours.W_down(ours.W_gate(x) * F.silu(ours.W_up(x)))  # the gate on the wrong branch
        assert (swapped - theirs(x)).abs().max() > 1e-2


def _attention_pair(n_kv_head: int = KV):
    cfg = _hf_config(num_key_value_heads=n_kv_head)
    theirs = hf_llama.LlamaAttention(cfg, layer_idx=0).eval()
    rotary = hf_llama.LlamaRotaryEmbedding(cfg)
    ours = GroupedQueryAttention(LlamaConfig(V, N, L, H, D, n_kv_head=n_kv_head, d_ff=FF), layer=0)
    with torch.no_grad():
        for a, b in ((ours.W_q, theirs.q_proj), (ours.W_k, theirs.k_proj), (ours.W_v, theirs.v_proj),
                     (ours.W_o, theirs.o_proj)):
            b.weight.normal_(0.0, D ** -0.5)
            a.weight.copy_(b.weight)
    return ours, theirs, rotary


def _theirs(theirs, rotary, x: torch.Tensor, start: int = 0) -> torch.Tensor:
    n = x.shape[1]
    pos = torch.arange(start, start + n)[None]
    mask = torch.full((n, n), float("-inf")).triu(1)[None, None]
    return theirs(x, position_embeddings=rotary(x, pos), attention_mask=mask)[0]


@pytest.mark.parametrize("n_kv_head", [1, 2, 4])
def test_grouped_query_attention_equals_llama_attention(n_kv_head):
    ours, theirs, rotary = _attention_pair(n_kv_head)
    x = torch.randn(2, 11, D, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        diff = (ours(x) - _theirs(theirs, rotary, x)).abs().max().item()
    assert diff < 1e-5, f"n_kv_head={n_kv_head}: differs from LlamaAttention by {diff:.2e}"


def test_keys_repeated_per_head_instead_of_per_group_miss_llama_attention(monkeypatch):
    """kv head g serves query heads g·group … (g+1)·group − 1; tiling (repeat) gives head h kv head h mod n_kv."""
    from lmbook import llama as module

    ours, theirs, rotary = _attention_pair(2)
    x = torch.randn(2, 11, D, generator=torch.Generator().manual_seed(7))
    monkeypatch.setattr(module, "repeat_kv", lambda t, group: t.repeat(1, group, 1, 1))
    with torch.no_grad():
        assert (ours(x) - _theirs(theirs, rotary, x)).abs().max() > 1e-2


def test_repeat_kv_gives_each_query_head_its_groups_kv_head():
    k = torch.arange(3).float().view(1, 3, 1, 1).expand(1, 3, 2, 4)  # kv head g holds the number g
    heads = repeat_kv(k, 2)[0, :, 0, 0].tolist()
    assert heads == [0, 0, 1, 1, 2, 2]


# ----------------------------------------------------------------------------- the KV cache


def test_cached_forward_equals_reading_the_whole_sequence(ours):
    ids = _ids(2, 20, seed=8)
    with torch.no_grad():
        full = ours(ids)
        cache = KVCache()
        parts = [ours(ids[:, :7], cache), ours(ids[:, 7:8], cache), ours(ids[:, 8:20], cache)]
    diff = (torch.cat(parts, dim=1) - full).abs().max().item()
    assert diff < 1e-5, f"with a cache the logits differ by {diff:.2e}"


def test_cached_forward_equals_hugging_faces_cached_forward(hf, ours):
    ids = _ids(1, 12, seed=9)
    with torch.no_grad():
        out = hf(ids[:, :8], use_cache=True)
        theirs = hf(ids[:, 8:], cache=out.past_key_values).logits
        cache = KVCache()
        ours(ids[:, :8], cache)
        mine = ours(ids[:, 8:], cache)
    assert (mine - theirs).abs().max() < TOL


def test_generation_with_and_without_cache_gives_the_same_tokens(ours):
    model = copy.deepcopy(ours)
    prompt = _ids(2, 5, seed=10)
    assert torch.equal(generate(model, prompt, 20, greedy=True), generate(model, prompt, 20, greedy=True,
                                                                           use_cache=False))


def test_cache_holds_n_kv_head_heads_and_its_bytes_match_the_formula(ours):
    cache = KVCache()
    with torch.no_grad():
        ours(_ids(3, 10), cache)
        ours(_ids(3, 1), cache)
    assert tuple(cache.k[0].shape) == (3, KV, 11, D // H)
    assert cache_nbytes(cache) == kv_cache_bytes(L, KV, D // H, n_tokens=11, batch=3, bytes_per_value=4)


def test_grouped_query_cache_is_n_head_over_n_kv_head_times_smaller_than_gpt2s():
    gpt = GPT(GPTConfig(V, N, L, H, D)).eval()
    llama = Llama(LlamaConfig(V, N, L, H, D, n_kv_head=1, d_ff=FF)).eval()
    sizes = {}
    for name, model in (("gpt", gpt), ("llama", llama)):
        cache = KVCache()
        with torch.no_grad():
            model(_ids(2, 16), cache)
        sizes[name] = cache_nbytes(cache)
    assert sizes["gpt"] == kv_cache_bytes(L, H, D // H, 16, 2, 4)
    assert sizes["gpt"] == H * sizes["llama"]


def test_kv_cache_bytes_of_llama_2_70b_at_4096_tokens_in_fp16():
    """80 layers, 8 KV heads of 128 (Touvron et al., 2023b): 2 · 80 · 8 · 128 · 4096 · 2 bytes = 1.25 GiB; with 64
    KV heads, as multi-head attention would have, 10 GiB."""
    assert kv_cache_bytes(80, 8, 128, 4096) == 1.25 * 2**30
    assert kv_cache_bytes(80, 64, 128, 4096) == 10 * 2**30
