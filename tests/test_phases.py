"""Where a run's wall time goes (issue 58): train_gpt.py logs each phase as it ends (phase:NAME phase_time:Ss
compile_time:Ss) and, last, the wall since the process started (wall_time:Ss since:process_start). A tiny run's phases
add up to its wall, which agrees with the time measured outside the process; the clock starts at launch, not at
import; torch.compile's part of a phase is counted; the warm-up, GPTQ and scoring times are those phases.

Run: python3 -m pytest -q tests/test_phases.py   (CPU only; about 30 s)
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import torch

import train_gpt
from helpers import ROOT, run_script, tiny_env

# The tiny run below logs every phase there is: validations at steps 0, 5 and 10 (of 10), the EMA's, GPTQ, and each
# scoring path.
PHASES = ["startup", "model", "warmup"] + ["train", "validation"] * 3 + ["validation", "quantize"]
PHASES += ["artifact_write", "artifact_load", "roundtrip", "sliding_window", "ttt", "teardown"]


def seconds(value: str) -> float:
    assert value.endswith("s") and not value.endswith("ms"), value
    return float(value[:-1])


@pytest.fixture(scope="module")
def timed_run(tiny_data, tmp_path_factory):
    """A tiny run with every phase, and its wall measured outside: from launch to exit."""
    tmp_path = tmp_path_factory.mktemp("phases")
    env = tiny_env(tiny_data, tmp_path, WARMUP_STEPS=2, VAL_LOSS_EVERY=5, EMA_DECAY=0.9, GPTQ_CALIBRATION_BATCHES=2)
    env.update(EVAL_STRIDE="32", TTT_ENABLED="1", TTT_CHUNK_TOKENS="8192", TTT_EPOCHS="1")
    started = time.perf_counter()
    run = run_script(env, tmp_path)
    run.outside_s = time.perf_counter() - started
    assert run.result.returncode == 0, run.result.stderr
    return run


def test_a_runs_phases_add_up_to_its_wall_which_is_the_time_measured_outside_it(timed_run):
    run = timed_run
    phases = run.events("phase")
    assert [p["phase"] for p in phases] == PHASES
    assert all(set(p) == {"phase", "phase_time", "compile_time"} for p in phases)
    (wall,) = run.events("wall_time")
    assert run.lines[-1] == f"wall_time:{wall['wall_time']} since:{wall['since']}"  # the last line
    assert wall["since"] == ("process_start" if sys.platform.startswith("linux") else "import")
    total = sum(seconds(p["phase_time"]) for p in phases)
    assert abs(total - seconds(wall["wall_time"])) <= 0.005 * len(phases) + 1e-9  # each rounded to 0.01 s
    # the wall counts from the launch (python's own start-up, torch's import), so only the fork and the exit are
    # outside it: it can be no longer than the time measured around the process, and not much shorter
    assert 0 <= run.outside_s - seconds(wall["wall_time"]) < 2.0, (run.outside_s, wall)
    assert seconds(phases[0]["phase_time"]) > 0.3  # startup: at least the imports of torch and numpy
    assert all(seconds(p["compile_time"]) == 0 for p in phases)  # COMPILE is CUDA's: nothing compiles on a CPU


def test_the_warmup_gptq_and_scoring_times_are_those_phases(timed_run):
    """Their own clocks were replaced by the phases': the existing keys keep their format and measure the same."""
    run = timed_run
    phase = {p["phase"]: 1000 * seconds(p["phase_time"]) for p in run.events("phase")}  # ms; the last if repeated
    assert float(run.events("warmup_time")[0]["warmup_time"].removesuffix("ms")) == pytest.approx(
        phase["warmup"], abs=6
    )
    assert float(run.events("gptq_time")[0]["gptq_time"].removesuffix("ms")) == pytest.approx(phase["quantize"], abs=6)
    for kind in ("roundtrip", "sliding_window", "ttt"):
        (score,) = run.events(f"{kind}_val_loss")
        assert float(score["eval_time"].removesuffix("ms")) == pytest.approx(phase[kind], abs=6), kind


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the launch is read in Linux's /proc")
def test_the_wall_starts_at_the_processs_launch_not_at_the_trainers_import():
    """A process that waits 1.5 s before it imports train_gpt: its Logger's wall starts 1.5 s and more before."""
    code = "import time; time.sleep(1.5); import train_gpt; log = train_gpt.Logger(None)\n"
    code += "print(time.perf_counter() - log.marks[0][0], log.since, time.perf_counter() - train_gpt.IMPORTED)"
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    outside = time.perf_counter() - started
    assert out.returncode == 0, out.stderr
    age, since, since_import = out.stdout.split()
    assert since == "process_start"
    assert 1.5 + float(since_import) < float(age) < outside  # the import's clock would give about since_import


def test_a_phase_counts_torch_compiles_part_of_it(tmp_path):
    """compile_time: the seconds torch.compile spent in the phase (dynamo's own counter, forward and backward graphs);
    a phase that only runs the compiled code has none. aot_eager: dynamo and AOTAutograd, no C++ compiler needed."""
    log = train_gpt.Logger(tmp_path / "log.txt")
    log.phase("before")
    f = torch.compile(lambda x: (x.sin() * x).sum(), backend="aot_eager")
    x = torch.randn(16, requires_grad=True)
    f(x).backward()
    compiled_phase = log.phase("compiling")
    f(x).backward()
    log.phase("running")
    lines = (tmp_path / "log.txt").read_text().splitlines()
    fields = [dict(token.split(":", 1) for token in line.split(" ")) for line in lines]
    assert [f["phase"] for f in fields] == ["before", "compiling", "running"]
    compiling = seconds(fields[1]["compile_time"])
    assert 0 < compiling <= seconds(fields[1]["phase_time"]) + 0.01 and compiled_phase >= compiling - 0.01
    assert seconds(fields[2]["compile_time"]) == 0


def test_a_phase_before_any_compile_on_an_older_torch_counts_no_compile_time(tmp_path, monkeypatch):
    """torch before 2.5 gives calculate_time_spent() as {} until something compiled (no total_wall_time key), while
    torch.optim.Adam's constructor already imports torch._dynamo: the first phase must not fail on it."""
    import torch._dynamo.utils

    monkeypatch.setattr(torch._dynamo.utils, "calculate_time_spent", dict)
    log = train_gpt.Logger(tmp_path / "log.txt")
    log.phase("startup")
    assert (tmp_path / "log.txt").read_text().split(" ")[2] == "compile_time:0.00s\n"
