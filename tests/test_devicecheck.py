"""The pretend accelerator (lmbook.devicecheck) raises where CUDA raises and nowhere else: each bug a real GPU run
found is one of these shapes, and each thing CUDA allows must pass, or the guard would fail right code."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lmbook.decoding import sample_next
from lmbook.devicecheck import PRETEND, PretendAccelerator, side

MIXED = "Expected all tensors to be on the same device"


@pytest.fixture
def acc():
    with PretendAccelerator() as mode:
        yield mode


def test_a_tensor_put_on_the_accelerator_reports_its_device_and_keeps_its_values(acc):
    x = torch.arange(6.0).reshape(2, 3)
    y = acc.put(x.clone())
    assert y.device == PRETEND and side(y) == "gpu"
    assert torch.equal((y * 2).cpu(), x * 2)


def test_a_tensor_made_on_the_cpu_beside_one_on_the_accelerator_raises(acc):
    x = acc.put(torch.randn(4, 8))
    with pytest.raises(RuntimeError, match=MIXED):
        x + torch.ones(4, 8)


def test_a_tensor_made_on_its_inputs_device_passes(acc):
    x = acc.put(torch.randn(4, 8))
    assert side(x + torch.ones(4, 8, device=x.device)) == "gpu"
    assert side(x + torch.ones_like(x)) == "gpu"
    assert side(x + x.new_ones(4, 8)) == "gpu"
    assert side(x + torch.zeros(8).to(x.device)) == "gpu"


def test_a_cpu_mask_on_accelerator_scores_raises_as_in_exercise_11(acc):
    scores = acc.put(torch.randn(3, 3))
    with pytest.raises(RuntimeError, match=MIXED):
        scores.masked_fill(torch.ones(3, 3, dtype=torch.bool).triu(1), float("-inf"))


def test_inverse_cdf_sampling_with_uniforms_drawn_on_the_cpu_raises_as_in_exercise_2(acc):
    cdf = acc.put(torch.rand(2, 5).cumsum(-1))
    with pytest.raises(RuntimeError, match=MIXED):
        torch.searchsorted(cdf, torch.rand(2, 3))
    assert side(torch.searchsorted(cdf, torch.rand(2, 3, device=cdf.device))) == "gpu"


def test_a_draw_on_the_accelerator_with_a_cpu_generator_raises_as_in_chapter_11(acc):
    probs = acc.put(torch.softmax(torch.randn(2, 5), -1))
    with pytest.raises(RuntimeError, match="device type for generator"):
        torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(0))
    with pytest.raises(RuntimeError, match="device type for generator"):
        torch.rand(3, device=probs.device, generator=torch.Generator().manual_seed(0))
    assert side(torch.multinomial(probs, 1, generator=torch.Generator(device=probs.device).manual_seed(0))) == "gpu"


def test_numpy_of_a_tensor_on_the_accelerator_raises_and_of_its_cpu_copy_passes(acc):
    x = acc.put(torch.randn(3))
    with pytest.raises(TypeError, match="numpy"):
        x.numpy()
    with pytest.raises(TypeError, match="numpy"):
        np.asarray(x)
    assert x.cpu().numpy().shape == (3,)


def test_what_cuda_allows_passes(acc):
    """Moves, reading values out, CPU indices, 0-d CPU scalars, and packing with lengths on the CPU."""
    x = acc.put(torch.randn(3, 4))
    assert side(x.cpu()) == "cpu" and side(torch.randn(2).to(x.device)) == "gpu"
    assert isinstance(x.sum().item(), float) and len(x.tolist()) == 3
    assert side(x[torch.tensor([0, 2])]) == "gpu"
    assert side(x * torch.tensor(2.0)) == "gpu"
    host = torch.zeros(3, 4)
    host.copy_(x)
    assert side(host) == "cpu" and torch.equal(host, x.cpu())
    lengths = torch.tensor([3, 1])
    packed = torch.nn.utils.rnn.pack_padded_sequence(acc.put(torch.randn(2, 3, 4)), lengths, batch_first=True)
    assert side(packed.data) == "gpu"


def test_moving_a_cpu_tensor_leaves_the_original_on_the_cpu(acc):
    """x.to(device) returns a new tensor on a GPU; the CPU original must still count as on the CPU."""
    cpu = torch.randn(4)
    moved = cpu.to(PRETEND)
    assert side(moved) == "gpu" and side(cpu) == "cpu"
    with pytest.raises(RuntimeError, match=MIXED):
        torch.stack([moved, cpu])


def test_a_module_moved_to_the_accelerator_trains_there(acc):
    model = torch.nn.Linear(4, 2).to(PRETEND)
    assert model.weight.device == PRETEND
    x = torch.randn(5, 4, device=PRETEND)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    F.mse_loss(model(x), torch.zeros(5, 2, device=x.device)).backward()
    opt.step()
    assert side(model.weight.grad) == "gpu" and side(model(x)) == "gpu"
    with pytest.raises(RuntimeError, match=MIXED):
        model(torch.randn(5, 4))


def test_a_seeded_cpu_generator_samples_the_same_tokens_on_the_accelerator_as_on_the_cpu(acc):
    logits = torch.randn(4, 50)
    on_cpu = sample_next(logits, torch.Generator().manual_seed(3), temperature=0.8, top_k=20)
    on_gpu = sample_next(logits.to(PRETEND), torch.Generator().manual_seed(3), temperature=0.8, top_k=20)
    assert side(on_gpu) == "gpu" and torch.equal(on_gpu.cpu(), on_cpu)


def test_torch_generator_is_restored_when_the_mode_ends():
    with PretendAccelerator():
        assert torch.Generator is not torch._C.Generator
    assert torch.Generator is torch._C.Generator


def test_lmbook_device_pretend_gives_the_pretend_device_for_the_whole_process():
    code = ("import torch, lmbook; d = lmbook.get_device(); x = torch.ones(2, device=d); print(d)\n"
            "try:\n    x + torch.ones(2)\nexcept RuntimeError as e:\n    print('raised:', e)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "LMBOOK_DEVICE": "pretend"}, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "meta" and MIXED in r.stdout, r.stdout


def test_a_recurrent_layer_on_a_packed_sequence_passes_and_a_cpu_initial_state_raises(acc):
    """nn.GRU on a packed sequence takes its batch sizes on the CPU, as CUDA wants them; a CPU h_0 is a bug."""
    gru = torch.nn.GRU(4, 3, batch_first=True).to(PRETEND)
    x = torch.randn(2, 5, 4, device=PRETEND)
    packed = torch.nn.utils.rnn.pack_padded_sequence(x, torch.tensor([5, 2]), batch_first=True)
    out, h = gru(packed)
    padded, lengths = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=True)
    assert side(padded) == "gpu" and side(h) == "gpu" and lengths.tolist() == [5, 2]
    with pytest.raises(RuntimeError, match=MIXED):
        gru(packed, torch.zeros(1, 2, 3))
