"""Exercise 9's thinking questions: each reference answer against what lmbook's GPT actually stores and reads."""

from __future__ import annotations

import pytest
import torch

from lmbook.gpt import GPT, GPTConfig, KVCache, count_parameters, generate
from lmbook.tasks.questions.ch09 import GPT_PARAMETERS, KV_CACHE_BYTES, POSITIONS_READ


@pytest.mark.parametrize(("dtype", "batch_size", "n_tokens"), [(torch.float32, 1, 7), (torch.float64, 3, 12),
                                                               (torch.bfloat16, 2, 5)])
def test_kv_cache_bytes_is_what_the_models_cache_holds(dtype, batch_size, n_tokens):
    cfg = GPTConfig(vocab_size=50, block_size=16, n_layer=3, n_head=4, d_model=32)
    model = GPT(cfg).to(dtype).eval()
    cache = KVCache()
    with torch.no_grad():
        model(torch.randint(0, 50, (batch_size, n_tokens - 2)), cache)
        model(torch.randint(0, 50, (batch_size, 2)), cache)  # a later step appends
    held = sum(t.numel() * t.element_size() for t in cache.k + cache.v)
    bytes_per_value = torch.tensor([], dtype=dtype).element_size()
    assert KV_CACHE_BYTES.reference(cfg.n_layer, cfg.n_head, cfg.d_model // cfg.n_head, n_tokens, batch_size,
                                    bytes_per_value) == held


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize(("L", "d", "d_ff"), [(0, 8, 32), (2, 48, 30), (3, 64, 256)])
def test_gpt_parameters_counts_every_parameter_of_lmbooks_gpt(tied, L, d, d_ff):
    cfg = GPTConfig(vocab_size=123, block_size=17, n_layer=L, n_head=4, d_model=d, d_ff=d_ff, tie_weights=tied)
    with torch.device("meta"):
        numel = sum(p.numel() for p in GPT(cfg).parameters())  # a tied matrix is one parameter, counted once
    assert GPT_PARAMETERS.reference(123, 17, L, d, d_ff, tied) == numel == count_parameters(cfg)


def test_gpt_parameters_of_gpt2_small_is_the_published_count():
    assert GPT_PARAMETERS.reference(50257, 1024, 12, 768, 3072, True) == 124_439_808


@pytest.mark.parametrize(("prompt_len", "n_new"), [(1, 1), (3, 4), (5, 9)])
def test_positions_read_counts_the_positions_generation_runs_through_the_model(prompt_len, n_new):
    model = GPT(GPTConfig(vocab_size=20, block_size=32, n_layer=1, n_head=2, d_model=8)).eval()
    read = []
    hook = model.wte.register_forward_hook(lambda module, args, out: read.append(args[0].shape[1]))
    counts = []
    for use_cache in (True, False):
        read.clear()
        generate(model, torch.zeros(1, prompt_len, dtype=torch.long), n_new, use_cache=use_cache, greedy=True)
        counts.append(sum(read))
    hook.remove()
    assert POSITIONS_READ.reference(prompt_len, n_new) == tuple(counts)
