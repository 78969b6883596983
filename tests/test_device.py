import pytest
import torch

from lmbook import get_device, seed_everything


def test_lmbook_device_overrides_the_automatic_choice(monkeypatch):
    monkeypatch.setenv("LMBOOK_DEVICE", "cpu")
    assert get_device() == torch.device("cpu")


def test_unknown_lmbook_device_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("LMBOOK_DEVICE", "tpu")
    with pytest.raises(ValueError, match="expected one of cuda, mps, cpu"):
        get_device()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_asking_for_cuda_without_a_gpu_says_so(monkeypatch):
    monkeypatch.setenv("LMBOOK_DEVICE", "cuda")
    with pytest.raises(RuntimeError, match="no CUDA device"):
        get_device()


def test_automatic_choice_prefers_cuda_when_present(monkeypatch):
    monkeypatch.delenv("LMBOOK_DEVICE", raising=False)
    expected = "cuda" if torch.cuda.is_available() else ("mps" if torch.backends.mps.is_available() else "cpu")
    assert get_device().type == expected


def test_seed_everything_makes_torch_draws_repeatable():
    seed_everything(123)
    a = torch.randn(5)
    g = seed_everything(123)
    assert torch.equal(a, torch.randn(5)), "the same seed gave different torch.randn draws"
    assert torch.equal(torch.randn(3, generator=g), torch.randn(3, generator=torch.Generator().manual_seed(123)))


def test_default_seed_is_zero_unless_lmbook_seed_is_set(monkeypatch):
    from lmbook import default_seed

    monkeypatch.delenv("LMBOOK_SEED", raising=False)
    assert default_seed() == 0
    monkeypatch.setenv("LMBOOK_SEED", "7")
    assert default_seed() == 7
    monkeypatch.setenv("LMBOOK_SEED", "seven")
    with pytest.raises(ValueError, match="expected an integer"):
        default_seed()
