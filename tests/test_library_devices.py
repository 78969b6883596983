"""The library on a GPU, proven without one: every lmbook function a page calls with a model or tensors on
``device`` runs there, leaves its results where a page reads them, and (seeded) draws the same text or numbers
as on the CPU.

Each test calls lmbook the way the pages do, at tiny sizes, under :class:`lmbook.devicecheck.PretendAccelerator`:
everything computes on the CPU with real values, but a tensor, mask, generator or index made on the CPU and
mixed with the model's tensors raises as CUDA (or Apple's MPS) would.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch.utils._pytree import tree_flatten

from lmbook.devicecheck import PRETEND, PretendAccelerator, side

# ----------------------------------------------------------------------------- helpers and tiny data


def _on_gpu(tree) -> bool:
    tensors = [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]
    return bool(tensors) and all(side(t) == "gpu" for t in tensors)


def _plain(values) -> bool:
    return all(isinstance(v, int | float) for v in values)


def _same_model(make):
    """Two copies of one freshly made model (same weights): one for the CPU, one for the pretend GPU."""
    torch.manual_seed(0)
    model = make()
    return model, copy.deepcopy(model)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """Tiny models run fastest on one thread: torch's default, a thread per core, waits on busy cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def corpus():
    from lmbook.corpus import load_corpus

    return load_corpus(n_train=3000, n_val=300, n_test=300)


@pytest.fixture(scope="module")
def translation():
    from lmbook.translation import load_translation

    return load_translation(n_train=64, n_val=16, n_test=8, max_len=8)


def _tiny_gpt(vocab_size: int, block_size: int = 12):
    from lmbook.gpt import GPT, GPTConfig

    return GPT(GPTConfig(vocab_size, block_size, n_layer=1, n_head=2, d_model=16))


def _tiny_causal_lm(vocab_size: int, **kw):
    from lmbook.causal_lm import CausalLM, LMConfig

    cfg = dict(block_size=8, d_model=16, n_layer=1, d_ff=32) | kw
    return CausalLM(LMConfig(vocab_size, **cfg))


# ----------------------------------------------------------------------------- chapters 1 and 2


def test_fit_and_evaluate_train_a_feedforward_lm_on_a_gpu(corpus):
    from lmbook.corpus import make_windows
    from lmbook.ffnn import FeedforwardLM
    from lmbook.train import evaluate, fit

    V = len(corpus.vocab)
    x, y = make_windows(corpus.train[:300], 3)
    val = make_windows(corpus.val[:100], 3)
    cpu, gpu = _same_model(lambda: FeedforwardLM(V, window=3, d_emb=8, d_hidden=16))
    want = fit(cpu, (x, y), val, epochs=1, batch_size=64, progress=False)
    with PretendAccelerator():
        gpu.to(PRETEND)
        got = fit(gpu, (x, y), val, epochs=1, batch_size=64, progress=False)
        loss = evaluate(gpu, *val)
        assert all(side(p) == "gpu" for p in gpu.parameters())
    assert _plain(got.steps + got.val) and isinstance(loss, float)
    assert got.steps == pytest.approx(want.steps, rel=1e-5)


def test_skipgram_trains_on_a_gpu_with_the_cpus_negatives(corpus):
    from lmbook.word2vec import nearest_neighbours, train_skipgram

    V = len(corpus.vocab)
    ids = corpus.train[:400]
    _, want = train_skipgram(ids, V, dim=8, epochs=1, batch_size=256, seed=0, device="cpu")
    with PretendAccelerator():
        model, got = train_skipgram(ids, V, dim=8, epochs=1, batch_size=256, seed=0, device=PRETEND)
        assert side(model.v.weight) == "gpu"
        neighbours = nearest_neighbours(model.v.weight, 5, k=3)
    assert got == pytest.approx(want, rel=1e-5)
    assert len(neighbours) == 3 and all(isinstance(i, int) for i, _ in neighbours)


def test_rnn_lm_truncated_bptt_runs_on_a_gpu(corpus):
    from lmbook.rnn import RNNLM, train_tbptt

    V = len(corpus.vocab)
    for cell in ("rnn", "lstm", "gru"):
        cpu, gpu = _same_model(lambda cell=cell: RNNLM(V, d_emb=8, hidden_size=16, cell=cell))
        want = train_tbptt(cpu, corpus.train[:400], n_streams=4, chunk=16, epochs=1)
        with PretendAccelerator():
            got = train_tbptt(gpu.to(PRETEND), corpus.train[:400], n_streams=4, chunk=16, epochs=1)
        assert got == pytest.approx(want, rel=1e-5), cell


def test_rnn_helpers_run_on_a_gpu():
    from lmbook.rnn import LSTMCell, RNNCell, gradient_by_distance, pool, unroll

    with PretendAccelerator():
        cell = RNNCell(4, 6).to(PRETEND)
        x = torch.randn(3, 5, 4, device=PRETEND)
        states, h = unroll(cell, x)
        assert _on_gpu((states, h))
        lengths = torch.tensor([5, 3, 1])  # as the pages make them: on the CPU
        states, _ = unroll(LSTMCell(4, 6).to(PRETEND), x, lengths=lengths.to(PRETEND))
        mask = (torch.arange(5)[None, :] < lengths[:, None]).to(PRETEND)
        assert _on_gpu(pool(states, mask, "last")) and _on_gpu(pool(states, mask, "mean"))
        assert _on_gpu(gradient_by_distance(cell, x))


def test_rnn_lm_generation_on_a_gpu_draws_the_cpus_tokens(corpus):
    from lmbook.generate import generate
    from lmbook.rnn import RNNLM

    V = len(corpus.vocab)
    cpu, gpu = _same_model(lambda: RNNLM(V, d_emb=8, hidden_size=16, cell="lstm"))
    prompt = corpus.train[:4]
    want = generate(cpu, prompt, 6, temperature=0.8, top_k=10, generator=torch.Generator().manual_seed(3))
    want_greedy = generate(cpu, prompt[None], 6, greedy=True)
    with PretendAccelerator():
        gpu.to(PRETEND)
        got = generate(gpu, prompt.to(PRETEND), 6, temperature=0.8, top_k=10,
                       generator=torch.Generator().manual_seed(3))
        got_greedy = generate(gpu, torch.tensor([prompt.tolist()], device=PRETEND), 6, greedy=True)
    assert got.tolist() == want.tolist() and got_greedy.tolist() == want_greedy.tolist()


def test_sample_next_on_gpu_logits_draws_the_cpus_tokens_with_either_generator():
    from lmbook.decoding import filter_logits, sample_next

    logits = torch.randn(5, 11)
    want = sample_next(logits, torch.Generator().manual_seed(1), 0.7, 4, 0.9)
    with PretendAccelerator():
        on_gpu = logits.to(PRETEND)
        got = sample_next(on_gpu, torch.Generator().manual_seed(1), 0.7, 4, 0.9)
        assert side(got) == "gpu"
        assert _on_gpu(filter_logits(on_gpu, 0.7, 4, 0.9))
        drawn_there = sample_next(on_gpu, torch.Generator(device=PRETEND).manual_seed(1), 1.0)
        assert side(drawn_there) == "gpu"
    assert got.tolist() == want.tolist()


# ----------------------------------------------------------------------------- chapters 3, 4 and 8: translation


def _seq2seq(translation, attention=None):
    from lmbook.seq2seq import Seq2Seq

    return Seq2Seq(len(translation.src_vocab), len(translation.tgt_vocab), d_emb=8, d_hid=16, attention=attention,
                   bidirectional=attention is not None, feed_context=True)


def _transformer(translation):
    from lmbook.transformer import Transformer

    return Transformer(len(translation.src_vocab), len(translation.tgt_vocab), d_model=16, n_head=2, n_layer=1,
                       d_ff=32, dropout=0.0, norm_first=True)


@pytest.mark.parametrize("kind", ["seq2seq", "attention", "transformer"])
def test_translation_training_and_decoding_run_on_a_gpu(translation, kind):
    from lmbook.seq2seq import translate
    from lmbook.seq2seq_train import encode_pairs, evaluate_loss, fit, teacher_forced_exact_match

    make = {"seq2seq": lambda: _seq2seq(translation), "attention": lambda: _seq2seq(translation, "additive"),
            "transformer": lambda: _transformer(translation)}[kind]
    train = encode_pairs(translation.train, translation.src_vocab, translation.tgt_vocab)
    val = encode_pairs(translation.val, translation.src_vocab, translation.tgt_vocab)
    sources = [src for src, _ in translation.test[:3]]
    kw = dict(steps=3, batch_size=16, seed=0, eval_every=3, warmup=2, decay=True, label_smoothing=0.1)
    cpu, gpu = _same_model(make)
    want = fit(cpu, train, val, metric=lambda m: teacher_forced_exact_match(m, val), **kw)
    want_greedy = translate(cpu, sources, translation.src_vocab, translation.tgt_vocab, max_len=6)
    want_beam = translate(cpu, sources, translation.src_vocab, translation.tgt_vocab, beam_size=2, max_len=6)
    with PretendAccelerator():
        gpu.to(PRETEND)
        got = fit(gpu, train, val, metric=lambda m: teacher_forced_exact_match(m, val), **kw)
        loss = evaluate_loss(gpu, val)
        greedy = translate(gpu, sources, translation.src_vocab, translation.tgt_vocab, max_len=6)
        beam = translate(gpu, sources, translation.src_vocab, translation.tgt_vocab, beam_size=2, max_len=6)
        x, x_len, y = (t.to(PRETEND) for t in encode_pairs(translation.test[:3], translation.src_vocab,
                                                           translation.tgt_vocab))
        logp = gpu.sequence_logprob(x, x_len, y)
        hyps = gpu.greedy(x, x_len, max_len=5)
        assert side(logp) == "gpu" and len(hyps) == 3
        # as chapters 3, 4 and 8 call them: ids on the device, their lengths left on the CPU
        assert gpu.sequence_logprob(x, x_len.cpu(), y).tolist() == logp.tolist()
        assert gpu.greedy(x, x_len.cpu(), max_len=5) == hyps
        if kind != "seq2seq":
            _, alpha = gpu.greedy(x, x_len, max_len=5, return_alpha=True)
            assert side(alpha) == "gpu"
    assert _plain(got.loss + got.val_loss + got.val_metric) and isinstance(loss, float)
    assert got.loss == pytest.approx(want.loss, rel=1e-4)
    assert (greedy, beam) == (want_greedy, want_beam)


def test_translate_one_sentence_at_a_time_on_a_gpu(translation):
    from lmbook.decoding import beam_search, greedy_decode
    from lmbook.seq2seq import BOS, EOS, greedy_translate_one

    src = translation.src_vocab.encode(translation.test[0][0]) + [EOS]
    cpu, gpu = _same_model(lambda: _seq2seq(translation, "multiplicative"))
    want = greedy_translate_one(cpu, src, max_len=5)
    with PretendAccelerator():
        gpu.to(PRETEND)
        assert greedy_translate_one(gpu, src, max_len=5) == want
        assert greedy_decode(gpu.step_fn(src), BOS, EOS, 5) == want
        assert beam_search(gpu.step_fn(src), BOS, EOS, 2, 5)[0][0]


# ----------------------------------------------------------------------------- chapters 5 to 7: causal LMs


@pytest.mark.parametrize("positions", ["learned", "sinusoidal", "none", "relative", "alibi", "rope"])
def test_causal_lm_training_and_scoring_run_on_a_gpu(corpus, positions):
    from lmbook.causal_lm import POSITIONS, random_blocks, stream_log_probs, stream_loss, train_lm, window_log_probs
    from lmbook.corpus import sentence_windows

    assert positions in POSITIONS
    V = len(corpus.vocab)
    cpu, gpu = _same_model(lambda: _tiny_causal_lm(V, n_head=2, positions=positions))
    kw = dict(steps=3, batch_size=4, seed=0, eval_every=3, warmup=2)
    want = train_lm(cpu, corpus.train, corpus.val[:40], **kw)
    windows = sentence_windows(corpus.test, 9, 3)
    with PretendAccelerator():
        gpu.to(PRETEND)
        got = train_lm(gpu, corpus.train, corpus.val[:40], **kw)
        assert isinstance(stream_loss(gpu, corpus.test[:30]), float)
        assert side(stream_log_probs(gpu, corpus.test[:30])) == "gpu"
        assert side(window_log_probs(gpu, windows)) == "cpu"  # as documented
        x, y = random_blocks(corpus.train, 2, 8, torch.Generator().manual_seed(0))
        logits, weights = gpu(x.to(PRETEND), return_weights=True)
        assert _on_gpu((logits, weights))
        F.cross_entropy(logits.reshape(-1, V), y.to(PRETEND).reshape(-1)).backward()
    assert _plain(got.loss + got.val_loss)
    assert got.loss == pytest.approx(want.loss, rel=1e-4)


def test_causal_lm_with_l2_instead_of_weight_decay_trains_on_a_gpu(corpus):
    from lmbook.causal_lm import train_lm

    with PretendAccelerator():
        model = _tiny_causal_lm(len(corpus.vocab)).to(PRETEND)
        log = train_lm(model, corpus.train, steps=2, batch_size=4, decoupled=False)
    assert _plain(log.loss)


def test_causal_lm_trains_on_rows_of_sequences_on_a_gpu(corpus):
    from lmbook.causal_lm import train_lm
    from lmbook.corpus import sentence_windows

    rows = sentence_windows(corpus.train, 9, 20)
    with PretendAccelerator():
        model = _tiny_causal_lm(len(corpus.vocab)).to(PRETEND)
        log = train_lm(model, rows, steps=2, batch_size=4)
    assert _plain(log.loss)


def test_agreement_scoring_runs_on_a_gpu(corpus):
    from lmbook.agreement import accuracy_by_distance, agrees, long_phrase_windows, verb_sites
    from lmbook.causal_lm import stream_log_probs

    V = len(corpus.vocab)
    sites = verb_sites(corpus.test[:200], corpus.vocab, min_pos=8)
    with PretendAccelerator():
        lm = _tiny_causal_lm(V).to(PRETEND)
        logp = stream_log_probs(lm, corpus.test[:200])
        correct = agrees(logp, sites)
        by_distance = accuracy_by_distance(correct.cpu(), sites)
        windows = long_phrase_windows(corpus.test, corpus.vocab, n_adj=1, count=2, length=8)
        w = windows.windows.to(PRETEND)
        assert side(lm(w)) == "gpu"
    assert by_distance is not None


def test_two_lookups_train_and_measure_on_a_gpu():
    from lmbook.two_lookups import lookup_weights, train_two_lookups, two_lookup_accuracy
    from lmbook.two_lookups import vocab_size as lookup_vocab

    n, m = 6, 3
    cpu, gpu = _same_model(lambda: _tiny_causal_lm(lookup_vocab(m), block_size=n, n_head=2, n_layer=2))
    want = train_two_lookups(cpu, n, m, steps=3, batch_size=8)
    with PretendAccelerator():
        gpu.to(PRETEND)
        got = train_two_lookups(gpu, n, m, steps=3, batch_size=8)
        acc = two_lookup_accuracy(gpu, n, m, count=20)
        weights = lookup_weights(gpu, n, m, count=10)
    assert got.loss == pytest.approx(want.loss, rel=1e-4)
    assert _plain(acc.values()) and weights.shape == (2, 2, 2)


def test_attention_pieces_follow_their_inputs_onto_a_gpu():
    from lmbook.attention import AdditiveScore, MultiplicativeScore, attend, dot_scores, masked_softmax
    from lmbook.multihead import MultiHeadAttention
    from lmbook.positions import RelativePositionBias, alibi_bias, frequencies, rope
    from lmbook.self_attention import SelfAttention, causal_mask, scaled_dot_product_attention

    with PretendAccelerator():
        s, h = torch.randn(2, 8, device=PRETEND), torch.randn(2, 5, 8, device=PRETEND)
        mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2], device=PRETEND)
        for score in (dot_scores(s, h), AdditiveScore(8, 8, 6).to(PRETEND)(s, h),
                      MultiplicativeScore(8, 8).to(PRETEND)(s, h)):
            alpha = masked_softmax(score, mask)
            assert _on_gpu(attend(score, h, mask)) and side(alpha) == "gpu"
        x = torch.randn(2, 5, 8, device=PRETEND)
        causal = causal_mask(5, device=PRETEND)
        assert _on_gpu(SelfAttention(8, 4).to(PRETEND)(x, causal))
        assert _on_gpu(scaled_dot_product_attention(x, x, x, causal))
        mha = MultiHeadAttention(8, 2).to(PRETEND)
        assert _on_gpu(mha(x, key_mask=mask, mask=causal)) and _on_gpu(mha(x, causal=True))
        assert _on_gpu(rope(x.view(2, 5, 2, 4).transpose(1, 2)))
        assert side(frequencies(8, device=PRETEND)) == "gpu"
        bias = RelativePositionBias(2, 3).to(PRETEND)
        assert side(bias(5)) == "gpu"
        assert side(alibi_bias(2, 5).to(PRETEND)) == "gpu"


# ----------------------------------------------------------------------------- chapter 9: GPT


def test_gpt_generation_on_a_gpu_draws_the_cpus_tokens(corpus):
    from lmbook.gpt import generate

    V = len(corpus.vocab)
    cpu, gpu = _same_model(lambda: _tiny_gpt(V))
    prompt = corpus.train[:8].view(2, 4)
    kw = dict(temperature=0.9, top_k=8, top_p=0.95)
    want = generate(cpu, prompt, 6, generator=torch.Generator().manual_seed(2), **kw)
    want_no_cache = generate(cpu, prompt, 6, use_cache=False, greedy=True)
    with PretendAccelerator():
        gpu.to(PRETEND)
        got = generate(gpu, prompt.to(PRETEND), 6, generator=torch.Generator().manual_seed(2), **kw)
        got_no_cache = generate(gpu, prompt.to(PRETEND), 6, use_cache=False, greedy=True)
        assert side(got) == "gpu" and side(got_no_cache) == "gpu"
    assert got.tolist() == want.tolist() and got_no_cache.tolist() == want_no_cache.tolist()


def test_gpt_pretraining_runs_on_a_gpu(corpus):
    from lmbook.causal_lm import stream_loss, train_lm

    V = len(corpus.vocab)
    cpu, gpu = _same_model(lambda: _tiny_gpt(V))
    want = train_lm(cpu, corpus.train, steps=3, batch_size=4)
    with PretendAccelerator():
        gpu.to(PRETEND)
        got = train_lm(gpu, corpus.train, corpus.val[:30], steps=3, batch_size=4, eval_every=3)
        assert isinstance(stream_loss(gpu, corpus.val[:30]), float)
    assert got.loss == pytest.approx(want.loss, rel=1e-4)


@pytest.mark.parametrize("train_body", [True, False])
def test_gpt_finetuning_and_accuracy_run_on_a_gpu(corpus, train_body):
    from lmbook.finetune import accuracy, finetune, predict
    from lmbook.gpt import GPTClassifier, format_pair, last_token_state, pad_batch

    V = len(corpus.vocab)
    seqs = [format_pair(corpus.train[i : i + 3].tolist(), corpus.train[i + 3 : i + 5].tolist(), 1, 2, 3)
            for i in range(0, 40, 5)]
    labels = torch.tensor([i % 2 for i in range(len(seqs))])
    cpu, gpu = _same_model(lambda: GPTClassifier(_tiny_gpt(V), 2))
    kw = dict(steps=3, lr=1e-2, batch_size=4, train_body=train_body)
    want = finetune(cpu, seqs, labels, **kw)
    with PretendAccelerator():
        gpu.to(PRETEND)
        got = finetune(gpu, seqs, labels, **kw)
        acc = accuracy(gpu, seqs, labels)
        assert side(predict(gpu, seqs)) == "cpu"  # as documented
        ids, lengths = pad_batch(seqs, 0)
        h = gpu.gpt.hidden_states(ids.to(PRETEND))
        assert side(last_token_state(h, lengths)) == "gpu"  # CPU lengths, as a page may pass them
    assert got == pytest.approx(want, rel=1e-4) and isinstance(acc, float)


def test_gpt_agreement_pairs_finetune_on_a_gpu(corpus):
    from lmbook.finetune import accuracy, agreement_pairs, finetune, sentence_subset, subject_number_examples
    from lmbook.gpt import GPTClassifier, format_pair

    V = len(corpus.vocab)
    examples = subject_number_examples(corpus.train[:1500], corpus.vocab)
    pairs = sentence_subset(agreement_pairs(examples, corpus.vocab), 4)
    seqs = [format_pair(a, b, V, V + 1, V + 2) for a, b in zip(pairs.a, pairs.b, strict=True)]
    cpu, gpu = _same_model(lambda: GPTClassifier(_tiny_gpt(V + 3, block_size=64), 2))
    want = finetune(cpu, seqs, pairs.labels, steps=2, lr=1e-2)
    with PretendAccelerator():
        gpu.to(PRETEND)
        losses = finetune(gpu, seqs, pairs.labels, steps=2, lr=1e-2)
        acc = accuracy(gpu, seqs, pairs.labels)
    assert losses == pytest.approx(want, rel=1e-4) and isinstance(acc, float)


# ----------------------------------------------------------------------------- chapter 10: BERT


def _tiny_bert_config(vocab_size: int):
    from lmbook.bert import BertConfig

    return BertConfig(vocab_size, n_layer=1, n_head=2, d_model=16, max_position=32)


def test_bert_masked_lm_pretraining_runs_on_a_gpu(corpus):
    from lmbook.bert import BertPretraining, mask_tokens, train_mlm
    from lmbook.corpus import sentence_windows

    V = len(corpus.vocab) + 4
    windows = sentence_windows(corpus.train, 10, 20)
    kw = dict(mask_id=V - 1, pad_id=V - 4, special_ids=[V - 3, V - 2], steps=3, batch_size=4, warmup=2)
    cpu, gpu = _same_model(lambda: BertPretraining(_tiny_bert_config(V)))
    want, _ = train_mlm(cpu, windows, **kw)
    with PretendAccelerator():
        gpu.to(PRETEND)
        got, seconds = train_mlm(gpu, windows, **kw)
        on_gpu = windows.to(PRETEND)
        inputs, labels = mask_tokens(on_gpu, mask_id=V - 1, vocab_size=V, special_ids=[V - 3], pad_id=V - 4,
                                     generator=torch.Generator(device=PRETEND).manual_seed(0))
        assert _on_gpu((inputs, labels))
        mlm, nsp = gpu(inputs)
        assert _on_gpu((mlm, nsp))
    assert got == pytest.approx(want, rel=1e-4) and isinstance(seconds, float)


def test_bert_mask_tokens_draws_the_same_masks_for_gpu_ids_with_a_cpu_generator(corpus):
    from lmbook.bert import mask_tokens

    ids = corpus.train[:40].view(4, 10)
    kw = dict(mask_id=50, vocab_size=51, special_ids=[0], pad_id=49)
    want = mask_tokens(ids, generator=torch.Generator().manual_seed(0), **kw)
    with PretendAccelerator():
        got = mask_tokens(ids.to(PRETEND), generator=torch.Generator().manual_seed(0), **kw)
        assert _on_gpu(got)
    assert [t.tolist() for t in got] == [t.tolist() for t in want]


@pytest.mark.parametrize("head", ["classifier", "span"])
def test_bert_finetuning_and_scoring_run_on_a_gpu(corpus, head):
    from lmbook.bert import BERT, best_span
    from lmbook.bert_finetune import (
        BertClassifier,
        BertSpanExtractor,
        agreement_examples,
        finetune,
        score,
        to_device,
        who_examples,
    )

    V = len(corpus.vocab)
    special = dict(cls=V, sep=V + 1, pad_id=V + 2)
    make_examples = agreement_examples if head == "classifier" else who_examples
    ex = make_examples(corpus.train[:2000], corpus.vocab, **special, seed=0)
    ex = ex.subset(torch.arange(min(12, len(ex))))
    Head = BertClassifier if head == "classifier" else BertSpanExtractor
    cpu, gpu = _same_model(lambda: Head(BERT(_tiny_bert_config(V + 3))))
    want = finetune(cpu, ex, steps=3, lr=1e-3, batch_size=4)
    with PretendAccelerator():
        gpu.to(PRETEND)
        got = finetune(gpu, ex, steps=3, lr=1e-3, batch_size=4)
        acc = score(gpu, ex, batch_size=5)
        shown = to_device(ex.subset(torch.arange(3)), PRETEND)
        pred = gpu.predict(shown)
        assert side(pred) == "gpu"
        if head == "span":
            start, end = gpu(shown)
            assert _on_gpu(best_span(start, end, shown.passage, max_len=4))
    assert got == pytest.approx(want, rel=1e-4) and isinstance(acc, float)


# ----------------------------------------------------------------------------- chapter 11


def _instruct_setup(corpus):
    from lmbook.corpus import Vocab
    from lmbook.instruct import SPECIAL, encode, extend_vocab, instruction_data, sentences

    vocab = Vocab([*corpus.vocab.itos, *SPECIAL])
    examples = instruction_data(sentences(corpus.train[:300], corpus.vocab), seed=0)[:24]
    ids, mask = encode(examples, vocab)

    def make():
        model = _tiny_gpt(len(corpus.vocab), block_size=48)
        return extend_vocab(model, len(SPECIAL))

    return vocab, examples, ids, mask, make


def test_instruction_tuning_and_responding_run_on_a_gpu(corpus):
    from lmbook.instruct import respond, train_instruct

    vocab, examples, ids, mask, make = _instruct_setup(corpus)
    prompts = [e.prompt for e in examples[:6]]
    cpu, gpu = _same_model(make)
    want = train_instruct(cpu, ids, mask, steps=2, batch_size=4)
    want_greedy = respond(cpu, prompts, vocab, max_new_tokens=5)
    want_sampled = respond(cpu, prompts, vocab, max_new_tokens=5, temperature=1.0,
                           generator=torch.Generator().manual_seed(0))
    with PretendAccelerator():
        gpu.to(PRETEND)
        got = train_instruct(gpu, ids, mask, steps=2, batch_size=4)
        train_instruct(gpu, ids, mask, steps=1, batch_size=4, pad_id=vocab.stoi["<pad>"], prompt_loss=True)
        greedy = respond(gpu, prompts, vocab, max_new_tokens=5)
        sampled = respond(gpu, prompts, vocab, max_new_tokens=5, temperature=1.0,
                          generator=torch.Generator().manual_seed(0))
    # the second call trained gpu one more step, so compare the responses of models trained alike
    assert got.loss == pytest.approx(want.loss, rel=1e-4)
    assert len(greedy) == len(want_greedy) and len(sampled) == len(want_sampled)


def test_responses_sampled_on_a_gpu_are_the_cpus(corpus):
    from lmbook.instruct import respond

    vocab, examples, _, _, make = _instruct_setup(corpus)
    prompts = [e.prompt for e in examples[:8]]
    cpu, gpu = _same_model(make)
    g = torch.Generator().manual_seed(0)
    want = [respond(cpu, prompts, vocab, max_new_tokens=6, temperature=1.0, generator=g) for _ in range(2)]
    want.append(respond(cpu, prompts, vocab, max_new_tokens=6))
    with PretendAccelerator():
        gpu.to(PRETEND)
        g = torch.Generator().manual_seed(0)
        got = [respond(gpu, prompts, vocab, max_new_tokens=6, temperature=1.0, generator=g) for _ in range(2)]
        got.append(respond(gpu, prompts, vocab, max_new_tokens=6))
    assert got == want


def test_the_instruction_tuned_gpt_moves_to_a_gpu_and_answers(corpus):
    from lmbook.instruct import instruction_tuned_gpt, respond

    run = instruction_tuned_gpt(corpus, 0, pretrain_steps=1, tune_steps=1, block_size=48)
    prompts = [["<continue>", "the", "<answer>"], ["<continue>", "a", "<answer>"]]
    want = respond(run.tuned, prompts, run.vocab, max_new_tokens=4, temperature=1.0,
                   generator=torch.Generator().manual_seed(0))
    with PretendAccelerator():
        tuned = run.tuned.to(PRETEND)
        got = respond(tuned, prompts, run.vocab, max_new_tokens=4, temperature=1.0,
                      generator=torch.Generator().manual_seed(0))
    assert got == want


def test_extending_the_vocabulary_keeps_a_model_on_its_gpu(corpus):
    from lmbook.instruct import extend_vocab

    with PretendAccelerator():
        for tie in (True, False):
            model = _tiny_gpt(len(corpus.vocab))
            model.config.tie_weights = tie
            if not tie:
                model.lm_head.weight = torch.nn.Parameter(model.wte.weight.detach().clone())
            extend_vocab(model.to(PRETEND), 3)
            assert all(side(p) == "gpu" for p in model.parameters())
            assert side(model(torch.tensor([[1, len(corpus.vocab) + 2]], device=PRETEND))) == "gpu"


def test_dpo_trains_and_measures_on_a_gpu(corpus):
    from lmbook.dpo import sequence_log_probs, train_dpo

    _, _, ids, mask, make = _instruct_setup(corpus)
    chosen, chosen_mask, rejected, rejected_mask = ids[:12], mask[:12], ids[12:24], mask[12:24]
    reference, policy = _same_model(make)
    want = train_dpo(copy.deepcopy(policy), reference, chosen, chosen_mask, rejected, rejected_mask, beta=0.5,
                     steps=2, batch_size=4, lr=1e-3)
    want_logp = sequence_log_probs(reference, ids, mask)
    with PretendAccelerator():
        reference.to(PRETEND)
        policy.to(PRETEND)
        got = train_dpo(policy, reference, chosen, chosen_mask, rejected, rejected_mask, beta=0.5, steps=2,
                        batch_size=4, lr=1e-3)
        with torch.no_grad():  # as the page measures: CPU ids and masks from encode(), models on the device
            log_ratio = sequence_log_probs(policy, ids, mask) - sequence_log_probs(reference, ids, mask)
            logp = sequence_log_probs(reference, ids.to(PRETEND), mask.to(PRETEND))
        assert side(log_ratio) == "gpu" and side(logp) == "gpu"
    assert got.loss == pytest.approx(want.loss, rel=1e-4) and _plain(got.accuracy)
    assert logp.cpu().tolist() == pytest.approx(want_logp.tolist(), rel=1e-5)


def test_induction_scores_run_on_a_gpu():
    from lmbook.induction import induction_score, loss_by_position, previous_token_score, repeated_sequences

    ids = repeated_sequences(3, 4, 10, seed=0)
    cpu, gpu = _same_model(lambda: _tiny_causal_lm(10, n_head=2, n_layer=2))
    logits, weights = cpu(ids[:, :-1], return_weights=True)
    want = [induction_score(w, ids[:, :-1]) for w in weights]
    with PretendAccelerator():
        gpu.to(PRETEND)
        x = ids.to(PRETEND)
        logits, weights = gpu(x[:, :-1], return_weights=True)
        got = [induction_score(w, x[:, :-1]) for w in weights]
        prev = [previous_token_score(w) for w in weights]
        loss = loss_by_position(logits, x)
        assert _on_gpu((got, prev, loss))
    for g, w in zip(got, want, strict=True):
        assert g.tolist() == pytest.approx(w.tolist())


def test_llama_trains_and_generates_on_a_gpu(corpus):
    from lmbook.causal_lm import train_lm
    from lmbook.gpt import KVCache, generate
    from lmbook.llama import Llama, LlamaConfig, cache_nbytes

    V = len(corpus.vocab)
    make = lambda: Llama(LlamaConfig(V, 12, n_layer=1, n_head=4, n_kv_head=2, d_model=16))  # noqa: E731
    cpu, gpu = _same_model(make)
    want = train_lm(cpu, corpus.train, steps=2, batch_size=4)
    prompt = corpus.train[:6].view(2, 3)
    want_ids = generate(cpu, prompt, 5, generator=torch.Generator().manual_seed(0))
    with PretendAccelerator():
        gpu.to(PRETEND)
        got = train_lm(gpu, corpus.train, steps=2, batch_size=4)
        ids = generate(gpu, prompt.to(PRETEND), 5, generator=torch.Generator().manual_seed(0))
        cache = KVCache()
        gpu(prompt.to(PRETEND), cache)
        assert side(ids) == "gpu" and cache_nbytes(cache) > 0
    assert got.loss == pytest.approx(want.loss, rel=1e-4) and ids.tolist() == want_ids.tolist()


def test_scaling_helpers_run_on_a_gpu(corpus):
    from lmbook.scaling import autocast, best_seconds, non_embedding_params, sdpa_backend

    with PretendAccelerator():
        model = _tiny_gpt(len(corpus.vocab)).to(PRETEND)
        x = corpus.train[:8].view(1, 8).to(PRETEND)
        assert non_embedding_params(model) > 0
        with autocast("cpu", None):
            assert side(model(x)) == "gpu"
        assert best_seconds(lambda: model(x), repeats=1, warmup=0) > 0
        assert isinstance(sdpa_backend("cpu"), str)


def test_random_seeds_make_the_cpus_batches_whatever_the_device(corpus):
    """The data order comes from a CPU generator, so a seeded run reads the same batches on every device."""
    from lmbook.causal_lm import random_blocks

    want = random_blocks(corpus.train, 3, 5, torch.Generator().manual_seed(1))
    with PretendAccelerator():
        got = random_blocks(corpus.train, 3, 5, torch.Generator().manual_seed(1))
    assert [t.tolist() for t in got] == [t.tolist() for t in want]


def test_the_appendixs_gpu_helpers_run_on_a_gpu(corpus):
    from lmbook.gpu_scale import fused_adamw, halve_on_oom, step_seconds, use_fused_attention
    from lmbook.scaling import measured_matmul_flops

    V = len(corpus.vocab)
    course, fused = _same_model(lambda: _tiny_gpt(V))
    x = corpus.train[:16].view(2, 8)
    want = course(x)
    with PretendAccelerator():
        model = use_fused_attention(fused).to(PRETEND)
        ids = x.to(PRETEND)
        got = model(ids)
        assert side(got) == "gpu"
        opt = fused_adamw(model.parameters(), PRETEND, lr=1e-3)

        def step():
            loss = F.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        assert step_seconds(step, 1, 1, PRETEND) > 0
        assert halve_on_oom(lambda b: model(ids[:b]).shape[0], 2) == (2, 2)
        assert measured_matmul_flops(n=16, device=PRETEND, repeats=1) > 0
    assert torch.allclose(got.detach().cpu(), want.detach(), atol=1e-5)
