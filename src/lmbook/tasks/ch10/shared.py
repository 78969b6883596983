"""What exercise 10's tasks share: the forbidden modules, vocabularies and batches."""

from __future__ import annotations

from dataclasses import dataclass

import torch

MODULES = ("lmbook.bert", "lmbook.transformer", "lmbook.gpt", "lmbook.finetune", "transformers", "tokenizers")
ATTRS = ("bert", "transformer", "gpt", "finetune", "transformers", "tokenizers")


@dataclass(frozen=True)
class Layout:
    """A vocabulary's special ids (id 0 is always special: [PAD] or [UNK])."""

    name: str
    V: int
    pad: int
    cls: int
    sep: int
    mask: int
    unk: int

    def specials(self, which: str) -> list[int]:
        return {"cls_sep": [self.cls, self.sep], "cls_sep_unk": [self.cls, self.sep, self.unk],
                "all": [self.pad, self.unk, self.cls, self.sep, self.mask]}[which]


SMALL = Layout("small", 40, pad=0, cls=1, sep=2, mask=3, unk=4)
BERT_VOCAB = Layout("bert", 30522, pad=0, cls=101, sep=102, mask=103, unk=100)
SCATTERED = Layout("scattered", 64, pad=0, cls=17, sep=33, mask=50, unk=5)
TINY = Layout("tiny", 16, pad=0, cls=7, sep=11, mask=14, unk=3)  # 5 of 16 ids special
PAIR = Layout("pair", 7, pad=0, cls=1, sep=2, mask=3, unk=4)  # 2 ordinary ids, 5 and 6


def _row(g: torch.Generator, length: int, layout: Layout, pair: bool, text: torch.Tensor) -> list[int]:
    """[CLS] a [SEP] b [SEP] (or [CLS] a [SEP]) of ``length`` tokens, the words drawn from ``text``."""
    def words(k: int) -> list[int]:
        return text[torch.randint(0, len(text), (k,), generator=g)].tolist()

    if length == 1:
        return [layout.cls]
    if length == 2:
        return [layout.cls, layout.sep]
    if not pair or length < 5:
        return [layout.cls, *words(length - 2), layout.sep]
    k = 1 + int(torch.randint(0, length - 4, (1,), generator=g))
    return [layout.cls, *words(k), layout.sep, *words(length - 3 - k), layout.sep]


def make_batch(g: torch.Generator, B: int, n: int, layout: Layout, lengths=None, pair: bool = True,
               unk_rate: float = 0.0, mask_rate: float = 0.0, words: int | None = None) -> tuple[torch.Tensor,
                                                                                                 torch.Tensor]:
    """Right-padded ids (B, n) and their segments: rows of random lengths (the longest fills the batch), words
    drawn uniformly from the ids that are not [PAD], [CLS], [SEP] or [MASK] ([UNK] included; or from ``words`` of
    them, drawn first), then a fraction ``unk_rate`` of them made [UNK] and ``mask_rate`` made [MASK] (a text that
    holds them already)."""
    taken = {layout.pad, layout.cls, layout.sep, layout.mask}
    text = torch.tensor([i for i in range(layout.V) if i not in taken])
    if words is not None:  # a text of few distinct words
        text = text[torch.randperm(len(text), generator=g)[:words]]
    if lengths is None:
        lens = torch.randint(max(1, n // 3), n + 1, (B,), generator=g)
        lens[int(torch.randint(0, B, (1,), generator=g))] = n
        lengths = lens.tolist()
    ids = torch.full((B, n), layout.pad, dtype=torch.long)
    segments = torch.zeros(B, n, dtype=torch.long)
    for b, length in enumerate(lengths):
        row = torch.tensor(_row(g, length, layout, pair, text))
        ids[b, :length] = row
        seps = (row == layout.sep).nonzero().flatten().tolist()
        if len(seps) == 2:
            segments[b, seps[0] + 1:length] = 1
    words = (ids != layout.pad) & (ids != layout.cls) & (ids != layout.sep)
    u = torch.rand(B, n, generator=g)
    ids = torch.where(words & (u < unk_rate), torch.full_like(ids, layout.unk), ids)
    ids = torch.where(words & (u >= unk_rate) & (u < unk_rate + mask_rate), torch.full_like(ids, layout.mask), ids)
    return ids, segments
