"""Is train_gpt.py's evaluation legal? Its scoring paths (the round trip, sliding windows, sliding windows with
score-first test-time training) on a tiny random model and random tokens, on the CPU with 1 and 2 processes, against
the four conditions of the challenge's issue #1017. One line per path and condition; exit 1 if any fails.

  python3 scripts/check_legality.py                        # the model and TTT settings of the environment
  RECIPE=record TTT_LR=0.01 python3 scripts/check_legality.py
  python3 scripts/check_legality.py --broken               # a TTT that trains on each chunk before scoring it

The model's switches come from the environment as train_gpt.py reads it (RECIPE, loops, XSA, TTT_LR, ...); its
size, the vocabulary and the geometry are made tiny: 64 ids, a 32-token window every 8 tokens, 64-prediction chunks.
  1. causal (score before update): the distribution over the whole vocabulary that scores the token at position t
     depends only on the tokens before t. The tokens from t on are changed and every distribution up to t must stay
     the same, bit for bit (CPU arithmetic is deterministic). t: inside a chunk, on both sides of a chunk boundary,
     in the last chunk. Distributions, not losses: a loss at t changes with the token at t anyway.
  2. single pass: every target is scored once; the tokens and bytes counted are the plain evaluation's.
  3. normalized: each distribution sums to 1, and the score's loss is minus the log-probability of the target in it.
  4. the broken variant (--broken) must fail 1: the check is known to catch training on a token before scoring it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import train_gpt as T  # noqa: E402

TINY = dict(
    VOCAB_SIZE="64",
    MODEL_DIM="32",
    NUM_HEADS="2",
    NUM_KV_HEADS="1",
    ROPE_DIMS="0",
    TRAIN_SEQ_LEN="32",
    EVAL_SEQ_LEN="0",
    EVAL_STRIDE="8",
    TRAIN_BATCH_TOKENS=str(8 * 32),
    VAL_BATCH_SIZE=str(8 * 32 * 4),
    TTT_CHUNK_TOKENS="64",
    LOSS_IMPL="torch",
    COMPILE="0",
    RUN_ID="legality",
)
TOKENS = 488  # 7 chunks of 64 predictions and a last one of 39
PATHS = ("roundtrip", "sliding_window", "ttt")


def tiny_args(environ: dict[str, str]) -> T.Hyperparameters:
    """The environment's config (RECIPE, switches, TTT settings) at the tiny size."""
    ours = {f.name.upper() for f in T.dataclasses.fields(T.Hyperparameters)}  # RECIPE is one of them
    return T.Hyperparameters.from_env({k: v for k, v in environ.items() if k in ours} | TINY)


def tiny_model(args: T.Hyperparameters) -> T.GPT:
    """A GPT whose predictions depend on every earlier token: random matrices and gains, the zero ones too."""
    torch.manual_seed(0)
    model = T.GPT(args)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape) * (p.size(-1) ** -0.5 if p.ndim == 2 else 0.5) + (p.ndim < 2))
    model.looping = args.num_loops > 0
    return model


def tiny_val(args: T.Hyperparameters, ctx: T.DistContext, tokens: torch.Tensor) -> T.ValData:
    """The validation split as train_gpt.py holds it: random byte counts, leading spaces and boundaries."""
    g = torch.Generator().manual_seed(1)
    luts = (
        torch.randint(1, 4, (args.vocab_size,), generator=g, dtype=torch.int16),
        torch.rand(args.vocab_size, generator=g) < 0.3,
        torch.rand(args.vocab_size, generator=g) < 0.1,
    )
    batch_seqs = args.val_batch_size // (ctx.world_size * ctx.grad_accum_steps) // args.val_seq_len
    return T.ValData(tokens, *luts, args.val_seq_len, max(batch_seqs, 1))


def broken_ttt(run: T.Run, model: T.GPT, observe=None) -> torch.Tensor:
    """score_with_ttt with its two steps swapped: each chunk is trained on before it is scored. Not legal."""
    args, val, stride = run.args, run.val, run.args.eval_stride
    total, size, seq = val.tokens.numel() - 1, args.ttt_chunk_tokens, val.seq_len
    starts, chunks = T.window_starts(val, stride), -(-total // size)
    chunk_of = (torch.where(starts == 0, 0, starts + seq - stride) // size).clamp_max(chunks - 1)
    sgd = torch.optim.SGD(model.parameters(), lr=args.ttt_lr, momentum=args.ttt_momentum)
    sums = torch.zeros(3, dtype=torch.float64)
    for c in range(chunks):
        if c < chunks - 1:
            T.train_on_chunk(run, model, sgd, c * size, min((c + 1) * size, total), args.ttt_lr)
        sums += T.score_windows(model, val, run.ctx, stride, starts[chunk_of == c], observe)
    return sums


def observe_into(record: dict, model: T.GPT):
    """An observer for score_windows: each scored target's log-probabilities over the vocabulary, from the model's
    own loss at that moment (with every id as the target), keyed by the target's position."""
    vocab = model.tok_emb.num_embeddings

    def observe(positions: torch.Tensor, hidden: torch.Tensor) -> None:
        every_id = torch.arange(vocab).repeat(len(positions))
        losses = model.loss(hidden.repeat_interleave(vocab, 0), every_id, per_token=True).view(-1, vocab)
        for position, row in zip(positions.tolist(), losses):
            record.setdefault(position, []).append(-row)

    return observe


def score(path: str, run: T.Run, model: T.GPT, record: dict, broken: bool) -> torch.Tensor:
    observe = observe_into(record, model)
    if path == "roundtrip":
        return T.score_windows(model, run.val, run.ctx, 0, None, observe)
    if path == "sliding_window":
        return T.score_windows(model, run.val, run.ctx, run.args.eval_stride, None, observe)
    return (broken_ttt if broken else T.score_with_ttt)(run, model, observe)


def probes(args: T.Hyperparameters) -> list[int]:
    """Target positions to change the tokens from: inside a chunk, at the last target of a chunk and the first of the
    next (a chunk's predictions c*size .. (c+1)*size-1 score targets one further on), and in the last chunk."""
    size = args.ttt_chunk_tokens
    return [size + size // 3, 2 * size, 2 * size + 1, TOKENS - 15]


def worker(out: Path, broken: bool) -> None:
    """Every path on the original tokens and on each probe's changed ones; rank 0 saves what every rank observed."""
    ctx = T.dist_context()
    T.init_distributed(ctx)
    args = tiny_args(dict(os.environ))
    tokens = torch.randint(0, args.vocab_size, (TOKENS,), generator=torch.Generator().manual_seed(2))
    results = {}
    for path in PATHS:
        for probe in [None] + probes(args):
            changed = tokens.clone()
            if probe is not None:
                changed[probe:] = (
                    changed[probe:]
                    + 1
                    + torch.randint(
                        0, args.vocab_size - 1, (TOKENS - probe,), generator=torch.Generator().manual_seed(3)
                    )
                )
                changed[probe:] %= args.vocab_size
            run = T.Run(args, ctx, T.Logger(None), tiny_val(args, ctx, changed), [], "torch", "", "", None)
            record = {}
            sums = score(path, run, tiny_model(args), record, broken)
            results[(path, probe)] = (record, sums.tolist())
    gathered = [None] * ctx.world_size
    if ctx.distributed:
        dist.all_gather_object(gathered, results)
        dist.destroy_process_group()
    else:
        gathered = [results]
    if ctx.rank == 0:
        merged = {}
        for key in gathered[0]:
            record = {}
            for rank_results in gathered:
                for position, rows in rank_results[key][0].items():
                    record.setdefault(position, []).extend(rows)
            merged[key] = (record, gathered[0][key][1])
        torch.save(dict(results=merged, tokens=tokens, probes=probes(args), args=T.dataclasses.asdict(args)), out)


def run_workers(processes: int, broken: bool, environ: dict[str, str]) -> dict:
    """The worker in `processes` processes (gloo on the CPU); what rank 0 saved."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "observed.pt"
        command = [sys.executable, __file__, "--worker", str(out)] + ["--broken"] * broken
        if processes > 1:
            command[1:1] = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]
        env = {k: v for k, v in environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
        result = subprocess.run(
            command, env=dict(env, OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=600
        )
        if result.returncode != 0:
            raise RuntimeError(f"the legality worker ({processes} processes) failed:\n{result.stderr[-3000:]}")
        return torch.load(out, weights_only=False)


def conditions(observed: dict, path: str) -> dict[str, tuple[bool, str]]:
    """{condition: (holds, evidence)} of one path, from the worker's observations."""
    results, probes_at = observed["results"], observed["probes"]
    record, sums = results[(path, None)]
    targets = observed["tokens"].numel() - 1
    once = sorted(record) == list(range(1, targets + 1)) and all(len(rows) == 1 for rows in record.values())
    plain = results[("roundtrip", None)][1]
    counted = sums[1] == plain[1] == targets and sums[2] == plain[2]
    single = (
        once and counted,
        f"{len(record)} targets of {targets} scored, each once: {once}; tokens {sums[1]:.0f}, "
        f"bytes {sums[2]:.0f} (plain evaluation: {plain[1]:.0f}, {plain[2]:.0f})",
    )
    logp = {position: rows[0] for position, rows in record.items()}
    worst = max(abs(float(torch.logsumexp(row, 0))) for row in logp.values())
    loss = -sum(float(logp[position][observed["tokens"][position]]) for position in logp)
    normalized = (
        worst < 1e-5 and abs(loss - sums[0]) < 1e-6 * max(1.0, abs(sums[0])),
        f"max |log sum p| {worst:.1e}; minus the targets' log-probabilities {loss:.6f}, the score's loss sum "
        f"{sums[0]:.6f}",
    )
    compared, first_change = 0, None
    for probe in probes_at:
        changed = results[(path, probe)][0]
        for position in range(1, probe + 1):
            compared += 1
            same = position in changed and torch.equal(changed[position][0], logp[position])
            if not same and first_change is None:
                first_change = (probe, position)
    causal = (
        first_change is None,
        f"{compared} distributions at or before the changed position compared bit for bit"
        + (
            ""
            if first_change is None
            else f"; tokens changed from {first_change[0]} changed the distribution of target {first_change[1]}"
        ),
    )
    return {"causal_score_before_update": causal, "single_pass": single, "normalized": normalized}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--broken", action="store_true", help="check a TTT that trains on each chunk first: must fail")
    parser.add_argument("--processes", default="1,2", help="process counts to check (default: 1,2)")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    cli = parser.parse_args()
    if cli.worker:
        worker(cli.worker, cli.broken)
        return 0
    args = tiny_args(dict(os.environ))
    print(
        f"config: RECIPE={args.recipe or '(reference)'} TTT_LR={args.ttt_lr} TTT_EPOCHS={args.ttt_epochs} "
        f"TTT_MOMENTUM={args.ttt_momentum}; tiny: {TOKENS} tokens, window {args.val_seq_len}, stride "
        f"{args.eval_stride}, chunks of {args.ttt_chunk_tokens}; probes at {probes(args)}"
        + ("; BROKEN TTT (trains before it scores)" if cli.broken else "")
    )
    failed = 0
    for processes in map(int, cli.processes.split(",")):
        observed = run_workers(processes, cli.broken, dict(os.environ))
        for path in PATHS:
            for name, (holds, evidence) in conditions(observed, path).items():
                failed += not holds
                print(f"{'ok  ' if holds else 'FAIL'} {name} {path} processes:{processes}: {evidence}")
    print(f"{'legal' if not failed else 'NOT LEGAL'}: {failed} condition(s) failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
