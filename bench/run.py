"""lmbook's benchmarks: what the book, its models and its grader cost, measured (not a test).

    make bench                                   # full: BENCHMARKS.md and bench/results.json, one run
    .venv/bin/python bench/run.py --quick        # every part once, at small sizes, into bench/quick/
    .venv/bin/python bench/run.py --tiny --out DIR   # smallest settings: checks the scripts work
    .venv/bin/python bench/run.py --quick --pages ch02_rnn_lm --skip book exercises   # a part of it
    .venv/bin/python bench/run.py --chapters ch02_rnn_lm   # re-measure pages into the published results

A full run writes every figure of BENCHMARKS.md and bench/results.json from the same run, with the date, the
commit (and whether the working tree was clean), the machine and the thread counts in its header. Each row
says what it measured: wall time, CPU time, bytes allocated or peak memory. Figures (times are medians of
several runs; the spread is min-max):
- the book: a clean build (every page executed) and a no-change rebuild (the execution cache);
- each chapter page: run time (wall), the kernel's CPU time and peak resident memory, pinned to 2 cores where
  the machine has more (the book's budget: 2 minutes and 2 GiB a page on 2 cores; a page over it makes the
  run fail at the end, after every file is written, naming the page);
- each trained model's headline result, taken from the page's own glued numbers, run with several seeds
  (LMBOOK_SEED); the median and tolerance become the pages' "expected result" boxes;
- chapter 9's KV cache, timed single-threaded and alternately with and without the cache, with the spread;
- causal attention at n = 2048: bytes allocated (what the GPU appendix reports) next to the rise of a fresh
  process's peak resident memory;
- from-scratch functions against torch's built-ins on the same inputs, timed side by side;
- grading: wall time, CPU time and peak memory of `lmbook-grade` and of plain serial `nbgrader autograde`
  (nbgrader's default preprocessors) on the same generated submissions, in the same run, how many students
  got the same total from both, where lmbook-grade's time goes; and `lmbook-grade` on every exercise's sample
  submissions (lmbook.tasks.ASSIGNMENTS), with what a class of 1,000 would take on 2 and on 32 cores.
The CUDA rows come from `make gpu-check` (bench/gpu_check.py), on a machine with a GPU; a run without a GPU
keeps them, with their own date and commit.
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

from lmbook.expected import headline_kind, seed_tolerance
from lmbook.tasks import ASSIGNMENTS

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT / "autograder"))

# The book's budget for one page, on 2 cores (README, "Every chapter page runs ... in about 2 minutes at most").
PAGE_BUDGET = {"seconds": 120.0, "peak_rss_mib": 2048.0}
PAGE_CORES = 2
PARTS = ("book", "chapters", "kv", "attention", "builtins", "grading", "exercises")
# repeats: timed runs of the micro-benchmarks; seeds: runs of each page; book_clean / book_rebuilds: builds;
# submissions: the grading comparison's class; size: the log-softmax micro-benchmark's input.
MODES = {
    "full": {"repeats": 3, "seeds": 3, "book_clean": 1, "book_rebuilds": 3, "submissions": 100,
             "size": (512, 10_000), "kv_lengths": [64, 256, 1024], "kv_repeats": 5, "attn_n": 2048,
             "attn_repeats": 3, "budget": True},
    "quick": {"repeats": 1, "seeds": 1, "book_clean": 0, "book_rebuilds": 0, "submissions": 10,
              "size": (512, 10_000), "kv_lengths": [64, 256], "kv_repeats": 2, "attn_n": 2048,
              "attn_repeats": 1, "budget": True},
    # the tests' smoke run: one page stands for all (every page already runs in the tests' book build),
    # and an exercise without a training task is graded (exercise 1 trains a model per submission)
    "tiny": {"repeats": 1, "seeds": 1, "book_clean": 0, "book_rebuilds": 0, "submissions": 2, "size": (8, 50),
             "kv_lengths": [8, 16], "kv_repeats": 2, "attn_n": 256, "attn_repeats": 1, "budget": False,
             "pages": ["ch01_feedforward_lm"], "exercises": ["ch05"], "throughput_on": "ch05"},
}


def _env(**extra: str) -> dict:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **extra}


def _stats(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def git_state() -> dict:
    """The commit measured, and whether the working tree had changes (then the figures may not match it)."""
    def git(*args: str) -> str:
        r = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else ""

    changed = [line[3:] for line in git("status", "--porcelain").splitlines() if line.strip()]
    return {"commit": git("rev-parse", "HEAD") or "unknown", "clean": not changed, "changed": changed[:20],
            "subject": git("log", "-1", "--format=%s")[:120]}


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def page_cores() -> list[int]:
    """The CPUs the pages run on: the first PAGE_CORES this process may use (all of them on a 2-core machine)."""
    return sorted(os.sched_getaffinity(0))[:PAGE_CORES]


def machine() -> dict:
    cpu = platform.processor()
    try:
        cpu = re.search(r"model name\s*:\s*(.*)", Path("/proc/cpuinfo").read_text()).group(1)
    except (OSError, AttributeError):
        pass
    try:
        mem_gib = int(re.search(r"MemTotal:\s*(\d+)", Path("/proc/meminfo").read_text()).group(1)) / 2**20
    except (OSError, AttributeError):
        mem_gib = None
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"cpu": cpu, "cores": os.cpu_count(), "page_cores": len(page_cores()), "memory_gib": mem_gib,
            "os": f"{platform.system()} {platform.release()}", "python": platform.python_version(),
            "torch": torch.__version__, "torch_threads": torch.get_num_threads(), "gpu": gpu,
            "date": dt.date.today().isoformat(), "started": _now(), "load_at_start": os.getloadavg()[0]}


# ----------------------------------------------------------------------------- the book


def book_builds(clean_repeats: int, rebuild_repeats: int) -> dict:
    """Wall time of a clean build of today's book (every page executed) and of a rebuild with nothing changed."""
    clean, rebuild = [], []
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "book"
        copy_worktree(src)
        cmd = [str(BIN / "jupyter-book"), "build", str(src), "--all", "-W", "-n", "--keep-going"]
        for _ in range(clean_repeats):
            shutil.rmtree(src / "_build", ignore_errors=True)  # the execution cache lives in _build/ too
            t = time.perf_counter()
            r = subprocess.run(cmd, capture_output=True, text=True, env=_env())
            if r.returncode != 0:
                raise RuntimeError(f"the book's clean build failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
            clean.append(time.perf_counter() - t)
            print(f"  clean build: {clean[-1]:.0f} s", flush=True)
        for _ in range(rebuild_repeats):
            t = time.perf_counter()  # nothing changed: the execution cache serves every page
            subprocess.run(cmd, check=True, capture_output=True, env=_env())
            rebuild.append(time.perf_counter() - t)
    return {"clean_build_s": _stats(clean), "no_change_rebuild_s": _stats(rebuild), "pages": len(book_pages())}


# ----------------------------------------------------------------------------- chapters and their models


def run_chapter(path: Path, seed: int, device: str, cpus: list[int] | None = None,
                cache: Path | None = None) -> dict:
    """One page in a fresh kernel: wall seconds, the kernel's CPU seconds and peak RSS, its glued values.

    ``cache``: the pages' cache folder (``XDG_CACHE_HOME``, where a page keeps a model a later page reuses);
    by default the user's, which may hold models from earlier builds."""
    extra = {"XDG_CACHE_HOME": str(cache)} if cache is not None else {}
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "execute_notebook.py"), str(path)],
                         capture_output=True, text=True,
                         env=_env(LMBOOK_SEED=str(seed), LMBOOK_DEVICE=device, **extra),
                         preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
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
        ("BLEU beyond the training lengths, RNN minus Transformer", "bleu_gap"),
        ("Transformer: training seconds to the validation target", "reach_tf"),
        ("RNN + attention: training seconds to the validation target", "reach_rnn"),
        ("training time to the target, Transformer ÷ RNN", "reach_ratio"),
        ("search errors: largest share of a model's greedy errors", "share_max"),
    ],
    "ch08_label_smoothing": [
        ("label smoothing 0.1: mean probability of the right word", "p_smooth"),
        ("label smoothing 0.1: validation loss (nats)", "nll_smooth"),
        ("label smoothing: exact match, distance between with and without", "em_diff"),
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
    ],
    "ch10_pretraining": [
        ("masked LM on Brown: validation loss at masked tokens (nats)", "brown_mlm_nll"),
        ("Brown: token frequencies alone at masked tokens (nats)", "brown_unigram_nll"),
        ("masked LM on Brown: first guess right", "brown_mlm_top1"),
        ("masked LM on Brown: training seconds", "brown_mlm_seconds"),
        ("masked LM on Brown, at step 500: different first guesses at masked tokens", "distinct_plateau"),
        ("masked LM on Brown, at step 2,500: different first guesses at masked tokens", "distinct_end"),
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
    "ch11_in_context": [
        ("tokens written twice, L = 12, V = 32: second-half loss (nats), 1 layer", "second1"),
        ("the same, 2 layers", "second2"),
        ("second-half loss, 1 layer minus 2 layers (nats)", "depth_gap"),
        ("induction score of the best layer-2 head, 2 layers", "best_ind"),
        ("previous-token score of the best layer-1 head, 2 layers", "best_prev"),
        ("course's language, same-subject documents: loss on the subject noun after 1 example (nats)",
         "bursty_k1"),
        ("the same with no example (nats)", "bursty_k0"),
        ("trained on independent sentences: subject-noun loss, no example minus k >= 1 (nats)", "plain_gain"),
    ],
    "ch11_scaling": [
        ("course's language, five GPTs on 300 × 32 × 32 words: fitted exponent α of L(N) = E + A N^-α",
         "fit_alpha"),
        ("the same fit: irreducible term E (nats per word)", "fit_E"),
        ("the true model's test loss, the floor (nats per word)", "floor_nats"),
        ("fitted E minus the floor (nats per word)", "E_minus_floor"),
        ("one training step of chapter 9's GPT: FLOPs torch counts ÷ (6N + attention) per token", "flops_ratio"),
        ("the same count ÷ 6ND alone", "flops_ratio_6nd"),
        ("equal compute (4e10 FLOPs), four widths: tokens per parameter of the best", "best_tokens_per_param"),
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
        ("bf16 autocast training speed ÷ float32, the page's GPT at the device's size", "bf16_speedup"),
        ("causal attention, forward and backward: course ÷ SDPA time", "attn_time_ratio"),
        ("causal attention: course ÷ SDPA memory allocated", "attn_mem_ratio"),
        ("torch.compile: compiled ÷ eager speed", "compile_speedup"),
        ("MFU of chapter 9's GPT against the measured matmul peak", "mfu_small"),
        ("MFU of the page's GPT at the device's size against the measured matmul peak", "mfu_wide"),
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


def book_pages() -> list[Path]:
    """Every executed page of the book: the chapters' pages, then the appendices."""
    return sorted((ROOT / "book").glob("ch*.md")) + sorted((ROOT / "book").glob("appendix*.md"))


def headline_rows(chapter: str) -> list[tuple[str, str, str | None]]:
    """(label, glue key, kind) of each of a chapter's HEADLINES; a row may name its kind as a third item."""
    return [(row[0], row[1], row[2] if len(row) > 2 else headline_kind(row[0], row[1]))
            for row in HEADLINES.get(chapter, [])]


def measure_of(kind: str | None, label: str) -> str:
    """What a headline's number is a measurement of, in the words BENCHMARKS.md's rows use."""
    text = label.lower()
    if "allocated" in text:
        return "bytes allocated"
    if text.endswith(": bytes"):  # a cache's tensors, counted: no model and no clock in it
        return "bytes held (tensor sizes)"
    if text.endswith(": positions"):  # arithmetic on a published model's sizes
        return "arithmetic"
    return {"seconds": "wall time", "speed": "ratio of wall times", "utilisation": "throughput (wall time) ÷ peak",
            "timing": "fitted to wall times"}.get(kind or "", "model quality")


def chapter_entry(stem: str, runs: list[dict], git: dict, strict: bool = True) -> dict:
    """One page's figures on one device, from its runs (one per seed).

    ``strict``: a headline the page did not glue is an error; otherwise (a GPU check, which must keep going) it
    is listed under ``missing``."""
    entry = {"date": dt.date.today().isoformat(), "commit": git["commit"], "clean": git["clean"],
             "seconds": _stats([r["seconds"] for r in runs]), "peak_rss_mib": _stats([r["peak_rss_mib"] for r in runs]),
             "models": {}}
    if all("cpu_seconds" in r for r in runs):
        entry["cpu_seconds"] = _stats([r["cpu_seconds"] for r in runs])
    if all(r.get("gpu_peak_mib") is not None for r in runs):
        entry["gpu_peak_mib"] = _stats([r["gpu_peak_mib"] for r in runs])
    for label, key, kind in headline_rows(stem):
        if not strict and not all(key in r["glue"] for r in runs):
            entry.setdefault("missing", []).append(key)
            continue
        values = [float(r["glue"][key]) for r in runs]
        model = {"label": label, "median": statistics.median(values), "tolerance": seed_tolerance(values),
                 "values": values}
        if kind:  # what the page's "expected result" box may claim of it (lmbook.expected)
            model["kind"] = kind
        entry["models"][key] = model
    floor = entry["models"].get("floor_ppl", {}).get("median")
    if floor:
        for m in entry["models"].values():
            if m["label"].endswith("test perplexity"):
                m["ratio_to_floor"] = m["median"] / floor
    by_window = [r["glue"].get("test_ppl_by_window") for r in runs]
    if all(by_window):
        entry["ffnn_test_ppl_by_window"] = {str(w): statistics.median(float(b[w]) for b in by_window)
                                            for w in by_window[0]}
    return entry


def chapters(seeds: int, devices: list[str], only: list[str] | None = None, git: dict | None = None) -> dict:
    git = git or git_state()
    results = {}
    pages = [p for p in book_pages() if not only or p.stem in only]
    # The pages share one cache folder, empty at the start, as on a reader's first build: a page that trains a
    # model a later page reuses pays for it here (the user's cache could hold it from an earlier build).
    cache = Path(tempfile.mkdtemp(prefix="lmbook-bench-cache-"))
    try:
        for i, path in enumerate(pages, 1):
            for device in devices:
                cpus = page_cores() if device == "cpu" else None
                runs = [run_chapter(path, seed, device, cpus, cache) for seed in range(seeds)]
                results.setdefault(path.stem, {})[device] = entry = chapter_entry(path.stem, runs, git)
                print(f"  [{i}/{len(pages)}] {path.stem} on {device}: {entry['seconds']['median']:.1f} s, "
                      f"{entry['peak_rss_mib']['max']:.0f} MiB", flush=True)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return results


def over_budget(chapters: dict, since: str | None = None) -> list[str]:
    """Each CPU page over the book's budget (PAGE_BUDGET), in words: the page, what it took, and the limit.

    ``since``: only the pages measured at this commit (those a run measured, not older rows it kept)."""
    over = []
    for stem, by_device in chapters.items():
        e = by_device.get("cpu")
        if e is None or (since and e.get("commit") != since):
            continue
        if e["seconds"]["median"] > PAGE_BUDGET["seconds"]:
            over.append(f"{stem}: {e['seconds']['median']:.0f} s (median of {e['seconds']['n']}) on "
                        f"{PAGE_CORES} cores, over the budget of {PAGE_BUDGET['seconds']:.0f} s")
        if e["peak_rss_mib"]["max"] > PAGE_BUDGET["peak_rss_mib"]:
            over.append(f"{stem}: peak memory {e['peak_rss_mib']['max']:.0f} MiB, over the budget of "
                        f"{PAGE_BUDGET['peak_rss_mib']:.0f} MiB")
    return over


# ----------------------------------------------------------------------------- per-token steps and attention memory


def _micro(args: list[str], threads: int | None = None, cpus: list[int] | None = None) -> dict:
    env = _env(**({"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)} if threads else {}))
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "micro.py"), *args], capture_output=True, text=True,
                       env=env, preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    if r.returncode != 0:
        raise RuntimeError(f"bench/micro.py {' '.join(args)} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def kv_cache(lengths: list[int], repeats: int) -> dict:
    """Chapter 9's generation with and without the KV cache, single-threaded, alternately, ``repeats`` times."""
    raw = _micro(["kv", "--lengths", *map(str, lengths), "--repeats", str(repeats), "--threads", "1"], threads=1)
    return {"threads": raw["threads"], "config": raw["config"], "repeats": repeats, "clock": "wall",
            "lengths": {n: {k: _stats(v) for k, v in e.items()} for n, e in raw["lengths"].items()}}


def attention_memory(n: int, repeats: int) -> dict:
    """Course attention ÷ SDPA at length n: bytes allocated, and the rise of a fresh process's peak RSS."""
    runs: dict[str, list[dict]] = {"course": [], "sdpa": []}
    for _ in range(repeats):
        for impl in runs:  # alternately, each in a fresh process, on the pages' cores
            runs[impl].append(_micro(["attention", "--impl", impl, "--n", str(n)], cpus=page_cores()))
    out = {"n": n, "threads": runs["course"][0]["threads"], "shape": [1, 4, n, 32], "dtype": "float32"}
    for impl, rs in runs.items():
        out[impl] = {"allocated_bytes": rs[0]["allocated_bytes"],
                     "peak_rss_increase_bytes": _stats([r["peak_rss_increase_bytes"] for r in rs])}
    out["allocated_ratio"] = out["course"]["allocated_bytes"] / out["sdpa"]["allocated_bytes"]
    out["peak_ratio"] = _stats([a["peak_rss_increase_bytes"] / max(b["peak_rss_increase_bytes"], 1)
                                for a, b in zip(runs["course"], runs["sdpa"], strict=True)])
    return out


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
    # chapter 11's Llama-style decoder against transformers' LlamaForCausalLM, same weights, the same size as the
    # GPT above, grouped-query attention (2 key/value heads for 4 query heads); transformers' default attention
    from transformers import LlamaConfig as HFLlamaConfig
    from transformers import LlamaForCausalLM

    from lmbook.llama import Llama, LlamaConfig, load_hf_llama

    hf_llama = LlamaForCausalLM(HFLlamaConfig(vocab_size=2048, hidden_size=128, intermediate_size=344,
                                              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                              max_position_embeddings=128, rms_norm_eps=1e-6,
                                              tie_word_embeddings=False)).eval()
    our_llama = load_hf_llama(Llama(LlamaConfig(2048, 128, 2, 4, 128, n_kv_head=2, d_ff=344)), hf_llama).eval()

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
        "llama_forward": (torch.no_grad()(lambda: our_llama(gpt_ids)),
                          torch.no_grad()(lambda: hf_llama(gpt_ids).logits),
                          "transformers LlamaForCausalLM (forward)", list(gpt_ids.shape)),
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


# What lmbook-grade does to every submission in the grading comparison: its defaults, none of which can be
# switched off except the sandbox (--no-sandbox), which the benchmark leaves on.
PROTECTIONS = ("each submission in its own bubblewrap sandbox, hidden tests in a forked child, a nonce per reply, "
               "the run-time watch, verdicts computed outside the sandbox")

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


def _run_measured(cmd: list[str], cwd: Path, env: dict, log: Path) -> dict:
    """Run cmd to completion: its wall seconds, the CPU seconds of it and all its descendants, and the peak of
    their summed resident memory (MiB).

    Sampled every 0.1 s (psutil): shared pages count once per process, as `ps` shows them, and a process's CPU
    time is its last sample, so processes that live under 0.1 s and each process's last 0.1 s are missed (the
    CPU figure is a slight underestimate). Needed because the sandboxed runs are killed, never waited for, so
    the kernel's own accounting of children (getrusage) does not see them.
    """
    import psutil

    cpu: dict[tuple[int, float], float] = {}
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
                    with p.oneshot():
                        total += p.memory_info().rss
                        times = p.cpu_times()
                        cpu[p.pid, p.create_time()] = times.user + times.system
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    pass  # ended between listing and reading, or not ours to read
            peak = max(peak, total)
            time.sleep(0.1)
        seconds = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{log.read_text()[-3000:]}")
    return {"seconds": seconds, "cpu_seconds": sum(cpu.values()), "peak_rss_mib": peak / 2**20}


def class_time(students: int, cores: int, cost: dict) -> float:
    """Seconds to grade a class with lmbook-grade, extrapolated from a measured run (``cost``, see grading_cost):
    the fixed part once, the sandboxed runs spread over one worker per core, nbgrader's recording and feedback
    (one process for the class) one student after another."""
    return cost["fixed_s"] + students * cost["parallel_s_per_student"] / cores + students * cost["serial_s_per_student"]


def grading_cost(summary: dict, students: int, workers: int) -> dict:
    """lmbook-grade's time split (from its summary.json) into what a class of any size would take.

    ``run`` (sandboxed runs and verdicts, ``workers`` processes in parallel) costs ``run × workers / students``
    core-seconds a student; ``record`` and ``feedback`` are nbgrader processes that go through the class one
    student at a time; ``generate`` (the assignment) and the reports are paid once. Measured on a small class,
    each worker's start-up and each nbgrader step's start-up are spread over few students: an overestimate.
    """
    ph = summary["phase_seconds"]
    serial = ph.get("record", 0.0) + ph.get("feedback", 0.0)
    fixed = max(summary["seconds"] - ph.get("run", 0.0) - serial, 0.0)
    return {"phases_s": ph, "workers": workers, "fixed_s": fixed,
            "parallel_s_per_student": ph.get("run", 0.0) * min(workers, students) / students,
            "serial_s_per_student": serial / students}


def _lmbook_grade(subs: Path, out: Path, assignment: str, env: dict, log: Path) -> tuple[dict, dict]:
    measured = _run_measured([str(BIN / "lmbook-grade"), str(subs), "--assignment", assignment, "--out", str(out)],
                             ROOT, env, log)
    return measured, json.loads((out / "summary.json").read_text())


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
        ours, summary = _lmbook_grade(subs, tmp / "lmbook", assignment, env, tmp / "lmbook.log")
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
        plain = _run_measured([*nbgrader, "autograde", assignment, "--create"], course, env, tmp / "plain.log")
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
            plain_total = {name: float(gb.find_submission(assignment, name).score) for name in names}

    differ = {name: {"lmbook_grade": ours_total.get(name), "nbgrader_autograde": plain_total[name]}
              for name in names if ours_total.get(name) is None or abs(ours_total[name] - plain_total[name]) > 1e-6}
    ours["per_minute"], plain["per_minute"] = 60 * n / ours["seconds"], 60 * n / plain["seconds"]
    ours["includes"] = "sandboxed runs, assignment generation, autograde and feedback"
    plain["includes"] = "autograde only (assignment generated beforehand, untimed)"
    return {"assignment": assignment, "submissions": n, "workers": workers, "protections": PROTECTIONS,
            "lmbook_grade": ours,
            "nbgrader_autograde": plain, "throughput_ratio": ours["per_minute"] / plain["per_minute"],
            "cpu_ratio": plain["cpu_seconds"] / max(ours["cpu_seconds"], 1e-9),
            "cost": grading_cost(summary, n, workers), "same_total": n - len(differ), "different_total": differ}


def grading_each_exercise(assignments: list[str]) -> dict:
    """`lmbook-grade` on each released exercise's sample submissions (autograder/make_samples.py): wall time, CPU
    time, where the time went, and whether the correct sample got full marks and the blank one none."""
    from make_samples import make_samples

    env = _env(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    results = {}
    for a in assignments:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            names = make_samples(tmp / "subs", a)
            measured, summary = _lmbook_grade(tmp / "subs", tmp / "out", a, env, tmp / "grade.log")
            with (tmp / "out" / "grades.csv").open(newline="") as f:
                rows = {row["student"]: row for row in csv.DictReader(f)}
        graded = summary.get("graded", 0) + summary.get("graded_partly", 0) + summary.get("failed_to_run", 0)
        workers = max(1, min(os.cpu_count() or 1, len(names)))
        results[a] = {"submissions": len(names), "samples": names, **measured,
                      "per_submission_s": measured["seconds"] / len(names),
                      "cost": grading_cost(summary, max(graded, 1), workers),
                      "correct_full_marks": float(rows["correct"]["total"]) == float(rows["correct"]["max"]),
                      "blank_zero": float(rows["blank"]["total"]) == 0}
        print(f"  {a}: {measured['seconds']:.1f} s for {len(names)} samples", flush=True)
    return results


# ----------------------------------------------------------------------------- report


def _fmt(s: dict, unit: str = "s", digits: int = 1) -> str:
    if s["n"] == 1:
        return f"{s['median']:.{digits}f} {unit} (n=1)"
    return f"{s['median']:.{digits}f} {unit} ({s['min']:.{digits}f}–{s['max']:.{digits}f}, n={s['n']})"


def _mib(s: dict) -> str:
    """Byte statistics in MiB."""
    return _fmt({k: v / 2**20 if k != "n" else v for k, v in s.items()}, "MiB")


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def _header(r: dict) -> list[str]:
    m, g = r["machine"], r.get("git", {})
    if not g:  # results from before the run recorded its commit
        code = "not recorded by this run."
    else:
        tree = "clean working tree" if g.get("clean") else (
            f"working tree with uncommitted changes ({', '.join(g.get('changed', [])[:5])}): the figures may not "
            "match the commit")
        code = f"commit `{g.get('commit', 'unknown')[:12]}` ({g.get('subject', '')}), {tree}."
    load = (f"- **Load average** (1 minute): {m['load_at_start']:.1f} at the start, "
            f"{m.get('load_at_end', float('nan')):.1f} at the end; on a quiet machine it stays below the number "
            "of cores, and timings taken above it are slower than the machine can do."
            if "load_at_start" in m else "- **Load average**: not recorded by this run.")
    took = f", took {_minutes(r['seconds'])}" if "seconds" in r else ""
    mem = f", {m['memory_gib']:.0f} GiB memory" if m.get("memory_gib") else ""
    lines = ["# lmbook benchmarks", "",
             f"Measured by one `make bench` run ({r['mode']} mode), started {m.get('started', m['date'])}{took}. "
             "Every figure below comes from this run unless its row says otherwise. Times are medians (min–max, "
             "n runs). Regenerate with `make bench`; the chapters' \"expected result\" boxes read "
             "`bench/results.json`.", "",
             f"- **Code**: {code}",
             f"- **Machine**: {m['cpu']}, {m['cores']} cores{mem}{', ' + m['os'] if m.get('os') else ''}; "
             f"GPU: {m['gpu'] or 'none'}. "
             f"Python {m['python']}, torch {m['torch']}.",
             f"- **Threads**: pages run pinned to {m.get('page_cores', m['cores'])} cores with torch's default "
             f"thread count there; the built-in comparisons with {m.get('torch_threads', '?')} threads; the KV "
             "cache single-threaded; each grader's kernels and sandboxed runs with 1 thread (OMP_NUM_THREADS=1).",
             load]
    for u in r.get("updates", []):
        changes = '' if u.get('clean') else ' (uncommitted changes)'
        if "chapters" in u:
            lines.append(f"- **Re-measured later** by `make bench-chapters` on {u['date']} at commit "
                         f"`{u['commit'][:12]}`{changes}: {', '.join(u['chapters'])} (their rows say so).")
        else:
            load = (f", load average {u['load_at_start']:.1f} at the start and {u['load_at_end']:.1f} at the end"
                    if "load_at_end" in u else "")
            parts = " and ".join({"book": "the book's builds (under The book)",
                                  "grading": "the grading comparison (the Grading section)",
                                  "exercises": "every exercise's grading (the Grading section)"}[p]
                                 for p in u["parts"])
            lines.append(f"- **Re-measured later** by `python bench/run.py --update {' '.join(u['parts'])}` on "
                         f"{u['date']} at commit `{u['commit'][:12]}`{changes}{load}: {parts}.")
    return lines + [""]


def _when(e: dict, r: dict) -> str:
    """A row's own date and commit, where they are not the run's."""
    commit = r.get("git", {}).get("commit")
    if e.get("commit") and e["commit"] != commit:  # a run that recorded no commit is not the row's either
        return f" (measured {e.get('date', '?')}, commit `{e['commit'][:12]}`)"
    if not e.get("commit") and e.get("date", r["machine"]["date"]) != r["machine"]["date"]:
        return f" (measured {e['date']})"
    return ""


def report(r: dict) -> str:
    lines = _header(r)
    if "book" in r:
        b = r["book"]
        lines += ["## The book", "", f"Jupyter Book builds of the whole book ({b.get('pages', '?')} executed pages), "
                  f"from a copy of the working tree, as `make book` runs them{_when(b, r)}.", "",
                  "| build | wall time |", "|---|---|",
                  f"| clean (every page executed) | {_fmt(b['clean_build_s'])} |",
                  f"| no-change rebuild (execution cache) | {_fmt(b['no_change_rebuild_s'])} |", ""]
    if r.get("chapters"):
        lines += ["## Chapter pages", "",
                  f"Each page in a fresh kernel (`bench/execute_notebook.py`), once per seed, on the CPU pinned to "
                  f"{r['machine'].get('page_cores', PAGE_CORES)} cores. Run time is wall time from the first cell to "
                  "the last; CPU time is the kernel's (user + system, all its threads); peak memory is the kernel's "
                  f"peak resident set. The budget of a page is {PAGE_BUDGET['seconds']:.0f} s and "
                  f"{PAGE_BUDGET['peak_rss_mib'] / 1024:.0f} GiB on 2 cores.", "",
                  "| chapter | device | run time (wall) | CPU time (kernel) | peak memory (kernel RSS) | budget |",
                  "|---|---|---|---|---|---|"]
        over = set(line.split(":")[0] for line in over_budget(r["chapters"]))
        for chapter, by_device in r["chapters"].items():
            e = by_device.get("cpu")
            if e is None:
                continue
            cpu_t = _fmt(e["cpu_seconds"]) if "cpu_seconds" in e else "not measured"
            lines.append(f"| {chapter}{_when(e, r)} | cpu | {_fmt(e['seconds'])} | {cpu_t} | "
                         f"{_fmt(e['peak_rss_mib'], 'MiB', 0)} | {'**over**' if chapter in over else 'within'} |")
        lines += ["", "## Trained models", "",
                  "Median over seeds (`LMBOOK_SEED`), ± the band where 99% of other seeds' runs should fall (a "
                  "prediction interval from the seeds' spread, at least 1% of the median). *Measured as* says what "
                  "a number is: a model's quality, or a wall time or ratio of wall times (which belong to this "
                  "machine and its load), bytes allocated, the bytes a cache's tensors hold, or arithmetic on "
                  "published sizes.", "",
                  "| chapter | device | result | measured as | value | ratio to the floor |",
                  "|---|---|---|---|---|---|"]
        for chapter, by_device in r["chapters"].items():
            e = by_device.get("cpu")
            if e is None:
                continue
            for mod in e["models"].values():
                ratio = f"{mod['ratio_to_floor']:.3f}" if "ratio_to_floor" in mod else ""
                lines.append(f"| {chapter} | cpu | {mod['label']} | {measure_of(mod.get('kind'), mod['label'])} | "
                             f"{mod['median']:.3f} ± {mod['tolerance']:.3f} | {ratio} |")
            if "ffnn_test_ppl_by_window" in e:
                w = e["ffnn_test_ppl_by_window"]
                lines.append(f"| {chapter} | cpu | feedforward LM test perplexity by window ({', '.join(w)}) | model "
                             f"quality | {', '.join(f'{v:.2f}' for v in w.values())} | |")
        lines.append("")
    lines += _gpu_section(r)
    if "kv_cache" in r:
        kv = r["kv_cache"]
        c = kv["config"]
        lines += ["## Per-token steps: the KV cache", "",
                  f"Chapter 9's generation (GPT of {c['n_layer']} blocks, d = {c['d_model']}, vocabulary "
                  f"{c['vocab_size']:,}, random weights), greedy from a one-token prompt, with and without the cache, "
                  f"timed alternately {kv['repeats']} times each in one process with **{kv['threads']} thread** "
                  "(`bench/micro.py kv`). Each step is a few small matrix products: with more threads the time is "
                  "mostly threads waiting for each other, and on a busy machine it says more about the other "
                  "processes than about the cache. Wall time.", "",
                  "| tokens | with the cache | without | speed-up (per repeat) |", "|---|---|---|---|"]
        for n, e in kv["lengths"].items():
            lines.append(f"| {int(n):,} | {_fmt(e['cached_s'], 's', 3)} | {_fmt(e['uncached_s'], 's', 3)} | "
                         f"{_fmt(e['speedup'], '×', 2)} |")
        lines.append("")
    if "attention_memory" in r:
        a = r["attention_memory"]
        mib = 2**20
        lines += ["## Memory of causal attention", "",
                  f"One call at n = {a['n']:,} (shape {a['shape']}, {a['dtype']}), chapter 5's attention (the n × n "
                  f"scores) against `F.scaled_dot_product_attention`, on the CPU with {a['threads']} threads "
                  "(`bench/micro.py attention`). **Bytes allocated** is what the GPU appendix reports: every tensor "
                  "the operators create, added up (`lmbook.profiling.allocated_bytes`), whether or not they are "
                  "alive at the same time, and blind to a fused kernel's scratch space. **Peak memory** is how far "
                  "the call raised the peak resident memory of a fresh process: what the machine must have.", "",
                  "| | chapter 5 | SDPA | ratio |", "|---|---|---|---|",
                  f"| bytes allocated | {a['course']['allocated_bytes'] / mib:.1f} MiB | "
                  f"{a['sdpa']['allocated_bytes'] / mib:.2f} MiB | {a['allocated_ratio']:.0f}× |",
                  "| peak memory (rise of a fresh process's peak RSS) | "
                  f"{_mib(a['course']['peak_rss_increase_bytes'])} | "
                  f"{_mib(a['sdpa']['peak_rss_increase_bytes'])} | {_fmt(a['peak_ratio'], '×', 0)} |", ""]
    if "builtins" in r:
        threads = {e.get("threads") for e in r["builtins"].values()}
        lines += ["## From scratch vs torch's built-ins", "",
                  "Same inputs, timed alternately in one run (`torch.utils.benchmark`, median wall time per call, "
                  f"{', '.join(map(str, sorted(t for t in threads if t)))} threads).", "",
                  "| function | built-in | shape | lmbook | torch | ratio |", "|---|---|---|---|---|---|"]
        for name, e in r["builtins"].items():
            lines.append(f"| {name} | `{e['builtin']}` | {e['shape']} | {e['lmbook_ms']:.3f} ms | "
                         f"{e['torch_ms']:.3f} ms | {e['ratio']:.2f}× |")
        lines.append("")
    if "grading" in r:
        lines += _grading_section(r) + [""]
    if r.get("chapters") and "cpu" in next(iter(r["chapters"].values()), {}):
        over = over_budget(r["chapters"])
        lines += ["## Page budgets", "",
                  (f"Every page measured here is within {PAGE_BUDGET['seconds']:.0f} s and "
                   f"{PAGE_BUDGET['peak_rss_mib']:.0f} MiB on {PAGE_CORES} cores." if not over else
                   "**Over the budget** (the run that measured them failed):"), ""]
        lines += [f"- {line}" for line in over] + ([""] if over else [])
    return "\n".join(lines).rstrip() + "\n"


def _grading_section(r: dict) -> list[str]:
    g = r["grading"]
    ours, plain = g["lmbook_grade"], g["nbgrader_autograde"]
    n = g["submissions"]
    lines = ["## Grading", "", f"{n} generated submissions of exercise {int(g.get('assignment', 'ch01')[2:])} "
             "(correct, blank, partly wrong, syntax error, imported answer, in turn; each a distinct notebook), "
             f"graded by both in the same run{_when(g, r)}. `lmbook-grade` ran {g['workers']} workers (its "
             "default, one per core), " + (f"with every protection on: {g['protections']}. " if "protections" in g else
                          "with the protections of the grader of that day (this run did not record which). ") +
             "Plain `nbgrader "
             "autograde` is serial, with nbgrader's default preprocessors (its own course folder and config, not "
             "`autograder/`'s). Both with `OMP_NUM_THREADS=1`. CPU time is that of the grader and every process "
             "under it; peak memory is their summed resident memory; both sampled every 0.1 s.", "",
             "| grader | wall time | CPU time | submissions per minute (wall) | peak memory | what it includes |",
             "|---|---|---|---|---|---|"]
    for name, e in (("`lmbook-grade`", ours), ("plain `nbgrader autograde` (serial)", plain)):
        cpu_t = f"{e['cpu_seconds']:.1f} s" if "cpu_seconds" in e else "not measured"
        lines.append(f"| {name} | {e['seconds']:.1f} s | {cpu_t} | {e['per_minute']:.1f} | {e['peak_rss_mib']:.0f} MiB "
                     f"| {e['includes']} |")
    lines += ["", f"Throughput ratio (lmbook-grade ÷ plain nbgrader, wall time): **{g['throughput_ratio']:.2f}×**"
              + (f"; CPU time, plain ÷ lmbook-grade: {g['cpu_ratio']:.2f}×" if "cpu_ratio" in g else "") +
              ". `lmbook-grade`'s figure includes the sandbox, assignment generation, autograde and feedback; "
              "plain nbgrader's is autograde only.", "",
              f"Same total from both graders: {g['same_total']} of {n} students.", ""]
    for name, t in g["different_total"].items():
        lines.append(f"- {name}: lmbook-grade {t['lmbook_grade']}, plain nbgrader {t['nbgrader_autograde']}")
    if "cost" in g:
        c = g["cost"]
        ph = c["phases_s"]
        lines += ["", "Where `lmbook-grade`'s wall time went (its `summary.json`): "
                  + ", ".join(f"{k} {v:.1f} s" for k, v in ph.items())
                  + f"; the rest ({c['fixed_s'] - ph.get('generate', 0) - ph.get('reference', 0):.1f} s) reading "
                  "the class and writing the reports. *run*: the sandboxed runs and verdicts, in parallel; *record* "
                  "and *feedback*: nbgrader writing the gradebook and the feedback pages, one process for the class; "
                  "*generate*: the assignment, and *reference*: the reference solution graded first, once."]
    if "grading_each_exercise" in r:
        cores_here = r["machine"]["cores"]
        lines += ["", "### Every exercise, and a class of 1,000", "",
                  "`lmbook-grade` on each exercise's sample submissions (`autograder/make_samples.py`: correct, "
                  "blank, syntax error, a wrong or unanswered task, not a notebook), everything included. *Per "
                  "student* is what one more student costs: the sandboxed run's core-seconds (the *run* phase × "
                  "workers ÷ students) plus nbgrader's recording and feedback (one student after another). A class "
                  "of 1,000 of this mix is extrapolated as: fixed part + 1,000 × run cost ÷ cores + 1,000 × "
                  f"recording and feedback, for this machine's {cores_here} cores and for a 32-core machine with "
                  "the same cores and memory for 32 workers. Measured on a handful of samples, each worker's and "
                  "each nbgrader step's start-up is spread over few students, so these are upper bounds.", "",
                  "| exercise | samples | wall time | CPU time | peak memory | per student (run + record/feedback) | "
                  f"1,000 students, {cores_here} cores | 1,000 students, 32 cores | correct: full marks | blank: 0 |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        rows = []
        if "cost" in g:  # the large generated class: its per-student figures are the better estimate
            rows.append((f"{g['assignment']} ({n} generated)", n, ours, g["cost"], None))
        for a, e in r["grading_each_exercise"].items():
            rows.append((f"{a} (samples)", e["submissions"], e, e.get("cost"), e))
        for label, count, e, c, marks in rows:
            cpu_t = f"{e['cpu_seconds']:.1f} s" if "cpu_seconds" in e else ""
            full, zero = ("", "") if marks is None else (
                "yes" if marks["correct_full_marks"] else "**no**", "yes" if marks["blank_zero"] else "**no**")
            per = f"{c['parallel_s_per_student']:.2f} + {c['serial_s_per_student']:.2f} s" if c else ""
            big = (f"{_minutes(class_time(1000, cores_here, c))} | {_minutes(class_time(1000, 32, c))}" if c
                   else " | ")
            lines.append(f"| {label} | {count} | {e['seconds']:.1f} s | {cpu_t} | {e['peak_rss_mib']:.0f} MiB | "
                         f"{per} | {big} | {full} | {zero} |")
    return lines


def _gpu_section(r: dict) -> list[str]:
    """The CUDA rows (`make gpu-check`): every page, measured or "not measured" (and why, where known)."""
    chapters = r.get("chapters", {})
    check = r.get("gpu_check")
    lines = ["## On a GPU", ""]
    if not check:
        lines += ["Not measured: no run of `make gpu-check` (bench/gpu_check.py) on a machine with CUDA has written "
                  "its figures yet.", ""]
    else:
        where = "a dry run on the CPU, not a GPU" if check.get("dry_run") else check.get("gpu", "?")
        lines.append(f"From `make gpu-check` on {where} ({check.get('started', '?')}, commit "
                     f"`{check.get('commit', '?')[:12]}`{'' if check.get('clean') else ', uncommitted changes'}; "
                     f"torch {check.get('torch', '?')}, CUDA {check.get('cuda') or 'none'}), not from the CPU run "
                     f"above. Pages ran {check.get('concurrency', 1)} at a time, one seed each, "
                     f"{check.get('threads_per_page', '?')} CPU threads each.")
        for stage, st in check.get("stages", {}).items():
            lines.append(f"- {stage}: {st.get('summary', 'not run')}")
        lines.append("")
    why = (check or {}).get("stages", {}).get("pages", {}).get("not_measured", {})
    lines += ["| chapter | run time (wall) | peak GPU memory (torch's allocator, reserved) | kernel peak RSS |",
              "|---|---|---|---|"]
    for stem in sorted(set(chapters) | {p.stem for p in book_pages()}):
        e = chapters.get(stem, {}).get("cuda")
        if e is None:
            lines.append(f"| {stem} | not measured{f' ({why[stem]})' if stem in why else ''} | | |")
            continue
        gpu_mem = _fmt(e["gpu_peak_mib"], "MiB", 0) if "gpu_peak_mib" in e else "not measured"
        stamp = ("" if check and e.get("commit") == check.get("commit") else
                 f" (measured {e.get('date', '?')}, commit `{e.get('commit', '?')[:12]}`)")
        lines.append(f"| {stem}{stamp} | {_fmt(e['seconds'])} | {gpu_mem} | {_fmt(e['peak_rss_mib'], 'MiB', 0)} |")
    measured = {stem: by["cuda"] for stem, by in chapters.items() if "cuda" in by}
    dry = bool((check or {}).get("dry_run"))
    if measured:
        lines += ["", "Each headline on the GPU next to the CPU's (the CPU's median ± tolerance over its seeds; the "
                  "GPU's one run). Timings and speed-ups belong to each device; quality figures should agree within "
                  "the CPU's tolerance.", "",
                  f"| chapter | result | measured as | CPU | {'dry run (CPU)' if dry else 'CUDA'} |",
                  "|---|---|---|---|---|"]
        for stem, e in measured.items():
            cpu_models = chapters[stem].get("cpu", {}).get("models", {})
            for key in dict.fromkeys([*cpu_models, *e["models"]]):
                cpu, mod = cpu_models.get(key), e["models"].get(key)
                label = (mod or cpu)["label"]
                cpu_text = f"{cpu['median']:.3f} ± {cpu['tolerance']:.3f}" if cpu else "not measured"
                cuda_text = f"{mod['median']:.3f}" if mod else "not measured"
                lines.append(f"| {stem} | {label} | {measure_of((mod or cpu).get('kind'), label)} | {cpu_text} | "
                             f"{cuda_text} |")
    lines.append("")
    return lines


def keep_gpu_rows(results: dict, published: Path) -> None:
    """A run without a GPU keeps the CUDA rows `make gpu-check` wrote (they carry their own date and commit)."""
    if torch.cuda.is_available() or not published.exists():
        return
    old = json.loads(published.read_text())
    for stem, by_device in old.get("chapters", {}).items():
        if "cuda" in by_device and stem in results.get("chapters", {}):
            results["chapters"][stem]["cuda"] = by_device["cuda"]
    if "gpu_check" in old:
        results["gpu_check"] = old["gpu_check"]


def update_chapters(stems: list[str]) -> dict:
    """Re-measure some pages (added or changed) into the published results, keeping the other rows; the header
    says which rows were measured later, and each such row its date and commit."""
    unknown = [s for s in stems if not (ROOT / "book" / f"{s}.md").exists()]
    if unknown:
        raise SystemExit(f"no such chapter: {', '.join(unknown)} (expected book/<stem>.md)")
    js = ROOT / "bench" / "results.json"
    results = json.loads(js.read_text())
    git = git_state()
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for stem, by_device in chapters(MODES["full"]["seeds"], devices, only=stems, git=git).items():
        results["chapters"].setdefault(stem, {}).update(by_device)
    results["chapters"] = dict(sorted(results["chapters"].items()))
    record_update(results, {"date": dt.date.today().isoformat(), "commit": git["commit"], "clean": git["clean"],
                            "chapters": stems}, "chapters")
    js.write_text(json.dumps(results, indent=2) + "\n")
    (ROOT / "BENCHMARKS.md").write_text(report(results))
    print(f"updated {', '.join(stems)} in {js} and BENCHMARKS.md")
    _fail_if_over_budget(over_budget(results["chapters"], since=git["commit"]))
    return results


def record_update(results: dict, entry: dict, key: str) -> None:
    """Add a re-measurement to the header's list, and take what it measured out of the earlier ones (an entry
    left with nothing is dropped): each line then names only the rows that still come from it."""
    done = set(entry[key])
    kept = []
    for u in results.get("updates", []):
        if key in u:
            u = {**u, key: [x for x in u[key] if x not in done]}
            if not u[key]:
                continue
        kept.append(u)
    results["updates"] = [*kept, entry]


UPDATABLE = ("book", "grading", "exercises")  # parts that can be re-measured alone into the published results


def update_parts(parts: list[str]) -> dict:
    """Re-measure some parts (the book's builds, the grading: their code changed) into the published results,
    keeping the other figures; the header says which parts were measured later, and each section its date and
    commit."""
    js = ROOT / "bench" / "results.json"
    results = json.loads(js.read_text())
    git = git_state()
    cfg = MODES["full"]
    stamp = {"date": dt.date.today().isoformat(), "commit": git["commit"], "clean": git["clean"],
             "load_at_start": os.getloadavg()[0]}
    if "book" in parts:
        print("book builds...", flush=True)
        results["book"] = {**book_builds(cfg["book_clean"], cfg["book_rebuilds"]), **stamp}
    if "grading" in parts:
        print("grading...", flush=True)
        results["grading"] = {**grading(cfg["submissions"], cfg.get("throughput_on", "ch01")), **stamp}
    if "exercises" in parts:
        print("grading each exercise...", flush=True)
        results["grading_each_exercise"] = grading_each_exercise(cfg.get("exercises", list(ASSIGNMENTS)))
    stamp["load_at_end"] = os.getloadavg()[0]
    record_update(results, {**stamp, "parts": parts}, "parts")
    js.write_text(json.dumps(results, indent=2) + "\n")
    (ROOT / "BENCHMARKS.md").write_text(report(results))
    print(f"updated {', '.join(parts)} in {js} and BENCHMARKS.md")
    return results


def _fail_if_over_budget(over: list[str]) -> None:
    if over:
        bar = "!" * 78
        print(f"\n{bar}\nPAGES OVER THE BOOK'S BUDGET ({PAGE_BUDGET['seconds']:.0f} s, "
              f"{PAGE_BUDGET['peak_rss_mib']:.0f} MiB on {PAGE_CORES} cores):", file=sys.stderr)
        for line in over:
            print(f"  {line}", file=sys.stderr)
        print(f"(every figure was written; make the pages cheaper, then measure again)\n{bar}", file=sys.stderr)
        raise SystemExit(1)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_const", dest="mode", const="quick",
                      help="every part once, at small sizes, without the book builds")
    mode.add_argument("--tiny", action="store_const", dest="mode", const="tiny", help="smallest settings")
    ap.add_argument("--out", type=Path, default=None,
                    help="folder for BENCHMARKS.md and results.json (default: repository root and bench/ for a whole "
                         "full run, bench/quick/ otherwise)")
    ap.add_argument("--pages", nargs="+", metavar="STEM", help="measure only these pages (any mode)")
    ap.add_argument("--skip", nargs="+", choices=PARTS, default=[], help="leave these parts out")
    ap.add_argument("--chapters", nargs="+", metavar="STEM",
                    help="re-measure only these pages (e.g. ch02_rnn_lm) with the full mode's seeds; update them in "
                         "bench/results.json and BENCHMARKS.md, keep the rest")
    ap.add_argument("--update", nargs="+", choices=UPDATABLE, metavar="PART",
                    help="re-measure only these parts (book, grading, exercises) with the full mode's sizes; update "
                         "them in bench/results.json and BENCHMARKS.md, keep the rest")
    a = ap.parse_args(argv)
    if a.chapters:
        return update_chapters(a.chapters)
    if a.update:
        return update_parts(a.update)
    a.mode = a.mode or "full"
    cfg = MODES[a.mode]
    whole = a.mode == "full" and not a.pages and not a.skip
    if a.out is None and whole:
        md, js = ROOT / "BENCHMARKS.md", ROOT / "bench" / "results.json"
    else:  # a part of the benchmarks never replaces the published figures
        out = a.out or ROOT / "bench" / "quick"
        out.mkdir(parents=True, exist_ok=True)
        md, js = out / "BENCHMARKS.md", out / "results.json"
    parts = [p for p in PARTS if p not in a.skip and not (p == "book" and not cfg["book_clean"])]
    started = time.perf_counter()
    git = git_state()
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    results = {"mode": a.mode, "machine": machine(), "git": git, "parts": parts}
    if not git["clean"]:
        print(f"note: the working tree has uncommitted changes ({len(git['changed'])} files); BENCHMARKS.md will say "
              "so", flush=True)
    if "book" in parts:
        print("book builds...", flush=True)
        results["book"] = book_builds(cfg["book_clean"], cfg["book_rebuilds"])
    if "chapters" in parts:
        print("chapter pages...", flush=True)
        results["chapters"] = chapters(cfg["seeds"], devices, only=a.pages or cfg.get("pages"), git=git)
    if "kv" in parts:
        print("KV cache, single-threaded...", flush=True)
        results["kv_cache"] = kv_cache(cfg["kv_lengths"], cfg["kv_repeats"])
    if "attention" in parts:
        print("attention memory...", flush=True)
        results["attention_memory"] = attention_memory(cfg["attn_n"], cfg["attn_repeats"])
    if "builtins" in parts:
        print("from scratch vs built-ins...", flush=True)
        results["builtins"] = builtins(cfg["size"], cfg["repeats"])
    if "grading" in parts:
        print("grading...", flush=True)
        results["grading"] = grading(cfg["submissions"], cfg.get("throughput_on", "ch01"))
    if "exercises" in parts:
        print("grading each exercise...", flush=True)
        results["grading_each_exercise"] = grading_each_exercise(cfg.get("exercises", list(ASSIGNMENTS)))
    results["machine"]["load_at_end"] = os.getloadavg()[0]
    results["seconds"] = time.perf_counter() - started
    keep_gpu_rows(results, js)
    text = report(results)
    md.write_text(text)
    js.write_text(json.dumps(results, indent=2) + "\n")
    print(text)
    print(f"\nwrote {md} and {js}")
    if cfg["budget"]:
        _fail_if_over_budget(over_budget(results.get("chapters", {})))
    return results


if __name__ == "__main__":
    main()
