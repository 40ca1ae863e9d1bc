"""Issue 50, "Low, elsewhere": the docstring's CPU smoke command sets its thread count (a).

CPU only, no network; each test takes well under a second. Run: python3 -m pytest -q tests/test_fresh_round6.py
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "data"))

import train_gpt  # noqa: E402

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
