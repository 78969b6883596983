"""Task 2 of exercise 10: BERT's embeddings."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ... import bert as _course_bert
from ...grading.checks import Case, Check, Mutant
from ...grading.compare import describe_tensor_mismatch
from ...grading.reproduce import sized
from ..common import in_dtype
from ..common import randn as _randn
from .shared import ATTRS, MODULES, Layout, make_batch

_BERT = _course_bert


EMB_NAMES = ("word_embeddings.weight", "position_embeddings.weight", "token_type_embeddings.weight",
             "LayerNorm.weight", "LayerNorm.bias")


def _emb_ref(ids, segments, params):
    """LN(E_tok[ids] + E_pos[0 … n − 1] + E_seg[segments]), ε = 1e-12, in float64."""
    p = {k: v.double() for k, v in params.items()}
    pos = torch.arange(ids.shape[1], device=ids.device)
    x = (F.embedding(ids, p["word_embeddings.weight"]) + F.embedding(pos, p["position_embeddings.weight"])[None]
         + F.embedding(segments, p["token_type_embeddings.weight"]))
    d = x.shape[-1]
    return F.layer_norm(x, (d,), p["LayerNorm.weight"], p["LayerNorm.bias"], eps=1e-12)


def _emb_with(mistake: str):
    def fn(ids, segments, params):
        p = params
        n = ids.shape[1]
        pos = torch.arange(n, device=ids.device)
        if mistake == "pos_from_one":
            pos = pos + 1
        positions = p["position_embeddings.weight"][pos][None].expand(ids.shape[0], -1, -1)
        if mistake == "pos_restart":  # positions counted again from 0 where segment B starts
            first_b = torch.where(segments.bool().any(1), (segments != 0).float().argmax(1),
                                  torch.full_like(ids[:, 0], n))
            rel = torch.arange(n, device=ids.device)[None] - torch.where(segments.bool(), first_b[:, None], 0)
            positions = p["position_embeddings.weight"][rel]
        tok = p["word_embeddings.weight"][ids]
        seg = 0 if mistake == "no_segments" else p["token_type_embeddings.weight"][segments]
        g, b = p["LayerNorm.weight"], p["LayerNorm.bias"]

        def ln(x, eps=1e-12, unbiased=False, affine=True):
            mu = x.mean(-1, keepdim=True)
            var = x.var(-1, keepdim=True, unbiased=unbiased)
            y = (x - mu) / torch.sqrt(var + eps)
            return y * g + b if affine else y

        if mistake == "ln_first":
            return ln(tok) + positions + seg
        x = tok + positions + seg
        return {"eps": lambda: ln(x, eps=1e-5), "eps6": lambda: ln(x, eps=1e-6), "no_ln": lambda: x,
                "unbiased": lambda: ln(x, unbiased=True),
                "no_affine": lambda: ln(x, affine=False)}.get(mistake, lambda: ln(x))()
    return fn


def _emb_case(B: int, n: int, d: int, V: int = 30, P: int = 16, T: int = 2, lengths=None, std: float = 0.02,
              dtype=torch.float32, pair: bool = True):
    """BERT-like inputs ([CLS] 1, [SEP] 2, [PAD] 0) and embeddings of BERT's initial scale (std 0.02), at which
    LayerNorm's ε = 1e-12 and torch's default 1e-5 differ visibly; a LayerNorm gain around 1 and a bias."""
    def make(g, device):
        layout = Layout("emb", V, pad=0, cls=1, sep=2, mask=3, unk=4)
        ids, segments = make_batch(g, B, n, layout, lengths, pair)
        if T > 2:  # a third segment type, as some tasks add
            segments = torch.where((segments == 1) & (torch.rand(B, n, generator=g) < 0.3), 2, segments)
        params = {"word_embeddings.weight": _randn((V, d), g, device, std),
                  "position_embeddings.weight": _randn((P, d), g, device, std),
                  "token_type_embeddings.weight": _randn((T, d), g, device, std),
                  "LayerNorm.weight": _randn((d,), g, device, 0.1, 1.0),
                  "LayerNorm.bias": _randn((d,), g, device, 0.1)}
        return ((ids.to(device), segments.to(device), {k: in_dtype(v, dtype) for k, v in params.items()}), {})
    return make


SHRINK = {"B": 1, "n": 1, "d": 2}


BERT_EMBEDDINGS = Check(
    task="bert_embeddings",
    what="LN(E_tok[ids] + E_pos[0 … n − 1] + E_seg[segments]), ε = 1e-12",
    reference=_emb_ref,
    grad_of=(2,),  # every tensor of params: BERT is trained through its embeddings
    compare=lambda out, ref: describe_tensor_mismatch(out, ref, rtol=1e-4, atol=1e-4, dim=None),
    cases=[sized("batch 3 of pairs, n = 10, d = 16 (padded; positions up to 16)", _emb_case, B=3, n=10, d=16,
                 floors=SHRINK),
           sized("batch 2 of pairs, n = 16 = max_position, d = 32", _emb_case, B=2, n=16, d=32, floors=SHRINK),
           sized("float64 weights, batch 2, n = 6, d = 4", _emb_case, B=2, n=6, d=4, dtype=torch.float64,
                 floors=SHRINK)],
    hidden_cases=[Case("a batch of one, length one ([CLS] alone)", _emb_case(1, 1, 8, lengths=[1])),
                  Case("fresh: batch 4, n = 12, d = 24", _emb_case(4, 12, 24)),
                  Case("every position used: n = max_position = 20", _emb_case(3, 20, 16, P=20)),
                  Case("all but one sequence padded down to [CLS] [SEP]", _emb_case(4, 14, 16, lengths=[2, 2, 14, 2])),
                  Case("three segment types (type_vocab_size = 3), segment 2 present", _emb_case(3, 12, 16, T=3)),
                  Case("single sentences (every segment 0)", _emb_case(3, 9, 16, pair=False)),
                  Case("float64 weights", _emb_case(3, 10, 16, dtype=torch.float64)),
                  Case("embeddings of scale 1 (not 0.02)", _emb_case(2, 10, 16, std=1.0)),
                  Case("a wider model: d = 64, a vocabulary of 500, max_position 77",
                       _emb_case(4, 30, 64, V=500, P=77))],
    mutants=[
        Mutant(_emb_with("no_segments"), "left out the segment embeddings: add E_seg[segments] (token_type_embeddings) "
                                         "too, so the model can tell sentence A from sentence B"),
        Mutant(_emb_with("pos_from_one"), "numbered the positions from 1: the first token ([CLS]) takes row 0 of "
                                          "E_pos, torch.arange(n)"),
        Mutant(_emb_with("pos_restart"), "started the positions again from 0 at segment B: positions run 0 … n − 1 "
                                         "over the whole input, [CLS] a [SEP] b [SEP]"),
        *[Mutant(_emb_with(e), "used another ε than BERT's 1e-12 (torch's default 1e-5, or 1e-6): BERT's "
                               "layer_norm_eps is 1e-12, which matters when the summed embeddings are small, as "
                               "they are at BERT's initial scale") for e in ("eps", "eps6")],
        Mutant(_emb_with("no_ln"), "left out the LayerNorm: the sum of the three embeddings is normalised, "
                                   "LN(E_tok + E_pos + E_seg), with its gain and bias"),
        Mutant(_emb_with("no_affine"), "normalised without LayerNorm's gain and bias: multiply by LayerNorm.weight "
                                       "and add LayerNorm.bias"),
        Mutant(_emb_with("unbiased"), "used the unbiased variance (x.var(-1) divides by d − 1): LayerNorm divides by "
                                      "d, x.var(-1, unbiased=False)"),
        Mutant(_emb_with("ln_first"), "normalised the token embeddings alone and added the positions and segments "
                                      "after: the LayerNorm comes after the sum of all three"),
    ],
    forbidden=(_BERT.BERT, _BERT.BertPretraining),
    forbidden_attrs=(*ATTRS, "BertEmbeddings", "BERT"),
    forbidden_modules=MODULES,
    keep_dtype=True,
)
