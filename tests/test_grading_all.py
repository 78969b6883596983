"""Every exercise, end to end through `lmbook-grade`: the solutions earn full marks, the blank exercise 0.

Exercise 1 is covered in more detail by test_autograde.py (exact per-task grades of six samples);
this file covers the others, each with a submission whose last answer is left blank, and one where it does
not parse (each loses exactly the tests of that answer's functions), and one with known mistakes in some
tasks, written below.
"""

import ast
import csv
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from lmbook.grading.judge import is_test_cell, parse_test_cell
from lmbook.tasks import ASSIGNMENTS as RELEASED

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "autograder"))
from make_samples import code_answers, fill, make_samples, solution_answers  # noqa: E402

ASSIGNMENTS = [a for a in RELEASED if a != "ch01"]
pytestmark = pytest.mark.slow

# A student's answers with known mistakes, by assignment: {answer cell: code}, and the tasks that must score 0.
WRONG = {
    "ch03": ({
        "teacher_forcing_loss": '''
def teacher_forcing_loss(logits, y, pad_id):
    return torch.nn.functional.cross_entropy(logits.transpose(1, 2), y[:, 1:], ignore_index=pad_id)  # not graded
''',
        "beam_search": '''
def beam_search(log_probs, bos, eos, beam_size, max_len, alpha):
    live, finished = [([], 0.0)], []
    for t in range(max_len):
        candidates = sorted(((tokens + [j], s + float(lp)) for tokens, s in live
                             for j, lp in enumerate(log_probs[t, tokens[-1] if tokens else bos])),
                            key=lambda c: c[1], reverse=True)[:beam_size]
        finished += [c for c in candidates if c[0][-1] == eos]
        live = [c for c in candidates if c[0][-1] != eos]
        if not live:
            break
    tokens, s = max(finished + live, key=lambda h: h[1])  # picked by the raw sum, not the normalised score
    return tokens, s / len(tokens) ** alpha
''',
        "corpus_bleu": '''
def corpus_bleu(candidates, references):
    matches, totals, c, r = [0] * 4, [0] * 4, 0, 0
    for cand, refs in zip(candidates, references):
        c += len(cand)
        r += min((len(ref) for ref in refs), key=lambda n: (abs(n - len(cand)), n))
        for n in range(1, 5):
            grams = [tuple(cand[k:k + n]) for k in range(len(cand) - n + 1)]
            in_refs = {tuple(ref[k:k + n]) for ref in refs for k in range(len(ref) - n + 1)}
            matches[n - 1] += sum(g in in_refs for g in grams)  # no clipping
            totals[n - 1] += len(grams)
    if min(matches) == 0:
        return 0.0
    bp = 1.0 if c > r else math.exp(1 - r / c)
    return 100 * bp * math.exp(sum(math.log(m / t) for m, t in zip(matches, totals)) / 4)
'''}, {"test_teacher_forcing_loss", "hidden_teacher_forcing_loss", "test_beam_search", "hidden_beam_search",
       "test_corpus_bleu", "hidden_corpus_bleu"}),
    "ch04": ({
        "scores": '''
def dot_scores(s, H, mask):
    return torch.einsum("bd,btd->bt", s, H).masked_fill(~mask, -1e9)  # a large negative number, not -inf


def multiplicative_scores(s, H, mask, W):
    return torch.einsum("bd,btd->bt", s @ W, H).masked_fill(~mask, float("-inf"))


def additive_scores(s, H, mask, W1, W2, v):
    return (torch.tanh(H @ W1.T + (s @ W2.T).unsqueeze(1)) @ v).masked_fill(~mask, float("-inf"))
''',
        "attend": '''
def attend(scores, H, mask):
    weights = torch.exp(scores) * mask  # no maximum subtracted: overflows on the hidden tests' large scores
    alpha = weights / weights.sum(-1, keepdim=True)
    return (alpha.unsqueeze(-1) * H).sum(1), alpha
''',
        "bahdanau_step": '''
def gru_cell(x, h, W_ih, W_hh, b_ih, b_hh):
    x_r, x_z, x_n = (x @ W_ih.T + b_ih).chunk(3, dim=-1)
    h_r, h_z, h_n = (h @ W_hh.T + b_hh).chunk(3, dim=-1)
    r, z = torch.sigmoid(x_r + h_r), torch.sigmoid(x_z + h_z)
    return (1 - z) * torch.tanh(x_n + r * h_n) + z * h


def bahdanau_step(y_prev, s_prev, H, mask, E, W1, W2, v, W_ih, W_hh, b_ih, b_hh, W_o, b_o):
    context, alpha = attend(additive_scores(s_prev, H, mask, W1, W2, v), H, mask)
    s = gru_cell(torch.cat([context, E[y_prev]], dim=-1), s_prev, W_ih, W_hh, b_ih, b_hh)  # [c; emb]: swapped
    return torch.cat([context, s], dim=-1) @ W_o.T + b_o, s, alpha
'''}, {"test_scores", "hidden_scores", "hidden_attend", "test_bahdanau_step", "hidden_bahdanau_step"}),
    "ch02": ({
        "gru_cell": '''
def gru_cell(x, h, W_ih, W_hh, b_ih, b_hh):
    x_r, x_z, x_n = (x @ W_ih.T + b_ih).chunk(3, dim=-1)
    h_r, h_z, h_n = (h @ W_hh.T + b_hh).chunk(3, dim=-1)
    r, z = torch.sigmoid(x_r + h_r), torch.sigmoid(x_z + h_z)
    n = torch.tanh(x_n + r * h_n)
    return z * n + (1 - z) * h  # the update gate's roles swapped
''',
        "classify": '''
def classify(states, mask, W, b, how):
    pooled = {"last": states[:, -1], "mean": states.mean(1), "max": states.amax(1)}[how]  # padding included
    return pooled @ W.T + b
''',
        "clip_grad_norm": '''
def clip_grad_norm(grads, max_norm):
    return torch.nn.utils.clip_grad_norm_(grads, max_norm)  # torch's own: not graded
'''}, {"test_gru_cell", "hidden_gru_cell", "test_classify", "hidden_classify", "test_clip_grad_norm",
       "hidden_clip_grad_norm"}),
    "ch05": ({
        "masked_attention": '''
def masked_attention(Q, K, V, key_mask, causal):
    n, d_k = Q.shape[1], Q.shape[-1]
    A = torch.softmax(Q @ K.transpose(1, 2) / math.sqrt(d_k), dim=-1)
    allowed = key_mask[:, None, :]
    if causal:
        allowed = allowed & torch.ones(n, n, dtype=torch.bool, device=Q.device).tril()
    A = A * allowed  # the mask after the softmax: the rows no longer sum to 1
    return A @ V, A
'''}, {"test_masked_attention", "hidden_masked_attention"}),
    "ch06": ({
        "multihead_attention": '''
def multihead_attention(query, key, value, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, n_head,
                        key_padding_mask, causal):
    W_q, W_k, W_v = in_proj_weight.chunk(3)
    b_q, b_k, b_v = in_proj_bias.chunk(3)
    q = split_heads(query @ W_q.T + b_q, n_head)
    k = split_heads(key @ W_k.T + b_k, n_head)
    v = split_heads(value @ W_v.T + b_v, n_head)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    allowed = key_padding_mask[:, None, None, :]  # exercise 5's convention: but True is padding here
    if causal:
        allowed = allowed & torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril()
    A = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return merge_heads(A @ v) @ out_proj_weight.T + out_proj_bias, A
'''}, {"test_multihead_attention", "hidden_multihead_attention"}),
    "ch07": ({
        "apply_rope": '''
def apply_rope(x, positions):
    d = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    angles = positions.double()[:, None] * theta
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]  # Llama's halves: this task pairs neighbours
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
'''}, {"test_apply_rope", "hidden_apply_rope"}),
    "ch08": ({
        "encoder_block": '''
def encoder_block(x, key_padding_mask, params, n_head, norm_first):
    p = params

    def self_attention(h):
        return attention(h, h, h, p["self_attn.in_proj_weight"], p["self_attn.in_proj_bias"],
                         p["self_attn.out_proj.weight"], p["self_attn.out_proj.bias"], n_head, key_padding_mask)

    def ffn(h):
        return feed_forward(h, p["linear1.weight"], p["linear1.bias"], p["linear2.weight"], p["linear2.bias"])

    if not norm_first:  # norm_first read backwards: pre-LN for norm_first=False
        x = x + self_attention(layer_norm(x, p["norm1.weight"], p["norm1.bias"]))
        return x + ffn(layer_norm(x, p["norm2.weight"], p["norm2.bias"]))
    x = layer_norm(x + self_attention(x), p["norm1.weight"], p["norm1.bias"])
    return layer_norm(x + ffn(x), p["norm2.weight"], p["norm2.bias"])
'''}, {"test_encoder_block", "hidden_encoder_block"}),
    "ch09": ({
        "train_bpe": '''
def merge_pair(ids, pair, new):
    out, i = [], 0
    while i < len(ids):
        if ids[i:i + 2] == list(pair):
            out.append(new)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def train_bpe(text, n_merges):
    pieces = [list(p.encode("utf-8")) for p in GPT2_PATTERN.findall(text)]
    merges = []
    for _ in range(n_merges):
        counts = Counter(pair for ids in pieces for pair in zip(ids, ids[1:]))
        if not counts:
            break
        pair, count = counts.most_common(1)[0]  # ties: the pair seen first, not the smallest
        if count < 2:
            break
        pieces = [merge_pair(ids, pair, 256 + len(merges)) for ids in pieces]
        merges.append(pair)
    return merges
''',
        "decode": '''
def decode(ids, merges):
    vocab = {i: bytes([i]) for i in range(256)}
    for r, (a, b) in enumerate(merges):
        vocab[256 + r] = vocab[a] + vocab[b]
    return "".join(vocab[i].decode("utf-8", errors="replace") for i in ids)  # each token on its own
''',
        "cached_attention": '''
def cached_attention(x_new, cache, params, n_head):
    B, n_new, d = x_new.shape
    q, k, v = (split_heads(t, n_head) for t in
               F.linear(x_new, params["in_proj_weight"], params["in_proj_bias"]).chunk(3, dim=-1))
    if cache is not None:
        k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d // n_head)
    allowed = torch.ones(n_new, k.shape[2], dtype=torch.bool, device=x_new.device).tril()  # aligned at the start
    A = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return F.linear(merge_heads(A @ v), params["out_proj.weight"], params["out_proj.bias"]), {"k": k, "v": v}
'''}, {"test_train_bpe", "hidden_train_bpe", "test_decode", "hidden_decode", "test_cached_attention",
       "hidden_cached_attention"}),
    "ch10": ({
        "mask_tokens": '''
def mask_tokens(ids, mask_id, vocab_size, special_ids, pad_id, p=0.15, generator=None):
    special = torch.tensor(list(special_ids) + [mask_id, pad_id], device=ids.device)
    chosen = ~torch.isin(ids, special) & (torch.rand(ids.shape, device=ids.device) < p)
    inputs = ids.masked_fill(chosen, mask_id)  # every chosen token becomes [MASK]: no 10% random, 10% unchanged
    labels = torch.where(chosen, ids, -100)
    return inputs, labels
''',
        "bert_embeddings": '''
def bert_embeddings(ids, segments, params):
    positions = torch.arange(ids.shape[1], device=ids.device)
    x = (params["word_embeddings.weight"][ids] + params["position_embeddings.weight"][positions]
         + params["token_type_embeddings.weight"][segments])
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), params["LayerNorm.weight"], params["LayerNorm.bias"])
''',
        "best_span": '''
def best_span(start_logits, end_logits, passage_mask, max_len=None):
    start = start_logits.masked_fill(~passage_mask, float("-inf")).argmax(-1)  # each end on its own
    end = end_logits.masked_fill(~passage_mask, float("-inf")).argmax(-1)
    return start, end
'''}, {"test_mask_tokens", "hidden_mask_tokens", "test_bert_embeddings", "hidden_bert_embeddings", "test_best_span",
       "hidden_best_span"}),
    "ch11": ({
        "rms_norm": '''
def rms_norm(x, weight, eps=1e-6):
    mu = x.mean(-1, keepdim=True)  # centred, as LayerNorm
    return weight * (x - mu) / torch.sqrt((x - mu).pow(2).mean(-1, keepdim=True) + eps)
''',
        "dpo_loss": '''
def dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    margin = (policy_rejected - ref_rejected) - (policy_chosen - ref_chosen)  # the wrong way round
    return -F.logsigmoid(beta * margin).mean()
''',
        "max_cached_tokens": '''
def max_cached_tokens(memory_bytes, n_layer, n_head, n_kv_head, d_head, bytes_per_value):
    return memory_bytes // (2 * n_layer * n_head * d_head * bytes_per_value)
'''}, {"test_rms_norm", "hidden_rms_norm", "test_dpo_loss", "hidden_dpo_loss", "test_max_cached_tokens",
       "hidden_max_cached_tokens"}),
}


@pytest.fixture(scope="module", params=ASSIGNMENTS)
def graded(request, tmp_path_factory):
    assignment = request.param
    (solution,) = (ROOT / "solutions" / assignment).glob("*.ipynb")
    source = nbformat.read(solution, as_version=4)
    solved = solution_answers(assignment)
    tmp = tmp_path_factory.mktemp(assignment)
    make_samples(tmp / "subs", assignment)  # correct, blank, syntax_error, last_unanswered, not_a_notebook
    wrong_answers, zero_cells = WRONG.get(assignment, ({}, set()))
    if wrong_answers:
        (tmp / "subs" / "wrong").mkdir()
        nbformat.write(fill({**solved, **wrong_answers}, assignment), tmp / "subs" / "wrong" / solution.name)
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    r = subprocess.run([sys.executable, "-m", "lmbook.autograde", str(tmp / "subs"), "--out", str(tmp / "out"),
                        "--course", str(ROOT / "autograder"), "--assignment", assignment],
                       capture_output=True, text=True, env=env, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    with open(tmp / "out" / "grades.csv") as f:
        rows = {row["student"]: row for row in csv.DictReader(f)}
    cells = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"] for c in source.cells
             if c.metadata.get("nbgrader", {}).get("grade")}
    # free-text answers graded by hand (markdown answer cells with points): pending, never graded by the machine
    by_hand = {c.metadata["nbgrader"]["grade_id"] for c in source.cells
               if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "markdown"}
    last = code_answers(assignment)[-1]  # make_samples leaves the last code answer unwritten, or breaks it
    defined = {node.name for node in ast.walk(ast.parse(solved[last])) if isinstance(node, ast.FunctionDef)}
    unanswered = {c.metadata["nbgrader"]["grade_id"] for c in source.cells if is_test_cell(c)
                  and any(call.fn in defined for call in parse_test_cell(c.source))}
    return {"rows": rows, "cells": cells, "zero": zero_cells, "out": tmp / "out", "assignment": assignment,
            "unanswered": unanswered, "by_hand": by_hand}


def test_the_solutions_earn_full_marks(graded):
    # Full marks: every autograded point; the model answers to free-text questions await grading by hand (no
    # machine grades them, and they are not graded as 0 either).
    row = graded["rows"]["correct"]
    by_hand = sum(p for gid, p in graded["cells"].items() if gid in graded["by_hand"])
    assert float(row["max"]) == sum(graded["cells"].values()), row
    assert (float(row["total"]), float(row["pending"])) == (float(row["max"]) - by_hand, by_hand), row


def test_the_unmodified_exercise_scores_zero(graded):
    row = graded["rows"]["blank"]
    assert (float(row["total"]), float(row["pending"])) == (0, 0), row  # an answer left as released is 0
    assert row["status"] == "graded", row


def test_an_unanswered_task_loses_exactly_the_points_of_its_tests(graded):
    assert graded["unanswered"], "the last answer cell's functions are checked by no test cell"
    expected = sum(p for gid, p in graded["cells"].items() if gid not in graded["unanswered"] | graded["by_hand"])
    row = graded["rows"]["last_unanswered"]
    assert float(row["total"]) == expected, row


def test_a_syntax_error_costs_only_the_tasks_of_its_cell(graded):
    expected = sum(p for gid, p in graded["cells"].items() if gid not in graded["unanswered"] | graded["by_hand"])
    row = graded["rows"]["syntax_error"]
    assert (float(row["total"]), row["status"]) == (expected, "graded"), row


def test_a_file_that_is_not_a_notebook_is_reported_with_zero(graded):
    row = graded["rows"]["not_a_notebook"]
    assert row["status"].startswith("unreadable notebook") and float(row["total"]) == 0, row


# What the wrong submission's feedback must say, by assignment (its mistakes named in the student's terms).
NAMED = {
    "ch02": ("swapped the update gate", "averaged over padding", "clip_grad_norm_"),
    "ch03": ("not graded", "picked the final answer by the raw sum", "did not clip the n-gram counts"),
    "ch04": ("exactly -inf", "subtract each row", "[c_t; emb(y_{t-1})]"),
    "ch05": ("applied the mask after the softmax",),
    "ch06": ("inverted the padding mask",),
    "ch07": ("the half-split layout",),
    "ch08": ("read norm_first backwards",),
    "ch09": ("broke ties by the pair seen first", "decoded each token on its own",
             "aligned the causal mask at the start"),
    "ch10": ("replaced every chosen token by [MASK]", "which matters when the summed embeddings are small",
             "took the argmax of the start and of the end logits separately"),
    "ch11": ("subtracted the mean", "flipped the sign of the margin",
             "cached every query head"),
}


def test_known_mistakes_lose_exactly_their_tasks_points(graded):
    assert graded["zero"], f"write a submission with known mistakes for {graded['assignment']} in WRONG"
    expected = sum(p for gid, p in graded["cells"].items() if gid not in graded["zero"] | graded["by_hand"])
    row = graded["rows"]["wrong"]
    assert float(row["total"]) == expected, row
    feedback = (graded["out"] / "feedback" / "wrong.html").read_text()
    assert graded["assignment"] in NAMED, "say which phrases the wrong submission's feedback must contain"
    for phrase in NAMED[graded["assignment"]]:
        assert phrase in feedback, f"mistake not named in the feedback: {phrase!r}"
