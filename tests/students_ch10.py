"""Exercise 10 (BERT) as students write it: wrong answers with the mistake they have, and right ones written
differently from the reference (see test_students.py)."""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from check_contract import Student
from torch import nn

from lmbook.tasks.ch10 import BERT_EMBEDDINGS, BEST_SPAN, BUILD_INPUTS, COUNT_PARAMETERS, MASK_TOKENS, SPAN_LOSS


def _has(check, start: str) -> str:
    """The misconception of ``check``'s Mutant that begins with ``start`` (word for word)."""
    (text,) = {m.misconception for m in check.mutants if m.misconception.startswith(start)}
    return text


# ----------------------------------------------------------------------------- mask_tokens


def _specials(ids, special_ids, mask_id, pad_id):
    return torch.tensor(list(special_ids) + [mask_id, pad_id], device=ids.device)


def _non_special(vocab_size, specials):
    vocab = torch.arange(vocab_size, device=specials.device)
    return vocab[~torch.isin(vocab, specials)]


def _corrupt(ids, chosen, mask_id, pool, fates=(0.8, 0.1)):
    """The right 80/10/10 on ``chosen``, on a copy."""
    u = torch.rand(ids.shape, device=ids.device)
    inputs = ids.clone()
    inputs[chosen & (u < fates[0])] = mask_id
    rnd = chosen & (u >= fates[0]) & (u < fates[0] + fates[1])
    inputs[rnd] = pool[torch.randint(len(pool), (int(rnd.sum()),), device=ids.device)]
    return inputs


def mt_all_positions(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15, generator=None):
    chosen = torch.rand(ids.shape, device=ids.device) < p  # every position, [CLS] and padding too
    pool = _non_special(vocab_size, _specials(ids, special_ids, mask_id, pad_id))
    labels = ids.clone()
    labels[~chosen] = -100
    return _corrupt(ids, chosen, mask_id, pool), labels


def mt_padding_only(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15, generator=None):
    chosen = (ids != pad_id) & (torch.rand(ids.shape, device=ids.device) < p)  # the attention mask, no specials
    pool = _non_special(vocab_size, _specials(ids, special_ids, mask_id, pad_id))
    return _corrupt(ids, chosen, mask_id, pool), torch.where(chosen, ids, -100)


def mt_collator_without_and(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15, generator=None):
    specials = _specials(ids, special_ids, mask_id, pad_id)
    prob = torch.full(ids.shape, p, device=ids.device)
    prob[torch.isin(ids, specials)] = 0.0
    chosen = torch.bernoulli(prob).bool()
    labels = ids.clone()
    labels[~chosen] = -100
    inputs = ids.clone()
    replaced = torch.bernoulli(torch.full(ids.shape, 0.8, device=ids.device)).bool()  # no `& chosen`
    inputs[replaced] = mask_id
    rnd = torch.bernoulli(torch.full(ids.shape, 0.5, device=ids.device)).bool() & ~replaced
    pool = _non_special(vocab_size, specials)
    inputs[rnd] = pool[torch.randint(len(pool), ids.shape, device=ids.device)][rnd]
    return inputs, labels


def mt_labels_everywhere(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15, generator=None):
    specials = _specials(ids, special_ids, mask_id, pad_id)
    chosen = ~torch.isin(ids, specials) & (torch.rand(ids.shape, device=ids.device) < p)
    return _corrupt(ids, chosen, mask_id, _non_special(vocab_size, specials)), ids.clone()


def mt_always_mask(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15, generator=None):
    specials = _specials(ids, special_ids, mask_id, pad_id)
    chosen = ~torch.isin(ids, specials) & (torch.rand(ids.shape, device=ids.device) < p)
    inputs = ids.masked_fill(chosen, mask_id)
    return inputs, torch.where(chosen, ids, torch.full_like(ids, -100))


def mt_fresh_random(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15, generator=None):
    specials = _specials(ids, special_ids, mask_id, pad_id)
    chosen = ~torch.isin(ids, specials) & (torch.rand(ids.shape, device=ids.device) < p)
    masked = chosen & (torch.rand(ids.shape, device=ids.device) < 0.8)
    randomised = chosen & ~masked & (torch.rand(ids.shape, device=ids.device) < 0.1)  # 10% of the 20% left
    pool = _non_special(vocab_size, specials)
    inputs = torch.where(masked, mask_id, ids)
    inputs = torch.where(randomised, pool[torch.randint(len(pool), ids.shape, device=ids.device)], inputs)
    return inputs, torch.where(chosen, ids, -100)


def mt_whole_vocabulary(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15, generator=None):
    specials = _specials(ids, special_ids, mask_id, pad_id)
    chosen = ~torch.isin(ids, specials) & (torch.rand(ids.shape, device=ids.device) < p)
    u = torch.rand(ids.shape, device=ids.device)
    inputs = ids.clone()
    inputs[chosen & (u < 0.8)] = mask_id
    rnd = chosen & (u >= 0.8) & (u < 0.9)
    inputs[rnd] = torch.randint(vocab_size, ids.shape, device=ids.device)[rnd]
    return inputs, torch.where(chosen, ids, -100)


def mt_in_place(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15, generator=None):
    specials = _specials(ids, special_ids, mask_id, pad_id)
    chosen = ~torch.isin(ids, specials) & (torch.rand(ids.shape, device=ids.device) < p)
    u = torch.rand(ids.shape, device=ids.device)
    pool = _non_special(vocab_size, specials)
    ids[chosen & (u < 0.8)] = mask_id  # into the caller's tensor
    rnd = chosen & (u >= 0.8) & (u < 0.9)
    ids[rnd] = pool[torch.randint(len(pool), ids.shape, device=ids.device)][rnd]
    labels = ids.clone()
    labels[~chosen] = -100
    return ids, labels


def mt_labels_from_inputs(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15, generator=None):
    specials = _specials(ids, special_ids, mask_id, pad_id)
    chosen = ~torch.isin(ids, specials) & (torch.rand(ids.shape, device=ids.device) < p)
    inputs = _corrupt(ids, chosen, mask_id, _non_special(vocab_size, specials))
    return inputs, torch.where(chosen, inputs, -100)  # the corrupted token, not the original


def mt_one_coin_per_sequence(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15, generator=None):
    specials = _specials(ids, special_ids, mask_id, pad_id)
    chosen = ~torch.isin(ids, specials) & (torch.rand(ids.shape[0], 1, device=ids.device) < p)
    return _corrupt(ids, chosen, mask_id, _non_special(vocab_size, specials)), torch.where(chosen, ids, -100)


def mt_inverted_labels(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15, generator=None):
    specials = _specials(ids, special_ids, mask_id, pad_id)
    chosen = ~torch.isin(ids, specials) & (torch.rand(ids.shape, device=ids.device) < p)
    labels = ids.clone()
    labels[chosen] = -100
    return _corrupt(ids, chosen, mask_id, _non_special(vocab_size, specials)), labels


def mt_zero_labels(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15, generator=None):
    specials = _specials(ids, special_ids, mask_id, pad_id)
    chosen = ~torch.isin(ids, specials) & (torch.rand(ids.shape, device=ids.device) < p)
    return _corrupt(ids, chosen, mask_id, _non_special(vocab_size, specials)), ids * chosen


def mt_one_coin_per_batch(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15, generator=None):
    specials = _specials(ids, special_ids, mask_id, pad_id)
    chosen = ~torch.isin(ids, specials) & bool(torch.rand(()) < p)  # the whole batch or nothing
    return _corrupt(ids, chosen, mask_id, _non_special(vocab_size, specials)), torch.where(chosen, ids, -100)


def mt_swapped_fates(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15, generator=None):
    specials = _specials(ids, special_ids, mask_id, pad_id)
    chosen = ~torch.isin(ids, specials) & (torch.rand(ids.shape, device=ids.device) < p)
    # 10% [MASK], 80% random, 10% unchanged: the two probabilities swapped
    pool = _non_special(vocab_size, specials)
    return _corrupt(ids, chosen, mask_id, pool, fates=(0.1, 0.8)), torch.where(chosen, ids, -100)


def mt_right_collator(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15, generator=None):
    """Hugging Face's collator, written out: Bernoulli(p), then Bernoulli(0.8), then Bernoulli(0.5) of the rest."""
    specials = _specials(ids, special_ids, mask_id, pad_id)
    prob = torch.full(ids.shape, p, device=ids.device)
    prob.masked_fill_(torch.isin(ids, specials), 0.0)
    chosen = torch.bernoulli(prob, generator=generator).bool()
    labels = ids.clone()
    labels[~chosen] = -100
    inputs = ids.clone()
    replaced = torch.bernoulli(torch.full(ids.shape, 0.8, device=ids.device), generator=generator).bool() & chosen
    inputs[replaced] = mask_id
    rnd = torch.bernoulli(torch.full(ids.shape, 0.5, device=ids.device), generator=generator).bool() & chosen
    rnd &= ~replaced
    pool = _non_special(vocab_size, specials)
    inputs[rnd] = pool[torch.randint(len(pool), ids.shape, generator=generator, device=ids.device)][rnd]
    return inputs, labels


def mt_right_exact_count(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15, generator=None):
    """The original BERT script: exactly round(p · eligible) positions per sequence."""
    specials = set(special_ids) | {mask_id, pad_id}
    pool = [t for t in range(vocab_size) if t not in specials]
    rows = ids.tolist()
    inputs, labels = [list(r) for r in rows], [[-100] * len(r) for r in rows]
    for b, row in enumerate(rows):
        eligible = [i for i, t in enumerate(row) if t not in specials]
        k = round(p * len(eligible))
        for j in torch.randperm(len(eligible), generator=generator)[:k].tolist():
            i = eligible[j]
            labels[b][i] = row[i]
            u = float(torch.rand((), generator=generator))
            if u < 0.8:
                inputs[b][i] = mask_id
            elif u < 0.9:
                inputs[b][i] = pool[int(torch.randint(len(pool), (), generator=generator))]
    return torch.tensor(inputs, device=ids.device), torch.tensor(labels, device=ids.device)


def mt_right_multinomial(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15, generator=None):
    """The fate of every position drawn at once: 0 = [MASK], 1 = random, 2 = unchanged."""
    specials = torch.tensor(sorted(set(special_ids) | {mask_id, pad_id}), device=ids.device)
    chosen = (torch.rand(ids.shape, generator=generator, device=ids.device) < p) & ~torch.isin(ids, specials)
    fate = torch.multinomial(torch.tensor([0.8, 0.1, 0.1], device=ids.device), ids.numel(), replacement=True,
                             generator=generator).view(ids.shape)
    keep = torch.ones(vocab_size, device=ids.device)
    keep[specials] = 0.0
    random_tokens = torch.multinomial(keep, ids.numel(), replacement=True, generator=generator).view(ids.shape)
    inputs = torch.where(chosen & (fate == 0), torch.full_like(ids, mask_id), ids)
    inputs = torch.where(chosen & (fate == 1), random_tokens, inputs)
    return inputs, torch.where(chosen, ids, torch.full_like(ids, -100))


# ----------------------------------------------------------------------------- build_inputs


def bi_last_sep_zero(a, b, cls, sep):
    ids = [cls] + a + [sep]
    if b is None:
        return ids, [0] * len(ids)
    return ids + b + [sep], [0] * len(ids) + [1] * len(b) + [0]


def bi_first_sep_one(a, b, cls, sep):
    if b is None:
        return [cls, *a, sep], [0] * (len(a) + 2)
    return [cls, *a, sep, *b, sep], [0] * (len(a) + 1) + [1] * (len(b) + 2)


def bi_no_last_sep(a, b, cls, sep):
    ids, segs = [cls, *a, sep], [0] * (len(a) + 2)
    if b is not None:
        ids, segs = ids + list(b), segs + [1] * len(b)
    return ids, segs


def bi_no_middle_sep(a, b, cls, sep):
    if b is None:
        return [cls, *a, sep], [0] * (len(a) + 2)
    return [cls, *a, *b, sep], [0] * (len(a) + 1) + [1] * (len(b) + 1)


def bi_no_cls(a, b, cls, sep):
    ids = a + [sep] + (b + [sep] if b is not None else [])
    return ids, [0] * (len(a) + 1) + ([1] * (len(b) + 1) if b is not None else [])


def bi_all_zero(a, b, cls, sep):
    ids = [cls, *a, sep] + ([*b, sep] if b else [])
    return ids, [0 for _ in ids]


def bi_segments_one_two(a, b, cls, sep):
    ids, segs = [cls, *a, sep], [1] * (len(a) + 2)
    if b is not None:
        ids += [*b, sep]
        segs += [2] * (len(b) + 1)
    return ids, segs


def bi_none_as_empty(a, b, cls, sep):
    b = b or []
    return [cls, *a, sep, *b, sep], [0] * (len(a) + 2) + [1] * (len(b) + 1)


def bi_swapped(a, b, cls, sep):
    if b is None:
        return [cls, *a, sep], [0] * (len(a) + 2)
    return [cls, *b, sep, *a, sep], [0] * (len(b) + 2) + [1] * (len(a) + 1)


def bi_segments_from_the_first_sep(a, b, cls, sep):
    ids = [cls, *a, sep] + ([*b, sep] if b is not None else [])
    end_a = ids.index(sep)  # segment A ends at its [SEP]
    return ids, [0 if i <= end_a else 1 for i in range(len(ids))]


def bi_right_append(a, b, cls, sep):
    ids, segs = [cls], [0]
    for part, seg in ((a, 0), (b, 1)):
        if part is None:
            continue
        for t in part:
            ids.append(t)
            segs.append(seg)
        ids.append(sep)
        segs.append(seg)
    return ids, segs


def bi_right_tensors(a, b, cls, sep):  # built with tensors, returned as lists
    first = torch.tensor([cls, *a, sep])
    if b is None:
        return first.tolist(), torch.zeros_like(first).tolist()
    second = torch.tensor([*b, sep])
    return (torch.cat([first, second]).tolist(),
            torch.cat([torch.zeros_like(first), torch.ones_like(second)]).tolist())


def bi_right_chain(a, b, cls, sep):
    pieces = [[cls], a, [sep]] + ([b, [sep]] if b is not None else [])
    ids = list(itertools.chain.from_iterable(pieces))
    n_a = len(a) + 2
    return ids, [int(i >= n_a) for i in range(len(ids))]


# ----------------------------------------------------------------------------- bert_embeddings


def _sum3(ids, segments, params, pos=None):
    n = ids.shape[1]
    pos = torch.arange(n, device=ids.device) if pos is None else pos
    return (params["word_embeddings.weight"][ids] + params["position_embeddings.weight"][pos]
            + params["token_type_embeddings.weight"][segments])


def _ln(x, params, eps=1e-12):
    return F.layer_norm(x, (x.shape[-1],), params["LayerNorm.weight"], params["LayerNorm.bias"], eps)


def be_rows_through_data(ids, segments, params):  # .data "to read the tables without autograd's overhead"
    n = ids.shape[1]
    x = (params["word_embeddings.weight"].data[ids] + params["position_embeddings.weight"].data[:n]
         + params["token_type_embeddings.weight"].data[segments])
    return _ln(x, params)


def be_no_segments(ids, segments, params):
    x = params["word_embeddings.weight"][ids] + params["position_embeddings.weight"][:ids.shape[1]]
    return _ln(x, params)


def be_positions_from_one(ids, segments, params):
    return _ln(_sum3(ids, segments, params, torch.arange(1, ids.shape[1] + 1, device=ids.device)), params)


def be_positions_per_segment(ids, segments, params):
    # positions counted within each segment: 0, 1, ... for A, again 0, 1, ... from the start of B
    start_b = torch.where(segments.any(1), (segments != 0).int().argmax(1), torch.zeros_like(segments[:, 0]))
    pos = torch.arange(ids.shape[1], device=ids.device)[None] - start_b[:, None] * (segments != 0)
    return _ln(_sum3(ids, segments, params, pos), params)


def be_default_eps(ids, segments, params):
    x = _sum3(ids, segments, params)
    return F.layer_norm(x, (x.shape[-1],), params["LayerNorm.weight"], params["LayerNorm.bias"])


def be_no_layer_norm(ids, segments, params):
    return _sum3(ids, segments, params)


def be_no_gain_bias(ids, segments, params):
    x = _sum3(ids, segments, params)
    return F.layer_norm(x, (x.shape[-1],), eps=1e-12)


def be_unbiased_variance(ids, segments, params):
    x = _sum3(ids, segments, params)
    mu, var = x.mean(-1, keepdim=True), x.var(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + 1e-12) * params["LayerNorm.weight"] + params["LayerNorm.bias"]


def be_norm_tokens_only(ids, segments, params):
    tok = _ln(params["word_embeddings.weight"][ids], params)
    return tok + params["position_embeddings.weight"][:ids.shape[1]] + params["token_type_embeddings.weight"][segments]


def be_normalised_over_positions(ids, segments, params):
    x = _sum3(ids, segments, params)
    mu, var = x.mean(1, keepdim=True), x.var(1, keepdim=True, unbiased=False)  # over the sequence
    return (x - mu) / torch.sqrt(var + 1e-12) * params["LayerNorm.weight"] + params["LayerNorm.bias"]


def be_roberta_positions(ids, segments, params):
    pos = torch.cumsum((ids != 0).long(), dim=1) - 1  # counted over the real tokens only (0 is padding here)
    return _ln(_sum3(ids, segments, params, pos.clamp(min=0)), params)


def be_right_functional(ids, segments, params):
    pos = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)
    x = (F.embedding(ids, params["word_embeddings.weight"]) + F.embedding(pos, params["position_embeddings.weight"])
         + F.embedding(segments, params["token_type_embeddings.weight"]))
    return _ln(x, params)


def be_right_one_hot(ids, segments, params):
    E_tok, E_pos = params["word_embeddings.weight"], params["position_embeddings.weight"]
    E_seg = params["token_type_embeddings.weight"]
    x = (F.one_hot(ids, E_tok.shape[0]).to(E_tok.dtype) @ E_tok + E_pos[:ids.shape[1]]
         + F.one_hot(segments, E_seg.shape[0]).to(E_seg.dtype) @ E_seg)
    return _ln(x, params)


def be_right_by_hand(ids, segments, params):
    x = _sum3(ids, segments, params)
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) * torch.rsqrt(var + 1e-12) * params["LayerNorm.weight"] + params["LayerNorm.bias"]


# ----------------------------------------------------------------------------- span_loss


def sl_sum_of_two(start_logits, end_logits, start, end):
    return F.cross_entropy(start_logits, start) + F.cross_entropy(end_logits, end)


def sl_sum_over_batch(start_logits, end_logits, start, end):
    return (F.cross_entropy(start_logits, start, reduction="sum") + F.cross_entropy(end_logits, end,
                                                                                    reduction="sum")) / 2


def sl_start_only(start_logits, end_logits, start, end):
    return F.cross_entropy(start_logits, start)


def sl_swapped_targets(start_logits, end_logits, start, end):
    return (F.cross_entropy(start_logits, end) + F.cross_entropy(end_logits, start)) / 2


def sl_raw_logits(start_logits, end_logits, start, end):
    rows = torch.arange(len(start), device=start.device)
    return -(start_logits[rows, start] + end_logits[rows, end]).mean() / 2


def sl_exp_by_hand(start_logits, end_logits, start, end):
    def ce(z, t):
        p = torch.exp(z) / torch.exp(z).sum(-1, keepdim=True)
        return -torch.log(p[torch.arange(len(t)), t]).mean()
    return (ce(start_logits, start) + ce(end_logits, end)) / 2


def sl_log_sum_exp_by_hand(start_logits, end_logits, start, end):
    def ce(z, t):
        return (torch.log(torch.exp(z).sum(-1)) - z.gather(1, t[:, None]).squeeze(1)).mean()
    return (ce(start_logits, start) + ce(end_logits, end)) / 2


def sl_mean_over_positions(start_logits, end_logits, start, end):
    def ce(z, t):
        return -(torch.log_softmax(z, -1) * F.one_hot(t, z.shape[-1])).mean()  # divides by B · n
    return (ce(start_logits, start) + ce(end_logits, end)) / 2


def sl_probabilities(start_logits, end_logits, start, end):
    return (F.nll_loss(torch.softmax(start_logits, -1), start) + F.nll_loss(torch.softmax(end_logits, -1), end)) / 2


def sl_right_concatenated(start_logits, end_logits, start, end):
    return F.cross_entropy(torch.cat([start_logits, end_logits]), torch.cat([start, end]))


def sl_right_logsumexp(start_logits, end_logits, start, end):
    def ce(z, t):
        return (torch.logsumexp(z, -1) - z.gather(1, t[:, None])[:, 0]).mean()
    return 0.5 * ce(start_logits, start) + 0.5 * ce(end_logits, end)


def sl_right_nll(start_logits, end_logits, start, end):
    logp = torch.log_softmax(torch.stack([start_logits, end_logits]), dim=-1)  # (2, B, n)
    return F.nll_loss(logp.flatten(0, 1), torch.stack([start, end]).flatten())


# ----------------------------------------------------------------------------- best_span


def _pair_scores(start_logits, end_logits):
    return start_logits[:, :, None] + end_logits[:, None, :]


def _decode(scores, allowed):
    n = scores.shape[-1]
    best = scores.masked_fill(~allowed, float("-inf")).flatten(1).argmax(1)
    return best // n, best % n


def _window(n, max_len, device, lo=0, le=False):
    off = torch.arange(n, device=device)[None, :] - torch.arange(n, device=device)[:, None]
    ok = off >= lo
    if max_len is not None:
        ok = ok & ((off <= max_len) if le else (off < max_len))
    return ok


def bs_end_before_start(start_logits, end_logits, passage_mask, max_len=None):
    n = start_logits.shape[1]
    off = torch.arange(n)[None, :] - torch.arange(n)[:, None]
    ok = torch.ones(n, n, dtype=torch.bool) if max_len is None else off.abs() < max_len
    m = passage_mask
    return _decode(_pair_scores(start_logits, end_logits), ok[None] & m[:, :, None] & m[:, None, :])


def bs_no_passage_mask(start_logits, end_logits, passage_mask, max_len=None):
    return _decode(_pair_scores(start_logits, end_logits), _window(start_logits.shape[1], max_len, "cpu")[None])


def bs_start_in_passage(start_logits, end_logits, passage_mask, max_len=None):
    ok = _window(start_logits.shape[1], max_len, "cpu")[None] & passage_mask[:, :, None]
    return _decode(_pair_scores(start_logits, end_logits), ok)


def bs_two_argmaxes(start_logits, end_logits, passage_mask, max_len=None):
    s = start_logits.masked_fill(~passage_mask, float("-inf")).argmax(-1)
    e = end_logits.masked_fill(~passage_mask, float("-inf")).argmax(-1)
    return s, e


def bs_greedy(start_logits, end_logits, passage_mask, max_len=None):
    s = start_logits.masked_fill(~passage_mask, float("-inf")).argmax(-1)
    ends = []
    for b in range(len(s)):
        stop = len(passage_mask[b]) if max_len is None else min(len(passage_mask[b]), int(s[b]) + max_len)
        cands = [j for j in range(int(s[b]), stop) if passage_mask[b, j]]
        ends.append(max(cands, key=lambda j: float(end_logits[b, j])))
    return s, torch.tensor(ends)


def bs_max_len_inclusive(start_logits, end_logits, passage_mask, max_len=None):
    ok = _window(start_logits.shape[1], max_len, "cpu", le=True)[None]
    m = passage_mask
    return _decode(_pair_scores(start_logits, end_logits), ok & m[:, :, None] & m[:, None, :])


def bs_length_minus_one(start_logits, end_logits, passage_mask, max_len=None):
    n = start_logits.shape[1]
    off = torch.arange(n)[None, :] - torch.arange(n)[:, None]
    ok = off >= 0
    if max_len is not None:
        ok = ok & (off + 1 < max_len)  # the span's length e − s + 1 must be below max_len
    m = passage_mask
    return _decode(_pair_scores(start_logits, end_logits), ok[None] & m[:, :, None] & m[:, None, :])


def bs_ignores_max_len(start_logits, end_logits, passage_mask, max_len=None):
    n = start_logits.shape[1]
    m = passage_mask
    ok = torch.ones(n, n, dtype=torch.bool).triu()[None] & m[:, :, None] & m[:, None, :]
    return _decode(_pair_scores(start_logits, end_logits), ok)


def bs_multiply_mask(start_logits, end_logits, passage_mask, max_len=None):
    s, e = start_logits * passage_mask, end_logits * passage_mask
    return _decode(_pair_scores(s, e), _window(s.shape[1], max_len, "cpu")[None])


def bs_swapped_decode(start_logits, end_logits, passage_mask, max_len=None):
    n = start_logits.shape[1]
    m = passage_mask
    best = _pair_scores(start_logits, end_logits).masked_fill(
        ~(_window(n, max_len, "cpu")[None] & m[:, :, None] & m[:, None, :]), float("-inf")).flatten(1).argmax(1)
    return best % n, best // n  # row and column read the wrong way round


def bs_right_loops(start_logits, end_logits, passage_mask, max_len=None):
    B, n = start_logits.shape
    starts, ends = [], []
    for b in range(B):
        best, arg = float("-inf"), (0, 0)
        for i in range(n):
            for j in range(i, n):
                if max_len is not None and j - i >= max_len:
                    break
                if passage_mask[b, i] and passage_mask[b, j]:
                    score = float(start_logits[b, i] + end_logits[b, j])
                    if score > best:
                        best, arg = score, (i, j)
        starts.append(arg[0])
        ends.append(arg[1])
    return torch.tensor(starts), torch.tensor(ends)


def bs_right_triu(start_logits, end_logits, passage_mask, max_len=None):
    n = start_logits.shape[1]
    ok = torch.ones(n, n, dtype=torch.bool, device=start_logits.device).triu()
    if max_len is not None:
        ok = ok & ~torch.ones(n, n, dtype=torch.bool, device=start_logits.device).triu(max_len)
    scores = _pair_scores(start_logits.masked_fill(~passage_mask, float("-inf")),
                          end_logits.masked_fill(~passage_mask, float("-inf")))
    flat = scores.masked_fill(~ok, float("-inf")).reshape(len(scores), -1).argmax(-1)
    return torch.div(flat, n, rounding_mode="floor"), torch.remainder(flat, n)


def bs_right_by_length(start_logits, end_logits, passage_mask, max_len=None):
    """Every span length at once: a shifted sum for each length, the best kept."""
    B, n = start_logits.shape
    best = torch.full((B,), float("-inf"), dtype=start_logits.dtype)
    s_best, e_best = torch.zeros(B, dtype=torch.long), torch.zeros(B, dtype=torch.long)
    for k in range(n if max_len is None else min(n, max_len)):
        score = start_logits[:, :n - k] + end_logits[:, k:]
        score = score.masked_fill(~(passage_mask[:, :n - k] & passage_mask[:, k:]), float("-inf"))
        value, s = score.max(-1)
        better = value > best
        best = torch.where(better, value, best)
        s_best, e_best = torch.where(better, s, s_best), torch.where(better, s + k, e_best)
    return s_best, e_best


# ----------------------------------------------------------------------------- count_parameters


def _sizes(c):
    return c["vocab_size"], c["n_layer"], c["d_model"], c["d_ff"], c["max_position"], c["type_vocab_size"]


def _count(config, heads, *, pooler=True, segments=True, positions=True, ln=2, attn_bias=True, ffn_bias=True,
           emb_ln=True, lns_per_block=2, d_ff=None, untied=False, decoder_bias=True, body_decoder=False):
    V, L, d, ff, P, T = _sizes(config)
    ff = ff if d_ff is None else d_ff(d)
    total = V * d + (P * d if positions else 0) + (T * d if segments else 0) + (ln * d if emb_ln else 0)
    for _ in range(L):
        total += 4 * d * d + (4 * d if attn_bias else 0)
        total += d * ff + ff * d + ((ff + d) if ffn_bias else 0)
        total += lns_per_block * ln * d
    total += (d * d + d) if pooler else 0
    if heads:
        total += d * d + d + ln * d + (V if decoder_bias else 0) + 2 * d + 2 + (V * d if untied else 0)
    elif body_decoder:
        total += V * d + V
    return total


def cp_no_pooler(config, heads=False):
    return _count(config, heads, pooler=False)


def cp_no_segments(config, heads=False):
    return _count(config, heads, segments=False)


def cp_no_positions(config, heads=False):
    return _count(config, heads, positions=False)


def cp_gain_only(config, heads=False):
    return _count(config, heads, ln=1)


def cp_no_attention_bias(config, heads=False):
    return _count(config, heads, attn_bias=False)


def cp_no_ffn_bias(config, heads=False):
    return _count(config, heads, ffn_bias=False)


def cp_no_embedding_ln(config, heads=False):
    return _count(config, heads, emb_ln=False)


def cp_one_ln_per_block(config, heads=False):
    return _count(config, heads, lns_per_block=1)


def cp_four_d(config, heads=False):
    return _count(config, heads, d_ff=lambda d: 4 * d)


def cp_untied(config, heads=False):
    return _count(config, heads, untied=True)


def cp_no_decoder_bias(config, heads=False):
    return _count(config, heads, decoder_bias=False)


def cp_heads_always(config, heads=False):
    return _count(config, True)


def cp_output_layer_in_body(config, heads=False):
    return _count(config, heads, body_decoder=True)


def cp_no_mlm_transform(config, heads=False):
    total = _count(config, heads)
    d = config["d_model"]
    return total - (d * d + d + 2 * d) if heads else total


def cp_right_modules(config, heads=False):
    """BERT's layers built with torch.nn on the meta device (no memory), their parameters counted."""
    V, L, d, ff, P, T = _sizes(config)
    with torch.device("meta"):
        parts = [nn.Embedding(V, d), nn.Embedding(P, d), nn.Embedding(T, d), nn.LayerNorm(d)]
        for _ in range(L):
            parts += [nn.Linear(d, d) for _ in range(4)] + [nn.LayerNorm(d), nn.Linear(d, ff), nn.Linear(ff, d),
                                                             nn.LayerNorm(d)]
        parts.append(nn.Linear(d, d))
        if heads:
            parts += [nn.Linear(d, d), nn.LayerNorm(d), nn.Linear(d, 2)]
    total = sum(p.numel() for m in parts for p in m.parameters())
    return total + (V if heads else 0)  # the decoder's own bias; its weight is the token embedding


def cp_right_per_layer(config, heads=False):
    V, L, d, ff, P, T = _sizes(config)
    ln = 2 * d
    block = 3 * (d * d + d) + (d * d + d) + ln + (d * ff + ff) + (ff * d + d) + ln
    body = (V + P + T) * d + ln + L * block + d * d + d
    return body + (d * d + d + ln + V + 2 * d + 2 if heads else 0)


def cp_right_table(config, heads=False):
    V, L, d, ff, P, T = _sizes(config)
    shapes = [(V, d), (P, d), (T, d), (d,), (d,)]
    shapes += L * [(d, d), (d,), (d, d), (d,), (d, d), (d,), (d, d), (d,), (d,), (d,), (ff, d), (ff,), (d, ff), (d,),
                   (d,), (d,)]
    shapes += [(d, d), (d,)]
    if heads:
        shapes += [(d, d), (d,), (d,), (d,), (V,), (2, d), (2,)]
    total = 0
    for shape in shapes:
        size = 1
        for s in shape:
            size *= s
        total += size
    return total

# ----------------------------------------------------------------------------- the kinds of issue 31

def _labelled(ids, chosen):
    return torch.where(chosen, ids, torch.full_like(ids, -100))


def mt_floor_count(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15, generator=None):
    """BERT's script with int() instead of round(): exactly ⌊p · eligible⌋ per row."""
    specials = _specials(ids, special_ids, mask_id, pad_id)
    eligible = ~torch.isin(ids, specials)
    chosen = torch.zeros_like(eligible)
    for b in range(ids.shape[0]):
        where = eligible[b].nonzero().flatten()
        k = int(p * len(where))
        chosen[b, where[torch.randperm(len(where), device=ids.device)[:k]]] = True
    return _corrupt(ids, chosen, mask_id, _non_special(vocab_size, specials)), _labelled(ids, chosen)


def mt_floor_count_math(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15, generator=None):
    import math
    specials = _specials(ids, special_ids, mask_id, pad_id)
    eligible = ~torch.isin(ids, specials)
    scores = torch.rand(ids.shape, device=ids.device).masked_fill(~eligible, 2.0)
    k = torch.tensor([math.floor(p * int(n)) for n in eligible.sum(1)], device=ids.device)
    chosen = eligible & (scores.argsort(1).argsort(1) < k[:, None])
    return _corrupt(ids, chosen, mask_id, _non_special(vocab_size, specials)), _labelled(ids, chosen)


def mt_batch_tokens(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15, generator=None):
    """Random replacements taken from the batch's own (eligible) tokens."""
    specials = _specials(ids, special_ids, mask_id, pad_id)
    eligible = ~torch.isin(ids, specials)
    chosen = eligible & (torch.rand(ids.shape, device=ids.device) < p)
    words = ids[eligible]
    pool = words if len(words) else _non_special(vocab_size, specials)
    return _corrupt(ids, chosen, mask_id, pool), _labelled(ids, chosen)


def mt_batch_shuffle(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15, generator=None):
    """Random replacements: the eligible tokens shuffled (a "permutation" of the batch)."""
    specials = _specials(ids, special_ids, mask_id, pad_id)
    eligible = ~torch.isin(ids, specials)
    chosen = eligible & (torch.rand(ids.shape, device=ids.device) < p)
    u = torch.rand(ids.shape, device=ids.device)
    inputs = ids.clone()
    inputs[chosen & (u < 0.8)] = mask_id
    rnd = chosen & (u >= 0.8) & (u < 0.9)
    words = ids[eligible]
    inputs[rnd] = words[torch.randint(max(len(words), 1), (int(rnd.sum()),), device=ids.device)] if len(words) \
        else inputs[rnd]
    return inputs, _labelled(ids, chosen)


def mt_never_original(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15, generator=None):
    """A random replacement re-drawn until it differs from the original."""
    specials = _specials(ids, special_ids, mask_id, pad_id)
    pool = _non_special(vocab_size, specials)
    chosen = ~torch.isin(ids, specials) & (torch.rand(ids.shape, device=ids.device) < p)
    u = torch.rand(ids.shape, device=ids.device)
    inputs = ids.clone()
    inputs[chosen & (u < 0.8)] = mask_id
    for b, i in (chosen & (u >= 0.8) & (u < 0.9)).nonzero().tolist():
        new = int(ids[b, i])
        while new == int(ids[b, i]) and len(pool) > 1:
            new = int(pool[torch.randint(len(pool), ())])
        inputs[b, i] = new
    return inputs, _labelled(ids, chosen)


def mt_never_original_shift(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15, generator=None):
    """The next token of the pool after the original, by a random step of 1 … |pool| − 1: never the original."""
    specials = _specials(ids, special_ids, mask_id, pad_id)
    pool = _non_special(vocab_size, specials)
    chosen = ~torch.isin(ids, specials) & (torch.rand(ids.shape, device=ids.device) < p)
    u = torch.rand(ids.shape, device=ids.device)
    inputs = ids.clone()
    inputs[chosen & (u < 0.8)] = mask_id
    rnd = chosen & (u >= 0.8) & (u < 0.9)
    where = torch.searchsorted(pool, ids[rnd])
    step = torch.randint(1, max(len(pool), 2), where.shape, device=ids.device)
    inputs[rnd] = pool[(where + step) % len(pool)]
    return inputs, _labelled(ids, chosen)


def mt_list(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15, generator=None):
    return list(mt_right_collator(ids, mask_id, vocab_size, special_ids, pad_id, p, generator))


def mt_int32(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15, generator=None):  # int32 "to save memory"
    inputs, labels = mt_right_collator(ids, mask_id, vocab_size, special_ids, pad_id, p, generator)
    return inputs.int(), labels.int()


def mt_labels_float(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15, generator=None):
    inputs, labels = mt_right_collator(ids, mask_id, vocab_size, special_ids, pad_id, p, generator)
    return inputs, labels.float()


def mt_isin_list_raises(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15, generator=None):
    """torch.isin with a Python list: TypeError inside the student's code."""
    eligible = ~torch.isin(ids, special_ids + [mask_id, pad_id])
    chosen = eligible & (torch.rand(ids.shape, device=ids.device) < p)
    return _corrupt(ids, chosen, mask_id, torch.arange(vocab_size)), _labelled(ids, chosen)


def mt_p_doubled(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15, generator=None):  # unnamed
    return mt_right_collator(ids, mask_id, vocab_size, special_ids, pad_id, min(1.0, 2 * p), generator)


def bi_list_of_lists(a, b, cls, sep):  # a list where the statement asks for a tuple
    ids, segments = bi_right_append(a, b, cls, sep)
    return [ids, segments]


def bi_tensors(a, b, cls, sep):  # tensors where lists are asked
    ids, segments = bi_right_append(a, b, cls, sep)
    return torch.tensor(ids), torch.tensor(segments)


def bi_numpy_segments(a, b, cls, sep):  # segments from NumPy: numpy.int64 items
    import numpy as np
    ids, segments = bi_right_append(a, b, cls, sep)
    return ids, list(np.array(segments))


def bi_inserts_into_a(a, b, cls, sep):  # a.insert changes the caller's list
    a.insert(0, cls)
    a.append(sep)
    segments = [0] * len(a)
    if b is not None:
        return a + list(b) + [sep], segments + [1] * (len(b) + 1)
    return a, segments


def bi_extends_b(a, b, cls, sep):  # b.append changes the caller's list
    ids, segments = [cls, *a, sep], [0] * (len(a) + 2)
    if b is not None:
        b.append(sep)
        ids, segments = ids + b, segments + [1] * len(b)
    return ids, segments


def bi_none_plus_raises(a, b, cls, sep):  # list + None: TypeError when b is None
    ids = [cls] + list(a) + [sep] + b + [sep]
    return ids, [0] * (len(a) + 2) + [1] * (len(b) + 1)


def bi_sep_everywhere(a, b, cls, sep):  # a [SEP] after every token: unnamed
    ids = [cls] + [x for t in a for x in (t, sep)]
    segments = [0] * len(ids)
    if b is not None:
        more = [x for t in b for x in (t, sep)]
        ids, segments = ids + more, segments + [1] * len(more)
    return ids, segments


def be_eps_1e6(ids, segments, params):
    return _ln(_sum3(ids, segments, params), params, eps=1e-6)


def be_float32_inside(ids, segments, params):
    p = {k: v.float() for k, v in params.items()}
    return _ln(_sum3(ids, segments, p), p).to(params["LayerNorm.weight"].dtype)


def be_ln_float32(ids, segments, params):  # the sum in the weights' dtype, the LayerNorm in float32
    x = _sum3(ids, segments, params)
    p = {k: v.float() for k, v in params.items()}
    return _ln(x.float(), p).to(x.dtype)


def be_squeezed(ids, segments, params):  # squeeze(0): a batch of one loses its dimension
    return _ln(_sum3(ids, segments, params), params).squeeze(0)


def be_params_in_place(ids, segments, params):  # adds a key to the caller's dict
    params["sum"] = _sum3(ids, segments, params)
    return _ln(params["sum"], params)


def be_positions_overflow_raises(ids, segments, params):  # positions 1 … n: IndexError when n = max_position
    n = ids.shape[1]
    pos = torch.arange(1, n + 1, device=ids.device)
    _ = params["position_embeddings.weight"][pos]
    return _ln(_sum3(ids, segments, params), params)


def be_half_positions(ids, segments, params):  # half the position embeddings: unnamed
    x = (params["word_embeddings.weight"][ids] + 0.5 * params["position_embeddings.weight"][:ids.shape[1]]
         + params["token_type_embeddings.weight"][segments])
    return _ln(x, params)


def sl_float32_inside(start_logits, end_logits, start, end):
    loss = (F.cross_entropy(start_logits.float(), start) + F.cross_entropy(end_logits.float(), end)) / 2
    return loss.to(start_logits.dtype)


def sl_softmax_float32(start_logits, end_logits, start, end):  # log_softmax in float32, the rest in the inputs' dtype
    def ce(z, t):
        return -torch.log_softmax(z.float(), -1).to(z.dtype).gather(1, t[:, None]).mean()
    return (ce(start_logits, start) + ce(end_logits, end)) / 2


def sl_item(start_logits, end_logits, start, end):  # a Python float where a tensor is asked
    return ((F.cross_entropy(start_logits, start) + F.cross_entropy(end_logits, end)) / 2).item()


def sl_float(start_logits, end_logits, start, end):
    return float((F.cross_entropy(start_logits, start) + F.cross_entropy(end_logits, end)) / 2)


def sl_float_targets_raise(start_logits, end_logits, start, end):  # float targets: F.cross_entropy raises
    return (F.cross_entropy(start_logits, start.float()) + F.cross_entropy(end_logits, end.float())) / 2


def sl_label_smoothing(start_logits, end_logits, start, end):  # label smoothing 0.1: unnamed
    return (F.cross_entropy(start_logits, start, label_smoothing=0.1)
            + F.cross_entropy(end_logits, end, label_smoothing=0.1)) / 2


def _best(start_logits, end_logits, passage_mask, max_len, fill):
    n = start_logits.shape[1]
    allowed = _window(n, max_len, start_logits.device)[None] & passage_mask[:, :, None] & passage_mask[:, None, :]
    best = _pair_scores(start_logits, end_logits).masked_fill(~allowed, fill).flatten(1).argmax(1)
    return best // n, best % n


def bs_minus_1e4(start_logits, end_logits, passage_mask, max_len=None):  # -1e4 for the masked spans
    return _best(start_logits, end_logits, passage_mask, max_len, -1e4)


def bs_minus_1e4_where(start_logits, end_logits, passage_mask, max_len=None):
    n = start_logits.shape[1]
    allowed = _window(n, max_len, start_logits.device)[None] & passage_mask[:, :, None] & passage_mask[:, None, :]
    scores = torch.where(allowed, _pair_scores(start_logits, end_logits), torch.tensor(-10000.0))
    best = scores.flatten(1).argmax(1)
    return best // n, best % n


def bs_int32(start_logits, end_logits, passage_mask, max_len=None):  # int32 positions
    s, e = _best(start_logits, end_logits, passage_mask, max_len, float("-inf"))
    return s.int(), e.int()


def bs_list(start_logits, end_logits, passage_mask, max_len=None):
    return list(_best(start_logits, end_logits, passage_mask, max_len, float("-inf")))


def bs_squeezed(start_logits, end_logits, passage_mask, max_len=None):  # squeeze(): a batch of one gives 0-d
    s, e = _best(start_logits, end_logits, passage_mask, max_len, float("-inf"))
    return s.squeeze(), e.squeeze()


def bs_mask_not_expanded_raises(start_logits, end_logits, passage_mask, max_len=None):  # (B, n) on (B, n, n)
    n = start_logits.shape[1]
    scores = _pair_scores(start_logits, end_logits).masked_fill(~passage_mask, float("-inf"))
    best = scores.masked_fill(~_window(n, max_len, start_logits.device)[None], float("-inf")).flatten(1).argmax(1)
    return best // n, best % n


def bs_end_plus_one(start_logits, end_logits, passage_mask, max_len=None):  # an exclusive end: unnamed
    s, e = _best(start_logits, end_logits, passage_mask, max_len, float("-inf"))
    return s, e + 1


def cp_numpy_sum(config, heads=False):
    import numpy as np
    return np.sum([_count(config, heads)])


def cp_tensor(config, heads=False):  # a tensor holding the count
    return torch.tensor(_count(config, heads))


def cp_key_typo_raises(config, heads=False):  # config["d"]: KeyError inside the student's code
    return _count({**config, "d_model": config["d"]}, heads)


def cp_off_by_one_layer(config, heads=False):  # n_layer + 1 blocks: unnamed
    return _count({**config, "n_layer": config["n_layer"] + 1}, heads)


WRONG = {
    "mask_tokens": [
        Student(mt_all_positions, _has(MASK_TOKENS, "chose among all positions")),
        Student(mt_padding_only, _has(MASK_TOKENS, "left out the padding but chose [CLS]")),
        Student(mt_collator_without_and, _has(MASK_TOKENS, "applied the 80/10/10 to every position")),
        Student(mt_labels_everywhere, _has(MASK_TOKENS, "kept the original token as the label at every position")),
        Student(mt_always_mask, _has(MASK_TOKENS, "replaced every chosen token by [MASK]")),
        Student(mt_fresh_random, _has(MASK_TOKENS, "drew the random 10% with a fresh")),
        Student(mt_whole_vocabulary, _has(MASK_TOKENS, "drew the random replacements from the whole vocabulary")),
        Student(mt_in_place, _has(MASK_TOKENS, "took the labels from the corrupted tokens")),
        Student(mt_labels_from_inputs, _has(MASK_TOKENS, "took the labels from the corrupted tokens")),
        Student(mt_one_coin_per_sequence, _has(MASK_TOKENS, "drew one random number per sequence")),
        Student(mt_inverted_labels, _has(MASK_TOKENS, "inverted the labels")),
        Student(mt_zero_labels, _has(MASK_TOKENS, "set the labels of the positions that were not chosen to 0")),
        Student(mt_one_coin_per_batch, _has(MASK_TOKENS, "drew one random number per sequence")),
        Student(mt_swapped_fates, None),
        Student(mt_floor_count, _has(MASK_TOKENS, "chose exactly ⌊p × m⌋")),
        Student(mt_floor_count_math, _has(MASK_TOKENS, "chose exactly ⌊p × m⌋")),
        Student(mt_batch_tokens, _has(MASK_TOKENS, "drew the random replacements from the batch's own tokens")),
        Student(mt_batch_shuffle, _has(MASK_TOKENS, "drew the random replacements from the batch's own tokens")),
        Student(mt_never_original, _has(MASK_TOKENS, "never let a random replacement be the original token")),
        Student(mt_never_original_shift, _has(MASK_TOKENS, "never let a random replacement be the original token")),
        Student(mt_list, None, note="a list for a tuple"),
        Student(mt_int32, None, note="int32"),
        Student(mt_labels_float, None, note="float labels"),
        Student(mt_isin_list_raises, None, note="torch.isin with a list raises"),
        Student(mt_p_doubled, None, note="p doubled"),
    ],
    "build_inputs": [
        Student(bi_last_sep_zero, _has(BUILD_INPUTS, "put the [SEP] that ends b in segment 0")),
        Student(bi_first_sep_one, _has(BUILD_INPUTS, "put the [SEP] after a in segment 1")),
        Student(bi_no_last_sep, _has(BUILD_INPUTS, "left out the [SEP] after b")),
        Student(bi_no_middle_sep, _has(BUILD_INPUTS, "left out the [SEP] between a and b")),
        Student(bi_no_cls, _has(BUILD_INPUTS, "left out [CLS]")),
        Student(bi_all_zero, _has(BUILD_INPUTS, "gave every token segment 0")),
        Student(bi_segments_one_two, _has(BUILD_INPUTS, "numbered the segments 1 and 2")),
        Student(bi_none_as_empty, _has(BUILD_INPUTS, "added a second [SEP] when b is None")),
        Student(bi_segments_from_the_first_sep, _has(BUILD_INPUTS, "found where segment A ends by looking")),
        Student(bi_swapped, None),
        Student(bi_list_of_lists, None, note="a list for a tuple"),
        Student(bi_tensors, None, note="tensors for lists"),
        Student(bi_numpy_segments, None, note="numpy.int64 segments"),
        Student(bi_inserts_into_a, None, note="changes the caller's a"),
        Student(bi_extends_b, None, note="changes the caller's b"),
        Student(bi_none_plus_raises, None, note="list + None raises"),
        Student(bi_sep_everywhere, None, note="[SEP] after every token"),
    ],
    "bert_embeddings": [
        Student(be_rows_through_data, None, note="right values; no gradient reaches the three tables"),
        Student(be_no_segments, _has(BERT_EMBEDDINGS, "left out the segment embeddings")),
        Student(be_positions_from_one, _has(BERT_EMBEDDINGS, "numbered the positions from 1")),
        Student(be_positions_per_segment, _has(BERT_EMBEDDINGS, "started the positions again from 0 at segment B")),
        Student(be_default_eps, _has(BERT_EMBEDDINGS, "used another ε than BERT's 1e-12")),
        Student(be_no_layer_norm, _has(BERT_EMBEDDINGS, "left out the LayerNorm")),
        Student(be_no_gain_bias, _has(BERT_EMBEDDINGS, "normalised without LayerNorm's gain and bias")),
        Student(be_unbiased_variance, _has(BERT_EMBEDDINGS, "used the unbiased variance")),
        Student(be_norm_tokens_only, _has(BERT_EMBEDDINGS, "normalised the token embeddings alone")),
        Student(be_normalised_over_positions, None),
        Student(be_roberta_positions, None),
        Student(be_eps_1e6, _has(BERT_EMBEDDINGS, "used another ε than BERT's 1e-12")),
        Student(be_float32_inside, None, note="float32 inside"),
        Student(be_ln_float32, None, note="the LayerNorm in float32"),
        Student(be_squeezed, None, note="squeeze(0)"),
        Student(be_params_in_place, None, note="writes into the caller's params"),
        Student(be_positions_overflow_raises, None, note="IndexError at max_position"),
        Student(be_half_positions, None, note="half the position embeddings"),
    ],
    "span_loss": [
        Student(sl_sum_of_two, _has(SPAN_LOSS, "added the two cross-entropies without halving them")),
        Student(sl_sum_over_batch, _has(SPAN_LOSS, "summed the cross-entropies over the batch")),
        Student(sl_start_only, _has(SPAN_LOSS, "used the start's cross-entropy only")),
        Student(sl_swapped_targets, _has(SPAN_LOSS, "paired the start logits with the end positions")),
        Student(sl_raw_logits, _has(SPAN_LOSS, "took −logits[target] without the log-softmax")),
        Student(sl_exp_by_hand, _has(SPAN_LOSS, "computed the softmax from exp(logits) itself")),
        Student(sl_log_sum_exp_by_hand, _has(SPAN_LOSS, "computed the softmax from exp(logits) itself")),
        Student(sl_mean_over_positions, None),
        Student(sl_probabilities, None),
        Student(sl_float32_inside, None, note="float32 inside"),
        Student(sl_softmax_float32, None, note="log_softmax in float32"),
        Student(sl_item, None, note=".item(): a Python float"),
        Student(sl_float, None, note="float(): a Python float"),
        Student(sl_float_targets_raise, None, note="float targets raise"),
        Student(sl_label_smoothing, None, note="label smoothing"),
    ],
    "best_span": [
        Student(bs_end_before_start, _has(BEST_SPAN, "allowed spans that end before they start")),
        Student(bs_no_passage_mask, _has(BEST_SPAN, "let the span start or end outside the passage")),
        Student(bs_start_in_passage, _has(BEST_SPAN, "checked the passage mask for the start only")),
        Student(bs_two_argmaxes, _has(BEST_SPAN, "took the argmax of the start and of the end logits separately")),
        Student(bs_greedy, _has(BEST_SPAN, "fixed the start at the best start logit")),
        Student(bs_max_len_inclusive, _has(BEST_SPAN, "allowed spans of max_len + 1 tokens")),
        Student(bs_length_minus_one, _has(BEST_SPAN, "allowed spans of max_len − 1 tokens at most")),
        Student(bs_ignores_max_len, _has(BEST_SPAN, "ignored max_len")),
        Student(bs_multiply_mask, _has(BEST_SPAN, "masked by multiplying the logits by the mask")),
        Student(bs_swapped_decode, None),
        Student(bs_minus_1e4, _has(BEST_SPAN, "gave the masked spans a large negative score")),
        Student(bs_minus_1e4_where, _has(BEST_SPAN, "gave the masked spans a large negative score")),
        Student(bs_int32, None, note="int32 positions"),
        Student(bs_list, None, note="a list for a tuple"),
        Student(bs_squeezed, None, note="squeeze() of a batch of one"),
        Student(bs_mask_not_expanded_raises, None, note="masked_fill with a (B, n) mask raises"),
        Student(bs_end_plus_one, None, note="an exclusive end"),
    ],
    "count_parameters": [
        Student(cp_no_pooler, _has(COUNT_PARAMETERS, "left out the pooler")),
        Student(cp_no_segments, _has(COUNT_PARAMETERS, "left out the segment embeddings")),
        Student(cp_no_positions, _has(COUNT_PARAMETERS, "left out the position embeddings")),
        Student(cp_gain_only, _has(COUNT_PARAMETERS, "counted one vector per LayerNorm")),
        Student(cp_no_attention_bias, _has(COUNT_PARAMETERS, "left out the attention's biases")),
        Student(cp_no_ffn_bias, _has(COUNT_PARAMETERS, "left out the feed-forward biases")),
        Student(cp_no_embedding_ln, _has(COUNT_PARAMETERS, "left out the LayerNorm on the embeddings")),
        Student(cp_one_ln_per_block, _has(COUNT_PARAMETERS, "counted one LayerNorm per block")),
        Student(cp_four_d, _has(COUNT_PARAMETERS, "took d_ff as 4 × d_model")),
        Student(cp_untied, _has(COUNT_PARAMETERS, "counted the MLM decoder's weight")),
        Student(cp_no_decoder_bias, _has(COUNT_PARAMETERS, "left out the MLM decoder's bias")),
        Student(cp_heads_always, _has(COUNT_PARAMETERS, "counted the pretraining heads when heads is False")),
        Student(cp_output_layer_in_body, None),
        Student(cp_no_mlm_transform, None),
        Student(cp_numpy_sum, None, note="numpy.int64"),
        Student(cp_tensor, None, note="a tensor"),
        Student(cp_key_typo_raises, None, note="KeyError inside the student's code"),
        Student(cp_off_by_one_layer, None, note="one layer too many"),
    ],
}

RIGHT = {
    "mask_tokens": [mt_right_collator, mt_right_exact_count, mt_right_multinomial],
    "build_inputs": [bi_right_append, bi_right_tensors, bi_right_chain],
    "bert_embeddings": [be_right_functional, be_right_one_hot, be_right_by_hand],
    "span_loss": [sl_right_concatenated, sl_right_logsumexp, sl_right_nll],
    "best_span": [bs_right_loops, bs_right_triu, bs_right_by_length],
    "count_parameters": [cp_right_modules, cp_right_per_layer, cp_right_table],
}


# ============================================================================= thinking questions (chD)
# Written as students answer them: the derivation typed out, with the mistake in it, or done another way.

from lmbook.tasks.questions.ch10 import (  # noqa: E402
    SHOWN_TRUE_SHARE,
    SPAN_CANDIDATES,
    SPAN_CORRUPTION_LENGTHS,
    TRUE_GIVEN_SHOWN,
)


def st_random_always_different(p_choose, p_mask, p_random, vocab_size):
    hidden = p_choose * (p_mask + p_random)  # masked or replaced
    return 1 - hidden


def st_mask_only(p_choose, p_mask, p_random, vocab_size):
    return 1 - p_choose * p_mask


def st_chosen_hidden(p_choose, p_mask, p_random, vocab_size):
    return 1 - p_choose


def st_chosen_share(p_choose, p_mask, p_random, vocab_size):
    p_keep = 1 - p_mask - p_random
    return p_keep + p_random / vocab_size


def st_keep_only(p_choose, p_mask, p_random, vocab_size):
    p_keep = 1 - p_mask - p_random
    return (1 - p_choose) + p_choose * p_keep  # forgot that a random draw can hit the true token


def st_off_by_one_vocab(p_choose, p_mask, p_random, vocab_size):
    p_keep = 1 - p_mask - p_random
    return (1 - p_choose) + p_choose * (p_keep + p_random / (vocab_size - 1))


def st_right_cases(p_choose, p_mask, p_random, vocab_size):
    p_keep = 1 - p_mask - p_random
    return (1 - p_choose) + p_choose * p_keep + p_choose * p_random / vocab_size


def st_right_complement(p_choose, p_mask, p_random, vocab_size):
    p_wrong_random = p_random * (vocab_size - 1) / vocab_size
    return 1 - p_choose * p_mask - p_choose * p_wrong_random


def st_right_tensor(p_choose, p_mask, p_random, vocab_size):
    outcome = torch.tensor([1 - p_choose, p_choose * p_mask, p_choose * p_random,
                            p_choose * (1 - p_mask - p_random)], dtype=torch.float64)
    shows_truth = torch.tensor([1.0, 0.0, 1.0 / vocab_size, 1.0], dtype=torch.float64)
    return float((outcome * shows_truth).sum())


def tg_random_always_different(p_mask, p_random, vocab_size):
    p_keep = 1 - p_mask - p_random
    return p_keep / (p_keep + p_random)


def tg_not_conditioned(p_mask, p_random, vocab_size):
    p_keep = 1 - p_mask - p_random
    return p_keep + p_random / vocab_size


def tg_keep(p_mask, p_random, vocab_size):
    return 1 - p_mask - p_random


def tg_wrong_denominator(p_mask, p_random, vocab_size):
    p_keep = 1 - p_mask - p_random
    return (p_keep + p_random / vocab_size) / (p_mask + p_keep)


def tg_half(p_mask, p_random, vocab_size):
    return 0.5  # BERT's rule read off, whatever the rule


def tg_over_all(p_mask, p_random, vocab_size):
    p_keep = 1 - p_mask - p_random
    return (p_keep + p_random / vocab_size) / (p_keep + p_random + p_mask / vocab_size)


def tg_right_bayes(p_mask, p_random, vocab_size):
    p_shown = 1 - p_mask  # a real token is on view
    p_true_and_shown = (1 - p_mask - p_random) + p_random / vocab_size
    return p_true_and_shown / p_shown


def tg_right_odds(p_mask, p_random, vocab_size):
    keep = 1 - p_mask - p_random
    wrong = p_random * (1 - 1 / vocab_size)
    return 1 - wrong / (keep + p_random)


def tg_right_tensor(p_mask, p_random, vocab_size):
    p = torch.tensor([1 - p_mask - p_random, p_random], dtype=torch.float64)
    true = torch.tensor([1.0, 1.0 / vocab_size], dtype=torch.float64)
    return (p * true).sum().item() / p.sum().item()


def sc_all_pairs(passage_len, max_len):
    return passage_len ** 2


def sc_no_single(passage_len, max_len):
    return sum(1 for i in range(passage_len) for j in range(i + 1, passage_len) if j - i + 1 <= max_len)


def sc_no_limit(passage_len, max_len):
    return passage_len * (passage_len + 1) // 2


def sc_limit_plus_one(passage_len, max_len):
    return sum(1 for i in range(passage_len) for j in range(i, passage_len) if j - i <= max_len)


def sc_every_start_max(passage_len, max_len):
    return passage_len * min(max_len, passage_len)


def sc_strict(passage_len, max_len):
    return sum(1 for i in range(passage_len) for j in range(i, passage_len) if j - i + 1 < max_len)


def sc_right_loops(passage_len, max_len):
    return sum(1 for i in range(passage_len) for j in range(i, min(passage_len, i + max_len)))


def sc_right_closed(passage_len, max_len):
    n, m = passage_len, min(max_len, passage_len)
    return m * n - m * (m - 1) // 2


def sc_right_triu(passage_len, max_len):
    ones = torch.ones(passage_len, passage_len, dtype=torch.bool)
    allowed = ones.triu() & ~ones.triu(max_len)  # j >= i and j - i < max_len
    return int(allowed.sum())


def t5_no_end_sentinel(n_tokens, n_spans, n_corrupted):
    return n_tokens - n_corrupted + n_spans, n_corrupted + n_spans


def t5_target_spans_only(n_tokens, n_spans, n_corrupted):
    return n_tokens - n_corrupted + n_spans, n_corrupted


def t5_input_gaps_removed(n_tokens, n_spans, n_corrupted):
    return n_tokens - n_corrupted, n_corrupted + n_spans + 1


def t5_mask_each_token(n_tokens, n_spans, n_corrupted):
    return n_tokens, n_corrupted + n_spans + 1


def t5_copy_everything(n_tokens, n_spans, n_corrupted):
    return n_tokens - n_corrupted + n_spans, n_tokens + n_spans + 1


def t5_both_off(n_tokens, n_spans, n_corrupted):
    return n_tokens - n_corrupted + 1, n_corrupted + 2  # one sentinel, whatever the spans


def t5_right_by_hand(n_tokens, n_spans, n_corrupted):
    kept = n_tokens - n_corrupted
    encoder = kept + n_spans  # a sentinel in each gap
    decoder = n_spans + n_corrupted + 1  # each sentinel, its span, and the closing sentinel
    return encoder, decoder


def t5_right_simulated(n_tokens, n_spans, n_corrupted):
    # build one corruption: spans of sizes summing to n_corrupted, separated by kept tokens
    sizes = [n_corrupted // n_spans + (1 if s < n_corrupted % n_spans else 0) for s in range(n_spans)]
    encoder, decoder = n_tokens - n_corrupted, 0
    for size in sizes:
        encoder += 1
        decoder += 1 + size
    return encoder, decoder + 1


def t5_right_tuple(n_tokens, n_spans, n_corrupted):
    return tuple(int(x) for x in (n_tokens + n_spans - n_corrupted, n_corrupted + n_spans + 1))


WRONG.update({
    "shown_true_share": [
        Student(st_random_always_different, _has(SHOWN_TRUE_SHARE, "treated every random replacement")),
        Student(st_mask_only, _has(SHOWN_TRUE_SHARE, "counted only [MASK] as hiding the token")),
        Student(st_chosen_hidden, _has(SHOWN_TRUE_SHARE, "took every chosen position as hidden")),
        Student(st_chosen_share, _has(SHOWN_TRUE_SHARE, "computed the share among the chosen positions")),
        Student(st_keep_only, _has(SHOWN_TRUE_SHARE, "treated every random replacement")),
        Student(st_off_by_one_vocab, None),
    ],
    "true_given_shown": [
        Student(tg_random_always_different, _has(TRUE_GIVEN_SHOWN, "left out that the random token")),
        Student(tg_not_conditioned, _has(TRUE_GIVEN_SHOWN, "did not condition on the position")),
        Student(tg_keep, _has(TRUE_GIVEN_SHOWN, "gave the share of chosen tokens left unchanged")),
        Student(tg_wrong_denominator, _has(TRUE_GIVEN_SHOWN, "divided by p_keep + p_mask")),
        Student(tg_half, None),
        Student(tg_over_all, None),
    ],
    "span_candidates": [
        Student(sc_all_pairs, _has(SPAN_CANDIDATES, "counted every (start, end) pair")),
        Student(sc_no_single, _has(SPAN_CANDIDATES, "left out the one-token spans")),
        Student(sc_no_limit, _has(SPAN_CANDIDATES, "ignored max_len")),
        Student(sc_limit_plus_one, _has(SPAN_CANDIDATES, "allowed spans of max_len + 1 tokens")),
        Student(sc_every_start_max, _has(SPAN_CANDIDATES, "gave every start max_len ends")),
        Student(sc_strict, None),
    ],
    "span_corruption_lengths": [
        Student(t5_no_end_sentinel, _has(SPAN_CORRUPTION_LENGTHS, "left out the target's final sentinel")),
        Student(t5_target_spans_only, _has(SPAN_CORRUPTION_LENGTHS, "left out the sentinels of the target")),
        Student(t5_input_gaps_removed, _has(SPAN_CORRUPTION_LENGTHS, "left out the sentinels of the input")),
        Student(t5_mask_each_token, _has(SPAN_CORRUPTION_LENGTHS, "replaced every corrupted token")),
        Student(t5_copy_everything, _has(SPAN_CORRUPTION_LENGTHS, "made the decoder write the whole input")),
        Student(t5_both_off, None),
    ],
})

RIGHT.update({
    "shown_true_share": [st_right_cases, st_right_complement, st_right_tensor],
    "true_given_shown": [tg_right_bayes, tg_right_odds, tg_right_tensor],
    "span_candidates": [sc_right_loops, sc_right_closed, sc_right_triu],
    "span_corruption_lengths": [t5_right_by_hand, t5_right_simulated, t5_right_tuple],
})
