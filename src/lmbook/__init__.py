"""lmbook: the shared code of the course, one small module per idea.

- ``lmbook.device``: device choice (cuda, mps, cpu; ``LMBOOK_DEVICE``) and seeding
- ``lmbook.corpus``: the toy-English corpus with a known best perplexity
- ``lmbook.functional``: log-softmax, cross-entropy, perplexity
- ``lmbook.ffnn``: the feedforward (Bengio) language model
- ``lmbook.word2vec``: skip-gram with negative sampling
- ``lmbook.train``: the training loop and its loss history
- ``lmbook.plot``: figures, and interactive figures that work without a kernel
- ``lmbook.rnn``: RNN, LSTM and GRU cells from their equations, unrolling, pooling, clipping
- ``lmbook.decoding``: temperature, top-k and top-p sampling; greedy decoding and beam search
- ``lmbook.metrics``: corpus BLEU (agrees with sacrebleu)
- ``lmbook.translation``: the English → Tarn (SOV) translation task, generated offline
- ``lmbook.attention``: dot, scaled, multiplicative and additive attention over a padded batch
- ``lmbook.grading``: declarative checks used by the exercises and the autograder
"""

from .device import default_seed, get_device, seed_everything

__all__ = ["default_seed", "get_device", "seed_everything"]
__version__ = "0.1.0"
