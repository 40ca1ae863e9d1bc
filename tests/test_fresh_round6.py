"""Issue 50, "Low, elsewhere": the docstring's CPU smoke command sets its thread count (a); a hub URL without a
scheme (--endpoint, HF_ENDPOINT) is refused before any request (c); quickstart.sh says before pip starts that the
default index's torch is the CUDA build, and how to avoid it (d). Finding b's tests are in
tests/test_data_challenge.py, beside the other errors of --val-docs; e's (the README's skip count) are in
tests/test_readme.py.

CPU only, no network; each test takes well under a second. Run: python3 -m pytest -q tests/test_fresh_round6.py
"""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "data"))

import cached_challenge_fineweb  # noqa: E402
import train_gpt  # noqa: E402
from test_data_quickstart import REQUIREMENTS, run_quickstart_sh  # noqa: E402

README = ROOT / "README.md"


def smoke_command() -> str:
    """The docstring's CPU smoke command, its lines joined."""
    block = train_gpt.__doc__.split("# CPU smoke run")[1].split("\n", 1)[1].split("\n  #")[0]
    return " ".join(block.replace("\\", " ").split())


def test_a_the_docstring_smoke_command_runs_on_one_thread():
    """It left OMP_NUM_THREADS unset: 220 s on 2 busy cores (load 2-4), 44 s with one thread, where the README
    promises under a minute; the README says why it sets one thread."""
    assert smoke_command().startswith("OMP_NUM_THREADS=1 "), smoke_command()
    passage = " ".join(README.read_text(encoding="utf-8").split("has a smoke command")[1].split("\n\n")[0].split())
    assert "in under a minute on 2 cores" in passage and "It sets `OMP_NUM_THREADS=1`" in passage


@pytest.mark.parametrize(
    "argv, hf_endpoint, message",
    [
        (
            ["--endpoint", "example.org"],
            None,
            "--endpoint example.org is not a hub URL: give the scheme and host, e.g. ",
        ),
        (["--endpoint", "example.org"], "https://huggingface.co", "e.g. --endpoint https://example.org"),
        (
            [],
            "hf-mirror.com",
            "HF_ENDPOINT=hf-mirror.com is not a hub URL: give the scheme and host, e.g. HF_ENDPOINT=",
        ),
    ],
)
def test_c_an_endpoint_without_a_scheme_is_refused_before_any_request(
    argv, hf_endpoint, message, tmp_path, monkeypatch, capsys
):
    """--endpoint example.org was reported as a network failure (cannot reach the hub; check the network)."""
    if hf_endpoint is None:
        monkeypatch.delenv("HF_ENDPOINT", raising=False)
    else:
        monkeypatch.setenv("HF_ENDPOINT", hf_endpoint)
    with pytest.raises(SystemExit) as exit_info:
        cached_challenge_fineweb.main([*argv, "--train-shards", "0", "--data-dir", str(tmp_path)])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert message in error and "network" not in error, error
    assert not any(tmp_path.iterdir()), "nothing is fetched or made"
    assert cached_challenge_fineweb.bad_endpoint("http://127.0.0.1:8000", "--endpoint ") is None


@pytest.mark.parametrize("fault", ["the CPU index refuses", "pip fails on the CPU index", None])
def test_d_the_fallback_to_the_default_index_says_first_that_it_brings_the_cuda_build(tmp_path, fault):
    """Where the CPU build could not be installed, requirements.txt took the CUDA build of torch (gigabytes) from the
    default index with no word but 'installing torch from the default index'."""
    result, calls = run_quickstart_sh(
        tmp_path,
        torch_installed=False,
        cpu_index="refuses" if fault == "the CPU index refuses" else "answers",
        cpu_pip_fails=fault == "pip fails on the CPU index",
    )
    assert result.returncode == 0 and calls[-2:] == [REQUIREMENTS, "data/quickstart.py"], result.stderr
    warning = "quickstart: warning: torch from the default index is, on Linux, the CUDA build: about 15 nvidia-*"
    assert (warning in result.stdout) == (fault is not None), result.stdout
    if fault:
        assert "stop it (Ctrl-C), set QUICKSTART_TORCH_INDEX to a PyTorch CPU index that answers" in result.stdout
