"""One data-parallel training step, to launch with torchrun (appendix "Scaling up on a GPU").

    torchrun --standalone --nproc_per_node=2 -m lmbook.ddp_step --out DIR

Every process (rank) builds the same small GPT from the same seed, so the replicas start identical; takes its
contiguous slice of one fixed global batch (global_batch / world_size sequences); and runs forward and backward
on it under ``DistributedDataParallel``. During backward DDP all-reduces every gradient and divides by the world
size, so each rank ends with the *mean* of the ranks' gradients. With equal slices and a mean loss, that is the
gradient of the mean loss over the whole global batch, which :func:`single_process_grads` computes in one
process: data parallelism changes where the work runs, not what is computed. Rank 0 saves the gradients, and the
parameters after one SGD step, to DIR/grads_ddp.pt.

The backend is gloo on CPU and NCCL with CUDA, where rank r uses GPU ``LOCAL_RANK`` (its index on its machine).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from .gpt import GPT, GPTConfig

CONFIG = GPTConfig(vocab_size=50, block_size=16, n_layer=2, n_head=2, d_model=32)
GLOBAL_BATCH = 8
LR = 0.1


def make_model(seed: int = 0, config: GPTConfig = CONFIG) -> GPT:
    """The same weights in every process: the model is built right after seeding."""
    torch.manual_seed(seed)
    return GPT(config)


def global_batch(seed: int = 0, batch: int = GLOBAL_BATCH, config: GPTConfig = CONFIG) -> tuple[torch.Tensor, ...]:
    """The fixed global batch: inputs and next tokens, (batch, block_size) each, from a seeded generator."""
    g = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(0, config.vocab_size, (batch, config.block_size + 1), generator=g)
    return ids[:, :-1], ids[:, 1:]


def local_slice(x: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Rank ``rank``'s contiguous share of the batch dimension; the batch must split evenly."""
    if len(x) % world_size:
        raise ValueError(f"a global batch of {len(x)} does not split evenly over {world_size} processes")
    per = len(x) // world_size
    return x[rank * per : (rank + 1) * per]


def mean_loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over every position of the batch."""
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def grads_of(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """name → gradient, on the CPU (a tied weight appears once, under its first name)."""
    return {name: p.grad.detach().cpu().clone() for name, p in model.named_parameters()}


def params_of(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().cpu().clone() for name, p in model.named_parameters()}


def single_process_grads(seed: int = 0, rows: slice = slice(None), sgd_step: bool = False) -> dict[str, torch.Tensor]:
    """The reference, without DDP: the gradients of the mean loss over ``rows`` of the global batch (all of it
    by default). With ``sgd_step``, the parameters after one SGD step of rate ``LR`` instead."""
    model = make_model(seed)
    x, y = global_batch(seed)
    model.zero_grad()
    mean_loss(model, x[rows], y[rows]).backward()
    if not sgd_step:
        return grads_of(model)
    torch.optim.SGD(model.parameters(), lr=LR).step()
    return params_of(model)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for grads_ddp.pt (rank 0 writes it)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    cuda = torch.cuda.is_available()
    dist.init_process_group(backend="nccl" if cuda else "gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if cuda:
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    try:
        model = make_model(args.seed).to(device)
        ddp = DistributedDataParallel(model, device_ids=[device] if cuda else None)
        x, y = (local_slice(t, rank, world_size).to(device) for t in global_batch(args.seed))
        mean_loss(ddp, x, y).backward()  # DDP all-reduces the gradients here, bucket by bucket, and averages them
        grads = grads_of(model)
        torch.optim.SGD(model.parameters(), lr=LR).step()
        if rank == 0:
            args.out.mkdir(parents=True, exist_ok=True)
            torch.save({"world_size": world_size, "backend": dist.get_backend(), "grads": grads,
                        "params_after_step": params_of(model)}, args.out / "grads_ddp.pt")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
