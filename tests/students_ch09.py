"""Exercise 9 (GPT) as students write it: wrong answers with the mistake they have, and right ones written differently
from the reference (see test_students.py). The notebook's given (locked) helpers, GPT2_PATTERN, split_heads and
merge_heads, are copied here as the notebook has them."""

from __future__ import annotations

import math
from collections import Counter
from itertools import chain

import regex
import torch
import torch.nn.functional as F
from check_contract import Student

from lmbook.tasks.ch09 import CACHED_ATTENTION, DECODE, ENCODE, FORMAT_PAIR, GPT_BLOCK, POOL_LAST, TRAIN_BPE

GPT2_PATTERN = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
INF = float("-inf")


def split_heads(x, n_head):
    B, n, d = x.shape
    return x.view(B, n, n_head, d // n_head).transpose(1, 2)


def merge_heads(y):
    B, h, n, d_head = y.shape
    return y.transpose(1, 2).reshape(B, n, h * d_head)


def _has(check, start: str) -> str:
    """The misconception of ``check``'s Mutant that begins with ``start`` (word for word)."""
    (text,) = {m.misconception for m in check.mutants if m.misconception.startswith(start)}
    return text


def merge_pair(ids, pair, new):
    out, i = [], 0
    while i < len(ids):
        if i < len(ids) - 1 and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


# ----------------------------------------------------------------------------- train_bpe


def _pair_counts(seqs):
    counts = Counter()
    for s in seqs:
        for i in range(len(s) - 1):
            counts[(s[i], s[i + 1])] += 1
    return counts


def _train(seqs, n_merges, pick, min_count=2, merge=merge_pair):
    merges = []
    for k in range(n_merges):
        counts = _pair_counts(seqs)
        if not counts:
            break
        pair, c = pick(counts)
        if c < min_count:
            break
        merges.append(pair)
        seqs = [merge(s, pair, 256 + k) for s in seqs]
    return merges


def _smallest_of_most(counts):
    best = max(counts.values())
    return min(p for p in counts if counts[p] == best), best


def bpe_whole_text(text, n_merges):  # one long sequence of bytes
    return _train([list(text.encode("utf-8"))], n_merges, _smallest_of_most)


def bpe_most_common(text, n_merges):  # Counter.most_common keeps the first of the tied pairs
    return _train([list(p.encode("utf-8")) for p in GPT2_PATTERN.findall(text)], n_merges,
                  lambda counts: counts.most_common(1)[0])


def bpe_sort_descending(text, n_merges):  # sorted by (count, pair) from the top: the largest pair wins a tie
    return _train([list(p.encode("utf-8")) for p in GPT2_PATTERN.findall(text)], n_merges,
                  lambda counts: max(counts.items(), key=lambda kv: (kv[1], kv[0])))


def _merge_for_loop(ids, pair, new):  # forgets to skip the right half of a merged pair when it starts another
    out = []
    for i in range(len(ids)):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new)
        elif i > 0 and (ids[i - 1], ids[i]) == pair:
            pass
        else:
            out.append(ids[i])
    return out


def bpe_overlapping(text, n_merges):
    return _train([list(p.encode("utf-8")) for p in GPT2_PATTERN.findall(text)], n_merges, _smallest_of_most,
                  merge=_merge_for_loop)


def bpe_counted_once(text, n_merges):  # the ranking of the first counts, read from the top
    counts = _pair_counts([list(p.encode("utf-8")) for p in GPT2_PATTERN.findall(text)])
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [pair for pair, c in ranked if c >= 2][:n_merges]


def bpe_until_no_pair(text, n_merges):  # stops only when nothing is left to merge
    return _train([list(p.encode("utf-8")) for p in GPT2_PATTERN.findall(text)], n_merges, _smallest_of_most,
                  min_count=1)


def bpe_characters(text, n_merges):  # code points, not bytes
    return _train([[ord(c) for c in p] for p in GPT2_PATTERN.findall(text)], n_merges, _smallest_of_most)


def bpe_distinct_words_once(text, n_merges):  # each distinct pre-token counted once, whatever its frequency
    return _train([list(p.encode("utf-8")) for p in set(GPT2_PATTERN.findall(text))], n_merges, _smallest_of_most)


def bpe_split_on_spaces(text, n_merges):  # str.split instead of GPT-2's pattern
    return _train([list(w.encode("utf-8")) for w in text.split()], n_merges, _smallest_of_most)


def bpe_right_all_pieces(text, n_merges):  # every piece, repeats included, in one flat list; sort key (-count, pair)
    seqs = [list(p.encode("utf-8")) for p in GPT2_PATTERN.findall(text)]
    merges = []
    while len(merges) < n_merges:
        counts = _pair_counts(seqs)
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        if not ranked or ranked[0][1] < 2:
            break
        pair = ranked[0][0]
        seqs = [merge_pair(s, pair, 256 + len(merges)) for s in seqs]
        merges.append(pair)
    return merges


def bpe_right_bytes_tokens(text, n_merges):  # tokens as bytes objects, ids looked up at the end
    freq = Counter(GPT2_PATTERN.findall(text))
    words = {w: [bytes([b]) for b in w.encode("utf-8")] for w in freq}
    id_of = {bytes([i]): i for i in range(256)}
    merges = []
    for _ in range(n_merges):
        counts = Counter()
        for w, toks in words.items():
            for a, b in zip(toks, toks[1:], strict=False):
                counts[(a, b)] += freq[w]
        best = max(counts.values(), default=0)
        if best < 2:
            break
        a, b = min((p for p in counts if counts[p] == best), key=lambda p: (id_of[p[0]], id_of[p[1]]))
        id_of[a + b] = 256 + len(merges)
        merges.append((id_of[a], id_of[b]))
        for w, toks in words.items():
            out, i = [], 0
            while i < len(toks):
                if toks[i:i + 2] == [a, b]:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(toks[i])
                    i += 1
            words[w] = out
    return merges


def bpe_right_incremental(text, n_merges):  # counts updated only for the words that hold the merged pair
    freq = Counter(GPT2_PATTERN.findall(text))
    words = [list(w.encode("utf-8")) for w in freq]
    weights = list(freq.values())
    counts = Counter()
    for w, f in zip(words, weights, strict=True):
        for p in zip(w, w[1:], strict=False):
            counts[p] += f
    merges = []
    while len(merges) < n_merges:
        live = {p: c for p, c in counts.items() if c > 0}
        if not live or max(live.values()) < 2:
            break
        best = max(live.values())
        pair = min(p for p, c in live.items() if c == best)
        new = 256 + len(merges)
        for k, w in enumerate(words):
            if not any(q == pair for q in zip(w, w[1:], strict=False)):
                continue
            for p in zip(w, w[1:], strict=False):
                counts[p] -= weights[k]
            words[k] = w = merge_pair(w, pair, new)
            for p in zip(w, w[1:], strict=False):
                counts[p] += weights[k]
        merges.append(pair)
    return merges


# ----------------------------------------------------------------------------- encode


def _encode_pieces(pieces, merges, choose, to_ids=lambda p: list(p.encode("utf-8")), loop=True):
    rank = {tuple(m): r for r, m in enumerate(merges)}
    ids = []
    for piece in pieces:
        toks = to_ids(piece)
        while len(toks) > 1:
            cands = [p for p in zip(toks, toks[1:], strict=False) if p in rank]
            if not cands:
                break
            pair = choose(cands, rank)
            toks = merge_pair(toks, pair, 256 + rank[pair])
            if not loop:
                break
        ids += toks
    return ids


def _lowest(cands, rank):
    return min(cands, key=lambda p: rank[p])


def enc_whole_text(text, merges):
    return _encode_pieces([text], merges, _lowest)


def enc_most_frequent(text, merges):  # like training: the commonest pair of the piece
    return _encode_pieces(GPT2_PATTERN.findall(text), merges, lambda cands, rank: Counter(cands).most_common(1)[0][0])


def enc_latest_first(text, merges):
    return _encode_pieces(GPT2_PATTERN.findall(text), merges, lambda cands, rank: max(cands, key=rank.get))


def enc_split(text, merges):
    return _encode_pieces(text.split(), merges, _lowest)


def enc_latin1(text, merges):
    return _encode_pieces(GPT2_PATTERN.findall(text), merges, _lowest, to_ids=lambda p: list(p.encode("latin-1")))


def enc_one_merge_per_piece(text, merges):  # the while loop forgotten: one merge, then the next piece
    return _encode_pieces(GPT2_PATTERN.findall(text), merges, _lowest, loop=False)


def enc_code_points(text, merges):
    return _encode_pieces(GPT2_PATTERN.findall(text), merges, _lowest, to_ids=lambda p: [ord(c) for c in p])


def enc_right_first_occurrence(text, merges):  # merges one occurrence at a time, looking again each time
    rank = {tuple(m): r for r, m in enumerate(merges)}
    out = []
    for piece in GPT2_PATTERN.findall(text):
        toks = list(piece.encode("utf-8"))
        while True:
            ranked = [(rank[(a, b)], i) for i, (a, b) in enumerate(zip(toks, toks[1:], strict=False))
                      if (a, b) in rank]
            if not ranked:
                break
            r, i = min(ranked)
            toks[i:i + 2] = [256 + r]
        out.extend(toks)
    return out


def enc_right_every_merge_in_order(text, merges):  # replays the merges in the order they were learnt
    out = []
    for piece in GPT2_PATTERN.findall(text):
        toks = list(piece.encode("utf-8"))
        for r, (a, b) in enumerate(merges):
            toks = merge_pair(toks, (a, b), 256 + r)
        out.extend(toks)
    return out


def enc_right_cached(text, merges):  # a piece seen before is looked up
    rank = {tuple(m): r for r, m in enumerate(merges)}
    seen = {}
    out = []
    for piece in GPT2_PATTERN.findall(text):
        if piece not in seen:
            toks = list(piece.encode("utf-8"))
            while len(toks) >= 2:
                r, pair = min((rank.get(p, math.inf), p) for p in zip(toks, toks[1:], strict=False))
                if r == math.inf:
                    break
                toks = merge_pair(toks, pair, 256 + r)
            seen[piece] = toks
        out += seen[piece]
    return out


# ----------------------------------------------------------------------------- decode


def _table(merges):
    table = [bytes([i]) for i in range(256)]
    for a, b in merges:
        table.append(table[a] + table[b])
    return table


def dec_each_token(ids, merges):
    table = _table(merges)
    return "".join(table[i].decode("utf-8", errors="replace") for i in ids)


def dec_with_spaces(ids, merges):
    table = _table(merges)
    return " ".join(table[i].decode("utf-8", "replace") for i in ids)


def dec_latin1(ids, merges):
    table = _table(merges)
    return b"".join(table[i] for i in ids).decode("latin-1")


def dec_ignore(ids, merges):
    table = _table(merges)
    return b"".join(table[i] for i in ids).decode("utf-8", errors="ignore")


def dec_strict(ids, merges):
    table = _table(merges)
    return b"".join(table[i] for i in ids).decode("utf-8")


def dec_one_level(ids, merges):  # a merge's bytes taken as its two ids: raises once a merge builds on a merge
    table = {i: bytes([i]) for i in range(256)}
    for r, (a, b) in enumerate(merges):
        table[256 + r] = bytes([a, b])
    return b"".join(table[i] for i in ids).decode("utf-8", errors="replace")


def dec_chr(ids, merges):  # each id as a character
    return "".join(chr(i) for i in ids)


def dec_right_bytearray(ids, merges):
    table = _table(merges)
    buf = bytearray()
    for i in ids:
        buf.extend(table[i])
    return buf.decode("utf-8", "replace")


def dec_right_recursive(ids, merges):
    def expand(i):
        if i < 256:
            return [i]
        a, b = merges[i - 256]
        return expand(a) + expand(b)
    return bytes(chain.from_iterable(expand(i) for i in ids)).decode(errors="replace")


def dec_right_stack(ids, merges):  # a stack, expanding the leftmost id first
    out, stack = [], list(reversed(ids))
    while stack:
        i = stack.pop()
        if i < 256:
            out.append(i)
        else:
            a, b = merges[i - 256]
            stack += [b, a]
    return bytes(out).decode("utf-8", errors="replace")


# ----------------------------------------------------------------------------- gpt_block


def _ln(x, p, i):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return p[f"norm{i}.weight"] * (x - mu) / torch.sqrt(var + 1e-5) + p[f"norm{i}.bias"]


def _attn(h, p, n_head, allowed="causal", scale=None, out_proj=True):
    B, n, d = h.shape
    q, k, v = (split_heads(t, n_head) for t in (h @ p["self_attn.in_proj_weight"].T
                                                + p["self_attn.in_proj_bias"]).split(d, dim=-1))
    s = q @ k.transpose(-1, -2) / math.sqrt(scale or d // n_head)
    ones = torch.ones(n, n, dtype=torch.bool, device=h.device)
    keep = {"causal": ones.tril(), "strict": ones.tril(-1), "all": ones}[allowed]
    y = merge_heads(torch.softmax(s.masked_fill(~keep, INF), -1) @ v)
    return y @ p["self_attn.out_proj.weight"].T + p["self_attn.out_proj.bias"] if out_proj else y


def _mlp(h, p, act=lambda u: F.gelu(u, approximate="tanh")):
    return act(h @ p["linear1.weight"].T + p["linear1.bias"]) @ p["linear2.weight"].T + p["linear2.bias"]


def _ln_constant_statistics(x, p, i):  # the mean and variance as constants, as BatchNorm's running ones
    mu = x.mean(-1, keepdim=True).detach()
    var = ((x - mu) ** 2).mean(-1, keepdim=True).detach()
    return p[f"norm{i}.weight"] * (x - mu) / torch.sqrt(var + 1e-5) + p[f"norm{i}.bias"]


def blk_layer_norm_statistics_detached(x, params, n_head):
    x = x + _attn(_ln_constant_statistics(x, params, 1), params, n_head)
    return x + _mlp(_ln_constant_statistics(x, params, 2), params)


def blk_erf_gelu(x, params, n_head):
    x = x + _attn(_ln(x, params, 1), params, n_head)
    return x + _mlp(_ln(x, params, 2), params, F.gelu)


def blk_relu(x, params, n_head):
    x = x + _attn(_ln(x, params, 1), params, n_head)
    return x + _mlp(_ln(x, params, 2), params, torch.relu)


def blk_no_mask(x, params, n_head):
    x = x + _attn(_ln(x, params, 1), params, n_head, allowed="all")
    return x + _mlp(_ln(x, params, 2), params)


def blk_strict_mask(x, params, n_head):  # tril(-1): the diagonal masked too
    x = x + _attn(_ln(x, params, 1), params, n_head, allowed="strict")
    return x + _mlp(_ln(x, params, 2), params)


def blk_post_ln(x, params, n_head):  # the 2017 paper's order
    x = _ln(x + _attn(x, params, n_head), params, 1)
    return _ln(x + _mlp(x, params), params, 2)


def blk_normalised_residual(x, params, n_head):
    x = _ln(x, params, 1)
    x = x + _attn(x, params, n_head)
    x = _ln(x, params, 2)
    return x + _mlp(x, params)


def blk_scale_d_model(x, params, n_head):
    x = x + _attn(_ln(x, params, 1), params, n_head, scale=x.shape[-1])
    return x + _mlp(_ln(x, params, 2), params)


def blk_no_out_proj(x, params, n_head):
    x = x + _attn(_ln(x, params, 1), params, n_head, out_proj=False)
    return x + _mlp(_ln(x, params, 2), params)


def blk_unbiased_ln(x, params, n_head):  # .var() divides by d − 1
    def ln(h, i):
        return params[f"norm{i}.weight"] * (h - h.mean(-1, keepdim=True)) / torch.sqrt(
            h.var(-1, keepdim=True) + 1e-5) + params[f"norm{i}.bias"]
    x = x + _attn(ln(x, 1), params, n_head)
    return x + _mlp(ln(x, 2), params)


def blk_right_einsum(x, params, n_head):
    p = params
    B, n, d = x.shape
    dh = d // n_head
    h = F.layer_norm(x, (d,), p["norm1.weight"], p["norm1.bias"])
    qkv = torch.einsum("bnd,ed->bne", h, p["self_attn.in_proj_weight"]) + p["self_attn.in_proj_bias"]
    q, k, v = qkv.view(B, n, 3, n_head, dh).unbind(2)
    s = torch.einsum("bihd,bjhd->bhij", q, k) / dh ** 0.5
    i = torch.arange(n, device=x.device)
    s = s.masked_fill(i[None, :] > i[:, None], INF)
    y = torch.einsum("bhij,bjhd->bihd", s.softmax(-1), v).reshape(B, n, d)
    x = x + F.linear(y, p["self_attn.out_proj.weight"], p["self_attn.out_proj.bias"])
    return x + _mlp(F.layer_norm(x, (d,), p["norm2.weight"], p["norm2.bias"]), p)


def blk_right_head_loop(x, params, n_head):
    p = params
    B, n, d = x.shape
    dh = d // n_head
    h = _ln(x, p, 1)
    W, b = p["self_attn.in_proj_weight"], p["self_attn.in_proj_bias"]
    future = torch.triu(torch.ones(n, n, dtype=torch.bool, device=x.device), 1)
    heads = []
    for j in range(n_head):
        sl = slice(j * dh, (j + 1) * dh)
        q = h @ W[:d][sl].T + b[:d][sl]
        k = h @ W[d:2 * d][sl].T + b[d:2 * d][sl]
        v = h @ W[2 * d:][sl].T + b[2 * d:][sl]
        a = torch.softmax((q @ k.transpose(1, 2) / math.sqrt(dh)).masked_fill(future, INF), dim=-1)
        heads.append(a @ v)
    x = x + torch.cat(heads, -1) @ p["self_attn.out_proj.weight"].T + p["self_attn.out_proj.bias"]
    return x + _mlp(_ln(x, p, 2), p)


def blk_right_formula_gelu(x, params, n_head):  # the tanh GELU written out, the mask as an additive bias
    def gelu_tanh(u):
        return 0.5 * u * (1 + torch.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u ** 3)))

    p = params
    n, d = x.shape[1], x.shape[2]
    bias = torch.full((n, n), INF, dtype=x.dtype, device=x.device).triu(1)
    q, k, v = (split_heads(t, n_head) for t in
               F.linear(_ln(x, p, 1), p["self_attn.in_proj_weight"], p["self_attn.in_proj_bias"]).chunk(3, -1))
    a = torch.softmax(q @ k.mT / math.sqrt(d // n_head) + bias, dim=-1)
    x = x + F.linear(merge_heads(a @ v), p["self_attn.out_proj.weight"], p["self_attn.out_proj.bias"])
    return x + _mlp(_ln(x, p, 2), p, gelu_tanh)


# ----------------------------------------------------------------------------- cached_attention


def _project(x, params, n_head):
    return (split_heads(t, n_head) for t in
            F.linear(x, params["in_proj_weight"], params["in_proj_bias"]).chunk(3, dim=-1))


def _attend(q, k, v, keep, params):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    y = merge_heads(torch.softmax(s.masked_fill(~keep, INF), dim=-1) @ v)
    return F.linear(y, params["out_proj.weight"], params["out_proj.bias"])


def _shifted(n_new, n_k, device):
    return torch.ones(n_new, n_k, dtype=torch.bool, device=device).tril(n_k - n_new)


def kv_attend_then_append(x_new, cache, params, n_head):
    q, k, v = _project(x_new, params, n_head)
    if cache is None:
        y = _attend(q, k, v, _shifted(q.shape[2], k.shape[2], x_new.device), params)
        return y, {"k": k, "v": v}
    y = _attend(q, cache["k"], cache["v"], torch.ones(q.shape[2], cache["k"].shape[2], dtype=torch.bool,
                                                      device=x_new.device), params)
    return y, {"k": torch.cat([cache["k"], k], 2), "v": torch.cat([cache["v"], v], 2)}


def kv_old_cache_returned(x_new, cache, params, n_head):
    q, k, v = _project(x_new, params, n_head)
    K = k if cache is None else torch.cat([cache["k"], k], 2)
    V = v if cache is None else torch.cat([cache["v"], v], 2)
    return _attend(q, K, V, _shifted(q.shape[2], K.shape[2], x_new.device), params), cache


def kv_mask_from_the_start(x_new, cache, params, n_head):
    q, k, v = _project(x_new, params, n_head)
    if cache is not None:
        k, v = torch.cat([cache["k"], k], 2), torch.cat([cache["v"], v], 2)
    keep = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=x_new.device).tril()
    return _attend(q, k, v, keep, params), {"k": k, "v": v}


def kv_prepended(x_new, cache, params, n_head):
    q, k, v = _project(x_new, params, n_head)
    if cache is not None:
        k, v = torch.cat([k, cache["k"]], 2), torch.cat([v, cache["v"]], 2)
    return _attend(q, k, v, _shifted(q.shape[2], k.shape[2], x_new.device), params), {"k": k, "v": v}


def kv_mask_only_for_the_prompt(x_new, cache, params, n_head):  # one token at a time needs no mask, it thought
    q, k, v = _project(x_new, params, n_head)
    if cache is None:
        keep = _shifted(q.shape[2], k.shape[2], x_new.device)
    else:
        k, v = torch.cat([cache["k"], k], 2), torch.cat([cache["v"], v], 2)
        keep = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=x_new.device)
    return _attend(q, k, v, keep, params), {"k": k, "v": v}


def kv_scale_d_model(x_new, cache, params, n_head):
    q, k, v = _project(x_new, params, n_head)
    if cache is not None:
        k, v = torch.cat([cache["k"], k], 2), torch.cat([cache["v"], v], 2)
    q = q * math.sqrt(q.shape[-1]) / math.sqrt(x_new.shape[-1])  # so that _attend's 1/sqrt(d_head) is 1/sqrt(d)
    return _attend(q, k, v, _shifted(q.shape[2], k.shape[2], x_new.device), params), {"k": k, "v": v}


def kv_unsplit_cache(x_new, cache, params, n_head):  # keeps (B, t, d) in the cache, not the heads
    d = x_new.shape[-1]
    qkv = F.linear(x_new, params["in_proj_weight"], params["in_proj_bias"])
    q, k, v = qkv[..., :d], qkv[..., d:2 * d], qkv[..., 2 * d:]
    if cache is not None:
        k, v = torch.cat([cache["k"], k], 1), torch.cat([cache["v"], v], 1)
    y = _attend(split_heads(q, n_head), split_heads(k, n_head), split_heads(v, n_head),
                _shifted(q.shape[1], k.shape[1], x_new.device), params)
    return y, {"k": k, "v": v}


def kv_right_head_loop(x_new, cache, params, n_head):
    B, n_new, d = x_new.shape
    dh = d // n_head
    W, b = params["in_proj_weight"], params["in_proj_bias"]
    q = split_heads(x_new @ W[:d].T + b[:d], n_head)
    k = split_heads(x_new @ W[d:2 * d].T + b[d:2 * d], n_head)
    v = split_heads(x_new @ W[2 * d:].T + b[2 * d:], n_head)
    t = 0 if cache is None else cache["k"].shape[2]
    K = k if cache is None else torch.cat((cache["k"], k), dim=2)
    V = v if cache is None else torch.cat((cache["v"], v), dim=2)
    rows = []
    for i in range(n_new):  # new query i sees keys 0 … t + i
        s = q[:, :, i:i + 1] @ K[:, :, :t + i + 1].transpose(-1, -2) / math.sqrt(dh)
        rows.append(torch.softmax(s, -1) @ V[:, :, :t + i + 1])
    y = merge_heads(torch.cat(rows, dim=2))
    return y @ params["out_proj.weight"].T + params["out_proj.bias"], {"k": K, "v": V}


def kv_right_positions(x_new, cache, params, n_head):  # the mask from the positions themselves, as a bias
    q, k, v = _project(x_new, params, n_head)
    t = 0 if cache is None else cache["k"].shape[2]
    if cache is not None:
        k, v = torch.cat([cache["k"], k], -2), torch.cat([cache["v"], v], -2)
    pos_q = torch.arange(t, t + x_new.shape[1], device=x_new.device)
    pos_k = torch.arange(t + x_new.shape[1], device=x_new.device)
    bias = torch.zeros(len(pos_q), len(pos_k), dtype=x_new.dtype, device=x_new.device)
    bias = bias.masked_fill(pos_k[None, :] > pos_q[:, None], INF)
    a = torch.softmax(q @ k.mT / math.sqrt(q.shape[-1]) + bias, dim=-1)
    return F.linear(merge_heads(a @ v), params["out_proj.weight"], params["out_proj.bias"]), {"k": k, "v": v}


def kv_right_einsum(x_new, cache, params, n_head):
    B, n_new, d = x_new.shape
    qkv = torch.einsum("bnd,ed->bne", x_new, params["in_proj_weight"]) + params["in_proj_bias"]
    q, k, v = (t.reshape(B, n_new, n_head, d // n_head).permute(0, 2, 1, 3) for t in qkv.split(d, -1))
    if cache:
        k = torch.cat([cache["k"], k], dim=2)
        v = torch.cat([cache["v"], v], dim=2)
    n_k = k.shape[2]
    s = torch.einsum("bhid,bhjd->bhij", q, k) / math.sqrt(d // n_head)
    s = s.masked_fill(~_shifted(n_new, n_k, x_new.device), INF)
    y = torch.einsum("bhij,bhjd->bihd", s.softmax(-1), v).reshape(B, n_new, d)
    return torch.einsum("bnd,ed->bne", y, params["out_proj.weight"]) + params["out_proj.bias"], {"k": k, "v": v}


# ----------------------------------------------------------------------------- format_pair


def fp_no_delim(a, b, start, delim, extract):
    return [start] + a + b + [extract]


def fp_swapped(a, b, start, delim, extract):
    return [start] + b + [delim] + a + [extract]


def fp_no_extract(a, b, start, delim, extract):
    return [start, *a, delim, *b]


def fp_no_start(a, b, start, delim, extract):
    return a + [delim] + b + [extract]


def fp_ends_swapped(a, b, start, delim, extract):
    return [extract, *a, delim, *b, start]


def fp_nested(a, b, start, delim, extract):  # the lists themselves, not their ids
    return [start, a, delim, b, extract]


def fp_delim_after_b(a, b, start, delim, extract):
    return [start, *a, delim, *b, delim, extract]


def fp_right_chain(a, b, start, delim, extract):
    return list(chain([start], a, [delim], b, [extract]))


def fp_right_appends(a, b, start, delim, extract):
    seq = [start]
    seq.extend(a)
    seq.append(delim)
    seq.extend(b)
    seq.append(extract)
    return seq


def fp_right_tensor(a, b, start, delim, extract):  # built as a tensor, returned as a list
    return torch.cat([torch.tensor([start]), torch.tensor(a), torch.tensor([delim]), torch.tensor(b),
                      torch.tensor([extract])]).tolist()


# ----------------------------------------------------------------------------- pool_last


def pl_last_column(h, lengths):
    return h[:, -1, :]


def pl_first(h, lengths):
    return h[:, 0]


def pl_lengths(h, lengths):
    return h[torch.arange(len(lengths)), lengths]


def pl_broadcast(h, lengths):
    return h[:, lengths - 1]


def pl_mean(h, lengths):
    return h.mean(dim=1)


def pl_masked_mean(h, lengths):
    mask = torch.arange(h.shape[1], device=h.device)[None, :] < lengths[:, None]
    return (h * mask.unsqueeze(-1)).sum(1) / lengths[:, None].to(h.dtype)


def pl_minus_two(h, lengths):  # the state before [extract]
    return h[torch.arange(h.shape[0]), (lengths - 2).clamp(min=0)]


def pl_right_gather(h, lengths):
    idx = (lengths - 1)[:, None, None].expand(-1, 1, h.shape[2])
    return torch.gather(h, 1, idx)[:, 0]


def pl_right_loop(h, lengths):
    return torch.stack([h[b, int(lengths[b]) - 1] for b in range(h.shape[0])])


def pl_right_one_hot(h, lengths):
    pick = F.one_hot(lengths - 1, h.shape[1]).to(h.dtype)  # (B, n)
    return torch.einsum("bn,bnd->bd", pick, h)

# ----------------------------------------------------------------------------- the kinds of issue 31

def _pieces(text):
    return [list(p.encode("utf-8")) for p in GPT2_PATTERN.findall(text)]


def bpe_pairs_as_lists(text, n_merges):  # each merge a list [a, b]: the statement asks for tuples
    return [list(pair) for pair in _train(_pieces(text), n_merges, _smallest_of_most)]


def bpe_tuple_of_merges(text, n_merges):  # a tuple of merges
    return tuple(_train(_pieces(text), n_merges, _smallest_of_most))


def bpe_numpy_ids(text, n_merges):  # the counts in a NumPy array: its ids are numpy.int64
    import numpy as np
    seqs = [np.array(s, dtype=np.int64) for s in _pieces(text)]
    merges = []
    for k in range(n_merges):
        counts = Counter()
        for s in seqs:
            for a, b in zip(s[:-1], s[1:], strict=True):
                counts[(a, b)] += 1
        if not counts or max(counts.values()) < 2:
            break
        best = max(counts.values())
        pair = min(p for p, c in counts.items() if c == best)
        merges.append(pair)
        seqs = [np.array(merge_pair(list(s), pair, 256 + k), dtype=np.int64) for s in seqs]
    return merges


def bpe_tensor(text, n_merges):  # a (n, 2) tensor of merges
    return torch.tensor(_train(_pieces(text), n_merges, _smallest_of_most), dtype=torch.long).reshape(-1, 2)


def bpe_one_merge_too_many(text, n_merges):  # checks the count after merging: one pair seen once slips in
    seqs, merges = _pieces(text), []
    for k in range(n_merges):
        counts = _pair_counts(seqs)
        if not counts:
            break
        pair, c = _smallest_of_most(counts)
        merges.append(pair)
        seqs = [merge_pair(s, pair, 256 + k) for s in seqs]
        if c < 2:
            break
    return merges


def bpe_list_keys_raise(text, n_merges):  # a list as a dict key: TypeError inside the student's code
    seqs, merges = _pieces(text), []
    for k in range(n_merges):
        counts = {}
        for s in seqs:
            for i in range(len(s) - 1):
                counts[[s[i], s[i + 1]]] = counts.get((s[i], s[i + 1]), 0) + 1
        if not counts:
            break
        pair = max(counts, key=counts.get)
        merges.append(tuple(pair))
        seqs = [merge_pair(s, tuple(pair), 256 + k) for s in seqs]
    return merges


def bpe_ids_from_255(text, n_merges):  # the first new id 255, which is a byte: unnamed
    return _train(_pieces(text), n_merges, _smallest_of_most, merge=lambda s, pair, new: merge_pair(s, pair, new - 1))


def enc_tensor(text, merges):  # a tensor of ids
    return torch.tensor(_encode_pieces(GPT2_PATTERN.findall(text), merges, _lowest), dtype=torch.long)


def enc_tuple(text, merges):
    return tuple(_encode_pieces(GPT2_PATTERN.findall(text), merges, _lowest))


def enc_numpy_ids(text, merges):  # the ids through a NumPy array
    import numpy as np
    return list(np.array(_encode_pieces(GPT2_PATTERN.findall(text), merges, _lowest), dtype=np.int64))


def enc_sorts_merges(text, merges):  # sorts the caller's merges "to find them faster"
    rank = {tuple(m): r for r, m in enumerate(merges)}
    merges.sort()
    return _encode_pieces(GPT2_PATTERN.findall(text), [m for m, _ in sorted(rank.items(), key=lambda kv: kv[1])],
                          _lowest)


def _vocab_bytes(merges):
    table = {i: bytes([i]) for i in range(256)}
    for r, (a, b) in enumerate(merges):
        table[256 + r] = table[a] + table[b]
    return {v: k for k, v in table.items()}


def enc_longest_match(text, merges):  # greedy: the longest token of the vocabulary at each position
    by_bytes = _vocab_bytes(merges)
    ids = []
    for piece in GPT2_PATTERN.findall(text):
        data, i = piece.encode("utf-8"), 0
        while i < len(data):
            j = len(data)
            while data[i:j] not in by_bytes:
                j -= 1
            ids.append(by_bytes[data[i:j]])
            i = j
    return ids


def enc_longest_match_trie(text, merges):  # the same greedy match, tokens tried from the longest
    by_bytes = _vocab_bytes(merges)
    longest = max(len(b) for b in by_bytes)
    ids = []
    for piece in GPT2_PATTERN.findall(text):
        data, i = piece.encode("utf-8"), 0
        while i < len(data):
            for size in range(min(longest, len(data) - i), 0, -1):
                if data[i:i + size] in by_bytes:
                    ids.append(by_bytes[data[i:i + size]])
                    i += size
                    break
    return ids


def enc_rank_lookup_raises(text, merges):  # rank[pair] for every pair, merges or not: KeyError
    rank = {tuple(m): r for r, m in enumerate(merges)}
    ids = []
    for piece in GPT2_PATTERN.findall(text):
        toks = list(piece.encode("utf-8"))
        while len(toks) > 1:
            pair = min(zip(toks, toks[1:], strict=False), key=lambda p: rank[p])
            toks = merge_pair(toks, pair, 256 + rank[pair])
        ids += toks
    return ids


def enc_ids_shifted(text, merges):  # merge r makes 257 + r: unnamed
    rank = {tuple(m): r for r, m in enumerate(merges)}
    ids = []
    for piece in GPT2_PATTERN.findall(text):
        toks = list(piece.encode("utf-8"))
        while len(toks) > 1:
            cands = [p for p in zip(toks, toks[1:], strict=False) if p in rank]
            if not cands:
                break
            pair = min(cands, key=rank.get)
            toks = merge_pair(toks, pair, 257 + rank[pair])
        ids += toks
    return ids


def dec_utf8_sig(ids, merges):  # drops a byte-order mark at the start
    table = _table(merges)
    return b"".join(table[i] for i in ids).decode("utf-8-sig", errors="replace")


def dec_lstrip_bom(ids, merges):  # strips U+FEFF "which is not text"
    table = _table(merges)
    return b"".join(table[i] for i in ids).decode("utf-8", errors="replace").lstrip("\ufeff")


def dec_strip(ids, merges):  # .strip() drops the text's own leading and trailing whitespace
    table = _table(merges)
    return b"".join(table[i] for i in ids).decode("utf-8", errors="replace").strip()


def dec_bytes(ids, merges):  # returns the bytes, not the text
    table = _table(merges)
    return b"".join(table[i] for i in ids)


def dec_char_list(ids, merges):  # a list of characters
    table = _table(merges)
    return list(b"".join(table[i] for i in ids).decode("utf-8", errors="replace"))


def dec_pops_ids(ids, merges):  # consumes the caller's list
    table, out = _table(merges), b""
    while ids:
        out += table[ids.pop(0)]
    return out.decode("utf-8", errors="replace")


def dec_bytes_of_ids_raises(ids, merges):  # bytes(ids): ValueError for an id of 256 or more
    table = _table(merges)
    raw = bytes(ids)
    return b"".join(table[i] for i in raw).decode("utf-8", errors="replace")


def dec_replace_as_question(ids, merges):  # "?" instead of U+FFFD: unnamed
    table = _table(merges)
    return b"".join(table[i] for i in ids).decode("utf-8", errors="replace").replace("\ufffd", "?")


def _ln_eps(x, p, i, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return p[f"norm{i}.weight"] * (x - mu) / torch.sqrt(var + eps) + p[f"norm{i}.bias"]


def blk_eps_1e6(x, params, n_head):
    x = x + _attn(_ln_eps(x, params, 1, 1e-6), params, n_head)
    return x + _mlp(_ln_eps(x, params, 2, 1e-6), params)


def blk_eps_bert(x, params, n_head):
    x = x + _attn(F.layer_norm(x, (x.shape[-1],), params["norm1.weight"], params["norm1.bias"], 1e-12), params,
                  n_head)
    return x + _mlp(F.layer_norm(x, (x.shape[-1],), params["norm2.weight"], params["norm2.bias"], 1e-12), params)


def blk_float32_inside(x, params, n_head):
    p = {k: v.float() for k, v in params.items()}
    h = x.float()
    h = h + _attn(_ln(h, p, 1), p, n_head)
    return (h + _mlp(_ln(h, p, 2), p)).to(x.dtype)


def blk_gelu_float32(x, params, n_head):  # the GELU in float32 "as GPT-2 did"
    x = x + _attn(_ln(x, params, 1), params, n_head)
    return x + _mlp(_ln(x, params, 2), params, lambda u: F.gelu(u.float(), approximate="tanh").to(u.dtype))


def blk_params_in_place(x, params, n_head):  # folds the attention's scale into the caller's weights
    d = x.shape[-1]
    params["self_attn.in_proj_weight"][:d] /= 1.0
    params["self_attn.in_proj_bias"].mul_(1.0).add_(0.0)
    params.setdefault("scale", torch.tensor(d // n_head))
    x = x + _attn(_ln(x, params, 1), params, n_head)
    return x + _mlp(_ln(x, params, 2), params)


def blk_squeezed(x, params, n_head):  # squeeze(): a batch of one loses its dimension
    x = x + _attn(_ln(x, params, 1), params, n_head)
    return (x + _mlp(_ln(x, params, 2), params)).squeeze(0)


def blk_view_raises(x, params, n_head):  # view(B, n, n_head, -1) on the transposed heads: not contiguous
    B, n, d = x.shape
    h = _ln(x, params, 1)
    q, k, v = (h @ params["self_attn.in_proj_weight"].T + params["self_attn.in_proj_bias"]).split(d, dim=-1)
    q, k, v = (t.view(B, n, n_head, -1).transpose(1, 2) for t in (q, k, v))
    s = q @ k.transpose(-1, -2) / math.sqrt(d // n_head)
    keep = torch.ones(n, n, dtype=torch.bool, device=x.device).tril()
    y = (torch.softmax(s.masked_fill(~keep, INF), -1) @ v).transpose(1, 2).view(B, n, d)
    x = x + y @ params["self_attn.out_proj.weight"].T + params["self_attn.out_proj.bias"]
    return x + _mlp(_ln(x, params, 2), params)


def blk_half_mlp(x, params, n_head):  # the MLP's output halved: unnamed
    x = x + _attn(_ln(x, params, 1), params, n_head)
    return x + 0.5 * _mlp(_ln(x, params, 2), params)


def kv_list(x_new, cache, params, n_head):
    y, c = kv_right_einsum(x_new, cache, params, n_head)
    return [y, c]


def kv_grows_cache_in_place(x_new, cache, params, n_head):  # cache["k"] = ...: the caller's dict grows
    q, k, v = _project(x_new, params, n_head)
    if cache is None:
        cache = {"k": k, "v": v}
    else:
        cache["k"] = torch.cat([cache["k"], k], dim=2)
        cache["v"] = torch.cat([cache["v"], v], dim=2)
    keep = _shifted(q.shape[2], cache["k"].shape[2], x_new.device)
    return _attend(q, cache["k"], cache["v"], keep, params), cache


def kv_update_in_place(x_new, cache, params, n_head):  # dict.update on the caller's cache
    q, k, v = _project(x_new, params, n_head)
    if cache is not None:
        k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
        cache.update(k=k, v=v)
    keep = _shifted(q.shape[2], k.shape[2], x_new.device)
    return _attend(q, k, v, keep, params), {"k": k, "v": v}


def kv_float32_inside(x_new, cache, params, n_head):
    p = {k: v.float() for k, v in params.items()}
    c = None if cache is None else {k: v.float() for k, v in cache.items()}
    y, new = kv_right_einsum(x_new.float(), c, p, n_head)
    return y.to(x_new.dtype), {k: v.to(x_new.dtype) for k, v in new.items()}


def kv_squeezed(x_new, cache, params, n_head):  # squeeze(0): a batch of one loses its dimension
    y, c = kv_right_einsum(x_new, cache, params, n_head)
    return y.squeeze(0), c


def kv_cat_wrong_dim_raises(x_new, cache, params, n_head):  # cat along dim 1 (the heads): raises unless shapes agree
    q, k, v = _project(x_new, params, n_head)
    if cache is not None:
        k, v = torch.cat([cache["k"], k], dim=1), torch.cat([cache["v"], v], dim=1)
    keep = _shifted(q.shape[2], k.shape[2], x_new.device)
    return _attend(q, k, v, keep, params), {"k": k, "v": v}


def kv_values_scaled(x_new, cache, params, n_head):  # y doubled: unnamed
    y, c = kv_right_einsum(x_new, cache, params, n_head)
    return 2 * y, c


def fp_tensor(a, b, start, delim, extract):  # a tensor where a list is asked
    return torch.tensor([start, *a, delim, *b, extract])


def fp_tuple(a, b, start, delim, extract):
    return (start, *a, delim, *b, extract)


def fp_numpy_ints(a, b, start, delim, extract):
    import numpy as np
    return list(np.concatenate([[start], a, [delim], b, [extract]]).astype(np.int64))


def fp_inserts_into_a(a, b, start, delim, extract):  # a.insert and a.extend change the caller's list
    a.insert(0, start)
    a.append(delim)
    a.extend(b)
    a.append(extract)
    return a


def fp_appends_to_b(a, b, start, delim, extract):
    b.append(extract)
    return [start] + a + [delim] + b


def fp_int_plus_list_raises(a, b, start, delim, extract):  # [start] + a + delim: TypeError
    return [start] + a + delim + b + [extract]


def fp_extract_twice(a, b, start, delim, extract):  # unnamed
    return [start, *a, delim, *b, extract, extract]


def pl_float32_inside(h, lengths):
    return h.float()[torch.arange(h.shape[0]), lengths - 1].to(h.dtype)


def pl_via_numpy(h, lengths):  # through NumPy's float32
    arr = h.detach().cpu().numpy().astype("float32")
    return torch.from_numpy(arr[range(h.shape[0]), (lengths - 1).cpu().numpy()]).to(h.dtype)


def pl_squeezed(h, lengths):
    return h[torch.arange(h.shape[0]), lengths - 1].squeeze()


def pl_lengths_in_place(h, lengths):  # lengths -= 1 changes the caller's tensor
    lengths -= 1
    return h[torch.arange(h.shape[0]), lengths]


def pl_float_index_raises(h, lengths):  # a float tensor as an index raises IndexError
    return h[torch.arange(h.shape[0]), lengths.float() - 1]


def pl_scaled(h, lengths):  # unnamed
    return 0.5 * h[torch.arange(h.shape[0]), lengths - 1]


WRONG = {
    "train_bpe": [
        Student(bpe_whole_text, _has(TRAIN_BPE, "counted pairs across pre-token boundaries")),
        Student(bpe_most_common, _has(TRAIN_BPE, "broke ties by the pair seen first")),
        Student(bpe_sort_descending, _has(TRAIN_BPE, "broke ties towards the largest pair")),
        Student(bpe_overlapping, _has(TRAIN_BPE, "merged overlapping occurrences")),
        Student(bpe_counted_once, _has(TRAIN_BPE, "counted the pairs once")),
        Student(bpe_until_no_pair, _has(TRAIN_BPE, "kept merging pairs that occur only once")),
        Student(bpe_characters, _has(TRAIN_BPE, "worked on characters")),
        Student(bpe_distinct_words_once, None),
        Student(bpe_split_on_spaces, None),
        Student(bpe_pairs_as_lists, None, note="lists for tuples"),
        Student(bpe_tuple_of_merges, None, note="a tuple of merges"),
        Student(bpe_numpy_ids, None, note="numpy.int64 ids"),
        Student(bpe_tensor, None, note="a tensor of merges"),
        Student(bpe_one_merge_too_many, None, note="one merge of a pair seen once"),
        Student(bpe_list_keys_raise, None, note="TypeError inside the student's code"),
        Student(bpe_ids_from_255, None, note="new ids from 255"),
    ],
    "encode": [
        Student(enc_whole_text, _has(ENCODE, "merged across pre-token boundaries")),
        Student(enc_most_frequent, _has(ENCODE, "merged the most frequent pair")),
        Student(enc_latest_first, _has(ENCODE, "merged the pair of highest rank")),
        Student(enc_split, _has(ENCODE, "cut the text with str.split()")),
        Student(enc_latin1, _has(ENCODE, "encoded the text as Latin-1")),
        Student(enc_one_merge_per_piece, None),
        Student(enc_code_points, None),
        Student(enc_tensor, None, note="a tensor of ids"),
        Student(enc_tuple, None, note="a tuple of ids"),
        Student(enc_numpy_ids, None, note="numpy.int64 ids"),
        Student(enc_sorts_merges, None, note="sorts the caller's merges"),
        Student(enc_longest_match, _has(ENCODE, "took the longest token that matches")),
        Student(enc_longest_match_trie, _has(ENCODE, "took the longest token that matches")),
        Student(enc_rank_lookup_raises, None, note="KeyError inside the student's code"),
        Student(enc_ids_shifted, None, note="merge r makes 257 + r"),
    ],
    "decode": [
        Student(dec_each_token, _has(DECODE, "decoded each token on its own")),
        Student(dec_with_spaces, _has(DECODE, "put a space between the tokens")),
        Student(dec_latin1, _has(DECODE, "decoded the bytes as Latin-1")),
        Student(dec_ignore, _has(DECODE, "dropped the invalid bytes")),
        Student(dec_strict, None, note="raises on invalid bytes: nothing to name, the exception says it"),
        Student(dec_one_level, None),
        Student(dec_chr, None),
        Student(dec_utf8_sig, _has(DECODE, "dropped the byte-order mark")),
        Student(dec_lstrip_bom, _has(DECODE, "dropped the byte-order mark")),
        Student(dec_strip, None, note=".strip()"),
        Student(dec_bytes, None, note="bytes, not a str"),
        Student(dec_char_list, None, note="a list of characters"),
        Student(dec_pops_ids, None, note="pops the caller's ids"),
        Student(dec_bytes_of_ids_raises, None, note="bytes(ids) raises"),
        Student(dec_replace_as_question, None, note="? for U+FFFD"),
    ],
    "gpt_block": [
        Student(blk_layer_norm_statistics_detached, None, note="right values; LayerNorm's μ and σ² detached"),
        Student(blk_erf_gelu, _has(GPT_BLOCK, "used the exact (erf) GELU")),
        Student(blk_relu, _has(GPT_BLOCK, "used ReLU")),
        Student(blk_no_mask, _has(GPT_BLOCK, "left out the causal mask")),
        Student(blk_strict_mask, _has(GPT_BLOCK, "masked the diagonal too")),
        Student(blk_post_ln, _has(GPT_BLOCK, "wrote a post-LN block")),
        Student(blk_normalised_residual, _has(GPT_BLOCK, "added the normalised input as the residual")),
        Student(blk_scale_d_model, _has(GPT_BLOCK, "scaled the attention scores by 1/sqrt(d_model)")),
        Student(blk_no_out_proj, None),
        Student(blk_unbiased_ln, None),
        Student(blk_eps_1e6, _has(GPT_BLOCK, "used another ε in the LayerNorms")),
        Student(blk_eps_bert, _has(GPT_BLOCK, "used another ε in the LayerNorms")),
        Student(blk_float32_inside, None, note="float32 inside"),
        Student(blk_gelu_float32, None, note="the GELU in float32"),
        Student(blk_params_in_place, None, note="writes into the caller's params"),
        Student(blk_squeezed, None, note="squeeze(0)"),
        Student(blk_view_raises, None, note="view on a transposed tensor raises"),
        Student(blk_half_mlp, None, note="the MLP halved"),
    ],
    "cached_attention": [
        Student(kv_attend_then_append, _has(CACHED_ATTENTION, "attended to the cached positions only")),
        Student(kv_old_cache_returned, _has(CACHED_ATTENTION, "returned the cache as it came in")),
        Student(kv_mask_from_the_start, _has(CACHED_ATTENTION, "aligned the causal mask at the start")),
        Student(kv_prepended, _has(CACHED_ATTENTION, "put the new k, v before the cached ones")),
        Student(kv_mask_only_for_the_prompt, _has(CACHED_ATTENTION, "left out the mask among several new tokens")),
        Student(kv_scale_d_model, _has(CACHED_ATTENTION, "scaled the scores by 1/sqrt(d_model)")),
        Student(kv_unsplit_cache, None),
        Student(kv_list, None, note="a list for a tuple"),
        Student(kv_grows_cache_in_place, None, note="grows the caller's cache dict"),
        Student(kv_update_in_place, None, note="dict.update on the caller's cache"),
        Student(kv_float32_inside, None, note="float32 inside"),
        Student(kv_squeezed, None, note="squeeze(0)"),
        Student(kv_cat_wrong_dim_raises, None, note="torch.cat along the heads raises"),
        Student(kv_values_scaled, None, note="y doubled"),
    ],
    "format_pair": [
        Student(fp_no_delim, _has(FORMAT_PAIR, "left out the delimiter")),
        Student(fp_swapped, _has(FORMAT_PAIR, "put b before a")),
        Student(fp_no_extract, _has(FORMAT_PAIR, "left out the extract token")),
        Student(fp_no_start, _has(FORMAT_PAIR, "left out the start token")),
        Student(fp_ends_swapped, _has(FORMAT_PAIR, "swapped [start] and [extract]")),
        Student(fp_nested, None),
        Student(fp_delim_after_b, None),
        Student(fp_tensor, None, note="a tensor for a list"),
        Student(fp_tuple, None, note="a tuple for a list"),
        Student(fp_numpy_ints, None, note="numpy.int64 ids"),
        Student(fp_inserts_into_a, None, note="changes the caller's a"),
        Student(fp_appends_to_b, None, note="changes the caller's b"),
        Student(fp_int_plus_list_raises, None, note="TypeError inside the student's code"),
        Student(fp_extract_twice, None, note="[extract] twice"),
    ],
    "pool_last": [
        Student(pl_last_column, _has(POOL_LAST, "took the last position")),
        Student(pl_first, _has(POOL_LAST, "took the first position")),
        Student(pl_lengths, _has(POOL_LAST, "indexed with lengths instead of lengths − 1")),
        Student(pl_broadcast, _has(POOL_LAST, "indexed h[:, lengths - 1]")),
        Student(pl_mean, _has(POOL_LAST, "averaged over all positions")),
        Student(pl_masked_mean, _has(POOL_LAST, "averaged the real positions")),
        Student(pl_minus_two, None),
        Student(pl_float32_inside, None, note="float32 inside"),
        Student(pl_via_numpy, None, note="through NumPy's float32"),
        Student(pl_squeezed, None, note="squeeze() drops a batch of one"),
        Student(pl_lengths_in_place, None, note="lengths -= 1 on the caller's tensor"),
        Student(pl_float_index_raises, None, note="a float index raises"),
        Student(pl_scaled, None, note="halved"),
    ],
}

RIGHT = {
    "train_bpe": [bpe_right_all_pieces, bpe_right_bytes_tokens, bpe_right_incremental],
    "encode": [enc_right_first_occurrence, enc_right_every_merge_in_order, enc_right_cached],
    "decode": [dec_right_bytearray, dec_right_recursive, dec_right_stack],
    "gpt_block": [blk_right_einsum, blk_right_head_loop, blk_right_formula_gelu],
    "cached_attention": [kv_right_head_loop, kv_right_positions, kv_right_einsum],
    "format_pair": [fp_right_chain, fp_right_appends, fp_right_tensor],
    "pool_last": [pl_right_gather, pl_right_loop, pl_right_one_hot],
}


# ============================================================================= thinking questions (chD)
# Written as students answer them: the formula typed out, with the mistake in it, or derived another way.

from lmbook.tasks.questions.ch09 import GPT_PARAMETERS, KV_CACHE_BYTES, POSITIONS_READ  # noqa: E402


def kv_keys_only(n_layer, n_head, d_head, n_tokens, batch_size, bytes_per_value):
    return n_layer * n_head * d_head * n_tokens * batch_size * bytes_per_value


def kv_one_layer(n_layer, n_head, d_head, n_tokens, batch_size, bytes_per_value):
    return 2 * n_head * d_head * n_tokens * batch_size * bytes_per_value


def kv_one_head(n_layer, n_head, d_head, n_tokens, batch_size, bytes_per_value):
    return 2 * n_layer * d_head * n_tokens * batch_size * bytes_per_value


def kv_no_batch(n_layer, n_head, d_head, n_tokens, batch_size, bytes_per_value):
    d_model = n_head * d_head
    return 2 * n_layer * d_model * n_tokens * bytes_per_value


def kv_bits(n_layer, n_head, d_head, n_tokens, batch_size, bytes_per_value):
    bits = 8 * bytes_per_value
    return 2 * n_layer * n_head * d_head * n_tokens * batch_size * bits


def kv_attention_matrix(n_layer, n_head, d_head, n_tokens, batch_size, bytes_per_value):
    per_layer = batch_size * n_head * n_tokens * n_tokens  # one score per query and key
    return n_layer * per_layer * bytes_per_value


def kv_float32_always(n_layer, n_head, d_head, n_tokens, batch_size, bytes_per_value):
    return 2 * n_layer * n_head * d_head * n_tokens * batch_size * 4


def kv_right_shapes(n_layer, n_head, d_head, n_tokens, batch_size, bytes_per_value):
    one_tensor = math.prod((batch_size, n_head, n_tokens, d_head))  # K or V of one layer
    return one_tensor * 2 * n_layer * bytes_per_value


def kv_right_per_token(n_layer, n_head, d_head, n_tokens, batch_size, bytes_per_value):
    per_token = 2 * n_layer * n_head * d_head * bytes_per_value  # k and v, every layer
    return per_token * n_tokens * batch_size


def kv_right_loop(n_layer, n_head, d_head, n_tokens, batch_size, bytes_per_value):
    total = 0
    for _ in range(n_layer):
        for _tensor in ("k", "v"):
            total += batch_size * n_head * n_tokens * d_head * bytes_per_value
    return total


def _gpt_count(V, N, L, d, d_ff, tied, *, biases=True, ln_vectors=2, ln_f=True, positions=True, w_o=True,
               output=None):
    b = 1 if biases else 0
    ln = ln_vectors * d
    attn = 3 * d * d + 3 * b * d + (d * d + b * d if w_o else 0)
    ffn = d * d_ff + b * d_ff + d_ff * d + b * d
    out = (0 if tied else V * d) if output is None else output
    return V * d + (N * d if positions else 0) + L * (2 * ln + attn + ffn) + (ln if ln_f else 0) + out


def gp_no_biases(vocab_size, block_size, n_layer, d_model, d_ff, tied):
    return _gpt_count(vocab_size, block_size, n_layer, d_model, d_ff, tied, biases=False)


def gp_one_vector_ln(vocab_size, block_size, n_layer, d_model, d_ff, tied):
    return _gpt_count(vocab_size, block_size, n_layer, d_model, d_ff, tied, ln_vectors=1)


def gp_no_ln_f(vocab_size, block_size, n_layer, d_model, d_ff, tied):
    return _gpt_count(vocab_size, block_size, n_layer, d_model, d_ff, tied, ln_f=False)


def gp_always_output(vocab_size, block_size, n_layer, d_model, d_ff, tied):
    return _gpt_count(vocab_size, block_size, n_layer, d_model, d_ff, tied, output=vocab_size * d_model)


def gp_never_output(vocab_size, block_size, n_layer, d_model, d_ff, tied):
    return _gpt_count(vocab_size, block_size, n_layer, d_model, d_ff, tied, output=0)


def gp_no_positions(vocab_size, block_size, n_layer, d_model, d_ff, tied):
    return _gpt_count(vocab_size, block_size, n_layer, d_model, d_ff, tied, positions=False)


def gp_four_d(vocab_size, block_size, n_layer, d_model, d_ff, tied):
    return _gpt_count(vocab_size, block_size, n_layer, d_model, 4 * d_model, tied)


def gp_twelve_d_squared(vocab_size, block_size, n_layer, d_model, d_ff, tied):
    d = d_model  # the closed form for d_ff = 4d, used whatever d_ff is
    return vocab_size * d + block_size * d + n_layer * (12 * d * d + 13 * d) + 2 * d


def gp_right_closed_form(vocab_size, block_size, n_layer, d_model, d_ff, tied):
    d = d_model
    per_block = 4 * d * d + 4 * d + 2 * d * d_ff + d_ff + d + 4 * d
    return (vocab_size * d * (1 if tied else 2) + block_size * d + n_layer * per_block + 2 * d)


def gp_right_shapes(vocab_size, block_size, n_layer, d_model, d_ff, tied):
    d = d_model
    shapes = [(vocab_size, d), (block_size, d), (d,), (d,)]  # wte, wpe, ln_f
    for _ in range(n_layer):
        shapes += [(d,), (d,), (3 * d, d), (3 * d,), (d, d), (d,), (d,), (d,), (d_ff, d), (d_ff,), (d, d_ff), (d,)]
    if not tied:
        shapes.append((vocab_size, d))
    return sum(math.prod(s) for s in shapes)


def gp_right_torch_meta(vocab_size, block_size, n_layer, d_model, d_ff, tied):
    with torch.device("meta"):
        layers = [torch.nn.Embedding(vocab_size, d_model), torch.nn.Embedding(block_size, d_model),
                  torch.nn.LayerNorm(d_model)]
        for _ in range(n_layer):
            layers += [torch.nn.LayerNorm(d_model), torch.nn.Linear(d_model, 3 * d_model),
                       torch.nn.Linear(d_model, d_model), torch.nn.LayerNorm(d_model),
                       torch.nn.Linear(d_model, d_ff), torch.nn.Linear(d_ff, d_model)]
        if not tied:
            layers.append(torch.nn.Linear(d_model, vocab_size, bias=False))
    return sum(math.prod(p.shape) for layer in layers for p in layer.parameters())


def pr_counts_last(prompt_len, n_new):
    with_cache = prompt_len + n_new
    without = sum(prompt_len + k for k in range(n_new + 1))
    return with_cache, without


def pr_no_prompt(prompt_len, n_new):
    return n_new, sum(prompt_len + k for k in range(n_new))


def pr_prompt_only(prompt_len, n_new):
    return prompt_len + n_new - 1, n_new * prompt_len


def pr_final_length(prompt_len, n_new):
    total = prompt_len + n_new
    return prompt_len + n_new - 1, n_new * total


def pr_prompt_every_step(prompt_len, n_new):
    return n_new * prompt_len, n_new * prompt_len + n_new * (n_new - 1) // 2


def pr_squared(prompt_len, n_new):
    total = prompt_len + n_new
    return total, total * total


def pr_right_loop(prompt_len, n_new):
    with_cache = without = 0
    length = prompt_len
    for step in range(n_new):
        with_cache += prompt_len if step == 0 else 1
        without += length
        length += 1
    return with_cache, without


def pr_right_formula(prompt_len, n_new):
    return prompt_len + (n_new - 1), n_new * (2 * prompt_len + n_new - 1) // 2


def pr_right_triangle(prompt_len, n_new):
    last = prompt_len + n_new - 1  # the longest sequence read
    first = prompt_len
    return last, (first + last) * n_new // 2


WRONG.update({
    "kv_cache_bytes": [
        Student(kv_keys_only, _has(KV_CACHE_BYTES, "counted the keys only")),
        Student(kv_one_layer, _has(KV_CACHE_BYTES, "counted one layer")),
        Student(kv_one_head, _has(KV_CACHE_BYTES, "counted one head")),
        Student(kv_no_batch, _has(KV_CACHE_BYTES, "left out the batch")),
        Student(kv_bits, _has(KV_CACHE_BYTES, "counted bits, not bytes")),
        Student(kv_attention_matrix, _has(KV_CACHE_BYTES, "counted the attention weights")),
        Student(kv_float32_always, None),
    ],
    "gpt_parameters": [
        Student(gp_no_biases, _has(GPT_PARAMETERS, "left out the biases")),
        Student(gp_one_vector_ln, _has(GPT_PARAMETERS, "counted one vector per LayerNorm")),
        Student(gp_no_ln_f, _has(GPT_PARAMETERS, "left out the final LayerNorm")),
        Student(gp_always_output, _has(GPT_PARAMETERS, "counted the output matrix when it is tied")),
        Student(gp_never_output, _has(GPT_PARAMETERS, "left out the output matrix when it is not tied")),
        Student(gp_no_positions, _has(GPT_PARAMETERS, "left out the position embeddings")),
        Student(gp_four_d, _has(GPT_PARAMETERS, "took d_ff as 4 · d_model")),
        Student(gp_twelve_d_squared, None),
    ],
    "positions_read": [
        Student(pr_counts_last, _has(POSITIONS_READ, "ran the last new token through the model too")),
        Student(pr_no_prompt, _has(POSITIONS_READ, "left out the prompt")),
        Student(pr_prompt_only, _has(POSITIONS_READ, "read only the prompt at every step")),
        Student(pr_final_length, _has(POSITIONS_READ, "read the final length at every step")),
        Student(pr_prompt_every_step, _has(POSITIONS_READ, "read the prompt again at every step")),
        Student(pr_squared, None),
    ],
})

RIGHT.update({
    "kv_cache_bytes": [kv_right_shapes, kv_right_per_token, kv_right_loop],
    "gpt_parameters": [gp_right_closed_form, gp_right_shapes, gp_right_torch_meta],
    "positions_read": [pr_right_loop, pr_right_formula, pr_right_triangle],
})
