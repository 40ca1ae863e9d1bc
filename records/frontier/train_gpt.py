"""train_gpt.py: the parameter-golf reference trainer, in one file.

Trains a small GPT whose artifact (this file + its compressed weights) must fit in 16,000,000 bytes, scored
in bits per byte after a compression round trip. Settings: env variables (the Hyperparameters fields).

  # CPU smoke run (tiny model, 20 steps, 1 thread), from the repo root on the data `bash quickstart.sh` built:
  OMP_NUM_THREADS=1 DATA_PATH=$(ls -d data/datasets/pystdlib_*_sp512 | tail -n1) VOCAB_SIZE=512 \
    TOKENIZER_PATH=$(ls data/tokenizers/pystdlib_*_sp512.model | tail -n1) WARMUP_STEPS=0 ITERATIONS=20 \
    NUM_LAYERS=2 MODEL_DIM=64 NUM_HEADS=2 NUM_KV_HEADS=1 TRAIN_SEQ_LEN=128 TRAIN_BATCH_TOKENS=8192 \
    VAL_BATCH_SIZE=8192 WARMDOWN_ITERS=5 MAX_WALLCLOCK_SECONDS=0 python3 train_gpt.py
  # one GPU; eight (any count dividing 8: the same global batch); the 2026-04-09 record's stack (README):
  python3 train_gpt.py
  torchrun --standalone --nproc_per_node=8 train_gpt.py
  RECIPE=record torchrun --standalone --nproc_per_node=8 train_gpt.py
"""

from __future__ import annotations

import contextlib, copy, dataclasses, difflib, glob, hashlib, importlib, io, json, lzma, math
import functools
import os, platform, re, shutil, signal, sys, tempfile, time
from pathlib import Path

import numpy as np
import sentencepiece as spm
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

try:  # optional: the fused output-loss kernel; without it the log says why, and PyTorch runs
    import triton
    import triton.language as tl
except ImportError:
    triton = None

# ==== Config ==================================================================
# Each field is read from its name upper-cased and checked before any GPU work, by the rule it declares.
# Its role: "model" fields shape the model (an artifact must match them), "export" ones are in its header.

class ConfigError(ValueError):
    """A setting that cannot work; the message names the variable and the fix."""

def require(ok: bool, message: str, error: type[Exception] = ConfigError) -> None:
    if not ok:
        raise error(message)

def require_file(name: str, path: str, fix: str) -> None:  # a setting that must name a file
    found = "a folder" if Path(path).is_dir() else "no such file"
    require(Path(path).is_file(), f"{name}={path}: {found}. {fix}")

RULES = {"> 0": lambda v: v > 0, ">= 0": lambda v: v >= 0, "in [2, 8]": lambda v: 2 <= v <= 8,
         "in [0, 1)": lambda v: 0 <= v < 1, "in [0, 1]": lambda v: 0 <= v <= 1,
         "in [0, 2^64)": lambda v: 0 <= v < 2**64, "non-empty": lambda v: v.strip() != ""}  # 2^64: seeds

def setting(default, rule: str | tuple = "", role: str = ""):  # rule: a key of RULES, or allowed words
    return dataclasses.field(default=default, metadata=dict(rule=rule, role=role))

@dataclasses.dataclass
class Hyperparameters:
    # paths and run
    recipe: str = ""  # a name in RECIPES: its values first (env wins); "": ours
    data_dir: str = "./data"  # where DATA_PATH and TOKENIZER_PATH default to
    data_path: str = ""  # "": DATA_DIR/datasets/fineweb10B_spVOCAB_SIZE
    tokenizer_path: str = ""  # "": DATA_DIR/tokenizers/fineweb_VOCAB_SIZE_bpe.model
    run_id: str = ""  # "": a fresh timestamped id
    log_dir: str = setting("logs", "non-empty")
    artifact_path: str = "final_model.int8.ptz"
    seed: int = setting(1337, "in [0, 2^64)")
    val_batch_size: int = setting(524_288, "> 0")  # tokens per validation step, all ranks
    val_loss_every: int = setting(1000, ">= 0")  # 0: validate only at the end
    train_log_every: int = setting(200, "> 0")
    # length and schedule
    iterations: int = setting(20_000, ">= 0")
    warmdown_iters: int = setting(3000, ">= 0")
    warmdown_frac: float = setting(0.0, "in [0, 1]")  # > 0: warm down over this fraction of the run
    min_lr: float = setting(0.0, "in [0, 1]")  # floor of the learning-rate multiplier
    warmup_steps: int = setting(20, ">= 0")  # compile warm-up steps, undone before training
    train_batch_tokens: int = setting(393_216, "> 0")
    train_shuffle: bool = False  # 1: the records' shuffled sequences; 0: the shards in order
    train_seq_len: int = setting(4096, "> 0")
    max_wallclock_seconds: float = setting(600.0, ">= 0")  # 0: no cap
    # model
    vocab_size: int = setting(1024, "> 0", "model")
    num_layers: int = setting(9, "> 0", "model")
    model_dim: int = setting(512, "> 0", "model")
    num_heads: int = setting(8, "> 0", "model")
    num_kv_heads: int = setting(4, "> 0", "model")
    mlp_mult: float = setting(2.0, "> 0", "model")  # hidden size int(MLP_MULT * MODEL_DIM)
    mlp_act: str = setting("relu2", ("relu2", "leaky_relu2"), "model")  # leaky: slope 0.5, squared
    tie_embeddings: bool = setting(True, "", "model")  # the head is the embedding
    rope_base: float = setting(10_000.0, "> 0", "model")
    rope_dims: int = setting(0, ">= 0", "model")  # rotary on the first ROPE_DIMS of a head; 0: all
    logit_softcap: float = setting(30.0, "> 0", "model")
    qk_gain_init: float = 1.5
    xsa_last_n: int = setting(0, ">= 0", "model")  # exclusive self-attention in the last N layers
    doc_mask: bool = setting(False, "", "model")  # no attention across a BOS
    # the records' gates (NEW_MODEL_SETTINGS): they read a token's first
    # GATE_WINDOW dims. The smear adds the token before, never across a BOS.
    smear_gate_enabled: bool = setting(False, "", "model")
    gate_window: int = setting(12, "> 0", "model")
    # at most one gate on the heads' outputs (head_gate says which)
    attn_out_gate_enabled: bool = setting(False, "", "model")
    attn_out_gate_src: str = setting("proj", ("proj",))  # x; the records' q: not built
    gated_attn_enabled: bool = setting(False, "", "model")
    gated_attn_init_std: float = setting(0.01, ">= 0")
    sparse_attn_gate_enabled: bool = setting(False, "", "model")
    sparse_attn_gate_init_std: float = setting(0.0, ">= 0")
    sparse_attn_gate_scale: float = setting(1.0, "", "model")
    ln_scale: bool = setting(False, "", "model")  # scale each block's normed inputs by 1/sqrt(layer+1)
    skip_gates_enabled: bool = setting(False, "", "model")  # sigmoid gates on the U-Net skips
    parallel_residual_start: int = setting(-1, "", "model")  # parallel attention and MLP from here
    num_loops: int = setting(0, ">= 0", "model")  # extra passes over layers LOOP_START..LOOP_END
    loop_start: int = setting(0, "", "model")
    loop_end: int = setting(0, "", "model")
    enable_looping_at: float = setting(0.0, "in [0, 1]")  # loops run after this fraction of training
    ortho_init: bool = False  # orthogonal init of the matrices not zero at init
    # optimizers
    matrix_lr: float = setting(0.02, ">= 0")
    scalar_lr: float = setting(0.02, ">= 0")
    tied_embed_lr: float = setting(0.03, ">= 0")
    tied_embed_init_std: float = setting(0.005, ">= 0")
    muon_momentum: float = setting(0.99, "in [0, 1)")
    muon_momentum_warmup_start: float = setting(0.92, "in [0, 1)")
    muon_momentum_warmup_steps: int = setting(1500, ">= 0")
    muon_backend_steps: int = setting(5, "> 0")
    muon_row_normalize: bool = False  # MuonEq-R: rows to unit norm before Newton-Schulz
    polar_express: bool = False  # Newton-Schulz's coefficients a step each
    muon_wd: float = setting(0.0, ">= 0")  # decoupled weight decay: p *= 1 - lr * wd
    adam_wd: float = setting(0.0, ">= 0")  # on the scalars
    embed_wd: float = setting(0.0, ">= 0")  # on the embedding
    beta1: float = setting(0.9, "in [0, 1)")
    beta2: float = setting(0.95, "in [0, 1)")
    adam_eps: float = setting(1e-8, "> 0")
    grad_clip_norm: float = setting(0.0, ">= 0")  # 0: off
    ema_decay: float = setting(0.0, "in [0, 1)")  # > 0: the weights' EMA is exported and scored
    # implementation
    loss_impl: str = setting("auto", ("auto", "triton", "torch"))  # auto: triton on CUDA, else torch
    mlp_impl: str = setting("function", ("function", "modules"))  # MLPFunction: 3% faster compiled
    attn_impl: str = setting("auto", ("auto", "flex", "sdpa"))  # DOC_MASK's
    compile: bool = True  # torch.compile on CUDA; always off on CPU
    # export and scoring
    matrix_bits: int = setting(8, "in [2, 8]", "export")  # bits per weight of the block matrices
    embed_bits: int = setting(8, "in [2, 8]", "export")  # bits per weight of the embedding
    matrix_clip_sigmas: float = setting(0.0, ">= 0", "export")  # > 0: step k * std(row) / qmax
    embed_clip_sigmas: float = setting(0.0, ">= 0", "export")
    # > 0: the clip of the matrices named .mlp. or .attn., not MATRIX's
    mlp_clip_sigmas: float = setting(0.0, ">= 0", "export")
    attn_clip_sigmas: float = setting(0.0, ">= 0", "export")
    gated_attn_quant_gate: bool = setting(False, "", "export")  # int8 rows
    # LQER: + A B, a low-rank fit of the quantization error (lqer_factors)
    lqer_enabled: bool = setting(False, "", "export")
    lqer_rank: int = setting(4, "> 0", "export")
    lqer_top_k: int = setting(3, "> 0", "export")  # the largest errors
    lqer_factor_bits: int = setting(4, "in [2, 8]", "export")
    lqer_asym_enabled: bool = setting(True, "", "export")
    lqer_asym_group: int = setting(64, "> 0", "export")
    gptq_calibration_batches: int = setting(0, ">= 0", "export")  # > 0: GPTQ on this many batches
    gptq_reserve_seconds: float = setting(0.0, ">= 0")  # training ends this long before the cap
    compressor: str = setting("zlib", ("zlib", "lzma", "brotli"), "export")  # a key of COMPRESSORS
    eval_stride: int = setting(0, ">= 0")  # > 0: also score sliding windows
    eval_seq_len: int = setting(0, ">= 0")  # 0: TRAIN_SEQ_LEN
    eval_only: bool = False  # score the artifact at ARTIFACT_PATH; no training
    allow_other_tokenizer: bool = False  # EVAL_ONLY of an artifact made with another tokenizer
    ttt_enabled: bool = False  # score-first test-time training, after the other scores
    ttt_lr: float = setting(0.005, ">= 0")  # SGD's, cosine-decayed over the chunks
    ttt_epochs: int = setting(3, ">= 0")  # steps on each scored chunk
    ttt_momentum: float = setting(0.9, "in [0, 1)")
    ttt_chunk_tokens: int = setting(32_768, "> 0")  # predictions scored between two adaptations
    # TTT_MODE=doc: each document adapted on its own (the records' names)
    ttt_mode: str = setting("stream", ("stream", "doc"))
    ttt_lora_rank: int = setting(96, "> 0", "doc_ttt")
    ttt_lora_alpha: float = setting(144.0, "> 0", "doc_ttt")  # scale alpha/rank
    ttt_lora_lr: float = setting(1e-4, ">= 0", "doc_ttt")  # Adam's
    ttt_chunk_size: int = setting(48, "> 0", "doc_ttt")  # predictions a step
    ttt_batch_size: int = setting(64, "> 0", "doc_ttt")  # documents at once
    ttt_weight_decay: float = setting(1.0, ">= 0", "doc_ttt")
    ttt_beta1: float = setting(0.0, "in [0, 1)", "doc_ttt")
    ttt_beta2: float = setting(0.999, "in [0, 1)", "doc_ttt")
    ttt_k_lora: bool = setting(True, "", "doc_ttt")  # also on the keys
    ttt_o_lora: bool = setting(True, "", "doc_ttt")  # the attention's output
    ttt_mlp_lora: bool = setting(True, "", "doc_ttt")  # the MLP's output
    phased_ttt_prefix_docs: int = setting(0, ">= 0", "doc_ttt")  # 0: no phases
    phased_ttt_num_phases: int = setting(1, "> 0", "doc_ttt")
    global_ttt_lr: float = setting(0.001, ">= 0", "doc_ttt")  # the phases' SGD
    global_ttt_momentum: float = setting(0.9, "in [0, 1)", "doc_ttt")
    global_ttt_epochs: int = setting(1, ">= 0", "doc_ttt")
    global_ttt_chunk_tokens: int = setting(32_768, "> 0", "doc_ttt")

    def settings(self, role: str) -> dict:  # {name: value} of the fields of a role
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.metadata.get("role") == role}

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Hyperparameters:
        """Defaults, then the values of RECIPE, then every variable set explicitly."""
        environ = dict(os.environ if environ is None else environ)
        fields = {f.name.upper(): f for f in dataclasses.fields(cls)}
        check_unknown_env(environ, list(fields))
        recipe = environ.get("RECIPE", "").strip()
        require(recipe in ("", *RECIPES), f"RECIPE={recipe!r} is not one of {', '.join(RECIPES)} (or empty: ours).")
        explicit = {f.name: parse_env_value(k, environ[k], type(f.default)) for k, f in fields.items() if k in environ}
        values = dict(RECIPES.get(recipe, {}), recipe=recipe) | explicit
        looping_at = explicit.get("enable_looping_at", 0)
        require(looping_at == 0 or values.get("num_loops", 0) > 0, f"ENABLE_LOOPING_AT={looping_at} does nothing "
                "with NUM_LOOPS=0: set NUM_LOOPS > 0, or unset it.")
        doc = [f"{k.upper()}={v}" for k, v in explicit.items()
               if fields[k.upper()].metadata.get("role") == "doc_ttt"]
        require(values.get("ttt_mode") == "doc" or not doc,
                f"{', '.join(doc)}: settings of TTT_MODE=doc (each document"
                " adapted on its own): set TTT_MODE=doc, or unset them.")
        return cls(**dict(values, run_id=values.get("run_id") or time.strftime("%Y%m%d_%H%M%S_") + os.urandom(4).hex()))

    def __post_init__(self) -> None:  # DATA_DIR's paths, the checks, the derived values
        self.data_path = self.data_path or f"{self.data_dir}/datasets/fineweb10B_sp{self.vocab_size}"
        self.tokenizer_path = self.tokenizer_path or f"{self.data_dir}/tokenizers/fineweb_{self.vocab_size}_bpe.model"
        self.val_seq_len = self.eval_seq_len or self.train_seq_len  # the scoring window
        for f in dataclasses.fields(self):
            name, value, rule = f.name.upper(), getattr(self, f.name), f.metadata.get("rule")
            must = "one of " + ", ".join(rule) if isinstance(rule, tuple) else rule  # a key of RULES, or words
            require(not rule or RULES.get(rule, lambda v: v in rule)(value), f"{name}={value!r} must be {must}.")
        dim, heads, head_dim = self.model_dim, self.num_heads, self.model_dim // self.num_heads
        require(dim % heads == 0, f"NUM_HEADS={heads} must divide MODEL_DIM={dim}.")
        require(head_dim % 2 == 0, f"MODEL_DIM/NUM_HEADS={head_dim} (the head size) must be even, for rotary.")
        require(self.rope_dims % 2 == 0 and self.rope_dims <= head_dim,
                f"ROPE_DIMS={self.rope_dims} must be even and at most the head size {head_dim} (0: all).")
        require(heads % self.num_kv_heads == 0, f"NUM_KV_HEADS={self.num_kv_heads} must divide NUM_HEADS={heads}.")
        require(int(self.mlp_mult * dim) > 0, f"MLP_MULT={self.mlp_mult} leaves the MLP no units at MODEL_DIM={dim}.")
        require(self.tie_embeddings, "TIE_EMBEDDINGS=0: an untied head is not built here; the records tie it.")
        layers = f"NUM_LAYERS={self.num_layers}"
        require(-1 <= self.parallel_residual_start < self.num_layers,
                f"PARALLEL_RESIDUAL_START={self.parallel_residual_start} must be -1 (off) or a layer below {layers}.")
        require(self.num_loops == 0 or 0 <= self.loop_start <= self.loop_end < self.num_layers, f"LOOP_START="
                f"{self.loop_start} <= LOOP_END={self.loop_end} must be layers below {layers} if NUM_LOOPS > 0.")
        require(self.vocab_size <= 65_536, f"VOCAB_SIZE={self.vocab_size} must be <= 65536: shards store uint16 ids.")
        n, T, seq = GRAD_ACCUM_TOTAL, self.val_seq_len, "EVAL_SEQ_LEN" if self.eval_seq_len else "TRAIN_SEQ_LEN"
        require(self.train_batch_tokens % (n * self.train_seq_len) == 0, f"TRAIN_BATCH_TOKENS={self.train_batch_tokens}"
                f" must be a multiple of {n}*TRAIN_SEQ_LEN={n * self.train_seq_len}: {n} micro-batches of sequences.")
        require(self.val_batch_size >= n * T, f"VAL_BATCH_SIZE={self.val_batch_size} must be >= {n}*{seq}={n * T}.")
        require(self.eval_stride <= T, f"EVAL_STRIDE={self.eval_stride} must be at most {seq}={T}.")
        require(not self.ttt_enabled or self.ttt_chunk_tokens >= T,
                f"TTT_CHUNK_TOKENS={self.ttt_chunk_tokens} must be >= {seq}={T} with TTT_ENABLED={self.ttt_enabled}.")
        doc = self.ttt_mode == "doc"
        require(not doc or self.ttt_enabled,
                "TTT_MODE=doc does nothing with TTT_ENABLED=0: set TTT_ENABLED=1.")
        require(not doc or self.ttt_chunk_size <= self.val_seq_len,
                f"TTT_CHUNK_SIZE={self.ttt_chunk_size} must be at most {seq}={T}:"
                " a chunk and its context are one window.")
        phases = doc and self.phased_ttt_prefix_docs > 0
        require(not phases or self.global_ttt_chunk_tokens >= self.val_seq_len,
                f"GLOBAL_TTT_CHUNK_TOKENS={self.global_ttt_chunk_tokens} must be"
                f" >= {seq}={T}: the phases train on whole sequences.")
        for bits, sigmas in QUANT_GROUPS.values():  # the records: 12.85 for matrices, 20 for embeddings
            require(getattr(self, bits) == 8 or getattr(self, sigmas) > 0,
                    f"{bits.upper()}={getattr(self, bits)} needs {sigmas.upper()} > 0: the quantile clip is int8's.")
        self.check_gates()
        cap, reserve = self.max_wallclock_seconds, self.gptq_reserve_seconds
        require(cap == 0 or reserve < cap, f"GPTQ_RESERVE_SECONDS={reserve} must be below MAX_WALLCLOCK_SECONDS={cap}.")
        self.train_cap_ms = 1000.0 * (cap - reserve) if cap else 0.0  # 0: no cap
        blank = self.run_id != "" and self.run_id.strip() == ""  # "": a fresh id (from_env)
        require(not blank and "/" not in self.run_id, f"RUN_ID={self.run_id!r} must be a file name, not blank.")

    def check_gates(self) -> None:
        """At most one gate on the heads, a window they can read, and a
        gate to quantize where GATED_ATTN_QUANT_GATE=1."""
        gates = dict(ATTN_OUT_GATE_ENABLED=self.attn_out_gate_enabled,
                     GATED_ATTN_ENABLED=self.gated_attn_enabled,
                     SPARSE_ATTN_GATE_ENABLED=self.sparse_attn_gate_enabled)
        on = [name for name, value in gates.items() if value]
        require(len(on) <= 1, f"{' and '.join(on)} are each 1, but "
                "the heads take one output gate: set only one.")
        require(on or not self.gated_attn_quant_gate,
                "GATED_ATTN_QUANT_GATE=1 quantizes the heads' gate, but "
                f"none is on: set one of {', '.join(gates)}, or unset it.")
        windowed = (self.smear_gate_enabled or self.attn_out_gate_enabled
                    or self.sparse_attn_gate_enabled)  # GATED_ATTN: all dims
        require(not windowed or self.gate_window <= self.model_dim,
                f"GATE_WINDOW={self.gate_window} must be at most "
                f"MODEL_DIM={self.model_dim}: the gates read that many dims.")

# A record's values where they differ from ours: "record", the best under 1500 lines (2026-04-09, 1.0810);
# "record_2026_04_05" the one before (1.0856); "p180": ours on the 180-second proxy.
RECIPES: dict[str, dict] = {"record_2026_04_05": dict(vocab_size=8192, num_layers=11, mlp_mult=4.0,
    mlp_act="leaky_relu2", rope_dims=16, qk_gain_init=4.0, xsa_last_n=11, ln_scale=True, skip_gates_enabled=True,
    num_loops=2, loop_start=4, loop_end=5, enable_looping_at=0.5, ortho_init=True, train_shuffle=True,
    train_seq_len=2048, train_batch_tokens=786_432, warmdown_frac=0.667, muon_row_normalize=True, muon_wd=0.085,
    adam_wd=0.02, embed_wd=0.085, grad_clip_norm=0.3, ema_decay=0.997, train_log_every=500, val_loss_every=4000,
    matrix_bits=6, embed_bits=8, matrix_clip_sigmas=12.85, embed_clip_sigmas=20.0, gptq_calibration_batches=64,
    gptq_reserve_seconds=12.0, compressor="brotli", eval_stride=64)}
RECIPES["record"] = dict(RECIPES["record_2026_04_05"], loop_start=3, enable_looping_at=0.35, parallel_residual_start=7,
    qk_gain_init=5.25, matrix_lr=0.022, muon_wd=0.095, ema_decay=0.9965, warmdown_frac=0.72, ttt_enabled=True)
RECIPES["p180"] = dict(RECIPES["record_2026_04_05"], num_layers=9, mlp_mult=3.0, num_loops=0, warmdown_frac=0.6,
    train_batch_tokens=262_144, ema_decay=0.0, val_loss_every=0, train_log_every=50, ttt_enabled=True, ttt_lr=0.01)
# Ours, the frontier's parts on top (records/frontier/README.md: what each is
# worth): "frontier" on the 2026-04-09 record, "frontier_p180" on the proxy.
RECIPES["frontier"] = dict(RECIPES["record"], doc_mask=True)
RECIPES["frontier_p180"] = dict(RECIPES["p180"], doc_mask=True)

def recipe_note(message: str, environ) -> str:  # message, and which values it names RECIPE set
    recipe = environ.get("RECIPE", "").strip()
    named = [f"{k.upper()}={v}" for k, v in RECIPES.get(recipe, {}).items() if k.upper() not in environ]
    named = [setting for setting in named if setting in message]  # values it names are the recipe's
    return message + (f" (RECIPE={recipe} sets {', '.join(named)}: set it to override.)" if named else "")

GRAD_ACCUM_TOTAL = 8  # micro-batches a step, over all ranks: the world size must divide it
QUANT_GROUPS = {"embed": ("embed_bits", "embed_clip_sigmas"), "matrix": ("matrix_bits", "matrix_clip_sigmas")}
# MLP_CLIP_SIGMAS, ATTN_CLIP_SIGMAS (the 2026-04-27 record), where > 0: the matrices named so
CLIP_GROUPS = {".mlp.": ("matrix_bits", "mlp_clip_sigmas"), ".attn.": ("matrix_bits", "attn_clip_sigmas")}
ENV_PREFIXES_NOT_OURS = ("OMP_", "CUDA_", "NCCL_", "TORCH", "PYTORCH_", "TRITON_", "MASTER_", "LOCAL_", "GROUP_",
                         "ROLE_", "NVIDIA_", "PYTHON", "LC_", "XDG_", "MKL_", "KMP_", "GLOO_", "PATH")
# torchrun's RANK is no typo of LQER_RANK or TTT_LORA_RANK (settings the
# root lacks, so its check never met it)
ENV_PREFIXES_NOT_OURS += ("RANK", "WORLD_SIZE")
ENV_RETIRED = ("EMBEDDING_DIM", "EMBED_LR", "HEAD_LR", "LOSS_CHUNK_TOKENS")  # earlier versions' (README)
ENV_OTHER_TRAINERS = dict(NUM_ITERATIONS="ITERATIONS", MAX_STEPS="ITERATIONS", ITERS="ITERATIONS", N_LAYER="NUM_LAYERS")
ENV_OTHER_TRAINERS |= dict(GATE_WIDTH="GATE_WINDOW", SMEAR_GATE_WIDTH="GATE_WINDOW",
                          GATE_ATTN_OUT="ATTN_OUT_GATE_ENABLED", GATE_ATTN_SRC="ATTN_OUT_GATE_SRC")  # 04-16's
BOOL_WORDS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}

def parse_env_value(name: str, raw: str, kind: type):
    """raw as the field's type: a bool from BOOL_WORDS, an int also as 1e5 or 2048.0 (not 2.5), a finite float."""
    if kind is str:
        return raw
    text, expected = raw.strip(), {bool: "0 or 1", int: "an integer", float: "a finite number"}[kind]
    if kind is bool and text.lower() in BOOL_WORDS:
        return BOOL_WORDS[text.lower()]
    if kind is int and text.removeprefix("-").isdecimal():  # as written; 1e5 and 2048.0 below
        return int(text)
    with contextlib.suppress(ValueError):  # what does not parse is refused below
        value = float(text)
        if kind is not bool and math.isfinite(value) and (kind is float or value.is_integer()):
            return value if kind is float else int(value)
    raise ConfigError(f"{name}={raw!r} is not {expected}.")

def check_unknown_env(environ: dict[str, str], known: list[str]) -> None:
    """Refuses a name meant for ours (iterations, ITERS, NUM_LAYER, WARMUP, LR, N_LAYER)."""
    for name, value in environ.items():
        upper = name.upper().replace("LEARNING_RATE", "LR").replace("WEIGHT_DECAY", "WD")  # as ours say them
        if name in known or upper.startswith(ENV_PREFIXES_NOT_OURS):
            continue
        require(upper not in ENV_RETIRED, f"{name}={value!r} is retired (README: retired settings): unset it.")
        starts = [k for k in known if k.startswith(upper + "_")]  # WARMUP: the first words of ours
        ends = [k for k in known if k.endswith("_" + upper)]  # LR: the last ones, if several share them
        near = [ENV_OTHER_TRAINERS[upper]] if upper in ENV_OTHER_TRAINERS else starts or (ends if len(ends) > 1 else [])
        near = near or difflib.get_close_matches(upper, known, n=3, cutoff=0.8)
        require(not near, f"unknown environment variable {name}={value!r}: did you mean {' or '.join(near)}? "
                "Rename it, or unset it if it is not meant for us.")

# ==== Logging, processes and the run ==========================================
# Rank 0 writes LOG_DIR/RUN_ID.txt and prints: one event a line, key:value tokens with units in the names.
IMPORTED = time.perf_counter()  # the wall's start where /proc is absent

@dataclasses.dataclass
class DistContext:
    """This process among the W of the run: its rank, its device."""
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    def __post_init__(self) -> None:  # the derived values, set once
        self.distributed = self.world_size > 1  # W > 1
        self.grad_accum_steps = GRAD_ACCUM_TOTAL // self.world_size  # this rank's micro-batches

    def autocast(self):  # bf16 matmuls on CUDA; on CPU all stays fp32
        return torch.autocast("cuda", dtype=torch.bfloat16) if self.device.type == "cuda" else contextlib.nullcontext()

    def all_reduce(self, tensor: Tensor, op=dist.ReduceOp.SUM) -> Tensor:
        if self.distributed:
            dist.all_reduce(tensor, op=op)
        return tensor

    def clock(self) -> float:  # after the queued GPU work: it brackets each timed region
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

def dist_context() -> DistContext:  # from torchrun's variables (one process without them)
    names = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
    values = (parse_env_value(k, os.environ.get(k, v), int) for k, v in names.items())
    rank, world_size, local_rank, local_size = values
    require(world_size >= 1 and GRAD_ACCUM_TOTAL % world_size == 0,
            f"WORLD_SIZE={world_size} must divide {GRAD_ACCUM_TOTAL}: run with --nproc_per_node of 1, 2, 4 or 8.")
    device = torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    require((n := max(local_size, local_rank + 1)) <= (gpus := torch.cuda.device_count()) or device.type == "cpu",
            f"LOCAL_WORLD_SIZE={n} processes (--nproc_per_node) but {gpus} GPU(s) here, CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}: run at most {gpus} per host.")
    return DistContext(rank, world_size, local_rank, device)

def init_distributed(ctx: DistContext) -> None:  # this rank's GPU; the process group (NCCL or gloo)
    cuda = ctx.device.type == "cuda"
    if cuda:  # TF32 where autocast leaves fp32; inductor's mixed-order reductions spill
        torch.cuda.set_device(ctx.device)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch._inductor.config.triton.mix_order_reduction = os.environ.get("TORCHINDUCTOR_MIX_ORDER_REDUCTION") == "1"
    if ctx.distributed:
        dist.init_process_group(backend="nccl" if cuda else "gloo", device_id=ctx.device if cuda else None)

class Logger:
    """Rank 0's log: the file its first line creates, and the console."""
    def __init__(self, path: Path | None, clock=time.perf_counter):
        self.path, self.file, self.progress = path, None, {}  # progress: where the run is
        self.clock, self.marks, self.since = clock, [(IMPORTED, 0.0)], "import"
        with contextlib.suppress(OSError, AttributeError):  # not Linux
            stat = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
            ticks = int(stat[19])  # field 22: the process's launch, in clock ticks since boot
            age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
            self.marks, self.since = [(time.perf_counter() - age, 0.0)], "process_start"

    def text(self, message: str, console: bool = True) -> None:
        if self.path is None:
            return
        if self.file is None:  # "x": never overwrite a log; unbuffered: each line on disk
            self.file = open(self.path, "xb", buffering=0)
        try:  # the file first: an interrupt between the two leaves it complete
            self.file.write(f"{message}\n".encode())
        except OSError as exc:  # a full disk does not end a run: said once, then console only
            self.file = open(os.devnull, "wb")
            print(f"log_write_failed: {self.path} ({exc.strerror}); the run goes on, console only", file=sys.stderr)
        if console:
            print(message, flush=True)

    def log(self, **fields) -> None:
        texts = {k: f"{v:.{4 if abs(v) < 1e6 else 0}f}" if isinstance(v, float) else v for k, v in fields.items()}
        self.text(" ".join(f"{k}:{v}" for k, v in texts.items()))

    def phase(self, name: str) -> float:  # logs the phase ending now (compiling: its part); its seconds
        dynamo = sys.modules.get("torch._dynamo.utils")  # imported by torch.compile
        compiled = dynamo.calculate_time_spent().get("total_wall_time", 0.0) if dynamo else 0.0
        self.marks.append((self.clock(), compiled))
        seconds, compiling = (end - start for start, end in zip(*self.marks[-2:]))
        self.log(phase=name, phase_time=f"{seconds:.2f}s", compile_time=f"{compiling:.2f}s")
        return seconds

@dataclasses.dataclass
class Run:
    """What every phase needs, made by the pre-flight."""
    args: Hyperparameters
    ctx: DistContext
    log: Logger
    val: ValData
    train_files: list[Path]  # none with EVAL_ONLY
    loss_impl: tuple[str, str]  # torch | triton, and why
    attn_impl: tuple[str, str]  # dense | sdpa | flex (DOC_MASK's), and why
    tokenizer_verified: str  # round_trip_S/N: S of N sampled documents
    artifact: tuple[dict, dict] | None  # EVAL_ONLY's header and weights

# ==== Data ====================================================================
# A shard: a 256 x int32 header (magic, version, token count), then uint16 tokens, a BOS before each
# document. A step reads the next TRAIN_BATCH_TOKENS, each rank its part: the same batch for any W.

SHARD_MAGIC = 20240520
SHARD_VERSION = 1
SHARD_HEADER_INTS = 256
SHARD_HEADER_BYTES = SHARD_HEADER_INTS * 4
SHARD_TOKEN_DTYPE = np.dtype("<u2")
SHARD_FIX = "delete it, then download or rebuild it (data/README.md)"

class ShardError(ValueError):
    """A shard file not in this format; the message names it."""

def read_shard_header(path: str | Path) -> int:
    """A shard's token count, once its header and size agree."""
    size = Path(path).stat().st_size
    require(size >= SHARD_HEADER_BYTES, f"{path}: {size} bytes is shorter than the {SHARD_HEADER_BYTES}-byte "
            f"shard header. The file is truncated: {SHARD_FIX}.", ShardError)
    magic, version, num_tokens = np.fromfile(path, dtype="<i4", count=3).tolist()
    require((magic, version) == (SHARD_MAGIC, SHARD_VERSION), f"{path}: header magic/version {magic}/{version}, "
            f"expected {SHARD_MAGIC}/{SHARD_VERSION}. Not a shard of this format: {SHARD_FIX}.", ShardError)
    expected = SHARD_HEADER_BYTES + num_tokens * SHARD_TOKEN_DTYPE.itemsize
    require(num_tokens >= 0 and size == expected, f"{path}: header says {num_tokens} tokens ({expected} bytes), "
            f"the file has {size}. The file is truncated or corrupt: {SHARD_FIX}.", ShardError)
    return num_tokens

def read_shard(path: str | Path, vocab_size: int = 0) -> np.ndarray:
    """A checked shard's tokens, mapped; with vocab_size, every id below it (0.25 s a 100M tokens)."""
    tokens = np.memmap(path, SHARD_TOKEN_DTYPE, "r", SHARD_HEADER_BYTES, (read_shard_header(path),))
    top = int(tokens.max()) if vocab_size and len(tokens) else 0
    require(not vocab_size or top < vocab_size, f"{path}: token id {top} >= VOCAB_SIZE={vocab_size}: made with another"
            " tokenizer. Set TOKENIZER_PATH and VOCAB_SIZE to it, or rebuild (data/build_shards.py).", ShardError)
    return tokens

def load_data_shard(path: str | Path, vocab_size: int = 0) -> Tensor:
    return torch.from_numpy(np.array(read_shard(path, vocab_size), np.uint16))

def find_shards(data_path: str, split: str) -> list[Path]:
    pattern = os.path.join(data_path, f"fineweb_{split}_*.bin")
    files = sorted(Path(p) for p in glob.glob(pattern) if "fineweb_val_bytes_" not in p)  # not the sidecars
    require(len(files) > 0, f"no {'training' if split == 'train' else 'validation'} shards match DATA_PATH: {pattern} "
            f"(here: {Path(data_path).resolve()}). Set DATA_PATH to their folder; which shards fit which VOCAB_SIZE, "
            "and how to get them: data/README.md, section 'Which shards for which vocabulary'.", FileNotFoundError)
    return files

class DistributedTokenLoader:
    """The shards in order, wrapping around; a call takes a micro-batch per rank, keeps this rank's."""
    def __init__(self, files: list[Path], ctx: DistContext):
        self.shards = [read_shard(f) for f in files]
        self.ctx, self.shard, self.pos = ctx, 0, 0

    def next_batch(self, micro_batch_tokens: int, seq_len: int) -> tuple[Tensor, Tensor]:
        span, parts, left = micro_batch_tokens + 1, [], (micro_batch_tokens + 1) * self.ctx.world_size
        while left > 0:  # the next tokens in shard order
            parts.append(self.shards[self.shard][self.pos : self.pos + left])
            self.pos, left = self.pos + len(parts[-1]), left - len(parts[-1])
            if self.pos == len(self.shards[self.shard]):
                self.shard, self.pos = (self.shard + 1) % len(self.shards), 0
        local = np.concatenate(parts)[self.ctx.rank * span : (self.ctx.rank + 1) * span]
        return self.to_device(np.lib.stride_tricks.sliding_window_view(local, seq_len + 1)[::seq_len])

    def to_device(self, rows: np.ndarray) -> tuple[Tensor, Tensor]:  # (n, seq_len + 1) -> inputs, targets
        rows = torch.from_numpy(rows.astype(np.int64)).to(self.ctx.device, non_blocking=True)
        return rows[:, :-1], rows[:, 1:]

class ShuffledSequenceLoader(DistributedTokenLoader):
    """TRAIN_SHUFFLE=1: sequences at a random phase per shard, in an order of SEED alone."""
    def __init__(self, files: list[Path], ctx: DistContext, seed: int):
        super().__init__(files, ctx)
        self.rng, self.order = np.random.default_rng(seed), np.empty((0, 2), np.int64)  # (shard, start)

    def next_batch(self, micro_batch_tokens: int, seq_len: int) -> tuple[Tensor, Tensor]:
        n = micro_batch_tokens // seq_len
        step = n * GRAD_ACCUM_TOTAL  # a new epoch only between steps: W does not change the order
        if self.pos % step == 0 and self.pos + step > len(self.order):  # each shard cut at a random phase
            starts = [np.arange(int(self.rng.integers(seq_len)), len(s) - seq_len, seq_len) for s in self.shards]
            order = np.concatenate([np.stack([np.full_like(a, i), a], 1) for i, a in enumerate(starts)])
            self.order, self.pos = order[self.rng.permutation(len(order))], 0
            require(len(self.order) >= step, f"the training shards hold {len(self.order)} sequences of TRAIN_SEQ_LEN="
                    f"{seq_len}, fewer than one step ({step}): add data or set TRAIN_SHUFFLE=0.", ShardError)
        rows = self.order[self.pos + self.ctx.rank * n : self.pos + (self.ctx.rank + 1) * n]
        self.pos += n * self.ctx.world_size
        return self.to_device(np.stack([self.shards[i][start : start + seq_len + 1] for i, start in rows]))

def make_train_loader(args: Hyperparameters, files: list[Path], ctx: DistContext) -> DistributedTokenLoader:
    return ShuffledSequenceLoader(files, ctx, args.seed) if args.train_shuffle else DistributedTokenLoader(files, ctx)

# ==== Output loss =============================================================
# logits = x @ W^T, z = c*tanh(logits/c), cross entropy, in chunks of rows (no batch-sized logits). The forward
# pass also makes dL/dlogits = (softmax(z) - onehot(y)) * (1 - tanh^2) / N and dL/dW; backward only scales them.

LOSS_CHUNK_ELEMENTS = 2**27  # logits per chunk: 256 MiB in bf16 (16384 tokens at V=8192)

def softcap_ce_chunk_torch(logits, targets, loss_rows, softcap: float, grad_scale: float, need_grad: bool) -> None:
    """The reference of softcap_ce_chunk_triton (its contract below), for any float dtype."""
    t = torch.tanh(logits.float() / softcap)
    z = softcap * t
    lse = torch.logsumexp(z, dim=-1)
    loss_rows.copy_(lse - z.gather(1, targets[:, None]).squeeze(1))
    if need_grad:
        grad = torch.exp(z - lse[:, None])
        grad.scatter_add_(1, targets[:, None], torch.full_like(grad[:, :1], -1.0))
        logits.copy_(grad * ((1.0 - t * t) * grad_scale))

# ---- Triton kernel: one read of each bf16 row, not ~10 passes; |z| <= c, so c is the softmax shift.
MAX_BLOCK_V = 8192
FIXED_SHIFT_MAX_EXP2 = 120.0  # 2c log2 e at most: flush-to-zero starts below 2^-126

def triton_unavailable_reason(vocab_size: int = 0, softcap: float = 0.0) -> str | None:
    """None if the Triton loss can run here (CUDA, or TRITON_INTERPRET=1) on these shapes; else why."""
    if triton is None:
        return "triton is not installed"
    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        return "no CUDA device (TRITON_INTERPRET=1 runs the kernel on CPU, slowly)"
    if vocab_size > MAX_BLOCK_V:
        return f"VOCAB_SIZE={vocab_size} is over {MAX_BLOCK_V}: the kernel holds a whole row in one block"
    if 2.0 * softcap * math.log2(math.e) > FIXED_SHIFT_MAX_EXP2:
        return f"LOGIT_SOFTCAP={softcap} is over 41.6: the kernel shifts the softmax by the cap"
    return None

if triton is not None:
    LOG2E = tl.constexpr(1.4426950408889634)  # exp(a) = exp2(a log2 e): exp2 is the hardware's

    @triton.jit
    def _softcap_tanh(logits, neg_2log2e_over_c):
        """(tanh(u), 1 - tanh(u)^2), u = logits / c: with e = exp(-2u) (at most 2^126), s = 1/(1+e): 2s-1, 4es^2."""
        e = tl.exp2(tl.minimum(logits.to(tl.float32) * neg_2log2e_over_c, 126.0, tl.PropagateNan.ALL))  # NaN: NaN
        s = 1.0 / (1.0 + e)
        return 2.0 * s - 1.0, (4.0 * s) * (e * s)

    @triton.jit
    def _softcap_ce_kernel(logits_ptr, targets_ptr, loss_ptr, softcap, grad_scale, V: tl.constexpr,
                           BLOCK_V: tl.constexpr, NEED_GRAD: tl.constexpr):
        """One program per row r of a chunk; logits (n, V) contiguous, V <= BLOCK_V, y = targets[r]:
            z = c tanh(logits / c),   loss[r] = logsumexp(z) - z[y],
            logits[r] <- (softmax(z) - onehot(y)) * (1 - tanh^2) * grad_scale   (if NEED_GRAD).
        fp32, in base 2: zl = z log2(e), p = exp2(zl - c2) in [2^-2c2, 1] with c2 = c log2(e)."""
        row = tl.program_id(0).to(tl.int64)
        ptr = logits_ptr + row * V
        y = tl.load(targets_ptr + row).to(tl.int32)
        c2 = softcap * LOG2E
        t_y, dt_y = _softcap_tanh(tl.load(ptr + y), -2.0 / softcap * LOG2E)  # before the row is overwritten
        cols = tl.arange(0, BLOCK_V)
        mask = cols < V
        t, dt = _softcap_tanh(tl.load(ptr + cols, mask=mask, other=0.0), -2.0 / softcap * LOG2E)
        p = tl.where(mask, tl.exp2((t - 1.0) * c2), 0.0)
        s = tl.sum(p, 0)
        if NEED_GRAD:
            g = (p * dt) * (grad_scale / s) - tl.where(cols == y, dt_y * grad_scale, 0.0)
            tl.store(ptr + cols, g.to(logits_ptr.dtype.element_ty), mask=mask)
        tl.store(loss_ptr + row, (tl.log2(s) + (1.0 - t_y) * c2) / LOG2E)

def softcap_ce_chunk_triton(logits, targets, loss_rows, softcap: float, grad_scale: float, need_grad: bool) -> None:
    """In place: loss_rows (n,) fp32 <- each row's loss; logits (n, V) <- dL/dlogits * grad_scale."""
    n, V = logits.shape
    if not (logits.is_contiguous() and targets.is_contiguous() and loss_rows.is_contiguous() and targets.shape ==
            loss_rows.shape == (n,) and targets.dtype == torch.int64 and loss_rows.dtype == torch.float32):
        raise ValueError("softcap_ce_chunk_triton: contiguous logits (n, V), int64 targets (n,), fp32 loss_rows (n,)")
    if reason := triton_unavailable_reason(V, softcap):
        raise ValueError(f"softcap_ce_chunk_triton: {reason}")
    block_v = triton.next_power_of_2(V)
    _softcap_ce_kernel[(n,)](logits, targets, loss_rows, float(softcap), float(grad_scale), V=V, BLOCK_V=block_v,
                             NEED_GRAD=need_grad, num_warps=min(max(block_v // 512, 1), 16))  # 16 columns each

CHUNK_IMPLS = {"torch": softcap_ce_chunk_torch, "triton": softcap_ce_chunk_triton}  # in one op, opaque to compile

# The record script's ops have a namespace of their own, so that a process
# that imports both files (the tests) calls each file's own.
@torch.library.custom_op("frontier::softcap_ce", mutates_args=())
def softcap_ce_op(x: Tensor, weight: Tensor, targets: Tensor, softcap: float, chunk_tokens: int,
                  need_grad: bool, impl: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(mean loss, per-token losses (N,), dL/dx (N, d), dL/dW (V, d)); gradients empty if not need_grad."""
    n, V = x.size(0), weight.size(0)
    w = weight.to(x.dtype)  # (V, d): the matmul's cast, once for every chunk
    logits = x.new_empty(min(chunk_tokens, n), V)  # one buffer for all chunks, then dL/dlogits
    loss_rows = x.new_empty(n, dtype=torch.float32)
    grad_x = x.new_empty(x.shape if need_grad else (0,))  # the shapes register_fake gives
    grad_w = x.new_zeros(weight.shape if need_grad else (0,), dtype=torch.float32)
    fp32_out = x.is_cuda and x.dtype != torch.float32 and hasattr(torch.ops.aten.addmm, "dtype")  # torch>=2.8
    for start in range(0, n, chunk_tokens):
        end = min(start + chunk_tokens, n)
        xc, buf = x[start:end], logits[: end - start]
        torch.mm(xc, w.t(), out=buf)  # (n_c, V)
        CHUNK_IMPLS[impl](buf, targets[start:end], loss_rows[start:end], softcap, 1.0 / n, need_grad)
        if need_grad:
            torch.mm(buf, w, out=grad_x[start:end])  # (n_c, d)
            if fp32_out:
                torch.addmm(grad_w, buf.t(), xc, out_dtype=torch.float32, out=grad_w)  # no bf16 temporary
            else:
                grad_w += (buf.t() @ xc).float()
    return loss_rows.sum() / n, loss_rows, grad_x, grad_w.to(weight.dtype)

@softcap_ce_op.register_fake
def _(x, weight, targets, softcap, chunk_tokens, need_grad, impl):
    return (x.new_empty((), dtype=torch.float32), x.new_empty(x.size(0), dtype=torch.float32),
            x.new_empty(x.shape if need_grad else (0,)), weight.new_empty(weight.shape if need_grad else (0,)))

def _softcap_ce_setup_context(ctx, inputs, output):
    ctx.save_for_backward(output[2], output[3])
    ctx.set_materialize_grads(False)  # else autograd makes zeros for the unused outputs

def _softcap_ce_backward(ctx, grad_loss, _grad_rows, _grad_grad_x, _grad_grad_w):  # None: the mean unused
    grads = [None if grad_loss is None else g * grad_loss.to(g.dtype) for g in ctx.saved_tensors]  # dL/dx, dL/dW
    return *grads, None, None, None, None, None  # targets and the four settings

softcap_ce_op.register_autograd(_softcap_ce_backward, setup_context=_softcap_ce_setup_context)

def resolve_loss_impl(args: Hyperparameters, device: torch.device) -> tuple[str, str]:
    requested, reason = args.loss_impl, triton_unavailable_reason(args.vocab_size, args.logit_softcap)
    require(requested != "triton" or reason is None, f"LOSS_IMPL=triton cannot run here: {reason}: use torch or auto.")
    if requested != "auto":
        return requested, "forced_by_LOSS_IMPL"
    if device.type != "cuda":
        return "torch", "auto_no_cuda"
    return ("triton", "auto_cuda") if reason is None else ("torch", "auto_triton_unavailable: " + reason)

def softcap_ce_loss(x, weight, targets, softcap: float, chunk_tokens: int, impl: str, per_token=False) -> Tensor:
    """Mean softcapped cross entropy of x (N, d) @ weight (V, d)^T and targets (N,); per_token: each one's."""
    need_grad = torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad) and not per_token
    mean, rows, _, _ = softcap_ce_op(x, weight, targets, float(softcap), int(chunk_tokens), need_grad, impl)
    return rows.detach() if per_token else mean  # a backward through them fails, not silently zero

# ==== Document-masked attention ===============================================
# DOC_MASK=1: a query sees only the keys of its own document. A BOS starts a
# document, and so does each row. A token's document is the count of BOS tokens
# up to it in its row, made from the input ids inside the forward pass: training
# and every scoring path mask alike, with no host sync and no bound on how many
# documents a row holds. On CUDA, FlexAttention (compiled Triton) skips the
# 128 x 128 tiles that cross documents, by a block mask made of each tile's first
# and last document. Elsewhere, and as its reference: SDPA with a (B, 1, T, T) mask.
# FlexAttention sees the B rows as one sequence of B*T tokens, each row's
# documents numbered apart: its kernels find a batch's tiles by the block mask's
# head stride, which a compiled graph may lay out otherwise for a head dim of 1
# (gradients 1e19 times too large on torch 2.11, MEASUREMENTS.md); with one
# batch and one head no stride is read.

BOS_ID = 1  # the shards' document start (data/README.md)
FLEX_BLOCK = 128  # FlexAttention's tile; sequences must be whole tiles

def doc_numbers(ids: Tensor) -> Tensor:  # (B, T): each token's document
    return (ids == BOS_ID).cumsum(1)

def doc_causal_mask(ids: Tensor) -> Tensor:
    """ids (B, T) -> (B, 1, T, T): j is visible to i if j <= i, one document."""
    doc = doc_numbers(ids)
    pos = torch.arange(ids.size(1), device=ids.device)
    same = doc[:, :, None] == doc[:, None, :]
    return (same & (pos[:, None] >= pos))[:, None]

@torch.library.custom_op("frontier::doc_ids", mutates_args=())
def doc_ids(ids: Tensor) -> Tensor:
    """ids (B, T) -> (B*T,) int32: each token's document, the rows' numbered
    apart. An op of its own: FlexAttention's mask reads it, and a compiled
    scoring graph on torch 2.11 lowered no mask of a fused one."""
    rows = (ids.size(1) + 1) * torch.arange(ids.size(0), device=ids.device)
    return (doc_numbers(ids) + rows[:, None]).flatten().int()

doc_ids.register_fake(lambda ids: ids.new_empty(ids.numel(), dtype=torch.int32))

def kv_tiles(tiles: Tensor) -> tuple[Tensor, Tensor]:
    """(n, n) bool -> a BlockMask's counts (1, 1, n) and tile indices
    (1, 1, n, n), the set tiles first."""
    as_int = tiles.to(torch.int8)
    order = torch.argsort(as_int, dim=-1, descending=True, stable=True)
    counts = tiles.sum(-1, dtype=torch.int32)
    return counts[None, None], order.to(torch.int32)[None, None]

def doc_block_mask(ids: Tensor):
    """ids (B, T) -> FlexAttention's BlockMask of the B*T tokens as one row.
    A pair of tiles is skipped if no query of one sees a key of the other,
    and full (no mask evaluated) if one document holds both and the keys'
    tile comes first."""
    from torch.nn.attention.flex_attention import BlockMask
    B, T = ids.shape
    doc = doc_ids(ids)  # (B*T,)
    starts = torch.arange(0, B * T, FLEX_BLOCK, device=ids.device)
    first = doc[starts]  # (n,): each tile's first document
    last = doc[starts + FLEX_BLOCK - 1]  # and its last
    n = len(starts)
    below = torch.ones(n, n, dtype=torch.bool, device=ids.device).tril()
    # (n, n) [i, j]: query tile i sees key tile j (j <= i)
    seen = below & (last[None, :] >= first[:, None])
    # one document from the start of key tile j to the end of query tile i
    full = below.tril(-1) & (first[None, :] == last[:, None])

    def visible(b, h, q, k):  # inside tiles neither skipped nor full
        return (doc[q] == doc[k]) & (q >= k)
    partial = kv_tiles(seen & ~full)
    return BlockMask.from_kv_blocks(
        *partial, *kv_tiles(full), BLOCK_SIZE=FLEX_BLOCK,
        mask_mod=visible, seq_lengths=(B * T, B * T))

def sdpa_attention(q: Tensor, k: Tensor, v: Tensor, mask=None) -> Tensor:
    """q (B, H, T, hd), k, v (B, Hkv, T, hd) -> (B, H, T, hd). mask: a
    (B, 1, T, T) bool, or None: causal."""
    gqa = k.size(1) != q.size(1)
    return F.scaled_dot_product_attention(
        q, k, v, mask, is_causal=mask is None, enable_gqa=gqa)

@functools.cache
def compiled_flex():  # compiled, once; eager, it would build every score
    from torch.nn.attention.flex_attention import flex_attention
    return torch.compile(flex_attention, dynamic=False)

def flex_doc_attention(q: Tensor, k: Tensor, v: Tensor, block_mask, flex):
    """q (1, H, B*T, hd), k, v (1, Hkv, B*T, hd): the B rows as one."""
    gqa = k.size(1) != q.size(1)
    return flex(q, k, v, block_mask=block_mask, enable_gqa=gqa)

# ATTN_IMPL -> (attention, what it needs of the input ids): the second is
# made once a forward pass and shared by the layers.
ATTENTION = {"dense": (sdpa_attention, lambda ids: None),
             "sdpa": (sdpa_attention, doc_causal_mask),
             "flex": (flex_doc_attention, doc_block_mask)}

def resolve_attn_impl(args: Hyperparameters, device) -> tuple[str, str]:
    """DOC_MASK=1's attention, (impl, why): FlexAttention on CUDA (on a CPU
    it has no backward) if sequences are whole tiles, else SDPA with a mask."""
    if not args.doc_mask:
        return "dense", "doc_mask_off"
    lengths = dict(TRAIN_SEQ_LEN=args.train_seq_len,
                   EVAL_SEQ_LEN=args.val_seq_len)
    odd = [f"{k}={v}" for k, v in lengths.items() if v % FLEX_BLOCK]
    odd = [f"{odd[0]}_not_a_multiple_of_{FLEX_BLOCK}"] if odd else []
    why = "no_cuda" if device.type != "cuda" else (odd or [None])[0]
    require(args.attn_impl != "flex" or why is None,
            f"ATTN_IMPL=flex cannot run here ({why}): FlexAttention needs "
            f"CUDA and sequences of whole {FLEX_BLOCK}-token tiles. Set "
            "ATTN_IMPL=sdpa or auto.")
    if args.attn_impl != "auto":
        return args.attn_impl, "forced_by_ATTN_IMPL"
    return ("flex", "auto_cuda") if why is None else ("sdpa", "auto_" + why)

# ==== Model ===================================================================
# A GPT with U-Net skips: the second half of the blocks adds the first half's outputs back, weighted. Each
# block mixes its input with x0. Attention: normed q, k, rotary, a gain on q, grouped-query heads.

def rms_norm(x: Tensor) -> Tensor:
    return F.rms_norm(x, (x.size(-1),))

class CastedLinear(nn.Linear):
    """A bias-free linear layer whose fp32 weight is cast to the input's dtype."""
    def __init__(self, in_features: int, out_features: int, zero_init: bool = False):
        super().__init__(in_features, out_features, bias=False)
        self.zero_init = zero_init
        if zero_init:
            nn.init.zeros_(self.weight)

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight.to(x.dtype))

def rotary_cos_sin(seq_len: int, rope_dims: int, base: float, device) -> tuple[Tensor, Tensor]:
    inv_freq = 1.0 / base ** (torch.arange(0, rope_dims, 2, device=device, dtype=torch.float32) / rope_dims)
    freqs = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv_freq)
    return freqs.cos()[None, None], freqs.sin()[None, None]  # (1, 1, T, rope_dims/2)

def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotates the first 2*cos.size(-1) dims of x (pairs i, i+half); the rest pass through."""
    half = cos.size(-1)
    x1, x2 = x[..., :half], x[..., half : 2 * half]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat((x1 * cos + x2 * sin, x2 * cos - x1 * sin, x[..., 2 * half :]), dim=-1)

def exclusive_self_attention(y: Tensor, v: Tensor) -> Tensor:
    """XSA: each head's output y (B, H, T, hd) less its part along its token's value v."""
    y = y.unflatten(1, (v.size(1), -1))  # (B, Hkv, H/Hkv, T, hd): the query heads of each kv head
    vn = F.normalize(v, dim=-1).unsqueeze(2)  # (B, Hkv, 1, T, hd)
    return (y - (y * vn).sum(-1, keepdim=True) * vn).flatten(1, 2)  # (B, H, T, hd)

def head_gate(args: Hyperparameters) -> tuple | None:
    """The gate on each head's output, y_h *= mult * sigmoid(scale * W_h x[:window]),
    as (window, scale, mult, init std of W), or None. x is the block's normed input."""
    if args.attn_out_gate_enabled:  # 2026-04-16 record: 1 at init
        return args.gate_window, 1.0, 2.0, 0.0
    if args.gated_attn_enabled:  # 2026-04-19: every dim, ~1/2 at init
        return args.model_dim, 1.0, 1.0, args.gated_attn_init_std
    if args.sparse_attn_gate_enabled:  # 2026-04-23: 1/2 at init
        scale = args.sparse_attn_gate_scale
        return args.gate_window, scale, 1.0, args.sparse_attn_gate_init_std
    return None

class CausalSelfAttention(nn.Module):
    def __init__(self, args: Hyperparameters, xsa: bool, attn_impl: str = "dense"):
        super().__init__()
        dim, heads, kv_heads = args.model_dim, args.num_heads, args.num_kv_heads
        self.head_dim = dim // heads
        self.rope_dims = args.rope_dims or self.head_dim
        self.c_q, self.c_k, self.c_v = (CastedLinear(dim, n * self.head_dim) for n in (heads, kv_heads, kv_heads))
        self.proj = CastedLinear(dim, dim, zero_init=True)
        self.q_gain = nn.Parameter(torch.full((heads,), args.qk_gain_init))
        self.post = exclusive_self_attention if xsa else (lambda y, v: y)
        self.attend = ATTENTION[attn_impl][0]
        if attn_impl == "flex":  # the compiled kernel, found once
            self.attend = functools.partial(self.attend, flex=compiled_flex())
        self.rows_as_one = attn_impl == "flex"  # FlexAttention's layout
        gate = head_gate(args)
        self.gate = self.gate_heads if gate else (lambda y, x: y)
        if gate:  # W: Adam's scalar group (parameter_roles)
            self.gate_window, self.gate_scale, self.gate_mult, std = gate
            w = torch.zeros(heads, self.gate_window)
            self.attn_gate_w = nn.Parameter(w.normal_(0, std) if std else w)
        # a table, not traced math: compiled, that made each rotary kernel recompute cos and sin
        rope = rotary_cos_sin(max(args.train_seq_len, args.val_seq_len), self.rope_dims, args.rope_base, "cpu")
        self.register_buffer("rope", torch.stack(rope), persistent=False)  # cos and sin; not saved

    def forward(self, x: Tensor, mask=None) -> Tensor:  # x (B, T, C)
        if self.rows_as_one:
            return self.forward_rows_as_one(x, mask)
        q, k, v = (m(x).unflatten(-1, (-1, self.head_dim)).transpose(1, 2) for m in (self.c_q, self.c_k, self.c_v))
        cos, sin = self.rope[..., : x.size(1), :].unbind(0)  # (1, 1, T, rope_dims/2) each
        q = apply_rotary(rms_norm(q), cos, sin) * self.q_gain.to(q.dtype)[None, :, None, None]
        k = apply_rotary(rms_norm(k), cos, sin)
        # q (B, H, T, hd), k, v (B, Hkv, T, hd); mask: ATTENTION's, of the ids
        y = self.attend(q, k, v, mask)  # (B, H, T, hd)
        y = self.gate(self.post(y, v), x)
        return self.proj(y.transpose(1, 2).flatten(2))  # (B, T, C)

    def gate_heads(self, y: Tensor, x: Tensor) -> Tensor:
        """y (B, H, T, hd) times each head's gate of x (B, T, C)."""
        w = self.attn_gate_w.to(x.dtype)  # (H, window)
        g = F.linear(x[..., : self.gate_window], w)  # (B, T, H)
        g = self.gate_mult * torch.sigmoid(self.gate_scale * g)
        return y * g.transpose(1, 2)[..., None]

    def forward_rows_as_one(self, x: Tensor, block_mask) -> Tensor:
        """DOC_MASK's FlexAttention: q, k, v stay (B, T, heads, hd) as the
        projections make them, then are one row of B*T tokens, a view. From
        (B, heads, T, hd), that view needs a copy, which a compiled scoring
        graph (no gradients) failed to lower on torch 2.11."""
        B, T, _ = x.shape
        split = (-1, self.head_dim)
        q, k, v = (m(x).unflatten(-1, split) for m in (self.c_q, self.c_k, self.c_v))
        rope = self.rope[..., :T, :].transpose(2, 3)  # (2, 1, T, 1, rope_dims/2)
        gain = self.q_gain.to(q.dtype)[:, None]  # (H, 1)
        q = apply_rotary(rms_norm(q), *rope.unbind(0)) * gain
        k = apply_rotary(rms_norm(k), *rope.unbind(0))
        # (1, heads, B*T, hd) each
        q, k, v = (t.reshape(1, B * T, -1, self.head_dim).transpose(1, 2) for t in (q, k, v))
        y = self.attend(q, k, v, block_mask)  # (1, H, B*T, hd)
        y, v = (t.transpose(1, 2).reshape(B, T, -1, self.head_dim).transpose(1, 2)
                for t in (y, v))  # (B, H, T, hd) and (B, Hkv, T, hd)
        y = self.gate(self.post(y, v), x)
        return self.proj(y.transpose(1, 2).flatten(2))  # (B, T, C)

MLP_SLOPES = {"relu2": 0.0, "leaky_relu2": 0.5}  # act(h) = leaky_relu(h, slope)^2

class MLPFunction(torch.autograd.Function):
    """proj(act(fc(x))), its backward written out: compiled, a graph that inductor does not fuse into RMSNorm's."""
    @staticmethod
    def forward(ctx, x: Tensor, w1: Tensor, w2: Tensor, slope: float) -> Tensor:
        pre = F.linear(x, w1)
        post = F.leaky_relu(pre, slope).square()
        ctx.save_for_backward(x, w1, w2, pre, post)
        ctx.slope = slope
        return F.linear(post, w2)

    @staticmethod
    def backward(ctx, grad: Tensor):
        x, w1, w2, pre, post = (t.to(grad.dtype) for t in ctx.saved_tensors)  # COMPILE=0: autocast's mixed dtypes
        d_pre = (grad @ w2) * torch.where(pre > 0, 2 * pre, (2 * ctx.slope * ctx.slope) * pre)  # exact: 0, 0.5
        flat = [t.reshape(-1, t.size(-1)) for t in (x, d_pre, post, grad)]
        return d_pre @ w1, (flat[0].t() @ flat[1]).t(), (flat[2].t() @ flat[3]).t(), None

class MLP(nn.Module):
    def __init__(self, dim: int, mlp_mult: float, act: str = "relu2", impl: str = "modules"):
        super().__init__()
        self.fc = CastedLinear(dim, int(mlp_mult * dim))
        self.proj = CastedLinear(int(mlp_mult * dim), dim, zero_init=True)
        self.slope, self.function = MLP_SLOPES[act], impl == "function"

    def forward(self, x: Tensor) -> Tensor:  # no gradients (scoring, GPTQ's hooks): the modules
        if self.function and torch.is_grad_enabled():
            return MLPFunction.apply(x, self.fc.weight.to(x.dtype), self.proj.weight.to(x.dtype), self.slope)
        return self.proj(F.leaky_relu(self.fc(x), self.slope).square())

class Block(nn.Module):
    """x = mix0*x + mix1*x0, then attention and MLP on normed inputs, in turn or in parallel."""
    def __init__(self, args: Hyperparameters, layer: int, attn_impl: str = "dense"):
        super().__init__()
        dim = args.model_dim
        xsa = layer >= args.num_layers - args.xsa_last_n
        self.attn = CausalSelfAttention(args, xsa, attn_impl)
        self.mlp = MLP(dim, args.mlp_mult, args.mlp_act, args.mlp_impl)
        self.attn_scale = nn.Parameter(torch.ones(dim))
        self.mlp_scale = nn.Parameter(torch.ones(dim))
        self.resid_mix = nn.Parameter(torch.stack((torch.ones(dim), torch.zeros(dim))))  # (2, dim)
        scale = 1.0 / math.sqrt(layer + 1) if args.ln_scale else None
        self.norm = (lambda x: rms_norm(x) * scale) if scale else rms_norm
        self.parallel = 0 <= args.parallel_residual_start <= layer  # the MLP reads the attention's input

    def forward(self, x: Tensor, x0: Tensor, mask=None) -> Tensor:
        mix = self.resid_mix.to(x.dtype)
        x = mix[0] * x + mix[1] * x0
        h = self.norm(x)
        x = x + self.attn_scale.to(x.dtype) * self.attn(h, mask)
        return x + self.mlp_scale.to(x.dtype) * self.mlp(h if self.parallel else self.norm(x))

def layer_order(args: Hyperparameters, looping: bool) -> tuple[list[int], list[int]]:
    """(encoder, decoder) blocks, LOOP_START..LOOP_END repeated: 11, 3..5, 2 loops: 0-5 3 4 | 5 3 4 5 6-10."""
    order = list(range(args.num_layers))
    if looping:
        segment = list(range(args.loop_start, args.loop_end + 1))
        order = order[: args.loop_start] + segment * (args.num_loops + 1) + order[args.loop_end + 1 :]
    return order[: len(order) // 2], order[len(order) // 2 :]

class GPT(nn.Module):
    """compiled: the forward pass scoring runs (hidden states, no loss) is compiled."""
    def __init__(self, args: Hyperparameters, loss_impl: str = "torch", activation_dtype=torch.float32, compiled=False,
                 attn_impl: str = "sdpa"):  # DOC_MASK=1's (resolve_attn_impl)
        super().__init__()
        self.logit_softcap, self.loss_chunk_tokens = args.logit_softcap, max(1, LOSS_CHUNK_ELEMENTS // args.vocab_size)
        self.loss_impl, self.activation_dtype = loss_impl, activation_dtype
        self.tok_emb = nn.Embedding(args.vocab_size, args.model_dim)
        nn.init.normal_(self.tok_emb.weight, std=args.tied_embed_init_std)
        self.smear = self.smear_previous if args.smear_gate_enabled else (lambda x, ids: x)
        if args.smear_gate_enabled:  # zero: no smear at init; Adam's scalars
            self.smear_gate = nn.Parameter(torch.zeros(1, args.gate_window))
            self.smear_lambda = nn.Parameter(torch.zeros(1))
        self.orders = {False: layer_order(args, False), True: layer_order(args, args.num_loops > 0)}
        self.looping = False  # set at ENABLE_LOOPING_AT, or by the artifact
        num_skips = max(min(len(enc), len(dec)) for enc, dec in self.orders.values())
        self.skip_weights = nn.Parameter(torch.ones(num_skips, args.model_dim))
        self.skip_gates = nn.Parameter(torch.zeros(num_skips, args.model_dim)) if args.skip_gates_enabled else None
        attn_impl = attn_impl if args.doc_mask else "dense"
        self.mask_of = ATTENTION[attn_impl][1]  # once a forward pass
        blocks = (Block(args, i, attn_impl) for i in range(args.num_layers))
        self.blocks = nn.ModuleList(blocks)
        if args.ortho_init:  # the records': each matrix not zero at init, >= 64 on each side
            for m in self.modules():
                if isinstance(m, CastedLinear) and not m.zero_init and min(m.weight.shape) >= 64:
                    nn.init.orthogonal_(m.weight)
        self.scoring_hidden = torch.compile(self.hidden, dynamic=False, fullgraph=True) if compiled else self.hidden

    def add_skip(self, x: Tensor, skip: Tensor, i: int) -> Tensor:
        skip = self.skip_weights[i].to(x.dtype) * skip
        if self.skip_gates is None:
            return x + skip
        return torch.lerp(skip, x, torch.sigmoid(self.skip_gates[i].to(x.dtype)))  # gate 0.5 at init

    def smear_previous(self, x: Tensor, ids: Tensor) -> Tensor:
        """SMEAR_GATE_ENABLED (2026-04-16 record; its BOS fix 2026-04-27):
        x_t += lambda * sigmoid(W x_t[:GATE_WINDOW]) * x_{t-1} on the
        embeddings x (B, T, C) of ids (B, T), except where ids_t is a BOS:
        no document takes anything of the one before it."""
        w = self.smear_gate.to(x.dtype)  # (1, window)
        g = torch.sigmoid(F.linear(x[:, 1:, : w.size(1)], w))  # (B, T-1, 1)
        g = self.smear_lambda.to(x.dtype) * g * (ids[:, 1:, None] != BOS_ID)
        return torch.cat((x[:, :1], x[:, 1:] + g * x[:, :-1]), dim=1)

    def hidden(self, input_ids: Tensor) -> Tensor:
        """input_ids (B, T) -> the normed final hidden states (B, T, C)."""
        x = self.smear(self.tok_emb(input_ids), input_ids)
        x = rms_norm(x).to(self.activation_dtype)
        x0, skips, mask = x, [], self.mask_of(input_ids)
        encoder, decoder = self.orders[self.looping]
        for i in encoder:
            x = self.blocks[i](x, x0, mask)
            skips.append(x)
        for j, i in enumerate(decoder):
            if skips:
                x = self.add_skip(x, skips.pop(), j)
            x = self.blocks[i](x, x0, mask)
        return rms_norm(x).to(self.activation_dtype)

    def loss(self, h: Tensor, target_ids: Tensor, per_token: bool = False) -> Tensor:
        """Hidden states (..., C), targets (...) -> mean cross entropy (fp32), or each token's."""
        return softcap_ce_loss(h.reshape(-1, h.size(-1)), self.tok_emb.weight, target_ids.reshape(-1),
                               self.logit_softcap, self.loss_chunk_tokens, self.loss_impl, per_token)

    def forward(self, input_ids: Tensor, target_ids: Tensor) -> Tensor:
        """input_ids, target_ids: (B, T) -> mean cross entropy (fp32)."""
        return self.loss(self.hidden(input_ids), target_ids)

# ==== Optimizers ==============================================================
# Muon for the blocks' matrices: Nesterov momentum, then Newton-Schulz, a bank of one shape at a time, each
# rank its share, gathered while the next runs. Adam(W) for the rest.

NEWTON_SCHULZ_COEFFS = (3.4445, -4.7750, 2.0315)  # quintic: singular values to ~1, fast
# POLAR_EXPRESS=1 (the 2026-04-23 record's table, PR #1344): each step its own
# minimax coefficients; past the table, its last. The name is the 04-06 record's.
POLAR_EXPRESS_COEFFS = (
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323))
ALL_GATHER = getattr(dist, "all_gather_single", dist.all_gather_into_tensor)  # torch 2.13 renamed it

def newton_schulz_orthogonalize(G: Tensor, steps: int, eps: float = 1e-7,
                                coeffs=(NEWTON_SCHULZ_COEFFS,)) -> Tensor:
    """About U V^T for G = U S V^T, of a matrix or a bank (B, rows, cols), in bf16.
    Step i uses coeffs[i], or the last of them."""
    X = G.bfloat16()
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + eps)  # spectral norm <= Frobenius norm <= 1
    transposed = G.size(-2) > G.size(-1)
    if transposed:
        X = X.mT  # the wide side: its Gram matrices are the small ones
    for i in range(steps):
        a, b, c = coeffs[min(i, len(coeffs) - 1)]
        A = X @ X.mT
        X = a * X + (b * A + c * A @ A) @ X
    return X.mT if transposed else X

class Muon(torch.optim.Optimizer):
    """row_normalize (MuonEq-R): the update's rows to unit norm first; weight_decay: p *= 1 - lr * wd."""
    def __init__(self, params, lr: float, momentum: float, backend_steps: int, orthogonalize=None,
                 row_normalize: bool = False, weight_decay: float = 0.0):
        params = list(params)
        banks = [[p for p in params if p.shape == shape] for shape in dict.fromkeys(p.shape for p in params)]
        defaults = dict(lr=lr, base_lr=lr, momentum=momentum, backend_steps=backend_steps, weight_decay=weight_decay)
        super().__init__([dict(params=bank) for bank in banks], defaults)  # the schedule scales base_lr
        self.orthogonalize = orthogonalize or newton_schulz_orthogonalize
        self.row_normalize = row_normalize

    @torch.no_grad()
    def step(self):
        world, rank = (dist.get_world_size(), dist.get_rank()) if dist.is_initialized() else (1, 0)
        gathers, banks = [], []
        for group in self.param_groups:
            params, momentum = group["params"], group["momentum"]
            share = -(-len(params) // world)  # matrices per rank; the last share padded with zeros
            mine = params[rank * share : (rank + 1) * share]
            local = torch.zeros((share, *params[0].shape), device=params[0].device,
                                dtype=torch.bfloat16 if params[0].is_cuda else torch.float32)  # gloo: no bf16
            if mine:
                bufs = [self.state[p].setdefault("momentum_buffer", torch.zeros_like(p)) for p in mine]
                torch._foreach_mul_(bufs, momentum)
                torch._foreach_add_(bufs, [p.grad for p in mine])
                g = torch.stack([p.grad for p in mine]).add_(torch.stack(bufs), alpha=momentum)  # Nesterov
                g = g / g.norm(dim=-1, keepdim=True).clamp_min(1e-7) if self.row_normalize else g
                aspect = max(1, g.size(1) / g.size(2)) ** 0.5  # sqrt(rows / cols) for tall matrices
                local[: len(mine)] = self.orthogonalize(g, group["backend_steps"]) * aspect
            updates = local
            if world > 1:  # async: it travels while the next bank is orthogonalised
                updates = local.new_empty((share * world, *local.shape[1:]))
                gathers.append(ALL_GATHER(updates, local, async_op=True))
            banks.append((params, group, updates))
        for work in gathers:
            work.wait()
        for params, group, updates in banks:
            if group["weight_decay"] > 0:  # else a pass over each matrix for nothing
                torch._foreach_mul_(params, 1.0 - group["lr"] * group["weight_decay"])
            torch._foreach_add_(params, list(updates[: len(params)].to(params[0].dtype)), alpha=-group["lr"])

def parameter_roles(model: nn.Module) -> dict[str, str]:
    """The one rule that routes every parameter: the embedding (Adam), a CastedLinear's weight (Muon), a scalar."""
    matrices = {id(m.weight) for m in model.modules() if isinstance(m, CastedLinear)}
    return {n: "embed" if p is model.tok_emb.weight else "matrix" if id(p) in matrices else "scalar"
            for n, p in model.named_parameters()}

def build_optimizers(model: GPT, args: Hyperparameters, orthogonalize=None) -> list[torch.optim.Optimizer]:
    params, roles = dict(model.named_parameters()), parameter_roles(model)
    names = sorted(roles, key=lambda n: not n.startswith("blocks."))  # the order clip_grad_norm_ sums
    embed, matrix, scalar = ([params[n] for n in names if roles[n] == role] for role in ("embed", "matrix", "scalar"))
    adam_groups = [dict(params=group, lr=lr, base_lr=lr, weight_decay=wd) for group, lr, wd in
                   ((embed, args.tied_embed_lr, args.embed_wd), (scalar, args.scalar_lr, args.adam_wd))]
    adam = torch.optim.AdamW(adam_groups, betas=(args.beta1, args.beta2), eps=args.adam_eps,
                             fused=model.tok_emb.weight.is_cuda)  # p *= 1 - lr * wd: Adam where wd is 0
    if args.polar_express:  # decided once, for every step
        orthogonalize = functools.partial(orthogonalize or newton_schulz_orthogonalize,
                                          coeffs=POLAR_EXPRESS_COEFFS)
    muon = Muon(matrix, lr=args.matrix_lr, momentum=args.muon_momentum, backend_steps=args.muon_backend_steps,
                orthogonalize=orthogonalize, row_normalize=args.muon_row_normalize, weight_decay=args.muon_wd)
    held = sorted(id(p) for opt in (adam, muon) for group in opt.param_groups for p in group["params"])
    assert held == sorted(map(id, params.values())), "a parameter is in no optimizer or in two: see parameter_roles"
    return [adam, muon]

# ==== Evaluation: bits per byte ===============================================
# Bits per byte does not depend on the tokenizer. A target's bytes: its byte sidecar's (CaseOps data), else
# its piece's UTF-8 length (a byte piece: 1), a leading "▁" counted unless after a control or unknown token.

@dataclasses.dataclass
class ValData:
    tokens: Tensor  # (N,) int64 on CPU, trimmed to whole sequences + 1
    token_bytes: Tensor  # (N,) int32 on the device: the bytes token p stands for, as a target
    bytes_from: dict  # for the log: val_bytes (tokenizer, sidecar or sidecar_raw), the sidecars' sha256
    seq_len: int
    batch_seqs: int  # sequences per rank per evaluation batch

def load_tokenizer(path: str, vocab_size: int):
    require_file("TOKENIZER_PATH", path, "Point it at the .model file the shards were made with (data/README.md).")
    try:
        sp = spm.SentencePieceProcessor(model_file=str(path))
    except (RuntimeError, OSError):  # a .vocab, a text file: SentencePiece cannot parse it
        raise ConfigError(f"TOKENIZER_PATH={path} is not a SentencePiece model: point it at the .model file.") from None
    require(sp.vocab_size() == vocab_size, f"TOKENIZER_PATH={path} has a vocabulary of {sp.vocab_size()} but "
            f"VOCAB_SIZE={vocab_size}: set VOCAB_SIZE={sp.vocab_size()} or use the matching tokenizer.")
    check_tokenizer_bytes(sp, build_byte_luts(sp, vocab_size), f"TOKENIZER_PATH={path}")
    return sp

def build_byte_luts(sp, vocab_size: int) -> tuple[Tensor, Tensor, Tensor]:
    """(base_bytes, has_leading_space, is_boundary) of each id (V,): the rule above."""
    is_boundary = [sp.is_control(i) or sp.is_unknown(i) or sp.is_unused(i) for i in range(vocab_size)]
    pieces = ["" if is_boundary[i] or sp.is_byte(i) else sp.id_to_piece(i) for i in range(vocab_size)]
    base_bytes = [len(p.removeprefix("▁").encode("utf-8")) + sp.is_byte(i) for i, p in enumerate(pieces)]
    return torch.tensor(base_bytes), torch.tensor([p[:1] == "▁" for p in pieces]), torch.tensor(is_boundary)

def tokenizer_bytes(tokens: Tensor, base_bytes: Tensor, has_leading_space: Tensor, is_boundary: Tensor) -> Tensor:
    """(N,) int32: the bytes each token stands for, after tokens[p - 1]."""
    return (base_bytes[tokens] + (has_leading_space[tokens] & ~is_boundary[tokens.roll(1)])).to(torch.int32)

def check_tokenizer_bytes(sp, luts: tuple[Tensor, Tensor, Tensor], name: str = "the tokenizer") -> None:
    """The byte rule fails if whitespace is kept or a piece holds "▁" inside: try both."""
    inner = [p.replace("▁", " ") for p in map(sp.id_to_piece, range(sp.vocab_size())) if "▁" in p[1:]]
    probes = ["Hello world, 2024 (x) - y.", "  two  spaces,\ttab\n\nnew   line  ", " naïve 漢字 😀 ﬁne", "a ▁ b"]
    for text in probes + inner:
        ids = sp.encode(text)
        decoded = len(sp.decode(ids).encode("utf-8"))
        counted = int(tokenizer_bytes(torch.tensor([sp.bos_id(), *ids]), *luts).sum())  # unknown pieces: 0
        require(counted == decoded or sp.unk_id() in ids, f"{name}: its pieces miscount the bytes for bits per "
                f"byte ({text!r}: {decoded} bytes, counted {counted}). Use remove_extra_whitespaces=true, no inner ▁.")

def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()

def check_shards(sp, args: Hyperparameters, val_files: list[Path], train_files: list[Path], docs: int = 32) -> str:
    """Each shard made by TOKENIZER_PATH (`docs` documents of each round-trip); no val shard trained on."""
    for f in train_files:
        copy = [v for v in val_files if v.stat().st_size == f.stat().st_size and v.read_bytes() == f.read_bytes()]
        require(not copy, f"training shard {f} is a copy of the validation shard {copy and copy[0]}: remove it.")
    tried = 0
    for f in val_files + train_files:
        tokens = read_shard(f)
        bos = np.flatnonzero(tokens == sp.bos_id())
        picked = np.unique(np.linspace(0, len(bos) - 2, min(docs, max(len(bos) - 1, 0))).astype(int))
        ids = [tokens[bos[i] + 1 : bos[i + 1]].tolist() for i in picked]  # whole documents
        same = sum(sp.encode(sp.decode(doc)) == doc for doc in ids)
        require(same == len(ids), f"TOKENIZER_PATH={args.tokenizer_path} did not make the shards in {args.data_path}:"
                f" {same} of {len(ids)} sampled documents decode and encode again to their own ids ({f.name}). Find "
                f"the one that did: python3 data/build_shards.py --which-tokenizer {args.data_path} (data/README.md).")
        tried += len(ids)
    return f"round_trip_{tried}/{tried}"

def is_caseops(sp) -> bool:  # data/caseops.py's symbols as user-defined pieces (a plain tokenizer: plain ones)
    proto = sp.serialized_model_proto()  # a piece: field 1 its text, 2 its score, 3 its type
    user_defined = rb"\n\x03%s(\x15.{4})?\x18\x04"  # that text (3 bytes), type 4: user-defined
    return all(re.search(user_defined % c.encode(), proto, re.S) for c in "\ue001\ue002\ue003\ue004")

def val_token_bytes(args: Hyperparameters, files: list[Path], tokens: Tensor, sp) -> tuple[Tensor, dict]:
    """(token_bytes, bytes_from): the byte sidecars if any (CaseOps), checked against the tokens, else the pieces'."""
    sidecars = [f.with_name(f.name.replace("fineweb_val_", "fineweb_val_bytes_")) for f in files]
    base, space, boundary = build_byte_luts(sp, args.vocab_size)
    if not any(s.exists() for s in sidecars):
        require(not is_caseops(sp), f"TOKENIZER_PATH={args.tokenizer_path} (CaseOps) needs byte "
                f"sidecars fineweb_val_bytes_*.bin in DATA_PATH={args.data_path}: build them (data/README.md: CaseOps)")
        return tokenizer_bytes(tokens, base, space, boundary), dict(val_bytes="tokenizer")
    here = Path(args.data_path) / "manifest.json"  # what the sidecars count (data/README.md), their sha256
    try:
        manifest = json.loads(here.read_text(encoding="utf-8")) if here.is_file() else {}
        entry = dict((manifest.get("datasets") or [{}])[0])
    except (ValueError, AttributeError, TypeError, KeyError):  # not JSON, or not a manifest's shape
        raise ConfigError(f"{here} is not a manifest of data/: rebuild or download the data again.") from None
    redo = "rebuild them: data/build_shards.py" if "built_with" in manifest else "download them again"
    wrong = [s.name for s, f in zip(sidecars, files) if not s.exists() or s.stat().st_size != f.stat().st_size]
    require(not wrong, f"DATA_PATH={args.data_path}: {', '.join(wrong)} missing or not as long as its shard: {redo}.")
    kind = "sidecar_raw" if entry.get("val_bytes") == "sidecar_raw" else "sidecar"
    digests = list(map(file_sha256, sidecars))
    listed = {f.get("name"): f.get("sha256") for f in entry.get("files", [])}
    wrong = [f"{s.name} not its sha256" for s, d in zip(sidecars, digests) if listed.get(s.name, d) != d]
    counts = torch.cat([load_data_shard(s) for s in sidecars]).to(torch.int32)
    marks = [sp.piece_to_id(c) for c in "\ue001\ue002\ue003\ue004" if is_caseops(sp)]  # markers: 0 bytes
    implied = tokenizer_bytes(tokens, base.index_fill(0, torch.tensor(marks).long(), 0), space, boundary)
    for p in (tokens[:-1] == sp.piece_to_id("\ue004")).nonzero()[:, 0].tolist():  # a symbol after ESC: 3
        implied[p + 1] += 3 * int(implied[p] == 0 and tokens[p + 1] in marks)
    starts = tokens == sp.bos_id()
    doc = starts.cumsum(0).clamp(min=1) - 1  # each token's document
    n = torch.bincount(doc, implied.double())  # each document's normalized bytes
    drift = torch.bincount(doc, (counts - implied).double())  # the original's runs of spaces: up to +38% seen
    off = counts != implied  # ours: every token; the records': starts 0, a total in [7/8 n - 64, 2 n + 64]
    off = off if kind == "sidecar" else counts[starts].bool() | (drift < -64 - n / 8) | (drift > 64 + n)
    wrong += [f"{int(off.sum())} {'tokens' if kind == 'sidecar' else 'documents'} off"] * off.any()
    require(not wrong, f"DATA_PATH={args.data_path}: byte sidecars ({kind}) not of these shards "
            f"({'; '.join(wrong)}): {redo} (which bytes they count: data/README.md).")
    return counts, dict(val_bytes=kind, val_bytes_sha256=",".join(digests))

def window_starts(val: ValData, stride: int) -> Tensor:  # every `stride` tokens (0: seq_len)
    return torch.arange(0, val.tokens.numel() - 1 - (val.seq_len - (stride or val.seq_len)), stride or val.seq_len)

@torch.no_grad()
def score_windows(model: GPT, val: ValData, ctx: DistContext, stride: int = 0, starts=None, observe=None) -> Tensor:
    """(loss sum, tokens, bytes) of the windows at `starts` (all), over ranks; observe: legality's."""
    T, total = val.seq_len, val.tokens.numel() - 1
    context = T - (stride or T)
    starts = window_starts(val, stride) if starts is None else starts
    starts = starts[len(starts) * ctx.rank // ctx.world_size : len(starts) * (ctx.rank + 1) // ctx.world_size]
    batch = max(min(val.batch_seqs, len(starts)), 1)
    starts = F.pad(starts, (0, -len(starts) % batch), value=total)  # padded to whole batches
    sums = torch.zeros(3, dtype=torch.float64, device=ctx.device)  # loss * tokens, tokens, bytes
    was_training = model.training
    model.eval()
    for first in starts.view(-1, batch):  # (batch,) starts
        windows = val.tokens[(first[:, None] + torch.arange(T + 1)).clamp_max(total)].to(ctx.device, non_blocking=True)
        lo = 0 if first[0] == 0 else context  # the first window scores all its tokens, others their last stride
        x, y = windows[:, :-1], windows[:, lo + 1 :]
        with ctx.autocast():
            h = model.scoring_hidden(x)[:, lo:]
            losses = model.loss(h, y, per_token=True).view(batch, T - lo)
        first, pos = first.to(ctx.device)[:, None], torch.arange(lo, T, device=ctx.device)
        scored = (pos >= torch.where(first == 0, 0, context)) & (first + pos < total)
        sums += torch.stack([(losses.double() * scored).sum(), scored.sum(),
                             (val.token_bytes[(first + pos + 1).clamp_max(total)] * scored).sum()])
        if observe is not None:  # each scored target's distribution
            ids = torch.arange(model.tok_emb.num_embeddings, device=ctx.device).expand(int(scored.sum()), -1)  # (n, V)
            observe((first + pos + 1)[scored], -model.loss(h[scored, None].expand(*ids.shape, -1), ids, True))
    model.train(was_training)
    return ctx.all_reduce(sums)

def loss_and_bpb(sums: Tensor) -> tuple[float, float]:
    """(val_loss in nats per token, val_bpb) of the sums."""
    loss_sum, tokens, num_bytes = sums.tolist()
    return loss_sum / tokens, loss_sum / tokens / math.log(2.0) * tokens / num_bytes

def score_with_ttt(run: Run, model: GPT, observe=None) -> Tensor:
    """Score-first TTT (README: legality): a chunk of TTT_CHUNK_TOKENS predictions is scored, then trained on."""
    args, val, stride = run.args, run.val, run.args.eval_stride
    T, total, size = val.seq_len, val.tokens.numel() - 1, args.ttt_chunk_tokens
    starts, chunks = window_starts(val, stride), -(-total // size)
    chunk_of = (torch.where(starts == 0, 0, starts + T - (stride or T)) // size).clamp_max(chunks - 1)
    if chunks == 1 or args.ttt_epochs == 0 or args.ttt_lr == 0:  # one chunk (never trained on) or no step
        run.log.log(ttt_note="no_adaptation", val_predictions=total, ttt_chunk_tokens=size)
    sgd = torch.optim.SGD(model.parameters(), lr=args.ttt_lr, momentum=args.ttt_momentum)
    sums = torch.zeros(3, dtype=torch.float64, device=run.ctx.device)
    for c in range(chunks):
        sums += score_windows(model, val, run.ctx, stride, starts[chunk_of == c], observe)
        if c < chunks - 1:
            lr = args.ttt_lr * 0.5 * (1.0 + math.cos(math.pi * c / (chunks - 1)))  # cosine-decayed
            train_on_chunk(run, model, sgd, c * size, min((c + 1) * size, total), lr, args.ttt_epochs)
    return sums

def train_on_chunk(run: Run, model: GPT, sgd: torch.optim.SGD, begin: int, end: int, lr: float,
                   epochs: int) -> None:
    """`epochs` steps on predictions begin..end-1, split over ranks; the gradient clipped."""
    ctx, T, params = run.ctx, run.val.seq_len, list(model.parameters())
    seqs = (end - begin) // T
    mine = torch.arange(seqs * ctx.rank // ctx.world_size, seqs * (ctx.rank + 1) // ctx.world_size)
    weight, mine = len(mine) / seqs, mine if len(mine) else torch.zeros(1, dtype=torch.int64)
    rows = run.val.tokens[begin + T * mine[:, None] + torch.arange(T + 1)].to(ctx.device)  # (n, T + 1)
    sgd.param_groups[0]["lr"] = lr  # one group: the model's parameters
    for _ in range(epochs):
        with ctx.autocast():
            (model(rows[:, :-1], rows[:, 1:]) * weight).backward()
        for p in params:
            ctx.all_reduce(p.grad)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        sgd.step()
        sgd.zero_grad(set_to_none=True)

# ---- Document-wise TTT (TTT_MODE=doc), the records' after 2026-04-09
# Each validation document is adapted on its own. It starts from the trained
# weights and is scored a chunk of TTT_CHUNK_SIZE predictions at a time, each
# chunk before the adapters train on it (one Adam step). The adapters are
# rank-TTT_LORA_RANK updates (LoRA) of q, k, v, the attention's and the MLP's
# outputs and the head. TTT_BATCH_SIZE documents of like length run at once,
# each with its own adapters, through a model of the same weights whose
# attention is plain causal: a row holds one document, padded after its end.
# Nothing passes from one document to another, except by the phases
# (PHASED_TTT_*): the first PHASED_TTT_PREFIX_DOCS documents are scored in
# PHASED_TTT_NUM_PHASES phases, and after each one plain SGD on every
# document scored so far trains the model that the next ones start from.

def document_spans(tokens: Tensor) -> Tensor:
    """(n, 2): each document's first input and its number of predictions.
    A BOS starts one, and so does the split; its last target is the next
    document's BOS, so every target of the split is a document's."""
    total = tokens.numel() - 1
    bos = (tokens[:total] == BOS_ID).nonzero().flatten()
    starts = torch.cat([bos.new_zeros(1), bos]).unique()
    ends = torch.cat([starts[1:], starts.new_tensor([total])])
    return torch.stack([starts, ends - starts], 1)

def doc_phases(docs: int, args: Hyperparameters) -> list[range]:
    """The documents in stream order: the phases of the prefix, then the
    rest. Phase k ends at document prefix * (k + 1) // phases."""
    prefix = min(args.phased_ttt_prefix_docs, docs)
    phases = args.phased_ttt_num_phases
    cuts = [0, *(prefix * (k + 1) // phases for k in range(phases)), docs]
    return [range(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]

def doc_batches(lengths: list[int], docs: range, size: int) -> list[list]:
    """Batches of `size` documents of like length, the longest first. One
    document a batch has nothing to group: those keep stream order."""
    order = list(docs)
    if size > 1:
        order.sort(key=lambda d: -lengths[d])  # stable: ties in stream order
    return [order[i : i + size] for i in range(0, len(order), size)]

class BatchedLoRA(nn.Module):
    """x (D, T, d_in) -> scale * x A_i^T B_i^T (D, T, d_out): document i's
    update, A_i (rank, d_in) and B_i (d_out, rank). B starts at zero, A at
    one draw that every document shares: each one starts alike."""
    def __init__(self, docs: int, d_in: int, d_out: int, rank: int,
                 scale: float, gen: torch.Generator):
        super().__init__()
        bound = d_in ** -0.5  # the records' uniform start of A
        start = (2 * torch.rand(rank, d_in, generator=gen) - 1) * bound
        self.register_buffer("start", start, persistent=False)
        self.A = nn.Parameter(start.repeat(docs, 1, 1))
        self.B = nn.Parameter(torch.zeros(docs, d_out, rank))
        self.scale = scale

    def reset(self) -> None:
        with torch.no_grad():
            self.A.copy_(self.start)
            self.B.zero_()

    def forward(self, x: Tensor) -> Tensor:
        return (x @ self.A.mT) @ self.B.mT * self.scale

def add_update(lora: BatchedLoRA, module, inputs, out) -> Tensor:
    return out + lora(inputs[0])  # a forward hook: the module's input

class DocAdapters(nn.Module):
    """The adapters of a batch of documents, hooked onto a model. Each adds
    an update of a block's normed input to the output of its c_q, c_v, c_k
    (TTT_K_LORA), attention (TTT_O_LORA) or MLP (TTT_MLP_LORA); one more
    adds an update of the final hidden state to the logits."""
    def __init__(self, model: GPT, args: Hyperparameters, docs: int):
        super().__init__()
        gen = torch.Generator().manual_seed(args.seed)
        rank, dim = args.ttt_lora_rank, args.model_dim
        def lora(d_out: int) -> BatchedLoRA:
            scale = args.ttt_lora_alpha / rank
            return BatchedLoRA(docs, dim, d_out, rank, scale, gen)
        names = ["attn.c_q", "attn.c_v"] + ["attn.c_k"] * args.ttt_k_lora
        names += ["attn"] * args.ttt_o_lora + ["mlp"] * args.ttt_mlp_lora
        self.loras = nn.ModuleDict()
        for i, block in enumerate(model.blocks):
            for name in names:
                module = block.get_submodule(name)
                out = getattr(module, "out_features", dim)
                key = f"{i}_{name.replace('.', '_')}"
                self.loras[key] = lora(out)
                hook = functools.partial(add_update, self.loras[key])
                module.register_forward_hook(hook)
        self.head = lora(args.vocab_size)

    def reset(self) -> None:  # every document starts from the weights
        for m in self.modules():
            if isinstance(m, BatchedLoRA):
                m.reset()

    def log_probs(self, model: GPT, h: Tensor) -> Tensor:
        """Hidden states (D, C, d) -> log-probabilities (D, C, V), fp32."""
        emb = model.tok_emb.weight.to(h.dtype)
        logits = (F.linear(h, emb) + self.head(h)).float()
        cap = model.logit_softcap
        return F.log_softmax(cap * torch.tanh(logits / cap), -1)

@dataclasses.dataclass
class DocModel:
    """The scored model's weights (shared: the phases' updates show) with
    plain causal attention and the adapters; only the adapters train."""
    gpt: GPT
    adapters: DocAdapters
    hidden: object  # gpt.hidden, compiled on CUDA

def doc_model(run: Run, model: GPT) -> DocModel:
    args = dataclasses.replace(run.args, mlp_impl="modules")  # no dW
    with torch.device("meta"):  # no init: the weights are the model's
        gpt = GPT(args, run.loss_impl[0], model.activation_dtype,
                  attn_impl="dense")
    gpt.load_state_dict(model.state_dict(), assign=True)
    gpt.requires_grad_(False)
    gpt.looping = model.looping
    adapters = DocAdapters(gpt, args, args.ttt_batch_size)
    gpt, adapters = gpt.to(run.ctx.device), adapters.to(run.ctx.device)
    hidden = gpt.hidden
    if args.compile and run.ctx.device.type == "cuda":
        hidden = torch.compile(hidden, dynamic=True)  # windows grow
    return DocModel(gpt, adapters, hidden)

def score_doc_batch(run: Run, doc: DocModel, spans: Tensor,
                    observe=None) -> Tensor:
    """(loss sum, tokens, bytes) of a batch of documents, spans (D, 2) as
    document_spans' (a padding slot: no predictions), each adapted on its
    own: chunk c is scored, then the adapters take a step on it."""
    args, val, ctx = run.args, run.val, run.ctx
    C, total = args.ttt_chunk_size, val.tokens.numel() - 1
    first, length = spans.unbind(1)  # (D,) each
    doc.adapters.reset()
    adam = torch.optim.AdamW(
        doc.adapters.parameters(), lr=args.ttt_lora_lr, eps=1e-10,
        betas=(args.ttt_beta1, args.ttt_beta2), fused=ctx.device.type == "cuda",
        weight_decay=args.ttt_weight_decay)
    sums = torch.zeros(3, dtype=torch.float64, device=ctx.device)
    for c in range(-(-int(length.max()) // C)):
        # the window: predictions up to chunk c's last, at most seq_len
        cols = torch.arange(max(0, (c + 1) * C - val.seq_len), (c + 1) * C)
        inside = cols < length[:, None]  # (D, T)
        at = (first[:, None] + cols).clamp_max(total - 1)  # the inputs
        x = torch.where(inside, val.tokens[at], 0).to(ctx.device)
        y = val.tokens[at[:, -C:] + 1].to(ctx.device)  # chunk c's targets
        train = length > (c + 1) * C  # (D,): a chunk follows
        with torch.set_grad_enabled(bool(train.any())), ctx.autocast():
            h = doc.hidden(x)[:, -C:]  # (D, C, d)
            logp = doc.adapters.log_probs(doc.gpt, h)  # (D, C, V)
        losses = -logp.gather(-1, y[..., None])[..., 0]  # (D, C)
        scored = inside[:, -C:].to(ctx.device)
        targets = (at[:, -C:] + 1).to(ctx.device)
        nbytes = val.token_bytes[targets] * scored
        sums += torch.stack([(losses.detach().double() * scored).sum(),
                             scored.sum(), nbytes.sum()])
        if observe is not None:
            observe(targets[scored], logp.detach()[scored])
        if train.any():
            adam.zero_grad(set_to_none=True)
            (losses.mean(1) * train.to(ctx.device)).sum().backward()
            adam.step()
    return sums

def train_on_scored(run: Run, model: GPT, end: int) -> None:
    """A phase's plain SGD on predictions 0..end-1, all of them scored:
    GLOBAL_TTT_EPOCHS steps a chunk of GLOBAL_TTT_CHUNK_TOKENS, the lr
    cosine-decayed over the chunks (the records' global TTT)."""
    args, T = run.args, run.val.seq_len
    size = args.global_ttt_chunk_tokens
    spans = [(b, min(b + size, end)) for b in range(0, end, size)]
    spans = [(b, e) for b, e in spans if e - b >= T]  # whole sequences
    sgd = torch.optim.SGD(model.parameters(), lr=args.global_ttt_lr,
                          momentum=args.global_ttt_momentum)
    for c, (begin, stop) in enumerate(spans):
        cosine = 0.5 * (1.0 + math.cos(math.pi * c / len(spans)))
        lr = args.global_ttt_lr * cosine
        train_on_chunk(run, model, sgd, begin, stop, lr,
                       args.global_ttt_epochs)

def score_docs_with_ttt(run: Run, model: GPT, observe=None) -> Tensor:
    """TTT_MODE=doc (above): each phase's documents, this rank's batches of
    them; then, all ranks together, SGD on every document scored so far."""
    args, ctx, log = run.args, run.ctx, run.log
    spans = document_spans(run.val.tokens)
    lengths = spans[:, 1].tolist()
    phases = doc_phases(len(spans), args)
    doc, size = doc_model(run, model), args.ttt_batch_size
    pad = torch.zeros(size, 2, dtype=torch.int64)  # slots of no document
    log.log(ttt_mode="doc", ttt_docs=len(spans), ttt_phases=len(phases) - 1,
            ttt_batch_size=size, ttt_chunk_size=args.ttt_chunk_size)
    sums = torch.zeros(3, dtype=torch.float64, device=ctx.device)
    t0 = ctx.clock()
    for k, phase in enumerate(phases):
        batches = doc_batches(lengths, phase, size)
        for batch in batches[ctx.rank :: ctx.world_size]:
            batch_spans = torch.cat([spans[batch], pad])[:size]
            sums += score_doc_batch(run, doc, batch_spans, observe)
        if k < len(phases) - 1:  # the next phase starts from these
            end = int(spans[phase[-1]].sum())  # its last target
            train_on_scored(run, model, end)
            log.log(ttt_phase=f"{k + 1}/{len(phases) - 1}",
                    docs_scored=phase[-1] + 1, trained_predictions=end,
                    ttt_time=f"{1000 * (ctx.clock() - t0):.0f}ms")
    return ctx.all_reduce(sums)

# ==== Export: quantize, compress, and the round trip the score is measured after
# Float tensors over 65,536 elements: int8 codes of MATRIX_BITS (EMBED_BITS), an fp16 step per row (int8's
# percentile of |w|, or k * std(row) / qmax); the rest fp16. The artifact: a JSON header line, the payload.

QUANT_KEEP_FLOAT_MAX_NUMEL = 65_536
QUANT_CLIP_QUANTILE = 0.9999984  # the 99.99984th percentile of |w| in each row
QUANT_MAX = 127
QUANT_MIN_SCALE = 1.0 / QUANT_MAX  # a floor: few int8 levels, which zlib packs far better
GPTQ_BLOCK = 128  # columns rounded before their error reaches the rest, in one matmul
ARTIFACT_LIMIT_BYTES = 16_000_000
ARTIFACT_MAGIC = b"parameter-golf artifact v1\n"
# name -> (module, compress() keywords, byte planes: > 1 puts byte k of each word together, for brotli)
COMPRESSORS = {"zlib": ("zlib", dict(level=9), 1), "lzma": ("lzma", dict(preset=9 | lzma.PRESET_EXTREME), 1),
               "brotli": ("brotli", dict(quality=11), 2)}

def gptq_round(w: Tensor, hessian: Tensor, scale: Tensor, qmax: int) -> Tensor:
    """GPTQ (Frantar et al. 2022) codes of w (B, rows, cols), steps scale (B, rows, 1), H = X^T X (B, cols, cols)."""
    H = hessian.clone()
    diag = H.diagonal(dim1=1, dim2=2)  # a view of H
    dead = diag == 0
    diag[dead] = 1.0
    diag.add_(0.01 * diag.mean(dim=1, keepdim=True))  # dampening: H stays positive definite
    perm = torch.argsort(diag, dim=1, descending=True)  # (B, cols)
    w = torch.gather(w, 2, perm[:, None, :].expand_as(w)).masked_fill_(torch.gather(dead, 1, perm)[:, None, :], 0.0)
    H = H[torch.arange(len(H), device=H.device)[:, None, None], perm[:, :, None], perm[:, None, :]]
    U = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(H)), upper=True)
    q, s = torch.empty_like(w, dtype=torch.int8), scale[..., 0]
    for i in range(0, w.size(2), GPTQ_BLOCK):
        j = min(i + GPTQ_BLOCK, w.size(2))
        block, err = w[..., i:j], torch.empty_like(w[..., i:j])  # block is a view, updated in place
        for c in range(j - i):
            qc = torch.clamp(torch.round(block[..., c] / s), -qmax, qmax)
            q[..., i + c] = qc.to(torch.int8)
            err[..., c] = (block[..., c] - qc * s) / U[:, i + c, i + c, None]
            block[..., c:] -= err[..., c : c + 1] * U[:, None, i + c, i + c : j]
        w[..., j:] -= err @ U[:, i:j, j:]
    return torch.gather(q, 2, torch.argsort(perm, dim=1)[:, None, :].expand_as(q))

def quantize_rows(w: Tensor, bits: int, clip_sigmas: float, hessian: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """(int8 codes, fp16 scale per row) of w (rows, cols), or of a batch (B, rows, cols)."""
    qmax = 2 ** (bits - 1) - 1
    if clip_sigmas > 0:
        scale = (clip_sigmas * w.std(dim=-1) / qmax).clamp_min(1e-10).half()
    else:  # the int8 reference: clamp at the quantile, then round
        clip = torch.quantile(w.abs(), QUANT_CLIP_QUANTILE, dim=-1)
        scale = (clip / qmax).clamp_min(QUANT_MIN_SCALE).half()
        w = torch.clamp(w, -clip[..., None], clip[..., None])
    s = scale.float()[..., None]  # stored in fp16: round with that
    if hessian is not None:  # gptq_round takes a batch: one matrix is a batch of one
        batch = [t if w.dim() == 3 else t[None] for t in (w, hessian, s)]
        return gptq_round(*batch, qmax).view(w.shape), scale
    return torch.clamp(torch.round(w / s), -qmax, qmax).to(torch.int8), scale

def quant_fields(name: str, role: str | None, args: Hyperparameters) -> tuple[str, str]:
    """Its (bits, clip sigmas) settings: the embedding's, its group's if set, or the matrices'."""
    own = [g for part, g in CLIP_GROUPS.items() if part in name and getattr(args, g[1]) > 0]
    return QUANT_GROUPS["embed"] if role == "embed" else (own or [QUANT_GROUPS["matrix"]])[0]

def quantize_state_dict(state_dict: dict[str, Tensor], args: Hyperparameters, roles: dict, hessians=None) -> dict:
    """The payload: codes and scales of the large tensors (GPTQ: batched by shape, on the GPU), the rest kept."""
    quantized, scales, kept, batches = {}, {}, {}, {}
    for name, t in state_dict.items():
        if not t.is_floating_point():
            kept[name] = t.cpu()
        elif args.gated_attn_quant_gate and name.endswith(".attn_gate_w"):  # int8, a step a head
            w = t.detach().float().cpu()
            quantized[name], scales[name] = quantize_runs(w, len(w), -127, 127, 127.0)
        elif t.numel() <= QUANT_KEEP_FLOAT_MAX_NUMEL:  # fp16; int8's format (no clip sigmas): scalars fp32
            kept[name] = (t.float() if roles.get(name) == "scalar" and args.matrix_clip_sigmas == 0 else t.half()).cpu()
        else:  # a batch: one tensor, or with GPTQ all tensors of one shape and group
            group = quant_fields(name, roles.get(name), args)
            batches.setdefault((tuple(t.shape) if hessians and name in hessians else name, group), []).append(name)
    for (_, group), names in batches.items():
        bits, sigmas = (getattr(args, field) for field in group)
        hessian = torch.stack([hessians[n] for n in names]) if hessians and names[0] in hessians else None
        device = "cpu" if hessian is None else hessian.device
        w = torch.stack([state_dict[n].to(device).float().reshape(state_dict[n].size(0), -1) for n in names])
        q, scale = quantize_rows(w, bits, sigmas, hessian)
        for n, qn, sn in zip(names, q, scale):
            quantized[n], scales[n] = qn.reshape(state_dict[n].shape).to("cpu", copy=True), sn.to("cpu", copy=True)
    obj = {"quantized": quantized, "scales": scales, "kept": kept}
    return obj | ({"lqer": lqer_factors(state_dict, obj, args)} if args.lqer_enabled else {})

def dequantize_runs(codes: Tensor, scale: Tensor) -> Tensor:
    """Codes times their steps: each step serves an equal run of the codes."""
    runs = codes.float().reshape(scale.numel(), -1) * scale.float()[:, None]
    return runs.reshape(codes.shape)

def dequantize_state_dict(obj: dict) -> dict[str, Tensor]:  # kept tensors; each code times its row's step
    weights = obj["kept"] | {n: dequantize_runs(q, obj["scales"][n]) for n, q in obj["quantized"].items()}
    for n, (a, a_scale, b, b_scale) in obj.get("lqer", {}).items():  # + A B
        fit = dequantize_runs(a, a_scale) @ dequantize_runs(b, b_scale)
        weights[n] = weights[n] + fit.reshape(weights[n].shape)
    return weights

def quantize_runs(t: Tensor, runs: int, qmin: int, qmax: int, div: float):
    """(int8 codes, fp16 steps) of t in `runs` equal runs of its elements,
    each run's step max|t| / div, its codes clamped to [qmin, qmax]."""
    flat = t.reshape(runs, -1)
    scale = (flat.abs().amax(1).clamp_min(1e-10) / div).half()
    codes = torch.round(flat / scale.float()[:, None]).clamp(qmin, qmax)
    return codes.to(torch.int8).reshape(t.shape), scale

def quantize_lqer(A: Tensor, B: Tensor, args: Hyperparameters) -> tuple:
    """(A codes, steps, B codes, steps) of the factors of E ~ A B, A (rows, r),
    B (r, cols). Asymmetric (the 2026-04-27 record): A in [-2, 1], one step;
    B in [-8, 7], a step a LQER_ASYM_GROUP of its elements. Else (or if the
    group does not divide B): LQER_FACTOR_BITS, a step a row of each."""
    group = args.lqer_asym_group
    if args.lqer_asym_enabled and B.numel() % group == 0:
        a = quantize_runs(A, 1, -2, 1, 1.5)
        return *a, *quantize_runs(B, B.numel() // group, -8, 7, 7.5)
    top = 2 ** (args.lqer_factor_bits - 1) - 1
    a = quantize_runs(A, len(A), -top, top, top)
    return *a, *quantize_runs(B, len(B), -top, top, top)

def lqer_factors(state_dict: dict, obj: dict, args: Hyperparameters) -> dict:
    """LQER (the 2026-04-27 record, PR #1797): of the quantized matrices, the
    LQER_TOP_K whose error E = W - dequantized(W) is largest (Frobenius) get
    E's best rank-LQER_RANK fit, A = U S, B = V^T of its SVD, quantized."""
    def error(name: str) -> Tensor:  # (rows, cols) fp32 on the CPU
        q = obj["quantized"][name]
        w = state_dict[name].detach().float().cpu().reshape(len(q), -1)
        return w - dequantize_runs(q, obj["scales"][name]).reshape(w.shape)
    names = [n for n in obj["quantized"] if state_dict[n].numel() > QUANT_KEEP_FLOAT_MAX_NUMEL]
    top = sorted(names, key=lambda n: -float(error(n).norm()))[: args.lqer_top_k]
    factors = {}
    for name in top:
        U, S, Vh = torch.linalg.svd(error(name), full_matrices=False)
        r = min(args.lqer_rank, len(S))
        factors[name] = quantize_lqer(U[:, :r] * S[:r], Vh[:r], args)
    return factors

@torch.no_grad()
def collect_hessians(run: Run, model: GPT) -> dict[str, Tensor]:
    """H = X^T X of each quantized matrix's inputs, over GPTQ_CALIBRATION_BATCHES training batches."""
    args, ctx, log = run.args, run.ctx, run.log
    hessians = {}
    def add(name: str, x: Tensor) -> None:
        x = x.reshape(-1, x.size(-1)).float()
        hessians.setdefault(name, x.new_zeros(x.size(1), x.size(1))).addmm_(x.T, x)
    hooks = [m.register_forward_hook(lambda m, inputs, out, name=n + ".weight": add(name, inputs[0])) for n, m in
             model.named_modules() if isinstance(m, CastedLinear) and m.weight.numel() > QUANT_KEEP_FLOAT_MAX_NUMEL]
    loader, batches, t0 = make_train_loader(args, run.train_files, ctx), args.gptq_calibration_batches, ctx.clock()
    rank_batches = math.ceil(batches / ctx.world_size)  # the ranks share the micro-batches
    for i in range(1, rank_batches + 1):
        x, _ = loader.next_batch(args.train_batch_tokens // GRAD_ACCUM_TOTAL, args.train_seq_len)
        with ctx.autocast():
            add("tok_emb.weight", model.hidden(x))  # the head's inputs
        log.progress["gptq_calibration"] = f"{min(i * ctx.world_size, batches)}/{batches}"
        if i == 1 or 10 * i // rank_batches > 10 * (i - 1) // rank_batches:  # first, then each tenth
            ms = 1000 * (ctx.clock() - t0)
            log.log(gptq_calibration=log.progress["gptq_calibration"], hessian_time=f"{ms:.0f}ms",
                    tokens=i * ctx.world_size * x.numel(), left_est=f"{ms * (rank_batches / i - 1):.0f}ms")
    for hook in hooks:
        hook.remove()
    return {name: ctx.all_reduce(H) for name, H in hessians.items()}

def compressor(name: str, reading: bool = False):
    try:
        return importlib.import_module(COMPRESSORS[name][0])
    except ImportError:  # an artifact needs its own; a run can take another
        other = "" if reading else " (or use COMPRESSOR=lzma, in the standard library)"
        raise ConfigError(f"COMPRESSOR={name} needs the optional {name} package: pip install {name}{other}.") from None

def compress(data: bytes, name: str) -> bytes:
    _, keywords, planes = COMPRESSORS[name]
    if planes > 1:  # byte k of every planes-byte word together: [b0 b2 b4 ... | b1 b3 b5 ...]
        data = np.frombuffer(data + bytes(-len(data) % planes), np.uint8).reshape(-1, planes).T.tobytes()
    return compressor(name).compress(data, **keywords)

def decompress(blob: bytes, name: str, planes: int, size: int) -> bytes:
    data = compressor(name, reading=True).decompress(blob)
    return np.frombuffer(data, np.uint8).reshape(planes, -1).T.tobytes()[:size] if planes > 1 else data

# Model settings the root trainer lacks, and their "off". Left out of the
# header while off, so that the artifact is then the root's byte for byte;
# read back as off where a header lacks them.
NEW_MODEL_SETTINGS = {"doc_mask": False, "smear_gate_enabled": False, "gate_window": 12,
                      "attn_out_gate_enabled": False, "gated_attn_enabled": False,
                      "sparse_attn_gate_enabled": False, "sparse_attn_gate_scale": 1.0}
# Export settings the root lacks, and their "off": left out of the header
# the same way. A header's export settings describe it; none is checked.
NEW_EXPORT_SETTINGS = {"mlp_clip_sigmas": 0.0, "attn_clip_sigmas": 0.0,
                       "gated_attn_quant_gate": False, "lqer_enabled": False, "lqer_rank": 4,
                       "lqer_top_k": 3, "lqer_factor_bits": 4, "lqer_asym_enabled": True,
                       "lqer_asym_group": 64}

def set_settings(settings: dict, new: dict) -> dict:  # less the new ones while off
    return {k: v for k, v in settings.items() if k not in new or v != new[k]}

def artifact_header(args: Hyperparameters, weights: str, looping: bool) -> dict:
    model = set_settings(args.settings("model"), NEW_MODEL_SETTINGS)
    export = set_settings(args.settings("export"), NEW_EXPORT_SETTINGS)
    return dict(export, byte_shuffle=COMPRESSORS[args.compressor][2], weights=weights,
                looping=looping, tokenizer_sha256=file_sha256(args.tokenizer_path), model=model)

def payload_bytes(obj: dict) -> bytes:  # what torch.save writes
    torch.save(obj, buffer := io.BytesIO())
    return buffer.getvalue()

def save_artifact(obj: dict, header: dict, path: str) -> tuple[int, int]:
    """Header line + compressed payload, written atomically: (raw payload bytes, file bytes)."""
    raw = payload_bytes(obj)
    payload = compress(raw, header["compressor"])
    header = dict(header, payload_bytes=len(raw), payload_sha256=hashlib.sha256(payload).hexdigest())
    blob = ARTIFACT_MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + payload
    tmp = Path(f"{path}.tmp{os.getpid()}")  # renamed: none sees half a file
    try:  # an interrupt or a full disk leaves no temp file
        tmp.write_bytes(blob)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return len(raw), len(blob)

def read_artifact(path: str, args: Hyperparameters) -> tuple[dict, dict[str, Tensor]]:
    """(header, weights) of the artifact at path; its model must be the config's, its payload intact."""
    require_file("ARTIFACT_PATH", path, "Point it at the .ptz file that a run wrote.")
    blob, ours = Path(path).read_bytes(), args.settings("model") | {"embedding_dim": 0}  # retired: 0 is none
    require(blob.startswith(ARTIFACT_MAGIC), f"ARTIFACT_PATH={path} is not an artifact of this script (no "
            f"'{ARTIFACT_MAGIC.decode().strip()}' header): export it again.")
    damaged = f"ARTIFACT_PATH={path} is damaged ({{}}): copy it again from where the run wrote it, or export it again."
    try:  # cut or changed bytes: say so, not where the parser tripped
        line, payload = blob[len(ARTIFACT_MAGIC) :].split(b"\n", 1)
        header, sha = json.loads(line), hashlib.sha256(payload).hexdigest()
        require(header.get("payload_sha256", sha) == sha, damaged.format("its payload is not the one its header names"))
        model = NEW_MODEL_SETTINGS | header["model"]  # off where absent
        diff = [f"{k.upper()}={v} (config: {ours.get(k)})"
                for k, v in model.items() if ours.get(k) != v]
        raw = decompress(payload, header["compressor"], header["byte_shuffle"], header["payload_bytes"])
        obj = torch.load(io.BytesIO(raw), map_location="cpu")
        weights = dequantize_state_dict(obj)
    except ConfigError:  # damaged, or its compressor is not installed
        raise
    except Exception as exc:
        raise ConfigError(damaged.format(str(exc)[:200])) from None
    require(not diff, f"ARTIFACT_PATH={path} holds another model: {', '.join(diff)}. Set them as its run did "
            "(its log's config: line).")
    made_with = header.get("tokenizer_sha256")  # None: an older artifact
    same = made_with in (None, file_sha256(args.tokenizer_path))
    require(same or args.allow_other_tokenizer, f"ARTIFACT_PATH={path} was made with another tokenizer (sha256 "
            f"{made_with}) than TOKENIZER_PATH: set it as that run did, or ALLOW_OTHER_TOKENIZER=1.")
    return header | {"quantized_tensors": f"{len(obj['quantized'])}/{len(weights)}", "path": path}, weights

# ==== Training ================================================================
# The clock counts training steps only (not the compile warm-up, not validation), up to the cap less
# GPTQ_RESERVE_SECONDS. The lr decays linearly over the last WARMDOWN_FRAC of it.

NO_BAD_STEP = 2**62  # "no non-finite loss yet", on the device: no sync per step
NOT_FINITE_FIX = "lower the learning rates (MATRIX_LR, SCALAR_LR, TIED_EMBED_LR) or set GRAD_CLIP_NORM."

def schedule(step: int, elapsed_ms: float, args: Hyperparameters) -> tuple[float, float, bool]:
    """This step's lr multiplier (what is left of the warm-down), Muon momentum, and whether the layers loop."""
    frac = elapsed_ms / args.train_cap_ms if args.train_cap_ms > 0 else step / max(args.iterations, 1)
    if args.warmdown_frac > 0:  # wins over WARMDOWN_ITERS (the log says which ran)
        mult = (1.0 - frac) / args.warmdown_frac
    elif args.warmdown_iters <= 0:
        mult = 1.0
    elif args.train_cap_ms <= 0:
        mult = (args.iterations - step) / args.warmdown_iters
    else:  # WARMDOWN_ITERS steps at the mean step time so far, before the cap
        mult = max(args.train_cap_ms - elapsed_ms, 0.0) / max(args.warmdown_iters * elapsed_ms / max(step, 1), 1e-9)
    warm = min(step / args.muon_momentum_warmup_steps, 1.0) if args.muon_momentum_warmup_steps > 0 else 1.0
    momentum = (1 - warm) * args.muon_momentum_warmup_start + warm * args.muon_momentum
    return max(min(mult, 1.0), args.min_lr), momentum, args.num_loops > 0 and frac >= args.enable_looping_at

class EMA:
    """An fp32 average of the parameters, ema = decay * ema + (1 - decay) * p after each step."""
    def __init__(self, model: nn.Module, decay: float):
        self.decay, self.params = decay, list(model.parameters())
        self.shadow = [p.detach().float().clone() for p in self.params]

    @torch.no_grad()
    def update(self) -> None:
        torch._foreach_lerp_(self.shadow, [p.float() for p in self.params], 1.0 - self.decay)

    @torch.no_grad()
    def copy_to_model(self) -> None:
        torch._foreach_copy_(self.params, self.shadow)

@dataclasses.dataclass
class TrainState:
    model: GPT
    step_model: nn.Module  # what a step calls: the GPT, compiled on CUDA, in DDP with several processes
    optimizers: list[torch.optim.Optimizer]

def train_step(run: Run, state: TrainState, loader, lr_scale: float, momentum: float) -> Tensor:
    """One optimizer step over TRAIN_BATCH_TOKENS; this rank's mean loss (on the device)."""
    args, ctx = run.args, run.ctx
    total_loss = torch.zeros((), device=ctx.device)
    for micro_step in range(ctx.grad_accum_steps):
        if ctx.distributed:  # all-reduce gradients once, after the last micro-batch
            state.step_model.require_backward_grad_sync = micro_step == ctx.grad_accum_steps - 1
        x, y = loader.next_batch(args.train_batch_tokens // GRAD_ACCUM_TOTAL, args.train_seq_len)
        with ctx.autocast():
            loss = state.step_model(x, y)
        total_loss += loss.detach()
        (loss / ctx.grad_accum_steps).backward()
    if args.grad_clip_norm > 0:
        params = [p for opt in state.optimizers for group in opt.param_groups for p in group["params"]]
        torch.nn.utils.clip_grad_norm_(params, args.grad_clip_norm)
    for opt in state.optimizers:  # this step's schedule, then the step
        for group in opt.param_groups:
            group["lr"] = group["base_lr"] * lr_scale
            if isinstance(opt, Muon):
                group["momentum"] = momentum
        opt.step()
        opt.zero_grad()
    return total_loss / ctx.grad_accum_steps

def warmup_and_restore(run: Run, state: TrainState) -> None:
    """WARMUP_STEPS real steps (both layer orders, with loops) compile off the clock, then are undone."""
    args, log, model = run.args, run.log, state.model
    initial = copy.deepcopy([model.state_dict(), *(opt.state_dict() for opt in state.optimizers)])
    loader = make_train_loader(args, run.train_files, run.ctx)
    for looping in [False, True] if args.num_loops > 0 else [False]:
        model.looping = looping
        for step in range(args.warmup_steps):
            log.progress = {"step": f"0/{args.iterations}", "warmup_step": f"{step}/{args.warmup_steps}"}
            train_step(run, state, loader, 1.0, schedule(step, 0.0, args)[1])
            if step < 3 or (step + 1) % 10 == 0 or step + 1 == args.warmup_steps:
                log.log(warmup_step=f"{step + 1}/{args.warmup_steps}", looping=int(looping))
    model.looping = False
    for part, saved in zip([model, *state.optimizers], initial):
        part.load_state_dict(saved)
    log.log(warmup_steps=args.warmup_steps, warmup_time=f"{1000 * log.phase('warmup'):.0f}ms")

def check_finite(bad_step: Tensor, ctx: DistContext) -> None:
    step = ctx.all_reduce(bad_step, dist.ReduceOp.MIN).item()
    require(step == NO_BAD_STEP, f"train_loss is not finite at step {step}: {NOT_FINITE_FIX}", FloatingPointError)

def log_validation(run: Run, model: GPT, step: int, weights: str, **timing) -> None:
    val_loss, val_bpb = loss_and_bpb(score_windows(model, run.val, run.ctx))  # the same on every rank: all stop
    require(math.isfinite(val_loss), f"val_loss is not finite after step {step}: {NOT_FINITE_FIX}", FloatingPointError)
    run.log.log(step=f"{step}/{run.args.iterations}", val_loss=f"{val_loss:.8f}", val_bpb=f"{val_bpb:.8f}",
                weights=weights, **timing)  # full precision: ab.py pairs these values
    run.log.phase("validation")

def train(run: Run, state: TrainState) -> tuple[int, EMA | None, float]:
    """Steps to ITERATIONS or the cap (the clock paused to validate): steps, EMA or None, training ms."""
    args, ctx, log, model = run.args, run.ctx, run.log, state.model
    loader = make_train_loader(args, run.train_files, ctx)
    ema = EMA(model, args.ema_decay) if args.ema_decay > 0 else None
    training_ms, reached_cap, step = 0.0, False, 0
    bad_step = torch.tensor(NO_BAD_STEP, device=ctx.device)
    t0 = ctx.clock()
    while True:
        last_step = step == args.iterations or reached_cap
        if last_step or (args.val_loss_every > 0 and step % args.val_loss_every == 0):
            training_ms += 1000 * (ctx.clock() - t0)
            check_finite(bad_step, ctx)
            log.phase("train")
            log_validation(run, model, step, "raw", train_time=f"{training_ms:.0f}ms",
                           step_avg=f"{training_ms / max(step, 1):.2f}ms")
            t0 = ctx.clock()
        if last_step:
            break
        elapsed_ms = training_ms + 1000 * (time.perf_counter() - t0)
        lr_scale, momentum, looping = schedule(step, elapsed_ms, args)
        if looping and not model.looping:
            model.looping = True
            log.log(layer_loop="enabled", step=step, train_time=f"{elapsed_ms:.0f}ms",
                    order="-".join(map(str, sum(model.orders[True], []))))
        loss = train_step(run, state, loader, lr_scale, momentum)
        if ema is not None:
            ema.update()
        bad_step = torch.minimum(bad_step, torch.where(torch.isfinite(loss), NO_BAD_STEP, step + 1))
        step += 1
        elapsed_ms = training_ms + 1000 * (time.perf_counter() - t0)
        log.progress = {"step": f"{step}/{args.iterations}", "train_time": f"{elapsed_ms:.0f}ms"}
        reached_cap = 0 < args.train_cap_ms <= elapsed_ms
        if ctx.distributed and args.train_cap_ms > 0:  # all ranks stop at once, whatever their clocks say
            reached_cap = bool(ctx.all_reduce(torch.tensor(int(reached_cap), device=ctx.device), dist.ReduceOp.MAX))
        if step <= 10 or step % args.train_log_every == 0 or reached_cap:
            check_finite(bad_step, ctx)
            mean_loss = ctx.all_reduce(loss) / ctx.world_size  # over all ranks' micro-batches
            log.log(step=f"{step}/{args.iterations}", train_loss=mean_loss.item(), train_time=f"{elapsed_ms:.0f}ms",
                    step_avg=f"{elapsed_ms / step:.2f}ms",
                    tokens_per_s=f"{step * args.train_batch_tokens / (elapsed_ms / 1000):.0f}")
    if reached_cap and step < args.iterations:
        log.log(stopping_early="wallclock_cap", train_time=f"{training_ms:.0f}ms", step=f"{step}/{args.iterations}")
    return step, ema, training_ms

def export(run: Run, model: GPT, weights: str, train_ms: float) -> str:
    """GPTQ's Hessians (every rank) and rounding (rank 0), timed; rank 0 writes the artifact: its path."""
    args, ctx, log, written = run.args, run.ctx, run.log, [run.args.artifact_path]
    hessians = collect_hessians(run, model) if args.gptq_calibration_batches > 0 else None
    if ctx.rank == 0:
        obj = quantize_state_dict(model.state_dict(), args, parameter_roles(model), hessians)
        gptq_ms, cap_ms = 1000 * log.phase("quantize"), 1000 * args.max_wallclock_seconds
        if hessians is not None:
            log.log(gptq_hessians=len(hessians), gptq_time=f"{gptq_ms:.0f}ms",
                    train_plus_gptq_time=f"{train_ms + gptq_ms:.0f}ms",
                    within_cap="yes" if not cap_ms or train_ms + gptq_ms <= cap_ms else "NO")
        if Path(args.artifact_path).exists():  # an earlier run's: kept, named by its sha256
            moved = f"{args.artifact_path}.{file_sha256(args.artifact_path)[:12]}"
            os.replace(args.artifact_path, moved)
            log.log(artifact_previous_moved_to=moved)
        try:
            save_artifact(obj, artifact_header(args, weights, model.looping), args.artifact_path)
        except OSError as exc:  # a full disk must not lose the model: the temp folder
            written = [str(Path(tempfile.gettempdir(), f"{args.run_id}.ptz"))]
            log.log(artifact_write_failed=args.artifact_path, reason=str(exc.strerror).replace(" ", "_"))
            save_artifact(obj, artifact_header(args, weights, model.looping), written[0])
    if ctx.distributed:  # also the barrier: no rank reads the artifact before it exists
        dist.broadcast_object_list(written, src=0)
    log.phase("artifact_write")
    return written[0]

def score_artifact(run: Run, model: GPT, header: dict, weights: dict[str, Tensor], observe=None) -> None:
    """Its bytes, then each scoring path asked for, timed: roundtrip, sliding_window, ttt (the last one scores)."""
    args, ctx, log, spent_ms = run.args, run.ctx, run.log, []
    model_bytes, code_bytes = Path(header["path"]).stat().st_size, Path(__file__).stat().st_size
    total, raw, made_with = code_bytes + model_bytes, header["payload_bytes"], header.get("tokenizer_sha256", "none")
    log.log(artifact=header["path"], sha256=file_sha256(header["path"]), code_bytes=code_bytes,
            model_bytes=model_bytes, quantized_tensors=header["quantized_tensors"], total_bytes=total,
            limit_bytes=ARTIFACT_LIMIT_BYTES, within_limit="yes" if total <= ARTIFACT_LIMIT_BYTES else "NO",
            payload_raw_bytes=raw, compression_ratio=f"{raw / model_bytes:.3f}", eval_seq_len=run.val.seq_len,
            tokenizer="same" if made_with == file_sha256(args.tokenizer_path) else made_with)
    if header["quantized_tensors"].startswith("0/"):  # all fp16/fp32, whatever int{bits} the score lines say
        log.log(quant_note="nothing_quantized", quantized_only_over_values=QUANT_KEEP_FLOAT_MAX_NUMEL)
    model.load_state_dict(weights)
    model.looping = header["looping"]
    log.phase("artifact_load")  # EVAL_ONLY: read in the pre-flight, the model built
    def timed_score(kind: str, score, *inputs, **window) -> None:  # the records' timed_eval
        log.progress = dict(log.progress, scoring=kind)
        val_loss, val_bpb = loss_and_bpb(score(*inputs, observe=observe and observe(kind)))
        spent_ms.append(1000 * log.phase(kind))
        log.log(**{f"{kind}_val_loss": val_loss, f"{kind}_val_bpb": val_bpb}, weights=header["weights"], **window,
                eval_time=f"{spent_ms[-1]:.0f}ms", eval_time_8gpu_est=f"{spent_ms[-1] * ctx.world_size / 8:.0f}ms",
                total_eval_time_8gpu_est=f"{sum(spent_ms) * ctx.world_size / 8:.0f}ms")
        log.text(f"final_int{header['matrix_bits']}_{header['compressor']}_{kind}_exact val_loss:{val_loss:.8f} "
                 f"val_bpb:{val_bpb:.8f}")
    window = dict(eval_stride=args.eval_stride, eval_seq_len=run.val.seq_len)
    timed_score("roundtrip", score_windows, model, run.val, ctx)
    if args.eval_stride > 0:
        timed_score("sliding_window", score_windows, model, run.val, ctx, args.eval_stride, **window)
    if args.ttt_enabled:
        ttt = score_docs_with_ttt if args.ttt_mode == "doc" else score_with_ttt
        timed_score("ttt", ttt, run, model, **window)

# ==== Pre-flight and main =====================================================
# Every input is checked before a process group or a GPU is touched; errors end as "error: ..." (exit 2).

def preflight(args: Hyperparameters, ctx: DistContext) -> Run:
    train_files = [] if args.eval_only else find_shards(args.data_path, "train")  # all now, not an hour in
    if train_files and sum(len(read_shard(path, args.vocab_size)) for path in train_files) == 0:  # a loop forever
        raise ShardError(f"the training shards in {args.data_path} hold no tokens: rebuild or re-download them.")
    if not args.eval_only:  # an optional compressor: checked before training, not after
        compressor(args.compressor)
    folder_named = args.artifact_path.endswith(("/", os.sep)) or Path(args.artifact_path).is_dir()
    require(args.eval_only or not folder_named, f"ARTIFACT_PATH={args.artifact_path} names a folder: name the file.")
    log_bytes = 200 * (args.iterations // args.train_log_every + 1000)  # ~200 B a line; on the artifact's disk too
    for name, folder in ("LOG_DIR", Path(args.log_dir)), ("ARTIFACT_PATH", Path(args.artifact_path).parent):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            tempfile.TemporaryFile(dir=folder).close()  # a probe: not minutes of training, then no save
        except OSError as exc:
            raise ConfigError(f"{name}: cannot write in {folder} ({exc.strerror}): point it at a writable folder.")
        need = log_bytes + (ARTIFACT_LIMIT_BYTES if name == "ARTIFACT_PATH" and not args.eval_only else 0)
        require((free := shutil.disk_usage(folder).free) >= need, f"{name}: {folder} has {free:,} bytes free, under "
                f"the {need:,} this run may write there: free some, or point {name} at another disk.")
    val_files = find_shards(args.data_path, "val")
    tokens = torch.cat([load_data_shard(f, args.vocab_size) for f in val_files]).to(torch.int64)
    T, seq = args.val_seq_len, "EVAL_SEQ_LEN" if args.eval_seq_len else "TRAIN_SEQ_LEN"
    usable = (tokens.numel() - 1) // T * T  # whole sequences, at least one per rank
    require(usable >= T * ctx.world_size, f"the validation split ({tokens.numel()} tokens in {val_files[0].parent}) "
            f"holds under one {seq}={T} sequence (+1) per rank: add validation data or lower {seq}.")
    sp = load_tokenizer(args.tokenizer_path, args.vocab_size)
    require(not args.doc_mask or sp.bos_id() == BOS_ID,
            f"DOC_MASK=1 starts documents at token {BOS_ID}, the shards' BOS, "
            f"but TOKENIZER_PATH's BOS is {sp.bos_id()}: build the shards "
            f"with a tokenizer whose BOS is {BOS_ID}.")
    verified = check_shards(sp, args, val_files, train_files)  # before the sidecars' check
    artifact = read_artifact(args.artifact_path, args) if args.eval_only else None  # its model, tokenizer, payload
    token_bytes, bytes_from = val_token_bytes(args, val_files, tokens, sp)
    loss_impl = resolve_loss_impl(args, ctx.device)
    attn_impl = resolve_attn_impl(args, ctx.device)
    log_path = Path(args.log_dir) / f"{args.run_id}.txt"
    require(not log_path.exists(), f"{log_path} already exists: set another RUN_ID (logs are kept).")
    init_distributed(ctx)  # every input has passed: now the GPU and the process group
    batch_seqs = max(args.val_batch_size // (ctx.world_size * ctx.grad_accum_steps) // T, 1)
    val = ValData(tokens[: usable + 1], token_bytes[: usable + 1].to(ctx.device), bytes_from, T, batch_seqs)
    logger = Logger(log_path if ctx.rank == 0 else None)
    return Run(args, ctx, logger, val, train_files, loss_impl, attn_impl,
               verified, artifact)

def log_header(run: Run) -> None:
    args, ctx, log = run.args, run.ctx, run.log
    log.text(Path(__file__).read_text(encoding="utf-8") + "\n" + "=" * 100, console=False)  # the code
    gpu = torch.cuda.get_device_name(ctx.device).replace(" ", "_") if ctx.device.type == "cuda" else "none"
    log.log(python=platform.python_version(), torch=torch.__version__, cuda=torch.version.cuda, gpu=gpu,
            world_size=ctx.world_size, grad_accum_steps=ctx.grad_accum_steps, device=ctx.device.type)
    log.text("config:" + json.dumps(dataclasses.asdict(args), sort_keys=True))
    warmdown = f"frac_{args.warmdown_frac}_wins_over_WARMDOWN_ITERS" if args.warmdown_frac > 0 else ""
    log.log(loss_impl=run.loss_impl[0], loss_impl_reason=run.loss_impl[1].replace(" ", "_"),
            compile=args.compile and ctx.device.type == "cuda", tokenizer_verified=run.tokenizer_verified,
            warmdown=warmdown or f"iters_{args.warmdown_iters}", **run.val.bytes_from)
    if ctx.device.type == "cpu" and args.train_batch_tokens >= Hyperparameters.train_batch_tokens:
        log.text("cpu_note: these are GPU settings (minutes a step on a CPU); a CPU smoke run: head -n 10 train_gpt.py")
    if "CASEOPS_ENABLED" in os.environ:  # the records' switch
        log.text("caseops_note: CASEOPS_ENABLED has no effect: the data decides (val_bytes above)")

def train_and_score(run: Run) -> None:
    args, ctx, log = run.args, run.ctx, run.log
    on_cuda, compiled = ctx.device.type == "cuda", args.compile and ctx.device.type == "cuda"
    log_header(run)
    log.phase("startup")
    torch.manual_seed(args.seed)
    if args.doc_mask:
        impl, why = run.attn_impl
        log.log(doc_mask=1, attn_impl=impl, attn_impl_reason=why)
    dtype = torch.bfloat16 if on_cuda else torch.float32
    model = GPT(args, run.loss_impl[0], dtype, compiled, run.attn_impl[0])
    model = model.to(ctx.device)
    if args.eval_only:
        return score_artifact(run, model, *run.artifact)
    raw_bytes = len(payload_bytes(quantize_state_dict(model.state_dict(), args, parameter_roles(model))))
    code_bytes = Path(__file__).stat().st_size
    room = max(ARTIFACT_LIMIT_BYTES - code_bytes, 1)  # bytes left for the weights
    log.log(model_params=sum(p.numel() for p in model.parameters()), payload_raw_bytes=raw_bytes, code_bytes=code_bytes,
            limit_bytes=ARTIFACT_LIMIT_BYTES, compression_needed=f"{raw_bytes / room:.2f}x",
            val_tokens=run.val.tokens.numel() - 1, loss_chunk_tokens=model.loss_chunk_tokens)
    step_model = torch.compile(model, dynamic=False, fullgraph=True) if compiled else model
    if ctx.distributed:
        step_model = nn.parallel.DistributedDataParallel(step_model, device_ids=[ctx.local_rank] if on_cuda else None)
    orthogonalize = torch.compile(newton_schulz_orthogonalize, dynamic=False) if compiled else None
    state = TrainState(model, step_model, build_optimizers(model, args, orthogonalize))
    log.phase("model")
    if args.warmup_steps > 0:
        warmup_and_restore(run, state)
    steps, ema, train_ms = train(run, state)
    if on_cuda:
        log.log(peak_memory_allocated=f"{torch.cuda.max_memory_allocated() // 2**20}MiB",
                peak_memory_reserved=f"{torch.cuda.max_memory_reserved() // 2**20}MiB", steps=steps)
    if ema is not None:  # from here on the model holds the average: it is exported and scored
        ema.copy_to_model()
        log_validation(run, model, steps, "ema")
    path = export(run, model, "raw" if ema is None else "ema", train_ms)
    score_artifact(run, model, *read_artifact(path, args))

def raise_interrupt(signum, frame):  # SIGINT and SIGTERM alike: unwind, log the step reached
    raise KeyboardInterrupt(signal.Signals(signum).name)

def main() -> None:
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, raise_interrupt)
    if sys.argv[1:] in (["-h"], ["--help"]):  # the usage: the docstring's launch lines
        print(__doc__)
        return
    require(len(sys.argv) == 1, f"train_gpt.py takes no arguments ({' '.join(sys.argv[1:])}): settings are env vars")
    run = preflight(Hyperparameters.from_env(), dist_context())
    try:
        train_and_score(run)
        if run.ctx.distributed:  # together: gloo aborts if a peer closes its pairs first
            dist.barrier()
    except Exception as exc:  # keep the reason in the log, then fail as usual
        run.log.text(f"error:{type(exc).__name__} {exc}")
        raise
    except KeyboardInterrupt as exc:
        run.log.log(interrupted=exc.args[0], **run.log.progress)
        raise
    finally:  # the log needs no closing: unbuffered, each line is on disk
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    run.log.phase("teardown")  # the barrier, the process group's end
    run.log.log(wall_time=f"{run.log.marks[-1][0] - run.log.marks[0][0]:.2f}s", since=run.log.since)

if __name__ == "__main__":
    try:
        main()
    except (ConfigError, ShardError, FileNotFoundError, FloatingPointError) as exc:
        if os.environ.get("RANK", "0") == "0":  # every rank finds the same fault: one says so
            print(f"error: {recipe_note(str(exc), os.environ)}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt as exc:  # SIGINT, or SIGTERM (raise_interrupt): exit 128 + the signal
        name = exc.args[0] if exc.args else "SIGINT"
        print(f"interrupted: {name}; the log's last line says where the run was", file=sys.stderr)
        sys.exit(128 + getattr(signal, name))
    sys.stdout.flush()  # the log is on disk (unbuffered): skip the interpreter's teardown,
    os._exit(0)  # which no line can time and where gloo's threads can abort (pytorch PR 179291)
