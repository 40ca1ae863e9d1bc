"""Same behaviour, shown: train_gpt.py of a git revision against another (default: the working tree's), on tiny CPU
configurations, compared on every logged number and on the artifacts' bytes.

  python3 scripts/compare_revisions.py a24b18c                  # a24b18c against the working tree
  python3 scripts/compare_revisions.py a24b18c HEAD --only defaults,eval_only
  python3 scripts/compare_revisions.py HEAD worktree:records/frontier/train_gpt.py   # our record script, switches off

A side is a revision (its train_gpt.py) or REVISION:PATH, another script of that revision (`worktree:PATH`: the working
tree's). The record script under records/frontier must give the root's numbers with its own switches off: the second
line checks that (tests/test_frontier.py runs it on two configurations).

Both sides run in folders of their own, on the same tiny data (tests/helpers.py builds it), with the same relative
log and artifact paths, one CPU thread each. A log is compared from the line after the source it starts with; the
values that depend on the clock or on the script's own size (times, code_bytes and what adds it in) are masked, all
else must match to the character, and the artifacts must be byte-identical. The config: line is compared on the
settings both revisions have; a setting only one of them has (added or retired) is named in a note. One line per configuration, then a
verdict; exit 1 if anything differs. `eval_only` scores the first side's `gptq_brotli_sliding` artifact with both.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "data"), str(ROOT / "tests")]

TINY = dict(
    NUM_LAYERS="2",
    MODEL_DIM="64",
    NUM_HEADS="2",
    NUM_KV_HEADS="1",
    MLP_MULT="2",
    TRAIN_SEQ_LEN="64",
    TRAIN_BATCH_TOKENS=str(8 * 2 * 64),
    VAL_BATCH_SIZE=str(8 * 8 * 64),
    ITERATIONS="10",
    WARMDOWN_ITERS="4",
    WARMUP_STEPS="2",
    VAL_LOSS_EVERY="5",
    TRAIN_LOG_EVERY="1",
    MAX_WALLCLOCK_SECONDS="0",
    LOSS_IMPL="torch",
)
RECORD_TINY = dict(
    TINY,
    NUM_LAYERS="6",
    ITERATIONS="12",
    GPTQ_CALIBRATION_BATCHES="4",
    EVAL_STRIDE="16",
    TRAIN_LOG_EVERY="1",
    VAL_LOSS_EVERY="6",
    TTT_CHUNK_TOKENS="4096",  # the tiny split holds 18,624 predictions: TTT adapts on 4 chunks (one chunk: never)
)
GPTQ_BROTLI = dict(
    TINY,
    MATRIX_BITS="6",
    MATRIX_CLIP_SIGMAS="12.85",
    EMBED_CLIP_SIGMAS="20",
    GPTQ_CALIBRATION_BATCHES="4",
    COMPRESSOR="brotli",
    EVAL_STRIDE="16",
)
# name -> (variables on top of the data's, processes)
CONFIGS = {
    "defaults": (TINY, 1),
    "record": (dict(RECORD_TINY, RECIPE="record", PARALLEL_RESIDUAL_START="5"), 1),  # 2026-04-09: 7 of 11 layers
    "p180": (dict(RECORD_TINY, RECIPE="p180"), 1),
    "gptq_brotli_sliding": (GPTQ_BROTLI, 1),
    "ema_loops": (
        dict(
            TINY,
            NUM_LAYERS="4",
            NUM_LOOPS="1",
            LOOP_START="1",
            LOOP_END="2",
            ENABLE_LOOPING_AT="0.5",
            EMA_DECAY="0.9",
            TRAIN_SHUFFLE="1",
            PARALLEL_RESIDUAL_START="2",
            GRAD_CLIP_NORM="0.5",
            MUON_WD="0.05",
            WARMDOWN_FRAC="0.5",
            VAL_LOSS_EVERY="4",
        ),
        1,
    ),
    "eval_only": (dict(GPTQ_BROTLI, EVAL_ONLY="1"), 1),
    "two_processes": (dict(TINY, TRAIN_SHUFFLE="1", GPTQ_CALIBRATION_BATCHES="4", WARMUP_STEPS="0"), 2),
}
CLOCK_OR_CODE = re.compile(
    r"(^|_)(time|avg|est|code_bytes|total_bytes|compression_needed|tokens_per_s|within_cap|tokenizer_verified)$"
)  # tokenizer_verified: how many documents the pre-flight round-trips, the reach of a check, not a run's number
SEPARATOR = "=" * 100
EVENT = re.compile(r"[a-z0-9_]+:\S*( [a-z0-9_]+:\S*)*")  # a key:value line of the log (not config:{json})
# Log keys renamed since an earlier revision: old -> new, applied to both sides' logs before they are compared.
RENAMED = {"evaluation_8gpu_est": "total_eval_time_8gpu_est"}
# Lines that say something about the run without a number of it (a diagnostic one side added): named in the note, and
# left out of the comparison. ttt_note: TTT on a split of one chunk adapts nothing (its score is the sliding window's);
# gptq_calibration: the calibration's progress (times; its tokens are the config's); quant_note: no tensor of the
# model is large enough to be quantized (the tiny configurations'), a fact of the config, not a number of the run.
DIAGNOSTIC_LINES = ("ttt_note:", "gptq_calibration:", "quant_note:")
# Where the wall time went (issue 58): a line a phase, then the wall; every number in them is a clock's (masked). Where
# both sides log them, they are compared (the same phases in the same order); where one side does not, left out.
TIMING_LINES = ("phase:", "wall_time:")
TORCHRUN_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "TRITON_INTERPRET")


def masked_log(path: Path) -> list[str]:
    """The log after the source it starts with, each clock- or code-size-dependent value replaced by '*'."""
    lines = path.read_text(encoding="utf-8").split("\n")
    lines = lines[lines.index(SEPARATOR) + 1 :]
    return [" ".join(masked_token(token) for token in line.split(" ")) for line in lines]


def masked_token(token: str) -> str:
    """key:value with the key as it is named now (RENAMED) and the value '*' if it depends on the clock or code."""
    key, colon, value = token.partition(":")
    return RENAMED.get(key, key) + (":*" if CLOCK_OR_CODE.search(key) else colon + value)


def run_side(script: Path, folder: Path, env_vars: dict[str, str], nproc: int) -> subprocess.CompletedProcess:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(script, folder / "train_gpt.py")
    import helpers

    env = {k: v for k, v in os.environ.items() if k not in helpers.OUR_NAMES and k not in TORCHRUN_NAMES}
    env.update(env_vars, OMP_NUM_THREADS="1", RUN_ID="compare", LOG_DIR="logs", ARTIFACT_PATH="model.ptz")
    command = [sys.executable, "train_gpt.py"]
    if nproc > 1:
        command[1:1] = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=900)


def compare(name: str, sides: list[Path], work: Path, data_env: dict[str, str]) -> bool:
    variables, nproc = CONFIGS[name]
    env = dict(data_env, **variables)
    results = []
    for i, script in enumerate(sides):
        folder = work / f"side{i}" / name
        if env.get("EVAL_ONLY") == "1":  # both score the artifact the first side trained
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copy(work / "side0" / "gptq_brotli_sliding" / "model.ptz", folder / "model.ptz")
        result = run_side(script, folder, env, nproc)
        if result.returncode != 0:
            print(f"FAILED {name} side {i} (exit {result.returncode}): {result.stderr.strip()[-600:]}")
            return False
        results.append((masked_log(folder / "logs" / "compare.txt"), (folder / "model.ptz").read_bytes()))
    (log_a, artifact_a), (log_b, artifact_b) = results
    sha_a, sha_b = hashlib.sha256(artifact_a).hexdigest(), hashlib.sha256(artifact_b).hexdigest()
    log_a, log_b, note = comparable_logs(log_a, log_b)
    shown = sha_a[:12]
    if sha_a != sha_b and (header_note := same_payload(artifact_a, artifact_b)) is not None:
        shown, sha_b = f"{sha_a[:12]}/{sha_b[:12]}, the same payload{header_note}", sha_a
        header_sized = re.compile(r"\b(sha256|model_bytes|compression_ratio):\S+")  # the header is in the file
        log_a, log_b = (
            [header_sized.sub(r"\1:*", line) if line.startswith("artifact:") else line for line in log]
            for log in (log_a, log_b)
        )
    if log_a != log_b:
        first = next((i for i, (a, b) in enumerate(zip(log_a, log_b)) if a != b), min(len(log_a), len(log_b)))
        a, b = (log[first] if first < len(log) else "<end of log>" for log in (log_a, log_b))
        print(f"DIFFERENT {name}: log line {first + 1} after the source\n  a: {a}\n  b: {b}")
        return False
    if sha_a != sha_b:
        print(f"DIFFERENT {name}: logs agree but the artifacts differ ({sha_a[:12]} vs {sha_b[:12]})")
        return False
    numbers = sum(len(re.findall(r":-?\d+\.\d+", line)) for line in log_a)
    print(f"same {name}: {len(log_a)} log lines, {numbers} decimal numbers, artifact sha256 {shown}{note}")
    return True


def comparable_logs(log_a: list[str], log_b: list[str]) -> tuple[list[str], list[str], str]:
    """The masked logs as they are compared: the config cut to the settings both have, the diagnostic lines left out
    (and the phase lines, if one side has none), then each event cut to the keys both log (line by line, so after the
    lines only one side has are gone); a note."""
    log_a, log_b, note = common_config(log_a, log_b)
    timed = [any(line.startswith(TIMING_LINES) for line in log) for log in (log_a, log_b)]
    if timed[0] != timed[1]:
        log_a, log_b = ([line for line in log if not line.startswith(TIMING_LINES)] for log in (log_a, log_b))
        note += f"; phase lines only in {'a' if timed[0] else 'b'}"
    diagnostics = sorted({line.split(" ")[0] for line in log_a + log_b if line.startswith(DIAGNOSTIC_LINES)})
    log_a, log_b = ([line for line in log if not line.startswith(DIAGNOSTIC_LINES)] for log in (log_a, log_b))
    log_a, log_b, added = common_tokens(log_a, log_b)
    note += f"; log keys only in one side: {', '.join(added)}" if added else ""
    return log_a, log_b, note + (f"; diagnostic lines left out: {', '.join(diagnostics)}" if diagnostics else "")


def same_payload(a: bytes, b: bytes) -> str | None:
    """If the artifacts hold the same payload and their headers differ only by settings one side lacks (added or
    retired), a note naming those; else None. An artifact: a magic line, a JSON header line, the payload."""
    try:
        (magic_a, head_a, payload_a), (magic_b, head_b, payload_b) = (blob.split(b"\n", 2) for blob in (a, b))
        header_a, header_b = json.loads(head_a), json.loads(head_b)
    except ValueError:
        return None
    if magic_a != magic_b or payload_a != payload_b:
        return None
    model_a, model_b = header_a.pop("model", {}), header_b.pop("model", {})
    for header in (header_a, header_b):  # the payload's hash is compared above, with the payload itself
        header.pop("payload_sha256", None)
    for x, y in ((header_a, header_b), (model_a, model_b)):  # a field only one side has (tokenizer_sha256) is named
        if any(x[k] != y[k] for k in x.keys() & y.keys()):
            return None
    sides = (("a", header_a, model_a, header_b, model_b), ("b", header_b, model_b, header_a, model_a))
    only = [(side, sorted((h.keys() - oh.keys()) | (m.keys() - om.keys()))) for side, h, m, oh, om in sides]
    return "".join(f", header settings only in {side}: {', '.join(keys)}" for side, keys in only if keys)


def common_tokens(log_a: list[str], log_b: list[str]) -> tuple[list[str], list[str], list[str]]:
    """Event lines (key:value tokens) of the same event (the same first key) cut to the keys both have (a value one
    side added to a line, such as the artifact line's tokenizer:), and the names of the keys cut."""
    cut, out_a, out_b = set(), list(log_a), list(log_b)
    for i, (a, b) in enumerate(zip(log_a, log_b)):
        if a == b or not (EVENT.fullmatch(a) and EVENT.fullmatch(b)):
            continue
        keys_a, keys_b = ({token.split(":", 1)[0] for token in line.split(" ")} for line in (a, b))
        if a.split(":", 1)[0] != b.split(":", 1)[0]:
            continue
        cut |= keys_a ^ keys_b
        out_a[i], out_b[i] = (
            " ".join(t for t in line.split(" ") if t.split(":", 1)[0] in keys_a & keys_b) for line in (a, b)
        )
    return out_a, out_b, sorted(cut)


def common_config(log_a: list[str], log_b: list[str]) -> tuple[list[str], list[str], str]:
    """The logs with their config: lines cut to the settings both have, and a note naming the others."""
    configs = [[i for i, line in enumerate(log) if line.startswith("config:")] for log in (log_a, log_b)]
    if not all(len(found) == 1 for found in configs):
        return log_a, log_b, ""
    (i,), (j,) = configs
    a, b = json.loads(log_a[i][len("config:") :]), json.loads(log_b[j][len("config:") :])
    log_a, log_b = list(log_a), list(log_b)
    log_a[i] = "config:" + json.dumps({k: v for k, v in a.items() if k in b}, sort_keys=True)
    log_b[j] = "config:" + json.dumps({k: v for k, v in b.items() if k in a}, sort_keys=True)
    only_a, only_b = sorted(a.keys() - b.keys()), sorted(b.keys() - a.keys())
    note = "".join(
        f"; settings only in {side}: {', '.join(keys)}" for side, keys in (("a", only_a), ("b", only_b)) if keys
    )
    return log_a, log_b, note


def split_side(side: str) -> tuple[str, str]:
    """REVISION[:PATH] -> (revision, path in it); the path defaults to the root's train_gpt.py."""
    revision, _, path = side.partition(":")
    return revision, path or "train_gpt.py"


def script_of(side: str, work: Path) -> Path:
    revision, path = split_side(side)
    if revision == "worktree":
        return ROOT / path
    copy = work / f"train_gpt.{revision}.{path.replace('/', '_')}"
    copy.write_bytes(
        subprocess.run(["git", "show", f"{revision}:{path}"], cwd=ROOT, check=True, capture_output=True).stdout
    )
    return copy


def revision_error(side: str) -> str | None:
    """Why `side` cannot be compared (not a commit here, or without that script), or None if it can."""
    revision, path = split_side(side)
    if not path.endswith(".py"):
        return f"{side!r}: {path} is not a Python script; give REVISION or REVISION:PATH of a train_gpt.py"
    if revision == "worktree":
        return None if (ROOT / path).is_file() else f"the working tree has no {path}"
    found = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"], cwd=ROOT, text=True, capture_output=True
    )
    if found.returncode != 0:
        return f"{revision!r} is not a commit of this repository (git log --oneline lists them)"
    if subprocess.run(["git", "cat-file", "-e", f"{revision}:{path}"], cwd=ROOT, capture_output=True).returncode:
        return f"{revision} has no {path}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("base", help="a git revision, e.g. a24b18c (REVISION:PATH: another script of it)")
    parser.add_argument("other", nargs="?", default="worktree", help="another revision (default: the working tree)")
    parser.add_argument("--only", help=f"comma-separated names of {', '.join(CONFIGS)}")
    parser.add_argument("--keep", type=Path, help="run in this folder and keep it (default: a temporary one)")
    cli = parser.parse_args(argv)
    for revision in (cli.base, cli.other):
        if (why := revision_error(revision)) is not None:
            parser.error(why)
    names = cli.only.split(",") if cli.only else list(CONFIGS)
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        parser.error(f"--only: unknown {', '.join(unknown)}; the names are {', '.join(CONFIGS)}")
    if "eval_only" in names and "gptq_brotli_sliding" not in names:
        names.insert(names.index("eval_only"), "gptq_brotli_sliding")  # it makes the artifact eval_only scores
    import helpers  # the tests' tiny data: a SentencePiece tokenizer and shards made on the spot

    with tempfile.TemporaryDirectory() as tmp:
        work = cli.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        data = helpers.make_tiny_data(Path(tempfile.mkdtemp(dir=work)))
        data_env = dict(
            DATA_PATH=str(data.data_path),
            TOKENIZER_PATH=str(data.tokenizer_path),
            VOCAB_SIZE=str(data.vocab_size),
            DATA_DIR=str(data.data_path.parent),
        )  # its default moved
        sides = [script_of(cli.base, work), script_of(cli.other, work)]
        print(f"a: {cli.base}  b: {cli.other}  data: {data.data_path}")
        ok = [compare(name, sides, work, data_env) for name in names]
    print(f"{sum(ok)} of {len(ok)} configurations the same" + ("" if all(ok) else ": DIFFERENT"))
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
