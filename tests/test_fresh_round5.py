"""Issue 44, a fresh machine tried as a new user would (round 5): rows 2-6 (which tokenizer is CaseOps, and which
diagnosis wins), 8 (CASEOPS_ENABLED said to have no effect), 10 (the benchmark scripts' arguments and CPU errors),
12 (train_gpt.py --help) and 14 (the quick start's thread count on a machine its own installs just loaded).

CPU only, no network; the data is built here with data/build_shards.py from a few hundred short documents.
Run: python3 -m pytest -q tests/test_fresh_round5.py
"""

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sentencepiece as spm
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "data"), str(ROOT / "scripts")]

import bench_loss  # noqa: E402
import build_shards  # noqa: E402
import caseops  # noqa: E402
import check_legality  # noqa: E402
import profile_step  # noqa: E402
import quickstart  # noqa: E402
import retokenize  # noqa: E402
import train_gpt  # noqa: E402
from helpers import TinyData, tiny_env  # noqa: E402
from test_data import english_docs  # noqa: E402
from train_gpt import Hyperparameters  # noqa: E402

ONE_CPU = train_gpt.DistContext(0, 1, 0, torch.device("cpu"))
VOCAB = 320


def capitalized(docs: list[str]) -> list[str]:
    """Documents with capitals in every place CaseOps marks: the first letter of a word, whole words, inner ones."""
    return [" ".join(w.upper() if k % 7 == 3 else w.title() if k % 3 == 0 else w for k, w in enumerate(d.split()))
            + " McDonald iPhone" for d in docs]  # fmt: skip


def build(root: Path, texts: list[str], *flags: str) -> TinyData:
    """data/build_shards.py on texts: its own tokenizer of VOCAB pieces, train and validation shards."""
    jsonl = root / "docs.jsonl"
    jsonl.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    argv = [str(jsonl), "--output", str(root / "shards"), "--tokenizer-out", str(root / "tokenizer.model")]
    argv += ["--vocab-size", str(VOCAB), "--val-fraction", "0.2", "--workers", "1", *flags]
    build_shards.build(dataclasses.replace(build_shards.parse_args(argv), quiet=True))
    sp = spm.SentencePieceProcessor(model_file=str(root / "tokenizer.model"))
    return TinyData(root / "tokenizer.model", root / "shards", sp, texts, [], VOCAB)


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return capitalized(english_docs(300, seed=5))


@pytest.fixture(scope="module")
def plain_on_controls(tmp_path_factory, texts) -> TinyData:
    """Row 2's data: a plain build (no --caseops) of text that holds U+E001..U+E004 (here: text in its CaseOps form,
    so the symbols are frequent enough to be pieces of the tokenizer trained on it)."""
    return build(tmp_path_factory.mktemp("plain_on_controls"), [caseops.encode(t) for t in texts])


@pytest.fixture(scope="module")
def caseops_built(tmp_path_factory, texts) -> TinyData:
    """The same documents built with --caseops: a CaseOps tokenizer (the symbols user-defined), byte sidecars."""
    return build(tmp_path_factory.mktemp("caseops_built"), texts, "--caseops")


def preflight(data: TinyData, tmp_path: Path, **env) -> train_gpt.Run:
    return train_gpt.preflight(Hyperparameters.from_env(tiny_env(data, tmp_path, **env)), ONE_CPU)


def refusal(data: TinyData, tmp_path: Path, **env) -> str:
    with pytest.raises(train_gpt.ConfigError) as raised:
        preflight(data, tmp_path, **env)
    return str(raised.value)


# ---- Rows 2-6: CaseOps is a tokenizer whose pieces hold the control symbols as user-defined ones ----


def test_row2_a_plain_tokenizer_trained_on_text_with_the_control_symbols_is_not_caseops(
    plain_on_controls, caseops_built, tmp_path
):
    sp = plain_on_controls.sp
    assert all(sp.piece_to_id(c) != sp.unk_id() for c in caseops.CONTROLS[:3])  # pieces, as plain ones
    assert not train_gpt.is_caseops(sp) and train_gpt.is_caseops(caseops_built.sp)
    run = preflight(plain_on_controls, tmp_path)  # trains on its shards: no demand for byte sidecars
    assert run.val.bytes_from == {"val_bytes": "tokenizer"}
    # data/build_shards.py takes it again as the plain tokenizer it is, and not for --caseops
    build_shards.check_caseops_tokenizer(plain_on_controls.tokenizer_path, sp, use_caseops=False)
    with pytest.raises(build_shards.BuildError, match="does not hold the control symbols U.E001..U.E004 as user-def"):
        build_shards.check_caseops_tokenizer(plain_on_controls.tokenizer_path, sp, use_caseops=True)


def test_row3_the_same_plain_tokenizer_with_another_artifact_is_named_as_another_tokenizer(
    plain_on_controls, caseops_built, tmp_path
):
    env = dict(EVAL_ONLY=1, ARTIFACT_PATH=tmp_path / "other.ptz")
    args = Hyperparameters.from_env(tiny_env(plain_on_controls, tmp_path, **env))
    torch.manual_seed(0)
    model = train_gpt.GPT(args)
    header = train_gpt.artifact_header(args, "raw", False)
    header["tokenizer_sha256"] = train_gpt.file_sha256(caseops_built.tokenizer_path)  # made with another tokenizer
    obj = train_gpt.quantize_state_dict(model.state_dict(), args, train_gpt.parameter_roles(model))
    train_gpt.save_artifact(obj, header, str(tmp_path / "other.ptz"))
    message = refusal(plain_on_controls, tmp_path, **env)
    assert "was made with another tokenizer" in message and "CaseOps" not in message, message
    run = preflight(plain_on_controls, tmp_path, ALLOW_OTHER_TOKENIZER=1, RUN_ID="allowed", **env)
    assert run.val.bytes_from == {"val_bytes": "tokenizer"}


def test_row4_check_legality_on_a_configuration_the_trainer_refuses_is_an_error_not_a_verdict(
    caseops_built, tmp_path, monkeypatch, capsys
):
    """CaseOps data without its byte sidecars: train_gpt.py refuses it in its pre-flight, so the check answers
    `error:` with exit 2 (not NOT LEGAL, exit 1: no condition was tried)."""
    (tmp_path / "data").mkdir()
    for shard in caseops_built.data_path.glob("fineweb_val_0*.bin"):
        shutil.copy(shard, tmp_path / "data")
    env = dict(DATA_PATH=str(tmp_path / "data"), TOKENIZER_PATH=str(caseops_built.tokenizer_path), VOCAB_SIZE="320")
    for name in [n for n in os.environ if n in {f.name.upper() for f in dataclasses.fields(Hyperparameters)}]:
        monkeypatch.delenv(name)
    for name, value in (env | dict(TTT_LR="0.05")).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "argv", ["check_legality.py", "--processes", "1", "--geometries", "aligned"])
    assert check_legality.main() == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: ") and "(CaseOps) needs byte sidecars" in captured.err, captured.err
    assert "LEGAL" not in captured.out


def test_row5_retokenize_caseops_refuses_a_plain_tokenizer_trained_on_text_with_the_symbols(
    plain_on_controls, tmp_path, capsys
):
    argv = ["--from-model", str(plain_on_controls.tokenizer_path), "--to-model", str(plain_on_controls.tokenizer_path)]
    argv += ["--input", str(plain_on_controls.data_path), "--output", str(tmp_path / "out"), "--quiet", "--caseops"]
    with pytest.raises(SystemExit) as exit_:
        retokenize.main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "does not hold the control symbols U+E001..U+E004 as user-defined" in err, err
    assert not (tmp_path / "out").exists()


def test_row6_a_caseops_tokenizer_with_plain_shards_is_named_as_not_their_tokenizer(
    plain_on_controls, caseops_built, tmp_path
):
    other = dataclasses.replace(plain_on_controls, tokenizer_path=caseops_built.tokenizer_path)
    message = refusal(other, tmp_path)
    assert f"TOKENIZER_PATH={caseops_built.tokenizer_path} did not make the shards" in message, message
    assert "(CaseOps) needs byte sidecars" not in message


# ---- Row 8: CASEOPS_ENABLED (the records' switch) is said to have no effect ----


def test_row8_caseops_enabled_logs_that_it_has_no_effect(tiny_data, tmp_path, monkeypatch):
    def header(run_id: str) -> list[str]:
        run = preflight(tiny_data, tmp_path, RUN_ID=run_id)
        log = tmp_path / f"{run_id}.txt"
        train_gpt.log_header(dataclasses.replace(run, log=train_gpt.Logger(log)))
        return log.read_text().splitlines()

    monkeypatch.delenv("CASEOPS_ENABLED", raising=False)
    assert not [line for line in header("plain") if line.startswith("caseops_note:")]
    monkeypatch.setenv("CASEOPS_ENABLED", "1")
    lines = header("records")
    notes = [line for line in lines if line.startswith("caseops_note:")]
    assert notes == ["caseops_note: CASEOPS_ENABLED has no effect: the data decides (val_bytes above)"], notes
    assert any("val_bytes:tokenizer" in line for line in lines)


# ---- Row 10: the benchmark scripts check their arguments and say `error:` on a CPU ----


def exits(monkeypatch, capsys, module, *arguments: str) -> tuple[object, str]:
    """(exit code, stderr) of the script's main() under that command line, in this process."""
    monkeypatch.setattr(sys, "argv", [f"{module.__name__}.py", *arguments])
    with pytest.raises(SystemExit) as exit_:
        module.main()
    return exit_.value.code, capsys.readouterr().err


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--steps", "-1"], "error: --steps -1: give a count of at least 1.\n"),
        (["--profile", "0"], "error: --profile 0: give a count of at least 1.\n"),
        (["--warmup", "-2"], "error: --warmup -2: give a count of at least 0.\n"),
    ],
)
def test_row10_profile_step_checks_its_counts_before_it_needs_a_gpu(arguments, message, monkeypatch, capsys):
    assert exits(monkeypatch, capsys, profile_step, *arguments) == (2, message)


def test_row10_bench_loss_says_error_on_a_cpu_and_for_bad_arguments(monkeypatch, capsys):
    if not torch.cuda.is_available():
        code, _ = exits(monkeypatch, capsys, bench_loss)
        assert str(code).startswith("error: bench_loss.py needs a CUDA GPU"), code  # sys.exit(message): exit 1
    for arguments, message in (
        (["--chunks", "0,x"], "error: --chunks 0,x: give tokens per chunk"),
        (["--budget-s", "-1"], "error: --budget-s -1.0: give seconds >= 0"),
    ):
        code, err = exits(monkeypatch, capsys, bench_loss, *arguments)
        assert code == 2 and err.startswith(message), err


# ---- Row 12: train_gpt.py --help ----


def test_row12_help_prints_the_docstrings_usage():
    run = subprocess.run([sys.executable, str(ROOT / "train_gpt.py"), "--help"], capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.strip() == train_gpt.__doc__.strip() and not run.stderr, run.stderr
    assert "CPU smoke run" in run.stdout and "torchrun --standalone --nproc_per_node=8 train_gpt.py" in run.stdout


# ---- Row 14: the quick start's thread count is the cores idle now, not the load average its installs raised ----


def machine(monkeypatch, cores: int, load: float, busy: float | None) -> None:
    """cores for this process, a 1-minute load average, and /proc/stat's count of busy cores over the sample (None:
    no /proc/stat)."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(quickstart.os, "sched_getaffinity", lambda pid: set(range(cores)))
    monkeypatch.setattr(quickstart.os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(quickstart, "IDLE_SAMPLE_SECONDS", 0.0)
    samples = iter([0, 1])

    def cpu_times(cpus):  # each core busy for busy / cores of the 1000 ticks between the two samples
        if busy is None:
            return {}
        k = next(samples)
        return {c: (int(k * 1000 * busy / cores), k * 1000) for c in cpus}

    monkeypatch.setattr(quickstart, "cpu_times", cpu_times)


@pytest.mark.parametrize(
    "cores, load, busy, threads",
    [(2, 1.9, 0.05, 2), (2, 3.2, 0.0, 2), (2, 0.1, 1.0, 1), (2, 0.0, 2.0, 1), (16, 12.0, 3.0, 8), (4, 4.0, 1.4, 3)],
)
def test_row14_threads_are_the_cores_idle_now_not_the_load_average_of_the_installs(
    monkeypatch, cores, load, busy, threads
):
    """A fresh idle 2-core machine right after the quick start's pip install and data build: load average 1.9,
    cores idle. The load average gave 1 thread (issue 44: 247 to 269 steps); the measured idle cores give 2."""
    machine(monkeypatch, cores, load, busy)
    got, reason = quickstart.train_threads()
    assert got == threads and f"{busy:.1f} of them busy" in reason, reason


def test_row14_without_proc_stat_the_load_average_decides(monkeypatch):
    machine(monkeypatch, 2, 1.9, None)
    assert quickstart.train_threads() == (1, "2 cores, load average 1.9 over the last minute")


def test_row14_cpu_times_reads_proc_stat(tmp_path, monkeypatch):
    """The busy and total ticks of the listed cores (iowait counts as idle), from /proc/stat's per-core lines."""
    stat = tmp_path / "stat"
    stat.write_text(
        "cpu  30 0 20 100 10 0 0 0 0 0\ncpu0 10 1 5 50 4 1 1 2 0 0\ncpu1 20 0 15 50 6 0 0 0 0 0\n"
        "intr 12345 1 2\nctxt 99\n"
    )
    monkeypatch.setattr(quickstart, "PROC_STAT", stat)
    assert quickstart.cpu_times({0, 1}) == {0: (20, 74), 1: (35, 91)}
    assert quickstart.cpu_times({1, 5}) == {1: (35, 91)}  # a core it does not list: busy_cores falls back
    assert quickstart.busy_cores({1, 5}) is None
    monkeypatch.setattr(quickstart, "PROC_STAT", tmp_path / "missing")
    assert quickstart.cpu_times({0}) == {}
    if Path("/proc/stat").is_file():  # this machine's, as the quick start reads it
        monkeypatch.setattr(quickstart, "PROC_STAT", Path("/proc/stat"))
        monkeypatch.setattr(quickstart, "IDLE_SAMPLE_SECONDS", 0.2)
        busy = quickstart.busy_cores({0})
        assert busy is not None and 0.0 <= busy <= 1.0
