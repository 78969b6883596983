"""Exercise 10's checks: right answers pass, ready-made ones earn nothing, and the references are proven: the
masking law against lmbook.bert's draws and Hugging Face's DataCollatorForLanguageModeling (whose random tokens come
from the whole vocabulary: the law of a known mistake here), the binomial test against a sum of its probabilities,
the embeddings against Hugging Face's BertEmbeddings given the same weights, the span loss against
BertForQuestionAnswering's own loss, the span search against lmbook.bert, and the parameter count, tensor by
tensor, against transformers' BertModel and BertForPreTraining built on the meta device; and the library and the
grader agree on every case."""

from __future__ import annotations

import math

import pytest
import torch
from check_contract import contract_tests, library_agrees
from students_ch10 import RIGHT as STUDENTS_RIGHT

import lmbook.bert
from lmbook.grading.checks import CheckFailed, case_inputs
from lmbook.grading.verdict import case_problem
from lmbook.tasks.ch10 import CHECKS, check
from lmbook.tasks.ch10.bert_embeddings import EMB_NAMES, _emb_ref, _emb_with
from lmbook.tasks.ch10.best_span import _best_span_compare, _best_span_ref
from lmbook.tasks.ch10.build_inputs import _build_ref
from lmbook.tasks.ch10.count_parameters import BASE, LARGE, _count_ref, _shapes
from lmbook.tasks.ch10.mask_law import MaskLaw, _binom_pvalue
from lmbook.tasks.ch10.mask_tokens import _DRAWN, _fingerprint, _mask_ref
from lmbook.tasks.ch10.shared import BERT_VOCAB, SMALL, Layout
from lmbook.tasks.ch10.span_loss import _span_loss_ref

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

BY_TASK = {c.task: c for c in CHECKS}
CPU = torch.device("cpu")

# one right answer per task, written differently from the reference (tests/students_ch10.py holds them)
RIGHT = {task: answers[0] for task, answers in STUDENTS_RIGHT.items()}

(test_every_task_has_a_right_answer_here,
 test_a_correct_but_different_answer_passes_in_jupyter_and_in_the_grader,
 test_a_correct_answer_passes_on_a_gpu_too) = contract_tests(
    list(check.checks.values()), RIGHT)  # the code tasks and the thinking questions


def _all_cases(task: str) -> int:
    return len(BY_TASK[task].cases) + len(BY_TASK[task].hidden_cases)


# ----------------------------------------------------------------------------- mask_tokens: the law


def _lib_mask(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15):
    return lmbook.bert.mask_tokens(ids, mask_id=mask_id, vocab_size=vocab_size, special_ids=special_ids,
                                   pad_id=pad_id, p=p)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_lmbook_mask_tokens_draws_pass_the_law_on_every_case(seed):
    torch.manual_seed(seed)
    assert library_agrees(BY_TASK["mask_tokens"], _lib_mask, seed=seed) == _all_cases("mask_tokens")


def test_the_laws_own_draws_pass_it_on_many_seeds():
    """The reference law's false alarms: its own draws (the right process) pass every case on 25 seeds."""
    c = BY_TASK["mask_tokens"]
    for seed in range(25):
        for i, case in enumerate([*c.cases, *c.hidden_cases]):
            args, _ = case_inputs(case, seed, i, CPU)
            law = _mask_ref(*args)
            torch.manual_seed(seed * 100 + i)
            assert law.problem(law.draw()) is None, (seed, case.name)


def test_the_binomial_test_is_exact():
    """Two-sided p-value = 2 min(P(X ≤ k), P(X ≥ k)), checked against the probabilities summed one by one."""
    for n, q in ((10, 0.15), (57, 0.8), (200, 0.1)):
        pmf = [math.comb(n, k) * q**k * (1 - q) ** (n - k) for k in range(n + 1)]
        for k in (0, 1, n // 3, n // 2, n - 1, n):
            want = min(1.0, 2 * min(sum(pmf[:k + 1]), sum(pmf[k:])))
            assert math.isclose(_binom_pvalue(k, n, q), want, rel_tol=1e-9, abs_tol=1e-300)
    assert _binom_pvalue(0, 50, 0.0) == 1.0 and _binom_pvalue(1, 50, 0.0) == 0.0
    assert _binom_pvalue(50, 50, 1.0) == 1.0 and _binom_pvalue(49, 50, 1.0) == 0.0


def _fast_tokenizer(layout: Layout):
    names = {layout.pad: "[PAD]", layout.cls: "[CLS]", layout.sep: "[SEP]", layout.mask: "[MASK]",
             layout.unk: "[UNK]"}
    vocab = {names.get(i, f"w{i}"): i for i in range(layout.V)}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                                cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")


def _hf_mask(layout: Layout):
    fast = _fast_tokenizer(layout)
    collator = transformers.DataCollatorForLanguageModeling(fast, mlm_probability=0.15)

    def mask(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15):
        assert (mask_id, pad_id, vocab_size) == (fast.mask_token_id, fast.pad_token_id, len(fast))
        special = torch.isin(ids, torch.tensor(sorted({*special_ids, mask_id, pad_id})))
        return collator.torch_mask_tokens(ids.clone(), special_tokens_mask=special)
    return mask


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hugging_faces_collator_passes_the_law_on_berts_vocabulary(seed):
    """DataCollatorForLanguageModeling makes the same corruption: on BERT's vocabulary (5 special ids in 30,522) its
    draws pass. Its random tokens come from the whole vocabulary, special ones included, which a vocabulary this
    large cannot show."""
    c = BY_TASK["mask_tokens"]
    cases = [(i, case) for i, case in enumerate([*c.cases, *c.hidden_cases])
             if "BERT's vocabulary" in case.name and "p = " not in case.name]
    assert len(cases) >= 3
    for i, case in cases:
        args, kwargs = case_inputs(case, seed, i, CPU)
        torch.manual_seed(seed)
        assert case_problem(c, case, _hf_mask(BERT_VOCAB)(*args), args, kwargs) is None, case.name


def test_hugging_faces_collator_draws_special_tokens_on_a_small_vocabulary():
    """On a 40-token vocabulary, 5 of them special, 1 random replacement in 8 is special: the reference law refuses
    HF's draws, and the law of the known mistake 'random tokens from the whole vocabulary' accepts them."""
    c = BY_TASK["mask_tokens"]
    args, _ = case_inputs(c.cases[0], 0, 0, CPU)
    torch.manual_seed(0)
    out = _hf_mask(SMALL)(*args)
    assert "a random replacement is drawn from the non-special tokens" in _mask_ref(*args).problem(out)
    assert MaskLaw.of(*args, pool="all").problem(out) is None


@pytest.mark.parametrize("hidden", [False, True])
def test_every_mistakes_law_rejects_the_right_draws_somewhere(hidden):
    """Each known mistake's law refuses the reference's own draws on some case, visible and hidden alike: a
    student whose draws are right is never told a mistake (had it failed for another reason, changing ids in
    place, say)."""
    c = BY_TASK["mask_tokens"]
    draws = []
    for i, case in enumerate(c.hidden_cases if hidden else c.cases):
        args, _ = case_inputs(case, 0, i, CPU)
        torch.manual_seed(i)
        draws.append((args, _mask_ref(*args).draw()))
    for kind in MISTAKES:
        assert any(MaskLaw.of(*args, **kind).problem(out) for args, out in draws), kind


MISTAKES = [dict(choose="all"), dict(choose="no_pad"), dict(corrupt="all"), dict(labels="all"),
            dict(fates=(1.0, 0.0, 0.0)), dict(fates=(0.8, 0.02, 0.18)), dict(pool="all"), dict(labels="corrupted"),
            dict(per="row"), dict(per="floor"), dict(pool="batch"), dict(redraw="never"), dict(labels="inverted"),
            dict(labels="zero")]


def test_the_mistakes_laws_are_the_mutants():
    c = BY_TASK["mask_tokens"]
    args, _ = case_inputs(c.cases[0], 0, 0, CPU)
    assert len(MISTAKES) == len(c.mutants)
    for kind, mutant in zip(MISTAKES, c.mutants, strict=True):
        torch.manual_seed(0)
        out = mutant.fn(args[0].clone(), *args[1:])
        law, want = _DRAWN[_fingerprint(out)], MaskLaw.of(*args, **kind)
        for name in ("choose", "per", "fates", "pool", "corrupt", "labels", "special", "p", "mask_id", "pad_id"):
            assert getattr(law, name) == getattr(want, name), name
        assert torch.equal(law.ids, want.ids)


def test_the_mask_cases_are_large_and_hold_what_they_say():
    c = BY_TASK["mask_tokens"]
    for i, case in enumerate(c.cases):
        (ids, mask_id, V, special, pad, p), _ = case_inputs(case, 0, i, CPU)
        eligible = ~torch.isin(ids, torch.tensor([*special, mask_id, pad]))
        assert eligible.sum() * p >= 500, case.name  # enough chosen tokens for the 10% to be counted
        assert (ids[:, 0] == SMALL.cls).all() or (ids[:, 0] != pad).all()
    # the hidden case whose text holds [MASK] and [UNK]
    i, case = next((i, k) for i, k in enumerate(c.hidden_cases) if "already holds [MASK]" in k.name)
    (ids, mask_id, _, special, _, _), _ = case_inputs(case, 0, i, CPU)
    assert (ids == mask_id).sum() > 50 and (ids == SMALL.unk).sum() > 50 and SMALL.unk in special


def test_a_mistakes_draw_is_judged_by_its_own_law():
    """The grader names a mistake by judging the student's draw against the mistake's law, found from its draw."""
    c = BY_TASK["mask_tokens"]
    args, _ = case_inputs(c.cases[0], 0, 0, CPU)
    always_mask = c.mutants[4].fn
    torch.manual_seed(0)
    theirs = always_mask(*args)
    torch.manual_seed(1)
    student = always_mask(*args)  # another draw of the same mistake
    assert c.compare(student, theirs) is None
    assert c.compare(student, _mask_ref(*args)) is not None


# ----------------------------------------------------------------------------- build_inputs and the embeddings


def _lib_build(a, b, cls, sep):
    return lmbook.bert.build_inputs(a, b, cls=cls, sep=sep)


def test_the_library_agrees_on_build_inputs():
    assert library_agrees(BY_TASK["build_inputs"], _lib_build) == _all_cases("build_inputs")


def _bert_tokenizer():
    """Hugging Face's BertTokenizer on a made-up vocabulary: [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4, w5 …"""
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(5, 40)]
    return transformers.BertTokenizer(vocab={w: i for i, w in enumerate(words)})


def test_build_inputs_reference_is_berts_tokenizer():
    """BertTokenizer builds the same ids and token_type_ids for a pair and for a single sentence."""
    tok = _bert_tokenizer()
    a, b = [7, 8, 9], [10, 11, 12, 13]
    for second in (b, None):
        enc = tok(" ".join(f"w{i}" for i in a), None if second is None else " ".join(f"w{i}" for i in second))
        assert _build_ref(a, second, 2, 3) == (enc["input_ids"], enc["token_type_ids"])


def _hf_embeddings(ids, segments, params):
    V, d = params["word_embeddings.weight"].shape
    cfg = transformers.BertConfig(vocab_size=V, hidden_size=d, num_hidden_layers=0, num_attention_heads=1,
                                  intermediate_size=d, max_position_embeddings=params["position_embeddings.weight"]
                                  .shape[0], type_vocab_size=params["token_type_embeddings.weight"].shape[0],
                                  layer_norm_eps=1e-12, hidden_dropout_prob=0.0)
    emb = transformers.models.bert.modeling_bert.BertEmbeddings(cfg).to(params["LayerNorm.weight"].dtype)
    emb.load_state_dict(params)
    return emb.eval()(input_ids=ids, token_type_ids=segments)


def _lib_embeddings(ids, segments, params):
    V, d = params["word_embeddings.weight"].shape
    config = lmbook.bert.BertConfig(vocab_size=V, n_layer=0, n_head=1, d_model=d,
                                    max_position=params["position_embeddings.weight"].shape[0],
                                    type_vocab_size=params["token_type_embeddings.weight"].shape[0])
    bert = lmbook.bert.BERT(config).to(params["LayerNorm.weight"].dtype)
    with torch.no_grad():
        for ours, theirs in (("token_emb.weight", "word_embeddings.weight"),
                             ("position_emb.weight", "position_embeddings.weight"),
                             ("segment_emb.weight", "token_type_embeddings.weight"),
                             ("ln_emb.weight", "LayerNorm.weight"), ("ln_emb.bias", "LayerNorm.bias")):
            bert.get_parameter(ours).copy_(params[theirs])
    return bert(ids, segments)[0]  # no blocks: the embeddings' output


def test_the_embeddings_reference_is_hugging_faces_bert_embeddings():
    c = BY_TASK["bert_embeddings"]
    assert library_agrees(c, _hf_embeddings) == _all_cases("bert_embeddings")


def test_the_library_agrees_on_the_embeddings():
    assert library_agrees(BY_TASK["bert_embeddings"], _lib_embeddings) == _all_cases("bert_embeddings")


def test_the_param_names_are_bert_embeddings_state_dict():
    (_, _, params), _ = case_inputs(BY_TASK["bert_embeddings"].cases[0], 0, 0, CPU)
    cfg = transformers.BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=0, num_attention_heads=1,
                                  intermediate_size=16, max_position_embeddings=16)
    hf = transformers.models.bert.modeling_bert.BertEmbeddings(cfg).state_dict()
    assert tuple(params) == EMB_NAMES == tuple(hf)
    assert {k: tuple(v.shape) for k, v in params.items()} == {k: tuple(v.shape) for k, v in hf.items()}


def test_the_epsilon_case_is_visible():
    """At BERT's initial scale, ε = 1e-5 moves the output by far more than the tolerance."""
    (ids, segments, params), _ = case_inputs(BY_TASK["bert_embeddings"].cases[0], 0, 0, CPU)
    diff = (_emb_ref(ids, segments, params) - _emb_with("eps")(ids, segments, params)).abs().max()
    assert diff > 1e-3


# ----------------------------------------------------------------------------- span extraction


def test_the_span_loss_reference_is_bert_for_question_answering_loss():
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=32, max_position_embeddings=32, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0)
    model = transformers.BertForQuestionAnswering(cfg).eval()
    ids = torch.randint(5, 50, (6, 20))
    start = torch.randint(0, 20, (6,))
    end = torch.clamp(start + torch.randint(0, 4, (6,)), max=19)
    with torch.no_grad():
        out = model(input_ids=ids, start_positions=start, end_positions=end)
        ours = _span_loss_ref(out.start_logits, out.end_logits, start, end)
    assert torch.allclose(ours.float(), out.loss, atol=1e-6)


def test_the_library_agrees_on_span_loss_and_best_span():
    assert library_agrees(BY_TASK["span_loss"], lmbook.bert.span_loss) == _all_cases("span_loss")
    assert library_agrees(BY_TASK["best_span"], lmbook.bert.best_span) == _all_cases("best_span")


def test_the_span_reference_is_the_best_of_every_allowed_pair():
    """The brute force against a search written another way, on random small inputs with max_len and masks."""
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        n = int(torch.randint(1, 9, (1,), generator=g))
        s, e = torch.randn(1, n, generator=g), torch.randn(1, n, generator=g)
        mask = torch.rand(1, n, generator=g) < 0.6
        mask[0, int(torch.randint(0, n, (1,), generator=g))] = True
        max_len = [None, 1, 2, 3][int(torch.randint(0, 4, (1,), generator=g))]
        pairs = [(i, j) for i in range(n) for j in range(n) if i <= j and mask[0, i] and mask[0, j]
                 and (max_len is None or j - i + 1 <= max_len)]
        best = max(float(s[0, i]) + float(e[0, j]) for i, j in pairs)
        assert math.isclose(_best_span_ref(s, e, mask, max_len).best[0], best, rel_tol=1e-12)


def test_the_span_cases_have_lures_that_every_rule_needs():
    """In the visible cases the best unconstrained pair is not allowed in most rows: each rule changes answers."""
    c = BY_TASK["best_span"]
    for i, case in enumerate(c.cases):
        (s, e, mask, *rest), _ = case_inputs(case, 0, i, CPU)
        free = (s[:, :, None] + e[:, None, :]).flatten(1).argmax(1)
        ref = _best_span_ref(s, e, mask, *rest)
        n = s.shape[1]
        free_scores = [float(s[b, int(f) // n] + e[b, int(f) % n]) for b, f in enumerate(free)]
        assert sum(fs > best + 1e-6 for fs, best in zip(free_scores, ref.best, strict=True)) >= len(free) // 2


def test_a_tie_accepts_either_best_span():
    s = torch.tensor([[0.0, 1.0, 1.0, 0.0]])
    e = torch.tensor([[0.0, 1.0, 1.0, 0.0]])
    mask = torch.tensor([[False, True, True, True]])
    ref = _best_span_ref(s, e, mask, 1)
    for i in (1, 2):
        assert _best_span_compare((torch.tensor([i]), torch.tensor([i])), ref) is None
    assert "not allowed" in _best_span_compare((torch.tensor([1]), torch.tensor([2])), ref)


# ----------------------------------------------------------------------------- parameters


def _hf_config(config: dict) -> transformers.BertConfig:
    return transformers.BertConfig(vocab_size=config["vocab_size"], hidden_size=config["d_model"],
                                   num_hidden_layers=config["n_layer"], num_attention_heads=config["n_head"],
                                   intermediate_size=config["d_ff"], max_position_embeddings=config["max_position"],
                                   type_vocab_size=config["type_vocab_size"])


def _hf_shapes(config: dict, heads: bool) -> dict[str, tuple[int, ...]]:
    with torch.device("meta"):  # no memory, even for BERT-large
        model = (transformers.BertForPreTraining if heads else transformers.BertModel)(_hf_config(config))
    shapes = {name.removeprefix("bert."): tuple(p.shape) for name, p in model.named_parameters()}
    if heads:  # tied: the decoder's weight is the word embedding, listed once (and its bias is predictions.bias)
        assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    return shapes


@pytest.mark.parametrize("hidden", [False, True])
def test_the_count_reference_is_transformers_tensor_by_tensor(hidden):
    c = BY_TASK["count_parameters"]
    for i, case in enumerate(c.hidden_cases if hidden else c.cases):
        (config, heads), _ = case_inputs(case, 0, i, CPU)
        theirs, ours = _hf_shapes(config, heads), _shapes(config, heads)
        decoder_bias = {"cls.predictions.bias", "cls.predictions.decoder.bias"}
        assert set(ours) - decoder_bias == set(theirs) - decoder_bias, case.name
        assert {k: v for k, v in ours.items() if k not in decoder_bias} == {
            k: v for k, v in theirs.items() if k not in decoder_bias}
        assert _count_ref(config, heads) == sum(math.prod(s) for s in theirs.values()), case.name


def test_bert_base_and_large_counts():
    assert _count_ref(BASE) == 109_482_240
    assert _count_ref(LARGE) == 335_141_888
    assert _count_ref(BASE, True) == 110_106_428


def _lib_count(config, heads=False):
    cfg = lmbook.bert.BertConfig(vocab_size=config["vocab_size"], n_layer=config["n_layer"], n_head=config["n_head"],
                                 d_model=config["d_model"], d_ff=config["d_ff"], max_position=config["max_position"],
                                 type_vocab_size=config["type_vocab_size"])
    return lmbook.bert.count_parameters(cfg, heads)


def test_the_library_agrees_on_the_count():
    assert library_agrees(BY_TASK["count_parameters"], _lib_count) == _all_cases("count_parameters")


def test_the_count_mistakes_differ_from_each_other_somewhere():
    """No two known mistakes give the same count on every case (the grader could not tell them apart)."""
    c = BY_TASK["count_parameters"]
    inputs = [case_inputs(case, 0, i, CPU)[0] for i, case in enumerate([*c.cases, *c.hidden_cases])]
    outputs = [tuple(m.fn(*args) for args in inputs) for m in c.mutants]
    assert len(set(outputs)) == len(outputs)


# ----------------------------------------------------------------------------- ready-made answers earn nothing


def _hf_count(config, heads=False):
    with torch.device("meta"):
        model = (transformers.BertForPreTraining if heads else transformers.BertModel)(_hf_config(config))
    return sum(p.numel() for p in model.parameters())


def _hf_build(a, b, cls, sep):
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(5, 40)]
    tok = transformers.BertTokenizer(vocab={w: i for i, w in enumerate(words)})
    enc = tok(" ".join(f"w{i}" for i in a), None if b is None else " ".join(f"w{i}" for i in b))
    return enc["input_ids"], enc["token_type_ids"]


@pytest.mark.parametrize(("task", "answer"), [
    ("mask_tokens", _lib_mask), ("mask_tokens", lmbook.bert.mask_tokens), ("mask_tokens", _hf_mask(BERT_VOCAB)),
    ("build_inputs", _lib_build), ("build_inputs", _hf_build),
    ("bert_embeddings", _lib_embeddings), ("bert_embeddings", _hf_embeddings),
    ("span_loss", lmbook.bert.span_loss), ("best_span", lmbook.bert.best_span),
    ("count_parameters", _lib_count), ("count_parameters", _hf_count),
])
def test_a_ready_made_implementation_gets_no_credit(task, answer):
    with pytest.raises(CheckFailed, match="not graded"):
        check(task, answer)


def test_the_right_answers_may_use_torch_nn_on_the_meta_device():
    """Counting with torch.nn layers built on the meta device is allowed: only BERT's ready-made classes are
    refused."""
    check("count_parameters", STUDENTS_RIGHT["count_parameters"][0])


def test_a_sentence_that_holds_the_separator_id_is_segmented_by_position():
    import students_ch10

    from lmbook.grading.checks import run_check
    from lmbook.tasks.ch10.build_inputs import BUILD_INPUTS

    with pytest.raises(CheckFailed) as failed:
        run_check(BUILD_INPUTS, students_ch10.bi_segments_from_the_first_sep, device=torch.device("cpu"),
                  verbose=False)
    message = str(failed.value)
    assert "found where segment A ends by looking for the [SEP] id" in message, message
    # the case's name holds brackets: the smallest input is still found, and its problem shown whole
    assert "a = [102, 101]" in message and "it fails: segments: returned" in message, message
