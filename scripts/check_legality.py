"""Is train_gpt.py's evaluation legal? It runs train_gpt's own score_artifact (the function that writes the
final_..._exact lines) on a tiny random model and random tokens, with 1 and 2 processes, in two geometries, watches
every distribution that scores a token on the three scoring paths (the round trip, sliding windows, sliding windows
with score-first test-time training), and checks them against the conditions of the challenge's issue #1017.
One line per geometry, path and condition; exit 1 if any fails.

  python3 scripts/check_legality.py                        # the model and TTT settings of the environment, CPU
  RECIPE=record TTT_LR=0.01 python3 scripts/check_legality.py
  python3 scripts/check_legality.py --broken               # a TTT that trains on each chunk before scoring it
  python3 scripts/check_legality.py --script /tmp/copy.py  # check another copy of train_gpt.py
  # on one GPU, as a training run scores: the Triton loss, bf16 autocast, torch.compile (tolerances below)
  LOSS_IMPL=triton TTT_LR=0.05 python3 scripts/check_legality.py --device cuda --processes 1
  LOSS_IMPL=triton TTT_LR=0.05 python3 scripts/check_legality.py --device cuda --processes 1 --broken  # must fail

The model's switches come from the environment as train_gpt.py reads it (RECIPE, loops, XSA, TTT_LR, ...); TTT is
always on, and the size, the vocabulary (64 ids) and the geometry are made tiny. Two geometries:
  aligned: a 32-token window every 8 tokens, 64-prediction chunks (the stride divides window and chunk);
  ragged:  a 24-token window every 7 tokens, 50-prediction chunks (the stride divides neither, the chunk is no
           multiple of the window: windows straddle chunk boundaries, and TTT trains on 48 of a chunk's 50).
Each has a ragged last chunk. The conditions:
  1. causal (score before update): the distribution over the whole vocabulary that scores the token at position t
     depends only on the tokens before t. For each probe p the tokens from p on are changed, the whole scoring runs
     again, and every distribution of a target at or before p must stay the same, bit for bit (CPU arithmetic is
     deterministic, and the changed run has the same shapes). Probes: both sides of every chunk boundary
     (c*size - 1, c*size, c*size + 1), the last token TTT trains on in each chunk, the last chunk, and a seeded
     sample of other positions. Distributions, not losses: a loss at t changes with the token at t anyway.
  2. single pass: every target is scored once; the tokens and bytes counted are then those of the plain evaluation.
  3. normalized: each distribution sums to 1.
  4. reported is observed: the path's final_..._exact line is the watched pass: its val_loss is minus the mean
     log-probability of the targets in the watched distributions, its val_bpb that over their bytes. It is checked
     twice: with the environment's TTT, and with a TTT that makes the score worse (TTT_LR=10), so that a line that
     reports the better of the TTT pass and another pass shows the other one.
  5. TTT adapts: TTT changed some distribution (else 1 passed for nothing: TTT_LR=0, TTT_EPOCHS=0, one chunk).
     --allow-no-adaptation lets it pass, saying so.

On CUDA (--device cuda) the model is built as a training run builds it: GPT(args, "triton", torch.bfloat16,
compile_scoring=True), scoring and TTT under DistContext.autocast(). Hidden states are then bf16, with 8 significant
bits, and a legitimate difference between two runs (the order of the atomic adds in a TTT backward) can move an
element by one rounding step, 2^-8 of its size. The tiny model's logits are under 4 in size (a rms-normed hidden
state of 32 elements against embedding rows of norm about 1), so one step moves a logit by at most 4 * 2^-8 = 2^-6
and a log-probability (a logit less a log-sum-exp of logits) by at most twice that: the causal condition allows
2^-5 = 0.031 per log-probability on CUDA and prints the largest difference it saw. A real leak moves them further:
--broken fails by more than ten times that (tests/test_legality.py measures it on the CPU). The observer computes the
log-probabilities on another matrix shape than the score, so cuBLAS may round their bf16 logits apart: the reported
val_loss may differ from the observed one by the same 2^-5 there (a better-of-two report differs by nats).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import math
import os
import random
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

ROOT = Path(__file__).resolve().parents[1]
VOCAB = 64
TINY = dict(
    VOCAB_SIZE=str(VOCAB),
    MODEL_DIM="32",
    NUM_HEADS="2",
    NUM_KV_HEADS="1",
    ROPE_DIMS="0",
    EVAL_SEQ_LEN="0",
    TTT_ENABLED="1",
    COMPILE="0",
    RUN_ID="legality",
)


@dataclasses.dataclass(frozen=True)
class Geometry:
    window: int
    stride: int
    chunk: int
    tokens: int  # the validation split: whole windows of predictions and one more token, as preflight trims it

    def settings(self) -> dict[str, str]:
        return dict(
            TRAIN_SEQ_LEN=str(self.window),
            EVAL_STRIDE=str(self.stride),
            TTT_CHUNK_TOKENS=str(self.chunk),
            TRAIN_BATCH_TOKENS=str(8 * self.window),
            VAL_BATCH_SIZE=str(8 * self.window * 4),  # 4 windows a batch: several batches per chunk
        )


GEOMETRIES = {
    "aligned": Geometry(window=32, stride=8, chunk=64, tokens=7 * 32 + 1),  # chunks 3 x 64 and 32
    "ragged": Geometry(window=24, stride=7, chunk=50, tokens=7 * 24 + 1),  # chunks 3 x 50 and 18
}
PATHS = ("roundtrip", "sliding_window", "ttt")
HURTING_TTT = dict(TTT_LR="10", TTT_EPOCHS="1")  # steps far too large: TTT then scores worse than sliding windows
INTERIOR_PROBES = 4
# The largest legitimate difference of a log-probability between two runs on CUDA (bf16), as the docstring derives.
BF16_LOGP_TOLERANCE = 2.0**-5
REPORT_RTOL_FP32 = 1e-6  # fp32 per-token losses summed in fp64 in another order; the line prints 8 decimals
LINE = re.compile(r"final_\w+?_(roundtrip|sliding_window|ttt)_exact val_loss:(\S+) val_bpb:(\S+)")


def load_script(path: Path):
    """train_gpt.py (or a patched copy) as a module named checked_train_gpt. One per process: the file registers a
    torch custom op, which cannot be registered twice, so each copy is checked in worker processes of its own."""
    spec = importlib.util.spec_from_file_location("checked_train_gpt", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


# ==== What runs in each worker process (T: the checked train_gpt module) ===========================================


def tiny_args(T, environ: dict[str, str], geometry: Geometry, device: str = "cpu", **overrides: str):
    """The environment's config (RECIPE, switches, TTT settings) at the tiny size and the geometry's shape."""
    ours = {f.name.upper() for f in dataclasses.fields(T.Hyperparameters)}
    loss = dict(LOSS_IMPL="triton" if device == "cuda" else "torch")
    settings = {k: v for k, v in environ.items() if k in ours} | TINY | geometry.settings() | loss | overrides
    return T.Hyperparameters.from_env(settings)


def tiny_model(T, args, device: torch.device):
    """A GPT whose predictions depend on every earlier token (random matrices and gains, the zero ones too), built
    as train_and_score builds it: on CUDA the Triton loss, bf16 activations and a compiled scoring pass."""
    torch.manual_seed(0)
    cuda = device.type == "cuda"
    model = T.GPT(args, "triton" if cuda else "torch", torch.bfloat16 if cuda else torch.float32, cuda)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape) * (p.size(-1) ** -0.5 if p.ndim == 2 else 0.5) + (p.ndim < 2))
    model.looping = args.num_loops > 0
    return model.to(device)


def tiny_val(T, args, ctx, tokens: torch.Tensor):
    """The validation split as preflight holds it, its bytes per token as a byte sidecar gives them (train_gpt.py
    holds the tokenizer's count in the same tensor): random, 0 for some tokens (BOS, CaseOps markers), and fixed by
    the position, not the token, so the check's count is its own, never one the trainer derives from the tokens."""
    token_bytes = torch.randint(0, 4, (len(tokens),), generator=torch.Generator().manual_seed(1), dtype=torch.int32)
    batch_seqs = args.val_batch_size // (ctx.world_size * ctx.grad_accum_steps) // args.val_seq_len
    return T.ValData(tokens, token_bytes.to(ctx.device), {"val_bytes": "sidecar"}, args.val_seq_len, max(batch_seqs, 1))


def tiny_tokens(geometry: Geometry) -> torch.Tensor:
    return torch.randint(0, VOCAB, (geometry.tokens,), generator=torch.Generator().manual_seed(2))


def make_run(T, args, ctx, val, log):
    """train_gpt's Run for scoring only. Its fields are named here and nowhere else in the check."""
    return T.Run(
        args=args,
        ctx=ctx,
        log=log,
        val=val,
        train_files=[],
        loss_impl=args.loss_impl,
        loss_impl_reason="legality_check",
        tokenizer_verified="",
        artifact=None,
    )


def probes(geometry: Geometry) -> list[int]:
    """Target positions to change the tokens from. Chunk c's predictions c*size .. (c+1)*size-1 score the targets one
    further on, so c*size is the last target of chunk c-1 and c*size+1 the first of chunk c. TTT trains on the whole
    windows of a chunk: its last trained target is c*size + size // window * window, short of the boundary when the
    window does not divide the chunk. Then the last chunk, and a seeded sample of the other positions."""
    total, size = geometry.tokens - 1, geometry.chunk
    chunks = -(-total // size)
    chosen = set()
    for c in range(1, chunks):
        chosen |= {c * size - 1, c * size, c * size + 1}
    for c in range(chunks - 1):
        chosen.add(c * size + size // geometry.window * geometry.window)
    last = (chunks - 1) * size
    chosen.add(last + 1 + (total - last) // 2)
    others = sorted(set(range(2, total + 1)) - chosen)
    chosen |= set(random.Random(3).sample(others, INTERIOR_PROBES))
    return sorted(chosen)


def changed_from(tokens: torch.Tensor, probe: int) -> torch.Tensor:
    """The tokens with every one from `probe` on replaced by another id."""
    changed = tokens.clone()
    shift = torch.randint(1, VOCAB, (len(tokens) - probe,), generator=torch.Generator().manual_seed(4))
    changed[probe:] = (changed[probe:] + shift) % VOCAB
    return changed


def observer(model, record: dict, kind: str, upto: int | None):
    """score_windows' observer for one path: each scored target's log-probabilities over the whole vocabulary, from
    the model's own loss at that moment (every id as the target), kept for targets at or before `upto` (all: None).
    Every batch is computed whole, so a changed run computes the kept rows with the same shapes as the original."""

    def observe(positions: torch.Tensor, hidden: torch.Tensor) -> None:
        if upto is not None and int(positions.min()) > upto:
            return  # nothing here is compared
        every_id = torch.arange(VOCAB, device=hidden.device).repeat(len(positions))
        losses = model.loss(hidden.repeat_interleave(VOCAB, 0), every_id, per_token=True).view(-1, VOCAB)
        keep = positions <= upto if upto is not None else torch.ones_like(positions, dtype=torch.bool)
        record.setdefault(kind, []).append((positions[keep].cpu(), -losses[keep].float().cpu()))

    return observe


class EnoughObserved(Exception):
    """A changed run has scored every target up to its probe: what it would score next is not compared."""


@contextlib.contextmanager
def stopping_after(T, probe: int | None):
    """Ends a changed run (EnoughObserved) when TTT is about to train on a chunk that starts after the probe: every
    window that scores a target at or before the probe was assigned to an earlier chunk and is scored by then. Where
    a broken TTT scores such a target later, the changed run lacks it, and the causal condition fails on that. Every
    rank raises at the same call, outside any collective, so no process waits for another."""
    train_on_chunk = T.train_on_chunk

    def train_until_probe(run, model, sgd, begin, *rest, **kwargs):
        if probe is not None and begin > probe:
            raise EnoughObserved
        return train_on_chunk(run, model, sgd, begin, *rest, **kwargs)

    T.train_on_chunk = train_until_probe  # score_with_ttt looks it up by name when it runs
    try:
        yield
    except EnoughObserved:
        pass
    finally:
        T.train_on_chunk = train_on_chunk


def score_and_watch(T, run, model, weights: dict, upto: int | None = None) -> tuple[dict, list[str]]:
    """train_gpt.score_artifact on the run, every path watched; (what was observed, the lines it wrote). A changed run
    (upto: its probe) keeps only the targets at or before the probe and stops when it has scored them all."""
    record = {}
    header = {"looping": model.looping, "weights": "raw", "matrix_bits": 8, "compressor": "zlib"}

    def observe(kind: str):
        if kind not in PATHS:
            raise ValueError(f"score_artifact asked to observe {kind!r}, not one of {PATHS}: update the check")
        return observer(model, record, kind, upto)

    with stopping_after(T, upto):
        T.score_artifact(run, model, header, weights, observe)
    return record, list(run.log.lines)


def broken_ttt(T):
    """score_with_ttt with its two steps swapped: each chunk is trained on before it is scored. Not legal."""

    def score_with_ttt(run, model, observe=None):
        args, val, stride = run.args, run.val, run.args.eval_stride
        total, size, seq = val.tokens.numel() - 1, args.ttt_chunk_tokens, val.seq_len
        starts, chunks = T.window_starts(val, stride), -(-total // size)
        chunk_of = (torch.where(starts == 0, 0, starts + seq - stride) // size).clamp_max(chunks - 1)
        sgd = torch.optim.SGD(model.parameters(), lr=args.ttt_lr, momentum=args.ttt_momentum)
        sums = torch.zeros(3, dtype=torch.float64, device=run.ctx.device)
        for c in range(chunks):
            if c < chunks - 1:
                T.train_on_chunk(run, model, sgd, c * size, min((c + 1) * size, total), args.ttt_lr)
            sums += T.score_windows(model, val, run.ctx, stride, starts[chunk_of == c], observe)
        return sums

    return score_with_ttt


def worker(out: Path, script: Path, device: str, broken: bool, geometries: list[str]) -> None:
    """Each geometry: score_artifact on the original tokens, on each probe's changed ones and with a hurting TTT;
    rank 0 saves what every rank observed and the lines it wrote."""
    T = load_script(script)
    if broken:
        T.score_with_ttt = broken_ttt(T)  # score_artifact looks it up by name when it runs

    class Lines(T.Logger):  # rank 0's log, kept in memory: the lines score_artifact wrote
        def __init__(self):
            super().__init__(None)
            self.lines = []

        def text(self, message: str, console: bool = True) -> None:
            self.lines.append(message)

    ctx = T.dist_context()
    if device == "cpu":
        ctx = dataclasses.replace(ctx, device=torch.device("cpu"))
    T.init_distributed(ctx)
    environ = dict(os.environ)
    results = {}
    for name in geometries:
        geometry = GEOMETRIES[name]
        args = tiny_args(T, environ, geometry, device)
        tokens = tiny_tokens(geometry)
        model = tiny_model(T, args, ctx.device)
        weights = {k: v.clone() for k, v in model.state_dict().items()}  # score_artifact loads them every run

        def watch(args, tokens, upto=None):
            return score_and_watch(
                T, make_run(T, args, ctx, tiny_val(T, args, ctx, tokens), Lines()), model, weights, upto
            )

        val = tiny_val(T, args, ctx, tokens)
        results[name] = dict(
            original=watch(args, tokens),
            probes={p: watch(args, changed_from(tokens, p), upto=p)[0] for p in probes(geometry)},
            hurting=watch(tiny_args(T, environ, geometry, device, **HURTING_TTT), tokens),
            tokens=tokens,
            target_bytes=val.token_bytes[1:].cpu(),  # tiny_val's own bytes of each target
            config=dict(ttt_lr=args.ttt_lr, ttt_epochs=args.ttt_epochs, ttt_momentum=args.ttt_momentum),
        )
    gathered = [None] * ctx.world_size
    if ctx.distributed:
        dist.all_gather_object(gathered, results)
        dist.destroy_process_group()
    else:
        gathered = [results]
    if ctx.rank == 0:
        torch.save(dict(ranks=gathered, device=ctx.device.type), out)


# ==== The check: workers, then the conditions on what they observed ================================================


def run_workers(
    processes: int,
    environ: dict[str, str],
    script: Path = ROOT / "train_gpt.py",
    device: str = "cpu",
    broken: bool = False,
    geometries: list[str] = list(GEOMETRIES),
) -> dict:
    """The worker in `processes` processes (gloo on the CPU, NCCL on CUDA); what every rank observed, merged."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "observed.pt"
        command = [sys.executable, __file__, "--worker", str(out), "--script", str(script), "--device", device]
        command += ["--geometries", ",".join(geometries)] + ["--broken"] * broken
        if processes > 1:
            command[1:1] = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]
        env = {k: v for k, v in environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
        result = subprocess.run(
            command, env=dict(env, OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=600
        )
        if result.returncode != 0:
            raise RuntimeError(f"the legality worker ({processes} processes) failed:\n{result.stderr[-3000:]}")
        saved = torch.load(out, weights_only=False)
    return merge(saved["ranks"], saved["device"])


def merge(ranks: list[dict], device: str) -> dict:
    """Every rank's observations of a run as one (positions, log-probabilities) pair per path; rank 0's lines."""

    def joined(record: dict) -> dict:
        return {
            kind: (torch.cat([p for p, _ in pieces]), torch.cat([lp for _, lp in pieces]))
            for kind, pieces in record.items()
        }

    def run_of(pick) -> dict:
        records = [pick(rank) for rank in ranks]
        return {kind: [piece for record in records for piece in record.get(kind, [])] for kind in PATHS}

    merged = {}
    for name, first in ranks[0].items():
        merged[name] = dict(first, device=device)
        for run in ("original", "hurting"):
            merged[name][run] = (joined(run_of(lambda rank: rank[name][run][0])), first[run][1])
        merged[name]["probes"] = {p: joined(run_of(lambda rank: rank[name]["probes"][p])) for p in first["probes"]}
    return merged


def by_position(observed: tuple[torch.Tensor, torch.Tensor]) -> dict[int, torch.Tensor]:
    """{position: its first observed distribution}."""
    positions, logp = observed
    rows = {}
    for position, row in zip(positions.tolist(), logp):
        rows.setdefault(position, row)
    return rows


def causal_differences(result: dict, path: str) -> list[tuple[int, int, float]]:
    """(probe, target, the largest |difference| of its log-probabilities from the original run's) for every target at
    or before each probe that the original run scored; inf where the changed run did not score it, or made a NaN."""
    original = by_position(result["original"][0][path])
    found = []
    for probe, changed_run in result["probes"].items():
        changed = by_position(changed_run[path])
        for position in range(1, probe + 1):
            if position in original:
                row = changed.get(position)
                diff = math.inf if row is None else float((row - original[position]).abs().max())
                found.append((probe, position, diff if diff == diff else math.inf))
    return found


def reported(lines: list[str]) -> dict[str, list[tuple[float, float]]]:
    """{path: [(val_loss, val_bpb) of each final_..._exact line]}."""
    found = {}
    for line in lines:
        match = LINE.fullmatch(line)
        if match:
            found.setdefault(match[1], []).append((float(match[2]), float(match[3])))
    return found


def observed_score(rows: dict[int, torch.Tensor], tokens: torch.Tensor, target_bytes: torch.Tensor):
    """(val_loss, val_bpb) of the watched distributions: minus the targets' mean log-probability, and in bits per byte."""
    loss_sum = -sum(float(row[tokens[position]]) for position, row in rows.items())
    count = len(rows)
    num_bytes = sum(int(target_bytes[position - 1]) for position in rows)
    return loss_sum / count, loss_sum / count / math.log(2.0) * count / num_bytes


def report_matches(lines, observed, path, tokens, target_bytes, tolerance) -> tuple[bool, str]:
    lines = reported(lines).get(path, [])
    if len(lines) != 1:
        return False, f"{len(lines)} final_..._{path}_exact lines"
    loss, bpb = observed_score(by_position(observed[path]), tokens, target_bytes)
    close = all(abs(r - o) <= tolerance * max(1.0, abs(o)) + 1e-8 for r, o in zip(lines[0], (loss, bpb)))
    return close, f"reported {lines[0][0]:.8f} {lines[0][1]:.8f}, observed {loss:.8f} {bpb:.8f}"


def conditions(result: dict, path: str, allow_no_adaptation: bool = False) -> dict[str, tuple[bool, str]]:
    """{condition: (holds, evidence)} of one path in one geometry, from the worker's observations."""
    cuda = result["device"] == "cuda"
    tolerance = BF16_LOGP_TOLERANCE if cuda else 0.0
    tokens, target_bytes = result["tokens"], result["target_bytes"]
    observed, lines = result["original"]
    targets = tokens.numel() - 1
    positions = observed[path][0]
    counts = torch.bincount(positions, minlength=targets + 1)
    once = len(positions) == targets and bool((counts[1:] == 1).all()) and counts[0] == 0
    rows = by_position(observed[path])
    num_bytes = sum(int(target_bytes[p - 1]) for p in rows)
    single = (
        once,
        f"{len(set(positions.tolist()))} targets of {targets} scored, {len(positions)} scorings; "
        f"tokens {len(rows)}, bytes {num_bytes} (plain evaluation: {targets}, {int(target_bytes.sum())})",
    )
    worst_sum = max(abs(float(torch.logsumexp(row, 0))) for row in rows.values())
    normalized = (worst_sum < 1e-5, f"max |log sum p| {worst_sum:.1e}")

    differences = causal_differences(result, path)
    leaks = [(probe, position, diff) for probe, position, diff in differences if diff > tolerance]
    worst = max(diff for _, _, diff in differences)
    bound = "bit for bit" if tolerance == 0 else f"within {tolerance:.4f} (bf16)"
    causal = (
        bool(differences) and not leaks,
        f"{len(differences)} distributions at or before the changed position, {len(result['probes'])} probes, "
        f"compared {bound}; largest difference {worst:.3g}"
        + (
            ""
            if not leaks
            else "; tokens changed from {} moved the distribution of target {} by {:.3g}".format(*leaks[0])
        ),
    )
    report_tolerance = BF16_LOGP_TOLERANCE if cuda else REPORT_RTOL_FP32
    honest, evidence = report_matches(lines, observed, path, tokens, target_bytes, report_tolerance)
    hurt_observed, hurt_lines = result["hurting"]
    hurt_honest, hurt_evidence = report_matches(hurt_lines, hurt_observed, path, tokens, target_bytes, report_tolerance)
    found = {
        "causal_score_before_update": causal,
        "single_pass": single,
        "normalized": normalized,
        "reported_is_observed": (
            honest and hurt_honest,
            f"{evidence}; with a hurting TTT ({' '.join(f'{k}={v}' for k, v in HURTING_TTT.items())}): {hurt_evidence}",
        ),
    }
    if path == "ttt":
        sliding = by_position(observed["sliding_window"])
        moved = [p for p, row in rows.items() if p in sliding and float((row - sliding[p]).abs().max()) > tolerance]
        adapted = len(moved) > 0
        found["ttt_adapts"] = (
            adapted or allow_no_adaptation,
            f"{len(moved)} of {len(rows)} distributions differ from the sliding windows' (config {result['config']})"
            + (
                ""
                if adapted
                else ": TTT changed nothing, so causality was checked on a model that never trained"
                + (" (allowed by --allow-no-adaptation)" if allow_no_adaptation else "")
            ),
        )
    return found


def check(
    environ: dict[str, str],
    script: Path = ROOT / "train_gpt.py",
    processes: tuple[int, ...] = (1, 2),
    device: str = "cpu",
    broken: bool = False,
    allow_no_adaptation: bool = False,
    geometries: list[str] = list(GEOMETRIES),
) -> tuple[list[str], int]:
    """The check's lines (one a geometry, path, condition and process count, each ok or FAIL) and how many failed."""
    lines = [f"checking {script} on {device}" + (" with a BROKEN TTT (trains before it scores)" if broken else "")]
    for name in geometries:
        g = GEOMETRIES[name]
        lines.append(
            f"geometry {name}: window {g.window}, stride {g.stride}, chunks of {g.chunk}, {g.tokens} tokens, "
            f"probes {probes(g)}"
        )
    failed = 0
    for count in processes:
        observed = run_workers(count, environ, script, device, broken, geometries)
        for name, result in observed.items():
            for path in PATHS:
                for condition, (holds, evidence) in conditions(result, path, allow_no_adaptation).items():
                    failed += not holds
                    mark = "ok  " if holds else "FAIL"
                    lines.append(f"{mark} {condition} {path} geometry:{name} processes:{count}: {evidence}")
    lines.append(f"{'legal' if not failed else 'NOT LEGAL'}: {failed} condition(s) failed")
    return lines, failed


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--script", type=Path, default=ROOT / "train_gpt.py", help="the train_gpt.py to check")
    parser.add_argument("--processes", default="1,2", help="process counts to check (default: 1,2)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="cuda: the GPU path (docstring)")
    parser.add_argument("--geometries", default=",".join(GEOMETRIES), help="of " + ", ".join(GEOMETRIES))
    parser.add_argument("--broken", action="store_true", help="check a TTT that trains on each chunk first: must fail")
    parser.add_argument("--allow-no-adaptation", action="store_true", help="pass although TTT changed nothing")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    cli = parser.parse_args()
    geometries = cli.geometries.split(",")
    if cli.worker:
        worker(cli.worker, cli.script, cli.device, cli.broken, geometries)
        return 0
    processes = tuple(map(int, cli.processes.split(",")))
    lines, failed = check(
        dict(os.environ), cli.script, processes, cli.device, cli.broken, cli.allow_no_adaptation, geometries
    )
    print("\n".join(lines))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
