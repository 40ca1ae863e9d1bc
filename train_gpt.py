"""train_gpt.py: the parameter-golf reference trainer, in one file.

Trains a small GPT whose artifact (this file's bytes + int8/zlib-compressed weights) must fit in
16,000,000 bytes, and scores it in bits per byte on the FineWeb validation split *after* the
quantize -> compress -> decompress round trip. Every setting is an environment variable (the
`Hyperparameters` field name, upper-cased); the whole resolved config is logged.

  # CPU smoke run (tiny model, a few steps; any shard folder and matching tokenizer):
  ITERATIONS=20 NUM_LAYERS=2 MODEL_DIM=64 NUM_HEADS=2 NUM_KV_HEADS=1 TRAIN_SEQ_LEN=128 \
    TRAIN_BATCH_TOKENS=8192 VAL_BATCH_SIZE=8192 MAX_WALLCLOCK_SECONDS=0 python3 train_gpt.py
  # one GPU:
  python3 train_gpt.py
  # eight GPUs (any count that divides 8 works; the global batch stays the same):
  torchrun --standalone --nproc_per_node=8 train_gpt.py

Sections, in order: config, logging and distributed helpers, data, the output loss (PyTorch
reference and Triton kernel), model, optimizers, evaluation, export, training, main().
"""

from __future__ import annotations

import dataclasses
import difflib
import glob
import io
import json
import math
import os
import platform
import sys
import time
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

# =================================================================================================
# Config
# One dataclass; every field is read from the environment variable of the same name upper-cased.
# Everything is validated before any GPU work, because a typo found after compiling on 8 GPUs is
# ten wasted minutes. An unknown variable that looks like one of ours is an error, not a no-op.
# =================================================================================================


class ConfigError(ValueError):
    """A setting that cannot work; the message names the variable and the fix."""


@dataclass
class Hyperparameters:
    # paths and run
    data_path: str = "./data/datasets/fineweb10B_sp1024"
    tokenizer_path: str = "./data/tokenizers/fineweb_1024_bpe.model"
    run_id: str = ""  # empty: a fresh timestamped id
    log_dir: str = "logs"
    artifact_path: str = "final_model.int8.ptz"
    seed: int = 1337
    val_batch_size: int = 524_288  # validation tokens per step, summed over ranks and micro-steps
    val_loss_every: int = 1000  # 0: validate only at the end
    train_log_every: int = 200
    # length
    iterations: int = 20_000
    warmdown_iters: int = 3000
    warmup_steps: int = 20  # compile warm-up steps, undone before training starts
    train_batch_tokens: int = 393_216
    train_seq_len: int = 4096
    max_wallclock_seconds: float = 600.0  # 0: no cap
    # model
    vocab_size: int = 1024
    num_layers: int = 9
    model_dim: int = 512
    num_heads: int = 8
    num_kv_heads: int = 4
    mlp_mult: int = 2
    tie_embeddings: bool = True
    rope_base: float = 10_000.0
    logit_softcap: float = 30.0
    qk_gain_init: float = 1.5
    # optimizers
    matrix_lr: float = 0.02
    scalar_lr: float = 0.02
    tied_embed_lr: float = 0.03
    tied_embed_init_std: float = 0.005
    embed_lr: float = 0.6
    head_lr: float = 0.008
    muon_momentum: float = 0.99
    muon_momentum_warmup_start: float = 0.92
    muon_momentum_warmup_steps: int = 1500
    muon_backend_steps: int = 5
    beta1: float = 0.9
    beta2: float = 0.95
    adam_eps: float = 1e-8
    grad_clip_norm: float = 0.0  # 0: off
    # implementation
    loss_chunk_tokens: int = 16_384  # tokens per chunk of the output loss
    loss_impl: str = "auto"  # auto (triton on CUDA, torch elsewhere) | triton | torch
    compile: bool = True  # torch.compile on CUDA; always off on CPU

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Hyperparameters:
        environ = dict(os.environ if environ is None else environ)
        check_unknown_env(environ, [f.name.upper() for f in dataclasses.fields(cls)])
        values = {}
        for f in dataclasses.fields(cls):
            raw = environ.get(f.name.upper())
            if raw is not None:
                values[f.name] = parse_env_value(f.name.upper(), raw, type(f.default))
        args = cls(**values)
        args.validate()
        return args

    def validate(self) -> None:
        def need(ok: bool, message: str) -> None:
            if not ok:
                raise ConfigError(message)

        positive = ["val_batch_size", "train_log_every", "train_batch_tokens", "train_seq_len",
                    "vocab_size", "num_layers", "model_dim", "num_heads", "num_kv_heads", "mlp_mult",
                    "rope_base", "logit_softcap", "muon_backend_steps", "loss_chunk_tokens", "adam_eps"]
        for name in positive:
            need(getattr(self, name) > 0, f"{name.upper()}={getattr(self, name)} must be > 0.")
        non_negative = ["val_loss_every", "iterations", "warmdown_iters", "warmup_steps",
                        "max_wallclock_seconds", "muon_momentum_warmup_steps", "grad_clip_norm",
                        "matrix_lr", "scalar_lr", "tied_embed_lr", "embed_lr", "head_lr",
                        "tied_embed_init_std"]
        for name in non_negative:
            need(getattr(self, name) >= 0, f"{name.upper()}={getattr(self, name)} must be >= 0.")
        for name in ["muon_momentum", "muon_momentum_warmup_start", "beta1", "beta2"]:
            need(0 <= getattr(self, name) < 1, f"{name.upper()}={getattr(self, name)} must be in [0, 1).")
        need(self.model_dim % self.num_heads == 0,
             f"NUM_HEADS={self.num_heads} must divide MODEL_DIM={self.model_dim}.")
        head_dim = self.model_dim // self.num_heads
        need(head_dim % 2 == 0, f"MODEL_DIM/NUM_HEADS={head_dim} (the head size) must be even for rotary "
             "embeddings: change MODEL_DIM or NUM_HEADS.")
        need(self.num_heads % self.num_kv_heads == 0,
             f"NUM_KV_HEADS={self.num_kv_heads} must divide NUM_HEADS={self.num_heads}.")
        need(self.vocab_size <= 65_536, f"VOCAB_SIZE={self.vocab_size} must be <= 65536: shards store uint16 tokens.")
        need(self.train_batch_tokens % (GRAD_ACCUM_TOTAL * self.train_seq_len) == 0,
             f"TRAIN_BATCH_TOKENS={self.train_batch_tokens} must be a multiple of "
             f"{GRAD_ACCUM_TOTAL}*TRAIN_SEQ_LEN={GRAD_ACCUM_TOTAL * self.train_seq_len} (8 micro-batches "
             "of whole sequences, split over the ranks).")
        need(self.val_batch_size >= GRAD_ACCUM_TOTAL * self.train_seq_len,
             f"VAL_BATCH_SIZE={self.val_batch_size} must be at least {GRAD_ACCUM_TOTAL}*TRAIN_SEQ_LEN="
             f"{GRAD_ACCUM_TOTAL * self.train_seq_len} (one sequence per micro-batch).")
        need(self.loss_impl in ("auto", "triton", "torch"),
             f"LOSS_IMPL={self.loss_impl!r} must be one of auto, triton, torch.")
        need(bool(self.run_id) == bool(self.run_id.strip()) and "/" not in self.run_id,
             f"RUN_ID={self.run_id!r} must be a plain file name (no '/', not blank).")


GRAD_ACCUM_TOTAL = 8  # micro-batches per step, summed over ranks: world size must divide it
ENV_PREFIXES_NOT_OURS = ("OMP_", "CUDA_", "NCCL_", "TORCH", "PYTORCH_", "TRITON_", "MASTER_", "LOCAL_",
                         "GROUP_", "ROLE_", "NVIDIA_", "PYTHON", "LC_", "XDG_", "MKL_", "KMP_", "GLOO_")


def parse_env_value(name: str, raw: str, kind: type):
    text = raw.strip()
    try:
        if kind is bool:
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if kind is int:
            try:
                return int(text)
            except ValueError:  # accept 1e5 or 2048.0, but not 2.5
                value = float(text)
                if not value.is_integer():
                    raise
                return int(value)
        if kind is float:
            value = float(text)
            if not math.isfinite(value):
                raise ValueError
            return value
        return raw
    except ValueError:
        expected = {bool: "0 or 1", int: "an integer", float: "a finite number"}[kind]
        raise ConfigError(f"{name}={raw!r} is not {expected}.") from None


def check_unknown_env(environ: dict[str, str], known: list[str]) -> None:
    """A variable close to one of ours (NUM_LAYER for NUM_LAYERS) is almost surely a typo."""
    for name in environ:
        if name in known or not name.isupper() or name.startswith(ENV_PREFIXES_NOT_OURS):
            continue
        near = difflib.get_close_matches(name, known, n=1, cutoff=0.85)
        if near:
            raise ConfigError(f"unknown environment variable {name}={environ[name]!r}: did you mean "
                              f"{near[0]}? Rename it, or unset it if it is not meant for this script.")


# =================================================================================================
# Logging and distributed helpers
# Rank 0 writes logs/RUN_ID.txt (flushed as it goes) and prints; other ranks stay silent. Every
# event is one line of key:value tokens so that logs can be parsed; units are part of the names.
# =================================================================================================


@dataclass
class DistContext:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    grad_accum_steps: int

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def read_dist_env() -> tuple[int, int, int]:
    try:
        rank, world_size = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    except ValueError:
        raise ConfigError("RANK, WORLD_SIZE and LOCAL_RANK must be integers (torchrun sets them).") from None
    if world_size < 1 or GRAD_ACCUM_TOTAL % world_size:
        raise ConfigError(f"WORLD_SIZE={world_size} must divide {GRAD_ACCUM_TOTAL}: run with "
                          "--nproc_per_node of 1, 2, 4 or 8.")
    return rank, world_size, local_rank


def setup_distributed() -> DistContext:
    rank, world_size, local_rank = read_dist_env()
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if world_size > 1:
        backend = "nccl" if device.type == "cuda" else "gloo"
        kwargs = {"device_id": device} if device.type == "cuda" else {}
        dist.init_process_group(backend=backend, **kwargs)
    return DistContext(rank, world_size, local_rank, device, GRAD_ACCUM_TOTAL // world_size)


def teardown_distributed() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


class Logger:
    """Rank 0 appends to the log file and prints; `log(**fields)` writes one key:value line."""

    def __init__(self, path: Path | None):
        self.file = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.file = open(path, "x", encoding="utf-8")  # "x": never overwrite an earlier run's log

    def text(self, message: str, console: bool = True) -> None:
        if self.file is None:
            return
        if console:
            print(message, flush=True)
        self.file.write(message + "\n")
        self.file.flush()

    def log(self, **fields) -> None:
        self.text(" ".join(f"{k}:{format_value(v)}" for k, v in fields.items()))

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


def format_value(value) -> str:
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 1e6 else f"{value:.0f}"
    return str(value)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# =================================================================================================
# Data
# A shard is a 256 x int32 header (magic, version, token count, zeros) followed by uint16 tokens.
# Documents are concatenated, each starting with BOS. Training streams shards in order: each step
# takes one contiguous span of TRAIN_BATCH_TOKENS (+1 per micro-batch for the shifted targets), and
# rank r of W reads its own disjoint part of that span, so the global batch does not depend on W.
# =================================================================================================

SHARD_MAGIC = 20240520
SHARD_VERSION = 1
SHARD_HEADER_INTS = 256
SHARD_HEADER_BYTES = SHARD_HEADER_INTS * 4
SHARD_TOKEN_DTYPE = np.dtype("<u2")


class ShardError(ValueError):
    """A shard file that is not in the format above; the message names the file."""


def read_shard_header(path: str | Path) -> int:
    """Check the header and exact file size of one shard; return its token count."""
    path = Path(path)
    size = path.stat().st_size
    if size < SHARD_HEADER_BYTES:
        raise ShardError(f"{path}: {size} bytes is shorter than the {SHARD_HEADER_BYTES}-byte shard "
                         "header. The file is truncated: delete it and download or rebuild it.")
    header = np.fromfile(path, dtype="<i4", count=SHARD_HEADER_INTS)
    if int(header[0]) != SHARD_MAGIC or int(header[1]) != SHARD_VERSION:
        raise ShardError(f"{path}: header magic/version {int(header[0])}/{int(header[1])}, expected "
                         f"{SHARD_MAGIC}/{SHARD_VERSION}. Not a shard of this format: rebuild it with "
                         "data/build_shards.py or download it with data/cached_challenge_fineweb.py.")
    num_tokens = int(header[2])
    expected = SHARD_HEADER_BYTES + num_tokens * SHARD_TOKEN_DTYPE.itemsize
    if num_tokens < 0 or size != expected:
        raise ShardError(f"{path}: header says {num_tokens} tokens ({expected} bytes) but the file has "
                         f"{size} bytes. The file is truncated or corrupt: delete it and fetch it again.")
    return num_tokens


def load_data_shard(path: str | Path) -> Tensor:
    """All tokens of a validated shard as a 1-D uint16 tensor."""
    num_tokens = read_shard_header(path)
    tokens = np.fromfile(path, dtype=SHARD_TOKEN_DTYPE, count=num_tokens, offset=SHARD_HEADER_BYTES)
    return torch.from_numpy(tokens.astype(np.uint16, copy=False))


def write_data_shard(path: str | Path, tokens) -> None:
    """Write tokens (any int array-like, values < 65536) as a shard; atomic (temp file + rename)."""
    array = np.asarray(tokens)
    if array.ndim != 1 or (array.size and (array.min() < 0 or array.max() >= 2**16)):
        raise ShardError(f"{path}: tokens must be a 1-D array of ids in [0, 65536).")
    header = np.zeros(SHARD_HEADER_INTS, dtype="<i4")
    header[:3] = (SHARD_MAGIC, SHARD_VERSION, array.size)
    path = Path(path)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(header.tobytes())
        f.write(array.astype(SHARD_TOKEN_DTYPE).tobytes())
    os.replace(tmp, path)


def find_shards(pattern: str, what: str) -> list[Path]:
    files = sorted(Path(p) for p in glob.glob(pattern))
    if not files:
        raise FileNotFoundError(f"no {what} shards match {pattern}. Set DATA_PATH to the folder with "
                                "fineweb_train_*.bin and fineweb_val_*.bin, or fetch them: python3 "
                                "data/cached_challenge_fineweb.py --variant sp1024 --train-shards 1")
    return files


class TokenStream:
    """Reads shards in order and hands out contiguous spans, wrapping around at the end."""

    def __init__(self, files: list[Path]):
        self.files = files
        self.file_index = -1
        self.tokens = torch.empty(0, dtype=torch.uint16)
        self.pos = 0

    def _next_file(self) -> None:
        self.file_index = (self.file_index + 1) % len(self.files)
        self.tokens = load_data_shard(self.files[self.file_index])
        self.pos = 0

    def take(self, n: int) -> Tensor:
        parts = []
        while n > 0:
            if self.pos >= self.tokens.numel():
                self._next_file()
                continue
            k = min(n, self.tokens.numel() - self.pos)
            parts.append(self.tokens[self.pos : self.pos + k])
            self.pos += k
            n -= k
        return parts[0] if len(parts) == 1 else torch.cat(parts)


class DistributedTokenLoader:
    """Each call takes one micro-batch for every rank from the shared stream; keeps this rank's."""

    def __init__(self, pattern: str, ctx: DistContext):
        for path in find_shards(pattern, "training"):
            read_shard_header(path)  # fail on a bad shard now, not an hour into the run
        self.stream = TokenStream(find_shards(pattern, "training"))
        self.ctx = ctx

    def next_batch(self, micro_batch_tokens: int, seq_len: int) -> tuple[Tensor, Tensor]:
        span = micro_batch_tokens + 1
        chunk = self.stream.take(span * self.ctx.world_size)
        local = chunk[self.ctx.rank * span : (self.ctx.rank + 1) * span].to(torch.int64)
        x, y = local[:-1].reshape(-1, seq_len), local[1:].reshape(-1, seq_len)
        non_blocking = self.ctx.device.type == "cuda"
        return x.to(self.ctx.device, non_blocking=non_blocking), y.to(self.ctx.device, non_blocking=non_blocking)


# =================================================================================================
# Output loss: logits = x @ W^T, softcap z = c*tanh(logits/c), cross entropy, mean over tokens.
# Computed in chunks of LOSS_CHUNK_TOKENS rows so that fp32 logits never exist for the whole batch:
# the forward pass also computes the gradients (dL/dx per chunk, dL/dW accumulated in fp32), so the
# backward pass only scales them. dL/dlogits = (softmax(z) - onehot(y)) * (1 - tanh^2) / N.
# The PyTorch version below is the reference; the Triton kernel after it fuses the elementwise work.
# =================================================================================================


def softcap_ce_chunk_torch(logits: Tensor, targets: Tensor, softcap: float, scale: float,
                           need_grad: bool) -> tuple[Tensor, Tensor | None]:
    """One chunk: (summed loss, dL/dlogits * scale or None). logits (n, V), any float dtype."""
    t = torch.tanh(logits.float() / softcap)
    z = softcap * t
    lse = torch.logsumexp(z, dim=-1)
    loss_sum = (lse - z.gather(1, targets[:, None]).squeeze(1)).sum()
    if not need_grad:
        return loss_sum, None
    grad = torch.exp(z - lse[:, None])
    grad.scatter_add_(1, targets[:, None], torch.full_like(grad[:, :1], -1.0))
    return loss_sum, grad * ((1.0 - t * t) * scale)


class ChunkedSoftcapCE(torch.autograd.Function):
    """Mean softcapped cross entropy of x @ weight^T, gradients computed chunk by chunk in forward."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, targets: Tensor, softcap: float, chunk_tokens: int):
        n = x.size(0)
        w = weight.to(x.dtype)
        grad_x = torch.empty_like(x)
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        loss_sum = torch.zeros((), dtype=torch.float32, device=x.device)
        for start in range(0, n, chunk_tokens):
            xc, tc = x[start : start + chunk_tokens], targets[start : start + chunk_tokens]
            chunk_loss, grad = softcap_ce_chunk_torch(xc @ w.t(), tc, softcap, 1.0 / n, True)
            grad = grad.to(x.dtype)
            loss_sum = loss_sum + chunk_loss
            grad_x[start : start + chunk_tokens] = grad @ w
            grad_w += (grad.t() @ xc).float()
        ctx.save_for_backward(grad_x, grad_w.to(weight.dtype))
        return loss_sum / n

    @staticmethod
    def backward(ctx, grad_loss: Tensor):
        grad_x, grad_w = ctx.saved_tensors
        return grad_x * grad_loss.to(grad_x.dtype), grad_w * grad_loss.to(grad_w.dtype), None, None, None


def softcap_ce_loss_torch(x: Tensor, weight: Tensor, targets: Tensor, softcap: float,
                          chunk_tokens: int) -> Tensor:
    """Chunked loss, PyTorch ops. x (N, d), weight (V, d), targets (N,) int64 -> mean loss, fp32."""
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return ChunkedSoftcapCE.apply(x, weight, targets, softcap, chunk_tokens)
    w = weight.to(x.dtype)
    loss_sum = torch.zeros((), dtype=torch.float32, device=x.device)
    for start in range(0, x.size(0), chunk_tokens):
        logits = x[start : start + chunk_tokens] @ w.t()
        loss_sum = loss_sum + softcap_ce_chunk_torch(logits, targets[start : start + chunk_tokens],
                                                     softcap, 1.0, False)[0]
    return loss_sum / x.size(0)


def softcap_ce_loss_naive(x: Tensor, weight: Tensor, targets: Tensor, softcap: float) -> Tensor:
    """The unchunked formula, for tests: holds all (N, V) logits."""
    logits = x @ weight.to(x.dtype).t()
    z = softcap * torch.tanh(logits.float() / softcap)
    return F.cross_entropy(z, targets)


# ---- Triton kernel section (being written in .dev/triton_loss_section.py; spliced in here) ----
