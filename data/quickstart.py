"""Quick start: train a small model end to end on this machine, with no download and no GPU needed.

  bash quickstart.sh             # installs requirements.txt, then runs this script
  python3 data/quickstart.py     # the same, requirements already installed
  python3 data/quickstart.py --seconds 600 --data stdlib   # longer; options: --help

Data: with the published FineWeb data here (data/datasets/fineweb10B_sp1024 and
data/tokenizers/fineweb_1024_bpe.model, from data/cached_challenge_fineweb.py) it trains on that.
Otherwise it builds a small dataset from English text that ships with every Python: the docstrings
in the standard library's own sources and pydoc's help topics (about 2 MB; deterministic for a given
Python version, which names the dataset and is recorded in its manifest), trains a 512-token
tokenizer on it with data/build_shards.py, and trains on that. Either way it then runs train_gpt.py
with a tiny model under a wallclock cap and prints val_bpb (after the int8+zlib round trip) and the
artifact size. The numbers are a smoke test of the pipeline, not a score: a minutes-long CPU run on
a 2 MB corpus says nothing about a 10-minute 8xH100 run on FineWeb.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import os
import platform
import queue
import re
import shlex
import subprocess
import sys
import sysconfig
import threading
import time
from pathlib import Path

try:  # the requirements: quickstart.sh checks the options (--check) before it installs them, without these
    import torch

    import build_shards
except ImportError as exc:
    torch = build_shards = None
    NOT_INSTALLED = exc.name

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = REPO_ROOT / "data"
FINEWEB_DATA = DATA_DIR / "datasets" / "fineweb10B_sp1024"
FINEWEB_TOKENIZER = DATA_DIR / "tokenizers" / "fineweb_1024_bpe.model"
STDLIB_VOCAB_SIZE = 512
STDLIB_VAL_FRACTION = 0.1
SKIPPED_DIRS = {
    "site-packages",
    "dist-packages",
    "__pycache__",
    "test",
    "tests",
    "idle_test",
    "encodings",
}  # encodings: a hundred near-identical generated codec docstrings
CPU_VAL_TOKENS = 262_144  # FineWeb's 62M validation tokens take hours on a CPU: use a prefix there

# A model that learns something in two minutes on two CPU cores (the trainer's defaults are for 8 H100s):
# 0.5M parameters, about 0.3 s per 4096-token step there, so about 400 steps. At an equal token budget,
# 4096-token steps beat 8192-token ones (val_bpb 2.43 vs 2.62 at 1.2M tokens) and the default learning
# rates beat doubled ones (2.47). The wallclock cap ends training; warm-down covers about the last 120 steps.
TINY_MODEL = dict(
    NUM_LAYERS=4,
    MODEL_DIM=128,
    NUM_HEADS=4,
    NUM_KV_HEADS=2,
    MLP_MULT=2,
    TRAIN_SEQ_LEN=256,
    TRAIN_BATCH_TOKENS=8 * 256 * 2,
    VAL_BATCH_SIZE=8 * 256 * 8,
    ITERATIONS=100_000,
    WARMDOWN_ITERS=120,
    VAL_LOSS_EVERY=0,
    TRAIN_LOG_EVERY=50,
)

# What data/README.md reports for `bash quickstart.sh` with the default --seconds on the standard-library data
# (tests/test_data_quickstart.py checks that the README quotes these numbers). A CPU run that makes far fewer
# steps per second of training than this says so in its summary.
REFERENCE_RUN = dict(machine="an idle 2-core AMD EPYC", seconds=120, steps=450, val_bpb=2.28)
SHORTFALL_FRACTION = 0.5  # fewer than half the reference's steps per second: "far fewer"

# torch's default thread count is one per core. On a 2-core machine where other processes keep the cores busy,
# each parallel region then waits for a thread that is not running: the quick start's step took 36 s that way,
# 1.3 s with OMP_NUM_THREADS=1 (issue 20; data/README.md has another such measurement). So train_gpt.py gets
# the cores that other processes leave idle, at least 1, at most MAX_TRAIN_THREADS: a guess, not measured
# (only 2-core machines were), that the tiny model's 128-wide matrices leave more threads little to share.
# Idle is measured (/proc/stat, over IDLE_SAMPLE_SECONDS just before training), not read from the 1-minute load
# average: that still counts the quick start's own pip install and data build, and gave a fresh idle 2-core
# machine 1 thread (issue 44: 247 to 269 steps where 2 threads make about 450). Without /proc/stat: the average.
MAX_TRAIN_THREADS = 8
IDLE_SAMPLE_SECONDS = 1.0
PROC_STAT = Path("/proc/stat")
HEARTBEAT_SECONDS = 15  # train_gpt.py prints nothing while it evaluates: say what it does after this long


# =================================================================================================
# The standard-library corpus
# =================================================================================================


def stdlib_documents(stdlib_dir: Path | None = None) -> list[str]:
    """English documents from the standard library's sources, in a fixed order: one per module
    (its docstrings in source order, blank-line separated) and one per pydoc help topic."""
    root = Path(stdlib_dir or sysconfig.get_paths()["stdlib"])
    files = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = [d for d in subfolders if d not in SKIPPED_DIRS]  # prune: never walk site-packages
        files += [Path(folder) / n for n in names if n.endswith(".py")]
    files.sort(key=lambda p: p.relative_to(root).as_posix())
    if not files:
        raise build_shards.BuildError(
            f"no Python sources under {root}: this Python ships its standard "
            "library without .py files. Use --data fineweb, or build shards from "
            "any text with data/build_shards.py."
        )
    documents = []
    for path in files:
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except (SyntaxError, ValueError):  # not Python 3 source (test data); not documentation anyway
            continue
        if path.relative_to(root).as_posix() == "pydoc_data/topics.py":
            documents += help_topics(tree)
        else:
            documents.append("\n\n".join(docstrings(tree)))
    unique = dict.fromkeys(d for d in documents if d.strip())  # drop empty and repeated documents, keep order
    return list(unique)


def docstrings(node: ast.AST) -> list[str]:
    """The docstrings of a module and of its classes and functions, depth first in source order."""
    found = []
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
        doc = ast.get_docstring(node, clean=True)
        if doc:
            found.append(doc)
    for child in ast.iter_child_nodes(node):
        found += docstrings(child)
    return found


def help_topics(tree: ast.Module) -> list[str]:
    """pydoc_data/topics.py is one dict literal: help topic -> its text from the language reference."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
            topics = ast.literal_eval(node.value)
            return [topics[k] for k in sorted(topics) if topics[k].strip()]
    return []


def stdlib_dataset(
    data_dir: Path = DATA_DIR, rebuild: bool = False, workers: int = 1, stdlib_dir: Path | None = None
) -> tuple[Path, Path, int]:
    """Build (or reuse) the standard-library dataset under data_dir/datasets and data_dir/tokenizers;
    returns (data path, tokenizer path, vocab size)."""
    version = platform.python_version()
    name = f"pystdlib_{version}_sp{STDLIB_VOCAB_SIZE}"
    output = data_dir / "datasets" / name
    tokenizer = data_dir / "tokenizers" / f"{name}.model"
    if not rebuild and dataset_is_complete(output, tokenizer):
        print(f"quickstart: reusing {output} (made by Python {version})", flush=True)
        return output, tokenizer, STDLIB_VOCAB_SIZE
    t0 = time.perf_counter()
    documents = stdlib_documents(stdlib_dir)
    source = data_dir / "datasets" / f"pystdlib_{version}.jsonl"
    source.parent.mkdir(parents=True, exist_ok=True)
    with open(source, "w", encoding="utf-8") as f:
        for text in documents:
            f.write(json.dumps({"text": text}) + "\n")
    print(
        f"quickstart: {len(documents)} documents ({source.stat().st_size / 1e6:.1f}MB of JSONL) from the "
        f"standard library of Python {version} at {stdlib_dir or sysconfig.get_paths()['stdlib']} "
        f"({time.perf_counter() - t0:.1f}s) -> {source}",
        flush=True,
    )
    build_shards.build(
        build_shards.BuildConfig(
            inputs=[str(source)],
            output=output,
            tokenizer_out=tokenizer,
            vocab_size=STDLIB_VOCAB_SIZE,
            val_fraction=STDLIB_VAL_FRACTION,
            workers=workers,
            overwrite=True,
            name=name,
        )
    )
    return output, tokenizer, STDLIB_VOCAB_SIZE


def dataset_is_complete(output: Path, tokenizer: Path) -> bool:
    """The manifest, tokenizer and every shard it lists are there and valid."""
    try:
        manifest = json.loads((output / "manifest.json").read_text(encoding="utf-8"))
        files = manifest["datasets"][0]["files"]
        for entry in files:
            if build_shards.train_gpt.read_shard_header(output / entry["name"]) != entry["tokens"]:
                return False
        return tokenizer.is_file() and build_shards.file_sha256(tokenizer) == manifest["tokenizers"][0]["sha256"]
    except (OSError, KeyError, IndexError, ValueError):
        return False


# =================================================================================================
# FineWeb, when it is here
# =================================================================================================


def fineweb_present() -> bool:
    return (
        FINEWEB_TOKENIZER.is_file()
        and any(FINEWEB_DATA.glob("fineweb_train_*.bin"))
        and any(FINEWEB_DATA.glob("fineweb_val_*.bin"))
    )


def fineweb_for_cpu() -> Path:
    """FineWeb's training shards (linked) with a validation prefix of CPU_VAL_TOKENS, cut at a BOS."""
    train_gpt = build_shards.train_gpt
    output = DATA_DIR / "datasets" / "fineweb10B_sp1024_cpu_quickstart"
    output.mkdir(parents=True, exist_ok=True)
    for old in output.glob("fineweb_*.bin"):
        old.unlink()
    for shard in sorted(FINEWEB_DATA.glob("fineweb_train_*.bin")):
        (output / shard.name).symlink_to(shard.resolve())
    val = train_gpt.load_data_shard(sorted(FINEWEB_DATA.glob("fineweb_val_*.bin"))[0]).numpy()
    bos = (val[: CPU_VAL_TOKENS + 1] == build_shards.BOS_ID).nonzero()[0]
    cut = int(bos[-1]) if len(bos) > 1 else min(CPU_VAL_TOKENS, val.size)
    build_shards.write_data_shard(output / "fineweb_val_000000.bin", val[:cut])
    print(
        f"quickstart: no GPU, so validation uses the first {cut} tokens of FineWeb's validation split "
        f"(the full split takes hours on a CPU); val_bpb is not comparable with full-split scores",
        flush=True,
    )
    return output


# =================================================================================================
# Training
# =================================================================================================


def train_command(
    data_path: Path, tokenizer: Path, vocab_size: int, seconds: float, run_id: str, threads: int | None = None
) -> tuple[dict[str, str], list[str]]:
    """The variables train_gpt.py runs with (on top of this process's environment), and its argv.
    threads: OMP_NUM_THREADS, or None to leave the environment's."""
    settings = {k: str(v) for k, v in TINY_MODEL.items()}
    settings.update(
        DATA_PATH=str(data_path),
        TOKENIZER_PATH=str(tokenizer),
        VOCAB_SIZE=str(vocab_size),
        MAX_WALLCLOCK_SECONDS=str(seconds),
        RUN_ID=run_id,
        ARTIFACT_PATH=str(REPO_ROOT / "logs" / f"{run_id}.int8.ptz"),
    )
    if not torch.cuda.is_available():
        settings["WARMUP_STEPS"] = "0"  # warm-up exists to compile CUDA kernels off the clock
    if threads is not None:
        settings["OMP_NUM_THREADS"] = str(threads)
    return settings, [sys.executable, str(REPO_ROOT / "train_gpt.py")]


def shell_line(settings: dict[str, str], command: list[str], cwd: Path) -> str:
    """One line for a POSIX shell that runs exactly that: every word quoted, so paths with spaces work."""
    return " ".join(
        [f"cd {shlex.quote(str(cwd))} &&", *(f"{k}={shlex.quote(v)}" for k, v in settings.items()), shlex.join(command)]
    )


def cpu_times(cpus: set[int]) -> dict[int, tuple[int, int]]:
    """{cpu: (busy, total) clock ticks since boot} of those of cpus that /proc/stat lists; {} without it."""
    try:
        lines = PROC_STAT.read_text().splitlines()
    except OSError:
        return {}
    times = {}
    for name, *fields in (line.split() for line in lines if line.strip()):
        if name[3:].isdigit() and name.startswith("cpu") and int(name[3:]) in cpus:
            ticks = [int(v) for v in fields[:8]]  # user nice system idle iowait irq softirq steal
            times[int(name[3:])] = (sum(ticks) - ticks[3] - ticks[4], sum(ticks))
    return times


def busy_cores(cpus: set[int]) -> float | None:
    """How many of cpus' worth of time other processes use over the next IDLE_SAMPLE_SECONDS (this one sleeps);
    None where /proc/stat does not list them all (not Linux)."""
    before = cpu_times(cpus)
    if len(before) < len(cpus):
        return None
    time.sleep(IDLE_SAMPLE_SECONDS)
    after = cpu_times(cpus)
    if len(after) < len(cpus):
        return None
    return sum((after[c][0] - before[c][0]) / max(after[c][1] - before[c][1], 1) for c in cpus)


def train_threads() -> tuple[int | None, str]:
    """OMP_NUM_THREADS for train_gpt.py (see MAX_TRAIN_THREADS) and the reason, in words; None where the
    environment sets OMP_NUM_THREADS: the user's choice stands."""
    if os.environ.get("OMP_NUM_THREADS"):
        return None, "as set in the environment"
    if hasattr(os, "sched_getaffinity"):
        cpus = set(os.sched_getaffinity(0))  # the cores this process may use (taskset, containers)
    else:
        cpus = set(range(os.cpu_count() or 1))
    cores = len(cpus)
    busy = busy_cores(cpus)
    if busy is not None:
        threads = max(1, min(int(cores - busy + 0.5), MAX_TRAIN_THREADS))
        return threads, f"{cores} cores, {busy:.1f} of them busy over {IDLE_SAMPLE_SECONDS:g} s just before training"
    if not hasattr(os, "getloadavg"):
        return max(1, min(cores, MAX_TRAIN_THREADS)), f"{cores} cores; this system gives no load average"
    load = os.getloadavg()[0]
    threads = max(1, min(int(cores - load + 0.5), MAX_TRAIN_THREADS))
    return threads, f"{cores} cores, load average {load:.1f} over the last minute"


def quiet_phase(last_line: str, seconds: float) -> str:
    """What train_gpt.py is doing while it prints nothing, judged by the last line it printed."""
    step = re.match(r"step:\d+/\d+ train_loss:\S+ train_time:(\d+)ms", last_line)
    if step and 0 < seconds <= int(step.group(1)) / 1000:
        return "training is over and train_gpt.py is evaluating the model on the validation split"
    if step:
        return f"training; train_gpt.py prints a line every {TINY_MODEL['TRAIN_LOG_EVERY']} steps"
    if last_line.startswith("artifact:"):
        return "train_gpt.py is evaluating the artifact after the int8+zlib round trip"
    return "train_gpt.py is running"


def forward_lines(stream, lines: queue.Queue) -> None:
    """Put each line of stream on lines, then None: a reader thread, so that silence can be timed."""
    for line in stream:
        lines.put(line)
    lines.put(None)


def train(data_path: Path, tokenizer: Path, vocab_size: int, seconds: float, run_id: str) -> dict:
    """Run train_gpt.py as a user would; stream its output; return the figures it printed."""
    threads, reason = train_threads()
    settings, command = train_command(data_path, tokenizer, vocab_size, seconds, run_id, threads)
    used = f"OMP_NUM_THREADS={settings.get('OMP_NUM_THREADS', os.environ.get('OMP_NUM_THREADS'))}"
    print(f"quickstart: train_gpt.py runs with {used} ({reason}; set OMP_NUM_THREADS to choose)", flush=True)
    print(
        "quickstart: training with this command (paste it to run it again):\n"
        + shell_line(settings, command, REPO_ROOT),
        flush=True,
    )
    env = {**os.environ, **settings}
    figures = {"threads": used}
    lines = queue.Queue()
    last_line = ""
    with subprocess.Popen(
        command, env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    ) as proc:
        threading.Thread(target=forward_lines, args=(proc.stdout, lines), daemon=True).start()
        quiet_since = time.perf_counter()
        while True:
            try:
                line = lines.get(timeout=HEARTBEAT_SECONDS)
            except queue.Empty:
                quiet_s = time.perf_counter() - quiet_since
                print(f"quickstart: {quiet_phase(last_line, seconds)} ({quiet_s:.0f}s without output)", flush=True)
                continue
            if line is None:
                break
            quiet_since = time.perf_counter()
            last_line = line
            print(line, end="", flush=True)
            if line.startswith("final_int8_zlib_roundtrip_exact"):  # the score line
                figures["val_bpb"] = re.search(r"val_bpb:(\S+)", line).group(1)
            step = re.match(r"step:(\d+)/", line)
            if step:
                figures["steps"] = int(step.group(1))
            for key in ("total_bytes", "model_bytes", "code_bytes"):
                m = re.search(rf"(?:^|\s){key}:(\d+)", line)
                if m:
                    figures[key] = m.group(1)
    if proc.returncode != 0:  # a pre-flight error (exit 2) writes no log: point at one only if it exists
        log = Path("logs") / f"{run_id}.txt"
        where = f"above and in {log}" if (REPO_ROOT / log).exists() else "above"
        raise SystemExit(f"quickstart: train_gpt.py failed (exit code {proc.returncode}); its output is {where}")
    return figures


def shortfall_note(steps: int, seconds: float, threads: str) -> str:
    """For the summary of a CPU run: a warning when far fewer steps ran than in REFERENCE_RUN, else ''."""
    expected = REFERENCE_RUN["steps"] * seconds / REFERENCE_RUN["seconds"]
    if steps >= SHORTFALL_FRACTION * expected:
        return ""
    return (
        f"quickstart: only {steps} steps ran in {seconds:g}s of training, where data/README.md's reference run "
        f"({REFERENCE_RUN['machine']}) makes about {expected:.0f}; fewer steps give a higher val_bpb (that run: "
        f"{REFERENCE_RUN['val_bpb']} after {REFERENCE_RUN['steps']} steps). Nothing is broken: this machine is "
        f"slow or busy (other processes on its cores slow every step; train_gpt.py ran with {threads}). Run it "
        "again on an idle machine, or with more --seconds."
    )


def positive_seconds(text: str) -> float:
    """--seconds: a finite number above 0. train_gpt.py reads MAX_WALLCLOCK_SECONDS=0 as no cap at all: the tiny
    model's 100,000 steps, hours on a CPU; a negative one is a pre-flight error."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0 (0 would mean no cap: hours)")
    return value


def positive_workers(text: str) -> int:
    """--workers: a whole number of encoding processes, at least 1."""
    if not text.strip().isdecimal() or int(text) < 1:
        cores = os.cpu_count() or 1
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of processes: give a whole number from 1 up (the default is this machine's "
            f"{cores} cores)"
        )
    return int(text)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--data",
        choices=["auto", "fineweb", "stdlib"],
        default="auto",
        help="auto: FineWeb sp1024 when it is in data/, else the standard-library text",
    )
    p.add_argument("--seconds", type=positive_seconds, default=120, help="training wallclock cap, > 0 (seconds)")
    p.add_argument("--rebuild", action="store_true", help="rebuild the standard-library dataset")
    p.add_argument("--workers", type=positive_workers, default=os.cpu_count() or 1, help="encoding processes, >= 1")
    p.add_argument("--check", action="store_true", help="check the options and exit (quickstart.sh, before installing)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.check:
        return
    if torch is None:
        raise SystemExit(
            f"quickstart: {NOT_INSTALLED} is not installed: bash quickstart.sh installs the requirements, or "
            "python3 -m pip install -r requirements.txt"
        )
    t0 = time.perf_counter()
    use_fineweb = args.data == "fineweb" or (args.data == "auto" and fineweb_present())
    if use_fineweb:
        if not fineweb_present():
            raise SystemExit(
                f"quickstart: --data fineweb needs {FINEWEB_DATA.relative_to(REPO_ROOT)} and "
                f"{FINEWEB_TOKENIZER.relative_to(REPO_ROOT)}: python3 data/cached_challenge_fineweb.py "
                "--variant sp1024 --train-shards 1"
            )
        data_path = FINEWEB_DATA if torch.cuda.is_available() else fineweb_for_cpu()
        tokenizer, vocab_size, what = FINEWEB_TOKENIZER, 1024, "FineWeb sp1024"
    else:
        try:
            data_path, tokenizer, vocab_size = stdlib_dataset(DATA_DIR, args.rebuild, args.workers)
        except build_shards.BuildError as exc:  # the message says what to do; a traceback would hide it
            raise SystemExit(f"quickstart: {exc}") from None
        what = f"the Python {platform.python_version()} standard-library docs"
    run_id = time.strftime("quickstart_%Y%m%d_%H%M%S")
    figures = train(data_path, tokenizer, vocab_size, args.seconds, run_id)
    print(
        f"quickstart: done in {time.perf_counter() - t0:.0f}s on {what}: "
        f"val_bpb:{figures.get('val_bpb', '?')} (after the int8+zlib round trip) steps:{figures.get('steps', '?')} "
        f"artifact_bytes:{figures.get('total_bytes', '?')} (code {figures.get('code_bytes', '?')} + "
        f"model {figures.get('model_bytes', '?')}) log:logs/{run_id}.txt",
        flush=True,
    )
    if "steps" in figures and not torch.cuda.is_available():  # the reference run is a CPU run
        note = shortfall_note(figures["steps"], args.seconds, figures["threads"])
        if note:
            print(note, flush=True)


if __name__ == "__main__":
    main()
