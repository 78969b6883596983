"""Task 4 of exercise 10: counting BERT's parameters."""

from __future__ import annotations

import math
import numbers

import torch

from ... import bert as _course_bert
from ...grading.checks import Case, Check, Mutant
from ...grading.compare import describe_value
from ...grading.reproduce import sized
from .shared import ATTRS, MODULES

_BERT = _course_bert


def _shapes(config: dict, heads: bool) -> dict[str, tuple[int, ...]]:
    """Every weight tensor of BERT and its shape, named as Hugging Face names them (the tied decoder once)."""
    V, L, d, d_ff = config["vocab_size"], config["n_layer"], config["d_model"], config["d_ff"]
    P, T = config["max_position"], config["type_vocab_size"]
    shapes = {"embeddings.word_embeddings.weight": (V, d), "embeddings.position_embeddings.weight": (P, d),
              "embeddings.token_type_embeddings.weight": (T, d), "embeddings.LayerNorm.weight": (d,),
              "embeddings.LayerNorm.bias": (d,)}
    for i in range(L):
        pre = f"encoder.layer.{i}."
        for m in ("query", "key", "value"):
            shapes[pre + f"attention.self.{m}.weight"] = (d, d)
            shapes[pre + f"attention.self.{m}.bias"] = (d,)
        shapes |= {pre + "attention.output.dense.weight": (d, d), pre + "attention.output.dense.bias": (d,),
                   pre + "attention.output.LayerNorm.weight": (d,), pre + "attention.output.LayerNorm.bias": (d,),
                   pre + "intermediate.dense.weight": (d_ff, d), pre + "intermediate.dense.bias": (d_ff,),
                   pre + "output.dense.weight": (d, d_ff), pre + "output.dense.bias": (d,),
                   pre + "output.LayerNorm.weight": (d,), pre + "output.LayerNorm.bias": (d,)}
    shapes |= {"pooler.dense.weight": (d, d), "pooler.dense.bias": (d,)}
    if heads:
        shapes |= {"cls.predictions.transform.dense.weight": (d, d), "cls.predictions.transform.dense.bias": (d,),
                   "cls.predictions.transform.LayerNorm.weight": (d,),
                   "cls.predictions.transform.LayerNorm.bias": (d,),
                   "cls.predictions.decoder.bias": (V,),  # its weight is embeddings.word_embeddings.weight
                   "cls.seq_relationship.weight": (2, d), "cls.seq_relationship.bias": (2,)}
    return shapes


def _count_ref(config, heads=False) -> int:
    return sum(math.prod(shape) for shape in _shapes(config, bool(heads)).values())


def _count_with(mistake: str):
    def fn(config, heads=False):
        c = dict(config)
        V, L, d, d_ff = c["vocab_size"], c["n_layer"], c["d_model"], c["d_ff"]
        P, T = c["max_position"], c["type_vocab_size"]
        if mistake == "d_ff_4d":
            d_ff = 4 * d
        if mistake == "heads_always":
            heads = True
        ln = d if mistake == "ln_no_bias" else 2 * d
        emb = V * d + P * d + (0 if mistake == "no_segments" else T * d) + (0 if mistake == "no_emb_ln" else ln)
        if mistake == "no_positions":
            emb -= P * d
        attn = 4 * d * d + (0 if mistake == "no_attn_bias" else 4 * d)
        ffn = 2 * d * d_ff + (0 if mistake == "no_ffn_bias" else d_ff + d)
        layer = attn + ffn + (ln if mistake == "one_ln" else 2 * ln)
        total = emb + L * layer + (0 if mistake == "no_pooler" else d * d + d)
        if heads:
            total += d * d + d + ln + (0 if mistake == "no_decoder_bias" else V) + 2 * d + 2
            if mistake == "untied":
                total += V * d
        return total
    return fn


def _count_compare(out, ref) -> str | None:
    if isinstance(out, torch.Tensor):
        return f"returned {describe_value(out)}, expected a Python int (.item() makes one)"
    if type(out).__module__ == "numpy":
        return f"returned a numpy.{type(out).__name__}, expected a Python int (int(...) makes one)"
    if isinstance(out, bool) or not isinstance(out, numbers.Integral):
        return f"returned {describe_value(out)}, expected an int"
    out, ref = int(out), int(ref)
    if out == ref:
        return None
    return f"returned {out:,}, expected {ref:,} ({abs(out - ref):,} too {'few' if out < ref else 'many'})"


def _config(V: int, L: int, H: int, d: int, d_ff: int | None = None, P: int = 512, T: int = 2) -> dict:
    return {"vocab_size": V, "n_layer": L, "n_head": H, "d_model": d, "d_ff": 4 * d if d_ff is None else d_ff,
            "max_position": P, "type_vocab_size": T}


BASE = _config(30522, 12, 12, 768)
LARGE = _config(30522, 24, 16, 1024)


def _count_case(config: dict, heads: bool):
    def make(g, device):
        return ((dict(config), heads), {})
    return make


def _count_sized(V: int, L: int, d: int, d_ff: int, P: int, T: int, heads: bool, H: int = 1):
    return _count_case(_config(V, L, H, d, d_ff, P, T), heads)


SHRINK = {"V": 1, "L": 0, "d": 1, "d_ff": 1, "P": 1, "T": 1}


def _count_cases(hidden: bool) -> list[Case]:
    if not hidden:
        return [sized("BERT-base, the body (BertModel)", _count_sized, V=30522, L=12, H=12, d=768, d_ff=3072, P=512,
                      T=2, heads=False, floors=SHRINK),
                sized("BERT-base with the pretraining heads (BertForPreTraining)", _count_sized, V=30522, L=12, H=12,
                      d=768, d_ff=3072, P=512, T=2, heads=True, floors=SHRINK),
                Case("a small model: V = 1000, 3 layers, d = 64, d_ff = 100, max_position 77, 3 segment types",
                     _count_case(_config(1000, 3, 4, 64, 100, 77, 3), False))]
    return [Case("BERT-large, the body", _count_case(LARGE, False)),
            Case("BERT-large with the heads", _count_case(LARGE, True)),
            Case("one layer, d = 8, d_ff = 20, V = 50, max_position 10, 1 segment type, with the heads",
                 _count_case(_config(50, 1, 2, 8, 20, 10, 1), True)),
            Case("d_ff smaller than d: V = 300, 2 layers, d = 48, d_ff = 30, with the heads",
                 _count_case(_config(300, 2, 3, 48, 30, 128, 2), True)),
            Case("no layers at all (embeddings and pooler), V = 100, d = 16",
                 _count_case(_config(100, 0, 2, 16, 64, 40, 2), False)),
            Case("6 layers, d = 120, n_head = 5, d_ff = 4d, V = 8000, max_position 256, type_vocab_size 4",
                 _count_case(_config(8000, 6, 5, 120, None, 256, 4), False)),
            Case("the small model of the visible tests with the heads",
                 _count_case(_config(1000, 3, 4, 64, 100, 77, 3), True))]


COUNT_PARAMETERS = Check(
    task="count_parameters",
    what="every weight of BertModel (embeddings and their LayerNorm, n_layer blocks, the pooler); with heads, "
         "BertForPreTraining's MLM transform, decoder bias and NSP layer (the decoder weight is E_tok, counted once)",
    reference=_count_ref,
    compare=_count_compare,
    cases=_count_cases(hidden=False),
    hidden_cases=_count_cases(hidden=True),
    mutants=[
        Mutant(_count_with("no_pooler"), "left out the pooler: BERT's body ends with a d × d layer and its bias "
                                         "(tanh(W_p h_[CLS] + b_p)), which the NSP head and classifiers read"),
        Mutant(_count_with("no_segments"), "left out the segment embeddings: E_seg has type_vocab_size × d_model "
                                           "weights"),
        Mutant(_count_with("no_positions"), "left out the position embeddings: BERT learns them, max_position × "
                                            "d_model weights"),
        Mutant(_count_with("ln_no_bias"), "counted one vector per LayerNorm: each has a gain and a bias, 2 × "
                                          "d_model"),
        Mutant(_count_with("no_attn_bias"), "left out the attention's biases: the query, key, value and output maps "
                                            "each have a bias of d_model"),
        Mutant(_count_with("no_ffn_bias"), "left out the feed-forward biases: d_ff for the first layer, d_model for "
                                           "the second"),
        Mutant(_count_with("no_emb_ln"), "left out the LayerNorm on the embeddings: BERT normalises E_tok + E_pos + "
                                         "E_seg, 2 × d_model parameters"),
        Mutant(_count_with("one_ln"), "counted one LayerNorm per block: a post-LN block has two, after the "
                                      "attention and after the feed-forward"),
        Mutant(_count_with("d_ff_4d"), "took d_ff as 4 × d_model: read it from the config (d_ff), which need not "
                                       "be 4 d_model"),
        Mutant(_count_with("untied"), "counted the MLM decoder's weight (vocab_size × d_model) as well as E_tok: "
                                      "the decoder is tied to the token embedding, one tensor counted once (its "
                                      "bias, vocab_size, is its own)"),
        Mutant(_count_with("no_decoder_bias"), "left out the MLM decoder's bias: its weight is E_tok, but its "
                                               "output bias (vocab_size) is its own"),
        Mutant(_count_with("heads_always"), "counted the pretraining heads when heads is False: the body alone is "
                                            "BertModel (embeddings, blocks, pooler)"),
    ],
    forbidden=(_BERT.count_parameters, _BERT.BERT, _BERT.BertPretraining, _BERT.BertConfig),
    forbidden_attrs=(*ATTRS, "count_parameters", "BertModel", "BertForPreTraining", "num_parameters"),
    forbidden_modules=MODULES,
)
