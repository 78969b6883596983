"""lmbook's benchmarks: what the book, its models and its grader cost, measured (not a test).

    make bench                          # full: BENCHMARKS.md and bench/results.json (about 20 minutes)
    .venv/bin/python bench/run.py --quick   # under 5 minutes, into bench/quick/
    .venv/bin/python bench/run.py --tiny --out DIR   # smallest settings: checks the scripts work

Figures (times are medians of several runs; the spread is min-max):
- the book: a clean build (every notebook executed) and a no-change rebuild (cache);
- each chapter notebook: run time and the kernel's peak RSS, on the CPU and on a GPU when present;
- each trained model's headline quality, taken from the chapter's own glued numbers, run with
  several seeds (LMBOOK_SEED); the median and tolerance become the book's "expected" boxes;
- from-scratch functions against torch's built-ins on the same inputs, timed side by side;
- grading: submissions per minute and peak memory for `lmbook-grade` and for plain serial
  `nbgrader autograde` (nbgrader's default preprocessors) on the same generated submissions, in the
  same run, and how many students got the same total from both; and `lmbook-grade` on every released
  exercise's sample submissions (lmbook.tasks.ASSIGNMENTS).
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils import benchmark
from worktree import copy_worktree

from lmbook.expected import headline_kind
from lmbook.tasks import ASSIGNMENTS

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT / "autograder"))

MODES = {  # repeats of timed runs, seeds per chapter, submissions to grade, micro-benchmark size
    "full": {"repeats": 3, "seeds": 3, "submissions": 100, "size": (512, 10_000), "book": True},
    "quick": {"repeats": 1, "seeds": 1, "submissions": 5, "size": (512, 10_000), "book": True},
    # the tests' smoke run: one chapter stands for all (each chapter's notebook already runs in the book build)
    # and an exercise without a training task is graded (ch01's trains a model per submission: minutes)
    "tiny": {"repeats": 1, "seeds": 1, "submissions": 2, "size": (8, 50), "book": False,
             "only": ["ch01_feedforward_lm"], "exercises": ["ch05"], "throughput_on": "ch05"},
}


def _env(**extra: str) -> dict:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **extra}


def _stats(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def machine() -> dict:
    cpu = platform.processor()
    try:
        cpu = re.search(r"model name\s*:\s*(.*)", Path("/proc/cpuinfo").read_text()).group(1)
    except (OSError, AttributeError):
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
            "gpu": gpu, "date": dt.date.today().isoformat()}


# ----------------------------------------------------------------------------- the book


def book_builds(repeats: int) -> dict:
    clean, rebuild = [], []
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "book"
        copy_worktree(src)
        cmd = [str(BIN / "jupyter-book"), "build", str(src), "--all", "-W", "-n", "--keep-going"]
        for _ in range(repeats):
            shutil.rmtree(src / "_build", ignore_errors=True)
            t = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True, env=_env())
            clean.append(time.perf_counter() - t)
            t = time.perf_counter()  # nothing changed: the execution cache serves every notebook
            subprocess.run(cmd, check=True, capture_output=True, env=_env())
            rebuild.append(time.perf_counter() - t)
    return {"clean_build_s": _stats(clean), "no_change_rebuild_s": _stats(rebuild)}


# ----------------------------------------------------------------------------- chapters and their models


def run_chapter(path: Path, seed: int, device: str) -> dict:
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "execute_notebook.py"), str(path)],
                         capture_output=True, text=True, env=_env(LMBOOK_SEED=str(seed), LMBOOK_DEVICE=device))
    if out.returncode != 0:  # say which chapter, seed and cell failed, not only that something did
        raise RuntimeError(f"{path.name} failed with LMBOOK_SEED={seed} on {device}:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# What each chapter's trained models achieved: (label, glue key, what it is). Extend as chapters land.
HEADLINES = {
    "ch01_feedforward_lm": [
        ("feedforward LM, best window: test perplexity", "best_ppl"),
        ("feedforward LM, window 1: test perplexity", "ffnn1_ppl"),
        ("bigram (add-k): test perplexity", "bigram_ppl"),
        ("true model (floor): test perplexity", "floor_ppl"),
        ("share of the bigram-to-floor gap closed", "gap_closed"),
        ("skip-gram: final training loss", "sgns_loss_last"),
        ("window 3, Adam (η = 0.003): validation loss after 2 epochs", "adam_val"),
        ("window 3, SGD at the best of 4 learning rates: validation loss after 2 epochs", "sgd_best_val"),
        ("H = 512 on 8,000 words, no dropout: final validation loss", "plain_final"),
        ("H = 512 on 8,000 words, dropout 0.3: final validation loss", "dropped_final"),
    ],
    "ch02_rnn_lm": [
        ("LSTM LM: test perplexity", "lstm_ppl"),
        ("GRU LM: test perplexity", "gru_ppl"),
        ("vanilla RNN LM: test perplexity", "rnn_ppl"),
        ("feedforward LM, window 6: test perplexity", "ffnn_ppl"),
        ("true model (floor): test perplexity", "floor_ppl"),
        ("LSTM: share of the FFNN-to-floor gap closed", "lstm_gap_closed"),
        ("LSTM samples at temperature 1: share grammatical", "gram_t1"),
    ],
    "ch03_encoder_decoder": [
        ("encoder-decoder, greedy: test BLEU", "bleu_greedy"),
        ("encoder-decoder, greedy: test exact match", "em_greedy"),
        ("exact match, shortest sources", "em_short"),
        ("exact match, longest sources", "em_long"),
        ("beam search (k=5): exact match on the beam subset", "sub_em_beam"),
        ("greedy: exact match on the beam subset", "sub_em_greedy"),
    ],
    "ch04_attention": [
        ("attention (additive): test exact match", "em_att"),
        ("attention: lowest exact match of any length group", "em_att_min_bucket"),
        ("attention: test BLEU", "bleu_att"),
        ("no attention: test exact match", "em_none"),
        ("no attention: test BLEU", "bleu_none"),
        ("dot score: validation exact match (short run)", "em_cmp_dot"),
        ("multiplicative score: validation exact match (short run)", "em_cmp_multiplicative"),
        ("additive score: validation exact match (short run)", "em_cmp_additive"),
    ],
    "ch05_self_attention": [
        ("causal self-attention LM: test perplexity", "sa_ppl"),
        ("LSTM LM: test perplexity", "lstm_ppl"),
        ("feedforward LM, window 6: test perplexity", "ffnn_ppl"),
        ("true model (floor): test perplexity", "floor_ppl"),
        ("self-attention LM: agreement beyond the FFNN's window", "agree_sa_far"),
        ("LSTM: agreement beyond the FFNN's window", "agree_lstm_far"),
        ("one attention layer: fitted exponent of time in n", "time_exponent"),
        ("same LM trained with Adam + L2 (same λ): test perplexity", "l2_ppl"),
        ("LSTM: agreement at D = 16 to 28 (built sentences)", "lstm_long"),
        ("self-attention LM: agreement at D = 16 to 28 (built sentences)", "sa_long"),
    ],
    "ch06_multihead_attention": [
        ("causal LM, 4 heads: test perplexity", "mh_ppl"),
        ("true model (floor): test perplexity", "floor_ppl"),
        ("subject head: weight on the subject from the word before the verb", "best_subj_w"),
        ("agreement behind a phrase, all heads", "agree_all"),
        ("agreement behind a phrase, subject head switched off", "agree_best_off"),
        ("two lookups, 1 layer of 1 head: pairs named right", "lk_acc_1"),
        ("two lookups, 1 layer of 4 heads: pairs named right", "lk_acc_4"),
        ("two lookups, 2 layers of 1 head: pairs named right", "lk_acc_2l"),
    ],
    "ch08_transformer": [
        ("16 plain FFNs ÷ 2 plain FFNs: training loss (the degradation problem)", "degradation"),
        ("16 residual FFNs: training loss", "res_16"),
        ("plain stack of 32 FFNs, variance-preserving init: gradient at the input", "grad_vp_32"),
        ("deep post-LN, no warm-up: validation loss", "ln_post_cold"),
        ("deep post-LN, warm-up: validation loss", "ln_post_warm"),
        ("deep pre-LN, no warm-up: validation loss", "ln_pre_cold"),
    ],
    "ch08_training": [
        ("exact match just beyond the training lengths, RNN minus Transformer", "em_gap"),
        ("RNN + attention: exact match just beyond the training lengths", "em_rnn_beyond"),
        ("Transformer: exact match just beyond the training lengths", "em_tf_beyond"),
        ("Transformer: test exact match within the training lengths", "em_tf_inside"),
        ("Transformer: output length ÷ reference length beyond the training lengths", "len_ratio_tf"),
        ("Transformer: training seconds to the validation target", "reach_tf"),
        ("RNN + attention: training seconds to the validation target", "reach_rnn"),
        ("training time to the target, Transformer ÷ RNN", "reach_ratio"),
        ("label smoothing 0.1: mean probability of the right word", "p_smooth"),
        ("search errors: largest share of a model's greedy errors", "share_max"),
    ],
    "ch09_gpt": [
        ("BPE training, 2,000 merges on 1 MB: seconds", "bpe_seconds"),
        ("lmbook's BPE with GPT-2's files: bytes per token, Brown validation", "gpt2_bpt"),
        ("KV cache: generation speed-up, 64 tokens", "kv_speedup_64"),
        ("KV cache: generation speed-up, 256 tokens", "kv_speedup_256"),
        ("KV cache: generation speed-up, 1,024 tokens", "kv_speedup_1024"),
    ],
    "ch09_pretraining": [
        ("GPT on the course's corpus: test perplexity", "course_ppl"),
        ("GPT on the course's corpus: perplexity above the floor", "course_over_floor"),
        ("GPT on Brown: validation bits per byte", "brown_bpb"),
        ("GPT on Brown: training seconds", "brown_seconds"),
        ("gzip on Brown validation: bits per byte", "gzip_bpb"),
        ("sampling at T = 1: samples ungrammatical", "samp_ungrammatical_T1"),
        ("sampling, top-p 0.9: samples ungrammatical", "samp_ungrammatical_topp09"),
    ],
    "ch09_finetuning": [
        ("does the verb agree?, 64 labels: accuracy, pretrained minus from scratch (medians over 5 seeds)",
         "gap_64"),
        ("does the verb agree?, 64 labels: test accuracy, pretrained (median over 5 seeds)", "pre_med_64"),
        ("does the verb agree?, 64 labels: test accuracy, from scratch (median over 5 seeds)", "scr_med_64"),
        ("64 labels: best minus worst of 5 seeds, pretrained", "pre_spread_64"),
        ("64 labels: best minus worst of 5 seeds, from scratch", "scr_spread_64"),
        ("16 labels: test accuracy, pretrained (median)", "pre_med_16"),
        ("16 labels: test accuracy, from scratch (median)", "scr_med_16"),
        ("256 labels: test accuracy, pretrained (median)", "pre_med_256"),
        ("256 labels: test accuracy, from scratch (median)", "scr_med_256"),
        ("256 labels: pretrained minus the best shortcut", "above_shortcut_256"),
        ("linear probe, 64 labels: test accuracy (median)", "probe_med"),
        ("the best shortcut (verb, first word, nearest noun): test accuracy", "best_shortcut"),
        ("the language model's own preference, no labels: test accuracy", "zero_shot_acc"),
    ],
    "ch10_bert": [
        ("masked LM on the course's corpus: loss above the floor", "mlm_over_floor"),
        ("masked LM: test loss at masked words (nats)", "mlm_nll"),
        ("true model (floor): loss at masked words (nats)", "mlm_floor"),
        ("masked LM: training seconds", "mlm_seconds"),
        ("masked LM on Brown: validation loss at masked tokens (nats)", "brown_mlm_nll"),
        ("Brown: token frequencies alone at masked tokens (nats)", "brown_unigram_nll"),
        ("masked LM on Brown: first guess right", "brown_mlm_top1"),
        ("masked LM on Brown: training seconds", "brown_mlm_seconds"),
    ],
    "ch10_finetuning": [
        ("grammatical?, 256 labels: accuracy, pretrained − from scratch (medians)", "agree_gap_256"),
        ("grammatical?, 64 labels: accuracy, pretrained (median)", "agree_pre_64"),
        ("grammatical?, 256 labels: accuracy, pretrained (median)", "agree_pre_256"),
        ("grammatical?, 256 labels: accuracy, from scratch (median)", "agree_scr_256"),
        ("who?, 64 labels: exact match, pretrained − from scratch (medians)", "who_gap_64"),
        ("who?, 16 labels: exact match, pretrained (median)", "who_pre_16"),
        ("who?, 64 labels: exact match, pretrained (median)", "who_pre_64"),
        ("who?, 256 labels: exact match, from scratch (median)", "who_scr_256"),
        ("fine-tuning: seconds for all runs", "ft_seconds"),
    ],
    "ch11_modern_lm": [
        ("Llama-style decoder vs transformers' LlamaForCausalLM: largest logit difference, float32, "
         "in millionths", "llama_diff32_u"),
        ("the same in float64 (Hugging Face's attention takes its softmax in float32), in millionths",
         "llama_diff64_u"),
        ("course's language, equal parameters, 300 steps: test perplexity, GPT-2-style block", "ppl_gpt_course"),
        ("the same, Llama-style block", "ppl_llama_course"),
        ("test perplexity, GPT-2 style minus Llama style", "trained_gap"),
        ("KV cache measured, 4 layers, 8 query heads of 16, 2 × 50 positions, n_kv_head = 8: bytes", "cache_mha"),
        ("the same cache with n_kv_head = 2: bytes", "cache_gqa"),
        ("the same cache with n_kv_head = 1: bytes", "cache_mqa"),
        ("Llama 2 70B's sizes, 40 GB of 16-bit cache, 64 key/value heads: positions", "tokens_mha"),
        ("Llama 2 70B's sizes, 40 GB of 16-bit cache, 8 key/value heads: positions", "tokens_gqa"),
    ],
    "ch11_instruction": [
        ("instruction tuning, <plural>: exact match, pretrained zero-shot", "zs_plural"),
        ("instruction tuning, <plural>: exact match, fine-tuned", "ft_plural"),
        ("<singular>: exact match, fine-tuned", "ft_singular"),
        ("<plain> (drop adjectives): exact match, fine-tuned", "ft_plain"),
        ("<continue>: grammatical endings, pretrained zero-shot", "zs_continue"),
        ("<continue>: grammatical endings, fine-tuned", "ft_continue"),
        ("<continue>: grammatical endings, pretrained given plain text", "as_text_continue"),
        ("smallest gain in exact match of the four tasks, fine-tuned minus zero-shot", "min_gain"),
    ],
    "ch11_preferences": [
        ("<continue> from one word: answers ungrammatical, instruction-tuned reference", "ref_bad"),
        ("answers ungrammatical after DPO, beta = 0.5", "dpo_bad_05"),
        ("answers ungrammatical after DPO, beta = 2", "dpo_bad_2"),
        ("KL to the reference after DPO, beta = 0.5 (nats, from samples)", "dpo_kl_05"),
        ("KL to the reference after DPO, beta = 2 (nats, from samples)", "dpo_kl_2"),
        ("best-of-2 with the true grammar: answers ungrammatical (exact)", "bon2_bad"),
        ("best-of-2: KL to the reference (nats, exact)", "bon2_kl"),
        ("preference pairs from the reference's samples", "n_pairs"),
    ],
    "appendix_gpu": [
        ("validation loss, bf16 autocast − float32 (nats)", "val_gap"),
        ("bf16 autocast training speed ÷ float32", "bf16_speedup"),
        ("causal attention at n = 2048: course ÷ SDPA time", "attn_time_ratio"),
        ("causal attention at n = 2048: course ÷ SDPA memory allocated", "attn_mem_ratio"),
        ("torch.compile: compiled ÷ eager speed", "compile_speedup"),
        ("MFU of chapter 9's GPT against the measured matmul peak", "mfu_small"),
        ("MFU of the wider GPT against the measured matmul peak", "mfu_wide"),
    ],
    "ch07_positions": [
        ("best position scheme, positions ≤ L: perplexity ÷ floor", "best_ppl_ratio"),
        ("true model (floor): test perplexity", "floor_ppl"),
        *[(f"{s} positions, 2L … 4L: perplexity ÷ floor", f"r_{s}_2")
          for s in ("none", "learned", "sinusoidal", "relative", "alibi", "rope")],
        ("reversal, no positions: examples right", "rev_seq_none"),
        ("reversal, learned positions: examples right", "rev_seq_learned"),
        ("reversal, RoPE: examples right", "rev_seq_rope"),
        ("reversal, ALiBi: examples right", "rev_seq_alibi"),
    ],
}


def tolerance(values: list[float]) -> float:
    """What a reader's run may differ by: 3 standard deviations over seeds, at least 1% of the median."""
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return max(3 * spread, 0.01 * abs(statistics.median(values)))


def book_pages() -> list[Path]:
    """Every executed page of the book: the chapters' pages, then the appendices."""
    return sorted((ROOT / "book").glob("ch*.md")) + sorted((ROOT / "book").glob("appendix*.md"))


def chapters(seeds: int, devices: list[str], only: list[str] | None = None) -> dict:
    results = {}
    for path in book_pages():
        if only and path.stem not in only:
            continue
        for device in devices:
            runs = [run_chapter(path, seed, device) for seed in range(seeds)]
            entry = {"date": dt.date.today().isoformat(), "seconds": _stats([r["seconds"] for r in runs]),
                     "peak_rss_mib": _stats([r["peak_rss_mib"] for r in runs]), "models": {}}
            for label, key in HEADLINES.get(path.stem, []):
                values = [float(r["glue"][key]) for r in runs]
                # kind: what the chapter's "expected result" box may claim of it (lmbook.expected.KINDS)
                entry["models"][key] = {"label": label, "kind": headline_kind(label, key),
                                        "median": statistics.median(values),
                                        "tolerance": tolerance(values), "values": values}
            floor = entry["models"].get("floor_ppl", {}).get("median")
            if floor:
                for m in entry["models"].values():
                    if m["label"].endswith("test perplexity"):
                        m["ratio_to_floor"] = m["median"] / floor
            by_window = [r["glue"].get("test_ppl_by_window") for r in runs]
            if all(by_window):
                entry["ffnn_test_ppl_by_window"] = {str(w): statistics.median(float(b[w]) for b in by_window)
                                                    for w in by_window[0]}
            results.setdefault(path.stem, {})[device] = entry
            print(f"  {path.stem} on {device}: {entry['seconds']['median']:.1f} s", flush=True)
    return results


# ----------------------------------------------------------------------------- from scratch vs built in


def builtins(size: tuple[int, int], repeats: int) -> dict:
    """Median time per call of each pair, measured alternately in one run, and their ratio."""
    from lmbook import functional as LF

    B, V = size
    g = torch.Generator().manual_seed(0)
    x = torch.randn(B, V, generator=g)
    t = torch.randint(0, V, (B,), generator=g)
    # an LSTM over a (32, 35, 128) batch: lmbook's cell unrolled step by step in Python against torch's fused nn.LSTM
    from lmbook.rnn import LSTMCell, unroll

    cell, lstm = LSTMCell(128, 128), torch.nn.LSTM(128, 128, batch_first=True)
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(lstm, f"{name}_l0").copy_(getattr(cell, name))
    seq = torch.randn(32, 35, 128, generator=g)
    # chapter 5's language model's attention: a batch of 32 windows of 32 tokens, width 64, causal
    from lmbook.multihead import MultiHeadAttention
    from lmbook.self_attention import causal_mask, scaled_dot_product_attention

    q, k, v = (torch.randn(32, 32, 64, generator=g) for _ in range(3))
    causal = causal_mask(32)
    ours_mha, torch_mha = MultiHeadAttention(64, 4), torch.nn.MultiheadAttention(64, 4, batch_first=True)
    ours_mha.load_torch(torch_mha)
    # chapter 8's blocks, as they train: forward and backward on a (64, 32, 64) batch with padding
    from lmbook.transformer import DecoderBlock, EncoderBlock

    d, n_head, d_ff = 64, 2, 256
    enc_t = torch.nn.TransformerEncoderLayer(d, n_head, d_ff, dropout=0.0, batch_first=True)
    dec_t = torch.nn.TransformerDecoderLayer(d, n_head, d_ff, dropout=0.0, batch_first=True)
    enc, dec = EncoderBlock(d, n_head, d_ff).load_torch(enc_t), DecoderBlock(d, n_head, d_ff).load_torch(dec_t)
    src, tgt = torch.randn(64, 32, d, generator=g), torch.randn(64, 32, d, generator=g)
    src_mask = torch.arange(32)[None, :] < torch.randint(8, 33, (64,), generator=g)[:, None]
    tgt_causal = torch.nn.Transformer.generate_square_subsequent_mask(32)

    # chapter 9's GPT at the size its Brown model trains, against transformers' GPT-2 given the same weights
    from transformers import GPT2Config, GPT2LMHeadModel

    from lmbook.gpt import GPT, GPTConfig, load_hf_gpt2

    hf_gpt = GPT2LMHeadModel(GPT2Config(vocab_size=2048, n_positions=128, n_layer=2, n_head=4, n_embd=128,
                                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
                                        eos_token_id=0)).eval()  # transformers' default attention (SDPA)
    our_gpt = load_hf_gpt2(GPT(GPTConfig(vocab_size=2048, block_size=128, n_layer=2, n_head=4, d_model=128)),
                           hf_gpt).eval()
    gpt_ids = torch.randint(0, 2048, (32, 128), generator=g)

    def train_step(forward):  # forward and backward; returns the output, so the two can be compared
        def step():
            out = forward()
            out.sum().backward()
            return out.detach()
        return step

    pairs = {
        "encoder_block_train": (train_step(lambda: enc(src, src_mask)[0] * src_mask[..., None]),
                                train_step(lambda: enc_t(src, src_key_padding_mask=~src_mask) * src_mask[..., None]),
                                "torch.nn.TransformerEncoderLayer (forward + backward)", list(src.shape)),
        "decoder_block_train": (train_step(lambda: dec(tgt, src, src_mask)[0]),
                                train_step(lambda: dec_t(tgt, src, tgt_mask=tgt_causal, tgt_is_causal=True,
                                                         memory_key_padding_mask=~src_mask)),
                                "torch.nn.TransformerDecoderLayer (forward + backward)", list(tgt.shape)),
        "gpt_forward": (torch.no_grad()(lambda: our_gpt(gpt_ids)), torch.no_grad()(lambda: hf_gpt(gpt_ids).logits),
                        "transformers GPT2LMHeadModel (forward)", list(gpt_ids.shape)),
        "log_softmax": (lambda: LF.log_softmax(x, -1), lambda: torch.log_softmax(x, -1),
                        "torch.log_softmax", [B, V]),
        "cross_entropy": (lambda: LF.cross_entropy(x, t), lambda: F.cross_entropy(x, t),
                          "torch.nn.functional.cross_entropy", [B, V]),
        "lstm_forward": (torch.no_grad()(lambda: unroll(cell, seq)[0]), torch.no_grad()(lambda: lstm(seq)[0]),
                         "torch.nn.LSTM", list(seq.shape)),
        "causal_attention": (lambda: scaled_dot_product_attention(q, k, v, causal)[0],
                             lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=causal),
                             "torch.nn.functional.scaled_dot_product_attention", list(q.shape)),
        "multihead_attention": (torch.no_grad()(lambda: ours_mha(q, causal=True)[0]),
                                torch.no_grad()(lambda: torch_mha(q, q, q, attn_mask=~causal, need_weights=False)[0]),
                                "torch.nn.MultiheadAttention (4 heads)", list(q.shape)),
    }
    out = {}
    for name, (ours, theirs, ref, shape) in pairs.items():
        torch.testing.assert_close(ours(), theirs())  # same inputs, same answer, else the timing is meaningless
        times = {"lmbook": [], "torch": []}
        for _ in range(max(3, repeats)):
            for who, fn in (("lmbook", ours), ("torch", theirs)):
                times[who].append(benchmark.Timer("fn()", globals={"fn": fn}).blocked_autorange(min_run_time=0.2)
                                  .median)
        ours_s, theirs_s = statistics.median(times["lmbook"]), statistics.median(times["torch"])
        out[name] = {"builtin": ref, "shape": shape, "lmbook_ms": ours_s * 1e3, "torch_ms": theirs_s * 1e3,
                     "ratio": ours_s / theirs_s, "threads": torch.get_num_threads()}
    return out


# ----------------------------------------------------------------------------- grading

# Plain nbgrader as an instructor sets it up: nbgrader's default preprocessors, nothing of lmbook's.
PLAIN_CONFIG = """\
c = get_config()  # noqa: F821
c.CourseDirectory.course_id = "lmbook"
c.CourseDirectory.source_directory = {source!r}
c.CourseDirectory.release_directory = "release"
c.ClearSolutions.code_stub = {{"python": "# YOUR CODE HERE\\nraise NotImplementedError()"}}
c.Execute.timeout = 300
c.GenerateAssignment.create_assignment = True
"""


def _submissions(dest: Path, n: int, assignment: str) -> list[str]:
    """n submissions, cycling through the sample students (correct, blank, partly wrong, ...).

    Each gets a comment naming it in its first answer cell: lmbook-grade caches results by the code of a
    notebook, and without it identical copies would be graded once per kind instead of once per student.
    """
    import nbformat
    from make_samples import make_samples, notebook_name

    samples = dest.parent / "samples"
    kinds = [k for k in make_samples(samples, assignment) if k != "not_a_notebook"]
    names = []
    for i in range(n):
        kind = kinds[i % len(kinds)]
        name = f"s{i:03d}_{kind}"
        nb = nbformat.read(samples / kind / notebook_name(assignment), as_version=4)
        answer = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")
                      and c.cell_type == "code")
        answer.source += f"\n# submission {name}"
        (dest / name).mkdir(parents=True)
        nbformat.write(nb, dest / name / notebook_name(assignment))
        names.append(name)
    return names


def _run_measured(cmd: list[str], cwd: Path, env: dict, log: Path) -> tuple[float, float]:
    """Run cmd to completion: (wall seconds, peak MiB of the summed RSS of it and all its descendants).

    Sampled every 0.2 s; shared pages count once per process, as `ps` shows them.
    """
    import psutil

    with log.open("w") as out:
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        root, peak = psutil.Process(proc.pid), 0
        while proc.poll() is None:
            total = 0
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                procs = []
            for p in procs:
                try:
                    total += p.memory_info().rss
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    pass  # ended between listing and reading, or not ours to read
            peak = max(peak, total)
            time.sleep(0.2)
        seconds = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{log.read_text()[-3000:]}")
    return seconds, peak / 2**20


def grading(n: int, assignment: str = "ch01") -> dict:
    """lmbook-grade and plain serial `nbgrader autograde` on the same n submissions: time, memory, totals."""
    from nbgrader.api import Gradebook

    workers = max(1, min(os.cpu_count() or 1, n))  # lmbook-grade's default: one worker per core
    # One thread per kernel for both graders, as lmbook-grade sets for its own kernels.
    env = _env(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        subs = tmp / "subs"
        names = _submissions(subs, n, assignment)
        ours_s, ours_mib = _run_measured([str(BIN / "lmbook-grade"), str(subs), "--assignment", assignment,
                                          "--out", str(tmp / "lmbook")], ROOT, env, tmp / "lmbook.log")
        with (tmp / "lmbook" / "grades.csv").open(newline="") as f:
            ours_total = {row["student"]: float(row["total"]) for row in csv.DictReader(f)}

        # Plain nbgrader, as an instructor would run it: its own course folder and config (autograder/'s
        # replaces Execute with lmbook's sandbox), one serial `autograde` over the class.
        course = tmp / "plain"
        course.mkdir()
        (course / "nbgrader_config.py").write_text(PLAIN_CONFIG.format(source=str(ROOT / "solutions")))
        nbgrader = [sys.executable, "-m", "nbgrader"]
        subprocess.run([*nbgrader, "generate_assignment", assignment, "--force"], cwd=course, env=env, check=True,
                       capture_output=True)
        for name in names:
            shutil.copytree(subs / name, course / "submitted" / name / assignment)
        plain_s, plain_mib = _run_measured([*nbgrader, "autograde", assignment, "--create"], course, env,
                                           tmp / "plain.log")
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
            plain_total = {name: float(gb.find_submission(assignment, name).score) for name in names}

    differ = {name: {"lmbook_grade": ours_total.get(name), "nbgrader_autograde": plain_total[name]}
              for name in names if ours_total.get(name) is None or abs(ours_total[name] - plain_total[name]) > 1e-6}
    ours_rate, plain_rate = 60 * n / ours_s, 60 * n / plain_s
    return {"assignment": assignment, "submissions": n, "workers": workers,
            "lmbook_grade": {"seconds": ours_s, "per_minute": ours_rate, "peak_rss_mib": ours_mib,
                             "includes": "sandboxed runs, assignment generation, autograde and feedback"},
            "nbgrader_autograde": {"seconds": plain_s, "per_minute": plain_rate, "peak_rss_mib": plain_mib,
                                   "includes": "autograde only (assignment generated beforehand, untimed)"},
            "throughput_ratio": ours_rate / plain_rate,
            "same_total": n - len(differ), "different_total": differ}


def grading_each_exercise(assignments: list[str]) -> dict:
    """`lmbook-grade` on each released exercise's sample submissions (autograder/make_samples.py): wall time,
    time per submission, and whether the correct sample got full marks and the blank one none."""
    from make_samples import make_samples

    env = _env(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    results = {}
    for a in assignments:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            names = make_samples(tmp / "subs", a)
            seconds, mib = _run_measured([str(BIN / "lmbook-grade"), str(tmp / "subs"), "--assignment", a,
                                          "--out", str(tmp / "out")], ROOT, env, tmp / "grade.log")
            with (tmp / "out" / "grades.csv").open(newline="") as f:
                rows = {row["student"]: row for row in csv.DictReader(f)}
        results[a] = {"submissions": len(names), "samples": names, "seconds": seconds,
                      "per_submission_s": seconds / len(names), "peak_rss_mib": mib,
                      "correct_full_marks": float(rows["correct"]["total"]) == float(rows["correct"]["max"]),
                      "blank_zero": float(rows["blank"]["total"]) == 0}
        print(f"  {a}: {seconds:.1f} s for {len(names)} samples", flush=True)
    return results


# ----------------------------------------------------------------------------- report


def _fmt(s: dict, unit: str = "s", digits: int = 1) -> str:
    return f"{s['median']:.{digits}f} {unit} ({s['min']:.{digits}f}–{s['max']:.{digits}f}, n={s['n']})"


def report(r: dict) -> str:
    m = r["machine"]
    lines = ["# lmbook benchmarks", "",
             f"Measured by `make bench` ({r['mode']} mode) on {m['date']}: {m['cpu']}, {m['cores']} cores, "
             f"Python {m['python']}, torch {m['torch']}, GPU: {m['gpu'] or 'none'}. Times are medians "
             "(min–max, n runs). Regenerate with `make bench`; the chapters' \"expected\" boxes read "
             "`bench/results.json`.", ""]
    if "book" in r:
        b = r["book"]
        lines += ["## The book", "", "| build | time |", "|---|---|",
                  f"| clean (every notebook executed) | {_fmt(b['clean_build_s'])} |",
                  f"| no-change rebuild (execution cache) | {_fmt(b['no_change_rebuild_s'])} |", ""]
    lines += ["## Chapter notebooks", "", "| chapter | device | run time | kernel peak RSS |", "|---|---|---|---|"]
    for chapter, by_device in r["chapters"].items():
        for device, e in by_device.items():
            when = f" (measured {e['date']})" if e.get("date", m["date"]) != m["date"] else ""
            lines.append(f"| {chapter}{when} | {device} | {_fmt(e['seconds'])} | {_fmt(e['peak_rss_mib'], 'MiB', 0)} |")
        if "cuda" not in by_device:  # say so, rather than leave the reader to wonder
            lines.append(f"| {chapter} | cuda | not yet measured (no GPU in the benchmark runs) | |")
    lines += ["", "## Trained models", "",
              "Median over seeds (`LMBOOK_SEED`), ± the tolerance a reader's run should fall within "
              "(3 standard deviations over seeds, at least 1%).", "",
              "| chapter | device | result | value | ratio to the floor |", "|---|---|---|---|---|"]
    for chapter, by_device in r["chapters"].items():
        for device, e in by_device.items():
            for mod in e["models"].values():
                ratio = f"{mod['ratio_to_floor']:.3f}" if "ratio_to_floor" in mod else ""
                lines.append(f"| {chapter} | {device} | {mod['label']} | {mod['median']:.3f} ± "
                             f"{mod['tolerance']:.3f} | {ratio} |")
            if "ffnn_test_ppl_by_window" in e:
                w = e["ffnn_test_ppl_by_window"]
                lines.append(f"| {chapter} | {device} | feedforward LM test perplexity by window "
                             f"({', '.join(w)}) | {', '.join(f'{v:.2f}' for v in w.values())} | |")
    lines += ["", "## From scratch vs torch's built-ins", "",
              "Same inputs, timed alternately in one run (`torch.utils.benchmark`, median).", "",
              "| function | built-in | shape | lmbook | torch | ratio |", "|---|---|---|---|---|---|"]
    for name, e in r["builtins"].items():
        lines.append(f"| {name} | `{e['builtin']}` | {e['shape']} | {e['lmbook_ms']:.3f} ms | {e['torch_ms']:.3f} ms "
                     f"| {e['ratio']:.2f}× |")
    g = r["grading"]
    ours, plain = g["lmbook_grade"], g["nbgrader_autograde"]
    lines += ["", "## Grading", "", f"{g['submissions']} generated submissions of exercise "
              f"{int(g.get('assignment', 'ch01')[2:])} (correct, blank, "
              "partly wrong, syntax error, imported answer, in turn; each a distinct notebook), graded by both "
              f"in the same run. `lmbook-grade` ran {g['workers']} workers (its default, one per core); plain "
              "`nbgrader autograde` is serial, with nbgrader's default preprocessors (its own course folder and "
              "config, not `autograder/`'s). Both with `OMP_NUM_THREADS=1`. Peak memory is the summed RSS of "
              "the grader and all its processes, sampled every 0.2 s.", "",
              "| grader | wall time | submissions per minute | peak memory | what it includes |",
              "|---|---|---|---|---|",
              f"| `lmbook-grade` | {ours['seconds']:.1f} s | {ours['per_minute']:.1f} | "
              f"{ours['peak_rss_mib']:.0f} MiB | {ours['includes']} |",
              f"| plain `nbgrader autograde` (serial) | {plain['seconds']:.1f} s | {plain['per_minute']:.1f} | "
              f"{plain['peak_rss_mib']:.0f} MiB | {plain['includes']} |", "",
              f"Throughput ratio (lmbook-grade / plain nbgrader): {g['throughput_ratio']:.2f}×. `lmbook-grade`'s "
              "figure includes the sandbox, assignment generation, autograde and feedback; plain nbgrader's is "
              "autograde only.", "",
              f"Same total from both graders: {g['same_total']} of {g['submissions']} students."]
    for name, t in g["different_total"].items():
        lines.append(f"- {name}: lmbook-grade {t['lmbook_grade']}, plain nbgrader {t['nbgrader_autograde']}")
    if "grading_each_exercise" in r:
        lines += ["", "### Every exercise", "",
                  "`lmbook-grade` on each exercise's sample submissions (`autograder/make_samples.py`: correct, "
                  "blank, syntax error, a wrong or unanswered task, not a notebook), including assignment generation "
                  "and feedback.", "",
                  "| exercise | samples | wall time | per submission | peak memory | correct: full marks | "
                  "blank: 0 |", "|---|---|---|---|---|---|---|"]
        for a, e in r["grading_each_exercise"].items():
            lines.append(f"| {a} | {e['submissions']} | {e['seconds']:.1f} s | {e['per_submission_s']:.1f} s | "
                         f"{e['peak_rss_mib']:.0f} MiB | {'yes' if e['correct_full_marks'] else '**no**'} | "
                         f"{'yes' if e['blank_zero'] else '**no**'} |")
    lines.append("")
    return "\n".join(lines)


def update_chapters(stems: list[str]) -> dict:
    """Re-measure some chapters (a chapter was added or changed) without rerunning the whole benchmark."""
    unknown = [s for s in stems if not (ROOT / "book" / f"{s}.md").exists()]
    if unknown:
        raise SystemExit(f"no such chapter: {', '.join(unknown)} (expected book/<stem>.md)")
    js = ROOT / "bench" / "results.json"
    results = json.loads(js.read_text())
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for stem, by_device in chapters(MODES["full"]["seeds"], devices, only=stems).items():
        results["chapters"].setdefault(stem, {}).update(by_device)
    results["chapters"] = dict(sorted(results["chapters"].items()))
    results["builtins"] = builtins(MODES["full"]["size"], MODES["full"]["repeats"])  # seconds; new rows appear
    js.write_text(json.dumps(results, indent=2) + "\n")
    (ROOT / "BENCHMARKS.md").write_text(report(results))
    print(f"updated {', '.join(stems)} in {js} and BENCHMARKS.md")
    return results


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_const", dest="mode", const="quick", help="under 5 minutes")
    mode.add_argument("--tiny", action="store_const", dest="mode", const="tiny", help="smallest settings")
    ap.add_argument("--out", type=Path, default=None,
                    help="folder for BENCHMARKS.md and results.json (default: repository root and bench/ for a full "
                         "run, bench/quick/ otherwise)")
    ap.add_argument("--chapters", nargs="+", metavar="STEM",
                    help="re-measure only these chapters (e.g. ch02_rnn_lm) with the full mode's seeds, and the "
                         "built-in timings; update them in bench/results.json and BENCHMARKS.md, keep the rest")
    a = ap.parse_args(argv)
    if a.chapters:
        return update_chapters(a.chapters)
    a.mode = a.mode or "full"
    cfg = MODES[a.mode]
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    results = {"mode": a.mode, "machine": machine()}
    if cfg["book"]:
        print("book builds...", flush=True)
        results["book"] = book_builds(cfg["repeats"])
    print("chapters...", flush=True)
    results["chapters"] = chapters(cfg["seeds"], devices, only=cfg.get("only"))
    print("from scratch vs built-ins...", flush=True)
    results["builtins"] = builtins(cfg["size"], cfg["repeats"])
    print("grading...", flush=True)
    results["grading"] = grading(cfg["submissions"], cfg.get("throughput_on", "ch01"))
    print("grading each exercise...", flush=True)
    results["grading_each_exercise"] = grading_each_exercise(cfg.get("exercises", list(ASSIGNMENTS)))
    text = report(results)
    if a.out is None and a.mode == "full":
        md, js = ROOT / "BENCHMARKS.md", ROOT / "bench" / "results.json"
    else:
        out = a.out or ROOT / "bench" / "quick"
        out.mkdir(parents=True, exist_ok=True)
        md, js = out / "BENCHMARKS.md", out / "results.json"
    md.write_text(text)
    js.write_text(json.dumps(results, indent=2) + "\n")
    print(text)
    print(f"\nwrote {md} and {js}")
    return results


if __name__ == "__main__":
    main()
