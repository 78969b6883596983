"""What each task's cases cover of its statement's promises, read from the cases' inputs.

Every task registered in a chapter's ``check`` (exercises and thinking questions alike) has an entry in
``PROMISES``: the kinds of input its statement admits that its visible and hidden cases hold (a batch of one,
a size-1 axis, float64, an input that is not contiguous, large values, padding, a special id inside a
segment...). The kinds are computed by the detectors below from the inputs the cases make, never from their
names, and compared with the table: a task added without its entry, or a case removed or changed so that a
promise is no longer covered, fails here with the task and the promise named.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator

import pytest
import torch

from lmbook.grading.checks import case_inputs

CPU = torch.device("cpu")
Detector = Callable[[tuple, dict, str], bool]


def _nodes(x) -> Iterator[object]:
    """x and everything inside its tuples, lists and dicts (a state dict's tensors, a list of gradients)."""
    yield x
    if isinstance(x, (tuple, list)):
        for v in x:
            yield from _nodes(v)
    elif isinstance(x, dict):
        for v in x.values():
            yield from _nodes(v)


def _leaves(args: tuple, kwargs: dict) -> list[object]:
    return list(_nodes((tuple(args), dict(kwargs))))


def _tensors(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    return [t for t in _leaves(args, kwargs) if isinstance(t, torch.Tensor)]


def _floats(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    return [t for t in _tensors(args, kwargs) if t.is_floating_point()]


# ----------------------------------------------------------------------------- generic kinds

# The tasks whose tensors have no batch axis: a table of steps (decoding), a table of offsets, gradients.
NO_BATCH = {"greedy_decode", "beam_search", "relative_position_bias", "adam_first_step", "clip_grad_norm"}
# Where the batch axis is not the first axis of the first tensor of two dimensions or more: dpo_loss's
# log-probabilities are (B,), one number per pair.
BATCH_ARG = {"dpo_loss": 0}


def _batched(args: tuple, kwargs: dict, task: str) -> torch.Tensor | None:
    """The tensor whose axis 0 is the batch axis (None where the task has none)."""
    if task in NO_BATCH:
        return None
    if task in BATCH_ARG:
        return args[BATCH_ARG[task]]
    return next((t for t in _nodes(tuple(args)) if isinstance(t, torch.Tensor) and t.ndim >= 2), None)


def batch_of_one(args, kwargs, task="") -> bool:
    t = _batched(args, kwargs, task)
    return t is not None and t.shape[0] == 1


def size_one_axis(args, kwargs, task="") -> bool:
    """A non-batch axis of size 1: axes 1… of a tensor of two dimensions or more (every axis where the task
    has no batch axis)."""
    first = 0 if task in NO_BATCH else 1
    return any(1 in t.shape[first:] for t in _tensors(args, kwargs) if t.ndim >= 2 or task in NO_BATCH)


def _row_ties(t: torch.Tensor) -> bool:
    if t.ndim == 0 or t.shape[-1] < 2:
        return False
    top = t.amax(-1, keepdim=True)
    return bool(((t == top).sum(-1)[top.squeeze(-1) > float("-inf")] >= 2).any())


# The arguments holding scores along their last axis, where equal maxima matter (ties).
TIE_ARGS = {"log_softmax": (0,), "cross_entropy": (0,), "perplexity": (0,), "filter_probs": (0,), "sample": (0,),
            "greedy_decode": (0,), "beam_search": (0,), "attend": (0,), "teacher_forcing_loss": (0,),
            "best_span": (0, 1), "span_loss": (0, 1), "instruction_loss": (0,)}


def ties(args, kwargs, task="") -> bool:
    return any(_row_ties(args[i]) for i in TIE_ARGS.get(task, ()))


def _is_empty(x) -> bool:
    return (isinstance(x, (str, tuple, list)) and len(x) == 0) or (isinstance(x, torch.Tensor) and x.numel() == 0)


GENERIC: dict[str, Detector] = {
    "batch of one": batch_of_one,
    "size-1 axis": size_one_axis,
    "float64": lambda a, k, task="": any(t.dtype == torch.float64 for t in _floats(a, k)),
    "float16/bfloat16": lambda a, k, task="": any(t.dtype in (torch.float16, torch.bfloat16) for t in _floats(a, k)),
    "not contiguous": lambda a, k, task="": any(not t.is_contiguous() for t in _tensors(a, k)),
    "large values": lambda a, k, task="": any(bool((t[t.isfinite()].abs() >= 50).any()) for t in _floats(a, k)),
    "-inf": lambda a, k, task="": any(bool((t == float("-inf")).any()) for t in _floats(a, k)),
    "ties": ties,
    "python int": lambda a, k, task="": any(type(x) is int for x in _leaves(a, k)),
    "python float": lambda a, k, task="": any(type(x) is float for x in _leaves(a, k)),
    "python bool": lambda a, k, task="": any(type(x) is bool for x in _leaves(a, k)),
    "id 0 in data": lambda a, k, task="": any(not t.is_floating_point() and t.dtype != torch.bool
                                              and bool((t == 0).any()) for t in _tensors(a, k)),
    "empty input": lambda a, k, task="": any(_is_empty(x) for x in _leaves(a, k)),
}

# ----------------------------------------------------------------------------- kinds of one task's statement

# Masks over positions, and the value that marks a real position (True: real; False: the key_padding_mask
# of nn.MultiheadAttention, True at padding). The first bool tensor argument is the mask.
MASK_REAL = {"classify": True, "dot_scores": True, "multiplicative_scores": True, "additive_scores": True,
             "attend": True, "bahdanau_step": True, "masked_attention": True, "best_span": True,
             "multihead_attention": False, "encoder_block": False, "decoder_block": False}
# Lengths instead of a mask: (the lengths' argument, the padded sequence's argument).
LENGTHS = {"rnn_forward": (1, 0), "pool_last": (1, 0)}


def _real(args, task: str) -> torch.Tensor:
    """(B, n) bool, True at the real positions."""
    if task in LENGTHS:
        i, x = LENGTHS[task]
        return torch.arange(args[x].shape[1])[None, :] < args[i][:, None]
    mask = next(t for t in args if isinstance(t, torch.Tensor) and t.dtype == torch.bool)
    return mask if MASK_REAL[task] else ~mask


def padding(args, kwargs, task) -> bool:
    return bool((~_real(args, task)).any())


def one_real_position(args, kwargs, task) -> bool:
    return bool((_real(args, task).sum(-1) == 1).any())


def padding_before_real(args, kwargs, task) -> bool:
    real = _real(args, task).long()
    return bool((real[:, 1:] > real[:, :-1]).any())  # a real position right after a padded one


MASKED = {"padding": padding, "a row of one real position": one_real_position,
          "padding before a real position": padding_before_real}


def _targets_pad(args, kwargs, task) -> tuple[torch.Tensor, int]:
    if task == "teacher_forcing_loss":
        return args[1], args[2]
    return args[1], kwargs.get("ignore_index", -100)


def padded_targets(args, kwargs, task) -> bool:
    targets, pad = _targets_pad(args, kwargs, task)
    return bool((targets == pad).any())


def pad_id_in_vocabulary(args, kwargs, task) -> bool:
    _, pad = _targets_pad(args, kwargs, task)
    return 0 <= pad < args[0].shape[-1]


def _greedy(table: torch.Tensor, bos: int, eos: int, max_len: int) -> list[int]:
    out, y = [], bos
    for t in range(max_len):
        y = int(table[t, y].argmax())
        out.append(y)
        if y == eos:
            break
    return out


def _finished_outside_the_beam(log_probs, bos, eos, beam, max_len, alpha) -> bool:
    """Some step has a candidate ending in <eos> below the beam_size best, and setting it aside all the same
    (as a finished hypothesis, though it never made the beam) changes the answer: the statement says only the
    beam's own hypotheses finish."""
    from lmbook.tasks.ch03.beam import BEAM_MUTANTS
    from lmbook.tasks.ch03.toy_decoder import beam_compare, beam_ref

    wrong = next(m for m in BEAM_MUTANTS if m.misconception.startswith("set aside every candidate"))
    args = (log_probs, bos, eos, beam, max_len, alpha)
    return beam_compare(wrong.fn(*args), beam_ref(*args)) is not None


TARGETS = {"padded targets": padded_targets, "pad id inside the vocabulary": pad_id_in_vocabulary}

SPECIFIC: dict[str, dict[str, Detector]] = {
    **{task: MASKED for task in [*MASK_REAL, *LENGTHS]},
    "cross_entropy": TARGETS, "perplexity": TARGETS, "teacher_forcing_loss": TARGETS,
    "greedy_decode": {
        "<eos> reached": lambda a, k, task: _greedy(*a)[-1] == a[2],
        "max_len reached without <eos>": lambda a, k, task: a[2] not in _greedy(*a),
        "a table longer than max_len": lambda a, k, task: a[0].shape[0] > a[3]},
    "beam_search": {"a beam wider than the vocabulary": lambda a, k, task: a[3] > a[0].shape[-1],
                    "a finished candidate outside the beam": lambda a, k, task: _finished_outside_the_beam(*a)},
    "filter_probs": {"top_k above the vocabulary": lambda a, k, task: (k.get("top_k") or 0) > a[0].shape[-1]},
    "instruction_loss": {
        "token 0 inside a response": lambda a, k, task: bool(((a[1] == 0) & a[2])[:, 1:].any()),
        "a response of one token": lambda a, k, task: bool((a[2].sum(-1) == 1).any())},
    "span_loss": {"no answer (0, 0)": lambda a, k, task: bool(((a[2] == 0) & (a[3] == 0)).any()),
                  "a one-token answer": lambda a, k, task: bool((a[2] == a[3]).any())},
    "best_span": {**MASKED, "no max_len": lambda a, k, task: len(a) < 4 and "max_len" not in k,
                  "max_len beyond the passage": lambda a, k, task: len(a) == 4 and a[3] >= a[0].shape[-1]},
    "mask_tokens": {"[MASK] already in the text": lambda a, k, task: bool((a[0] == a[1]).any()),
                    "p = 0": lambda a, k, task: a[5] == 0, "p = 1": lambda a, k, task: a[5] == 1},
    "build_inputs": {"separator id inside segment A": lambda a, k, task: a[3] in a[0],
                     "[CLS] id inside segment A": lambda a, k, task: a[2] in a[0],
                     "no segment B": lambda a, k, task: a[1] is None},
    "format_pair": {"a special id inside a segment": lambda a, k, task: bool(set(a[2:5]) & set(a[0] + a[1]))},
    "cached_attention": {"no cache": lambda a, k, task: a[1] is None},
    "gqa_attention": {"no cache": lambda a, k, task: a[1] is None},
    "train_bpe": {"no merges asked": lambda a, k, task: a[1] == 0},
}


def kinds_of(task: str, args: tuple, kwargs: dict) -> set[str]:
    """The kinds one case's inputs hold."""
    detectors = {**GENERIC, **SPECIFIC.get(task, {})}
    return {kind for kind, seen in detectors.items() if seen(args, kwargs, task)}


# ----------------------------------------------------------------------------- the tasks

def _registries() -> dict[str, object]:
    """Every registered task's Check, by name, over the chapters ch01 … ch11."""
    out = {}
    for c in range(1, 12):
        out.update(importlib.import_module(f"lmbook.tasks.ch{c:02d}").check.checks)
    return out


CHECKS = _registries()


def covered(check) -> set[str]:
    """The kinds the visible and hidden cases of one check hold together."""
    out: set[str] = set()
    for cases in (check.cases, check.hidden_cases):
        for i, case in enumerate(cases):
            args, kwargs = case_inputs(case, 0, i, CPU)
            out |= kinds_of(check.task, tuple(args), kwargs)
    return out


PROMISES: dict[str, tuple[str, ...]] = {
    "log_softmax": ("batch of one", "float64", "large values", "python int", "size-1 axis", "ties"),
    "cross_entropy": ("batch of one", "float64", "id 0 in data", "large values", "not contiguous",
        "pad id inside the vocabulary", "padded targets", "python int"),
    "perplexity": ("batch of one", "float64", "id 0 in data", "large values",
        "pad id inside the vocabulary", "padded targets", "python int"),
    "ffnn_forward": ("batch of one", "float64", "id 0 in data", "size-1 axis"),
    "sgns_loss": ("batch of one", "float64", "size-1 axis"),
    "train_lm": (),
    "ffnn_parameters": ("python int",),
    "perplexity_mixed": ("python float",),
    "adam_first_step": ("float64", "large values", "python float"),
    "dropout_variance": ("python float",),
    "rnn_cell": ("batch of one", "float64", "large values", "size-1 axis"),
    "rnn_forward": ("a row of one real position", "batch of one", "float64", "padding", "size-1 axis"),
    "lstm_cell": ("batch of one", "float64", "large values", "size-1 axis"),
    "gru_cell": ("batch of one", "float64", "large values", "size-1 axis"),
    "clip_grad_norm": ("float64", "large values", "python float", "size-1 axis"),
    "classify": ("a row of one real position", "batch of one", "float64", "padding", "size-1 axis"),
    "filter_probs": ("batch of one", "float64", "large values", "python float", "python int", "size-1 axis",
        "ties", "top_k above the vocabulary"),
    "sample": ("batch of one", "float64", "large values", "python float", "python int", "ties"),
    "rnn_lm_parameters": ("python int",),
    "steps_until_below": ("python float",),
    "temperature_ratio": ("python float",),
    "teacher_forcing_loss": ("batch of one", "float64", "id 0 in data", "large values",
        "pad id inside the vocabulary", "padded targets", "python int", "size-1 axis"),
    "greedy_decode": ("<eos> reached", "a table longer than max_len", "float64", "max_len reached without <eos>",
        "python int", "size-1 axis"),
    "beam_search": ("a beam wider than the vocabulary", "a finished candidate outside the beam", "float64",
        "python float", "python int", "size-1 axis"),
    "corpus_bleu": (),
    "masked_mean_loss": ("python float", "python int"),
    "beam_candidates": ("python int",),
    "bleu_of_prefix": ("python int",),
    "dot_scores": ("a row of one real position", "batch of one", "float64", "padding",
        "padding before a real position", "size-1 axis"),
    "multiplicative_scores": ("a row of one real position", "batch of one", "float64", "padding",
        "padding before a real position", "size-1 axis"),
    "additive_scores": ("a row of one real position", "batch of one", "float64", "padding",
        "padding before a real position", "size-1 axis"),
    "attend": ("-inf", "a row of one real position", "batch of one", "float64", "large values", "padding",
        "padding before a real position", "size-1 axis"),
    "bahdanau_step": ("a row of one real position", "batch of one", "float64", "id 0 in data", "large values",
        "padding", "padding before a real position", "size-1 axis"),
    "peak_weight": ("python float", "python int"),
    "score_parameters": ("python int",),
    "additive_multiplications": ("python int",),
    "masked_attention": ("a row of one real position", "batch of one", "float64", "large values", "padding",
        "python bool", "size-1 axis"),
    "qkv_projections": ("batch of one", "float64", "large values", "size-1 axis"),
    "score_variance": ("python bool", "python float", "python int"),
    "attention_crossover": ("python bool", "python int"),
    "attention_weights_bytes": ("python int",),
    "split_heads": ("batch of one", "float64", "python int", "size-1 axis"),
    "merge_heads": ("batch of one", "float64", "not contiguous", "size-1 axis"),
    "multihead_attention": ("a row of one real position", "batch of one", "float64", "large values", "padding",
        "python bool", "python int", "size-1 axis"),
    "mha_parameters": ("python bool", "python int"),
    "wrong_scale_variance": ("python int",),
    "wrong_reshape_pairs": ("python int",),
    "sinusoidal_encoding": ("python int",),
    "apply_rope": ("batch of one", "float64", "id 0 in data", "size-1 axis"),
    "alibi_bias": ("python int",),
    "relative_position_bias": ("float64", "python int", "size-1 axis"),
    "pe_dot": ("python int",),
    "position_parameters": ("python int",),
    "alibi_weight_ratio": ("python float", "python int"),
    "layer_norm": ("batch of one", "float64", "large values", "python float", "size-1 axis"),
    "feed_forward": ("batch of one", "float64", "large values", "size-1 axis"),
    "encoder_block": ("a row of one real position", "batch of one", "float64", "large values", "padding",
        "python bool", "python int", "size-1 axis"),
    "decoder_block": ("a row of one real position", "batch of one", "float64", "large values", "padding",
        "python bool", "python int", "size-1 axis"),
    "block_parameters": ("python int",),
    "block_flops": ("python int",),
    "doubling_cost": ("python int",),
    "smoothed_loss_floor": ("python float", "python int"),
    "train_bpe": ("no merges asked", "python int"),
    "encode": ("empty input", "python int"),
    "decode": ("empty input", "python int"),
    "gpt_block": ("batch of one", "float64", "large values", "python int", "size-1 axis"),
    "cached_attention": ("batch of one", "float64", "no cache", "not contiguous", "python int", "size-1 axis"),
    "format_pair": ("a special id inside a segment", "python int"),
    "pool_last": ("a row of one real position", "batch of one", "float64", "large values", "padding", "size-1 axis"),
    "kv_cache_bytes": ("python int",),
    "gpt_parameters": ("python bool", "python int"),
    "positions_read": ("python int",),
    "mask_tokens": ("[MASK] already in the text", "batch of one", "id 0 in data", "p = 0", "p = 1", "python float",
        "python int", "size-1 axis"),
    "build_inputs": ("[CLS] id inside segment A", "no segment B", "python int", "separator id inside segment A"),
    "bert_embeddings": ("batch of one", "float64", "id 0 in data", "size-1 axis"),
    "span_loss": ("a one-token answer", "batch of one", "float64", "id 0 in data", "large values", "no answer (0, 0)",
        "size-1 axis"),
    "best_span": ("a row of one real position", "batch of one", "float64", "large values",
        "max_len beyond the passage", "no max_len", "padding", "padding before a real position", "python int",
        "ties"),
    "count_parameters": ("python bool", "python int"),
    "shown_true_share": ("python float", "python int"),
    "true_given_shown": ("python float", "python int"),
    "span_candidates": ("python int",),
    "span_corruption_lengths": ("python int",),
    "rms_norm": ("batch of one", "float64", "large values", "python float", "size-1 axis"),
    "swiglu": ("batch of one", "float64", "size-1 axis"),
    "gqa_attention": ("batch of one", "float64", "no cache", "not contiguous", "python int", "size-1 axis"),
    "instruction_loss": ("a response of one token", "batch of one", "float64", "id 0 in data", "large values",
        "token 0 inside a response"),
    "dpo_loss": ("batch of one", "float64", "large values", "python float"),
    "compute_optimal": ("python float", "python int"),
    "llama_parameters": ("python bool", "python int"),
    "max_cached_tokens": ("python int",),
    "dpo_margin_gradient": ("python float",),
}


# ----------------------------------------------------------------------------- tests

def test_every_registered_task_has_a_table_entry_and_every_entry_a_task():
    missing = sorted(set(CHECKS) - set(PROMISES))
    unknown = sorted(set(PROMISES) - set(CHECKS))
    assert not missing, f"tasks without an entry in PROMISES: {missing}"
    assert not unknown, f"entries in PROMISES naming no registered task: {unknown}"


@pytest.mark.parametrize("task", sorted(CHECKS))
def test_the_cases_cover_what_the_table_declares(task):
    declared = set(PROMISES.get(task, ()))
    found = covered(CHECKS[task])
    missing, unexpected = sorted(declared - found), sorted(found - declared)
    assert not missing and not unexpected, (
        f"{task}: promised but covered by no case: {missing}; covered but not declared: {unexpected}")


def _t(*shape, dtype=torch.float32, fill=1.0) -> torch.Tensor:
    return torch.full(shape, fill, dtype=dtype)


# (kind, task, inputs it fires on, inputs it does not fire on): each detector can fire, and does not always.
SANITY = [
    ("batch of one", "log_softmax", ((_t(1, 5),), {}), ((_t(2, 5),), {})),
    ("batch of one", "dpo_loss", ((_t(1),), {}), ((_t(3),), {})),
    ("size-1 axis", "log_softmax", ((_t(3, 1),), {}), ((_t(1, 3),), {})),
    ("size-1 axis", "clip_grad_norm", (((_t(1),), 1.0), {}), (((_t(2),), 1.0), {})),
    ("float64", "", ((_t(2, dtype=torch.float64),), {}), ((_t(2),), {})),
    ("float16/bfloat16", "", ((_t(2, dtype=torch.bfloat16),), {}), ((_t(2, dtype=torch.float64),), {})),
    ("not contiguous", "", ((_t(2, 3).t(),), {}), ((_t(2, 3),), {})),
    ("large values", "", ((), {"x": _t(2, fill=-60.0)}), ((_t(2, fill=49.0),), {})),
    ("-inf", "", ((_t(2, fill=float("-inf")),), {}), ((_t(2, fill=float("inf")),), {})),
    ("ties", "log_softmax", ((torch.tensor([[1.0, 3.0, 3.0]]),), {}), ((torch.tensor([[1.0, 3.0, 2.0]]),), {})),
    ("python int", "", ((3,), {}), ((True, 3.0), {})),
    ("python float", "", (((1, 2.5),), {}), ((1,), {})),
    ("python bool", "", ((False,), {}), ((0,), {})),
    ("id 0 in data", "", ((torch.tensor([3, 0]),), {}), ((torch.tensor([3, 1]), _t(2, fill=0.0)), {})),
    ("empty input", "", (("",), {}), (("a", [1]), {})),
    ("padding", "dot_scores", ((_t(1, 2), _t(1, 2, 2), torch.tensor([[True, False]])), {}),
     ((_t(1, 2), _t(1, 2, 2), torch.tensor([[True, True]])), {})),
    ("padding", "encoder_block", ((_t(1, 2, 2), torch.tensor([[False, True]])), {}),
     ((_t(1, 2, 2), torch.tensor([[False, False]])), {})),
    ("a row of one real position", "rnn_forward", ((_t(2, 3, 1), torch.tensor([1, 3])), {}),
     ((_t(2, 3, 1), torch.tensor([2, 3])), {})),
    ("padding before a real position", "attend", ((_t(1, 2), _t(1, 2, 2), torch.tensor([[False, True]])), {}),
     ((_t(1, 2), _t(1, 2, 2), torch.tensor([[True, False]])), {})),
    ("padded targets", "cross_entropy", ((_t(2, 3), torch.tensor([1, -100])), {}),
     ((_t(2, 3), torch.tensor([1, 0])), {})),
    ("pad id inside the vocabulary", "teacher_forcing_loss", ((_t(1, 2, 3), torch.tensor([[1, 2]]), 2), {}),
     ((_t(1, 2, 3), torch.tensor([[1, 2]]), 3), {})),
    ("max_len reached without <eos>", "greedy_decode",
     ((torch.tensor([[[0.0, 1.0]], [[0.0, 1.0]]]).expand(2, 2, 2), 0, 0, 2), {}),
     ((torch.tensor([[[1.0, 0.0]], [[1.0, 0.0]]]).expand(2, 2, 2), 0, 0, 2), {})),
    ("token 0 inside a response", "instruction_loss",
     ((_t(1, 3, 2), torch.tensor([[1, 1, 0]]), torch.tensor([[False, True, True]])), {}),
     ((_t(1, 3, 2), torch.tensor([[1, 1, 0]]), torch.tensor([[False, True, False]])), {})),
    ("no answer (0, 0)", "span_loss", ((_t(1, 2), _t(1, 2), torch.tensor([0]), torch.tensor([0])), {}),
     ((_t(1, 2), _t(1, 2), torch.tensor([0]), torch.tensor([1])), {})),
    ("separator id inside segment A", "build_inputs", (([5, 2], [7], 1, 2), {}), (([5, 1], [2], 1, 2), {})),
    ("a special id inside a segment", "format_pair", (([5, 0], [7], 0, 1, 2), {}), (([5], [7], 0, 1, 2), {})),
    ("[MASK] already in the text", "mask_tokens", ((torch.tensor([[1, 3]]), 3, 5, [1], 0, 0.5), {}),
     ((torch.tensor([[1, 2]]), 3, 5, [1], 0, 0.5), {})),
    ("no cache", "cached_attention", ((_t(1, 1, 2), None, {}, 1), {}), ((_t(1, 1, 2), {"k": _t(1)}, {}, 1), {})),
    ("<eos> reached", "greedy_decode", ((torch.eye(2).expand(2, 2, 2), 0, 0, 2), {}),
     ((torch.eye(2).flip(-1).expand(2, 2, 2), 0, 0, 1), {})),
    ("a table longer than max_len", "greedy_decode", ((torch.eye(2).expand(3, 2, 2), 0, 1, 2), {}),
     ((torch.eye(2).expand(2, 2, 2), 0, 1, 2), {})),
    ("a beam wider than the vocabulary", "beam_search", ((_t(2, 3, 3), 0, 1, 4, 2, 1.0), {}),
     ((_t(2, 3, 3), 0, 1, 3, 2, 1.0), {})),
    ("a finished candidate outside the beam", "beam_search",
     # step 1: tokens 2 and 3 make a beam of 2 and <eos> (1) comes third; step 2 is flat, so <eos> alone, had
     # it been set aside, would beat every hypothesis grown from the beam (per token); a beam of 3 holds it
     ((torch.log(torch.tensor([[[0.05, 0.3, 0.33, 0.32]] * 4, [[0.25] * 4] * 4])), 0, 1, 2, 2, 1.0), {}),
     ((torch.log(torch.tensor([[[0.05, 0.3, 0.33, 0.32]] * 4, [[0.25] * 4] * 4])), 0, 1, 3, 2, 1.0), {})),
    ("top_k above the vocabulary", "filter_probs", ((_t(1, 3),), {"top_k": 4}), ((_t(1, 3),), {"top_k": 3})),
    ("a response of one token", "instruction_loss",
     ((_t(1, 3, 2), torch.tensor([[1, 1, 1]]), torch.tensor([[False, True, False]])), {}),
     ((_t(1, 3, 2), torch.tensor([[1, 1, 1]]), torch.tensor([[False, True, True]])), {})),
    ("a one-token answer", "span_loss", ((_t(1, 3), _t(1, 3), torch.tensor([2]), torch.tensor([2])), {}),
     ((_t(1, 3), _t(1, 3), torch.tensor([1]), torch.tensor([2])), {})),
    ("no max_len", "best_span", ((_t(1, 3), _t(1, 3), torch.tensor([[True] * 3])), {}),
     ((_t(1, 3), _t(1, 3), torch.tensor([[True] * 3]), 2), {})),
    ("max_len beyond the passage", "best_span", ((_t(1, 3), _t(1, 3), torch.tensor([[True] * 3]), 3), {}),
     ((_t(1, 3), _t(1, 3), torch.tensor([[True] * 3]), 2), {})),
    ("p = 0", "mask_tokens", ((torch.tensor([[1]]), 3, 5, [1], 0, 0.0), {}),
     ((torch.tensor([[1]]), 3, 5, [1], 0, 0.5), {})),
    ("p = 1", "mask_tokens", ((torch.tensor([[1]]), 3, 5, [1], 0, 1.0), {}),
     ((torch.tensor([[1]]), 3, 5, [1], 0, 0.5), {})),
    ("[CLS] id inside segment A", "build_inputs", (([5, 1], [7], 1, 2), {}), (([5, 2], [1], 1, 2), {})),
    ("no segment B", "build_inputs", (([5], None, 1, 2), {}), (([5], [], 1, 2), {})),
    ("no merges asked", "train_bpe", (("ab ab", 0), {}), (("ab ab", 1), {})),
]


@pytest.mark.parametrize(("kind", "task", "fires", "quiet"), SANITY, ids=[f"{s[0]}/{s[1]}" for s in SANITY])
def test_each_detector_fires_on_its_kind_and_not_on_another_input(kind, task, fires, quiet):
    assert kind in kinds_of(task, *fires), f"{kind!r} did not fire on {fires}"
    assert kind not in kinds_of(task, *quiet), f"{kind!r} fired on {quiet}"


def test_every_detector_has_a_sanity_case():
    kinds = set(GENERIC) | {k for d in SPECIFIC.values() for k in d}
    tried = {s[0] for s in SANITY}
    assert kinds <= tried, f"detectors no sanity case tries: {sorted(kinds - tried)}"
