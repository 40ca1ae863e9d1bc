"""scripts/ab.py, run as a user would: end to end on CPU (2 slots, 2 variants, 2 seeds of the tiny configuration,
interrupted and resumed, then an --eval-only A/B of the same artifacts, TTT off against on, and --plan on a copy of
them moved elsewhere); its GPU scheduling on a fake host (a fake nvidia-smi listing 4 GPUs, a fake trainer under
torchrun that prints what it was given); runs of a fake trainer that ends in a second (killed after its round trip,
edited between two commands, its stdout's reader gone); each bad input's one-line error (exit 2, nothing run); its
parsing, statistics (against the t distribution written out), identity and plot data as functions.

Run: python3 -m pytest -q tests/test_ab.py   (CPU only; about 70 s of CPU time: 1.5 to 3 minutes on 2 busy cores)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import build_shards
import train_gpt
from helpers import BOS_ID, OUR_NAMES, ROOT, TinyData, tiny_env

AB = ROOT / "scripts" / "ab.py"
sys.path.insert(0, str(ROOT / "scripts"))
import ab  # noqa: E402

SLIDING_LINE = re.compile(r"^final_int8_zlib_sliding_window_exact val_loss:\S+ val_bpb:(\S+)$", re.M)
ARTIFACT_SHA = re.compile(r"^artifact:\S+ sha256:([0-9a-f]{64}) ", re.M)
ROUNDTRIP_LINE = re.compile(r"^final_int8_zlib_roundtrip_exact val_loss:\S+ val_bpb:(\S+)$", re.M)


@pytest.fixture(autouse=True, scope="module")
def compile_cache_home(tmp_path_factory):
    """ab.py's default compile cache ($XDG_CACHE_HOME/parameter-golf/inductor/HOST) in a folder of this module's, not
    in the user's home: each test's ab.py and the trainers it starts see this XDG_CACHE_HOME."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache_home")))
        yield Path(os.environ["XDG_CACHE_HOME"])


def environment(**extra) -> dict[str, str]:
    """The test's environment less any of the trainer's variables and of inductor's (torch sets TORCHINDUCTOR_CACHE_DIR
    in the process once an earlier test of this worker compiled), one thread a process."""
    env = {k: v for k, v in os.environ.items() if k not in OUR_NAMES and not k.startswith("TORCHINDUCTOR_")}
    return dict(env, OMP_NUM_THREADS="1", **extra)


def ab_run(args: list[str], cwd: Path, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(AB), *args], cwd=cwd, env=env or environment(), capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


def short_val(data: TinyData, folder: Path, tokens: int, train: bool = True) -> Path:
    """The tiny data's training shards (links) and the first whole documents of its validation split, about `tokens`
    of them: each run then scores in a fraction of the time."""
    folder.mkdir()
    if train:
        for shard in data.data_path.glob("fineweb_train_*.bin"):
            (folder / shard.name).symlink_to(shard)
    val = train_gpt.load_data_shard(data.data_path / "fineweb_val_000000.bin").numpy()
    cut = max(i for i in (val[: tokens + 1] == BOS_ID).nonzero()[0])  # before the document that does not fit
    build_shards.write_data_shard(folder / "fineweb_val_000000.bin", val[:cut])
    return folder


def common(data: TinyData, tmp_path: Path) -> list[str]:
    """--common: the tiny configuration, scored after the round trip and on sliding windows."""
    env = tiny_env(data, tmp_path, ITERATIONS=6, EVAL_STRIDE=32)
    if not (tmp_path / "short_val").exists():
        short_val(data, tmp_path / "short_val", 6000)
    env["DATA_PATH"] = str(tmp_path / "short_val")
    return ["--common"] + [f"{k}={v}" for k, v in env.items() if k not in ("RUN_ID", "LOG_DIR", "ARTIFACT_PATH")]


def results(out: Path) -> dict:
    return json.loads((out / "results.json").read_text())


@pytest.fixture(scope="module")
def trained(tiny_data, tmp_path_factory):
    """base against lr04 (MATRIX_LR=0.04), seeds 1 and 2, 2 at a time: SIGINT once the second wave started, then
    the same command again. Returns (folder, the command's arguments, the interrupted call, the resumed call)."""
    cwd = tmp_path_factory.mktemp("ab")
    args = ["--slots", "2", "--out", "out", "--seeds", "1", "2", *common(tiny_data, cwd)]
    args += ["--variant", "base", "--variant", "lr04", "MATRIX_LR=0.04"]
    proc = subprocess.Popen(
        [sys.executable, str(AB), *args], cwd=cwd, env=environment(), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    out, deadline = cwd / "out", time.time() + 240
    while not (out / "console" / "lr04_seed2.txt").exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)  # the second wave's trainers are starting: stopped before they score
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    first = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    first.results = results(out)
    again = ab_run(args, cwd)
    return out, args, first, again


def test_ab_interrupted_keeps_the_finished_runs_and_the_same_command_resumes_the_others(trained):
    out, _, first, again = trained
    assert first.returncode == 130, first.stdout + first.stderr
    assert "Traceback" not in first.stderr
    assert "interrupted: the finished runs are kept" in first.stdout
    # the first wave (seed 1's pair) had finished; seed 2's was stopped: nothing in it counts as finished
    assert re.search(r"^finished base_seed1 ", first.stdout, re.M) and re.search(
        r"^finished lr04_seed1 ", first.stdout, re.M
    )
    before = {r["name"]: r["status"] for r in first.results["runs"]}
    assert before == dict(
        base_seed1="finished", lr04_seed1="finished", base_seed2="interrupted", lr04_seed2="interrupted"
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert "done before: finished base_seed1" in again.stdout and "done before: finished lr04_seed1" in again.stdout
    assert "start base_seed1" not in again.stdout and "start lr04_seed1" not in again.stdout
    assert re.search(r"^rerun lr04_seed2: it was interrupted: ", again.stdout, re.M), again.stdout
    assert (out / "console" / "lr04_seed2.failed.txt").is_file()  # the stopped attempt's output, kept beside
    assert {r["name"]: r["status"] for r in results(out)["runs"]} == dict.fromkeys(before, "finished")


def test_ab_pairs_the_seeds_and_reports_what_the_logs_say(trained):
    out, args, _, again = trained
    score = {}
    for name in ("base_seed1", "base_seed2", "lr04_seed1", "lr04_seed2"):
        text = (out / "console" / f"{name}.txt").read_text()
        score[name] = float(SLIDING_LINE.findall(text)[-1])
        assert (out / "artifacts" / f"{name}.ptz").is_file() and (out / "logs" / f"{name}.txt").is_file()
    diffs = [score["lr04_seed1"] - score["base_seed1"], score["lr04_seed2"] - score["base_seed2"]]
    mean, sd = sum(diffs) / 2, abs(diffs[0] - diffs[1]) / math.sqrt(2)
    p = 1 - 2 / math.pi * math.atan(abs(mean) / (sd / math.sqrt(2)))  # Student's t with 1 df is Cauchy's
    (row,) = results(out)["comparisons"]
    got = row["kinds"]["sliding_window"]
    assert (row["variant"], row["baseline"], got["n"]) == ("lr04", "base", 2)
    assert got["mean"] == pytest.approx(mean, abs=1e-9) and got["sd"] == pytest.approx(sd, abs=1e-9)
    assert got["p"] == pytest.approx(p, rel=1e-6)
    assert list(row["kinds"]) == ["pre_export", "roundtrip", "sliding_window", "score"]
    assert row["kinds"]["score"] == got and row["score_lines"] == dict(base=["sliding_window"], lr04=["sliding_window"])
    better = "lr04" if mean < 0 else "base"
    verdict = f"- {better} better by {abs(mean):.4f} ± {sd:.4f} bpb on sliding windows, p={p:.3g}, 2 seeds"
    if p >= 0.05:
        verdict = (
            f"- no clear difference: lr04 - base = {mean:+.4f} ± {sd:.4f} bpb on sliding windows, p={p:.3g}, 2 seeds"
        )
    report = (out / "report.md").read_text()
    assert verdict in report.splitlines() and verdict in again.stdout
    assert report.startswith("`python3 scripts/ab.py --slots 2 --out out")  # the command above the table
    (base_row,) = [line for line in report.splitlines() if line.startswith("| base_seed1 | 1 | 6 | ")]
    assert f" | {score['base_seed1']:.5f} | finished |" in base_row  # the sliding-window score, the last column
    (diff_row,) = [line for line in report.splitlines() if line.startswith("| lr04 - base | 2 | ")]
    assert f" | {mean:+.5f} ± {sd:.5f} (p={p:.3g}) | {diffs[0]:+.5f} {diffs[1]:+.5f} |" in diff_row
    assert "config lr04 vs base: set by the variants: MATRIX_LR 0.02 -> 0.04" in again.stdout
    assert "ALSO DIFFERS" not in again.stdout
    png = out / "train_loss.png"  # matplotlib is optional: without it, no file and a note instead
    assert (png.is_file() and png.stat().st_size > 1000) or "matplotlib is not installed" in again.stdout


def test_ab_report_shows_where_each_variants_minutes_go(trained):
    """Issue 58: per variant, the mean over its runs of each phase the trainer logged (phase:NAME phase_time:Ss), their
    sum, the wall the log states and the process's wall as ab.py timed it, in report.md and on the console. Seed 1's
    runs finished before the interrupt: their process times are the first call's, kept by the second."""
    out, _, _, again = trained
    runs = {r["name"]: r["metrics"] for r in results(out)["runs"]}
    assert all({"phases", "wall_s", "process_s"} <= set(m) for m in runs.values()), runs
    report = (out / "report.md").read_text()
    head = "| seconds, mean over runs (compile) | base (2 runs) | lr04 (2 runs) |"
    assert head in report and head in again.stdout
    table = report[report.index(head) :].split("\n\n")[0].splitlines()[2:]
    rows = {line.split(" | ")[0].removeprefix("| "): line.strip(" |").split(" | ")[1:] for line in table}
    phases = ["startup", "model", "train", "validation", "quantize", "artifact_write", "artifact_load", "roundtrip"]
    phases += ["sliding_window", "teardown"]
    totals = ["sum of the phases", "wall, as logged", "process, as ab.py timed it", "not in the log"]
    assert list(rows) == phases + totals
    for column, variant in enumerate(("base", "lr04")):
        logged = []
        for seed in (1, 2):
            text = (out / "logs" / f"{variant}_seed{seed}.txt").read_text()
            logged.append(
                {name: float(s) for name, s in re.findall(r"^phase:(\w+) phase_time:([0-9.]+)s ", text, re.M)}
            )
        for name in phases:
            assert rows[name][column] == f"{(logged[0][name] + logged[1][name]) / 2:.1f}", (variant, name)
        walls = [runs[f"{variant}_seed{seed}"]["wall_s"] for seed in (1, 2)]
        process = [runs[f"{variant}_seed{seed}"]["process_s"] for seed in (1, 2)]
        assert rows["wall, as logged"][column] == f"{sum(walls) / 2:.1f}"
        assert rows["process, as ab.py timed it"][column] == f"{sum(process) / 2:.1f}"
        assert all(0 <= p - w < 5 for p, w in zip(process, walls)), (process, walls)  # the fork and the exit


def test_ab_eval_only_rescores_the_same_artifacts_with_each_variants_settings(trained, tiny_data):
    out, _, _, _ = trained
    cwd = out.parent
    val = short_val(tiny_data, cwd / "other_val", 3000, train=False)  # --val: another validation set
    args = ["--slots", "2", "--eval-only", "out", "--out", "ttt", "--seeds", "1", "--val", str(val)]
    args += ["--common", "EVAL_STRIDE=0 TTT_EPOCHS=1 TTT_CHUNK_TOKENS=1024"]  # TTT that adapts, no sliding windows
    run = ab_run(args + ["--variant", "nottt", "--variant", "ttt", "TTT_ENABLED=1"], cwd)  # TTT off against on
    assert run.returncode == 0, run.stdout + run.stderr
    runs = {r["name"]: r for r in results(cwd / "ttt")["runs"]}
    assert sorted(runs) == ["nottt_on_base_seed1", "nottt_on_lr04_seed1", "ttt_on_base_seed1", "ttt_on_lr04_seed1"]
    last = {}  # each run's score: its last final line (the round trip without TTT, TTT's with it)
    for name, r in runs.items():
        trained_run = name.split("_on_")[1]
        assert r["artifact"] == str((out / "artifacts" / f"{trained_run}.ptz").resolve())
        text = (cwd / "ttt" / "console" / f"{name}.txt").read_text()
        config = json.loads(re.search(r"^config:(\{.*\})$", text, re.M).group(1))
        assert config["eval_only"] is True and config["ttt_enabled"] is name.startswith("ttt_")
        assert config["matrix_lr"] == (0.04 if "lr04" in name else 0.02)  # the trained run's settings reach it
        assert config["data_path"] == str(val)
        trained_text = (out / "console" / f"{trained_run}.txt").read_text()
        assert ARTIFACT_SHA.findall(text) == ARTIFACT_SHA.findall(trained_text)  # the very same weights...
        assert ROUNDTRIP_LINE.findall(text) != ROUNDTRIP_LINE.findall(trained_text)  # ...on other text
        last[name] = float(re.findall(r"^final_\w+_exact val_loss:\S+ val_bpb:(\S+)$", text, re.M)[-1])
    rows = {row["scope"]: row for row in results(cwd / "ttt")["comparisons"]}
    assert sorted(rows) == ["all", "base", "lr04"]
    # the variants end on different lines: the round trip is the same artifact's on both sides (0), the score is not
    assert rows["base"]["kinds"]["roundtrip"]["mean"] == 0.0 and "ttt" not in rows["base"]["kinds"]
    diffs = [last[f"ttt_on_{t}_seed1"] - last[f"nottt_on_{t}_seed1"] for t in ("base", "lr04")]
    assert rows["base"]["kinds"]["score"]["mean"] == pytest.approx(diffs[0], abs=1e-12) and diffs[0] != 0.0
    assert rows["all"]["kinds"]["score"]["each"] == pytest.approx(diffs, abs=1e-12)
    assert rows["all"]["score_lines"] == dict(nottt=["roundtrip"], ttt=["ttt"])
    what = "bpb as scored (nottt: round trip; ttt: TTT)"
    assert f"- ttt - nottt = {diffs[0]:+.4f} {what}, 1 artifact: no test" in run.stdout  # no t-test claimed
    (verdict,) = [line for line in run.stdout.splitlines() if line.startswith("- ") and line.endswith("(on all)")]
    assert what in verdict and "2 artifacts" in verdict and "+0.0000" not in verdict, verdict


def test_ab_refuses_another_experiments_folder_and_a_folder_it_did_not_make(trained, tmp_path):
    out, args, _, _ = trained
    changed = [a if a != "MATRIX_LR=0.04" else "MATRIX_LR=0.05" for a in args]
    run = ab_run(changed, out.parent)
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert run.stderr.startswith("error: --out out holds another experiment's runs (its variants differ")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("x")
    run = ab_run(["--out", "mine", "--variant", "a", "--variant", "b", "X=1"], tmp_path)
    assert run.returncode == 2 and run.stderr.startswith("error: --out mine is not empty and holds no ab.py results")


def test_ab_eval_only_finds_the_artifacts_in_the_folder_wherever_it_moved_and_checks_them(trained, tmp_path):
    import shutil

    out, _, _, _ = trained
    archive = tmp_path / "archive"
    shutil.copytree(out, archive, ignore=shutil.ignore_patterns("work", "inductor_cache"))
    data = results(archive)
    for r in data["runs"]:  # as if moved from a folder that is gone, or that holds another experiment now
        r["artifact"] = "/gone/" + r["artifact"]
    (archive / "results.json").write_text(json.dumps(data))
    args = ["--slots", "1", "--eval-only", "archive", "--out", "ev", "--seeds", "1", "--plan"]
    args += ["--variant", "nottt", "--variant", "ttt", "TTT_ENABLED=1"]
    run = ab_run(args, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    plans = re.findall(r"^plan (\S+): .*ARTIFACT_PATH=(\S+) ", run.stdout, re.M)
    assert sorted(plans) == sorted(
        (f"{v}_on_{t}_seed1", str(archive / "artifacts" / f"{t}_seed1.ptz"))
        for v in ("nottt", "ttt")
        for t in ("base", "lr04")
    )
    swapped = archive / "artifacts" / "base_seed1.ptz"  # another run's weights under its name: refused
    swapped.write_bytes((archive / "artifacts" / "lr04_seed1.ptz").read_bytes())
    run = ab_run(args, tmp_path)
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stdout + run.stderr
    assert run.stderr.startswith(
        f"error: --eval-only archive: {Path('archive') / 'artifacts' / 'base_seed1.ptz'} is not the artifact run"
    )
    assert "put that run's artifact back, or re-train it in a new --out" in run.stderr
    swapped.write_bytes((out / "artifacts" / "base_seed1.ptz").read_bytes())
    for r in data["runs"]:  # trained by a train_gpt.py that is not where they recorded it (another checkout)
        r["script"] = "/gone/train_gpt.py"
    (archive / "results.json").write_text(json.dumps(data))
    run = ab_run(args, tmp_path)
    assert run.returncode == 2 and run.stderr == (
        "error: variant nottt: its trainer /gone/train_gpt.py cannot be read (No such file or directory): give the one "
        "to run with --script nottt=PATH.\n"
    )


def test_ab_val_of_another_vocabulary_is_refused_before_any_run(trained, tmp_path):
    import numpy as np

    out, _, _, _ = trained
    (tmp_path / "sp1024").mkdir()  # another tokenizer's ids: 1023 is over the trained runs' VOCAB_SIZE=512
    build_shards.write_data_shard(tmp_path / "sp1024" / "fineweb_val_000000.bin", np.array([BOS_ID, 5, 1023, 7]))
    args = ["--slots", "2", "--eval-only", str(out), "--out", "ev", "--seeds", "1", "--val", "sp1024"]
    run = ab_run(args + ["--variant", "nottt", "--variant", "ttt", "TTT_ENABLED=1"], tmp_path)
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stdout + run.stderr
    assert run.stderr.startswith(
        "error: --val sp1024: fineweb_val_000000.bin holds token id 1023 >= VOCAB_SIZE=512, the vocabulary of base's runs"
    )
    assert not (tmp_path / "ev").exists()


def test_ab_val_of_another_tokenizer_of_the_same_vocabulary_is_refused_before_any_run(trained, tiny_data, tmp_path):
    """Issue 55, low #78: shards of another 512-piece tokenizer pass the vocabulary check, and every run then started
    and failed on the trainer's own check of its shards."""
    from helpers import encode_documents, train_tokenizer

    out, _, _, _ = trained
    other = train_tokenizer([doc[::-1] for doc in tiny_data.train_docs], tmp_path / "other.model")  # 512 pieces too
    (tmp_path / "other").mkdir()
    build_shards.write_data_shard(
        tmp_path / "other" / "fineweb_val_000000.bin", encode_documents(other, tiny_data.val_docs)
    )
    args = ["--slots", "2", "--eval-only", str(out), "--out", "ev", "--seeds", "1", "--val", "other"]
    run = ab_run(args + ["--variant", "nottt", "--variant", "ttt", "TTT_ENABLED=1"], tmp_path)
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stdout + run.stderr
    assert run.stderr.startswith(
        f"error: --val other: fineweb_val_000000.bin was not made by {tiny_data.tokenizer_path}, the tokenizer of "
        "base's runs: "
    )
    assert not (tmp_path / "ev").exists()


def test_ab_out_naming_a_file_is_one_error_line_whether_it_runs_or_plans(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    for plan in ([], ["--plan"]):
        run = ab_run(["--slots", "1", "--out", "notes.txt", "--variant", "a", "--variant", "b", "X=1", *plan], tmp_path)
        assert run.returncode == 2, run.stdout + run.stderr
        assert run.stderr == "error: --out notes.txt is a file: name a folder, new or one ab.py made.\n"


UNWRITABLE = [  # --out, and the error's words after it
    ("notes.txt/ab", "notes.txt/ab: {cwd}/notes.txt is a file, not a folder: name a folder you can write in."),
    ("", "'' names no folder: give the experiment's, e.g. --out ab/lr04."),
]
try:  # /proc on Linux: no folder can be made there, not even by root (chmod does not stop root)
    tempfile.TemporaryDirectory(dir="/proc").cleanup()
except OSError as exc:
    UNWRITABLE.append(
        ("/proc/ab", f"/proc/ab: cannot write in /proc ({exc.strerror}): name a folder you can write in.")
    )


@pytest.mark.parametrize("out, message", UNWRITABLE, ids=["under_a_file", "empty", "read_only"][: len(UNWRITABLE)])
def test_ab_out_that_cannot_be_written_is_one_error_line_whether_it_runs_or_plans(out, message, tmp_path):
    """Issue 55, medium 2 and low #53/#54: --out under a file or where no folder can be made (/proc, a read-only
    mount) was a traceback from the mkdir once every check had passed, and --plan said nothing; --out '' was taken as
    --out . (the folder ab.py runs in)."""
    (tmp_path / "notes.txt").write_text("x")
    args = fake_runs(tmp_path, "a", "b BPB=0.5") + ["--seeds", "1"]
    args[args.index("--out") + 1] = out
    for plan in ([], ["--plan"]):
        run = ab_run(args + plan, tmp_path)
        assert run.returncode == 2, run.stdout + run.stderr
        assert run.stderr == "error: --out " + message.format(cwd=tmp_path) + "\n"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["fake.py", "notes.txt"]


def test_ab_a_trainer_refusal_while_running_ends_that_run_with_the_trainers_message(tiny_data, tmp_path):
    for name in ("no_shards", "no_shards_either"):
        (tmp_path / name).mkdir()
    args = ["--slots", "2", "--out", "out", "--seeds", "1", *common(tiny_data, tmp_path)]
    args += ["--variant", "here", f"DATA_PATH={tmp_path / 'no_shards_either'}"]
    run = ab_run(args + ["--variant", "empty", f"DATA_PATH={tmp_path / 'no_shards'}"], tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "Traceback" not in run.stdout + run.stderr
    (line,) = [x for x in run.stdout.splitlines() if x.startswith("failed empty_seed1")]
    assert re.fullmatch(r"failed empty_seed1 in \d+s: error: .*no_shards.* \(console/empty_seed1\.txt\)", line), line
    assert "not finished: empty_seed1: error: " in run.stdout
    statuses = {r["name"]: (r["status"], r["rc"]) for r in results(tmp_path / "out")["runs"]}
    assert statuses == {"here_seed1": ("failed", 2), "empty_seed1": ("failed", 2)}


# ---- bad input: one line, exit 2, before anything runs ----

FAKE_SMI = "#!/bin/sh\nprintf 'NVIDIA H100 80GB HBM3\\nNVIDIA H100 80GB HBM3\\nNVIDIA H100 80GB HBM3\\nNVIDIA H100 80GB HBM3\\n'\n"


@pytest.fixture
def fake_host(tmp_path) -> dict[str, str]:
    """An environment whose nvidia-smi lists 4 H100s."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    return environment(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


BAD_INPUTS = [
    (["--variant", "a"], "give at least two --variant"),
    (["--variant", "a", "--variant", "a", "X=1"], "--variant a is given twice"),
    (["--variant", "a", "--variant", "b", "SEED=3"], "--variant b: SEED is set by ab.py for each run: use --seeds"),
    (["--variant", "a", "--variant", "b", "lr"], "--variant b: 'lr' is not VAR=VALUE"),
    (["--variant", "a", "--variant", "b", "X=1", "--seeds", "1", "42", "1"], "--seeds 1 42 1 repeats 1"),
    (["--variant", "a", "--variant", "b", "X=1", "--gpus", "0,4"], "--gpus 0,4: GPU 4 does not exist; this machine"),
    (["--variant", "a", "--variant", "b", "X=1", "--nproc", "3"], "--nproc 3 does not divide the 4 GPUs"),
    (["--variant", "a", "--variant", "b", "X=1", "--nproc", "0"], "--nproc 0: give the processes"),
    (["--variant", "a", "--variant", "b", "X=1", "--slots", "2", "--gpus", "0"], "--slots runs on the CPU and --gpus"),
    (["--variant", "a", "--variant", "b", "X=1", "--val", "v"], "--val re-scores artifacts on another validation"),
    (["--variant", "a", "--variant", "b", "X=1", "--eval-only", "nowhere"], "--eval-only nowhere: no results.json"),
    (["--variant", "a", "--variant", "b", "X=1", "--script", "c=x.py"], "--script 'c=x.py' must be VARIANT=PATH"),
]


@pytest.mark.parametrize("args, message", BAD_INPUTS, ids=[m.split(":")[0][:30] for _, m in BAD_INPUTS])
def test_ab_bad_input_is_one_error_line_and_nothing_runs(args, message, tmp_path, fake_host):
    run = ab_run(["--out", "out", *args], tmp_path, env=fake_host)
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.startswith(f"error: {message}") and run.stderr.count("\n") == 1, run.stderr
    assert run.stdout == "" and not (tmp_path / "out").exists()


def test_ab_refuses_twin_variants_and_settings_the_trainer_refuses_before_running(tiny_data, tmp_path):
    base = ["--slots", "2", "--out", "out", *common(tiny_data, tmp_path), "--variant", "a"]
    run = ab_run(base + ["--variant", "b", "MATRIX_LR=0.02"], tmp_path)  # 0.02 is the default: the same config
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert run.stderr.startswith("error: variants a and b resolve to the same config with the same script")
    run = ab_run(base + ["--variant", "b", "TTT_EPOCH=1"], tmp_path)
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert run.stderr.startswith("error: variant b: the trainer refuses its settings: unknown environment variable")
    assert "did you mean TTT_EPOCHS?" in run.stderr and not (tmp_path / "out").exists()


def test_ab_a_setting_every_variant_shares_is_refused_as_theirs_not_the_baselines(tiny_data, tmp_path):
    """Issue 55, low #88: a typo in --common was blamed on the first variant ('variant base: the trainer refuses its
    settings')."""
    args = ["--slots", "1", "--out", "out", "--plan", *common(tiny_data, tmp_path), "--common", "TTT_EPOCH=1"]
    run = ab_run(args + ["--variant", "base", "--variant", "lr03", "MATRIX_LR=0.03"], tmp_path)
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert run.stderr.startswith(
        "error: the trainer refuses what every variant shares (--common, the shell): unknown environment variable "
        "TTT_EPOCH='1': did you mean TTT_EPOCHS?"
    )


def test_ab_warns_when_a_variant_differs_only_in_settings_its_switch_leaves_off(tiny_data, tmp_path):
    """Issue 55, low #82: TTT_LR with TTT off spent a whole A/B on two runs of one model and one score."""
    args = ["--slots", "1", "--out", "out", "--plan", *common(tiny_data, tmp_path)]
    args += ["--variant", "base", "--variant", "tttlr", "TTT_LR=0.01"]
    run = ab_run(args, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert (
        "WARNING: tttlr differs from base only in settings that do nothing with TTT_ENABLED=False (TTT_LR): the A/B "
        "would measure noise. Turn that on in --common, or drop the variant." in run.stdout
    )
    run = ab_run(args + ["--common", "TTT_ENABLED=1"], tmp_path)
    assert run.returncode == 0 and "WARNING" not in run.stdout, run.stdout + run.stderr
    assert "config tttlr vs base: set by the variants: TTT_LR 0.005 -> 0.01" in run.stdout


def test_ab_plan_shows_what_differs_besides_what_the_variants_set(tiny_data, tmp_path):
    args = ["--slots", "1", "--out", "out", "--plan", *common(tiny_data, tmp_path)]
    run = ab_run(args + ["--variant", "ours", "--variant", "p180", "RECIPE=p180"], tmp_path)
    assert run.returncode == 0, run.stderr
    assert "config p180 vs ours: set by the variants: RECIPE '' -> 'p180'" in run.stdout
    also = [x for x in run.stdout.splitlines() if x.startswith("config p180 vs ours: ALSO DIFFERS")]
    assert len(also) == 1 and "NUM_LOOPS" not in also[0] and "TTT_LR 0.005 -> 0.01" in also[0]
    assert "COMPRESSOR 'zlib' -> 'brotli'" in also[0] and "NUM_LAYERS" not in also[0]  # --common set NUM_LAYERS
    assert re.search(r"^plan p180_seed42: .*RECIPE=p180 SEED=42 RUN_ID=p180_seed42 ", run.stdout, re.M)
    assert not (tmp_path / "out").exists()


# ---- scheduling on a GPU host, faked: which run went where ----

TORCHRUN_PREFIXES = ("RANK", "LOCAL_", "GROUP_", "ROLE_", "WORLD_SIZE", "MASTER_", "TORCHELASTIC_", "TORCH_", "OMP_")
FAKE_TRAINER = """
import dataclasses, json, os
@dataclasses.dataclass
class Hyperparameters:
    bpb: float = 1.0
    seed: int = 0
    @classmethod
    def from_env(cls, env):
        return cls(float(env.get("BPB", "1.0")), int(env["SEED"]))  # exact in binary: so are the differences
if __name__ == "__main__" and os.environ.get("RANK", "0") == "0":
    args = Hyperparameters.from_env(os.environ)
    keys = ("CUDA_VISIBLE_DEVICES", "NCCL_NVLS_ENABLE", "MASTER_PORT", "WORLD_SIZE", "TORCHINDUCTOR_CACHE_DIR",
            "TORCHINDUCTOR_FX_GRAPH_CACHE", "TORCHINDUCTOR_AUTOGRAD_CACHE")
    json.dump(dict(os.environ), open("env.json", "w"))
    print("fake " + " ".join(f"{k.lower()}:{os.environ.get(k)}" for k in keys) + f" cwd:{os.getcwd()}", flush=True)
    print(f"final_int8_zlib_roundtrip_exact val_loss:2.0 val_bpb:{args.bpb + 0.25 * args.seed:.8f}")
"""


def test_ab_on_gpus_runs_each_seeds_pair_at_once_on_its_own_gpu_groups_under_torchrun(tmp_path, fake_host):
    (tmp_path / "fake.py").write_text(FAKE_TRAINER)
    args = ["--out", "out", "--gpus", "0,1,2,3", "--nproc", "2", "--seeds", "1", "2", "--variant", "a", "BPB=1.0"]
    args += ["--variant", "b", "BPB=0.5", "--script", "a=fake.py", "--script", "b=fake.py"]
    fake_host["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "0"  # the user's: kept
    run = ab_run(args, tmp_path, env=fake_host)
    assert run.returncode == 0, run.stdout + run.stderr
    cache = f"{os.environ['XDG_CACHE_HOME']}/parameter-golf/inductor/{socket.gethostname()}"  # every experiment's
    assert f"compile cache: one for all runs on this host, {cache} (TORCHINDUCTOR_CACHE_DIR={cache}" in run.stdout
    assert results(tmp_path / "out")["compile_cache"] == dict(
        TORCHINDUCTOR_CACHE_DIR=cache, TORCHINDUCTOR_AUTOGRAD_CACHE="1"
    )
    assert "gpus: 2 runs at a time, 2 GPU(s) each: [[0, 1], [2, 3]] (NVIDIA H100 80GB HBM3)" in run.stdout
    starts = re.findall(r"^start (\w+) \(gpus ([\d,]+)\)$", run.stdout, re.M)
    assert starts == [("a_seed1", "0,1"), ("b_seed1", "2,3"), ("a_seed2", "0,1"), ("b_seed2", "2,3")]
    assert run.stdout.index("finished a_seed1") < run.stdout.index("start a_seed2")  # waves: a pair, then the next
    seen = {}
    for name, gpus in starts:
        text = (tmp_path / "out" / "console" / f"{name}.txt").read_text()
        fake = dict(t.split(":", 1) for t in re.search(r"^fake (.*)$", text, re.M).group(1).split(" "))
        assert fake["cuda_visible_devices"] == gpus and fake["nccl_nvls_enable"] == "0" and fake["world_size"] == "2"
        assert fake["cwd"] == str(tmp_path / "out" / "work" / name)  # not ours: a folder of its own for what it writes
        assert fake["torchinductor_cache_dir"] == cache and fake["torchinductor_fx_graph_cache"] == "0"
        assert fake["torchinductor_autograd_cache"] == "1"
        seen[name] = int(fake["master_port"])
    # what the trainer saw that the shell did not have, or had otherwise; a GPU host's shell may hold some of ours
    # already (the 2-GPU machines set NCCL_NVLS_ENABLE=0, as ab.py does): those then do not differ
    given = json.loads((tmp_path / "out" / "work" / "a_seed1" / "env.json").read_text())
    changed = {name for name, value in given.items() if fake_host.get(name) != value}
    torchrun = {name for name in changed if name.startswith(TORCHRUN_PREFIXES)}  # what torchrun adds
    ours = dict(
        BPB="1.0", SEED="1", RUN_ID="a_seed1", LOG_DIR=str(tmp_path / "out" / "logs"), CUDA_VISIBLE_DEVICES="0,1"
    )
    ours |= dict(ARTIFACT_PATH=str(tmp_path / "out" / "artifacts" / "a_seed1.ptz"), NCCL_NVLS_ENABLE="0")
    ours |= dict(TORCHINDUCTOR_CACHE_DIR=cache, TORCHINDUCTOR_AUTOGRAD_CACHE="1")
    assert {name: given.get(name) for name in ours} == ours  # the variant's, the run's and the GPU group's...
    assert changed - torchrun <= set(ours)  # ...and nothing of ab.py's own
    assert seen["a_seed1"] != seen["b_seed1"] and seen["a_seed2"] != seen["b_seed2"]  # one rendezvous each
    # b - a = -0.5 on both seeds: no spread, so no t-test (p=0 would claim a certainty that two pairs cannot give)
    assert (
        "- b - a = -0.5000 ± 0.0000 bpb after the round trip, 2 seeds: no test (the 2 differences are all equal)"
        in (run.stdout)
    )


# ---- the compile cache: one for every experiment on this host ----

FAKE_COMPILER = """
import dataclasses, os, sys
from pathlib import Path
import torch
from torch._dynamo.utils import counters
sys.path.insert(0, {root!r})
import train_gpt
@dataclasses.dataclass
class Hyperparameters:
    scale: float = 1.0
    @classmethod
    def from_env(cls, env):
        return cls(float(env.get("SCALE", "1.0")))
if __name__ == "__main__":
    args = Hyperparameters.from_env(os.environ)
    log = train_gpt.Logger(Path(os.environ["LOG_DIR"]) / (os.environ["RUN_ID"] + ".txt"))
    log.phase("startup")
    step = torch.compile(lambda x, w: x @ w)  # one graph, the same in every run: an extern matmul, no C++ to build
    value = step(torch.ones(4, 4) * args.scale, torch.eye(4)).sum().item()
    log.phase("warmup")
    print(f"fxgraph_cache_hit:{{counters['inductor']['fxgraph_cache_hit']}} value:{{value}}")
    print(f"fxgraph_cache_miss:{{counters['inductor']['fxgraph_cache_miss']}}")
    log.text(f"final_int8_zlib_roundtrip_exact val_loss:2.0 val_bpb:{{args.scale:.8f}}")
    log.phase("teardown")
    log.log(wall_time=f"{{log.marks[-1][0] - log.marks[0][0]:.2f}}s", since=log.since)
"""


def test_ab_a_new_experiment_loads_the_graphs_an_earlier_one_compiled(tmp_path, compile_cache_home):
    """Issue 58: ab.py's default cache is one for every experiment of this user on this host, not one an experiment:
    a golfer's next idea (a new --out) loads what the last one compiled. A fake trainer compiles one small graph on the
    CPU (the trainer compiles on CUDA only) and prints inductor's FX graph cache counters: the first run of the first
    experiment misses (the cache is new), the second experiment's runs hit it. Its phase lines reach the report."""
    (tmp_path / "fake.py").write_text(FAKE_COMPILER.format(root=str(ROOT)))
    scripts = ["--script", "a=fake.py", "--script", "b=fake.py"]
    for out in ("first", "second"):  # one run at a time: the first experiment's second run hits its first's graph
        args = ["--slots", "1", "--out", out, "--seeds", "1", "--variant", "a", "SCALE=2", "--variant", "b"]
        run = ab_run(args + [f"SCALE={3 if out == 'first' else 5}", *scripts], tmp_path)
        assert run.returncode == 0, run.stdout + run.stderr
    counts = {}
    for out in ("first", "second"):
        for name in ("a_seed1", "b_seed1"):
            text = (tmp_path / out / "console" / f"{name}.txt").read_text()
            hit, miss = (re.search(rf"^fxgraph_cache_{kind}:(\d+)", text, re.M) for kind in ("hit", "miss"))
            assert hit and miss, text
            counts[out, name] = int(hit.group(1)), int(miss.group(1))
    assert counts["first", "a_seed1"] == (0, 1)  # compiled: the cache was empty
    assert counts["first", "b_seed1"] == (1, 0)  # the same graph, in the same experiment
    assert counts["second", "a_seed1"] == counts["second", "b_seed1"] == (1, 0), "the new experiment compiled again"
    cache = str(compile_cache_home / "parameter-golf" / "inductor" / socket.gethostname())
    assert results(tmp_path / "first")["compile_cache"]["TORCHINDUCTOR_CACHE_DIR"] == cache
    assert results(tmp_path / "second")["compile_cache"]["TORCHINDUCTOR_CACHE_DIR"] == cache
    report = (tmp_path / "second" / "report.md").read_text()
    (warmup,) = [line for line in report.splitlines() if line.startswith("| warmup |")]
    assert re.fullmatch(r"\| warmup \| \d+\.\d \(\d+\.\d\) \| \d+\.\d \(\d+\.\d\) \|", warmup), warmup  # compile


# ---- runs of a fake trainer on the CPU: what ab.py does with how a run ends, and with what made it ----

FAKE_RUNNER = """
import dataclasses, os, signal, time
LR = 0.02  # a default a test edits
@dataclasses.dataclass
class Hyperparameters:
    bpb: float = 1.0
    lr: float = LR
    seed: int = 0
    sleep: float = 0.0
    kill: int = 0
    @classmethod
    def from_env(cls, env):
        get = lambda name, default: type(default)(env.get(name, default))
        return cls(get("BPB", 1.0), get("LR", LR), get("SEED", 0), get("SLEEP", 0.0), get("KILL", 0))
if __name__ == "__main__":
    args = Hyperparameters.from_env(os.environ)
    open("pid", "w").write(str(os.getpid()))  # in out/work/RUN_ID/
    time.sleep(args.sleep)
    score = args.bpb + args.lr + args.seed / 8
    print(f"final_int8_zlib_roundtrip_exact val_loss:2.0 val_bpb:{score + 0.01:.8f}", flush=True)
    if args.kill:  # killed while it scores on sliding windows
        os.kill(os.getpid(), signal.SIGKILL)
    print(f"final_int8_zlib_sliding_window_exact val_loss:2.0 val_bpb:{score:.8f}", flush=True)
"""


def fake_runs(tmp_path: Path, *variants: str) -> list[str]:
    """ab.py's arguments for runs of FAKE_RUNNER (fake.py), two at a time on the CPU; variants as NAME VAR=VALUE."""
    (tmp_path / "fake.py").write_text(FAKE_RUNNER)
    args = ["--slots", "2", "--out", "out"]
    for variant in variants:
        name, *settings = variant.split()
        args += ["--variant", name, *settings, "--script", f"{name}=fake.py"]
    return args


def test_ab_a_run_killed_after_its_round_trip_score_is_not_finished_and_reruns(tmp_path):
    args = fake_runs(tmp_path, "a", "b KILL=1") + ["--seeds", "1"]
    run = ab_run(args, tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    assert re.search(r"^failed b_seed1 in \d+s: exit -9 \(SIGKILL\): after its round trip score ", run.stdout, re.M)
    runs = {r["name"]: (r["status"], r["rc"]) for r in results(tmp_path / "out")["runs"]}
    assert runs == dict(a_seed1=("finished", 0), b_seed1=("failed", -9))
    assert results(tmp_path / "out")["comparisons"] == []  # its round trip is not its score
    again = ab_run(args, tmp_path)
    assert "done before: finished a_seed1" in again.stdout and "start a_seed1" not in again.stdout
    assert "rerun b_seed1: it failed: exit -9 (SIGKILL): after its round trip score" in again.stdout
    assert "start b_seed1" in again.stdout, again.stdout


def test_ab_script_that_is_not_python_is_named_and_any_python_file_name_runs(tmp_path):
    """Issue 55, low #66: a --script that is no Python (notes, a binary) was the trainer's 'refusal' with an internal
    AttributeError; a Python trainer whose name does not end in .py (an older revision kept as .bak) was the same."""
    args = fake_runs(tmp_path, "a", "b BPB=0.5") + ["--seeds", "1", "--plan"]
    (tmp_path / "notes.txt").write_text("the lr04 run looked better\n")
    (tmp_path / "weights.bin").write_bytes(bytes(range(256)))
    python = sys.version.split()[0]
    for name, why in (
        ("notes.txt", f"Python {python} cannot compile it: invalid syntax, line 1"),
        ("weights.bin", "not UTF-8 text"),
    ):
        run = ab_run([a if a != "b=fake.py" else f"b={name}" for a in args], tmp_path)
        assert run.returncode == 2 and run.stdout == "", run.stdout + run.stderr
        assert (
            run.stderr
            == f"error: --script b={name}: {name} is not a Python trainer ({why}): point it at the variant's script.\n"
        )
    (tmp_path / "fake.py.bak").write_text(FAKE_RUNNER)
    run = ab_run([a if a != "b=fake.py" else "b=fake.py.bak" for a in args], tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "config b vs a: set by the variants: BPB 1.0 -> 0.5" in run.stdout


def test_ab_records_the_threads_each_run_was_given(tmp_path):
    """Issue 55, low #83: OMP_NUM_THREADS (the shell's, or ab.py's share of the cores for each CPU run) was recorded
    nowhere, and a CPU run's speed and summation order depend on it."""
    args = fake_runs(tmp_path, "a", "b BPB=0.5") + ["--seeds", "1"]
    unset = {k: v for k, v in environment().items() if k != "OMP_NUM_THREADS"}
    share = str(max(1, (os.cpu_count() or 1) // 2))  # not set in the shell: ab.py's, the cores over 2 runs at a time
    for shell, given in ((dict(unset, OMP_NUM_THREADS="3"), "3"), (unset, share)):
        run = ab_run(args + ["--restart"], tmp_path, env=shell)
        assert run.returncode == 0, run.stdout + run.stderr
        threads = {r["name"]: r["omp_num_threads"] for r in results(tmp_path / "out")["runs"]}
        assert threads == dict(a_seed1=given, b_seed1=given)
    run = ab_run(args, tmp_path)  # resumed: the finished runs keep what they were given
    assert (
        "done before: finished a_seed1" in run.stdout
        and results(tmp_path / "out")["runs"][0]["omp_num_threads"] == given
    )


def test_ab_says_when_a_seeds_variants_cannot_share_a_wave(tmp_path):
    args = fake_runs(tmp_path, "a", "b BPB=0.5", "c BPB=0.25") + ["--seeds", "1", "--plan"]
    run = ab_run(args, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "note: 3 variants on 2 slot(s): a seed's variants cannot run at once" in run.stdout
    assert "runs: 3, to run: 3 in 2 wave(s) of <= 2" in run.stdout
    run = ab_run([a if a != "2" else "3" for a in args], tmp_path)  # --slots 3: one wave, no note
    assert "runs: 3, to run: 3 in 1 wave(s) of <= 3" in run.stdout and "note: " not in run.stdout
    usage = " ".join(ab_run(["--help"], tmp_path).stdout.split())
    assert "A seed's variants run at the same time (one wave) where there are as many slots (GPU groups) as" in usage
    assert "one compile cache for all experiments of this user on this host (TORCHINDUCTOR_CACHE_DIR=" in usage


@contextlib.contextmanager
def ab_process(tmp_path: Path, args: list[str], stderr=subprocess.PIPE):
    """ab.py with args, running in tmp_path, its stdout a pipe; on leaving, it and every fake trainer it started
    (out/work/RUN/pid) are killed, whatever the test found."""
    proc = subprocess.Popen(
        [sys.executable, str(AB), *args], cwd=tmp_path, env=environment(), stdout=subprocess.PIPE, stderr=stderr,
        text=True,
    )  # fmt: skip
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid_file in (tmp_path / "out" / "work").glob("*/pid"):
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_ab_stdout_closed_stops_the_runs_under_way(tmp_path):
    """`ab.py ... | head -5`: once head has gone, ab.py's next line fails; the trainer still running is stopped."""
    args = fake_runs(tmp_path, "a SLEEP=1", "b SLEEP=60") + ["--seeds", "1"]
    with ab_process(tmp_path, args) as proc:
        for line in proc.stdout:
            if line.startswith("start b_seed1"):
                break
        proc.stdout.close()  # as head does after its lines; a_seed1 ends a second later, and ab.py says so
        assert proc.wait(timeout=60) == 141, proc.stderr.read()
        assert "interrupted: stdout was closed; the runs under way were stopped" in proc.stderr.read()
        pid = int((tmp_path / "out" / "work" / "b_seed1" / "pid").read_text())
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # ended (and reaped by ab.py), not orphaned
        assert {r["name"]: r["status"] for r in results(tmp_path / "out")["runs"]}["b_seed1"] == "interrupted"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_ab_killed_by_sigkill_takes_its_runs_with_it(tmp_path):
    """kill -9 of ab.py, which no handler sees: the trainer under way gets SIGTERM and ends, not left on its GPU."""
    args = fake_runs(tmp_path, "a SLEEP=60", "b SLEEP=60 BPB=0.5") + ["--seeds", "1"]
    pid_file = tmp_path / "out" / "work" / "a_seed1" / "pid"
    with ab_process(tmp_path, args, stderr=subprocess.DEVNULL) as proc:
        assert any(line.startswith("start a_seed1") for line in proc.stdout), "ab.py ended before the run started"
        deadline = time.time() + 30
        while not pid_file.is_file() and time.time() < deadline:
            time.sleep(0.1)
        pid = int(pid_file.read_text())
        proc.kill()
        proc.wait(timeout=30)
        deadline = time.time() + 30
        while time.time() < deadline and Path(f"/proc/{pid}").exists() and not is_zombie(pid):
            time.sleep(0.1)
        assert not Path(f"/proc/{pid}").exists() or is_zombie(pid), "the trainer outlived ab.py"


def is_zombie(pid: int) -> bool:  # ended, not yet reaped by its new parent
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_ab_resume_refuses_runs_made_by_another_trainer_or_shell_and_restart_starts_over(tmp_path):
    args = fake_runs(tmp_path, "a", "b BPB=0.5")
    run = ab_run(args + ["--seeds", "1"], tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    identity = results(tmp_path / "out")["identity"]
    assert identity["made"]["a"]["config"] == dict(bpb=1.0, lr=0.02, sleep=0.0, kill=0)
    assert identity["made"]["a"]["sha256"] == hashlib.sha256(FAKE_RUNNER.encode()).hexdigest()
    more = args + ["--seeds", "1", "2"]
    (tmp_path / "fake.py").write_text(FAKE_RUNNER.replace("LR = 0.02", "LR = 0.03"))  # the trainer's default edited
    run = ab_run(more, tmp_path)
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stdout + run.stderr
    assert run.stderr.startswith("error: --out out holds runs made by other code or settings than this command's: ")
    assert f"a's trainer {tmp_path / 'fake.py'} is not the one its runs ran (sha256 " in run.stderr
    assert (
        "a's config resolves otherwise: LR 0.02 -> 0.03" in run.stderr and "b's config resolves otherwise" in run.stderr
    )
    assert "give this command a new --out, or add --restart" in run.stderr
    assert not (tmp_path / "out" / "console" / "a_seed2.txt").exists()  # nothing ran
    (tmp_path / "fake.py").write_text(FAKE_RUNNER)
    run = ab_run(more, tmp_path, env=environment(LR="0.03"))  # the same, set in the shell for the rerun
    assert run.returncode == 2 and "the shell's LR: unset -> 0.03" in run.stderr, run.stderr
    assert "a's config resolves otherwise: LR 0.02 -> 0.03" in run.stderr
    run = ab_run(more, tmp_path)  # as it was: seed 2 added to seed 1's runs
    assert run.returncode == 0 and "done before: finished a_seed1" in run.stdout, run.stdout + run.stderr
    run = ab_run(more + ["--restart"], tmp_path, env=environment(LR="0.03"))  # started over: all four run again
    assert run.returncode == 0, run.stdout + run.stderr
    assert "restart: discarding the 4 runs recorded in out" in run.stdout and "start a_seed1" in run.stdout
    assert results(tmp_path / "out")["identity"]["environment"] == dict(LR="0.03")
    assert "val_bpb:1.15500000" in (tmp_path / "out" / "console" / "a_seed1.txt").read_text()  # 1 + 0.03 + 1/8


# A trainer that logs as train_gpt.py does (its source, a separator, the versions, its config as one JSON line) and
# can play the user who edits the trainer (EDIT=PATH: LR's default 0.02 -> 0.05) or rebuilds DATA_PATH's validation
# shard in place (REBUILD=1: 50 more tokens) while the experiment's first run goes on, once.
FAKE_LOGGER = """
import dataclasses, json, os
import numpy as np
LR = 0.02
@dataclasses.dataclass
class Hyperparameters:
    bpb: float = 1.0
    lr: float = LR
    seed: int = 0
    run_id: str = ""
    log_dir: str = ""
    data_path: str = ""
    @classmethod
    def from_env(cls, env):
        get = lambda name, default: type(default)(env.get(name, default))
        return cls(*(get(f.name.upper(), f.default) for f in dataclasses.fields(cls)))
if __name__ == "__main__":
    args = Hyperparameters.from_env(os.environ)
    with open(os.path.join(args.log_dir, f"{args.run_id}.txt"), "w") as log:
        log.write(open(__file__).read() + "\\n" + "=" * 100 + "\\n" + "python:3 torch:none\\n")
        log.write("config:" + json.dumps(dataclasses.asdict(args), sort_keys=True) + "\\n")
    edit, once = os.environ.get("EDIT"), os.path.join(args.log_dir, "..", "edited")
    if (edit or os.environ.get("REBUILD")) and not os.path.exists(once):
        open(once, "w").close()
        if edit:
            text = open(edit).read()
            open(edit, "w").write(text.replace("LR = 0.02", "LR = 0.05"))
        else:
            val = os.path.join(args.data_path, "fineweb_val_000000.bin")
            open(val, "ab").write(np.ones(50, np.uint16).tobytes())
    print(f"final_int8_zlib_roundtrip_exact val_loss:2.0 val_bpb:{args.bpb + args.lr + args.seed / 8:.8f}")
"""
# LR 0.02: base + 0.02 + seed / 8 (exact in binary)
LOGGER_SCORES = dict(a_seed1=1.145, b_seed1=0.645, a_seed2=1.27, b_seed2=0.77)


def ab_with_trainer(trainer: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """ab.py with `trainer` in train_gpt.py's place (ab.TRAINER): what it does with runs of ours."""
    code = (
        f"import sys; sys.path.insert(0, {str(AB.parent)!r}); import ab; from pathlib import Path; "
        f"ab.TRAINER = Path({str(trainer)!r}); sys.exit(ab.main({args!r}))"
    )
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=environment(), capture_output=True, text=True, timeout=300
    )


def scores(out: Path) -> dict[str, float]:
    return {r["name"]: r["metrics"].get("score") for r in results(out)["runs"]}


def test_ab_runs_train_gpt_as_it_was_when_the_command_started(tmp_path):
    """Issue 55, high 1: train_gpt.py edited while wave 1 ran (MATRIX_LR's default 0.02 -> 0.05): seed 2's runs ran
    the edited file and were pooled with seed 1's, and a resume after the file was restored kept them. Each run of
    ours now runs OUT/trainers/train_gpt.py, the copy made when the command started."""
    trainer = tmp_path / "train_gpt.py"
    trainer.write_text(FAKE_LOGGER)
    args = ["--slots", "1", "--out", "out", "--seeds", "1", "2", "--common", f"EDIT={trainer}"]
    run = ab_with_trainer(trainer, args + ["--variant", "a", "--variant", "b", "BPB=0.5"], tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "LR = 0.05" in trainer.read_text()  # edited while a_seed1 ran
    assert scores(tmp_path / "out") == LOGGER_SCORES  # every run with LR 0.02: the trainer as the command read it
    assert (tmp_path / "out" / "trainers" / "train_gpt.py").read_text() == FAKE_LOGGER
    sha256 = hashlib.sha256(FAKE_LOGGER.encode()).hexdigest()
    assert results(tmp_path / "out")["trainer_copy"] == dict(path="trainers/train_gpt.py", sha256=sha256)


def test_ab_does_not_count_a_run_whose_log_shows_another_trainer_or_config(tmp_path):
    """Issue 55, high 1: a fork runs where it is (beside its own modules), so an edit while the experiment runs
    reaches its later runs: their logs, which start with the source they ran, are not counted, and say why; a
    resume reruns them, and any finished run whose log shows another source or config."""
    fork = tmp_path / "fake.py"
    fork.write_text(FAKE_LOGGER)
    args = ["--slots", "1", "--out", "out", "--seeds", "1", "2", "--common", f"EDIT={fork}"]
    args += ["--variant", "a", "--script", "a=fake.py", "--variant", "b", "BPB=0.5", "--script", "b=fake.py"]
    run = ab_run(args, tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    why = f"the source in its log is not {fork} as this experiment read it (from line 4): an edited trainer ran"
    for name in ("b_seed1", "a_seed2", "b_seed2"):
        assert f"not finished: {name}: {why}" in run.stdout
    assert {r["name"]: r["status"] for r in results(tmp_path / "out")["runs"]}["a_seed1"] == "finished"
    assert results(tmp_path / "out")["comparisons"] == []  # nothing pooled
    fork.write_text(FAKE_LOGGER)  # restored: the same command reruns the three
    run = ab_run(args, tmp_path)
    assert run.returncode == 0 and f"rerun a_seed2: it failed: {why}" in run.stdout, run.stdout + run.stderr
    assert scores(tmp_path / "out") == LOGGER_SCORES
    # logs of runs made by another config, or another source (as an older ab.py kept them): rerun, each saying why
    log = tmp_path / "out" / "logs" / "a_seed1.txt"
    log.write_text(log.read_text().replace('"lr": 0.02', '"lr": 0.05'))
    log = tmp_path / "out" / "logs" / "b_seed2.txt"
    log.write_text(log.read_text().replace("LR = 0.02", "LR = 0.05"))
    run = ab_run(args, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "rerun a_seed1: it failed: its log's config is not the one resolved for it: LR 0.02 -> 0.05" in run.stdout
    assert f"rerun b_seed2: it failed: {why}" in run.stdout and "done before: finished b_seed1" in run.stdout


def test_ab_refuses_runs_of_data_rebuilt_under_the_same_data_path(tmp_path):
    """Issue 55, medium 3: the validation split rebuilt in place (54K -> 170K tokens), then --seeds 1 2: seed 1's
    runs and seed 2's were pooled. DATA_PATH's shards (name, size), manifest and tokenizer are the experiment's."""
    import numpy as np

    data = tmp_path / "shards"
    data.mkdir()
    for split in ("train", "val"):
        build_shards.write_data_shard(data / f"fineweb_{split}_000000.bin", np.ones(100, np.uint16))
    (tmp_path / "fake.py").write_text(FAKE_LOGGER)
    args = ["--slots", "1", "--common", f"DATA_PATH={data}", "--variant", "a", "--script", "a=fake.py"]
    args += ["--variant", "b", "BPB=0.5", "--script", "b=fake.py"]
    run = ab_run(args + ["--out", "out", "--seeds", "1"], tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    size = (data / "fineweb_val_000000.bin").stat().st_size
    build_shards.write_data_shard(data / "fineweb_val_000000.bin", np.ones(300, np.uint16))  # rebuilt in place
    run = ab_run(args + ["--out", "out", "--seeds", "1", "2"], tmp_path)
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stdout + run.stderr
    assert f"a's DATA_PATH is other data: fineweb_val_000000.bin {size} -> {size + 400}" in run.stderr
    assert not (tmp_path / "out" / "console" / "a_seed2.txt").exists()
    # rebuilt while the experiment runs: no run counts from then on
    run = ab_run(args + ["--out", "out2", "--seeds", "1", "--common", "REBUILD=1"], tmp_path)
    assert run.returncode == 1, run.stdout + run.stderr
    why = f"its DATA_PATH changed since this command started: fineweb_val_000000.bin {size + 400} -> {size + 500}"
    assert f"not finished: a_seed1: {why}" in run.stdout and f"not finished: b_seed1: {why}" in run.stdout


def test_ab_identity_holds_the_shells_settings_that_change_a_run_and_no_flag_sets(tmp_path, monkeypatch):
    (tmp_path / "t.py").write_text("x = 1\n")
    jobs = [ab.Job("a", 1, "a_seed1", dict(BPB="0.5", SEED="1"), tmp_path / "t.py")]
    resolved = {("a", ""): dict(config=dict(bpb=0.5, lr=0.03, seed=1), versions=dict(python="3", torch=None))}
    for name, value in dict(
        LR="0.03", BPB="9", TORCHINDUCTOR_MIX_ORDER_REDUCTION="1", TORCHINDUCTOR_CACHE_DIR="c"
    ).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("UNRELATED_SETTING", "1")
    identity = ab.identity_of(jobs, resolved, [])
    assert identity["environment"] == dict(LR="0.03", TORCHINDUCTOR_MIX_ORDER_REDUCTION="1")  # BPB: the variant's
    assert identity["made"]["a"] == dict(
        script=str(tmp_path / "t.py"),
        sha256=hashlib.sha256(b"x = 1\n").hexdigest(),
        config=dict(bpb=0.5, lr=0.03),  # less what names a run
        versions=dict(python="3", torch=None),
        data={},  # its config names no DATA_PATH
    )


def test_ab_identity_changes_name_each_thing_that_changed():
    made = dict(script="t.py", sha256="a" * 64, config=dict(lr=0.02), versions=dict(python="3.11.7", torch="2.13.0"))
    before = dict(made={"ttt on base": made}, environment={}, artifacts=dict(base_seed1="1" * 64))
    assert ab.identity_changes(before, before) == []
    more = dict(before, artifacts=dict(base_seed1="1" * 64, base_seed2="2" * 64))  # more --seeds: no change
    assert ab.identity_changes(before, more) == []
    now = dict(
        made={"ttt on base": dict(made, versions=dict(python="3.11.7", torch="2.14.0"))},
        environment=dict(TTT_LR="0.01"),
        artifacts=dict(base_seed1="3" * 64),  # the trained experiment was run again: other weights
    )
    assert ab.identity_changes(before, now) == [
        "ttt on base's torch 2.13.0 -> 2.14.0",
        "the shell's TTT_LR: unset -> 0.01",
        "trained run base_seed1's artifact is another (sha256 111111111111 -> 333333333333)",
    ]


# ---- pieces ----


def test_ab_paired_test_agrees_with_the_t_distribution_written_out():
    diffs = [-0.010, -0.014, -0.009]
    mean, sd, p, why = ab.paired_test(diffs)
    t = mean / (sd / math.sqrt(3))
    assert p == pytest.approx(1 - abs(t) / math.sqrt(2 + t * t), rel=1e-9) and why == ""  # two-sided, 2 df
    assert ab.paired_test([0.5]) == (0.5, None, None, "needs 2 or more pairs")
    assert ab.paired_test([0.1, 0.1])[1:] == (0.0, None, "the 2 differences are all equal")  # no p=0 claimed
    assert ab.paired_test([0.0, 0.0])[2] is None
    assert ab.paired_test(diffs, resolution=0.01)[2:] == (None, "the spread is under the 2 decimals logged")


def console(folder: Path, name: str, pre_export: str, roundtrip: str) -> Path:
    """A console output as train_gpt.py writes it, with the scores given as text (their decimals as logged)."""
    path = folder / "console" / f"{name}.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "step:1/2 train_loss:6.0000 train_time:100ms step_avg:100.00ms\n"
        "step:2/2 train_loss:5.0000 train_time:200ms step_avg:100.00ms\n"
        f"step:2/2 val_loss:5.5 val_bpb:{pre_export} weights:raw train_time:200ms step_avg:100.00ms\n"
        f"artifact:{name}.ptz sha256:{'0' * 64} code_bytes:1\n"
        f"final_int8_zlib_roundtrip_exact val_loss:5.50000000 val_bpb:{roundtrip}\n"
    )
    return path


def test_ab_pair_table_keeps_what_differs_below_the_fourth_decimal_and_gives_no_p_without_spread(tmp_path):
    variants = [ab.Variant("base", {}), ab.Variant("mine", {"X": "1"})]
    # before export at 8 decimals (what the trainer will log): the differences -0.00220129 and -0.00220388 differ
    # in the sixth decimal; the round trip's at 4 decimals: -0.0022 and -0.0023, a spread of rounding only
    values = dict(
        base_seed1=("1.23450000", "1.2345"),
        mine_seed1=("1.23229871", "1.2323"),
        base_seed2=("1.30000000", "1.3000"),
        mine_seed2=("1.29779612", "1.2977"),
    )
    jobs = []
    for name, (pre, roundtrip) in values.items():
        job = ab.Job(name.split("_")[0], int(name[-1]), name, {}, Path("t.py"))
        job.status, job.reason, job.metrics = ab.read_run(console(tmp_path, name, pre, roundtrip))
        assert job.status == "finished" and job.metrics["decimals"] == dict(pre_export=8, roundtrip=4, score=4)
        jobs.append(job)
    assert jobs[1].metrics["pre_export"] == 1.23229871  # all the digits the log has
    (row,) = ab.comparisons(jobs, variants)
    pre = row["kinds"]["pre_export"]
    diffs = [1.23229871 - 1.2345, 1.29779612 - 1.3]
    mean, sd = sum(diffs) / 2, abs(diffs[0] - diffs[1]) / math.sqrt(2)
    assert pre["each"] == pytest.approx(diffs, abs=1e-12) and pre["sd"] == pytest.approx(sd, rel=1e-6)
    assert pre["p"] == pytest.approx(1 - 2 / math.pi * math.atan(abs(mean) / (sd / math.sqrt(2))), rel=1e-6)
    assert row["kinds"]["score"]["p"] is None and row["kinds"]["roundtrip"]["p"] is None  # not p=0
    table = ab.markdown(jobs, variants, [row], "cmd")
    (line,) = [x for x in table.splitlines() if x.startswith("| mine - base | 2 | ")]
    cells = [c.strip() for c in line.split("|")[1:-1]]
    assert cells[2] == f"{mean:+.7f} ± {sd:.7f} (p={pre['p']:.3g})" and cells[2].startswith("-0.0022026 ± 0.0000018 ")
    assert cells[3] == cells[4] == "-0.00225 ± 0.00007 (no p: the spread is under the 4 decimals logged)"
    assert cells[5] == "-0.00220 -0.00230"  # each pair's score difference
    mean, sd = row["kinds"]["score"]["mean"], row["kinds"]["score"]["sd"]
    assert row["verdict"] == (
        f"mine - base = {mean:+.4f} ± {sd:.4f} bpb after the round trip, 2 seeds: no test (the spread is under the 4 "
        "decimals logged)"
    )
    assert ab.paired_test([-0.0022, -0.0022])[2:] == (None, "the 2 differences are all equal")


def test_ab_waves_keep_a_seeds_variants_together():
    jobs = [ab.Job(v, s, f"{v}_seed{s}", {}, Path("t.py")) for s in (1, 2, 3) for v in ("a", "b")]
    assert [[j.name for j in w] for w in ab.waves(jobs, 4)] == [
        ["a_seed1", "b_seed1", "a_seed2", "b_seed2"],
        ["a_seed3", "b_seed3"],
    ]
    assert [len(w) for w in ab.waves(jobs, 3)] == [2, 2, 2]  # 3 slots: never one seed's pair split across waves
    assert [len(w) for w in ab.waves(jobs[:2], 1)] == [1, 1]  # 1 slot: they cannot run at once


def test_ab_an_interrupted_run_shows_no_score_and_says_why_once(tmp_path):
    path = tmp_path / "console" / "base_seed2.txt"
    path.parent.mkdir()
    path.write_text(
        "step:0/6 val_loss:6.2 val_bpb:4.9000 weights:raw train_time:0ms step_avg:0.00ms\n"  # VAL_LOSS_EVERY's
        "step:1/6 train_loss:6.1000 train_time:100ms step_avg:100.00ms\n"
        "interrupted:SIGTERM step:1/6 train_time:150ms\n"
        "interrupted: SIGTERM; the log's last line says where the run was\n"
    )
    job = ab.Job("base", 2, "base_seed2", {}, Path("t.py"), rc=143)
    job.status, job.reason, job.metrics = ab.read_run(path, job.rc)
    assert job.status == "failed" and "pre_export" not in job.metrics  # step 0's validation is not a score
    assert job.metrics["val_loss"] == [[0, 0.0, 6.2]]  # (for the plot)
    job.status = "interrupted"  # as ab.py marks the runs it stopped
    pending = ab.Job("lr04", 2, "lr04_seed2", {}, Path("t.py"))  # not started before ab.py stopped
    table = ab.markdown([job, pending], [ab.Variant("base", {}), ab.Variant("lr04", {})], [], "cmd")
    assert "| interrupted: SIGTERM; the log's last line says where the run was |" in table
    assert "interrupted: interrupted" not in table and ab.line_of(job).startswith("interrupted base_seed2: SIGTERM;")
    assert ab.reason_text(pending) == "not started (ab.py stopped before its turn)"
    assert ab.read_run(path, None)[0] == "failed"


def test_ab_sums_each_phase_a_run_logged_and_takes_no_timing_line_for_the_reason_it_failed(tmp_path):
    path = tmp_path / "a_seed1.txt"
    path.write_text(
        "phase:startup phase_time:1.50s compile_time:0.00s\n"
        "phase:train phase_time:2.00s compile_time:0.00s\n"
        "step:5/5 val_loss:6.2 val_bpb:4.9000 weights:raw train_time:2000ms step_avg:400.00ms\n"
        "phase:validation phase_time:0.25s compile_time:0.10s\n"  # the scoring graph compiled
        "phase:validation phase_time:0.30s compile_time:0.00s\n"  # the EMA's
        "phase:teardown phase_time:0.01s compile_time:0.00s\n"
        "wall_time:4.06s since:process_start\n"
    )
    status, reason, metrics = ab.read_run(path, 0)  # exit 0 and no score: a fork that never scores
    assert status == "failed" and reason.startswith("step:5/5 val_loss:6.2 "), reason  # not its wall line
    phases = dict(startup=[1.5, 0.0], train=[2.0, 0.0], validation=[0.55, 0.1], teardown=[0.01, 0.0])
    assert metrics["phases"] == phases and list(metrics["phases"]) == list(phases) and metrics["wall_s"] == 4.06
    assert ab.read_phases(["final_int8_zlib_roundtrip_exact val_loss:2.0 val_bpb:1.0"]) == {}  # a record's log


def two_paces() -> tuple[list, list]:
    """Two runs of 100 steps, the second 1.5 times slower a step and a little better a step; validation at 0 and
    at the end."""
    variants = [ab.Variant("base", {}), ab.Variant("slow", {"X": "1"})]
    jobs = []
    for name, ms_a_step, floor in (("base", 100, 3.0), ("slow", 150, 2.9)):
        job = ab.Job(name, 1, f"{name}_seed1", {}, Path("t.py"), status="finished")
        loss = [floor + 7 * math.exp(-step / 5) for step in range(101)]
        job.metrics["train_loss"] = [[step, step * ms_a_step, loss[step]] for step in range(1, 101)]
        job.metrics["val_loss"] = [[0, 0.0, 10.0], [100, 100 * ms_a_step, floor + 0.05]]
        jobs.append(job)
    return jobs, variants


def test_ab_plot_data_by_step_and_by_time_fitted_to_where_runs_differ():
    jobs, variants = two_paces()
    data = ab.plot_series(jobs, variants)
    base, slow = data["series"]
    assert base["seconds"][-1] == 10.0 and slow["seconds"][-1] == 15.0  # slower a step: further right in time
    assert base["steps"][-1] == slow["steps"][-1] == 100  # the same by step
    assert (
        slow["val_steps"] == [0, 100]
        and slow["val_seconds"] == [0.0, 15.0]
        and slow["val_loss"] == pytest.approx([10.0, 2.95])
    )
    assert data["after_step"] == 20  # the first fifth of a 100-step run: its fall from 10 is not what differs
    low, high = data["ylim"]
    assert 2.8 < low < 2.9 and 3.05 < high < 3.2  # the losses after step 20 (3.105 at step 21), not the 10 at step 0
    assert ab.plot_series([ab.Job("base", 1, "base_seed1", {}, Path("t.py"))], variants) is None  # nothing trained


def test_ab_plot_draws_loss_by_step_and_by_time_with_validation_dots(tmp_path):
    pytest.importorskip("matplotlib")  # optional (CI has none): then the data test above is the check
    jobs, variants = two_paces()
    data = ab.plot_series(jobs, variants)
    fig = ab.figure(data)
    by_step, by_time = fig.axes
    assert (by_step.get_xlabel(), by_time.get_xlabel()) == ("step", "training time (s)")
    assert by_step.get_ylim() == by_time.get_ylim() == pytest.approx(data["ylim"])
    assert by_time.get_xlim()[1] >= 15.0 and by_step.get_xlim()[1] < 110
    for ax in (by_step, by_time):  # two curves, each with its validation dots
        assert [line.get_marker() for line in ax.get_lines()] == ["None", "o", "None", "o"]
    assert "plot: " in ab.plot(jobs, variants, tmp_path / "p.png") and (tmp_path / "p.png").stat().st_size > 10_000


FAKE_RECORD = """import os
import torch.nn.functional as F
from flash_attn_interface import flash_attn_func as flash_attn_3_func
class Hyperparameters:  # the records' way: class attributes read from the environment when the class is made
    iterations = int(os.environ.get("ITERATIONS", 20000))
    seed = int(os.environ.get("SEED", 1337))
if __name__ == "__main__":
    import torch
    args = Hyperparameters()
    q = torch.ones(1, 3, 2, 4)  # (B, T, H, D), FA3's layout
    assert flash_attn_3_func(q, q, q, causal=True).shape == q.shape
    open("final_model.int6.ptz", "w").write(str(args.iterations))  # where it runs, as the records do
    print(f"quantized_sliding_window val_loss:2.0 val_bpb:{1 + 1 / args.iterations + args.seed / 1024:.8f}")
"""


def test_ab_runs_a_packed_record_with_fa3_replaced_each_run_in_a_folder_of_its_own(tmp_path):
    import hashlib

    import recordlib

    filler = "".join(f"# {hashlib.sha256(bytes([i])).hexdigest()}\n" for i in range(40))  # packs to > 1000 chars
    (tmp_path / "record.py").write_text(recordlib.pack_script(FAKE_RECORD + filler))
    args = ["--slots", "2", "--out", "out", "--seeds", "1", "--variant", "a", "ITERATIONS=10", "--variant", "b"]
    args += ["ITERATIONS=20", "--script", "a=record.py", "--script", "b=record.py"]
    plan = ab_run(args + ["--plan"], tmp_path)
    assert plan.returncode == 0, plan.stderr
    assert "config b vs a: set by the variants: ITERATIONS 10 -> 20" in plan.stdout  # its class attributes, resolved
    assert not (tmp_path / "out").exists()
    run = ab_run(args, tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    script = (tmp_path / "out" / "scripts" / "a.py").read_text()
    assert "b85decode" not in script and ab.SDPA_SHIM in script and ab.FA3_IMPORT not in script
    for name, iterations in (("a_seed1", "10"), ("b_seed1", "20")):
        assert (tmp_path / "out" / "work" / name / "final_model.int6.ptz").read_text() == iterations
    assert (
        "- b - a = -0.0500 bpb on sliding windows, 1 seed: no test (needs 2 or more pairs)" in run.stdout
    )  # no spread claimed
    row = results(tmp_path / "out")["comparisons"][0]
    assert row["kinds"]["sliding_window"]["mean"] == pytest.approx(1 / 20 - 1 / 10, abs=1e-8)


RECORD_LOG = (
    ROOT.parent / "shared/records_examples/2026-04-09_SP8192_3LayerRecur_ParResid_QK525_LegalTTT/train_seed42.log"
)


@pytest.mark.skipif(not RECORD_LOG.exists(), reason="needs ../shared/records_examples")
def test_ab_reads_every_score_of_a_records_log():
    status, reason, metrics = ab.read_run(RECORD_LOG)
    assert (status, reason) == ("finished", "")
    assert metrics.pop("train_loss")[-1] == [4500, 582000.0, 2.7622]  # (step, training ms, loss): minutes logged
    assert metrics.pop("val_loss") == [[0, 0.0, 9.009], [4000, 504000.0, 2.8722], [4550, 588047.0, 2.8119]]
    assert metrics.pop("decimals") == dict(pre_export=8, roundtrip=8, sliding_window=8, ttt=8, score=8)
    assert metrics == dict(
        steps=4550,
        step_avg_ms=129.24,  # 588047 ms of training (its stopping_early line) over 4550 steps
        peak_mib=39045,
        pre_export=1.08734790,  # pre-quantization post-ema: the weights it exported
        roundtrip=1.09970431,
        sliding_window=1.08286335,
        ttt=1.08079352,
        score=1.08079352,
        score_kind="ttt",
    )
