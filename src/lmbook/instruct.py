"""Instruction tuning on the course's language: prompt → response pairs with exact answers (chapter 11).

A pretrained model continues text; it does not do what it is asked. Instruction tuning (Wei et al., 2022;
Ouyang et al., 2022) fine-tunes it on pairs written as one sequence,

    prompt = [<task>, w_1 … w_n, <answer>]        response = [r_1 … r_m, "."]

with the loss on the response tokens only:

    L = − Σ_{t ∈ response} ln P(w_t | w_<t) / |response tokens|

(the prompt is given, never to be written, so predicting it would spend the model on the wrong job). A batch
counts every response token of every sequence once: the mean is over the batch's response tokens, as Hugging
Face's ``labels = -100`` convention gives.

The tasks are defined by the course's grammar (:mod:`lmbook.corpus`), so every answer is checked exactly:

- ``<plural>``: make the subject plural (determiner, noun and verb change; "a dog near the cats runs ." →
  "some dogs near the cats run ."); a plural subject stays as it is;
- ``<singular>``: the reverse;
- ``<plain>``: drop every adjective;
- ``<continue>``: finish a sentence begun in the prompt; any grammatical ending is right, and the true model
  says which are.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import os
import random
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .causal_lm import train_lm
from .corpus import ADJS, DETS_PL, DETS_SG, EOS, HMM, NOUNS_PL, NOUNS_SG, PREPS, VERBS_INTRANS, VERBS_TRANS, Vocab
from .device import seed_everything
from .gpt import GPT, GPTConfig

PAD, ANSWER = "<pad>", "<answer>"
TASKS = ("<plural>", "<singular>", "<plain>", "<continue>")
SPECIAL = (PAD, *TASKS, ANSWER)

_TO_PLURAL_DET = {"a": "some", "the": "the", "one": "two", "this": "these"}
_TO_SINGULAR_DET = {v: k for k, v in _TO_PLURAL_DET.items()}
_PLURAL_OF = dict(zip(NOUNS_SG, NOUNS_PL, strict=True)) | {sg: pl for sg, pl in VERBS_INTRANS + VERBS_TRANS}
_SINGULAR_OF = {pl: sg for sg, pl in _PLURAL_OF.items()}
_NOUNS, _VERBS = set(NOUNS_SG + NOUNS_PL), {v for pair in VERBS_INTRANS + VERBS_TRANS for v in pair}


@dataclass(frozen=True)
class NounPhrase:
    det: str
    adjs: tuple[str, ...]
    noun: str

    def words(self, adjectives: bool = True) -> list[str]:
        return [self.det, *(self.adjs if adjectives else ()), self.noun]


@dataclass(frozen=True)
class Sentence:
    """``subject [prep phrase] verb [object] .``, the course grammar's one sentence shape."""

    subject: NounPhrase
    verb: str
    prep: str | None = None
    inner: NounPhrase | None = None  # the noun phrase after the preposition
    object: NounPhrase | None = None

    def words(self, adjectives: bool = True) -> list[str]:
        pp = [self.prep, *self.inner.words(adjectives)] if self.prep else []
        obj = self.object.words(adjectives) if self.object else []
        return [*self.subject.words(adjectives), *pp, self.verb, *obj, EOS]

    @property
    def plural(self) -> bool:
        return self.subject.noun in NOUNS_PL


def parse(words: list[str]) -> Sentence:
    """Read a sentence of the course's grammar (ending with "."); ValueError if it has another shape."""
    i = 0

    def noun_phrase() -> NounPhrase:
        nonlocal i
        if i >= len(words) or words[i] not in set(DETS_SG + DETS_PL):
            raise ValueError(f"expected a determiner at word {i} of {' '.join(words)!r}")
        det, i = words[i], i + 1
        start = i
        while i < len(words) and words[i] in ADJS:
            i += 1
        if i >= len(words) or words[i] not in _NOUNS:
            raise ValueError(f"expected a noun at word {i} of {' '.join(words)!r}")
        i += 1
        return NounPhrase(det, tuple(words[start:i - 1]), words[i - 1])

    subject = noun_phrase()
    prep = inner = obj = None
    if i < len(words) and words[i] in PREPS:
        prep, i = words[i], i + 1
        inner = noun_phrase()
    if i >= len(words) or words[i] not in _VERBS:
        raise ValueError(f"expected a verb at word {i} of {' '.join(words)!r}")
    verb, i = words[i], i + 1
    if i < len(words) and words[i] != EOS:
        obj = noun_phrase()
    if words[i:] != [EOS]:
        raise ValueError(f"expected the sentence to end with '.' at word {i} of {' '.join(words)!r}")
    return Sentence(subject, verb, prep, inner, obj)


def make_plural(s: Sentence) -> Sentence:
    """The subject's determiner, noun and verb in the plural (a plural subject is left as it is)."""
    if s.plural:
        return s
    subj = NounPhrase(_TO_PLURAL_DET[s.subject.det], s.subject.adjs, _PLURAL_OF[s.subject.noun])
    return replace(s, subject=subj, verb=_PLURAL_OF[s.verb])


def make_singular(s: Sentence) -> Sentence:
    """The subject's determiner, noun and verb in the singular (a singular subject is left as it is)."""
    if not s.plural:
        return s
    subj = NounPhrase(_TO_SINGULAR_DET[s.subject.det], s.subject.adjs, _SINGULAR_OF[s.subject.noun])
    return replace(s, subject=subj, verb=_SINGULAR_OF[s.verb])


@dataclass(frozen=True)
class Example:
    task: str
    prompt: list[str]  # [<task>, words …, <answer>]
    response: list[str]  # the reference answer, ending with "."


def make_example(task: str, words: list[str], rng: random.Random) -> Example:
    """The ``task``'s prompt for the sentence ``words`` and its reference response (``<continue>`` cuts the
    sentence after 1 to len − 2 words, drawn from ``rng``)."""
    s = parse(words)
    if task == "<continue>":
        cut = rng.randint(1, len(words) - 2)
        return Example(task, [task, *words[:cut], ANSWER], words[cut:])
    answer = {"<plural>": lambda: make_plural(s).words(), "<singular>": lambda: make_singular(s).words(),
              "<plain>": lambda: s.words(adjectives=False)}[task]()
    return Example(task, [task, *words, ANSWER], answer)


def sentences(ids: torch.Tensor, vocab: Vocab) -> list[list[str]]:
    """The complete sentences of a token stream, each as words ending with "." (the partial first one dropped)."""
    words = vocab.decode(ids.tolist()).split()
    out, current, started = [], [], False
    for w in words:
        if started:
            current.append(w)
        if w == EOS:
            if started and len(current) > 1:
                out.append(current)
            current, started = [], True
    return out


def is_correct(example: Example, response: list[str], hmm: HMM) -> bool:
    """Exactly right: the reference answer for the transformations; for ``<continue>``, any ending that makes the
    prompt's words a sentence the true model can produce."""
    if example.task != "<continue>":
        return response == example.response
    return is_grammatical([*example.prompt[1:-1], *response], hmm)


def is_grammatical(words: list[str], hmm: HMM) -> bool:
    """One sentence ending with "." to which the true model gives a probability above 0 (after a ".")."""
    if not words or words[-1] != EOS or EOS in words[:-1] or any(w not in hmm.vocab.stoi for w in words):
        return False
    return bool(np.isfinite(hmm.log_prob(hmm.vocab.encode([EOS, *words]))))


# ----------------------------------------------------------------------------- the model's side


def extend_vocab(model: nn.Module, n_new: int) -> nn.Module:
    """Add ``n_new`` tokens to a GPT or Llama (``wte``, ``lm_head``, ``config.vocab_size``), their embeddings
    started at the mean of the old ones: a new token starts as an average word, not as noise."""
    old = model.wte.weight.data
    wte = nn.Embedding(old.shape[0] + n_new, old.shape[1]).to(old.device, old.dtype)
    wte.weight.data[: len(old)] = old
    wte.weight.data[len(old):] = old.mean(0)
    tied = model.lm_head.weight is model.wte.weight
    model.wte = wte
    if tied:
        model.lm_head.weight = wte.weight
    else:
        head = model.lm_head.weight.data
        model.lm_head = nn.Linear(head.shape[1], head.shape[0] + n_new, bias=False).to(head.device, head.dtype)
        model.lm_head.weight.data[: len(head)] = head
        model.lm_head.weight.data[len(head):] = head.mean(0)
    model.config.vocab_size += n_new
    return model


def encode(examples: list[Example], vocab: Vocab,
           pad: str = PAD) -> tuple[torch.Tensor, torch.Tensor]:
    """ids (B, n) of prompt + response, right-padded, and the response mask (B, n):
    True at the response's tokens (the ones the loss counts; never the prompt, never
    padding)."""
    seqs = [vocab.encode(e.prompt + e.response) for e in examples]
    n = max(map(len, seqs))
    ids = torch.full((len(seqs), n), vocab.stoi[pad], dtype=torch.long)
    mask = torch.zeros(len(seqs), n, dtype=torch.bool)
    for i, (e, s) in enumerate(zip(examples, seqs, strict=True)):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, len(e.prompt): len(s)] = True
    return ids, mask


def response_loss(logits: torch.Tensor, targets: torch.Tensor,
                  mask: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the positions where ``mask`` (B, n) is True;
    logits (B, n, V), targets (B, n)."""
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                          reduction="none")  # one loss per position
    mask = mask.reshape(-1).to(nll.dtype)
    return (nll * mask).sum() / mask.sum()


@dataclass
class InstructLog:
    loss: list[float] = field(default_factory=list)
    seconds: float = 0.0


def train_instruct(model: nn.Module, ids: torch.Tensor, response_mask: torch.Tensor, *, steps: int = 300,
                   batch_size: int = 32, lr: float = 1e-3, seed: int = 0, pad_id: int | None = None,
                   prompt_loss: bool = False) -> InstructLog:
    """AdamW on :func:`response_loss` over random rows of ``ids`` (N, n).

    ``prompt_loss=True`` counts the prompt's tokens too (every token but padding, which needs ``pad_id``): the
    mistake of training on the prompt, kept to measure what it costs."""
    if prompt_loss and pad_id is None:
        raise ValueError("prompt_loss=True needs pad_id, to leave out the padding")
    device = next(model.parameters()).device
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    g = torch.Generator().manual_seed(seed)
    log, t0 = InstructLog(), time.perf_counter()
    for _ in range(steps):
        model.train()
        rows = torch.randint(0, len(ids), (batch_size,), generator=g)
        x, m = ids[rows].to(device), response_mask[rows].to(device)
        counted = (x[:, 1:] != pad_id) if prompt_loss else m[:, 1:]
        loss = response_loss(model(x[:, :-1]), x[:, 1:], counted)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        log.loss.append(loss.item())
    log.seconds = time.perf_counter() - t0
    return log


@torch.no_grad()
def respond(model: nn.Module, prompts: list[list[str]], vocab: Vocab, max_new_tokens: int = 24,
            temperature: float | None = None, generator: torch.Generator | None = None) -> list[list[str]]:
    """Each prompt's response, greedy (or sampled at ``temperature``), up to and with the first "." (or
    ``max_new_tokens`` words). Prompts of one length are generated together."""
    from .gpt import generate  # works for GPT and Llama alike

    device = next(model.parameters()).device
    out: list[list[str]] = [[] for _ in prompts]
    by_length: dict[int, list[int]] = {}
    for i, p in enumerate(prompts):
        by_length.setdefault(len(p), []).append(i)
    for length, rows in sorted(by_length.items()):
        ids = torch.tensor([vocab.encode(prompts[i]) for i in rows], device=device)
        kw = dict(greedy=True) if temperature is None else dict(temperature=temperature, generator=generator)
        new = generate(model, ids, max_new_tokens, **kw)[:, length:].tolist()
        for i, seq in zip(rows, new, strict=True):
            words = [vocab.itos[t] for t in seq]
            out[i] = words[: words.index(EOS) + 1] if EOS in words else words
    return out


# ----------------------------------------------------------------------------- the recipe, end to end


def instruction_data(sents: list[list[str]], seed: int = 0) -> list[Example]:
    """Every task on every sentence of ``sents``: 4 examples a sentence (``<continue>``'s cut drawn from ``seed``)."""
    rng = random.Random(seed)
    return [make_example(task, s, rng) for s in sents for task in TASKS]


# Where pages keep the models a later page reuses (rebuilt when absent): the user's cache folder.
MODEL_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lmbook"


@dataclass
class InstructRun:
    """What :func:`train_instruction_gpt` builds: the pretrained model, the same fine-tuned, and the vocabulary
    with the special tokens (their ids follow the corpus's words)."""

    pretrained: nn.Module
    tuned: nn.Module
    vocab: Vocab
    pretrain_seconds: float
    tune_log: InstructLog


def train_instruction_gpt(corpus, seed: int = 0, *, pretrain_steps: int = 400,
                          tune_steps: int = 1000, block_size: int = 48) -> InstructRun:
    """Chapter 11's recipe from a seed: chapter 9's GPT pretrained on the corpus, its
    vocabulary extended by the special tokens, then a copy fine-tuned on requests."""
    seed_everything(seed)
    config = GPTConfig(len(corpus.vocab), block_size, n_layer=2, n_head=4, d_model=64)
    pretrained = GPT(config)
    log = train_lm(pretrained, corpus.train, steps=pretrain_steps, batch_size=32,
                   lr=3e-3, seed=seed)
    extend_vocab(pretrained, len(SPECIAL))
    vocab = Vocab([*corpus.vocab.itos, *SPECIAL])
    requests = instruction_data(sentences(corpus.train, corpus.vocab), seed)
    ids, mask = encode(requests, vocab)
    tuned = copy.deepcopy(pretrained)
    tune_log = train_instruct(tuned, ids, mask, steps=tune_steps, batch_size=32,
                              lr=3e-3, seed=seed)
    return InstructRun(pretrained.eval(), tuned.eval(), vocab, log.seconds, tune_log)


def instruction_tuned_gpt(corpus, seed: int = 0, *, pretrain_steps: int = 400, tune_steps: int = 1000,
                          block_size: int = 48, cache: str | Path | None = None) -> InstructRun:
    """:func:`train_instruction_gpt`, kept in ``cache`` (a folder) when one is given.

    The key is made of the code that trains the models (this module, the training loop, the model, the
    corpus's generator), the training split, the arguments and torch's version: a later page reuses the models,
    and any change trains them again. The same seed gives the same models (on one device and torch version)."""
    from . import causal_lm, gpt
    from . import corpus as corpus_module

    args = dict(pretrain_steps=pretrain_steps, tune_steps=tune_steps, block_size=block_size)
    if cache is None:
        return train_instruction_gpt(corpus, seed, **args)
    key = hashlib.sha256()
    for module in (sys.modules[__name__], causal_lm, gpt, corpus_module):
        key.update(inspect.getsource(module).encode())
    key.update(corpus.train.numpy().tobytes())
    key.update(repr((seed, sorted(args.items()), torch.__version__)).encode())
    path = Path(cache) / f"instruction_tuned_gpt-{key.hexdigest()[:20]}.pt"
    if path.exists():
        return _load_run(torch.load(path, weights_only=False), corpus, block_size)
    run = train_instruction_gpt(corpus, seed, **args)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save({"pretrained": run.pretrained.state_dict(), "tuned": run.tuned.state_dict(),
                "pretrain_seconds": run.pretrain_seconds, "tune_loss": run.tune_log.loss,
                "tune_seconds": run.tune_log.seconds}, tmp)
    tmp.replace(path)  # whole or absent: a run stopped half-way leaves no broken file
    return run


def _load_run(saved: dict, corpus, block_size: int) -> InstructRun:
    models = []
    for name in ("pretrained", "tuned"):
        model = GPT(GPTConfig(len(corpus.vocab) + len(SPECIAL), block_size, n_layer=2, n_head=4, d_model=64))
        model.load_state_dict(saved[name])
        models.append(model.eval())
    log = InstructLog(saved["tune_loss"], saved["tune_seconds"])
    return InstructRun(*models, Vocab([*corpus.vocab.itos, *SPECIAL]), saved["pretrain_seconds"], log)
