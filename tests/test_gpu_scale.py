"""The appendix's sizes per device, the memory they plan for, the FLOP count and the GPU rows it shows."""

import json

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from lmbook.gpt import GPT, GPTConfig
from lmbook.gpu_scale import (
    SIZES,
    attention_bytes,
    attention_lengths,
    fit_batch_size,
    gpt_flops_per_token,
    gpu_rows,
    halve_on_oom,
    sizes_for,
    train_bytes,
    use_fused_attention,
)
from lmbook.profiling import peak_bytes

GIB = 2**30
H200, RTX_4090, LAPTOP = 139 * GIB, 24 * GIB, 8 * GIB


def count_train_flops(model: nn.Module, ids: torch.Tensor) -> float:
    """The FLOPs of one forward and backward of ``model`` on ``ids`` that PyTorch's FLOP counter sees
    (matrix products, attention), per token: a brute-force count to check the closed form against."""
    with FlopCounterMode(display=False) as counter:
        model(ids).float().sum().backward()
    return counter.get_total_flops() / ids.numel()



def test_each_device_kind_has_its_sizes_and_the_environment_overrides_them(monkeypatch):
    monkeypatch.delenv("LMBOOK_APPENDIX_SIZES", raising=False)
    assert sizes_for("cpu") is SIZES["cpu"] and sizes_for(torch.device("cuda", 1)) is SIZES["cuda"]
    assert sizes_for("mps").kind == "mps"
    monkeypatch.setenv("LMBOOK_APPENDIX_SIZES", "cuda-tiny")
    assert sizes_for("cpu") is SIZES["cuda-tiny"] and SIZES["cuda-tiny"].kind == "cuda"
    assert sizes_for("cpu", override="cpu") is SIZES["cpu"]
    with pytest.raises(ValueError, match="choose one of"):
        sizes_for("cpu", override="tpu")


def test_the_gpu_sizes_are_large_enough_for_the_lessons_and_the_cpu_keeps_the_course_sizes():
    cuda, cpu = SIZES["cuda"], SIZES["cpu"]
    n = gpt_flops_per_token(cuda.gpt_config(47))  # about 6 N: tens of millions of weights at least
    assert 6 * 30e6 < n and 768 <= cuda.d_model <= 1024 and 8 <= cuda.n_layer <= 12
    assert cuda.block_size == 1024 and cuda.d_model % cuda.n_head == 0
    assert cuda.tokens_per_step >= 16 * 1024  # on a large card
    assert max(cuda.attn_lengths) >= 4096 and min(cuda.attn_lengths) >= 512
    assert cpu.d_model <= 256 and cpu.block_size <= 128 and not cpu.compile_gpt


def test_the_batch_is_the_largest_power_of_two_that_fits_sixty_percent_of_the_card():
    cfg = SIZES["cuda"].gpt_config(47)
    assert fit_batch_size(cfg, 32, H200) == 32
    for memory in (H200, RTX_4090, LAPTOP):
        b = fit_batch_size(cfg, 32, memory)
        assert b & (b - 1) == 0 and 1 <= b <= 32
        assert b == 1 or train_bytes(cfg, b) <= 0.6 * memory
        assert b == 32 or train_bytes(cfg, 2 * b) > 0.6 * memory  # the largest that fits
    assert fit_batch_size(cfg, 32, RTX_4090) < 32 and fit_batch_size(cfg, 32, LAPTOP) >= 1
    assert fit_batch_size(cfg, 24, None) == 24  # memory unknown (CPU): the configured batch
    assert fit_batch_size(cfg, 24, H200) == 16  # a power of two, at most the configured batch


def test_the_memory_estimate_grows_with_the_batch_and_counts_weights_and_adamw():
    cfg = GPTConfig(vocab_size=47, block_size=16, n_layer=2, n_head=2, d_model=32)
    weights = sum(p.numel() for p in GPT(cfg).parameters())
    assert train_bytes(cfg, 0) == 16 * weights  # weight, gradient, two moments, float32
    assert train_bytes(cfg, 2) - train_bytes(cfg, 1) == pytest.approx(train_bytes(cfg, 1) - train_bytes(cfg, 0), 1)


def test_the_attention_lengths_fit_the_card_and_never_come_back_empty():
    cuda = SIZES["cuda"]
    bh = cuda.attn_batch * cuda.attn_heads
    assert attention_bytes(bh, 4096, 4) == 6 * bh * 4096**2 * 4
    assert attention_lengths(cuda, H200) == cuda.attn_lengths
    small = attention_lengths(cuda, LAPTOP)
    assert small and set(small) <= set(cuda.attn_lengths) and max(small) < 4096
    assert all(attention_bytes(bh, n, 4) <= 0.6 * LAPTOP for n in small)
    assert attention_lengths(cuda, 1) == cuda.attn_lengths[:1]
    assert attention_lengths(cuda, None) == cuda.attn_lengths


def test_running_out_of_memory_halves_the_batch_until_it_fits():
    tried = []

    def run(batch):
        tried.append(batch)
        if batch > 4:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return batch * 10

    assert halve_on_oom(run, 32) == (40, 4) and tried == [32, 16, 8, 4]
    with pytest.raises(torch.OutOfMemoryError):
        halve_on_oom(lambda b: (_ for _ in ()).throw(torch.OutOfMemoryError("no")), 2)


@pytest.mark.parametrize(("n_layer", "d_model", "block_size"), [(2, 32, 16), (3, 64, 24)])
def test_the_flop_count_is_what_torch_counts_in_the_matrix_products(n_layer, d_model, block_size):
    """6 N + 12 L d T against torch's FLOP counter on the course's attention (whose Q Kᵀ and A V are matrix
    products it sees): they differ by exactly 6 × the biases and LayerNorm gains, which multiply nothing."""
    cfg = GPTConfig(vocab_size=47, block_size=block_size, n_layer=n_layer, n_head=4, d_model=d_model)
    torch.manual_seed(0)
    model = GPT(cfg)
    counted = count_train_flops(model, torch.randint(0, 47, (2, block_size)))
    vectors = sum(p.numel() for p in model.parameters() if p.ndim == 1)
    assert gpt_flops_per_token(cfg) - 6 * vectors == counted


def test_fused_attention_computes_the_same_gpt():
    cfg = GPTConfig(vocab_size=47, block_size=16, n_layer=2, n_head=4, d_model=32)
    torch.manual_seed(0)
    model = GPT(cfg)
    ids = torch.randint(0, 47, (3, 16))
    before = model(ids)
    after = use_fused_attention(model)(ids)
    assert torch.allclose(before, after, atol=1e-5)
    assert {type(b.attn).__name__ for b in model.h} == {"FusedCausalSelfAttention"}


def test_peak_memory_is_not_guessed_off_cuda():
    assert peak_bytes(lambda: torch.zeros(10), "cpu") is None


def test_the_gpu_row_is_read_with_its_gpu_date_and_commit_and_none_without_one(tmp_path):
    path = tmp_path / "results.json"
    assert gpu_rows(path, "appendix_gpu") is None
    model = {"label": "bf16 autocast training speed ÷ float32", "median": 3.5, "tolerance": 0.1, "values": [3.5],
             "kind": "speed"}
    data = {"chapters": {"appendix_gpu": {"cpu": {"models": {"bf16_speedup": {**model, "median": 1.0}}}}}}
    path.write_text(json.dumps(data))
    assert gpu_rows(path, "appendix_gpu") is None  # a CPU row only: no GPU figure
    data["chapters"]["appendix_gpu"]["cuda"] = {"date": "2026-11-29", "commit": "0123456789abcdef",
                                                "device": "cuda (NVIDIA H200)", "models": {"bf16_speedup": model}}
    data["gpu_check"] = {"gpu": "NVIDIA H200", "torch": "2.11.0+cu130"}
    path.write_text(json.dumps(data))
    run = gpu_rows(path, "appendix_gpu")
    assert (run.gpu, run.date, run.commit, run.torch) == ("NVIDIA H200", "2026-11-29", "0123456", "2.11.0+cu130")
    assert run.values == {"bf16_speedup": 3.5} and run.kinds == {"bf16_speedup": "speed"}
