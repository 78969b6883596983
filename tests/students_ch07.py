"""Exercise 7 (positional information) as students write it: wrong answers with the mistake they have, and right
ones written differently from the reference (see test_students.py)."""

from __future__ import annotations

import math

import numpy as np
import torch
from check_contract import Student

from lmbook.tasks.ch07 import ALIBI, RELATIVE, ROPE, SINUSOIDAL

INF = float("-inf")


def _has(check, start: str) -> str:
    """The misconception of ``check``'s Mutant that begins with ``start`` (word for word)."""
    (text,) = {m.misconception for m in check.mutants if m.misconception.startswith(start)}
    return text


# ----------------------------------------------------------------------------- sinusoidal_encoding

def sin_cos_first(n_pos, d):
    pe = torch.zeros(n_pos, d)
    pos = torch.arange(n_pos).float().unsqueeze(1)
    div = torch.exp(torch.arange(0, d, 2).float() * (-math.log(10000.0) / d))
    pe[:, 0::2] = torch.cos(pos * div)
    pe[:, 1::2] = torch.sin(pos * div)
    return pe


def sin_halves(n_pos, d):  # tensor2tensor's layout
    pos = torch.arange(n_pos).float()[:, None]
    freq = 10000 ** (-torch.arange(0, d, 2).float() / d)
    return torch.cat([torch.sin(pos * freq), torch.cos(pos * freq)], dim=1)


def sin_i_over_d(n_pos, d):
    pe = np.zeros((n_pos, d))
    for p in range(n_pos):
        for i in range(d // 2):
            pe[p, 2 * i] = math.sin(p / 10000 ** (i / d))
            pe[p, 2 * i + 1] = math.cos(p / 10000 ** (i / d))
    return torch.tensor(pe, dtype=torch.float32)


def sin_each_dimension(n_pos, d):  # every dimension its own frequency
    pe = torch.zeros(n_pos, d)
    for p in range(n_pos):
        for j in range(d):
            angle = p / 10000 ** (j / d)
            pe[p, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return pe


def sin_times_base(n_pos, d):
    pos = torch.arange(n_pos, dtype=torch.float64)[:, None]
    angles = pos * 10000 ** (torch.arange(0, d, 2) / d)
    return torch.stack([angles.sin(), angles.cos()], -1).reshape(n_pos, d).float()


def sin_from_one(n_pos, d):
    pos = torch.arange(1, n_pos + 1, dtype=torch.float64)[:, None]
    angles = pos * 10000 ** (-torch.arange(0, d, 2) / d)
    return torch.stack([angles.sin(), angles.cos()], -1).reshape(n_pos, d).float()


def sin_integer_division(n_pos, d):  # 2 * (j // 2) / d computed as integers: every exponent 0
    pe = torch.zeros(n_pos, d)
    for j in range(d):
        theta = 10000 ** (-(2 * (j // 2) // d))
        pe[:, j] = torch.sin(torch.arange(n_pos) * theta) if j % 2 == 0 else torch.cos(torch.arange(n_pos) * theta)
    return pe


def sin_float16(n_pos, d):  # half-precision angles: wrong far from 0
    pos = torch.arange(n_pos, dtype=torch.float16)[:, None]
    angles = pos * (10000 ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)).half()
    return torch.stack([angles.float().sin(), angles.float().cos()], -1).reshape(n_pos, d)


def sin_right_loops(n_pos, d):
    pe = torch.empty(n_pos, d, dtype=torch.float64)
    for p in range(n_pos):
        for i in range(d // 2):
            a = p * 10000.0 ** (-2 * i / d)
            pe[p, 2 * i], pe[p, 2 * i + 1] = math.sin(a), math.cos(a)
    return pe.float()


def sin_right_log_space(n_pos, d):  # the Annotated Transformer's exp(-log(10000) 2i/d), with interleaved slices
    pe = torch.zeros(n_pos, d)
    position = torch.arange(0, n_pos).unsqueeze(1).float()
    div_term = torch.exp(torch.arange(0, d, 2).float() * -(math.log(10000.0) / d))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def sin_right_complex(n_pos, d):  # e^{i p θ} = cos + i sin: imaginary part first
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    z = torch.polar(torch.ones(n_pos, d // 2, dtype=torch.float64), torch.arange(n_pos)[:, None] * theta)
    return torch.stack([z.imag, z.real], dim=-1).flatten(1).float()


# ----------------------------------------------------------------------------- apply_rope

def _angles(positions, d, x):
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    a = positions.double()[:, None] * theta
    return a.cos().to(x.dtype), a.sin().to(x.dtype)


def rope_half_split(x, positions):  # the Llama layout
    d = x.shape[-1]
    cos, sin = _angles(positions, d, x)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def rope_rotate_half_llama(x, positions):  # Hugging Face's rotate_half with cos/sin repeated per half
    d = x.shape[-1]
    cos, sin = _angles(positions, d, x)
    cos, sin = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)
    rotated = torch.cat([-x[..., d // 2:], x[..., : d // 2]], dim=-1)
    return x * cos + rotated * sin


def rope_backwards(x, positions):
    cos, sin = _angles(positions, x.shape[-1], x)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos + x2 * sin, -x1 * sin + x2 * cos], -1).flatten(-2)


def rope_swapped(x, positions):
    cos, sin = _angles(positions, x.shape[-1], x)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * sin - x2 * cos, x1 * cos + x2 * sin], -1).flatten(-2)


def rope_theta_per_dimension(x, positions):
    d = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(d // 2, dtype=torch.float64, device=x.device) / d)
    a = positions.double()[:, None] * theta
    cos, sin = a.cos().to(x.dtype), a.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).flatten(-2)


def rope_arange(x, positions):  # the positions argument ignored
    T = x.shape[-2]
    cos, sin = _angles(torch.arange(T, device=x.device), x.shape[-1], x)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).flatten(-2)


def rope_heads_axis(x, positions):  # written for (B, T, h, d): turns by the index along dim -3
    cos, sin = _angles(torch.arange(x.shape[-3], device=x.device), x.shape[-1], x)
    cos, sin = cos[:, None, :], sin[:, None, :]
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).flatten(-2)


def rope_in_place(x, positions):  # writes into the caller's tensor
    cos, sin = _angles(positions, x.shape[-1], x)
    x1, x2 = x[..., 0::2].clone(), x[..., 1::2].clone()
    x[..., 0::2] = x1 * cos - x2 * sin
    x[..., 1::2] = x1 * sin + x2 * cos
    return x


def rope_float32(x, positions):  # float64 inputs come back in float32
    x = x.float()
    cos, sin = _angles(positions, x.shape[-1], x)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).flatten(-2)


def rope_numpy(x, positions):  # numpy refused a tensor that tracks gradients, so it was detached first
    d = x.shape[-1]
    angle = positions.detach().cpu().numpy().astype(np.float64)[:, None] * 10000.0 ** (-np.arange(0, d, 2) / d)
    a = x.detach().cpu().numpy().astype(np.float64)
    out = np.empty_like(a)
    out[..., 0::2] = a[..., 0::2] * np.cos(angle) - a[..., 1::2] * np.sin(angle)
    out[..., 1::2] = a[..., 0::2] * np.sin(angle) + a[..., 1::2] * np.cos(angle)
    return torch.from_numpy(out).to(device=x.device, dtype=x.dtype)


def rope_right_complex(x, positions):
    d = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    turn = torch.polar(torch.ones(len(positions), d // 2, dtype=torch.float64, device=x.device),
                       positions.double()[:, None] * theta)
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous()) * turn
    return torch.view_as_real(z).reshape(x.shape).to(x.dtype)


def rope_right_matrix(x, positions):  # one 2x2 rotation matrix per position and pair
    d = x.shape[-1]
    cos, sin = _angles(positions, d, x)
    R = torch.stack([torch.stack([cos, -sin], -1), torch.stack([sin, cos], -1)], -2)  # (T, d/2, 2, 2)
    pairs = x.reshape(*x.shape[:-1], d // 2, 2)
    return (R @ pairs.unsqueeze(-1)).squeeze(-1).reshape(x.shape)


def rope_right_rotate_every_two(x, positions):  # GPT-J's rotate_every_two, cos/sin repeated per pair
    cos, sin = _angles(positions, x.shape[-1], x)
    cos, sin = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)
    rotated = torch.stack([-x[..., 1::2], x[..., 0::2]], -1).flatten(-2)
    return x * cos + rotated * sin


# ----------------------------------------------------------------------------- alibi_bias

def _slopes_paper(n):
    def geometric(k):
        start = 2 ** (-8 / k)
        return [start ** (h + 1) for h in range(k)]
    if math.log2(n).is_integer():
        return geometric(n)
    m = 2 ** math.floor(math.log2(n))
    return geometric(m) + geometric(2 * m)[::2][: n - m]


def _causal(slopes, n):
    i = torch.arange(n).view(-1, 1)
    j = torch.arange(n).view(1, -1)
    bias = torch.tensor(slopes, dtype=torch.float32).view(-1, 1, 1) * (j - i)
    return bias.masked_fill(j > i, INF)


def alibi_one_formula(n_head, n):
    return _causal([2 ** (-8 * (h + 1) / n_head) for h in range(n_head)], n)


def alibi_halving(n_head, n):
    return _causal([0.5 ** (h + 1) for h in range(n_head)], n)


def alibi_reversed(n_head, n):
    return _causal(_slopes_paper(n_head)[::-1], n)


def alibi_plus(n_head, n):
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    bias = torch.tensor(_slopes_paper(n_head))[:, None, None] * (i - j)
    return bias.masked_fill(j > i, INF)


def alibi_absolute(n_head, n):
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return -torch.tensor(_slopes_paper(n_head))[:, None, None] * (i - j).abs()


def alibi_no_mask(n_head, n):
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return -torch.tensor(_slopes_paper(n_head))[:, None, None] * (i - j)


def alibi_zero_future(n_head, n):
    return _causal(_slopes_paper(n_head), n).nan_to_num(neginf=0.0)


def alibi_minus_1e9(n_head, n):  # a large negative number is not -inf
    return _causal(_slopes_paper(n_head), n).nan_to_num(neginf=-1e9)


def alibi_interleaved_wrongly(n_head, n):  # the extra heads take the *odd* slopes of 2m
    if math.log2(n_head).is_integer():
        return _causal(_slopes_paper(n_head), n)
    m = 2 ** math.floor(math.log2(n_head))
    extra = [2 ** (-8 * (h + 1) / (2 * m)) for h in range(2 * m)][1::2][: n_head - m]
    return _causal([2 ** (-8 * (h + 1) / m) for h in range(m)] + extra, n)


def alibi_right_loops(n_head, n):
    out = torch.full((n_head, n, n), INF)
    slopes = _slopes_paper(n_head)
    for h in range(n_head):
        for i in range(n):
            for j in range(i + 1):
                out[h, i, j] = -slopes[h] * (i - j)
    return out


def alibi_right_triu(n_head, n):
    distance = torch.arange(n)[None, :] - torch.arange(n)[:, None]  # j - i
    slopes = torch.tensor(_slopes_paper(n_head))
    future = torch.triu(torch.full((n, n), INF), diagonal=1)
    return slopes[:, None, None] * distance + future


def alibi_right_recursive(n_head, n):  # the paper's own recursion, closest power of two first
    def slopes(k):
        if math.log2(k).is_integer():
            return [2 ** (-(2 ** -(math.log2(k) - 3)) * (h + 1)) for h in range(k)]
        m = 2 ** math.floor(math.log2(k))
        return slopes(m) + slopes(2 * m)[0::2][: k - m]
    return _causal(slopes(n_head), n)


# ----------------------------------------------------------------------------- relative_position_bias

def _rel(table, n_q, n_k, *, sign=1, clip=True, shift=True, start_aligned=False, layout="hqk"):
    D = (table.shape[0] - 1) // 2
    i = torch.arange(n_q, device=table.device)[:, None] + (0 if start_aligned else n_k - n_q)
    j = torch.arange(n_k, device=table.device)[None, :]
    off = (j - i) * sign
    if clip:
        off = off.clamp(-D, D)
    out = table[off + D if shift else off]
    return {"hqk": out.permute(2, 0, 1), "qkh": out, "hkq": out.permute(2, 1, 0)}[layout]


def rel_i_minus_j(table, n_q, n_k):
    return _rel(table, n_q, n_k, sign=-1)


def rel_no_clip(table, n_q, n_k):
    return _rel(table, n_q, n_k, clip=False)


def rel_no_shift(table, n_q, n_k):
    return _rel(table, n_q, n_k, shift=False)


def rel_heads_last(table, n_q, n_k):
    return _rel(table, n_q, n_k, layout="qkh")


def rel_keys_first(table, n_q, n_k):
    return _rel(table, n_q, n_k, layout="hkq")


def rel_queries_from_zero(table, n_q, n_k):
    return _rel(table, n_q, n_k, start_aligned=True)


def rel_distance(table, n_q, n_k):  # |j - i|: a distance, not a signed offset
    D = (table.shape[0] - 1) // 2
    i = torch.arange(n_q)[:, None] + n_k - n_q
    off = (torch.arange(n_k)[None, :] - i).abs().clamp(max=D)
    return table[off + D].permute(2, 0, 1)


def rel_float32(table, n_q, n_k):  # float64 tables come back in float32
    return _rel(table.float(), n_q, n_k)


def rel_right_loops(table, n_q, n_k):
    D = (table.shape[0] - 1) // 2
    rows = [[table[min(max(j - (i + n_k - n_q), -D), D) + D] for j in range(n_k)] for i in range(n_q)]
    return torch.stack([torch.stack(r) for r in rows]).permute(2, 0, 1)


def rel_right_embedding(table, n_q, n_k):  # F.embedding with the offsets as ids
    D = (table.shape[0] - 1) // 2
    offsets = torch.arange(n_k, device=table.device) - torch.arange(n_k - n_q, n_k, device=table.device)[:, None]
    ids = torch.clamp(offsets, min=-D, max=D) + D
    return torch.nn.functional.embedding(ids, table).movedim(-1, 0)


def rel_right_index_select(table, n_q, n_k):
    D = (table.shape[0] - 1) // 2
    q_pos = torch.arange(n_k - n_q, n_k, device=table.device)
    k_pos = torch.arange(n_k, device=table.device)
    idx = (k_pos[None, :] - q_pos[:, None]).clamp(-D, D).add(D).flatten()
    return table.t().index_select(1, idx).view(-1, n_q, n_k)

# ----------------------------------------------------------------------------- the kinds of issue 31

def _pe(n_pos, d, theta):
    angles = torch.arange(n_pos, dtype=torch.float64)[:, None] * theta
    return torch.stack([angles.sin(), angles.cos()], -1).reshape(n_pos, d).float()


def sin_base_1000(n_pos, d):  # the base misremembered: 1000
    return _pe(n_pos, d, 1000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d))


def sin_exponent_over_d_minus_1(n_pos, d):  # 2i/(d - 1), as in a blog post's off-by-one
    return _pe(n_pos, d, 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / (d - 1)))


def sin_numpy(n_pos, d):  # a NumPy array where a tensor is asked
    p = np.arange(n_pos)[:, None]
    theta = 10000.0 ** (-np.arange(0, d, 2) / d)
    pe = np.zeros((n_pos, d))
    pe[:, 0::2], pe[:, 1::2] = np.sin(p * theta), np.cos(p * theta)
    return pe


def sin_nested_list(n_pos, d):  # a list of lists
    return _pe(n_pos, d, 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)).tolist()


def sin_theta_float16(n_pos, d):  # θ in half precision: right near 0, wrong far away
    theta = (10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)).half().double()
    return _pe(n_pos, d, theta)


def sin_angles_bfloat16(n_pos, d):
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = (torch.arange(n_pos, dtype=torch.float64)[:, None] * theta).bfloat16().double()
    return torch.stack([angles.sin(), angles.cos()], -1).reshape(n_pos, d).float()


def sin_float_size(n_pos, d):  # d / 2 is a float: torch.zeros raises TypeError inside the student's code
    pe = torch.zeros(n_pos, d / 2, 2)
    theta = 10000.0 ** (-torch.arange(0, d, 2) / d)
    angles = torch.arange(n_pos)[:, None] * theta
    pe[..., 0], pe[..., 1] = angles.sin(), angles.cos()
    return pe.reshape(n_pos, d)


def sin_squeezed(n_pos, d):  # .squeeze() drops the one position of n_pos = 1
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = (torch.arange(n_pos, dtype=torch.float64)[:, None] * theta).squeeze()
    return torch.stack([angles.sin(), angles.cos()], -1).reshape(-1, d).float().squeeze()


def rope_angles_float32(x, positions):  # float32 angles for float64 vectors
    d = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float32, device=x.device) / d)
    a = positions.float()[:, None] * theta
    cos, sin = a.cos().to(x.dtype), a.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).flatten(-2)


def rope_complex64(x, positions):  # through complex64 whatever the input: float32's digits
    d = x.shape[-1]
    z = torch.view_as_complex(x.float().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float32, device=x.device) / d)
    turned = z * torch.polar(torch.ones(len(positions), d // 2), positions.float()[:, None] * theta)
    return torch.view_as_real(turned).reshape(x.shape).to(x.dtype)


def rope_squeezed(x, positions):  # squeeze() of the angles: a single position loses its dimension
    d = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    a = (positions.double()[:, None] * theta).squeeze()
    cos, sin = a.cos().to(x.dtype), a.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).flatten(-2)


def rope_writes_slices(x, positions):  # x[..., 0::2] = ... writes the caller's tensor
    cos, sin = _angles(positions, x.shape[-1], x)
    x1, x2 = x[..., 0::2].clone(), x[..., 1::2].clone()
    x[..., 0::2] = x1 * cos - x2 * sin
    x[..., 1::2] = x1 * sin + x2 * cos
    return x


def rope_half_angles(x, positions):  # angles in half precision: wrong for far positions
    d = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    a = (positions.double()[:, None] * theta).half().double()
    cos, sin = a.cos().to(x.dtype), a.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).flatten(-2)


def rope_polar_dtypes(x, positions):  # torch.polar with float32 magnitudes and float64 angles raises
    d = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    angles = positions.double()[:, None] * theta
    rot = torch.polar(torch.ones(angles.shape), angles)
    z = torch.view_as_complex(x.reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(z * rot).reshape(x.shape)


def rope_base_500(x, positions):  # a base of 500: an unnamed mistake, told where and by how much
    d = x.shape[-1]
    theta = 500.0 ** (-torch.arange(0, d, 2, dtype=torch.float64, device=x.device) / d)
    a = positions.double()[:, None] * theta
    cos, sin = a.cos().to(x.dtype), a.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).flatten(-2)


def alibi_next_power(n_head, n):  # 6 heads: the first 6 slopes of 8 heads
    k = 2 ** math.ceil(math.log2(n_head))
    return _causal([2 ** (-8 * (h + 1) / k) for h in range(k)][:n_head], n)


def alibi_first_of_2m(n_head, n):  # the extra heads take the first slopes of 2m, not every other one
    m = 2 ** math.floor(math.log2(n_head))
    return _causal([2 ** (-8 * (h + 1) / m) for h in range(m)]
                   + [2 ** (-8 * (h + 1) / (2 * m)) for h in range(2 * m)][: n_head - m], n)


def alibi_numpy(n_head, n):  # a NumPy array
    return _causal(_slopes_paper(n_head), n).numpy()


def alibi_list(n_head, n):
    return _causal(_slopes_paper(n_head), n).tolist()


def alibi_keys_by_queries(n_head, n):  # [h, j, i]: the transpose (the mask in the lower triangle... of j, i)
    return _causal(_slopes_paper(n_head), n).transpose(1, 2)


def alibi_transposed_loops(n_head, n):
    out = torch.full((n_head, n, n), INF)
    slopes = _slopes_paper(n_head)
    for h in range(n_head):
        for i in range(n):
            for j in range(i + 1):
                out[h, j, i] = -slopes[h] * (i - j)
    return out


def alibi_range_float(n_head, n):  # 2 ** log2(n) is a float: range() raises TypeError
    m = 2 ** math.floor(math.log2(n_head)) * 1.0
    slopes = [2 ** (-8 * (h + 1) / m) for h in range(m)]
    return _causal(slopes, n)


def alibi_slopes_from_zero(n_head, n):  # h from 0: the first head gets slope 1
    return _causal([2 ** (-8 * h / n_head) for h in range(n_head)], n)


def alibi_slopes_base_e(n_head, n):  # e^(-8(h+1)/n) instead of 2^(...)
    return _causal([math.exp(-8 * (h + 1) / n_head) for h in _range_paper(n_head)], n)


def _range_paper(n_head):
    return range(n_head)


def rel_gather_float32(table, n_q, n_k):  # through float32 and back: float32's digits in a float64 answer
    return _rel(table.float(), n_q, n_k).to(table.dtype)


def rel_no_grad(table, n_q, n_k):  # computed under no_grad: no gradient reaches the table
    with torch.no_grad():
        return _rel(table, n_q, n_k)


def rel_detached(table, n_q, n_k):
    return _rel(table.detach(), n_q, n_k)


def rel_rebuilt_from_list(table, n_q, n_k):  # a new tensor from Python numbers: cut off from the table
    D = (table.shape[0] - 1) // 2
    rows = table.tolist()
    out = [[[rows[min(max(j - (i + n_k - n_q), -D), D) + D][h] for j in range(n_k)] for i in range(n_q)]
           for h in range(table.shape[1])]
    return torch.tensor(out, dtype=table.dtype, device=table.device)


def rel_clip_above_only(table, n_q, n_k):  # clamp(max=D): far keys in the past read rows before 0
    D = (table.shape[0] - 1) // 2
    i = torch.arange(n_q)[:, None] + n_k - n_q
    off = (torch.arange(n_k)[None, :] - i).clamp(max=D) + D
    return table[off].permute(2, 0, 1)


def rel_float_index(table, n_q, n_k):  # float offsets as an index: IndexError inside the student's code
    D = (table.shape[0] - 1) // 2
    i = torch.arange(n_q, dtype=torch.float32)[:, None] + n_k - n_q
    off = (torch.arange(n_k, dtype=torch.float32)[None, :] - i).clamp(-D, D) + D
    return table[off].permute(2, 0, 1)


def rel_half_table(table, n_q, n_k):  # halves the bias: an unnamed mistake
    return _rel(table, n_q, n_k) / 2


WRONG = {
    "sinusoidal_encoding": [
        Student(sin_cos_first, _has(SINUSOIDAL, "put cos at the even dimensions")),
        Student(sin_halves, _has(SINUSOIDAL, "put all the sines in the first half")),
        Student(sin_i_over_d, _has(SINUSOIDAL, "used 10000^(-i/d) for pair i")),
        Student(sin_each_dimension, _has(SINUSOIDAL, "gave every dimension j its own frequency")),
        Student(sin_times_base, _has(SINUSOIDAL, "multiplied by 10000^(2i/d)")),
        Student(sin_from_one, _has(SINUSOIDAL, "numbered the positions from 1")),
        Student(sin_integer_division, None),
        Student(sin_float16, None),
        Student(sin_base_1000, None, note="base 1000"),
        Student(sin_exponent_over_d_minus_1, None, note="2i/(d-1)"),
        Student(sin_numpy, None, note="a NumPy array"),
        Student(sin_nested_list, None, note="a list of lists"),
        Student(sin_theta_float16, None, note="θ in half precision"),
        Student(sin_angles_bfloat16, None, note="angles in bfloat16"),
        Student(sin_float_size, None, note="raises TypeError inside the student's code"),
        Student(sin_squeezed, None, note=".squeeze() drops n_pos = 1"),
    ],
    "apply_rope": [
        Student(rope_numpy, None, note="right values, computed in numpy: no gradient reaches x"),
        Student(rope_half_split, _has(ROPE, "paired dimension i with i + d/2")),
        Student(rope_rotate_half_llama, _has(ROPE, "paired dimension i with i + d/2")),
        Student(rope_backwards, _has(ROPE, "turned the pairs the wrong way")),
        Student(rope_swapped, _has(ROPE, "swapped cos and sin")),
        Student(rope_theta_per_dimension, _has(ROPE, "used θ_i = 10000^(-i/d)")),
        Student(rope_arange, _has(ROPE, "used 0 … T-1 instead of the positions given")),
        Student(rope_heads_axis, _has(ROPE, "turned each vector by its index along dim −3")),
        Student(rope_in_place, None),
        Student(rope_float32, None),
        Student(rope_angles_float32, None, note="float32 angles for float64 vectors"),
        Student(rope_complex64, None, note="complex64 whatever the input"),
        Student(rope_squeezed, None, note=".squeeze() of a single position's angles"),
        Student(rope_writes_slices, None, note="writes into the caller's x"),
        Student(rope_half_angles, None, note="half-precision angles"),
        Student(rope_polar_dtypes, None, note="torch.polar raises inside the student's code"),
        Student(rope_base_500, None, note="base 500"),
    ],
    "alibi_bias": [
        Student(alibi_one_formula, _has(ALIBI, "used 2^(-8(h+1)/n) for every number of heads")),
        Student(alibi_halving, _has(ALIBI, "used the slopes 1/2, 1/4, 1/8")),
        Student(alibi_reversed, _has(ALIBI, "gave the heads their slopes in reverse order")),
        Student(alibi_plus, _has(ALIBI, "added +m (i - j)")),
        Student(alibi_absolute, _has(ALIBI, "used −m |i − j| for every key")),
        Student(alibi_no_mask, _has(ALIBI, "left the future unmasked")),
        Student(alibi_zero_future, _has(ALIBI, "put 0 at the future keys")),
        Student(alibi_minus_1e9, None),
        Student(alibi_interleaved_wrongly, None),
        Student(alibi_next_power, _has(ALIBI, "took the first n_head slopes of the next power of two")),
        Student(alibi_first_of_2m, _has(ALIBI, "took the first slopes of 2m")),
        Student(alibi_numpy, None, note="a NumPy array"),
        Student(alibi_list, None, note="a list"),
        Student(alibi_keys_by_queries, None, note="the transpose"),
        Student(alibi_transposed_loops, None, note="the transpose, by loops"),
        Student(alibi_range_float, None, note="range() of a float raises"),
        Student(alibi_slopes_from_zero, None, note="h from 0"),
        Student(alibi_slopes_base_e, None, note="base e"),
    ],
    "relative_position_bias": [
        Student(rel_i_minus_j, _has(RELATIVE, "used the offset i − j")),
        Student(rel_no_clip, _has(RELATIVE, "did not clip the offsets")),
        Student(rel_no_shift, _has(RELATIVE, "did not add D to the clipped offset")),
        Student(rel_heads_last, _has(RELATIVE, "returned (n_q, n_k, n_head)")),
        Student(rel_keys_first, _has(RELATIVE, "returned (n_head, n_k, n_q)")),
        Student(rel_queries_from_zero, _has(RELATIVE, "put the queries at positions 0 … n_q − 1")),
        Student(rel_distance, None),
        Student(rel_float32, None),
        Student(rel_gather_float32, None, note="float32 and back"),
        Student(rel_no_grad, None, note="under no_grad"),
        Student(rel_detached, None, note=".detach()"),
        Student(rel_rebuilt_from_list, None, note="a new tensor from .tolist()"),
        Student(rel_clip_above_only, None, note="clamp(max=D) only"),
        Student(rel_float_index, None, note="float indices raise"),
        Student(rel_half_table, None, note="half the bias"),
    ],
}

RIGHT = {
    "sinusoidal_encoding": [sin_right_loops, sin_right_log_space, sin_right_complex],
    "apply_rope": [rope_right_complex, rope_right_matrix, rope_right_rotate_every_two],
    "alibi_bias": [alibi_right_loops, alibi_right_triu, alibi_right_recursive],
    "relative_position_bias": [rel_right_loops, rel_right_embedding, rel_right_index_select],
}


# ============================================================================= the thinking questions (chapter 7)
# Written as students answer them: closed forms with one step wrong, numerical shortcuts, and right answers
# reached another way (a loop over positions, numpy, the complex exponential).

from lmbook.tasks.questions.ch07 import ALIBI_WEIGHT_RATIO, PE_DOT, POSITION_PARAMETERS  # noqa: E402


def pe_dot_sines(k, d):
    return sum(math.sin(k / 10000 ** (2 * i / d)) for i in range(d // 2))


def pe_dot_every_dimension(k, d):
    return sum(math.cos(k / 10000 ** (j / d)) for j in range(d))


def pe_dot_norm(k, d):
    return d / 2  # "a rotation keeps lengths, so the dot product is |PE|²"


def pe_dot_unit_speed(k, d):
    return (d // 2) * math.cos(k)


def pe_dot_both_terms(k, d):
    return sum(2 * math.cos(k * 10000 ** (-2 * i / d)) for i in range(d // 2))


def pe_dot_at_position_one(k, d):  # built the encodings at p = 1 and p = 1 + k, but in float32 and from 1
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
    a, b = (1 + 1) * theta, (1 + 1 + k) * theta  # an off-by-one in the position does not matter: p cancels
    return float((a.sin() * b.sin() + a.cos() * b.cos()).sum().half())  # ... but half precision does


def pe_dot_cos_of_sum(k, d):
    return math.cos(k * sum(10000 ** (-2 * i / d) for i in range(d // 2)))


def pe_dot_right_numpy(k, d):
    theta = 10000.0 ** (-np.arange(0, d, 2) / d)
    return float(np.cos(k * theta).sum())


def pe_dot_right_complex(k, d):
    # pair i as e^{i p θ}: the dot product of two pairs is Re(e^{i p θ} conj(e^{i (p + k) θ}))
    return sum((complex(math.cos(5 * t), math.sin(5 * t))
                * complex(math.cos((5 + k) * t), -math.sin((5 + k) * t))).real
               for t in (10000 ** (-2 * i / d) for i in range(d // 2)))


def pe_dot_right_brute(k, d):
    p = 3  # any p: the answer does not depend on it
    total = 0.0
    for i in range(d // 2):
        theta = 1 / 10000 ** (2 * i / d)
        total += math.sin(p * theta) * math.sin((p + k) * theta) + math.cos(p * theta) * math.cos((p + k) * theta)
    return total


def params_per_layer_relative(scheme, n_layer, n_head, d_model, block_size, max_distance):
    table = {"learned": block_size * d_model, "relative": (2 * max_distance + 1) * n_head * n_layer,
             "shaw": 2 * (2 * max_distance + 1) * (d_model // n_head) * n_layer}
    return table.get(scheme, 0)


def params_2d_rows(scheme, n_layer, n_head, d_model, block_size, max_distance):
    table = {"learned": block_size * d_model, "relative": 2 * max_distance * n_head,
             "shaw": 2 * (2 * max_distance + 1) * (d_model // n_head) * n_layer}
    return table.get(scheme, 0)


def params_one_table(scheme, n_layer, n_head, d_model, block_size, max_distance):
    table = {"learned": block_size * d_model, "relative": 2 * max_distance + 1,
             "shaw": 2 * (2 * max_distance + 1) * (d_model // n_head) * n_layer}
    return table.get(scheme, 0)


def params_learned_everywhere(scheme, n_layer, n_head, d_model, block_size, max_distance):
    if scheme == "learned":
        return n_layer * block_size * d_model
    if scheme == "relative":
        return (2 * max_distance + 1) * n_head
    if scheme == "shaw":
        return 2 * (2 * max_distance + 1) * (d_model // n_head) * n_layer
    return 0


def params_sinusoid_table(scheme, n_layer, n_head, d_model, block_size, max_distance):
    if scheme in ("learned", "sinusoidal"):
        return block_size * d_model
    if scheme == "relative":
        return (2 * max_distance + 1) * n_head
    return 2 * (2 * max_distance + 1) * (d_model // n_head) * n_layer if scheme == "shaw" else 0


def params_shaw_keys(scheme, n_layer, n_head, d_model, block_size, max_distance):
    rows = 2 * max_distance + 1
    return {"learned": block_size * d_model, "relative": rows * n_head,
            "shaw": rows * (d_model // n_head) * n_layer}.get(scheme, 0)


def params_shaw_heads(scheme, n_layer, n_head, d_model, block_size, max_distance):
    rows = 2 * max_distance + 1
    return {"learned": block_size * d_model, "relative": rows * n_head,
            "shaw": 2 * rows * (d_model // n_head) * n_layer * n_head}.get(scheme, 0)


def params_shaw_full_width(scheme, n_layer, n_head, d_model, block_size, max_distance):
    rows = 2 * max_distance + 1
    return {"learned": block_size * d_model, "relative": rows * n_head,
            "shaw": 2 * rows * d_model * n_layer}.get(scheme, 0)


def params_float(scheme, n_layer, n_head, d_model, block_size, max_distance):
    rows = 2 * max_distance + 1
    return float({"learned": block_size * d_model, "relative": rows * n_head,
                  "shaw": 2 * rows * d_model / n_head * n_layer}.get(scheme, 0) + 0.5)


def params_right_branches(scheme, n_layer, n_head, d_model, block_size, max_distance):
    d_head = d_model // n_head
    if scheme == "learned":
        return d_model * block_size
    if scheme == "relative":
        return n_head * (max_distance * 2 + 1)
    if scheme == "shaw":
        return n_layer * (2 * max_distance + 1) * d_head * 2
    return 0


def params_right_modules(scheme, n_layer, n_head, d_model, block_size, max_distance):
    from torch import nn

    layers = {"learned": [nn.Embedding(block_size, d_model)],
              "relative": [nn.Embedding(2 * max_distance + 1, n_head)],
              "shaw": [nn.Embedding(2 * max_distance + 1, d_model // n_head) for _ in range(2 * n_layer)]}
    return sum(p.numel() for m in layers.get(scheme, []) for p in m.parameters())


def params_right_numpy(scheme, n_layer, n_head, d_model, block_size, max_distance):
    sizes = {"learned": [(block_size, d_model)], "relative": [(2 * max_distance + 1, n_head)],
             "shaw": [(n_layer, 2, 2 * max_distance + 1, d_model // n_head)]}
    return int(sum(np.prod(s) for s in sizes.get(scheme, [])))


def ratio_inverted(m, near, far):
    return math.exp(-m * far) / math.exp(-m * near)


def ratio_scores(m, near, far):
    return m * (far - near)


def ratio_of_biases(m, near, far):
    return (-m * near) / (-m * far) if far else 1.0


def ratio_two_key_softmax(m, near, far):
    a, b = math.exp(-m * near), math.exp(-m * far)
    return a / (a + b)


def ratio_base_two(m, near, far):
    return 2 ** (m * far) / 2 ** (m * near)


def ratio_linear(m, near, far):
    return (1 + m * far) / (1 + m * near)  # "the bias is linear, so the weights are too"


def ratio_rounded_slope(m, near, far):
    return math.exp(round(m, 2) * (far - near))  # read the slope off a printed table


def ratio_right_torch(m, near, far):
    scores = torch.tensor([-m * near, -m * far], dtype=torch.float64)
    w = torch.softmax(scores, 0)
    return (w[0] / w[1]).item()


def ratio_right_log(m, near, far):
    return math.exp(m * far - m * near)


def ratio_right_loop(m, near, far):
    r = 1.0
    for _ in range(far - near):  # each extra word back costs a factor e^-m
        r *= math.exp(m)
    return r


WRONG |= {
    "pe_dot": [
        Student(pe_dot_sines, _has(PE_DOT, "summed sin(k θ_i)")),
        Student(pe_dot_every_dimension, _has(PE_DOT, "gave each of the d dimensions its own speed")),
        Student(pe_dot_norm, _has(PE_DOT, "returned d/2")),
        Student(pe_dot_unit_speed, _has(PE_DOT, "turned every pair by k radians")),
        Student(pe_dot_both_terms, _has(PE_DOT, "counted each pair's contribution twice")),
        Student(pe_dot_at_position_one, None),
        Student(pe_dot_cos_of_sum, None),
    ],
    "position_parameters": [
        Student(params_per_layer_relative, _has(POSITION_PARAMETERS, "counted the relative bias once per layer")),
        Student(params_2d_rows, _has(POSITION_PARAMETERS, "gave the relative table 2D rows")),
        Student(params_one_table, _has(POSITION_PARAMETERS, "gave the relative bias one number per offset")),
        Student(params_learned_everywhere, _has(POSITION_PARAMETERS, "counted the learned position table once")),
        Student(params_sinusoid_table, _has(POSITION_PARAMETERS, "counted the sinusoidal table")),
        Student(params_shaw_keys, _has(POSITION_PARAMETERS, "counted only Shaw et al.'s key vectors")),
        Student(params_shaw_heads, _has(POSITION_PARAMETERS, "counted d_model numbers per Shaw vector")),
        Student(params_shaw_full_width, _has(POSITION_PARAMETERS, "counted d_model numbers per Shaw vector")),
        Student(params_float, None),
    ],
    "alibi_weight_ratio": [
        Student(ratio_inverted, _has(ALIBI_WEIGHT_RATIO, "gave the far key the larger weight")),
        Student(ratio_scores, _has(ALIBI_WEIGHT_RATIO, "returned a difference of scores")),
        Student(ratio_of_biases, _has(ALIBI_WEIGHT_RATIO, "divided the two biases")),
        Student(ratio_two_key_softmax, _has(ALIBI_WEIGHT_RATIO, "returned the near key's weight")),
        Student(ratio_base_two, _has(ALIBI_WEIGHT_RATIO, "used powers of 2")),
        Student(ratio_linear, None),
        Student(ratio_rounded_slope, None),
    ],
}

RIGHT |= {
    "pe_dot": [pe_dot_right_numpy, pe_dot_right_complex, pe_dot_right_brute],
    "position_parameters": [params_right_branches, params_right_modules, params_right_numpy],
    "alibi_weight_ratio": [ratio_right_torch, ratio_right_log, ratio_right_loop],
}
