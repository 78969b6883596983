import torch

from lmbook.corpus import load_corpus, make_windows
from lmbook.ffnn import FeedforwardLM
from lmbook.train import batches, evaluate, fit


def test_batches_cover_every_example_once():
    x = torch.arange(10)
    seen = torch.cat([b[0] for b in batches(x, batch_size=3, shuffle=True, generator=torch.Generator().manual_seed(0))])
    assert sorted(seen.tolist()) == list(range(10))


def test_fit_lowers_the_validation_loss_and_records_history():
    c = load_corpus(n_train=5000, n_val=1000, n_test=100)
    torch.manual_seed(0)
    model = FeedforwardLM(len(c.vocab), window=2, d_emb=8, d_hidden=16)
    val = make_windows(c.val, 2)
    before = evaluate(model, *val)
    h = fit(model, make_windows(c.train, 2), val, epochs=2, batch_size=128, progress=False)
    assert len(h.train) == len(h.val) == 2
    assert len(h.steps) == 2 * ((len(c.train) - 2 + 127) // 128)
    assert h.val[-1] < before, f"validation loss went from {before:.3f} to {h.val[-1]:.3f}"


def test_fit_is_deterministic_given_seeds():
    c = load_corpus(n_train=2000, n_val=500, n_test=100)
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        m = FeedforwardLM(len(c.vocab), window=2, d_emb=8, d_hidden=16)
        runs.append(fit(m, make_windows(c.train, 2), epochs=1, progress=False).steps)
    assert runs[0] == runs[1]


def test_fit_with_sgd_takes_the_plain_gradient_steps_of_a_loop_written_out():
    c = load_corpus(n_train=1000, n_val=100, n_test=100)
    train = make_windows(c.train, 2)
    torch.manual_seed(0)
    m = FeedforwardLM(len(c.vocab), window=2, d_emb=8, d_hidden=16)
    by_hand = FeedforwardLM(len(c.vocab), window=2, d_emb=8, d_hidden=16)
    by_hand.load_state_dict(m.state_dict())
    fit(m, train, epochs=1, batch_size=100, lr=0.5, seed=3, optimizer=torch.optim.SGD, progress=False)
    for x, y in batches(*train, batch_size=100, shuffle=True, generator=torch.Generator().manual_seed(3)):
        by_hand.zero_grad()
        torch.nn.functional.cross_entropy(by_hand(x), y).backward()
        with torch.no_grad():
            for p in by_hand.parameters():
                p -= 0.5 * p.grad  # θ <- θ - η g
    for (name, p), q in zip(m.named_parameters(), by_hand.parameters(), strict=True):
        torch.testing.assert_close(p, q, msg=f"{name} differs from plain SGD written out")
