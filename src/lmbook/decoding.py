"""Turning a language model's next-token distribution into text.

Two families of decoders:

* sampling (``filter_logits`` + ``sample_next``): draw y_t ~ p(y_t | y_<t),
  after reshaping p with temperature, top-k and top-p (nucleus) filtering;
* search (``greedy_decode``, ``beam_search``): look for the sequence with the
  highest (length-normalised) log-probability.

Conventions shared by the search functions:

* ``step_fn(prefix) -> Tensor`` takes the tokens so far (``prefix[0] == bos``)
  and returns the log-probabilities, shape (V,), of the next token. Chapter 3's
  decoder and the toy models in the tests both fit this interface.
* A hypothesis y = (y_1, ..., y_n) is the list of *generated* tokens: bos is
  left out, eos is kept if it was produced. n <= max_len, and either y_n is eos
  or n == max_len (a hypothesis cut off at max_len competes as if complete).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

StepFn = Callable[[list[int]], torch.Tensor]
TOP_P_SLACK = 1e-6  # a few float32 roundings of a probability sum


def filter_logits(
    logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None
) -> torch.Tensor:
    """Reshape next-token logits (shape (V,) or (B, V)); removed tokens get -inf.

    Applied in this order:

    1. temperature: z / T (T > 0). T < 1 sharpens softmax(z / T), T > 1 flattens it.
    2. top-k: keep the tokens whose logit is >= the k-th largest logit. Ties with
       the k-th logit are all kept, so more than k tokens can survive.
    3. top-p (nucleus): with p = softmax of the logits left after step 2, keep the
       smallest set of most likely tokens whose total probability reaches top_p
       (cumulative sum >= top_p, up to a rounding slack of TOP_P_SLACK). The
       token that crosses the threshold is kept, so the most likely token always
       survives; top_p = 1 keeps everything. As in top-k, tokens tied with the
       least likely kept token are kept too.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    logits = logits / temperature
    if top_k is not None:
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if top_p is not None and top_p < 1:  # top_p = 1 keeps every token
        probs = torch.softmax(logits, dim=-1)
        sorted_probs = probs.sort(dim=-1, descending=True).values
        # a token is needed while the mass *before* it is still short of top_p; mass within
        # TOP_P_SLACK of top_p counts as reaching it, so rounding cannot decide exact boundaries
        mass_before = F.pad(sorted_probs.cumsum(dim=-1)[..., :-1], (1, 0))
        n_keep = (mass_before < top_p - TOP_P_SLACK).sum(dim=-1, keepdim=True).clamp(min=1)  # keep the argmax
        smallest_kept = sorted_probs.gather(-1, n_keep - 1)
        logits = logits.masked_fill(probs < smallest_kept, float("-inf"))
    return logits


def sample_next(
    logits: torch.Tensor,
    generator: torch.Generator | None = None,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> torch.Tensor:
    """Draw y ~ softmax(filter_logits(logits, ...)): token ids of shape (B,), or a scalar for (V,) logits.

    Pass a seeded ``torch.Generator`` to make the draws reproducible. The draw is made where the generator
    lives (a plain ``torch.Generator()`` is on the CPU) and the ids come back on the logits' device, so one seeded
    CPU generator gives the same text whether the model runs on a CPU, a GPU or a Mac.
    """
    probs = torch.softmax(filter_logits(logits, temperature, top_k, top_p), dim=-1)  # -inf -> probability 0
    if generator is not None and generator.device != probs.device:
        probs = probs.to(generator.device)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1).to(logits.device)


def greedy_decode(step_fn: StepFn, bos: int, eos: int, max_len: int) -> list[int]:
    """y_t = argmax_v log p(v | bos, y_<t) until eos (included) or max_len tokens; bos is not returned."""
    y: list[int] = []
    while len(y) < max_len:
        y.append(int(step_fn([bos, *y]).argmax()))
        if y[-1] == eos:
            break
    return y


def beam_search(
    step_fn: StepFn, bos: int, eos: int, beam_size: int, max_len: int, length_penalty: float = 1.0
) -> list[tuple[list[int], float]]:
    """Keep the beam_size best prefixes by sum log p; return up to beam_size hypotheses, best first.

    Each step extends every live prefix by every token and keeps the beam_size
    candidates with the highest raw score sum_t log p(y_t | y_<t). A kept
    candidate ending in eos is finished and set aside (so fewer prefixes stay
    live); the search stops when none is live or after max_len steps, and the
    prefixes still live then count as hypotheses too.

    Hypotheses are ranked by the length-normalised score

        score(y) = sum_t log p(y_t | y_<t) / len(y) ** length_penalty

    where len(y) counts the generated tokens, eos included, bos excluded.
    length_penalty = 0 ranks by the raw sum, which favours short outputs (each
    token adds a negative log-probability); 1 ranks by mean log-probability.
    Pruning uses the raw sum, as usual, so only a beam large enough to keep
    every candidate (V ** max_len) is guaranteed to find the best hypothesis.
    """
    if beam_size < 1 or max_len < 1:
        raise ValueError("beam_size and max_len must be >= 1")

    def normalised(y: list[int], logp: float) -> float:
        return logp / len(y) ** length_penalty

    live: list[tuple[list[int], float]] = [([], 0.0)]  # (generated tokens, sum of log-probs)
    done: list[tuple[list[int], float]] = []
    for _ in range(max_len):
        candidates = [
            (y + [v], logp + lp)
            for y, logp in live
            for v, lp in enumerate(step_fn([bos, *y]).tolist())
            if lp > float("-inf")
        ]
        candidates.sort(key=lambda c: c[1], reverse=True)  # stable: ties keep the earlier beam / lower id
        live = []
        for y, logp in candidates[:beam_size]:
            (done if y[-1] == eos else live).append((y, logp))
        if not live:
            break
    ranked = sorted(((y, normalised(y, logp)) for y, logp in done + live), key=lambda h: h[1], reverse=True)
    return ranked[:beam_size]
