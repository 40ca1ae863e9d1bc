"""data/quickstart.py's dataset: the standard library's documentation text, and FineWeb on a CPU.

CPU only, no network; about 15 s (it parses the whole standard library). The end-to-end quick start
(training) is not run here: the trainer's own end-to-end tests cover train_gpt.py.
Run: python3 -m pytest -q tests/test_data_quickstart.py
"""

import contextlib
import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "data"))

import build_shards  # noqa: E402  (the shard writer)
import quickstart  # noqa: E402
import train_gpt  # noqa: E402


def fake_stdlib(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "site-packages" / "thirdparty").mkdir(parents=True)
    (root / "test").mkdir()
    (root / "pydoc_data").mkdir()
    (root / "b.py").write_text(
        '"""Module b."""\n\nclass C:\n    """Class C.\n\n      Indented."""\n'
        '    def m(self):\n        """Method m."""\n\ndef f():\n    """Function f."""\n'
    )
    (root / "pkg" / "__init__.py").write_text('"""The package."""\n')
    (root / "pkg" / "copy.py").write_text('"""The package."""\n')  # a repeat: dropped
    (root / "a.py").write_text("x = 1  # no docstrings: no document\n")
    (root / "broken.py").write_text("def (:\n")
    (root / "site-packages" / "thirdparty" / "m.py").write_text('"""Not the standard library."""\n')
    (root / "test" / "t.py").write_text('"""A test."""\n')
    topics = "topics = {'with': 'The with statement.', 'if': 'The if statement.'}\n"
    (root / "pydoc_data" / "topics.py").write_text(topics)
    return root


def test_stdlib_documents_are_the_docstrings_in_a_fixed_order(tmp_path):
    docs = quickstart.stdlib_documents(fake_stdlib(tmp_path / "lib"))
    assert docs == [
        "Module b.\n\nClass C.\n\nIndented.\n\nMethod m.\n\nFunction f.",
        "The package.",
        "The if statement.",
        "The with statement.",
    ]


def test_stdlib_dataset_builds_once_and_is_reused(tmp_path, capsys):
    data_dir = tmp_path / "data"
    path, tokenizer, vocab = quickstart.stdlib_dataset(data_dir, workers=2)
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["built_with"]["python"] == quickstart.platform.python_version()
    assert quickstart.platform.python_version() in path.name
    assert spm.SentencePieceProcessor(model_file=str(tokenizer)).vocab_size() == vocab == 512
    # Deterministic: the documents are the same on every call, and the second call reuses the shards.
    source = data_dir / "datasets" / f"pystdlib_{quickstart.platform.python_version()}.jsonl"
    texts = [json.loads(line)["text"] for line in source.read_text(encoding="utf-8").splitlines()]
    assert texts == quickstart.stdlib_documents()
    # How many documents depends on the Python installed (625 from 3.11.7's, 424 from Ubuntu's 3.12.3): each one is in
    # one split, the hash rule's, and the validation split holds at least one of the quick start's validation batches.
    stats = manifest["datasets"][0]["stats"]
    val_docs = sum(build_shards.is_validation(text, quickstart.STDLIB_VAL_FRACTION) for text in texts)
    assert (stats["docs_val"], stats["docs_train"]) == (val_docs, len(texts) - val_docs) and val_docs > 0
    assert stats["tokens_val"] >= quickstart.TINY_MODEL["VAL_BATCH_SIZE"]
    shard = path / "fineweb_val_000000.bin"
    before = shard.stat().st_mtime_ns
    assert quickstart.stdlib_dataset(data_dir, workers=2) == (path, tokenizer, vocab)
    assert shard.stat().st_mtime_ns == before and "reusing" in capsys.readouterr().out
    shard.write_bytes(shard.read_bytes()[:-2])  # damaged: rebuilt
    quickstart.stdlib_dataset(data_dir, workers=2)
    assert train_gpt.read_shard_header(shard) == stats["tokens_val"]


def test_cpu_fineweb_validation_prefix_ends_at_a_document_boundary(tmp_path, monkeypatch):
    data = tmp_path / "data"
    src = data / "datasets" / "fineweb10B_sp1024"
    src.mkdir(parents=True)
    docs = [np.concatenate([[1], np.full(n, 7)]) for n in (100, 250, 80, 400)]
    build_shards.write_data_shard(src / "fineweb_val_000000.bin", np.concatenate(docs))
    build_shards.write_data_shard(src / "fineweb_train_000000.bin", np.concatenate(docs))
    monkeypatch.setattr(quickstart, "FINEWEB_DATA", src)
    monkeypatch.setattr(quickstart, "DATA_DIR", data)
    monkeypatch.setattr(quickstart, "CPU_VAL_TOKENS", 500)
    out = quickstart.fineweb_for_cpu()
    val = train_gpt.load_data_shard(out / "fineweb_val_000000.bin").numpy()
    assert val.size == 101 + 251 + 81  # the three whole documents that fit in 500 tokens
    assert (out / "fineweb_train_000000.bin").resolve() == (src / "fineweb_train_000000.bin").resolve()


# ------------------------------------------------------------------------------------------------
# quickstart.sh: what it installs, with a stand-in python3 that records its calls
# ------------------------------------------------------------------------------------------------

SYSTEM_PATH = "/usr/bin:/bin"
REQUIREMENTS = "-m pip install -r requirements.txt"
CHECK = "data/quickstart.py --check"  # the options, checked by the real quickstart.py before anything is installed


class IndexPage(http.server.BaseHTTPRequestHandler):
    """Any page of the stand-in PyTorch CPU index: 200 and a word."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "5")
        self.end_headers()
        self.wfile.write(b"torch")


@contextlib.contextmanager
def torch_index(kind: str):
    """A stand-in PyTorch CPU index on 127.0.0.1; yields its URL. kind: "answers" (200 for any page),
    "refuses" (a port nothing listens on) or "silent" (accepts connections, never replies)."""
    if kind == "answers":
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), IndexPage)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/whl/cpu"
        finally:
            server.shutdown()
            server.server_close()
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound, so no other process takes the port while the test runs
        if kind == "silent":
            sock.listen()  # the kernel completes the connections; nobody reads them
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/whl/cpu"


def run_quickstart_sh(
    tmp_path: Path,
    *args: str,
    torch_installed: bool,
    gpu: bool = False,
    cpu_index: str = "answers",
    cpu_pip_fails: bool = False,
) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Run quickstart.sh with python3 (and nvidia-smi when gpu) replaced by stubs and QUICKSTART_TORCH_INDEX
    pointing at torch_index(cpu_index); returns the result and the python3 command lines it ran.

    The stub's pip succeeds, also with the CPU index (unless cpu_pip_fails), as the real one does where pip's
    configuration names other sources (find-links, extra-index-url): it then takes torch from those after
    minutes of retrying an index that does not answer. The script's probe of the index (python3 -c with
    other code than "import torch") runs in the real Python, against the stand-in index, and so does the check of
    the options (quickstart.py --check), recorded as a call."""
    stubs = tmp_path / "stubs"
    stubs.mkdir(parents=True, exist_ok=True)
    log = tmp_path / "python3_calls.txt"
    (stubs / "python3").write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "-c" ] && [ "$2" != "import torch" ]; then exec "{sys.executable}" "$@"; fi\n'
        f'echo "$*" >> "{log}"\n'
        f'if [ "$1 $2" = "{CHECK}" ]; then exec "{sys.executable}" "$@"; fi\n'
        f'if [ "$1" = "-c" ]; then exit {0 if torch_installed else 1}; fi\n'
        f'case "$*" in *--index-url*) exit {1 if cpu_pip_fails else 0};; esac\n'
        "exit 0\n"
    )
    (stubs / "python3").chmod(0o755)
    if gpu:
        (stubs / "nvidia-smi").write_text("#!/bin/sh\nexit 0\n")
        (stubs / "nvidia-smi").chmod(0o755)
    elif shutil.which("nvidia-smi", path=SYSTEM_PATH):
        pytest.skip("this machine has nvidia-smi in /usr/bin or /bin")
    with torch_index(cpu_index) as url:
        env = {
            **os.environ,
            "PATH": f"{stubs}:{SYSTEM_PATH}",
            "QUICKSTART_TORCH_INDEX": url,
            "no_proxy": "*",
            "NO_PROXY": "*",
        }  # a proxy must not answer for 127.0.0.1
        result = subprocess.run(
            ["bash", str(ROOT / "quickstart.sh"), *args], capture_output=True, text=True, env=env, timeout=60
        )
    calls = log.read_text().splitlines() if log.exists() else []
    return result, calls


def test_quickstart_sh_help_installs_nothing(tmp_path):
    for flag in ("--help", "-h"):
        result, calls = run_quickstart_sh(tmp_path, "--seconds", "5", flag, torch_installed=False)
        assert result.returncode == 0 and result.stdout.startswith("usage: bash quickstart.sh")
        assert calls == []
        for option in vars(quickstart.parse_args([])):  # the usage lists every option of quickstart.py
            assert f"--{option}" in result.stdout


def test_quickstart_sh_installs_the_cpu_torch_only_without_a_gpu(tmp_path):
    cpu_torch = re.compile(r"-m pip install torch --index-url http://127\.0\.0\.1:\d+/whl/cpu --timeout 10 --retries 1")
    _, calls = run_quickstart_sh(tmp_path / "a", "--seconds", "5", torch_installed=False)
    assert len(calls) == 5 and cpu_torch.fullmatch(calls[2])
    assert [*calls[:2], *calls[3:]] == [
        f"{CHECK} --seconds 5",
        "-c import torch",
        REQUIREMENTS,
        "data/quickstart.py --seconds 5",
    ]
    result, calls = run_quickstart_sh(tmp_path / "b", torch_installed=False, cpu_pip_fails=True)
    assert result.returncode == 0 and "pip could not install torch from the PyTorch CPU index" in result.stdout
    assert len(calls) == 5 and cpu_torch.fullmatch(calls[2]) and calls[3:] == [REQUIREMENTS, "data/quickstart.py"]
    _, calls = run_quickstart_sh(tmp_path / "c", torch_installed=True)
    assert calls == [CHECK, "-c import torch", REQUIREMENTS, "data/quickstart.py"]
    _, calls = run_quickstart_sh(tmp_path / "d", torch_installed=False, gpu=True)
    assert calls == [CHECK, "-c import torch", REQUIREMENTS, "data/quickstart.py"]


@pytest.mark.parametrize("cpu_index, within_s", [("refuses", 10), ("silent", 30)])
def test_quickstart_sh_falls_back_fast_when_the_cpu_index_does_not_answer(tmp_path, cpu_index, within_s):
    """pip's exit status cannot tell that the index did not answer (the stub's pip succeeds, see
    run_quickstart_sh), so the script asks the index itself, for 10 s at most, and then says so and goes on
    without it. A refused connection fails at once; a server that never replies, after the 10 s."""
    t0 = time.perf_counter()
    result, calls = run_quickstart_sh(tmp_path, torch_installed=False, cpu_index=cpu_index)
    assert time.perf_counter() - t0 < within_s
    assert result.returncode == 0, result.stderr
    assert "did not answer" in result.stdout and "installing torch from the default index" in result.stdout
    assert calls == [CHECK, "-c import torch", REQUIREMENTS, "data/quickstart.py"]


@pytest.mark.parametrize(
    "args, said",
    [
        (["--workers", "0"], "argument --workers: '0' is not a number of processes: give a whole number from 1 up"),
        (["--seconds", "soon"], "argument --seconds: 'soon' is not a number of seconds above 0"),
        (["--data", "web"], "argument --data: invalid choice: 'web'"),
        (["--epochs", "3"], "unrecognized arguments: --epochs 3"),
    ],
)
def test_quickstart_sh_checks_its_options_before_it_installs_anything(tmp_path, args, said):
    """Issue 55, low #189: quickstart.sh installed the requirements (minutes: torch) before data/quickstart.py read
    its options and refused a wrong one. It now asks quickstart.py to check them first, which needs no requirement."""
    result, calls = run_quickstart_sh(tmp_path, *args, torch_installed=False)
    assert result.returncode == 2 and said in result.stderr, result.stderr
    assert calls == [f"{CHECK} {' '.join(args)}"]  # nothing installed, nothing run
    result, calls = run_quickstart_sh(tmp_path / "ok", "--workers", "1", "--check", torch_installed=False)
    assert result.returncode == 0 and calls == [f"{CHECK} --workers 1 --check"]


def test_the_options_are_checked_without_the_requirements(tmp_path):
    """What quickstart.sh runs before it installs anything: quickstart.py --check with no torch (nor build_shards'
    numpy and sentencepiece) importable; without --check it says what to install instead of a traceback."""
    script = ROOT / "data" / "quickstart.py"
    block = "import runpy, sys; sys.modules.update(torch=None, numpy=None, sentencepiece=None); "
    block += f"sys.argv = [{str(script)!r}] + sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"

    def run(*args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-c", block, *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=tmp_path)

    assert run("--check", "--workers", "2", "--seconds", "30").returncode == 0
    refused = run("--check", "--workers", "-1")
    assert refused.returncode == 2 and "argument --workers: '-1' is not a number of processes" in refused.stderr
    missing = run("--seconds", "30")
    assert missing.returncode == 1 and missing.stderr.strip() == (
        "quickstart: torch is not installed: bash quickstart.sh installs the requirements, or python3 -m pip "
        "install -r requirements.txt"
    )


@pytest.mark.parametrize("workers", ["0", "-2", "two", "1.5"])
def test_workers_below_one_are_refused_with_the_valid_range(workers, capsys):
    """Issue 55, low #190: --workers 0 was accepted."""
    with pytest.raises(SystemExit) as exit_:
        quickstart.parse_args(["--workers", workers])
    assert exit_.value.code == 2
    assert f"argument --workers: {workers!r} is not a number of processes: give a whole number from 1 up" in (
        capsys.readouterr().err
    )
    assert quickstart.parse_args(["--workers", "3"]).workers == 3


def test_the_printed_command_reruns_exactly_what_ran(tmp_path, monkeypatch, capsys):
    """From a folder with spaces: pasting the printed line into a shell runs train_gpt.py with the same
    argv, working folder and settings as the quick start did (WARMUP_STEPS included)."""
    repo = tmp_path / "my repo (copy)"
    repo.mkdir()
    (repo / "train_gpt.py").write_text(
        "import json, os, sys\n"
        "with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'runs.jsonl'), 'a') as f:\n"
        "    f.write(json.dumps({'argv': sys.argv, 'cwd': os.getcwd(), 'env': dict(os.environ)}) + '\\n')\n"
        "print('final_int8_zlib_roundtrip_exact val_loss:2.0 val_bpb:1.5')\n"
    )
    monkeypatch.setattr(quickstart, "REPO_ROOT", repo)
    data = tmp_path / "data with spaces" / "it's here"
    figures = quickstart.train(data / "shards", data / "tok.model", 512, 1.5, "quickstart_test")
    assert figures["val_bpb"] == "1.5"
    out = capsys.readouterr().out.splitlines()
    line = out[out.index("quickstart: training with this command (paste it to run it again):") + 1]
    subprocess.run(["bash", "-c", line], check=True, capture_output=True, timeout=60)
    first, second = (json.loads(x) for x in (repo / "runs.jsonl").read_text().splitlines())
    settings, command = quickstart.train_command(data / "shards", data / "tok.model", 512, 1.5, "quickstart_test")
    assert "WARMUP_STEPS" in settings or quickstart.torch.cuda.is_available()
    assert first["argv"] == second["argv"] == command[1:] and first["cwd"] == second["cwd"] == str(repo)
    for key, value in settings.items():
        assert first["env"][key] == second["env"][key] == value, key


# ------------------------------------------------------------------------------------------------
# A busy or slow machine: threads, progress while train_gpt.py evaluates, the summary's warning
# ------------------------------------------------------------------------------------------------


def fake_trainer(repo: Path, body: str) -> None:
    """repo/train_gpt.py: writes its OMP_NUM_THREADS to repo/threads.txt, then runs body."""
    repo.mkdir(parents=True, exist_ok=True)
    (repo / "train_gpt.py").write_text(
        "import os, pathlib, sys, time\n"
        "pathlib.Path(__file__).with_name('threads.txt').write_text(os.environ.get('OMP_NUM_THREADS', 'unset'))\n"
        + body
    )


def machine(monkeypatch, cores: int, load: float) -> None:
    """cores and a load average, without /proc/stat: the load average decides (tests/test_fresh_round5.py has the
    measured idle cores)."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(quickstart.os, "sched_getaffinity", lambda pid: set(range(cores)))
    monkeypatch.setattr(quickstart.os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(quickstart, "cpu_times", lambda cpus: {})


@pytest.mark.parametrize("cores, load, threads", [(2, 3.7, 1), (2, 1.0, 1), (2, 0.1, 2), (1, 0.0, 1), (16, 12.2, 4)])
def test_train_threads_are_the_idle_cores(monkeypatch, cores, load, threads):
    machine(monkeypatch, cores, load)
    assert quickstart.train_threads()[0] == threads


def test_train_threads_at_most_the_cap_and_the_users_choice(monkeypatch):
    machine(monkeypatch, 64, 0.0)
    assert quickstart.train_threads()[0] == quickstart.MAX_TRAIN_THREADS
    machine(monkeypatch, 2, 3.7)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert quickstart.train_threads() == (None, "as set in the environment")
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.delattr(quickstart.os, "getloadavg")  # Windows
    assert quickstart.train_threads()[0] == 2


def test_train_gpt_runs_with_the_chosen_thread_count(tmp_path, monkeypatch, capsys):
    """A 2-core machine with another process on one core: train_gpt.py gets 1 thread, and the quick start
    says so; where OMP_NUM_THREADS is set, train_gpt.py gets that."""
    repo = tmp_path / "repo"
    fake_trainer(repo, "print('final_int8_zlib_roundtrip_exact val_loss:2.0 val_bpb:1.5')\n")
    monkeypatch.setattr(quickstart, "REPO_ROOT", repo)
    machine(monkeypatch, 2, 1.3)
    figures = quickstart.train(tmp_path / "shards", tmp_path / "tok.model", 512, 1.0, "threads_test")
    assert (repo / "threads.txt").read_text() == "1" and figures["threads"] == "OMP_NUM_THREADS=1"
    out = capsys.readouterr().out
    assert "quickstart: train_gpt.py runs with OMP_NUM_THREADS=1 (2 cores, load average 1.3 over the last " in out
    assert " OMP_NUM_THREADS=1 " in out  # in the command line printed to paste
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    figures = quickstart.train(tmp_path / "shards", tmp_path / "tok.model", 512, 1.0, "threads_test")
    assert (repo / "threads.txt").read_text() == "2" and figures["threads"] == "OMP_NUM_THREADS=2"
    assert "runs with OMP_NUM_THREADS=2 (as set in the environment" in capsys.readouterr().out


def test_silent_evaluations_get_a_progress_line(tmp_path, monkeypatch, capsys):
    """train_gpt.py prints nothing while it evaluates (a minute on a busy CPU): the quick start says what it
    is doing after HEARTBEAT_SECONDS of silence, judged by the last line it printed."""
    repo = tmp_path / "repo"
    fake_trainer(
        repo,
        "print('step:450/100000 train_loss:2.5 train_time:2010ms step_avg:4.47ms tokens_per_s:9')\n"
        "time.sleep(1.5)\n"
        "print('artifact:logs/x.int8.ptz sha256:00 code_bytes:1 model_bytes:2 total_bytes:3')\n"
        "time.sleep(1.5)\n"
        "print('final_int8_zlib_roundtrip_exact val_loss:2.0 val_bpb:1.5')\n",
    )
    monkeypatch.setattr(quickstart, "REPO_ROOT", repo)
    monkeypatch.setattr(quickstart, "HEARTBEAT_SECONDS", 0.4)
    quickstart.train(tmp_path / "shards", tmp_path / "tok.model", 512, 2.0, "heartbeat_test")
    out = capsys.readouterr().out.splitlines()
    after_training = out[
        out.index("step:450/100000 train_loss:2.5 train_time:2010ms step_avg:4.47ms tokens_per_s:9") + 1
    ]
    assert after_training.startswith(
        "quickstart: training is over and train_gpt.py is evaluating the model on the validation split ("
    )
    after_export = out[out.index("artifact:logs/x.int8.ptz sha256:00 code_bytes:1 model_bytes:2 total_bytes:3") + 1]
    assert after_export.startswith("quickstart: train_gpt.py is evaluating the artifact after the int8+zlib round")
    line = "step:50/100000 train_loss:2.5 train_time:1990ms step_avg:39.80ms tokens_per_s:9"
    assert quickstart.quiet_phase(line, 2.0).startswith("training; train_gpt.py prints a line every 50 steps")


def test_the_summary_says_when_far_fewer_steps_ran_than_the_reference_run(tmp_path, monkeypatch, capsys):
    """The issue's run: 11 steps in 120 s on a busy 2-core machine, val_bpb 4.22 where the README reports
    about 450 steps and 2.28. The summary says why, instead of leaving a bad number unexplained."""
    repo = tmp_path / "repo"
    fake_trainer(
        repo,
        "print('step:11/100000 train_loss:3.9 train_time:121000ms step_avg:11000.00ms')\n"
        "print('step:11/100000 val_loss:2.9 val_bpb:4.2 weights:raw train_time:121000ms')\n"
        "print('final_int8_zlib_roundtrip_exact val_loss:2.92 val_bpb:4.22')\n",
    )
    monkeypatch.setattr(quickstart, "REPO_ROOT", repo)
    monkeypatch.setattr(quickstart.torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(quickstart, "stdlib_dataset", lambda *args: (tmp_path / "shards", tmp_path / "t.model", 512))
    machine(monkeypatch, 2, 0.0)
    quickstart.main(["--data", "stdlib", "--seconds", "120"])
    summary = capsys.readouterr().out.split("quickstart: done in ", 1)[1]
    assert "val_bpb:4.22 " in summary and "steps:11 " in summary
    assert (
        "quickstart: only 11 steps ran in 120s of training, where data/README.md's reference run (an idle "
        "2-core AMD EPYC) makes about 450" in summary
    )
    assert "this machine is slow or busy" in summary and "train_gpt.py ran with OMP_NUM_THREADS=2" in summary


def test_the_shortfall_scales_with_the_training_time():
    reference = quickstart.REFERENCE_RUN
    assert quickstart.shortfall_note(reference["steps"] - 10, reference["seconds"], "OMP_NUM_THREADS=2") == ""
    assert quickstart.shortfall_note(120, 60, "OMP_NUM_THREADS=2") == ""  # 225 expected in 60 s, half is 112
    assert "only 100 steps ran in 60s" in quickstart.shortfall_note(100, 60, "OMP_NUM_THREADS=2")
    assert "makes about 1800" in quickstart.shortfall_note(100, 480, "OMP_NUM_THREADS=2")


def test_the_readme_reports_the_reference_run():
    """The warning compares with REFERENCE_RUN; data/README.md must report the same run."""
    section = (ROOT / "data" / "README.md").read_text(encoding="utf-8").split("## 3. The quick start", 1)[1]
    section = " ".join(section.split("\n## ", 1)[0].split())
    reference = quickstart.REFERENCE_RUN
    assert f"about {reference['steps']} steps and `val_bpb` about {reference['val_bpb']}" in section
    assert f"{reference['seconds']} s of training" in section


@pytest.mark.parametrize("seconds", ["0", "-5", "nan", "soon"])
def test_seconds_that_are_not_a_positive_cap_are_refused(seconds, capsys):
    """Issue 34 rows 12 and 22: --seconds 0 started an uncapped 100,000-step run (hours on a CPU; train_gpt.py reads
    MAX_WALLCLOCK_SECONDS=0 as no cap), --seconds -5 a run that failed its pre-flight."""
    with pytest.raises(SystemExit) as exit_:
        quickstart.parse_args(["--seconds", seconds])
    assert exit_.value.code == 2
    assert f"argument --seconds: {seconds!r} is not a number of seconds above 0" in capsys.readouterr().err
    assert quickstart.parse_args(["--seconds", "0.5"]).seconds == 0.5


def test_a_failed_run_points_at_its_log_only_if_one_was_written(tmp_path, monkeypatch):
    """Issue 34 row 22: a pre-flight error (exit 2, no log file) was followed by "its output is above and in
    logs/RUN.txt", a file that does not exist."""
    repo = tmp_path / "repo"
    fake_trainer(
        repo, "import sys\nprint('error: MAX_WALLCLOCK_SECONDS=-5.0 must be >= 0.', file=sys.stderr)\nsys.exit(2)\n"
    )
    monkeypatch.setattr(quickstart, "REPO_ROOT", repo)
    machine(monkeypatch, 2, 0.0)
    with pytest.raises(SystemExit) as exit_:
        quickstart.train(tmp_path, tmp_path / "t.model", 512, 5.0, "run")
    assert str(exit_.value) == "quickstart: train_gpt.py failed (exit code 2); its output is above"
    (repo / "logs").mkdir()
    (repo / "logs" / "run.txt").write_text("a log\n")
    with pytest.raises(SystemExit) as exit_:
        quickstart.train(tmp_path, tmp_path / "t.model", 512, 5.0, "run")
    assert str(exit_.value).endswith("its output is above and in logs/run.txt")
