"""Exercise 3 (encoder-decoder) as students write it: wrong answers with the mistake they have, and right ones
written differently from the reference (see test_students.py)."""

from __future__ import annotations

import math
from collections import Counter

import torch
from check_contract import Student

from lmbook.tasks.ch03 import BEAM, BLEU_CHECK, GREEDY, TEACHER_FORCING_LOSS


def _has(check, start: str) -> str:
    """The misconception of ``check``'s Mutant that begins with ``start`` (word for word)."""
    (text,) = [m.misconception for m in check.mutants if m.misconception.startswith(start)]
    return text


# ----------------------------------------------------------------------------- teacher_forcing_loss

def tf_no_shift(logits, y, pad_id):
    targets = y[:, :-1]  # "the logits are aligned with the decoder's input"
    logp = torch.log_softmax(logits, -1)
    nll = -logp.gather(2, targets.unsqueeze(2)).squeeze(2)
    mask = targets != pad_id
    return nll[mask].mean()


def tf_pad_zero(logits, y, pad_id):
    targets = y[:, 1:]
    nll = -torch.log_softmax(logits, -1).gather(-1, targets[..., None])[..., 0]
    mask = (targets != 0).float()
    return (nll * mask).sum() / mask.sum()


def tf_no_mask(logits, y, pad_id):
    logp = torch.log_softmax(logits, dim=2)
    return -logp.gather(2, y[:, 1:].unsqueeze(2)).mean()


def tf_per_sentence(logits, y, pad_id):
    losses = []
    for b in range(y.shape[0]):
        t = y[b, 1:]
        keep = t != pad_id
        lp = torch.log_softmax(logits[b][keep], -1)
        losses.append(-lp[torch.arange(int(keep.sum())), t[keep]].mean())
    return torch.stack(losses).mean()


def tf_naive_log_softmax(logits, y, pad_id):
    probs = torch.exp(logits) / torch.exp(logits).sum(-1, keepdim=True)
    targets = y[:, 1:]
    nll = -torch.log(probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1))
    keep = targets != pad_id
    return nll[keep].sum() / keep.sum()


def tf_divide_by_batch(logits, y, pad_id):
    targets = y[:, 1:]
    nll = -torch.log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return (nll * (targets != pad_id)).sum() / y.shape[0]


def tf_input_mask(logits, y, pad_id):
    targets = y[:, 1:]
    nll = -torch.log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    keep = y[:, :-1] != pad_id  # "the positions the decoder really read"
    return nll[keep].mean()


def tf_loop_off_by_one(logits, y, pad_id):  # the last position never counts
    B, T, V = logits.shape
    total, n = 0.0, 0
    for b in range(B):
        for t in range(T - 1):
            target = int(y[b, t + 1])
            if target != pad_id:
                total = total - torch.log_softmax(logits[b, t], 0)[target]
                n += 1
    return total / n


def tf_global_max(logits, y, pad_id):  # stabilised with one maximum for the whole batch
    z = logits - logits.max()
    logp = z - torch.log(torch.exp(z).sum(-1, keepdim=True))
    targets = y[:, 1:]
    nll = -logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    keep = targets != pad_id
    return nll[keep].mean()


def tf_zeroes_pad_logits(logits, y, pad_id):  # "clean up" the padded logits of the caller's tensor
    targets = y[:, 1:]
    logits[targets == pad_id] = 0.0
    nll = -torch.log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    keep = targets != pad_id
    return nll[keep].mean()


def tf_pad_smallest(logits, y, pad_id):  # "padding has the smallest id": keep the ids above it
    targets = y[:, 1:]
    nll = -torch.log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    keep = targets > pad_id
    return nll[keep].mean()


def tf_numpy(logits, y, pad_id):  # a NumPy value, where a number or a 0-d tensor is asked
    targets = y[:, 1:]
    nll = -torch.log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return nll[targets != pad_id].mean().detach().numpy()


def tf_right_logsumexp_loop(logits, y, pad_id):
    total, count = 0.0, 0
    for b in range(y.shape[0]):
        for t in range(logits.shape[1]):
            target = int(y[b, t + 1])
            if target == pad_id:
                continue
            total = total + (torch.logsumexp(logits[b, t], 0) - logits[b, t, target])
            count += 1
    return total / count


def tf_python_float(logits, y, pad_id):  # the right number, as a float: nothing to train through
    return float(tf_right_logsumexp_loop(logits, y, pad_id))


def tf_right_one_hot(logits, y, pad_id):
    targets = y[:, 1:]
    one_hot = torch.nn.functional.one_hot(targets, logits.shape[-1]).to(logits.dtype)
    nll = -(torch.log_softmax(logits, -1) * one_hot).sum(-1)
    w = (targets != pad_id).to(logits.dtype)
    return (nll * w).sum() / w.sum()


def tf_right_flat(logits, y, pad_id):
    V = logits.shape[-1]
    flat, t = logits.reshape(-1, V), y[:, 1:].reshape(-1)
    keep = t != pad_id
    z = flat[keep]
    z = z - z.max(-1, keepdim=True).values
    return (z.exp().sum(-1).log() - z[torch.arange(len(z)), t[keep]]).mean()


# ----------------------------------------------------------------------------- greedy_decode

def greedy_no_stop(log_probs, bos, eos, max_len):
    out, prev = [], bos
    for t in range(max_len):
        prev = log_probs[t, prev].argmax().item()
        out.append(prev)
    return out


def greedy_drops_eos(log_probs, bos, eos, max_len):
    out, prev = [], bos
    for t in range(max_len):
        prev = int(torch.argmax(log_probs[t][prev]))
        if prev == eos:
            break
        out.append(prev)
    return out


def greedy_with_bos(log_probs, bos, eos, max_len):
    seq = [bos]
    for t in range(max_len):
        seq.append(int(log_probs[t, seq[-1]].argmax()))
        if seq[-1] == eos:
            break
    return seq


def greedy_bos_row(log_probs, bos, eos, max_len):
    out = []
    for t in range(max_len):
        nxt = int(log_probs[t, bos].argmax())  # the row of bos, every time
        out.append(nxt)
        if nxt == eos:
            break
    return out


def greedy_short(log_probs, bos, eos, max_len):
    out, prev = [], bos
    for t in range(max_len - 1):
        prev = int(log_probs[t, prev].argmax())
        out.append(prev)
        if prev == eos:
            break
    return out


def greedy_column(log_probs, bos, eos, max_len):  # the wrong axis: P(y_t = i | y_{t+1} = j)
    out, prev = [], bos
    for t in range(max_len):
        prev = int(log_probs[t, :, prev].argmax())
        out.append(prev)
        if prev == eos:
            break
    return out


def greedy_whole_table(log_probs, bos, eos, max_len):  # runs over every step of the table
    out, prev = [], bos
    for t in range(log_probs.shape[0]):
        prev = int(log_probs[t, prev].argmax())
        out.append(prev)
        if prev == eos:
            break
    return out


def greedy_start_zero(log_probs, bos, eos, max_len):  # "bos is token 0"
    out, prev = [], 0
    for t in range(max_len):
        prev = int(log_probs[t, prev].argmax())
        out.append(prev)
        if prev == eos:
            break
    return out


def greedy_not_empty(log_probs, bos, eos, max_len):  # "an output of just <eos> is no output": goes on
    out, prev = [], bos
    for t in range(max_len):
        prev = int(log_probs[t, prev].argmax())
        out.append(prev)
        if prev == eos and len(out) > 1:
            break
    return out


def greedy_right_while(log_probs, bos, eos, max_len):
    y = []
    while len(y) < max_len and eos not in y:
        y.append(max(range(log_probs.shape[-1]), key=lambda j: float(log_probs[len(y), y[-1] if y else bos, j])))
    return y


def greedy_right_tensor(log_probs, bos, eos, max_len):
    out = torch.empty(0, dtype=torch.long)
    prev = torch.tensor(bos)
    for t in range(max_len):
        prev = log_probs[t, prev].argmax()
        out = torch.cat([out, prev.view(1).cpu()])
        if prev.item() == eos:
            break
    return out


def greedy_right_topk(log_probs, bos, eos, max_len):
    tokens = []
    for t in range(max_len):
        _, idx = log_probs[t, tokens[-1] if tokens else bos].topk(1)
        tokens.append(idx.item())
        if tokens[-1] == eos:
            return tokens
    return tokens


# ----------------------------------------------------------------------------- beam_search

def _expand(log_probs, t, live, bos):
    return [(toks + [j], s + float(lp)) for toks, s in live
            for j, lp in enumerate(log_probs[t, toks[-1] if toks else bos])]


def beam_raw_pick(log_probs, bos, eos, beam_size, max_len, alpha):
    live, finished = [([], 0.0)], []
    for t in range(max_len):
        cands = sorted(_expand(log_probs, t, live, bos), key=lambda c: c[1], reverse=True)[:beam_size]
        finished += [c for c in cands if c[0][-1] == eos]
        live = [c for c in cands if c[0][-1] != eos]
        if not live:
            break
    tokens, s = max(finished + live, key=lambda h: h[1])
    return tokens, s / len(tokens) ** alpha


def beam_len_with_bos(log_probs, bos, eos, beam_size, max_len, alpha):
    beams, done = [([bos], 0.0)], []
    for t in range(max_len):
        cands = [(seq + [j], s + float(log_probs[t, seq[-1], j])) for seq, s in beams
                 for j in range(log_probs.shape[-1])]
        cands.sort(key=lambda c: -c[1])
        beams = []
        for seq, s in cands[:beam_size]:
            (done if seq[-1] == eos else beams).append((seq, s))
        if not beams:
            break
    seq, score = max(((seq, s / len(seq) ** alpha) for seq, s in done + beams), key=lambda h: h[1])
    return seq[1:], score


def beam_no_norm(log_probs, bos, eos, beam_size, max_len, alpha):
    live, finished = [([], 0.0)], []
    for t in range(max_len):
        cands = sorted(_expand(log_probs, t, live, bos), key=lambda c: -c[1])[:beam_size]
        finished += [c for c in cands if c[0][-1] == eos]
        live = [c for c in cands if c[0][-1] != eos]
        if not live:
            break
    return max(finished + live, key=lambda h: h[1])


def beam_extends_finished(log_probs, bos, eos, beam_size, max_len, alpha):
    beam = [([], 0.0)]
    for t in range(max_len):
        beam = sorted(_expand(log_probs, t, beam, bos), key=lambda c: -c[1])[:beam_size]
    tokens, s = max(beam, key=lambda h: h[1] / len(h[0]) ** alpha)
    return tokens, s / len(tokens) ** alpha


def beam_refill(log_probs, bos, eos, beam_size, max_len, alpha):
    live, finished = [([], 0.0)], []
    for t in range(max_len):
        new = []
        for toks, s in sorted(_expand(log_probs, t, live, bos), key=lambda c: -c[1]):
            if toks[-1] == eos:
                finished.append((toks, s))
            else:
                new.append((toks, s))
            if len(new) == beam_size:
                break
        live = new
        if not live:
            break
    best = max(finished + live, key=lambda h: h[1] / len(h[0]) ** alpha)
    return best[0], best[1] / len(best[0]) ** alpha


def beam_only_finished(log_probs, bos, eos, beam_size, max_len, alpha):
    live, finished = [([], 0.0)], []
    for t in range(max_len):
        cands = sorted(_expand(log_probs, t, live, bos), key=lambda c: -c[1])[:beam_size]
        finished += [c for c in cands if c[0][-1] == eos]
        live = [c for c in cands if c[0][-1] != eos]
        if not live:
            break
    pool = finished if finished else live
    tokens, s = max(pool, key=lambda h: h[1] / len(h[0]) ** alpha)
    return tokens, s / len(tokens) ** alpha


def beam_len_without_eos(log_probs, bos, eos, beam_size, max_len, alpha):  # the example
    live, finished = [([], 0.0)], []
    for t in range(max_len):
        cands = sorted(_expand(log_probs, t, live, bos), key=lambda c: -c[1])[:beam_size]
        finished += [c for c in cands if c[0][-1] == eos]
        live = [c for c in cands if c[0][-1] != eos]
        if not live:
            break

    def words(toks):  # "eos is not a word"
        return max(1, len(toks) - (toks[-1] == eos))
    tokens, s = max(finished + live, key=lambda h: h[1] / words(h[0]) ** alpha)
    return tokens, s / words(tokens) ** alpha


def beam_times_alpha(log_probs, bos, eos, beam_size, max_len, alpha):  # s / len * alpha, not s / len**alpha
    live, finished = [([], 0.0)], []
    for t in range(max_len):
        cands = sorted(_expand(log_probs, t, live, bos), key=lambda c: -c[1])[:beam_size]
        finished += [c for c in cands if c[0][-1] == eos]
        live = [c for c in cands if c[0][-1] != eos]
        if not live:
            break
    tokens, s = max(finished + live, key=lambda h: h[1] / len(h[0]) * alpha)
    return tokens, s / len(tokens) * alpha


def beam_sets_aside_every_finished(log_probs, bos, eos, beam_size, max_len, alpha):
    live, finished = [([], 0.0)], []
    for t in range(max_len):
        cands = sorted(_expand(log_probs, t, live, bos), key=lambda c: -c[1])
        finished += [c for c in cands if c[0][-1] == eos]  # "every hypothesis that ends is done"
        live = [c for c in cands[:beam_size] if c[0][-1] != eos]
        if not live:
            break
    tokens, s = max(finished + live, key=lambda h: h[1] / len(h[0]) ** alpha)
    return tokens, s / len(tokens) ** alpha


def beam_stops_when_best_finishes(log_probs, bos, eos, beam_size, max_len, alpha):
    live, finished = [([], 0.0)], []
    for t in range(max_len):
        cands = sorted(_expand(log_probs, t, live, bos), key=lambda c: -c[1])[:beam_size]
        finished += [c for c in cands if c[0][-1] == eos]
        live = [c for c in cands if c[0][-1] != eos]
        if not live or cands[0][0][-1] == eos:  # "the best hypothesis is done: stop"
            break
    tokens, s = max(finished + live, key=lambda h: h[1] / len(h[0]) ** alpha)
    return tokens, s / len(tokens) ** alpha


def beam_max_len_norm(log_probs, bos, eos, beam_size, max_len, alpha):  # divides by the number of steps run
    live, finished, steps = [([], 0.0)], [], 0
    for t in range(max_len):
        steps += 1
        cands = sorted(_expand(log_probs, t, live, bos), key=lambda c: -c[1])[:beam_size]
        finished += [c for c in cands if c[0][-1] == eos]
        live = [c for c in cands if c[0][-1] != eos]
        if not live:
            break
    tokens, s = max(finished + live, key=lambda h: h[1] / steps ** alpha)
    return tokens, s / steps ** alpha


def beam_keeps_finished(log_probs, bos, eos, beam_size, max_len, alpha):  # finished ones stay in the beam
    beam = [([], 0.0)]
    for t in range(max_len):
        cands = [h for h in beam if h[0] and h[0][-1] == eos]  # carried over as they are
        cands += _expand(log_probs, t, [h for h in beam if not (h[0] and h[0][-1] == eos)], bos)
        beam = sorted(cands, key=lambda c: -c[1])[:beam_size]
        if all(toks[-1] == eos for toks, _ in beam):
            break
    tokens, s = max(beam, key=lambda h: h[1] / len(h[0]) ** alpha)
    return tokens, s / len(tokens) ** alpha


def beam_right_topk(log_probs, bos, eos, beam_size, max_len, alpha):
    V = log_probs.shape[-1]
    seqs, scores, done = [[]], log_probs.new_zeros(1), []
    for t in range(max_len):
        last = [s[-1] if s else bos for s in seqs]
        total = (scores[:, None] + log_probs[t, last]).reshape(-1)
        top = total.topk(min(beam_size, total.numel()))
        seqs_next, scores_next = [], []
        for value, index in zip(top.values, top.indices.tolist(), strict=True):
            seq = seqs[index // V] + [index % V]
            if index % V == eos:
                done.append((seq, float(value)))
            else:
                seqs_next.append(seq)
                scores_next.append(value)
        if not seqs_next:
            break
        seqs, scores = seqs_next, torch.stack(scores_next)
    else:
        done += [(s, float(v)) for s, v in zip(seqs, scores, strict=True)]
    best = max(done, key=lambda h: h[1] / len(h[0]) ** alpha)
    return best[0], torch.tensor(best[1] / len(best[0]) ** alpha)


def beam_right_normalised_pruning(log_probs, bos, eos, beam_size, max_len, alpha):
    # ranking a step's candidates by the normalised score is the same ranking: they all have length t + 1
    table = log_probs.double().tolist()
    live, finished = {(): 0.0}, {}
    for t in range(max_len):
        cands = {toks + (j,): s + x for toks, s in live.items() for j, x in enumerate(table[t][toks[-1] if toks
                                                                                                else bos])}
        kept = sorted(cands, key=lambda k: cands[k] / (t + 1) ** alpha, reverse=True)[:beam_size]
        live = {k: cands[k] for k in kept if k[-1] != eos}
        finished.update({k: cands[k] for k in kept if k[-1] == eos})
        if not live:
            break
    everything = {**finished, **live}
    best = max(everything, key=lambda k: everything[k] / len(k) ** alpha)
    return list(best), everything[best] / len(best) ** alpha


def beam_right_heap(log_probs, bos, eos, beam_size, max_len, alpha):
    import heapq
    live, pool = [(0.0, ())], []
    for t in range(max_len):
        cands = [(s + float(log_probs[t, toks[-1] if toks else bos, j]), toks + (j,))
                 for s, toks in live for j in range(log_probs.shape[-1])]
        best = heapq.nlargest(beam_size, cands)
        pool += [(s, toks) for s, toks in best if toks[-1] == eos]
        live = [(s, toks) for s, toks in best if toks[-1] != eos]
        if not live:
            break
    pool += [(s, toks) for s, toks in live]
    s, toks = max(pool, key=lambda h: h[0] / len(h[1]) ** alpha)
    return list(toks), s / len(toks) ** alpha


# ----------------------------------------------------------------------------- corpus_bleu

def _grams(tokens, n):
    return Counter(tuple(tokens[k:k + n]) for k in range(len(tokens) - n + 1))


def _closest(refs, c):
    return min((len(r) for r in refs), key=lambda n: (abs(n - c), n))


def _bleu_from(matches, totals, c, r, scale=100):
    if min(matches) == 0:
        return 0.0
    bp = 1.0 if c > r else math.exp(1 - r / c)
    return scale * bp * math.exp(sum(math.log(m / t) for m, t in zip(matches, totals, strict=True)) / 4)


def bleu_no_clip(candidates, references):
    matches, totals, c, r = [0] * 4, [0] * 4, 0, 0
    for cand, refs in zip(candidates, references, strict=True):
        c, r = c + len(cand), r + _closest(refs, len(cand))
        for n in range(1, 5):
            grams = [tuple(cand[k:k + n]) for k in range(len(cand) - n + 1)]
            in_refs = {tuple(ref[k:k + n]) for ref in refs for k in range(len(ref) - n + 1)}
            matches[n - 1] += sum(g in in_refs for g in grams)
            totals[n - 1] += len(grams)
    return _bleu_from(matches, totals, c, r)


def bleu_clip_sum(candidates, references):
    matches, totals, c, r = [0] * 4, [0] * 4, 0, 0
    for cand, refs in zip(candidates, references, strict=True):
        c, r = c + len(cand), r + _closest(refs, len(cand))
        for n in range(1, 5):
            ref_counts = sum((_grams(ref, n) for ref in refs), Counter())
            matches[n - 1] += sum((_grams(cand, n) & ref_counts).values())
            totals[n - 1] += max(0, len(cand) - n + 1)
    return _bleu_from(matches, totals, c, r)


def bleu_sentence_mean(candidates, references):
    scores = []
    for cand, refs in zip(candidates, references, strict=True):
        m, t = [], []
        for n in range(1, 5):
            most = Counter()
            for ref in refs:
                most |= _grams(ref, n)
            m.append(sum((_grams(cand, n) & most).values()))
            t.append(max(0, len(cand) - n + 1))
        scores.append(_bleu_from(m, t, len(cand), _closest(refs, len(cand))))
    return sum(scores) / len(scores)


def bleu_arithmetic(candidates, references):
    matches, totals, c, r = [0] * 4, [0] * 4, 0, 0
    for cand, refs in zip(candidates, references, strict=True):
        c, r = c + len(cand), r + _closest(refs, len(cand))
        for n in range(1, 5):
            most = Counter()
            for ref in refs:
                most |= _grams(ref, n)
            matches[n - 1] += sum((_grams(cand, n) & most).values())
            totals[n - 1] += max(0, len(cand) - n + 1)
    bp = 1.0 if c > r else math.exp(1 - r / c)
    return 100 * bp * sum(m / t for m, t in zip(matches, totals, strict=True)) / 4


def _bleu_with_r(candidates, references, pick):
    matches, totals, c, r = [0] * 4, [0] * 4, 0, 0
    for cand, refs in zip(candidates, references, strict=True):
        c, r = c + len(cand), r + pick(refs, len(cand))
        for n in range(1, 5):
            most = Counter()
            for ref in refs:
                most |= _grams(ref, n)
            matches[n - 1] += sum((_grams(cand, n) & most).values())
            totals[n - 1] += max(0, len(cand) - n + 1)
    return _bleu_from(matches, totals, c, r)


def bleu_shortest_ref(candidates, references):
    return _bleu_with_r(candidates, references, lambda refs, c: min(len(x) for x in refs))


def bleu_first_closest(candidates, references):  # ties go to whichever reference comes first
    return _bleu_with_r(candidates, references, lambda refs, c: len(min(refs, key=lambda x: abs(len(x) - c))))


def bleu_first_ref_only(candidates, references):  # only the first reference counts
    return _bleu_with_r(candidates, [refs[:1] for refs in references], _closest)


def bleu_bp_always(candidates, references):
    matches, totals, c, r = [0] * 4, [0] * 4, 0, 0
    for cand, refs in zip(candidates, references, strict=True):
        c, r = c + len(cand), r + _closest(refs, len(cand))
        for n in range(1, 5):
            most = Counter()
            for ref in refs:
                most |= _grams(ref, n)
            matches[n - 1] += sum((_grams(cand, n) & most).values())
            totals[n - 1] += max(0, len(cand) - n + 1)
    if 0 in matches:
        return 0.0
    return 100 * math.exp(1 - r / c) * math.exp(sum(math.log(m / t) for m, t in zip(matches, totals,
                                                                                     strict=True)) / 4)


def bleu_unit_scale(candidates, references):
    matches, totals, c, r = [0] * 4, [0] * 4, 0, 0
    for cand, refs in zip(candidates, references, strict=True):
        c, r = c + len(cand), r + _closest(refs, len(cand))
        for n in range(1, 5):
            most = Counter()
            for ref in refs:
                most |= _grams(ref, n)
            matches[n - 1] += sum((_grams(cand, n) & most).values())
            totals[n - 1] += max(0, len(cand) - n + 1)
    return _bleu_from(matches, totals, c, r, scale=1)


def bleu_total_is_length(candidates, references):  # counts len(cand) n-grams for every n
    matches, totals, c, r = [0] * 4, [0] * 4, 0, 0
    for cand, refs in zip(candidates, references, strict=True):
        c, r = c + len(cand), r + _closest(refs, len(cand))
        for n in range(1, 5):
            most = Counter()
            for ref in refs:
                most |= _grams(ref, n)
            matches[n - 1] += sum((_grams(cand, n) & most).values())
            totals[n - 1] += len(cand)
    return _bleu_from(matches, totals, c, r)


def bleu_smoothed(candidates, references):  # a floor on the precisions, "to avoid log(0)"
    matches, totals, c, r = [0] * 4, [0] * 4, 0, 0
    for cand, refs in zip(candidates, references, strict=True):
        c, r = c + len(cand), r + _closest(refs, len(cand))
        for n in range(1, 5):
            most = Counter()
            for ref in refs:
                most |= _grams(ref, n)
            matches[n - 1] += sum((_grams(cand, n) & most).values())
            totals[n - 1] += max(0, len(cand) - n + 1)
    bp = 1.0 if c > r else math.exp(1 - r / c)
    return 100 * bp * math.exp(sum(math.log(max(m / t, 1e-9)) for m, t in zip(matches, totals, strict=True)) / 4)


def bleu_tensor(candidates, references):  # a tensor, where the statement asks for a number
    return torch.tensor(_bleu_with_r(candidates, references, _closest), dtype=torch.float64)


def bleu_right_loops(candidates, references):
    m, t, c, r = [0] * 5, [0] * 5, 0, 0
    for cand, refs in zip(candidates, references, strict=True):
        c += len(cand)
        lens = sorted(len(x) for x in refs)
        r += min(lens, key=lambda n: abs(n - len(cand)))  # sorted first: ties go to the shorter
        for n in range(1, 5):
            seen = {}
            for k in range(len(cand) - n + 1):
                g = tuple(cand[k:k + n])
                seen[g] = seen.get(g, 0) + 1
            for g, k in seen.items():
                m[n] += min(k, max(sum(1 for i in range(len(x) - n + 1) if tuple(x[i:i + n]) == g) for x in refs))
            t[n] += max(0, len(cand) - n + 1)
    if any(m[n] == 0 for n in range(1, 5)):
        return 0.0
    log_bp = min(0.0, 1 - r / c)
    return 100 * math.exp(log_bp + sum(math.log(m[n]) - math.log(t[n]) for n in range(1, 5)) / 4)


def bleu_right_product(candidates, references):
    stats = [[0, 0] for _ in range(4)]
    c = r = 0
    for cand, refs in zip(candidates, references, strict=True):
        cand = list(cand)
        c += len(cand)
        r += sorted((abs(len(x) - len(cand)), len(x)) for x in refs)[0][1]
        for n in range(4):
            cc = _grams(cand, n + 1)
            clip = {g: max(_grams(list(x), n + 1)[g] for x in refs) for g in cc}
            stats[n][0] += sum(min(k, clip[g]) for g, k in cc.items())
            stats[n][1] += sum(cc.values())
    prod = 1.0
    for m, t in stats:
        prod *= m / t
    bp = math.exp(1 - r / c) if c <= r else 1.0
    return 100.0 * bp * prod ** 0.25


def bleu_right_numpy_float(candidates, references):
    import numpy as np
    return np.float64(_bleu_with_r(candidates, references, _closest))


# ----------------------------------------------------------------------------- the lists

T, G, B, L = TEACHER_FORCING_LOSS, GREEDY, BEAM, BLEU_CHECK

WRONG = {
    "teacher_forcing_loss": [
        Student(tf_no_shift, _has(T, "did not shift")),
        Student(tf_pad_zero, _has(T, "assumed the padding id is 0")),
        Student(tf_no_mask, _has(T, "averaged over padding too")),
        Student(tf_per_sentence, _has(T, "averaged each sentence")),
        Student(tf_naive_log_softmax, _has(T, "computed the softmax as exp(logits)")),
        Student(tf_divide_by_batch, _has(T, "divided the summed loss by the batch size")),
        Student(tf_input_mask, _has(T, "masked with the decoder's inputs")),
        Student(tf_loop_off_by_one, None, "a loop that skips the last position"),
        Student(tf_global_max, None, "one maximum for the whole batch: rows far below it underflow"),
        Student(tf_zeroes_pad_logits, None, "zeroes the caller's padded logits in place"),
        Student(tf_python_float, None, "the right number as a Python float: nothing to train through"),
        Student(tf_pad_smallest, None, "keeps the ids above pad_id"),
        Student(tf_numpy, None, "returns a NumPy array"),
    ],
    "greedy_decode": [
        Student(greedy_no_stop, _has(G, "kept going after <eos>")),
        Student(greedy_drops_eos, _has(G, "left <eos> out")),
        Student(greedy_with_bos, _has(G, "put <bos> in the output")),
        Student(greedy_bos_row, _has(G, "looked up the <bos> row")),
        Student(greedy_short, _has(G, "stopped after max_len - 1")),
        Student(greedy_column, None, "argmax over the wrong axis of the table"),
        Student(greedy_whole_table, None, "runs over every step of the table, ignoring max_len"),
        Student(greedy_start_zero, None, "starts from token 0 instead of bos"),
        Student(greedy_not_empty, None, "does not stop at an <eos> produced first"),
    ],
    "beam_search": [
        Student(beam_raw_pick, _has(B, "picked the final answer by the raw sum")),
        Student(beam_len_with_bos, _has(B, "counted <bos> in the length")),
        Student(beam_no_norm, _has(B, "no length normalisation")),
        Student(beam_extends_finished, _has(B, "kept extending hypotheses after <eos>")),
        Student(beam_refill, _has(B, "refilled the beam")),
        Student(beam_only_finished, _has(B, "left out the hypotheses cut off")),
        Student(beam_len_without_eos, None, "normalised by the length without <eos>"),
        Student(beam_times_alpha, None, "s / len * alpha instead of s / len**alpha"),
        Student(beam_stops_when_best_finishes, _has(B, "stopped as soon as")),
        Student(beam_max_len_norm, None, "normalised by the number of steps run, not each hypothesis's length"),
        Student(beam_keeps_finished, _has(B, "kept finished hypotheses in the beam")),
        Student(beam_sets_aside_every_finished, _has(B, "set aside every candidate that ends in <eos>")),
    ],
    "corpus_bleu": [
        Student(bleu_no_clip, _has(L, "did not clip")),
        Student(bleu_clip_sum, _has(L, "clipped to the total count")),
        Student(bleu_sentence_mean, _has(L, "averaged sentence-level BLEU")),
        Student(bleu_arithmetic, _has(L, "averaged the precisions arithmetically")),
        Student(bleu_shortest_ref, _has(L, "used the shortest reference")),
        Student(bleu_bp_always, _has(L, "applied the brevity penalty to long")),
        Student(bleu_unit_scale, _has(L, "returned BLEU on a 0-1 scale")),
        Student(bleu_first_closest, None, "ties between equally close references go to the first listed"),
        Student(bleu_first_ref_only, None, "only the first reference counts"),
        Student(bleu_total_is_length, None, "len(cand) n-grams for every n"),
        Student(bleu_smoothed, None, "a floor on the precisions"),
        Student(bleu_tensor, None, "returns a tensor"),
    ],
}

RIGHT = {
    "teacher_forcing_loss": [tf_right_logsumexp_loop, tf_right_one_hot, tf_right_flat],
    "greedy_decode": [greedy_right_while, greedy_right_tensor, greedy_right_topk],
    "beam_search": [beam_right_topk, beam_right_normalised_pruning, beam_right_heap],
    "corpus_bleu": [bleu_right_loops, bleu_right_product, bleu_right_numpy_float],
}


# ============================================================================= the thinking questions
# (chapter 3's derive and count questions, lmbook.tasks.questions.ch03)

from lmbook.tasks.questions.ch03 import BEAM_CANDIDATES, BLEU_OF_PREFIX, MASKED_MEAN_LOSS  # noqa: E402


def mm_mean_of_means(lengths, losses):
    return sum(losses) / len(losses)


def mm_padded(lengths, losses):
    T = max(lengths)
    return sum(n * loss for n, loss in zip(lengths, losses, strict=False)) / (len(lengths) * T)


def mm_sum(lengths, losses):
    return sum(n * loss for n, loss in zip(lengths, losses, strict=False))


def mm_per_sentence(lengths, losses):
    return sum(n * loss for n, loss in zip(lengths, losses, strict=False)) / len(lengths)


def mm_plus_eos(lengths, losses):
    n = [length + 1 for length in lengths]
    return sum(a * b for a, b in zip(n, losses, strict=False)) / sum(n)


def mm_over_longest(lengths, losses):
    return sum(n * loss for n, loss in zip(lengths, losses, strict=False)) / max(lengths)


def mm_right_loop(lengths, losses):
    total, count = 0.0, 0
    for n, loss in zip(lengths, losses, strict=False):
        for _ in range(n):
            total += loss
            count += 1
    return total / count


def mm_right_torch(lengths, losses):
    n, loss = torch.tensor(lengths, dtype=torch.float64), torch.tensor(losses, dtype=torch.float64)
    return float((n * loss).sum() / n.sum())


def mm_right_weights(lengths, losses):
    weights = [n / sum(lengths) for n in lengths]
    return math.fsum(w * loss for w, loss in zip(weights, losses, strict=False))


def bc_k_prefixes_at_start(V, k, T):
    return k * V * T


def bc_k_squared(V, k, T):
    return V + (T - 1) * k * k


def bc_greedy(V, k, T):
    return T * V


def bc_no_first_step(V, k, T):
    return (T - 1) * k * V


def bc_one_continuation(V, k, T):
    return k * T


def bc_first_plus_t(V, k, T):  # counts T steps after the first
    return V + T * k * V


def bc_right_loop(V, k, T):
    total, prefixes = 0, 1
    for _ in range(T):
        total += prefixes * V
        prefixes = min(k, prefixes * V)
    return total


def bc_right_factored(V, k, T):
    return V * (1 + k * (T - 1))


def bc_right_sum(V, k, T):
    return sum(V if t == 0 else k * V for t in range(T))


def bp_no_penalty(c, r):
    return 100.0


def bp_flipped(c, r):
    return 100 * math.exp(1 - c / r)


def bp_ratio(c, r):
    return 100 * c / r


def bp_unit_scale(c, r):
    return math.exp(1 - r / c) if c < r else 1.0


def bp_precision_too(c, r):  # "a shorter candidate also has lower precision"
    return 100 * (c / r) * math.exp(1 - r / c)


def bp_forgot_one(c, r):
    return 100 * math.exp(-r / c)


def bp_right_if(c, r):
    return 100 * math.exp(1 - r / c) if c < r else 100.0


def bp_right_min(c, r):
    return 100 * min(1.0, math.exp(1 - r / c))


def bp_right_geometric(c, r):
    p = [1.0, 1.0, 1.0, 1.0]  # every clipped precision of a prefix
    bp = 1.0 if c > r else math.exp(1 - r / c)
    return 100 * bp * math.exp(sum(math.log(x) for x in p) / 4)


WRONG.update({
    "masked_mean_loss": [
        Student(mm_mean_of_means, _has(MASKED_MEAN_LOSS, "averaged the sentences' mean losses")),
        Student(mm_padded, _has(MASKED_MEAN_LOSS, "divided by every position of the padded batch")),
        Student(mm_sum, _has(MASKED_MEAN_LOSS, "returned the sum over the tokens")),
        Student(mm_per_sentence, _has(MASKED_MEAN_LOSS, "divided by the number of sentences")),
        Student(mm_plus_eos, _has(MASKED_MEAN_LOSS, "added a token for <eos>")),
        Student(mm_over_longest, None),
    ],
    "beam_candidates": [
        Student(bc_k_prefixes_at_start, _has(BEAM_CANDIDATES, "started with k prefixes")),
        Student(bc_k_squared, _has(BEAM_CANDIDATES, "scored only k continuations")),
        Student(bc_greedy, _has(BEAM_CANDIDATES, "counted greedy decoding's candidates")),
        Student(bc_no_first_step, _has(BEAM_CANDIDATES, "left out the first step")),
        Student(bc_one_continuation, _has(BEAM_CANDIDATES, "gave each prefix one continuation")),
        Student(bc_first_plus_t, None),
    ],
    "bleu_of_prefix": [
        Student(bp_no_penalty, _has(BLEU_OF_PREFIX, "left out the brevity penalty")),
        Student(bp_flipped, _has(BLEU_OF_PREFIX, "wrote the penalty as exp(1 - c/r)")),
        Student(bp_ratio, _has(BLEU_OF_PREFIX, "took the length ratio")),
        Student(bp_unit_scale, _has(BLEU_OF_PREFIX, "gave BLEU between 0 and 1")),
        Student(bp_precision_too, _has(BLEU_OF_PREFIX, "lowered the precisions too")),
        Student(bp_forgot_one, None),
    ],
})

RIGHT.update({
    "masked_mean_loss": [mm_right_loop, mm_right_torch, mm_right_weights],
    "beam_candidates": [bc_right_loop, bc_right_factored, bc_right_sum],
    "bleu_of_prefix": [bp_right_if, bp_right_min, bp_right_geometric],
})
