"""lmbook.generate against generation that re-reads the whole prefix at every step (no carried state)."""

import pytest
import torch

from lmbook.decoding import greedy_decode
from lmbook.generate import generate
from lmbook.rnn import RNNLM

V = 11


@pytest.fixture(params=["rnn", "lstm", "gru"])
def model(request):
    torch.manual_seed(0)
    m = RNNLM(V, d_emb=6, hidden_size=9, cell=request.param).double()
    with torch.no_grad():  # sharper distributions than at initialisation, so greedy choices are clear
        m.out.weight.mul_(8)
    return m


def next_logits_from_scratch(model, prefix):
    """Logits for the next token, computed by running the model over the full prefix from a zero state."""
    logits, _ = model(torch.tensor([prefix]))
    return logits[0, -1]


def test_greedy_equals_greedy_decode_over_the_full_prefix(model):
    prompt = [3, 1, 4]
    ours = generate(model, prompt, 12, greedy=True).tolist()

    def step_fn(prefix):  # prefix[0] is greedy_decode's bos: here the prompt's last token
        return torch.log_softmax(next_logits_from_scratch(model, prompt[:-1] + prefix), dim=-1)

    assert ours == greedy_decode(step_fn, bos=prompt[-1], eos=-1, max_len=12)


def test_sampling_equals_sampling_over_the_full_prefix(model):
    prompt, k = [2, 7], 4
    ours = generate(model, prompt, 15, temperature=0.8, top_k=k, generator=torch.Generator().manual_seed(5))
    g = torch.Generator().manual_seed(5)
    seq = list(prompt)
    for _ in range(15):
        z = next_logits_from_scratch(model, seq).float() / 0.8
        kth = z.sort(descending=True).values[k - 1]
        z[z < kth] = float("-inf")  # top-k by hand
        seq.append(int(torch.multinomial(torch.softmax(z, -1), 1, generator=g)))
    assert ours.tolist() == seq[len(prompt):]


def test_top_k_1_and_tiny_temperature_are_greedy(model):
    greedy = generate(model, [5], 10, greedy=True)
    g = torch.Generator().manual_seed(0)
    assert torch.equal(generate(model, [5], 10, top_k=1, generator=g), greedy)
    assert torch.equal(generate(model, [5], 10, temperature=1e-4, generator=g), greedy)


def test_a_batch_of_prompts_continues_each_prompt_as_if_alone(model):
    prompts = torch.tensor([[1, 2, 3], [4, 4, 4], [0, 9, 10]])
    batch = generate(model, prompts, 8, greedy=True)
    assert batch.shape == (3, 8)
    for row, p in zip(batch, prompts, strict=True):
        assert torch.equal(row, generate(model, p, 8, greedy=True))


def test_sampled_tokens_stay_inside_the_nucleus(model):
    g = torch.Generator().manual_seed(1)
    prompt = [6]
    out = generate(model, prompt, 20, top_p=0.5, generator=g).tolist()
    seq = prompt
    for y in out:
        p = torch.softmax(next_logits_from_scratch(model, seq), -1)
        order = p.argsort(descending=True).tolist()
        mass_before = p[order[: order.index(y)]].sum()
        assert mass_before < 0.5, "a token outside the top-p nucleus was sampled"
        seq = seq + [y]


def test_edge_cases_and_mode_restored(model):
    model.train()
    assert generate(model, [1], 0).shape == (0,)
    assert generate(model, torch.tensor([[1], [2]]), 0).shape == (2, 0)
    assert model.training, "generate must restore the model's training mode"
    with pytest.raises(ValueError, match="prompt"):
        generate(model, [], 3)
    with pytest.raises(ValueError, match="n_tokens"):
        generate(model, [1], -1)
