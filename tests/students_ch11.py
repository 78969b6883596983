"""Exercise 11 (from GPT-2 to today's language models) as students write it: wrong answers with the mistake they
have, and right ones written differently from the reference (see test_students.py)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from check_contract import Student

from lmbook.tasks.ch11 import COMPUTE_OPTIMAL, DPO_LOSS, GQA_ATTENTION, INSTRUCTION_LOSS, RMS_NORM, SWIGLU
from lmbook.tasks.questions.ch11 import DPO_MARGIN_GRADIENT, LLAMA_PARAMETERS, MAX_CACHED_TOKENS


def _has(check, start: str) -> str:
    """The misconception of ``check``'s Mutant that begins with ``start`` (word for word)."""
    (text,) = {m.misconception for m in check.mutants if m.misconception.startswith(start)}
    return text


# ----------------------------------------------------------------------------- rms_norm


def rn_layer_norm(x, weight, eps=1e-6):
    mean = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, keepdim=True, unbiased=False)
    return weight * (x - mean) / torch.sqrt(var + eps)


def rn_eps_outside(x, weight, eps=1e-6):
    rms = x.pow(2).mean(-1, keepdim=True).sqrt()
    return weight * x / (rms + eps)


def rn_no_eps(x, weight, eps=1e-6):
    return weight * x * torch.rsqrt(x.square().mean(-1, keepdim=True))


def rn_no_gain(x, weight, eps=1e-6):
    return x / torch.sqrt(torch.mean(x * x, dim=-1, keepdim=True) + eps)


def rn_norm(x, weight, eps=1e-6):
    return weight * x / torch.sqrt((x ** 2).sum(-1, keepdim=True) + eps)


def rn_whole_tensor(x, weight, eps=1e-6):
    return weight * x / torch.sqrt(x.pow(2).mean() + eps)


def rn_std(x, weight, eps=1e-6):
    return weight * x / (x.std(-1, keepdim=True) + eps)  # the standard deviation is not the root mean square


def rn_eps_squared(x, weight, eps=1e-6):
    return weight * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps ** 2)


def rn_right_rsqrt(x, weight, eps=1e-6):
    return x * torch.rsqrt(x.square().mean(dim=-1, keepdim=True) + eps) * weight


def rn_right_norm(x, weight, eps=1e-6):
    d = x.shape[-1]
    rms = torch.sqrt(torch.linalg.vector_norm(x, dim=-1, keepdim=True) ** 2 / d + eps)
    return weight * x / rms


def rn_right_einsum(x, weight, eps=1e-6):
    ms = torch.einsum("...i,...i->...", x, x) / x.shape[-1]
    return x / (ms + eps).sqrt().unsqueeze(-1) * weight


# ----------------------------------------------------------------------------- swiglu


def sw_silu_numpy(x, params):  # numpy refused a tensor that requires grad, so it was detached first
    import numpy as np

    gate = x @ params["gate_proj.weight"].T
    g = gate.detach().cpu().numpy()
    silu = torch.from_numpy(g / (1 + np.exp(-g))).to(gate.device)
    return (silu * (x @ params["up_proj.weight"].T)) @ params["down_proj.weight"].T


def sw_swapped(x, params):
    gate = x @ params["gate_proj.weight"].T
    up = x @ params["up_proj.weight"].T
    return (gate * F.silu(up)) @ params["down_proj.weight"].T


def sw_both(x, params):
    return (F.silu(x @ params["gate_proj.weight"].T) * F.silu(x @ params["up_proj.weight"].T)) \
        @ params["down_proj.weight"].T


def sw_gelu(x, params):
    h = F.gelu(F.linear(x, params["gate_proj.weight"])) * F.linear(x, params["up_proj.weight"])
    return F.linear(h, params["down_proj.weight"])


def sw_glu(x, params):
    h = torch.sigmoid(F.linear(x, params["gate_proj.weight"])) * F.linear(x, params["up_proj.weight"])
    return F.linear(h, params["down_proj.weight"])


def sw_no_up(x, params):
    return F.silu(x @ params["gate_proj.weight"].T) @ params["down_proj.weight"].T


def sw_sum(x, params):
    h = F.silu(x @ params["gate_proj.weight"].T) + x @ params["up_proj.weight"].T
    return h @ params["down_proj.weight"].T


def sw_relu(x, params):
    h = torch.relu(x @ params["gate_proj.weight"].T) * (x @ params["up_proj.weight"].T)
    return h @ params["down_proj.weight"].T


def sw_tanh_gate(x, params):
    a = x @ params["gate_proj.weight"].T
    return (a * torch.tanh(a) * (x @ params["up_proj.weight"].T)) @ params["down_proj.weight"].T


def sw_right_sigmoid(x, params):
    a = F.linear(x, params["gate_proj.weight"])
    b = F.linear(x, params["up_proj.weight"])
    return F.linear(a * torch.sigmoid(a) * b, params["down_proj.weight"])


def sw_right_einsum(x, params):
    a = torch.einsum("...d,fd->...f", x, params["gate_proj.weight"])
    b = torch.einsum("...d,fd->...f", x, params["up_proj.weight"])
    return torch.einsum("...f,df->...d", a / (1 + torch.exp(-a)) * b, params["down_proj.weight"])


def sw_right_stacked(x, params):
    both = x @ torch.cat([params["gate_proj.weight"], params["up_proj.weight"]]).T
    gate, up = both.chunk(2, dim=-1)
    return torch.matmul(F.silu(gate) * up, params["down_proj.weight"].T)


# ----------------------------------------------------------------------------- gqa_attention


def _rot(u, cos, sin):
    h = u.shape[-1] // 2
    return u * cos + torch.cat([-u[..., h:], u[..., :h]], dim=-1) * sin


def _gqa(x_new, cache, params, n_head, n_kv_head, cos, sin, *, tile=False, cache_repeated=False, rope_k=True,
         cache_raw_k=False, mask_start=False, scale_d=False, rope_v=False, neighbours=False, no_mask=False,
         no_rope=False):
    """A student's grouped-query attention, with the switches of the mistakes they make."""
    B, n, d = x_new.shape
    dh = params["q_proj.weight"].shape[0] // n_head
    q = (x_new @ params["q_proj.weight"].T).reshape(B, n, n_head, dh).permute(0, 2, 1, 3)
    k = (x_new @ params["k_proj.weight"].T).reshape(B, n, n_kv_head, dh).permute(0, 2, 1, 3)
    v = (x_new @ params["v_proj.weight"].T).reshape(B, n, n_kv_head, dh).permute(0, 2, 1, 3)

    def rope(u):
        if no_rope:
            return u
        if neighbours:
            even, odd = u[..., 0::2], u[..., 1::2]
            c, s = cos[..., : dh // 2], sin[..., : dh // 2]
            return torch.stack([even * c - odd * s, odd * c + even * s], dim=-1).flatten(-2)
        return _rot(u, cos, sin)

    k_raw = k
    q = rope(q)
    k = rope(k) if rope_k else k
    v = rope(v) if rope_v else v
    past_k = cache["k"] if cache is not None else k[:, :, :0]
    past_v = cache["v"] if cache is not None else v[:, :, :0]
    keys, values = torch.cat([past_k, k], 2), torch.cat([past_v, v], 2)
    g = n_head // n_kv_head
    if tile:
        kr, vr = keys.repeat(1, g, 1, 1), values.repeat(1, g, 1, 1)
    else:
        kr, vr = keys.repeat_interleave(g, 1), values.repeat_interleave(g, 1)
    s = q @ kr.transpose(2, 3) / math.sqrt(d if scale_d else dh)
    T = kr.shape[2]
    if not no_mask:
        offset = 0 if mask_start else T - n
        s = s.masked_fill(torch.ones(n, T, dtype=torch.bool, device=s.device).triu(offset + 1), float("-inf"))
    y = (s.softmax(-1) @ vr).permute(0, 2, 1, 3).reshape(B, n, n_head * dh) @ params["o_proj.weight"].T
    if cache_repeated:
        return y, {"k": kr, "v": vr}
    if cache_raw_k:
        return y, {"k": torch.cat([past_k, k_raw], 2), "v": values}
    return y, {"k": keys, "v": values}


def gq_tiled(x_new, cache, params, n_head, n_kv_head, cos, sin):
    return _gqa(x_new, cache, params, n_head, n_kv_head, cos, sin, tile=True)


def gq_cache_repeated(x_new, cache, params, n_head, n_kv_head, cos, sin):
    return _gqa(x_new, cache, params, n_head, n_kv_head, cos, sin, cache_repeated=True)


def gq_queries_only(x_new, cache, params, n_head, n_kv_head, cos, sin):
    return _gqa(x_new, cache, params, n_head, n_kv_head, cos, sin, rope_k=False)


def gq_cache_before_rope(x_new, cache, params, n_head, n_kv_head, cos, sin):
    return _gqa(x_new, cache, params, n_head, n_kv_head, cos, sin, cache_raw_k=True)


def gq_mask_at_start(x_new, cache, params, n_head, n_kv_head, cos, sin):
    return _gqa(x_new, cache, params, n_head, n_kv_head, cos, sin, mask_start=True)


def gq_scale_d_model(x_new, cache, params, n_head, n_kv_head, cos, sin):
    return _gqa(x_new, cache, params, n_head, n_kv_head, cos, sin, scale_d=True)


def gq_rope_values(x_new, cache, params, n_head, n_kv_head, cos, sin):
    return _gqa(x_new, cache, params, n_head, n_kv_head, cos, sin, rope_v=True)


def gq_neighbour_pairs(x_new, cache, params, n_head, n_kv_head, cos, sin):
    return _gqa(x_new, cache, params, n_head, n_kv_head, cos, sin, neighbours=True)


def gq_no_mask(x_new, cache, params, n_head, n_kv_head, cos, sin):
    return _gqa(x_new, cache, params, n_head, n_kv_head, cos, sin, no_mask=True)


def gq_no_rope(x_new, cache, params, n_head, n_kv_head, cos, sin):
    return _gqa(x_new, cache, params, n_head, n_kv_head, cos, sin, no_rope=True)


def gq_right_switches_off(x_new, cache, params, n_head, n_kv_head, cos, sin):
    return _gqa(x_new, cache, params, n_head, n_kv_head, cos, sin)


def gq_right_loop_over_heads(x_new, cache, params, n_head, n_kv_head, cos, sin):
    """One query head at a time, each reading its group's key/value head."""
    B, n, _ = x_new.shape
    dh = params["q_proj.weight"].shape[0] // n_head
    ks, vs, ys = [], [], []
    for j in range(n_kv_head):
        wk = params["k_proj.weight"][j * dh:(j + 1) * dh]
        wv = params["v_proj.weight"][j * dh:(j + 1) * dh]
        k = _rot(x_new @ wk.T, cos, sin)
        v = x_new @ wv.T
        if cache is not None:
            k = torch.cat([cache["k"][:, j], k], dim=1)
            v = torch.cat([cache["v"][:, j], v], dim=1)
        ks.append(k)
        vs.append(v)
    T = ks[0].shape[1]
    allowed = torch.arange(T)[None, :] <= torch.arange(T - n, T)[:, None]
    for h in range(n_head):
        q = _rot(x_new @ params["q_proj.weight"][h * dh:(h + 1) * dh].T, cos, sin)
        kv = h // (n_head // n_kv_head)
        w = torch.softmax((q @ ks[kv].transpose(1, 2) / dh ** 0.5).masked_fill(~allowed, -math.inf), dim=-1)
        ys.append(w @ vs[kv])
    y = torch.cat(ys, dim=-1) @ params["o_proj.weight"].T
    return y, {"k": torch.stack(ks, dim=1), "v": torch.stack(vs, dim=1)}


def gq_right_grouped_einsum(x_new, cache, params, n_head, n_kv_head, cos, sin):
    """Queries reshaped into (groups, heads per group): no repetition at all."""
    B, n, _ = x_new.shape
    dh = params["q_proj.weight"].shape[0] // n_head
    g = n_head // n_kv_head
    q = _rot((x_new @ params["q_proj.weight"].T).view(B, n, n_head, dh).transpose(1, 2), cos, sin)
    k = _rot((x_new @ params["k_proj.weight"].T).view(B, n, n_kv_head, dh).transpose(1, 2), cos, sin)
    v = (x_new @ params["v_proj.weight"].T).view(B, n, n_kv_head, dh).transpose(1, 2)
    if cache:
        k, v = torch.cat((cache["k"], k), 2), torch.cat((cache["v"], v), 2)
    T = k.shape[2]
    qg = q.reshape(B, n_kv_head, g, n, dh)
    scores = torch.einsum("bkgqd,bktd->bkgqt", qg, k) / math.sqrt(dh)
    future = torch.triu(torch.ones(n, T, dtype=torch.bool), diagonal=T - n + 1)
    w = scores.masked_fill(future, float("-inf")).softmax(-1)
    y = torch.einsum("bkgqt,bktd->bkgqd", w, v).reshape(B, n_head, n, dh).transpose(1, 2).reshape(B, n, -1)
    return y @ params["o_proj.weight"].T, {"k": k, "v": v}


# ----------------------------------------------------------------------------- instruction_loss


def il_every_token(logits, ids, response_mask):
    return F.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:])


def il_divide_by_positions(logits, ids, response_mask):
    nll = F.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")
    return (nll * response_mask[:, 1:]).sum() / nll.numel()


def il_per_sequence(logits, ids, response_mask):
    nll = F.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")
    m = response_mask[:, 1:].to(nll.dtype)
    return ((nll * m).sum(dim=1) / m.sum(dim=1)).mean()


def il_no_shift(logits, ids, response_mask):
    logp = torch.log_softmax(logits, -1).gather(-1, ids[..., None]).squeeze(-1)
    return -(logp[response_mask]).mean()


def il_input_mask(logits, ids, response_mask):
    logp = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    return -logp[response_mask[:, :-1]].mean()


def il_exp(logits, ids, response_mask):
    probs = torch.exp(logits[:, :-1]) / torch.exp(logits[:, :-1]).sum(-1, keepdim=True)
    p = probs.gather(-1, ids[:, 1:, None]).squeeze(-1)
    m = response_mask[:, 1:].to(p.dtype)
    return -(torch.log(p) * m).sum() / m.sum()


def il_mask_prompt_instead(logits, ids, response_mask):
    logp = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    return -logp[~response_mask[:, 1:]].mean()  # the prompt (and padding) counted, the response left out


def il_pad_with_zero(logits, ids, response_mask):
    labels = ids.masked_fill(~response_mask, 0)[:, 1:]  # "padding is token 0"
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=0)


def il_right_ignore_index(logits, ids, response_mask):
    labels = ids.masked_fill(~response_mask, -100)[:, 1:]
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)


def il_right_boolean_index(logits, ids, response_mask):
    logp = torch.log_softmax(logits[:, :-1], dim=-1)
    picked = logp.gather(2, ids[:, 1:].unsqueeze(2)).squeeze(2)
    return -picked[response_mask[:, 1:]].mean()


def il_right_logsumexp(logits, ids, response_mask):
    total, count = 0.0, 0
    for b in range(ids.shape[0]):
        for t in range(1, ids.shape[1]):
            if response_mask[b, t]:
                z = logits[b, t - 1]
                total = total + torch.logsumexp(z, 0) - z[ids[b, t]]
                count += 1
    return total / count


# ----------------------------------------------------------------------------- dpo_loss


def dp_flipped(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    margin = (policy_rejected - ref_rejected) - (policy_chosen - ref_chosen)
    return -F.logsigmoid(beta * margin).mean()


def dp_no_reference(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    return -F.logsigmoid(beta * (policy_chosen - policy_rejected)).mean()


def dp_crossed(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    return -F.logsigmoid(beta * ((policy_chosen - ref_rejected) - (policy_rejected - ref_chosen))).mean()


def dp_beta_outside(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    margin = policy_chosen - ref_chosen - policy_rejected + ref_rejected
    return -beta * F.logsigmoid(margin).mean()


def dp_no_log(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    margin = policy_chosen - ref_chosen - policy_rejected + ref_rejected
    return (1 - torch.sigmoid(beta * margin)).mean() - 1


def dp_log_sigmoid(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    margin = policy_chosen - ref_chosen - policy_rejected + ref_rejected
    return -torch.log(torch.sigmoid(beta * margin)).mean()


def dp_log1p_exp(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    # −ln σ(z) = ln(1 + e^−z), written out: e^−z overflows for a very wrong pair
    z = beta * ((policy_chosen - ref_chosen) - (policy_rejected - ref_rejected))
    return torch.log1p(torch.exp(-z)).mean()


def dp_sum(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    margin = policy_chosen - ref_chosen - policy_rejected + ref_rejected
    return -F.logsigmoid(beta * margin).sum()


def dp_ratio_of_probs(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    margin = policy_chosen / ref_chosen - policy_rejected / ref_rejected  # log-probabilities divided, not subtracted
    return -F.logsigmoid(beta * margin).mean()


def dp_right_softplus(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    logits = (policy_chosen - policy_rejected) - (ref_chosen - ref_rejected)
    return F.softplus(-beta * logits).mean()


def dp_right_log1p(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    z = beta * ((policy_chosen - ref_chosen) - (policy_rejected - ref_rejected))
    # ln(1 + e^-z) written stably on both sides; each branch clamped to its own side, so that the branch
    # torch.where drops never overflows either (its gradient is computed too)
    pos, neg = z.clamp(min=0), z.clamp(max=0)
    return torch.where(z > 0, torch.log1p(torch.exp(-pos)), -neg + torch.log1p(torch.exp(neg))).mean()


def dp_where_overflows_unseen(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    z = beta * ((policy_chosen - ref_chosen) - (policy_rejected - ref_rejected))
    # the right value, but the branch torch.where drops still overflows: its gradient is inf * 0 = nan
    return torch.where(z > 0, torch.log1p(torch.exp(-z)), -z + torch.log1p(torch.exp(z))).mean()


def dp_policy_detached(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    # "the log-probabilities are given": treated as constants, so no gradient reaches the policy
    chosen, rejected = policy_chosen.detach(), policy_rejected.detach()
    return -F.logsigmoid(beta * ((chosen - ref_chosen) - (rejected - ref_rejected))).mean()


def dp_right_stacked(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    rewards = beta * (torch.stack([policy_chosen, policy_rejected]) - torch.stack([ref_chosen, ref_rejected]))
    return -torch.log_softmax(rewards, dim=0)[0].mean()  # σ(a − b) = softmax([a, b])[0]


# ----------------------------------------------------------------------------- compute_optimal


def co_no_six(flops, tokens_per_param=20.0):
    n = (flops / tokens_per_param) ** 0.5
    return n, n * tokens_per_param


def co_forward_only(flops, tokens_per_param=20.0):
    n = math.sqrt(flops / 2 / tokens_per_param)
    return n, tokens_per_param * n


def co_no_sqrt(flops, tokens_per_param=20.0):
    n = flops / (6 * tokens_per_param)
    return n, tokens_per_param * n


def co_root_then_ratio(flops, tokens_per_param=20.0):
    n = math.sqrt(flops / 6) / tokens_per_param
    return n, n * tokens_per_param


def co_swapped(flops, tokens_per_param=20.0):
    n = math.sqrt(flops / (6 * tokens_per_param))
    return tokens_per_param * n, n


def co_d_over_r(flops, tokens_per_param=20.0):
    n = math.sqrt(flops / (6 * tokens_per_param))
    return n, n / tokens_per_param


def co_list(flops, tokens_per_param=20.0):
    n = math.sqrt(flops / (6 * tokens_per_param))
    return [n, tokens_per_param * n]


def co_ratio_ignored(flops, tokens_per_param=20.0):
    n = math.sqrt(flops / 120)  # 20 tokens per parameter, whatever is asked
    return n, 20 * n


def co_tensors(flops, tokens_per_param=20.0):  # "torch does the maths"
    n = torch.sqrt(torch.tensor(flops / (6 * tokens_per_param), dtype=torch.float64))
    return n, tokens_per_param * n


def co_rounded(flops, tokens_per_param=20.0):  # "a number of parameters is a whole number"
    n = round(math.sqrt(flops / (6 * tokens_per_param)))
    return n, round(tokens_per_param * n)


def co_right_tokens_first(flops, tokens_per_param=20.0):
    tokens = math.sqrt(flops * tokens_per_param / 6)
    return tokens / tokens_per_param, tokens


def co_right_logs(flops, tokens_per_param=20.0):
    log_n = 0.5 * (math.log(flops) - math.log(6) - math.log(tokens_per_param))
    n = math.exp(log_n)
    return n, flops / (6 * n)


def co_right_torch(flops, tokens_per_param=20.0):
    n = torch.tensor(flops / 6 / tokens_per_param, dtype=torch.float64).sqrt().item()
    return float(n), float(n * tokens_per_param)


WRONG = {
    "rms_norm": [
        Student(rn_layer_norm, _has(RMS_NORM, "subtracted the mean")),
        Student(rn_eps_outside, _has(RMS_NORM, "added ε outside the root")),
        Student(rn_no_eps, _has(RMS_NORM, "left out ε")),
        Student(rn_no_gain, _has(RMS_NORM, "left out the gain")),
        Student(rn_norm, _has(RMS_NORM, "divided by the root of the sum")),
        Student(rn_whole_tensor, _has(RMS_NORM, "took the mean over the whole tensor")),
        Student(rn_std, None),
        Student(rn_eps_squared, None),
    ],
    "swiglu": [
        Student(sw_silu_numpy, None, note="right values; silu computed in numpy, outside autograd"),
        Student(sw_swapped, _has(SWIGLU, "put silu on the up branch")),
        Student(sw_both, _has(SWIGLU, "put silu on both branches")),
        Student(sw_gelu, _has(SWIGLU, "used GELU for the gate")),
        Student(sw_glu, _has(SWIGLU, "used the sigmoid for the gate")),
        Student(sw_no_up, _has(SWIGLU, "left out the up branch")),
        Student(sw_sum, _has(SWIGLU, "added the two branches")),
        Student(sw_relu, _has(SWIGLU, "used ReLU for the gate")),
        Student(sw_tanh_gate, None),
    ],
    "gqa_attention": [
        Student(gq_tiled, _has(GQA_ATTENTION, "repeated the key/value heads as a whole")),
        Student(gq_cache_repeated, _has(GQA_ATTENTION, "cached the keys and values after repeating them")),
        Student(gq_queries_only, _has(GQA_ATTENTION, "rotated the queries only")),
        Student(gq_cache_before_rope, _has(GQA_ATTENTION, "stored the new keys in the cache before rotating")),
        Student(gq_mask_at_start, _has(GQA_ATTENTION, "aligned the causal mask at the start")),
        Student(gq_scale_d_model, _has(GQA_ATTENTION, "scaled the scores by 1/sqrt(d_model)")),
        Student(gq_rope_values, _has(GQA_ATTENTION, "rotated the values too")),
        Student(gq_neighbour_pairs, _has(GQA_ATTENTION, "rotated neighbouring pairs")),
        Student(gq_no_mask, None),
        Student(gq_no_rope, None),
    ],
    "instruction_loss": [
        Student(il_every_token, _has(INSTRUCTION_LOSS, "averaged the loss over the prompt tokens too")),
        Student(il_divide_by_positions, _has(INSTRUCTION_LOSS, "summed over the response tokens but divided")),
        Student(il_per_sequence, _has(INSTRUCTION_LOSS, "averaged each sequence's response tokens")),
        Student(il_no_shift, _has(INSTRUCTION_LOSS, "scored logits[:, t] against ids[:, t]")),
        Student(il_input_mask, _has(INSTRUCTION_LOSS, "masked with response_mask[:, :-1]")),
        Student(il_exp, _has(INSTRUCTION_LOSS, "computed the softmax from exp(logits) itself")),
        Student(il_mask_prompt_instead, None),
        Student(il_pad_with_zero, _has(INSTRUCTION_LOSS, "left out the response tokens whose id is 0")),
    ],
    "dpo_loss": [
        Student(dp_flipped, _has(DPO_LOSS, "flipped the sign of the margin")),
        Student(dp_no_reference, _has(DPO_LOSS, "left out the reference model")),
        Student(dp_crossed, _has(DPO_LOSS, "took each log-ratio against the other response's reference")),
        Student(dp_beta_outside, _has(DPO_LOSS, "multiplied the loss by β")),
        Student(dp_no_log, _has(DPO_LOSS, "left out the logarithm")),
        Student(dp_log_sigmoid, _has(DPO_LOSS, "computed ln σ(z) in a form")),
        Student(dp_log1p_exp, _has(DPO_LOSS, "computed ln σ(z) in a form"), "ln(1 + exp(−z)): exp overflows"),
        Student(dp_sum, _has(DPO_LOSS, "summed over the pairs")),
        Student(dp_ratio_of_probs, None),
        Student(dp_where_overflows_unseen, None, "right value, nan gradient from the branch torch.where drops"),
        Student(dp_policy_detached, None, "right value, no gradient reaches the policy"),
    ],
    "compute_optimal": [
        Student(co_no_six, _has(COMPUTE_OPTIMAL, "left out the 6")),
        Student(co_forward_only, _has(COMPUTE_OPTIMAL, "counted the forward pass only")),
        Student(co_no_sqrt, _has(COMPUTE_OPTIMAL, "divided the budget without the square root")),
        Student(co_root_then_ratio, _has(COMPUTE_OPTIMAL, "took the root before dividing by the ratio")),
        Student(co_swapped, _has(COMPUTE_OPTIMAL, "returned (D, N)")),
        Student(co_d_over_r, _has(COMPUTE_OPTIMAL, "divided N by the ratio")),
        Student(co_list, None),
        Student(co_ratio_ignored, None),
        Student(co_tensors, None),
        Student(co_rounded, None),
    ],
}

RIGHT = {
    "rms_norm": [rn_right_rsqrt, rn_right_norm, rn_right_einsum],
    "swiglu": [sw_right_sigmoid, sw_right_einsum, sw_right_stacked],
    "gqa_attention": [gq_right_switches_off, gq_right_loop_over_heads, gq_right_grouped_einsum],
    "instruction_loss": [il_right_ignore_index, il_right_boolean_index, il_right_logsumexp],
    "dpo_loss": [dp_right_softplus, dp_right_log1p, dp_right_stacked],
    "compute_optimal": [co_right_tokens_first, co_right_logs, co_right_torch],
}


# ============================================================================= the thinking questions


# ----------------------------------------------------------------------------- llama_parameters


def lp_kv_like_q(config):
    V, L, d, f = config["vocab_size"], config["n_layer"], config["d_model"], config["d_ff"]
    total = V * d + L * (4 * d * d + 3 * d * f + 2 * d) + d
    return total if config["tie_weights"] else total + V * d


def lp_two_matrices(config):
    V, L, d, f = config["vocab_size"], config["n_layer"], config["d_model"], config["d_ff"]
    kv = config["n_kv_head"] * (d // config["n_head"])
    total = V * d + L * (2 * d * d + 2 * d * kv + 2 * d * f + 2 * d) + d
    return total + (0 if config["tie_weights"] else V * d)


def lp_no_final_norm(config):
    V, L, d, f = config["vocab_size"], config["n_layer"], config["d_model"], config["d_ff"]
    kv = config["n_kv_head"] * (d // config["n_head"])
    return V * d + L * (2 * d * d + 2 * d * kv + 3 * d * f + 2 * d) + (0 if config["tie_weights"] else V * d)


def lp_norm_bias(config):
    V, L, d, f = config["vocab_size"], config["n_layer"], config["d_model"], config["d_ff"]
    kv = config["n_kv_head"] * (d // config["n_head"])
    norm = 2 * d  # gain and bias, as LayerNorm
    return V * d + L * (2 * d * d + 2 * d * kv + 3 * d * f + 2 * norm) + norm + (0 if config["tie_weights"] else V * d)


def lp_biases(config):
    V, L, d, f = config["vocab_size"], config["n_layer"], config["d_model"], config["d_ff"]
    kv = config["n_kv_head"] * (d // config["n_head"])
    attn = (d * d + d) + 2 * (d * kv + kv) + (d * d + d)
    mlp = 2 * (d * f + f) + (f * d + d)
    return V * d + L * (attn + mlp + 2 * d) + d + (0 if config["tie_weights"] else V * d)


def lp_output_always(config):
    V, L, d, f = config["vocab_size"], config["n_layer"], config["d_model"], config["d_ff"]
    kv = config["n_kv_head"] * (d // config["n_head"])
    return 2 * V * d + L * (2 * d * d + 2 * d * kv + 3 * d * f + 2 * d) + d


def lp_untied_forgotten(config):
    V, L, d, f = config["vocab_size"], config["n_layer"], config["d_model"], config["d_ff"]
    kv = config["n_kv_head"] * (d // config["n_head"])
    return V * d + L * (2 * d * d + 2 * d * kv + 3 * d * f + 2 * d) + d  # the output layer never counted


def lp_right_by_tensor(config):
    V, L, d, f = config["vocab_size"], config["n_layer"], config["d_model"], config["d_ff"]
    dh = d // config["n_head"]
    shapes = [(V, d)]
    for _ in range(L):
        shapes += [(d,), (config["n_head"] * dh, d), (config["n_kv_head"] * dh, d), (config["n_kv_head"] * dh, d),
                   (d, config["n_head"] * dh), (d,), (f, d), (f, d), (d, f)]
    shapes.append((d,))
    if not config["tie_weights"]:
        shapes.append((V, d))
    return sum(math.prod(s) for s in shapes)


def lp_right_grouped(config):
    c = config
    d = c["d_model"]
    per_layer = d * d * 2 + 2 * d * (d // c["n_head"] * c["n_kv_head"]) + 3 * d * c["d_ff"] + 2 * d
    embeddings = c["vocab_size"] * d * (1 if c["tie_weights"] else 2)
    return int(embeddings + c["n_layer"] * per_layer + d)


def lp_right_torch_meta(config):
    c = config
    d, dh = c["d_model"], c["d_model"] // c["n_head"]
    with torch.device("meta"):
        layers = [torch.nn.Embedding(c["vocab_size"], d)]
        for _ in range(c["n_layer"]):
            layers += [torch.nn.Linear(d, c["n_head"] * dh, bias=False), torch.nn.Linear(d, c["n_kv_head"] * dh,
                                                                                          bias=False),
                       torch.nn.Linear(d, c["n_kv_head"] * dh, bias=False), torch.nn.Linear(c["n_head"] * dh, d,
                                                                                             bias=False),
                       torch.nn.Linear(d, c["d_ff"], bias=False), torch.nn.Linear(d, c["d_ff"], bias=False),
                       torch.nn.Linear(c["d_ff"], d, bias=False)]
        model = torch.nn.ModuleList(layers)
    norms = (2 * c["n_layer"] + 1) * d
    head = 0 if c["tie_weights"] else c["vocab_size"] * d
    return sum(p.numel() for p in model.parameters()) + norms + head


# ----------------------------------------------------------------------------- max_cached_tokens


def mc_every_head(memory_bytes, n_layer, n_head, n_kv_head, d_head, bytes_per_value):
    return memory_bytes // (2 * n_layer * n_head * d_head * bytes_per_value)


def mc_keys_only(memory_bytes, n_layer, n_head, n_kv_head, d_head, bytes_per_value):
    return memory_bytes // (n_layer * n_kv_head * d_head * bytes_per_value)


def mc_one_layer(memory_bytes, n_layer, n_head, n_kv_head, d_head, bytes_per_value):
    return memory_bytes // (2 * n_kv_head * d_head * bytes_per_value)


def mc_rounded(memory_bytes, n_layer, n_head, n_kv_head, d_head, bytes_per_value):
    return round(memory_bytes / (2 * n_layer * n_kv_head * d_head * bytes_per_value))


def mc_queries_too(memory_bytes, n_layer, n_head, n_kv_head, d_head, bytes_per_value):
    per_layer = (n_head + 2 * n_kv_head) * d_head * bytes_per_value
    return memory_bytes // (n_layer * per_layer)


def mc_float(memory_bytes, n_layer, n_head, n_kv_head, d_head, bytes_per_value):
    return memory_bytes / (2 * n_layer * n_kv_head * d_head * bytes_per_value)


def mc_bits(memory_bytes, n_layer, n_head, n_kv_head, d_head, bytes_per_value):
    return memory_bytes // (2 * n_layer * n_kv_head * d_head * 8 * bytes_per_value)


def mc_right_floor(memory_bytes, n_layer, n_head, n_kv_head, d_head, bytes_per_value):
    return math.floor(memory_bytes / (2 * n_layer * n_kv_head * d_head * bytes_per_value))


def mc_right_steps(memory_bytes, n_layer, n_head, n_kv_head, d_head, bytes_per_value):
    per_layer_per_token = 2 * n_kv_head * d_head * bytes_per_value
    return int(memory_bytes // per_layer_per_token // n_layer)


def mc_right_divmod(memory_bytes, n_layer, n_head, n_kv_head, d_head, bytes_per_value):
    tokens, _ = divmod(memory_bytes, n_layer * 2 * d_head * n_kv_head * bytes_per_value)
    return tokens


# ----------------------------------------------------------------------------- dpo_margin_gradient


def mg_plus(margin, beta):
    return -beta / (1 + math.exp(-beta * margin))


def mg_no_beta(margin, beta):
    return -1 / (1 + math.exp(beta * margin))


def mg_positive(margin, beta):
    return beta / (1 + math.exp(beta * margin))


def mg_beta_outside(margin, beta):
    return -beta / (1 + math.exp(margin))


def mg_no_log(margin, beta):
    s = 1 / (1 + math.exp(-beta * margin))
    return -beta * s * (1 - s)


def mg_sigma_only(margin, beta):
    return 1 / (1 + math.exp(-beta * margin)) - 1  # σ(βΔ) − 1 = −σ(−βΔ), without β


def mg_finite_difference(margin, beta):
    h = 1e-3  # a derivative guessed numerically, not derived: off by far more than the tests allow

    def loss(m):
        return math.log1p(math.exp(-beta * m))
    return (loss(margin + h) - loss(margin)) / h


def mg_right_sigma(margin, beta):
    return -beta * (1 - 1 / (1 + math.exp(-beta * margin)))


def mg_right_autograd(margin, beta):
    m = torch.tensor(margin, dtype=torch.float64, requires_grad=True)
    loss = -F.logsigmoid(beta * m)
    loss.backward()
    return m.grad.item()


def mg_right_tanh(margin, beta):
    return -beta * 0.5 * (1 - math.tanh(beta * margin / 2))  # σ(−z) = (1 − tanh(z/2)) / 2


WRONG.update({
    "llama_parameters": [
        Student(lp_kv_like_q, _has(LLAMA_PARAMETERS, "gave W_k and W_v n_head heads")),
        Student(lp_two_matrices, _has(LLAMA_PARAMETERS, "counted two matrices in the feed-forward network")),
        Student(lp_no_final_norm, _has(LLAMA_PARAMETERS, "left out the final RMSNorm")),
        Student(lp_norm_bias, _has(LLAMA_PARAMETERS, "gave each RMSNorm a bias")),
        Student(lp_biases, _has(LLAMA_PARAMETERS, "counted biases in the linear layers")),
        Student(lp_output_always, _has(LLAMA_PARAMETERS, "counted the output layer when it is tied")),
        Student(lp_untied_forgotten, None),
    ],
    "max_cached_tokens": [
        Student(mc_every_head, _has(MAX_CACHED_TOKENS, "cached every query head's keys and values")),
        Student(mc_keys_only, _has(MAX_CACHED_TOKENS, "counted the keys only")),
        Student(mc_one_layer, _has(MAX_CACHED_TOKENS, "counted one layer")),
        Student(mc_rounded, _has(MAX_CACHED_TOKENS, "rounded to the nearest whole position")),
        Student(mc_queries_too, _has(MAX_CACHED_TOKENS, "cached the queries too")),
        Student(mc_float, None),
        Student(mc_bits, None),
    ],
    "dpo_margin_gradient": [
        Student(mg_plus, _has(DPO_MARGIN_GRADIENT, "gave −β σ(β Δ)")),
        Student(mg_no_beta, _has(DPO_MARGIN_GRADIENT, "left out the factor β")),
        Student(mg_positive, _has(DPO_MARGIN_GRADIENT, "gave the derivative the wrong sign")),
        Student(mg_beta_outside, _has(DPO_MARGIN_GRADIENT, "left β out of the sigmoid")),
        Student(mg_no_log, _has(DPO_MARGIN_GRADIENT, "differentiated −σ(β Δ)")),
        Student(mg_sigma_only, _has(DPO_MARGIN_GRADIENT, "left out the factor β")),
        Student(mg_finite_difference, None),
    ],
})

RIGHT.update({
    "llama_parameters": [lp_right_by_tensor, lp_right_grouped, lp_right_torch_meta],
    "max_cached_tokens": [mc_right_floor, mc_right_steps, mc_right_divmod],
    "dpo_margin_gradient": [mg_right_sigma, mg_right_autograd, mg_right_tanh],
})
