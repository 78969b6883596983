"""Exercise 9's thinking questions: count what a GPT stores and computes, as functions of its configuration.

Each answer is a small function of the configuration, graded like a code task on other configurations (hidden
cases), so an answer cannot be copied as a number. The references are the definitions written out, factor by
factor; the tests check them against lmbook's model (its cache after generation, its parameter count, the
positions its forward pass reads).

- ``kv_cache_bytes``: the memory of a KV cache: keys and values, every layer, every head, every position, every
  sequence of the batch.
- ``gpt_parameters``: a GPT-2-style model's parameters from its sizes, with the output layer tied or not.
- ``positions_read``: how many positions the model runs through its blocks to generate ``n_new`` tokens after
  a prompt, with a KV cache and without.
"""

from __future__ import annotations

import torch

from ...grading.checks import Case, Check, Mutant
from ..common import COURSE, compare_whole_number, compare_whole_numbers

MODULES = (*COURSE, "lmbook.gpt", "lmbook.generate", "transformers")
# Not `numel`: torch calls it inside its own layers (a model built on the meta device and counted by shapes is a
# right answer), and summing numel over a model is refused by the model it would need (lmbook.gpt, transformers)
ATTRS = ("gpt", "transformers", "count_parameters", "num_parameters")




def _fixed(*args):
    def make(g, device):
        return (tuple(args), {})
    return make


# ----------------------------------------------------------------------------- Q1: kv_cache_bytes


def _kv_ref(n_layer, n_head, d_head, n_tokens, batch_size, bytes_per_value) -> int:
    # K and V, each (batch_size, n_head, n_tokens, d_head), in every layer
    return 2 * n_layer * batch_size * n_head * n_tokens * d_head * bytes_per_value


def _kv_with(mistake: str):
    def fn(n_layer, n_head, d_head, n_tokens, batch_size, bytes_per_value):
        full = _kv_ref(n_layer, n_head, d_head, n_tokens, batch_size, bytes_per_value)
        if mistake == "k_only":
            return full // 2
        if mistake == "one_layer":
            return full // n_layer
        if mistake == "one_head":
            return full // n_head
        if mistake == "no_batch":
            return full // batch_size
        if mistake == "bits":
            return full * 8
        if mistake == "scores":  # the attention weights, n × n per head, instead of the keys and values
            return n_layer * batch_size * n_head * n_tokens * n_tokens * bytes_per_value
        raise ValueError(mistake)
    return fn


def _kv_random(g, device):
    def draw(lo, hi):
        return int(torch.randint(lo, hi + 1, (1,), generator=g))
    return ((draw(2, 40), draw(2, 32), 16 * draw(1, 8), draw(100, 5000), draw(2, 16),
             (1, 2, 4)[draw(0, 2)]), {})


KV_CACHE_BYTES = Check(
    task="kv_cache_bytes",
    what="the bytes of a KV cache: K and V, (batch_size, n_head, n_tokens, d_head) each, in every layer",
    reference=_kv_ref,
    compare=compare_whole_number("bytes"),
    cases=[Case("GPT-2 small, 1,024 tokens, one sequence, float32", _fixed(12, 12, 64, 1024, 1, 4)),
           Case("4 layers of 8 heads of 32, 100 tokens, a batch of 3, bfloat16", _fixed(4, 8, 32, 100, 3, 2))],
    hidden_cases=[Case("GPT-2 XL, 1,024 tokens, a batch of 8, float16", _fixed(48, 25, 64, 1024, 8, 2)),
                  Case("a 7B model's sizes (32 layers, 32 heads of 128), 4,096 tokens, float16",
                       _fixed(32, 32, 128, 4096, 1, 2)),
                  Case("one layer, one head, one token, int8", _fixed(1, 1, 8, 1, 1, 1)),
                  Case("fresh sizes", _kv_random),
                  Case("more fresh sizes", _kv_random)],
    mutants=[
        Mutant(_kv_with("k_only"), "counted the keys only: the cache holds the values as well, a factor of 2"),
        Mutant(_kv_with("one_layer"), "counted one layer: every block attends with its own keys and values, "
                                      "so each of the n_layer layers keeps its own cache"),
        Mutant(_kv_with("one_head"), "counted one head: each of the n_head heads keeps its own keys and values "
                                     "of size d_head (together n_head · d_head = d_model per position)"),
        Mutant(_kv_with("no_batch"), "left out the batch: each sequence of the batch has a cache of its own"),
        Mutant(_kv_with("bits"), "counted bits, not bytes: bytes_per_value is already in bytes"),
        Mutant(_kv_with("scores"), "counted the attention weights (n_tokens × n_tokens per head) instead of the "
                                   "keys and values, n_tokens × d_head each per head: the cache keeps K and V, "
                                   "and each new query's scores are computed from them, then dropped"),
    ],
    forbidden_modules=MODULES,
    forbidden_attrs=ATTRS,
)


# ----------------------------------------------------------------------------- Q2: gpt_parameters


def _gpt_ref(vocab_size, block_size, n_layer, d_model, d_ff, tied) -> int:
    V, N, L, d = vocab_size, block_size, n_layer, d_model
    ln = 2 * d  # gain and bias
    attn = 3 * d * d + 3 * d + d * d + d  # W_q, W_k, W_v with biases; W_o with its bias
    ffn = d * d_ff + d_ff + d_ff * d + d  # W_1, b_1, W_2, b_2
    output = 0 if tied else V * d  # tied: the output layer is E itself, no bias
    return V * d + N * d + L * (2 * ln + attn + ffn) + ln + output


def _gpt_with(mistake: str):
    def fn(vocab_size, block_size, n_layer, d_model, d_ff, tied):
        V, N, L, d = vocab_size, block_size, n_layer, d_model
        full = _gpt_ref(V, N, L, d, d_ff, tied)
        if mistake == "no_biases":
            return full - L * (4 * d + d_ff + d)
        if mistake == "ln_one_vector":
            return full - (2 * L + 1) * d
        if mistake == "no_ln_f":
            return full - 2 * d
        if mistake == "tied_counted_twice":
            return full + (V * d if tied else 0)
        if mistake == "untied_forgotten":
            return full - (0 if tied else V * d)
        if mistake == "no_positions":
            return full - N * d
        if mistake == "ffn_4d":
            return _gpt_ref(V, N, L, d, 4 * d, tied)
        if mistake == "no_w_o":
            return full - L * (d * d + d)
        raise ValueError(mistake)
    return fn


def _gpt_random(g, device):
    def draw(lo, hi):
        return int(torch.randint(lo, hi + 1, (1,), generator=g))
    d = 8 * draw(2, 40)
    return ((draw(50, 60000), draw(16, 2048), draw(1, 12), d, draw(1, 6) * d + draw(0, 7), bool(draw(0, 1))), {})


GPT_PARAMETERS = Check(
    task="gpt_parameters",
    what="every parameter of a GPT-2-style model: E, P, n_layer pre-LN blocks with biases, LN_f, and an output "
         "matrix of its own only when it is not tied to E",
    reference=_gpt_ref,
    compare=compare_whole_number("parameters"),
    cases=[Case("GPT-2 small: V = 50,257, 1,024 positions, 12 layers, d = 768, d_ff = 3,072, tied",
                _fixed(50257, 1024, 12, 768, 3072, True)),
           Case("a small model, untied: V = 1,000, 64 positions, 3 layers, d = 64, d_ff = 200",
                _fixed(1000, 64, 3, 64, 200, False))],
    hidden_cases=[Case("GPT-2 XL, tied", _fixed(50257, 1024, 48, 1600, 6400, True)),
                  Case("GPT-2 small, untied", _fixed(50257, 1024, 12, 768, 3072, False)),
                  Case("no layers at all, V = 10, 4 positions, d = 8, tied", _fixed(10, 4, 0, 8, 32, True)),
                  Case("d_ff smaller than d_model, tied", _fixed(300, 32, 2, 48, 30, True)),
                  Case("fresh sizes", _gpt_random),
                  Case("more fresh sizes", _gpt_random)],
    mutants=[
        Mutant(_gpt_with("no_biases"), "left out the biases of the linear layers: W_q, W_k, W_v and W_o have "
                                       "d_model each, W_1 has d_ff and W_2 d_model"),
        Mutant(_gpt_with("ln_one_vector"), "counted one vector per LayerNorm: each has a gain and a bias, "
                                           "2 · d_model"),
        Mutant(_gpt_with("no_ln_f"), "left out the final LayerNorm LN_f: a pre-LN stack normalises once more "
                                     "after its last block, 2 · d_model"),
        Mutant(_gpt_with("tied_counted_twice"), "counted the output matrix when it is tied: a tied output layer "
                                                "is E itself, one tensor counted once"),
        Mutant(_gpt_with("untied_forgotten"), "left out the output matrix when it is not tied: untied, the "
                                              "output layer is a vocab_size × d_model matrix of its own"),
        Mutant(_gpt_with("no_positions"), "left out the position embeddings: GPT learns them, block_size × "
                                          "d_model"),
        Mutant(_gpt_with("ffn_4d"), "took d_ff as 4 · d_model: use the d_ff given, which need not be 4 · "
                                    "d_model"),
        Mutant(_gpt_with("no_w_o"), "left out the attention's output projection W_o (d_model × d_model and "
                                    "its bias): after the heads are merged, W_o maps them back into the "
                                    "stream"),
    ],
    forbidden_modules=MODULES,
    forbidden_attrs=ATTRS,
)


# ----------------------------------------------------------------------------- Q3: positions_read


def _positions_ref(prompt_len, n_new) -> tuple[int, int]:
    P, n = prompt_len, n_new
    with_cache = P + n - 1  # the prompt once, then each new token but the last, one position each
    without = n * P + n * (n - 1) // 2  # step k reads the P + k - 1 positions known then, k = 1 … n
    return with_cache, without


def _positions_with(mistake: str):
    def fn(prompt_len, n_new):
        P, n = prompt_len, n_new
        with_cache, without = _positions_ref(P, n)
        if mistake == "last_read":
            return with_cache + 1, without + P + n
        if mistake == "no_prompt":
            return n, without
        if mistake == "no_growth":
            return with_cache, n * P
        if mistake == "whole_length":
            return with_cache, n * (P + n)
        if mistake == "prompt_each_step":
            return P * n, without
        raise ValueError(mistake)
    return fn


def _positions_random(g, device):
    return ((int(torch.randint(1, 200, (1,), generator=g)), int(torch.randint(2, 500, (1,), generator=g))), {})


POSITIONS_READ = Check(
    task="positions_read",
    what="positions run through the model to generate n_new tokens after a prompt of prompt_len: with a KV "
         "cache, and reading the whole sequence again at every step",
    reference=_positions_ref,
    compare=compare_whole_numbers(("with the cache", "without the cache"), "(with_cache, without_cache)",
                                  "positions"),
    cases=[Case("a prompt of 3 tokens, 4 new tokens", _fixed(3, 4)),
           Case("a prompt of 1 token, 1,024 new tokens", _fixed(1, 1024))],
    hidden_cases=[Case("one new token after a prompt of 10", _fixed(10, 1)),
                  Case("a prompt of 500, 2 new tokens", _fixed(500, 2)),
                  Case("fresh lengths", _positions_random),
                  Case("more fresh lengths", _positions_random)],
    mutants=[
        Mutant(_positions_with("last_read"), "ran the last new token through the model too: it is only "
                                             "written out, never read, since no token comes after it"),
        Mutant(_positions_with("no_prompt"), "left out the prompt: with a cache it is read once, all "
                                             "prompt_len positions, before the first new token"),
        Mutant(_positions_with("no_growth"), "read only the prompt at every step without a cache: the "
                                             "sequence grows by one token per step, and each step reads all "
                                             "of it"),
        Mutant(_positions_with("whole_length"), "read the final length at every step without a cache: step k "
                                                "reads the prompt and the k − 1 tokens made so far"),
        Mutant(_positions_with("prompt_each_step"), "read the prompt again at every step with the cache: the "
                                                    "cache keeps its keys and values, so it is read once"),
    ],
    forbidden_modules=MODULES,
    forbidden_attrs=ATTRS,
)

QUESTIONS = [KV_CACHE_BYTES, GPT_PARAMETERS, POSITIONS_READ]
