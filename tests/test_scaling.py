"""Training cost arithmetic (FLOPs per token, MFU), the matmul peak, and data parallelism's equivalence."""

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lmbook.ddp_step import single_process_grads
from lmbook.gpt import GPT, GPTConfig, count_parameters
from lmbook.scaling import PEAK_FLOPS, flops_per_token, measured_matmul_flops, mfu, non_embedding_params

ROOT = Path(__file__).resolve().parent.parent


def test_flops_per_token_is_6n_plus_attention_by_hand():
    # N = 1000 weights, 2 layers, d = 8, T = 16: 6·1000 + 12·2·8·16 = 6000 + 3072
    assert flops_per_token(1000, n_layer=2, d_model=8, block_size=16) == 9072


def test_flops_per_token_matches_nanogpts_estimate_mfu_formula():
    # nanoGPT's model.estimate_mfu, written out: flops_per_token = 6*N + 12*L*H*Q*T, with Q = d / H the head size
    cfg = GPTConfig(vocab_size=100, block_size=64, n_layer=3, n_head=4, d_model=32)
    N = non_embedding_params(GPT(cfg))
    L, H, Q, T = cfg.n_layer, cfg.n_head, cfg.d_model // cfg.n_head, cfg.block_size
    nanogpt = 6 * N + 12 * L * H * Q * T
    ours = flops_per_token(N, cfg.n_layer, cfg.d_model, cfg.block_size)
    assert ours == nanogpt, f"flops_per_token gives {ours}, nanoGPT's formula {nanogpt}"


def test_non_embedding_params_leaves_out_only_the_position_table():
    cfg = GPTConfig(vocab_size=100, block_size=64, n_layer=2, n_head=4, d_model=32)
    expected = count_parameters(cfg) - cfg.block_size * cfg.d_model
    assert non_embedding_params(GPT(cfg)) == expected, "N should be every parameter but wpe (the tied wte counts)"


def test_mfu_is_achieved_flops_over_peak():
    # 1,000 tokens/s × 1e9 FLOPs per token = 1e12 FLOP/s, a quarter of a 4e12 peak
    assert mfu(1_000, 1e9, 4e12) == pytest.approx(0.25)


def test_mfu_rejects_a_peak_of_zero():
    with pytest.raises(ValueError, match="peak_flops"):
        mfu(1.0, 1.0, 0.0)


def test_peak_flops_table_has_the_dense_datasheet_figures():
    assert PEAK_FLOPS["A100 (bf16)"] == 312e12
    assert PEAK_FLOPS["H100 SXM (bf16)"] == 989e12, "the dense figure, half of the 1,979 quoted with sparsity"


def test_measured_matmul_flops_is_positive_and_finite():
    flops = measured_matmul_flops(n=128, repeats=2)
    assert flops > 0 and math.isfinite(flops), flops


def test_the_gradient_of_one_slice_is_not_the_global_gradient():
    # What makes the DDP test able to fail: a rank that kept its own gradient (no all-reduce), or that summed
    # the ranks' gradients instead of averaging them, would not match the global batch's gradient.
    full = single_process_grads()
    half = single_process_grads(rows=slice(0, 4))
    other = single_process_grads(rows=slice(4, 8))
    differs = max((half[k] - full[k]).abs().max().item() for k in full)
    assert differs > 1e-3, f"one slice's gradient is within {differs:.2g} of the global one: the batch is degenerate"
    summed = max((half[k] + other[k] - full[k]).abs().max().item() for k in full)
    assert summed > 1e-3, f"the sum of the slices' gradients is within {summed:.2g} of the global one"
    averaged = max(((half[k] + other[k]) / 2 - full[k]).abs().max().item() for k in full)
    assert averaged < 1e-6, f"the mean of the two slices' gradients is {averaged:.2g} from the global one"


@pytest.mark.slow
def test_ddp_with_two_processes_gives_the_single_process_gradient(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}  # 2 CPU processes, even on 1 GPU
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                        "-m", "lmbook.ddp_step", "--out", str(tmp_path)],
                       capture_output=True, text=True, cwd=ROOT, env=env, timeout=1800)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    saved = torch.load(tmp_path / "grads_ddp.pt")
    assert saved["world_size"] == 2
    reference = single_process_grads()
    assert saved["grads"].keys() == reference.keys()
    for name, grad in reference.items():
        diff = (saved["grads"][name] - grad).abs().max().item()
        assert diff <= 1e-6, f"{name}: DDP's gradient is {diff:.2g} from the single-process one on the global batch"
    after = single_process_grads(sgd_step=True)
    for name, param in after.items():
        diff = (saved["params_after_step"][name] - param).abs().max().item()
        assert diff <= 1e-6, f"{name}: after one SGD step DDP's parameter is {diff:.2g} from the single-process one"
