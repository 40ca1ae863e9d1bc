"""The evaluation is legal, proven by tests that can fail (issue 21): scripts/check_legality.py's four conditions on
every scoring path (the round trip, sliding windows, sliding windows with score-first TTT) with 1 and 2 processes,
and a deliberately broken TTT (it trains on each chunk before scoring it) that the causality check must catch.

Run: python3 -m pytest -q tests/test_legality.py   (CPU only; about 40 s on 2 cores: tiny models, gloo for 2 processes)
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import check_legality  # noqa: E402
import train_gpt  # noqa: E402
from helpers import OUR_NAMES  # noqa: E402

CONDITIONS = ("causal_score_before_update", "single_pass", "normalized")


def clean_env(**settings) -> dict[str, str]:
    """This process's environment without our variables, plus three layers (the default nine take three times as
    long and check nothing more: every layer sees only earlier positions) and `settings`."""
    ours = {k: v for k, v in os.environ.items() if k not in OUR_NAMES} | {"NUM_LAYERS": "3"}
    return ours | {k: str(v) for k, v in settings.items()}


@pytest.fixture(scope="module")
def observed() -> dict[int, dict]:
    return {n: check_legality.run_workers(n, False, clean_env(TTT_LR=0.05)) for n in (1, 2)}


@pytest.mark.parametrize("processes", [1, 2])
@pytest.mark.parametrize("path", check_legality.PATHS)
def test_every_scoring_path_meets_the_four_conditions(observed, path, processes):
    results = check_legality.conditions(observed[processes], path)
    assert set(results) == set(CONDITIONS)
    for name, (holds, evidence) in results.items():
        assert holds, f"{name} {path} with {processes} processes: {evidence}"


def test_the_probes_straddle_a_chunk_boundary_and_reach_the_last_chunk():
    args = check_legality.tiny_args(clean_env())
    size, probes = args.ttt_chunk_tokens, check_legality.probes(args)
    chunk = [(t - 1) // size for t in probes]  # target t is scored by the prediction at t - 1
    assert chunk[1] + 1 == chunk[2] and (probes[2] - 1) % size == 0  # the last target of a chunk, then the first
    assert (probes[0] - 1) % size not in (0, size - 1)  # inside a chunk
    assert chunk[3] == (check_legality.TOKENS - 2) // size > chunk[2]  # in the last chunk (the last prediction's)


def test_ttt_changes_the_score_and_one_and_two_processes_agree(observed):
    """TTT does adapt (else the causality check would pass for nothing), and equally with 1 and 2 processes."""
    sums = {n: observed[n]["results"][("ttt", None)][1] for n in (1, 2)}
    sliding = observed[1]["results"][("sliding_window", None)][1]
    assert abs(sums[1][0] - sliding[0]) > 1.0  # the loss sum moved by more than a nat over 487 tokens
    # to rounding: 2 ranks sum two half-means where 1 sums all, and 6 chunks of SGD at lr 0.05 carry that on
    assert abs(sums[1][0] - sums[2][0]) < 1e-5 * abs(sums[1][0]) and sums[1][1:] == sums[2][1:]


def test_a_ttt_that_trains_on_a_chunk_before_scoring_it_fails_the_causality_check_and_only_it():
    """The command on the broken variant: exit 1, and of its nine lines only TTT's causality fails (it still scores
    every token once, normalized: those checks alone would pass it)."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "check_legality.py"), "--processes", "1", "--broken"],
        env=clean_env(TTT_LR=0.05),
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = result.stdout.splitlines()
    assert result.returncode == 1 and lines[-1] == "NOT LEGAL: 1 condition(s) failed", result.stderr
    [failed] = [line for line in lines if line.startswith("FAIL")]
    assert (
        failed.startswith("FAIL causal_score_before_update ttt processes:1: ")
        and "changed the distribution of target" in failed
    )
    assert sum(line.startswith("ok   ") for line in lines) == 3 * len(check_legality.PATHS) - 1


def test_ttt_is_validated_and_needs_whole_sequences_in_a_chunk():
    with pytest.raises(train_gpt.ConfigError, match="TTT_CHUNK_TOKENS=16 must be at least TRAIN_SEQ_LEN=32"):
        train_gpt.Hyperparameters.from_env(
            {"TRAIN_SEQ_LEN": "32", "TRAIN_BATCH_TOKENS": "256", "VAL_BATCH_SIZE": "256", "TTT_CHUNK_TOKENS": "16"}
        )
    with pytest.raises(train_gpt.ConfigError, match="TTT_MOMENTUM=1.0 must be in"):
        train_gpt.Hyperparameters.from_env({"TTT_MOMENTUM": "1"})
    assert train_gpt.Hyperparameters.from_env({"RECIPE": "record"}).ttt_enabled
    assert not train_gpt.Hyperparameters.from_env({"RECIPE": "record_2026_04_05"}).ttt_enabled


def test_the_last_chunk_is_scored_but_never_trained_on(monkeypatch):
    """After the last chunk's windows no step runs: nothing learns from the split's last tokens."""
    args = check_legality.tiny_args(clean_env(TTT_LR=0.05))
    ctx = train_gpt.DistContext(0, 1, 0, torch.device("cpu"))
    tokens = torch.randint(0, args.vocab_size, (check_legality.TOKENS,), generator=torch.Generator().manual_seed(2))
    run = train_gpt.Run(
        args, ctx, train_gpt.Logger(None), check_legality.tiny_val(args, ctx, tokens), [], "torch", "", "", None
    )
    trained = []
    monkeypatch.setattr(
        train_gpt, "train_on_chunk", lambda run, model, sgd, begin, end, lr: trained.append((begin, end))
    )
    train_gpt.score_with_ttt(run, check_legality.tiny_model(args))
    size = args.ttt_chunk_tokens
    assert trained == [(c * size, (c + 1) * size) for c in range((check_legality.TOKENS - 1) // size)]
