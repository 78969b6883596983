"""lmbook.decoding against independent oracles: hand-computed supports, exact
distributions, brute-force search; plus known-wrong variants the tests must catch."""

import itertools
import math

import pytest
import torch

from lmbook.decoding import beam_search, filter_logits, greedy_decode, sample_next

PROBS = [0.5, 0.3, 0.15, 0.05]


def logits_of(probs):
    return torch.tensor(probs, dtype=torch.float64).log()


def support(logits):
    return set(torch.isfinite(logits).nonzero().flatten().tolist())


def nucleus_oracle(probs, p):
    """Plain-Python top-p: most likely first, stop once the kept mass reaches p."""
    kept, mass = set(), 0.0
    for i in sorted(range(len(probs)), key=lambda i: -probs[i]):
        kept.add(i)
        mass += probs[i]
        if mass >= p - 1e-9:
            return kept
    return kept


def nucleus_excluding_crossing(probs, p):
    """WRONG top-p: drops the token whose probability crosses the threshold."""
    kept, mass = set(), 0.0
    for i in sorted(range(len(probs)), key=lambda i: -probs[i]):
        mass += probs[i]
        if mass > p + 1e-9:
            break
        kept.add(i)
    return kept or {max(range(len(probs)), key=lambda i: probs[i])}


# (top_p, expected support of PROBS), computed by hand
TOP_P_CASES = [(0.3, {0}), (0.5, {0}), (0.8, {0, 1}), (0.81, {0, 1, 2}), (0.95, {0, 1, 2}), (0.96, {0, 1, 2, 3}),
               (1.0, {0, 1, 2, 3})]


# ---------------------------------------------------------------- filtering


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("top_p, expected", TOP_P_CASES)
def test_top_p_support_by_hand(top_p, expected, dtype):
    assert support(filter_logits(logits_of(PROBS).to(dtype), top_p=top_p)) == expected
    assert nucleus_oracle(PROBS, top_p) == expected  # the oracle agrees with the hand computation


def test_wrong_top_p_is_caught():
    wrong = [p for p, expected in TOP_P_CASES if nucleus_excluding_crossing(PROBS, p) != expected]
    assert wrong == [0.81, 0.96]  # keeps {0, 1} and {0, 1, 2}: the crossing token is lost


@pytest.mark.parametrize("top_k, expected", [(1, {0}), (2, {0, 1}), (3, {0, 1, 2}), (4, {0, 1, 2, 3}),
                                             (99, {0, 1, 2, 3})])
def test_top_k_support_by_hand(top_k, expected):
    assert support(filter_logits(logits_of(PROBS), top_k=top_k)) == expected


def test_top_k_keeps_ties_with_the_kth_logit():
    z = torch.tensor([1.0, 2.0, 2.0, 0.0])
    assert support(filter_logits(z, top_k=1)) == {1, 2}
    assert support(filter_logits(z, top_k=2)) == {1, 2}
    assert support(filter_logits(z, top_k=3)) == {0, 1, 2}


def test_surviving_logits_are_unchanged_and_batch_rows_are_independent():
    z = torch.stack([logits_of(PROBS), logits_of(PROBS[::-1])])
    out = filter_logits(z, top_p=0.81)
    assert support(out[0]) == {0, 1, 2} and support(out[1]) == {1, 2, 3}
    keep = torch.isfinite(out)
    assert torch.equal(out[keep], z[keep])


def test_order_is_temperature_then_top_k_then_top_p():
    z = logits_of(PROBS)
    # top-p sees the distribution renormalised over the top-k survivors: 0.5 / 0.8 = 0.625 >= 0.6
    assert support(filter_logits(z, top_k=2, top_p=0.6)) == {0}
    assert support(filter_logits(z, top_p=0.6)) == {0, 1}  # without top-k, 0.5 < 0.6
    # top-p sees the tempered distribution: at T = 0.5, p ~ p^2 and p_0 = 0.25 / 0.365 = 0.68 >= 0.6
    assert support(filter_logits(z, temperature=0.5, top_p=0.6)) == {0}


def test_temperature_is_softmax_of_logits_over_t():
    z = torch.randn(10, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for T in [0.3, 1.0, 2.5]:
        p = torch.softmax(filter_logits(z, temperature=T), -1)
        assert torch.equal(p, torch.softmax(z / T, -1))
        w = [math.exp(v / T) for v in z.tolist()]
        torch.testing.assert_close(p, torch.tensor([x / sum(w) for x in w], dtype=torch.float64))


def test_small_temperature_approaches_argmax():
    z = torch.tensor([0.1, 1.3, 1.2, -2.0])
    p = torch.softmax(filter_logits(z, temperature=1e-3), -1)
    torch.testing.assert_close(p, torch.tensor([0.0, 1.0, 0.0, 0.0]))


@pytest.mark.parametrize("kwargs", [{"temperature": 0.0}, {"temperature": -1.0}, {"top_k": 0}, {"top_p": 0.0},
                                    {"top_p": 1.5}])
def test_bad_arguments_raise(kwargs):
    with pytest.raises(ValueError):
        filter_logits(logits_of(PROBS), **kwargs)


# ---------------------------------------------------------------- sampling


def test_sample_next_matches_the_filtered_distribution():
    V, N, T, k, p = 12, 20_000, 0.8, 8, 0.9
    z = torch.randn(V, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    # oracle: temperature, then the k largest, renormalise, then the nucleus, renormalise (plain Python)
    top = sorted(range(V), key=lambda i: -z[i].item())[:k]
    w = {i: math.exp(z[i].item() / T) for i in top}
    probs = [w.get(i, 0.0) / sum(w.values()) for i in range(V)]
    keep = nucleus_oracle(probs, p)
    q = torch.tensor([probs[i] / sum(probs[j] for j in keep) if i in keep else 0.0 for i in range(V)])
    assert 1 < len(keep) < k  # both filters bite

    ids = sample_next(z.expand(N, V), torch.Generator().manual_seed(0), temperature=T, top_k=k, top_p=p)
    assert ids.shape == (N,)
    freq = torch.bincount(ids, minlength=V).double() / N
    assert set(ids.unique().tolist()) <= keep  # nothing outside the support, ever
    # each frequency is binomial with standard error sqrt(q(1-q)/N) <= 0.0036; a correct sampler strays
    # beyond 4 SE with probability 6e-5 per token, while e.g. the unfiltered distribution is off by > 0.05
    se = (q * (1 - q) / N).sqrt()
    assert ((freq - q).abs() <= 4 * se + 1e-12).all(), (freq, q)
    unfiltered = torch.softmax(z / T, -1)
    assert ((unfiltered - q).abs() > 4 * se).any()


def test_sample_next_shapes_and_reproducibility():
    z = torch.randn(3, 7, generator=torch.Generator().manual_seed(1))
    a = sample_next(z, torch.Generator().manual_seed(5), top_k=3)
    b = sample_next(z, torch.Generator().manual_seed(5), top_k=3)
    assert a.shape == (3,) and torch.equal(a, b)
    assert sample_next(z[0], torch.Generator().manual_seed(5)).shape == ()
    assert sample_next(z[0], top_k=1).item() == z[0].argmax().item()


# ---------------------------------------------------------------- search

V, EOS, BOS, MAX_LEN = 4, 3, 4, 4  # tokens 0..3 with eos = 3; bos = 4 only ever appears as a prefix


def toy_model(seed):
    """step_fn of a bigram model: a fixed random table of log p(next | last token)."""
    g = torch.Generator().manual_seed(seed)
    table = torch.log_softmax(2 * torch.randn(V + 1, V, generator=g, dtype=torch.float64), -1)
    return lambda prefix: table[prefix[-1]]


def log_prob(step_fn, y):
    return sum(step_fn([BOS, *y[:t]])[y[t]].item() for t in range(len(y)))


def all_hypotheses():
    """Every y with eos only at the end, ending in eos or of length MAX_LEN."""
    for n in range(1, MAX_LEN + 1):
        for y in itertools.product(range(V), repeat=n):
            if EOS not in y[:-1] and (y[-1] == EOS or n == MAX_LEN):
                yield list(y)


def brute_force(step_fn, length_penalty):
    scored = [(y, log_prob(step_fn, y) / len(y) ** length_penalty) for y in all_hypotheses()]
    return sorted(scored, key=lambda h: h[1], reverse=True)


def test_greedy_decode_stops_at_eos_or_max_len():
    table = torch.tensor([[-1.0, -0.1, -3.0], [-0.1, -2.0, -3.0], [-2.0, -3.0, -0.1]])  # V = 3, eos = 2

    def step(prefix):
        return table[prefix[-1]] if len(prefix) < 4 else table[2]  # after 3 tokens, row 2 favours eos

    assert greedy_decode(step, bos=0, eos=2, max_len=10) == [1, 0, 1, 2]
    assert greedy_decode(step, bos=0, eos=2, max_len=2) == [1, 0]


@pytest.mark.parametrize("length_penalty", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("seed", range(8))
def test_exhaustive_beam_search_is_brute_force(seed, length_penalty):
    step = toy_model(seed)
    beam = beam_search(step, BOS, EOS, beam_size=V**MAX_LEN, max_len=MAX_LEN, length_penalty=length_penalty)
    truth = brute_force(step, length_penalty)
    assert beam[0][0] == truth[0][0]
    assert beam[0][1] == pytest.approx(truth[0][1], abs=1e-12)
    # beyond the optimum: every hypothesis is there, with the right score, best first
    assert sorted(map(tuple, (y for y, _ in beam))) == sorted(map(tuple, (y for y, _ in truth)))
    assert [s for _, s in beam] == pytest.approx([s for _, s in truth], abs=1e-12)


@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
@pytest.mark.parametrize("seed", range(20))
def test_beam_size_one_is_greedy(seed, length_penalty):
    step = toy_model(seed)
    [(y, score)] = beam_search(step, BOS, EOS, beam_size=1, max_len=MAX_LEN, length_penalty=length_penalty)
    g = greedy_decode(step, BOS, EOS, MAX_LEN)
    assert y == g
    assert score == pytest.approx(log_prob(step, g) / len(g) ** length_penalty)


def test_beam_of_two_beats_greedy_on_seed_0():
    step = toy_model(0)
    greedy = greedy_decode(step, BOS, EOS, MAX_LEN)
    assert greedy == [1, 1, 1, 1]  # never emits eos; each step's best token leads to a poor continuation
    for length_penalty, optimum_found in [(0.0, True), (1.0, False)]:
        (y, score), *_ = beam_search(step, BOS, EOS, beam_size=2, max_len=MAX_LEN, length_penalty=length_penalty)
        assert y == [0, 3]
        assert score > log_prob(step, greedy) / len(greedy) ** length_penalty + 0.1
        # with length normalisation, beam 2 is better than greedy but still not optimal ([1, 2, 3])
        assert (y == brute_force(step, length_penalty)[0][0]) == optimum_found


def test_missing_length_normalisation_is_caught():
    """Ranking by raw sum log p (the bug) instead of the mean gives the wrong answer for length_penalty=1."""
    step = toy_model(0)
    truth = brute_force(step, 1.0)[0][0]
    unnormalised = beam_search(step, BOS, EOS, beam_size=V**MAX_LEN, max_len=MAX_LEN, length_penalty=0.0)[0][0]
    normalised = beam_search(step, BOS, EOS, beam_size=V**MAX_LEN, max_len=MAX_LEN, length_penalty=1.0)[0][0]
    assert normalised == truth == [1, 2, 3]
    assert unnormalised == [0, 3] != truth  # the raw sum prefers the shorter output


def test_beam_search_returns_at_most_beam_size_sorted():
    step = toy_model(2)
    out = beam_search(step, BOS, EOS, beam_size=3, max_len=MAX_LEN)
    assert len(out) == 3
    assert [s for _, s in out] == sorted((s for _, s in out), reverse=True)
    for y, s in out:
        assert s == pytest.approx(log_prob(step, y) / len(y))
