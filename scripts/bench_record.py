"""Side-by-side speed of train_gpt.py (a recipe, RECIPE=record by default) and a record's own code on N GPUs of one
host, on the same shards and tokenizer: each run alone, one after the other, the same steps, seed and settings.

  python3 scripts/bench_record.py --record RECORD_DIR/train_gpt.py --data SHARDS --tokenizer sp8192.model \\
      --nproc 2 --steps 60 --seeds 1337 42
  # another build of ours as a third column, environment variables as they are given to both trainers:
  python3 scripts/bench_record.py ... --variant mix0:TORCHINDUCTOR_MIX_ORDER_REDUCTION=0
  # the environment goes to both trainers: one GPU, a quarter of the batch, one seed a call (MEASUREMENTS.md, session 4)
  TRAIN_BATCH_TOKENS=196608 python3 scripts/bench_record.py ... --nproc 1 --steps 300 --seeds 1337

The record's source may be packed (lzma + base85, as most records ship); without FlashAttention 3 installed its FA3
call is replaced by PyTorch SDPA of the same layout and semantics (a benchmark of our GPUs, not the record's score).
Its loader wants at least one training shard per rank: with fewer, the training tokens are split into N shards in the
work folder. Both trainers validate once, after the last step (VAL_LOSS_EVERY=0); each run is stopped once that line
is logged, so no export or final scoring is spent (on 4 H200s each run took about 3 minutes, most of it start-up,
compilation and the 20 warm-up steps of each layer order; 60 steps themselves take 15-20 s). Printed per run: tokens/s
at the last step (both logs count training time only), the step time ratio ours / record's, and the last step's
val_bpb; with several seeds, the mean and spread of the val_bpb difference. Needs CUDA and torchrun; logs stay in
--work. For scores rather than speed (variants against a baseline, paired seeds, to the end of scoring), use
scripts/ab.py, which runs a record's code too (--script) and shares this tool's loading of it.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "data"), str(ROOT / "scripts")]
import ab  # noqa: E402  (record_source: a record's script unpacked, FA3 replaced by SDPA where it is missing)
import build_shards  # noqa: E402  (write_data_shard: the trainer's shard format)
import train_gpt  # noqa: E402  (load_data_shard)

# (train_loss/tokens-per-second line at the last step, last step's validation line) of each trainer
OURS_TRAIN = re.compile(r"^step:(\d+)/\d+ train_loss:([\d.]+) .*tokens_per_s:(\d+)")
OURS_VAL = re.compile(r"^step:(\d+)/\d+ val_loss:([\d.]+) val_bpb:([\d.]+)")
RECORD_TRAIN = re.compile(r"^(\d+)/\d+ train_loss: ([\d.]+) train_time: [\d.]+m tok/s: (\d+)")
RECORD_VAL = re.compile(r"^(\d+)/\d+ val_loss: ([\d.]+) val_bpb: ([\d.]+)")


def record_source(path: Path) -> str:
    """The record's Python source: unpacked if it ships packed, FA3 replaced by SDPA if missing (ab.py's)."""
    try:
        return ab.record_source(path)
    except ab.UsageError as exc:
        usage_error(str(exc))


def usage_error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def split_training_tokens(files: list[Path], out: Path, parts: int) -> list[Path]:
    """The training tokens of `files`, in order, cut into `parts` shards of the same format in `out`."""
    tokens = np.concatenate([train_gpt.load_data_shard(f).numpy() for f in files])
    written = [out / f"fineweb_train_{i:06d}.bin" for i in range(parts)]
    for path, part in zip(written, np.array_split(tokens, parts)):
        build_shards.write_data_shard(path, part)
    return written


def data_layout(data: Path, tokenizer: Path, work: Path, nproc: int, vocab: int) -> Path:
    """work/data in the records' layout (datasets/fineweb10B_spV, tokenizers/fineweb_V_bpe.model): DATA_DIR."""
    shards = work / "data" / "datasets" / f"fineweb10B_sp{vocab}"
    shards.mkdir(parents=True, exist_ok=True)
    for old in shards.glob("fineweb_*.bin"):
        old.unlink()
    train = sorted(data.glob("fineweb_train_*.bin"))
    if not train or not sorted(data.glob("fineweb_val_*.bin")):
        usage_error(f"--data {data} holds no fineweb_train_*.bin and fineweb_val_*.bin shards.")
    for f in sorted(data.glob("fineweb_val_*.bin")) + (train if len(train) >= nproc else []):
        (shards / f.name).symlink_to(f.resolve())
    if len(train) < nproc:
        split_training_tokens(train, shards, nproc)
    (work / "data" / "tokenizers").mkdir(parents=True, exist_ok=True)
    model = work / "data" / "tokenizers" / f"fineweb_{vocab}_bpe.model"
    model.unlink(missing_ok=True)
    model.symlink_to(tokenizer.resolve())
    return work / "data"


def run_until_validated(cmd: list[str], env: dict, cwd: Path, log: Path, val_line: re.Pattern, steps: int) -> list[str]:
    """Runs cmd, its output into log, until the validation line of the last step is logged (then stops it)."""
    lines = []
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            out.write(line)
            lines.append(line.strip())
            match = val_line.match(lines[-1])
            if match and int(match.group(1)) == steps:
                break
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    return lines


def last_step(lines: list[str], train_line: re.Pattern, val_line: re.Pattern, steps: int) -> dict:
    """tokens/s and train loss at the last step, val_bpb of its validation; an error if the run did not get there."""
    train = [m for m in map(train_line.match, lines) if m and int(m.group(1)) == steps]
    val = [m for m in map(val_line.match, lines) if m and int(m.group(1)) == steps]
    if not train or not val:
        return {}
    return dict(
        tokens_per_s=int(train[-1].group(3)), train_loss=float(train[-1].group(2)), val_bpb=float(val[-1].group(3))
    )


def report(seed: int, name: str, run: dict, record: dict, cli) -> None:
    """One line a run, printed as soon as it ends (a call cut short keeps the runs it finished)."""
    if "tokens_per_s" not in run:
        print(f"bench seed:{seed} run:{name} failed: its log {run['log']} has no step {cli.steps}", flush=True)
        return
    ratio = record.get("tokens_per_s", 0) / run["tokens_per_s"]
    print(
        f"bench seed:{seed} run:{name} gpus:{cli.nproc} steps:{cli.steps} tokens_per_s:{run['tokens_per_s']} "
        f"step_time_vs_record:{ratio:.3f} train_loss:{run['train_loss']:.4f} val_bpb:{run['val_bpb']:.4f}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", type=Path, required=True, help="the record's train_gpt.py (packed or not)")
    parser.add_argument("--data", type=Path, required=True, help="folder of fineweb_{train,val}_*.bin shards")
    parser.add_argument("--tokenizer", type=Path, required=True, help="the SentencePiece .model of the shards")
    parser.add_argument("--nproc", type=int, default=1, help="GPUs (torchrun processes) for each run")
    parser.add_argument("--steps", type=int, default=60, help="training steps of each run (loops on from their step)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1337])
    parser.add_argument("--recipe", default="record", help="our RECIPE to compare (default: record)")
    parser.add_argument("--variant", action="append", default=[], help="NAME:VAR=VALUE,...: another run of ours")
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench_record"), help="logs and the record's copy")
    cli = parser.parse_args()
    import sentencepiece as spm
    import torch

    if cli.nproc < 1 or train_gpt.GRAD_ACCUM_TOTAL % cli.nproc:
        usage_error(
            f"--nproc {cli.nproc} must divide {train_gpt.GRAD_ACCUM_TOTAL} (a step's micro-batches): 1, 2, 4 or 8."
        )
    if torch.cuda.device_count() < cli.nproc:
        usage_error(f"--nproc {cli.nproc} needs that many CUDA GPUs; this machine has {torch.cuda.device_count()}.")
    bad = [v for v in cli.variant if not re.fullmatch(r"\w+:\w+=[^,]*(,\w+=[^,]*)*", v)]
    if bad:
        usage_error(f"--variant {bad[0]!r} must be NAME:VAR=VALUE[,VAR=VALUE...], e.g. mix0:TORCHINDUCTOR_X=0")

    vocab = spm.SentencePieceProcessor(model_file=str(cli.tokenizer)).vocab_size()
    cli.work.mkdir(parents=True, exist_ok=True)
    (cli.work / "train_gpt.py").write_text(record_source(cli.record), encoding="utf-8")
    data_dir = data_layout(cli.data, cli.tokenizer, cli.work, cli.nproc, vocab)
    common = dict(ITERATIONS=str(cli.steps), MAX_WALLCLOCK_SECONDS="0", VAL_LOSS_EVERY="0", WARMUP_STEPS="20")
    common["TRAIN_LOG_EVERY"] = str(cli.steps)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={cli.nproc}"]
    base = {k: v for k, v in os.environ.items() if k not in ("RECIPE", "SEED", "RUN_ID")}
    variants = [("ours", {})] + [
        (v.split(":")[0], dict(kv.split("=", 1) for kv in v.split(":", 1)[1].split(","))) for v in cli.variant
    ]
    results: dict[str, list[dict]] = {}
    for seed in cli.seeds:
        env = dict(base, **common, SEED=str(seed))
        t0 = time.time()
        log = cli.work / f"record_seed{seed}.txt"
        record_env = dict(env, DATA_DIR=f"{data_dir}/", VOCAB_SIZE=str(vocab), RUN_ID=f"record_{seed}_{int(t0)}")
        lines = run_until_validated(torchrun + ["train_gpt.py"], record_env, cli.work, log, RECORD_VAL, cli.steps)
        results.setdefault("record", []).append(dict(last_step(lines, RECORD_TRAIN, RECORD_VAL, cli.steps), log=log))
        report(seed, "record", results["record"][-1], results["record"][-1], cli)
        for name, extra in variants:
            log = cli.work / f"{name}_seed{seed}.txt"
            ours_env = dict(env, **extra, RECIPE=cli.recipe, VOCAB_SIZE=str(vocab), LOG_DIR=str(cli.work / "logs"))
            ours_env.update(DATA_PATH=str(data_dir / "datasets" / f"fineweb10B_sp{vocab}"))
            ours_env.update(TOKENIZER_PATH=str(data_dir / "tokenizers" / f"fineweb_{vocab}_bpe.model"))
            ours_env.update(RUN_ID=f"{name}_{seed}_{int(t0)}", ARTIFACT_PATH=str(cli.work / f"{name}_{seed}.ptz"))
            cmd = torchrun + [str(ROOT / "train_gpt.py")]
            lines = run_until_validated(cmd, ours_env, cli.work, log, OURS_VAL, cli.steps)
            results.setdefault(name, []).append(dict(last_step(lines, OURS_TRAIN, OURS_VAL, cli.steps), log=log))
            report(seed, name, results[name][-1], results["record"][-1], cli)
    for name, runs in results.items():
        if name == "record" or len(cli.seeds) < 2:
            continue
        diffs = [
            r["val_bpb"] - q["val_bpb"] for r, q in zip(runs, results["record"]) if "val_bpb" in r and "val_bpb" in q
        ]
        if len(diffs) >= 2:
            print(
                f"bench run:{name} seeds:{len(diffs)} val_bpb_minus_record_mean:{statistics.mean(diffs):+.4f} "
                f"spread_stdev:{statistics.stdev(diffs):.4f} each:{' '.join(f'{d:+.4f}' for d in diffs)}"
            )


if __name__ == "__main__":
    main()
