"""Exercise 11's checks: right answers pass, ready-made ones earn nothing, and the references are proven against
independent implementations: RMSNorm, SwiGLU and grouped-query attention (with its cache) against Hugging Face's
LlamaRMSNorm, LlamaMLP and LlamaAttention given the same weights, the rotary tables against LlamaRotaryEmbedding,
the instruction loss against cross-entropy with labels of −100, the DPO loss against its closed form, the
parameter count against LlamaForCausalLM built on the meta device, the cache's size against a measured cache, the
DPO gradient against autograd; and lmbook's chapter 11 modules agree with the grader on every case."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
import torch.nn.functional as F
from check_contract import contract_tests, library_agrees
from students_ch11 import RIGHT as STUDENTS_RIGHT

import lmbook.dpo
import lmbook.instruct
import lmbook.llama
import lmbook.scaling_laws
from lmbook.gpt import KVCache
from lmbook.grading.checks import CheckFailed, case_inputs
from lmbook.tasks.ch11 import CHECKS, check
from lmbook.tasks.ch11.gqa_attention import _gqa_ref, rope_tables
from lmbook.tasks.ch11.rms_norm import _rms_ref
from lmbook.tasks.ch11.swiglu import _swiglu_ref
from lmbook.tasks.questions.ch11 import QUESTIONS

transformers = pytest.importorskip("transformers")
from transformers.cache_utils import DynamicCache  # noqa: E402
from transformers.models.llama.modeling_llama import (  # noqa: E402
    LlamaAttention,
    LlamaMLP,
    LlamaRMSNorm,
    LlamaRotaryEmbedding,
)

BY_TASK = {c.task: c for c in [*CHECKS, *QUESTIONS]}
CPU = torch.device("cpu")

# one right answer per code task, written differently from the reference (tests/students_ch11.py holds them)
RIGHT = {c.task: STUDENTS_RIGHT[c.task][0] for c in CHECKS}

(test_every_task_has_a_right_answer_here,
 test_a_correct_but_different_answer_passes_in_jupyter_and_in_the_grader,
 test_a_correct_answer_passes_on_a_gpu_too) = contract_tests(CHECKS, RIGHT)


def _all_cases(task: str) -> int:
    return len(BY_TASK[task].cases) + len(BY_TASK[task].hidden_cases)


def _every_case(task: str, seed: int = 0):
    c = BY_TASK[task]
    for i, case in enumerate([*c.cases, *c.hidden_cases]):
        yield case, case_inputs(case, seed, i, CPU)


def _config(**sizes) -> transformers.LlamaConfig:
    config = transformers.LlamaConfig(vocab_size=16, num_hidden_layers=1, attention_bias=False, mlp_bias=False,
                                      **sizes)
    config._attn_implementation = "eager"
    return config


# ----------------------------------------------------------------------------- rms_norm


def _hf_rms_norm(x, weight, eps=1e-6):
    if x.dtype == torch.float64:  # LlamaRMSNorm computes in float32 whatever its input: no float64 answer
        return None
    norm = LlamaRMSNorm(x.shape[-1], eps=eps)
    with torch.no_grad():
        norm.weight.copy_(weight)
        return norm(x)


def test_the_rms_norm_reference_is_hugging_faces_llama_rms_norm():
    float32 = sum(args[0].dtype == torch.float32 for _, (args, _) in _every_case("rms_norm"))
    assert float32 >= 8 and library_agrees(BY_TASK["rms_norm"], _hf_rms_norm) == float32


def test_the_rms_norm_reference_is_llama_rms_norm_to_float32_precision():
    for case, (args, kwargs) in _every_case("rms_norm"):
        if args[0].dtype == torch.float32:
            torch.testing.assert_close(_rms_ref(*args, **kwargs), _hf_rms_norm(*args, **kwargs), rtol=1e-5,
                                       atol=1e-6, msg=case.name)


def test_the_library_agrees_on_rms_norm():
    def ours(x, weight, eps=1e-6):
        norm = lmbook.llama.RMSNorm(x.shape[-1], eps).to(x.dtype)
        with torch.no_grad():
            norm.weight.copy_(weight)
        return norm(x)
    assert library_agrees(BY_TASK["rms_norm"], ours) == _all_cases("rms_norm")


def test_the_zero_position_comes_out_zero_and_epsilon_matters_on_a_visible_case():
    c = BY_TASK["rms_norm"]
    args, kwargs = case_inputs(c.cases[2], 0, 2, CPU)
    assert "zeros" in c.cases[2].name and (_rms_ref(*args, **kwargs).view(-1, args[0].shape[-1])[0] == 0).all()
    args, kwargs = case_inputs(c.cases[1], 0, 1, CPU)
    without = args[0] / args[0].pow(2).mean(-1, keepdim=True).sqrt() * args[1]
    assert (without - _rms_ref(*args, **kwargs)).abs().max() > 0.1, "ε must change the small case's answer visibly"


# ----------------------------------------------------------------------------- swiglu


def _hf_mlp(x, params):
    d, d_ff = params["down_proj.weight"].shape
    mlp = LlamaMLP(_config(hidden_size=d, intermediate_size=d_ff, num_attention_heads=1)).to(x.dtype)
    mlp.load_state_dict(params)
    with torch.no_grad():
        return mlp(x)


def test_the_swiglu_reference_is_hugging_faces_llama_mlp():
    assert library_agrees(BY_TASK["swiglu"], _hf_mlp) == _all_cases("swiglu")
    for case, (args, _) in _every_case("swiglu"):
        torch.testing.assert_close(_swiglu_ref(*args), _hf_mlp(*args), rtol=1e-5, atol=1e-6, msg=case.name)


def test_the_library_agrees_on_swiglu():
    def ours(x, params):
        d, d_ff = params["down_proj.weight"].shape
        mlp = lmbook.llama.SwiGLU(d, d_ff).to(x.dtype)
        with torch.no_grad():
            for mine, theirs in (("W_gate", "gate_proj"), ("W_up", "up_proj"), ("W_down", "down_proj")):
                getattr(mlp, mine).weight.copy_(params[f"{theirs}.weight"])
            return mlp(x)
    assert library_agrees(BY_TASK["swiglu"], ours) == _all_cases("swiglu")


# ----------------------------------------------------------------------------- gqa_attention


# The cache's keyword: `cache` in transformers 5.24, `past_key_values` before (5.17 took `cache=` into **kwargs and
# filled nothing).
_CACHE_ARG = "cache" if "cache" in inspect.signature(LlamaAttention.forward).parameters else "past_key_values"


def _hf_attention(x_new, cache, params, n_head, n_kv_head, cos, sin):
    """Hugging Face's LlamaAttention with a DynamicCache holding the case's cache, and an additive causal mask."""
    d = x_new.shape[-1]
    d_head = params["q_proj.weight"].shape[0] // n_head
    attn = LlamaAttention(_config(hidden_size=d, num_attention_heads=n_head, num_key_value_heads=n_kv_head,
                                  head_dim=d_head, intermediate_size=8), layer_idx=0).to(x_new.dtype)
    attn.load_state_dict(params)
    hf_cache = DynamicCache()
    t = 0
    if cache is not None:
        hf_cache.update(cache["k"], cache["v"], 0)
        t = cache["k"].shape[2]
    n_new = x_new.shape[1]
    allowed = torch.ones(n_new, t + n_new, dtype=torch.bool).tril(diagonal=t)
    mask = torch.zeros(n_new, t + n_new, dtype=x_new.dtype).masked_fill(~allowed, float("-inf"))[None, None]
    with torch.no_grad():
        y, _ = attn(x_new, position_embeddings=(cos[None], sin[None]), attention_mask=mask,
                    **{_CACHE_ARG: hf_cache})
    assert hf_cache.layers, f"LlamaAttention did not fill the cache passed as {_CACHE_ARG}="
    layer = hf_cache.layers[0]
    return y, {"k": layer.keys, "v": layer.values}


def _hf_attention_float32(x_new, *args):
    # Hugging Face's eager attention takes its softmax in float32 whatever the input: no float64 answer
    return None if x_new.dtype == torch.float64 else _hf_attention(x_new, *args)


def test_the_attention_reference_is_hugging_faces_llama_attention_with_its_cache():
    float32 = sum(args[0].dtype == torch.float32 for _, (args, _) in _every_case("gqa_attention"))
    assert float32 >= 15 and library_agrees(BY_TASK["gqa_attention"], _hf_attention_float32) == float32
    for case, (args, _) in _every_case("gqa_attention"):  # and float64 to the precision of a float32 softmax
        (y, c), (y_hf, c_hf) = _gqa_ref(*args), _hf_attention(*args)
        tol = dict(rtol=1e-6, atol=1e-6) if y.dtype == torch.float64 else dict(rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(y, y_hf, msg=case.name, **tol)
        for name in ("k", "v"):
            torch.testing.assert_close(c[name], c_hf[name], msg=f"{case.name}: cache {name}", **tol)


def test_the_cache_holds_the_key_value_heads_only():
    for case, (args, _) in _every_case("gqa_attention"):
        x_new, cache, params, n_head, n_kv_head, cos, sin = args
        _, c = _gqa_ref(*args)
        t = 0 if cache is None else cache["k"].shape[2]
        d_head = params["q_proj.weight"].shape[0] // n_head
        assert c["k"].shape == (x_new.shape[0], n_kv_head, t + x_new.shape[1], d_head), case.name


def test_the_cases_rope_tables_are_llamas_rotary_embedding():
    for base in (10000.0, 500000.0):
        config = _config(hidden_size=32, num_attention_heads=4, head_dim=8, intermediate_size=8,
                         rope_parameters={"rope_type": "default", "rope_theta": base})
        rotary = LlamaRotaryEmbedding(config)
        positions = torch.arange(3, 70)
        cos, sin = rotary(torch.zeros(1, len(positions), 32), positions[None])
        mine = rope_tables(positions, 8, base)
        torch.testing.assert_close(mine[0], cos[0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(mine[1], sin[0], rtol=1e-5, atol=1e-5)


def test_the_library_agrees_on_gqa_attention():
    """lmbook.llama's attention (its own RoPE from chapter 7, its KVCache) on the cases whose tables are its own
    (RoPE base 10,000, d_model = n_head · d_head)."""
    def ours(x_new, cache, params, n_head, n_kv_head, cos, sin):
        d = x_new.shape[-1]
        d_head = params["q_proj.weight"].shape[0] // n_head
        t = 0 if cache is None else cache["k"].shape[2]
        if d != n_head * d_head or not torch.allclose(cos, rope_tables(torch.arange(t, t + x_new.shape[1]), d_head,
                                                                       10000.0, cos.dtype)[0]):
            return None
        config = lmbook.llama.LlamaConfig(vocab_size=8, block_size=64, n_layer=1, n_head=n_head, d_model=d,
                                          n_kv_head=n_kv_head)
        attn = lmbook.llama.GroupedQueryAttention(config, 0).to(x_new.dtype)
        with torch.no_grad():
            for mine, theirs in (("W_q", "q_proj"), ("W_k", "k_proj"), ("W_v", "v_proj"), ("W_o", "o_proj")):
                getattr(attn, mine).weight.copy_(params[f"{theirs}.weight"])
            kv = KVCache()
            if cache is not None:
                kv.update(0, cache["k"], cache["v"])
            y = attn(x_new, kv)
        return y, {"k": kv.k[0], "v": kv.v[0]}
    assert library_agrees(BY_TASK["gqa_attention"], ours) == _all_cases("gqa_attention") - 2  # RoPE base, wide d


def test_the_attention_cases_tell_every_grouping_apart():
    """Multi-query, grouped and n_kv_head = n_head cases are all there, and the visible ones repeat heads."""
    groups = {(args[3], args[4]) for _, (args, _) in _every_case("gqa_attention")}
    assert any(kv == 1 for _, kv in groups) and any(h == kv for h, kv in groups)
    assert any(1 < kv < h for h, kv in groups)


# ----------------------------------------------------------------------------- instruction_loss


def _ignore_index_loss(logits, ids, response_mask):
    labels = ids.masked_fill(~response_mask, -100)[:, 1:]  # Hugging Face's convention: −100 is not counted
    return F.cross_entropy(logits[:, :-1].transpose(1, 2), labels, ignore_index=-100)


def test_the_instruction_loss_reference_is_cross_entropy_with_labels_of_minus_100():
    assert library_agrees(BY_TASK["instruction_loss"], _ignore_index_loss) == _all_cases("instruction_loss")


def test_the_library_agrees_on_the_instruction_loss():
    def ours(logits, ids, response_mask):
        return lmbook.instruct.response_loss(logits[:, :-1], ids[:, 1:], response_mask[:, 1:])
    assert library_agrees(BY_TASK["instruction_loss"], ours) == _all_cases("instruction_loss")


def test_the_instruction_cases_have_prompts_responses_and_padding():
    for case, (args, _) in _every_case("instruction_loss"):
        _, ids, mask = args
        assert (~mask[:, 0]).all() and mask.any(1).all(), case.name  # a prompt first, a response in every row
        starts = mask.int().argmax(1)
        assert all(mask[b, starts[b]:][: int(mask[b].sum())].all() for b in range(len(ids))), case.name


# ----------------------------------------------------------------------------- dpo_loss


def _closed_form(pc, pr, rc, rr, beta) -> float:
    """−mean ln(1 / (1 + e^(−βΔ))), pair by pair in Python floats, ln(1 + e^u) written for both signs of u."""
    total = 0.0
    for a, b, c, d in zip(pc.tolist(), pr.tolist(), rc.tolist(), rr.tolist(), strict=True):
        u = -beta * ((a - c) - (b - d))
        total += u + math.log1p(math.exp(-u)) if u > 0 else math.log1p(math.exp(u))
    return total / len(pc)


def test_the_dpo_reference_is_the_closed_form():
    from lmbook.tasks.ch11.dpo_loss import _dpo_ref
    for case, (args, _) in _every_case("dpo_loss"):
        want = _closed_form(*args)
        got = float(_dpo_ref(*[a.double() if torch.is_tensor(a) else a for a in args]))
        assert math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-12), case.name


def test_the_dpo_loss_is_ln_2_where_the_statement_says_so():
    from lmbook.tasks.ch11.dpo_loss import _dpo_ref
    names = [case for case, _ in _every_case("dpo_loss") if "ln 2" in case.name or "every log-probability" in case.name]
    assert len(names) == 3
    for case, (args, _) in _every_case("dpo_loss"):
        if case in names:
            assert math.isclose(float(_dpo_ref(*args)), math.log(2), rel_tol=1e-6), case.name


def test_the_library_agrees_on_the_dpo_loss():
    assert library_agrees(BY_TASK["dpo_loss"], lmbook.dpo.dpo_loss) == _all_cases("dpo_loss")


# ----------------------------------------------------------------------------- compute_optimal


def test_the_compute_optimal_answer_spends_the_budget_at_the_ratio():
    from lmbook.tasks.ch11.compute_optimal import _optimal_ref
    for case, (args, kwargs) in _every_case("compute_optimal"):
        n, d = _optimal_ref(*args, **kwargs)
        assert math.isclose(6 * n * d, args[0], rel_tol=1e-12), case.name
        assert math.isclose(d / n, kwargs.get("tokens_per_param", 20.0), rel_tol=1e-12), case.name


def test_chinchillas_budget_gives_about_chinchillas_size():
    """Gopher's budget of 5.76e23 FLOPs at 20 tokens per parameter: about 69B parameters on 1.4T tokens, the size
    Hoffmann et al. trained Chinchilla at (70B, 1.4T)."""
    n, d = lmbook.scaling_laws.compute_optimal(5.76e23)
    assert 65e9 < n < 72e9 and 1.3e12 < d < 1.45e12


def test_a_rounded_answer_is_told_in_digits_that_differ():
    from lmbook.tasks.ch11.compute_optimal import _optimal_compare
    message = _optimal_compare((5773503.0, 1.0), (5773502.69, 1.0))
    assert message == "n_params: returned 5773503, expected 5773502.7 (off by +0.31)", message
    assert _optimal_compare((2e9, 1.0), (1e9, 1.0)) == "n_params: returned 2e+09, expected 1e+09 (2 times it)"


def test_the_library_agrees_on_compute_optimal():
    assert library_agrees(BY_TASK["compute_optimal"], lmbook.scaling_laws.compute_optimal) == \
        _all_cases("compute_optimal")


# ----------------------------------------------------------------------------- the questions


def _hf_llama_count(config: dict) -> int:
    hf = transformers.LlamaConfig(vocab_size=config["vocab_size"], num_hidden_layers=config["n_layer"],
                                  hidden_size=config["d_model"], num_attention_heads=config["n_head"],
                                  num_key_value_heads=config["n_kv_head"], intermediate_size=config["d_ff"],
                                  tie_word_embeddings=config["tie_weights"], attention_bias=False, mlp_bias=False)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(hf)
    return sum(p.numel() for p in model.parameters())  # a tied weight is one parameter, listed once


def test_the_parameter_count_is_llama_for_causal_lms_on_every_case():
    assert library_agrees(BY_TASK["llama_parameters"], _hf_llama_count) == _all_cases("llama_parameters")


def test_llama_2_7b_has_its_published_count():
    config = {"vocab_size": 32000, "n_layer": 32, "d_model": 4096, "n_head": 32, "n_kv_head": 32, "d_ff": 11008,
              "tie_weights": False}
    assert _hf_llama_count(config) == 6_738_415_616


def test_the_library_agrees_on_the_parameter_count():
    def ours(config):
        return lmbook.llama.count_parameters(lmbook.llama.LlamaConfig(
            vocab_size=config["vocab_size"], block_size=8, n_layer=config["n_layer"], n_head=config["n_head"],
            d_model=config["d_model"], n_kv_head=config["n_kv_head"], d_ff=config["d_ff"],
            tie_weights=config["tie_weights"]))
    assert library_agrees(BY_TASK["llama_parameters"], ours) == _all_cases("llama_parameters")


def test_the_cached_positions_fill_the_budget_and_no_more():
    from lmbook.tasks.questions.ch11 import _tokens_ref
    for case, (args, _) in _every_case("max_cached_tokens"):
        memory, n_layer, _, n_kv_head, d_head, b = args
        n = _tokens_ref(*args)
        per = lmbook.llama.kv_cache_bytes(n_layer, n_kv_head, d_head, 1, bytes_per_value=b)
        assert n * per <= memory < (n + 1) * per, case.name


def test_the_cache_bytes_per_position_are_a_real_caches():
    """A small grouped-query Llama generating: its KVCache's bytes are what the question's count says."""
    config = lmbook.llama.LlamaConfig(vocab_size=11, block_size=32, n_layer=3, n_head=6, d_model=24, n_kv_head=2)
    model = lmbook.llama.Llama(config).eval()
    cache = KVCache()
    with torch.no_grad():
        model(torch.randint(0, 11, (2, 7)), cache)
        model(torch.randint(0, 11, (2, 1)), cache)
    per_position = lmbook.llama.kv_cache_bytes(3, 2, 4, 1, bytes_per_value=4)
    assert lmbook.llama.cache_nbytes(cache) == 2 * 8 * per_position


def test_the_margin_gradient_is_autograds():
    from lmbook.tasks.questions.ch11 import _grad_ref
    for case, (args, _) in _every_case("dpo_margin_gradient"):
        margin, beta = args
        m = torch.tensor(float(margin), dtype=torch.float64, requires_grad=True)
        (-F.logsigmoid(beta * m)).backward()
        assert math.isclose(_grad_ref(*args), m.grad.item(), rel_tol=1e-12, abs_tol=1e-300), case.name


# ----------------------------------------------------------------------------- ready-made answers earn nothing


def _lib_rms(x, weight, eps=1e-6):
    norm = lmbook.llama.RMSNorm(x.shape[-1], eps)
    with torch.no_grad():
        norm.weight.copy_(weight)
    return norm(x)


def _torch_rms(x, weight, eps=1e-6):
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def _torch_module_rms(x, weight, eps=1e-6):
    norm = torch.nn.RMSNorm(x.shape[-1], eps=eps)
    with torch.no_grad():
        norm.weight.copy_(weight)
    return norm(x)


def _sdpa_gqa(x_new, cache, params, n_head, n_kv_head, cos, sin):
    return _gqa_ref(x_new, cache, params, n_head, n_kv_head, cos, sin)


def _lib_dpo(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta):
    return lmbook.dpo.dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta)


def _lib_instruction(logits, ids, response_mask):
    return lmbook.instruct.response_loss(logits[:, :-1], ids[:, 1:], response_mask[:, 1:])


def _lib_optimal(flops, tokens_per_param=20.0):
    return lmbook.scaling_laws.compute_optimal(flops, tokens_per_param)


@pytest.mark.parametrize(("task", "answer"), [
    ("rms_norm", _lib_rms), ("rms_norm", _torch_rms), ("rms_norm", _torch_module_rms),
    ("rms_norm", _hf_rms_norm), ("swiglu", _hf_mlp), ("gqa_attention", _hf_attention),
    ("instruction_loss", _lib_instruction), ("dpo_loss", _lib_dpo), ("dpo_loss", lmbook.dpo.dpo_loss),
    ("compute_optimal", _lib_optimal), ("llama_parameters", _hf_llama_count),
])
def test_a_ready_made_implementation_gets_no_credit(task, answer):
    with pytest.raises(CheckFailed, match="not graded"):
        check(task, answer)


def test_torchs_grouped_attention_gets_no_credit():
    """F.scaled_dot_product_attention(..., enable_gqa=True) is the reference itself: refused, by name."""
    def answer(x_new, cache, params, n_head, n_kv_head, cos, sin):
        B, n, _ = x_new.shape
        d_head = params["q_proj.weight"].shape[0] // n_head
        q = (x_new @ params["q_proj.weight"].T).view(B, n, n_head, d_head).transpose(1, 2)
        k = (x_new @ params["k_proj.weight"].T).view(B, n, n_kv_head, d_head).transpose(1, 2)
        v = (x_new @ params["v_proj.weight"].T).view(B, n, n_kv_head, d_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return y.transpose(1, 2).reshape(B, n, -1) @ params["o_proj.weight"].T, {"k": k, "v": v}
    with pytest.raises(CheckFailed, match="not graded"):
        check("gqa_attention", answer)
