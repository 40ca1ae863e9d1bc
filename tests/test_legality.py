"""The evaluation is legal, proven by tests that can fail (issues 21 and 25): scripts/check_legality.py's conditions on
every scoring path (the round trip, sliding windows, sliding windows with score-first TTT) in its two geometries with
1 and 2 processes, and copies of train_gpt.py broken the way a careless TTT change would break them, each of which
the check must fail, naming the condition it violates.

Run: python3 -m pytest -q tests/test_legality.py
CPU only: tiny models, gloo for 2 processes; about 95 s of CPU time, 2m45 wall on 2 cores that other work shared
(load 6). The check's own run (the fixture, 1 and 2 processes) is a third of it, the five broken copies half.

When train_gpt.py changes, a mutation whose snippet no longer occurs exactly once fails loudly: re-anchor it in
MUTATIONS below, the one place that knows train_gpt.py's source text.
"""

import dataclasses
import math
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


@dataclasses.dataclass
class Mutation:
    name: str
    what: str
    edits: list[tuple[str, str]]  # (old, new): each old snippet must occur exactly once in train_gpt.py
    geometry: str  # the check runs on this geometry (1 process) ...
    fails: str  # ... and every line it fails starts with "FAIL " + this


BEST_OF_TWO = """def score_with_ttt(run, model, observe=None):
    import copy

    plain = score_windows(copy.deepcopy(model), run.val, run.ctx, run.args.eval_stride)
    return min(observed_ttt(run, model, observe), plain, key=lambda sums: float(sums[0]))

def observed_ttt("""
MIN_OF_TWO = """SCORED = {}

def lower_of_sliding_and(kind, sums):
    SCORED[kind] = sums
    return min(sums, SCORED["sliding_window"], key=lambda s: float(s[0])) if kind == "ttt" else sums

def score_artifact("""
TRAIN_FIRST = """for c in range(chunks):
        if c < chunks - 1:
            train_on_chunk(run, model, sgd, c * size, min((c + 1) * size, total), args.ttt_lr)
"""
MUTATIONS = [
    Mutation(
        "window_by_last_prediction",
        "a window joins the TTT chunk of its last scored prediction, not its first: scored after training on it",
        [("starts + T - (stride or T)", "starts + T - 1")],
        "ragged",
        "causal_score_before_update ttt geometry:ragged",
    ),
    Mutation(
        "first_boundary_rows_shifted",
        "chunk 0's training rows start a token late: chunk 1's first target is trained on before it is scored",
        [("run.val.tokens[begin + T * mine", "run.val.tokens[begin + (begin == 0) + T * mine")],
        "aligned",
        "causal_score_before_update ttt geometry:aligned",
    ),
    Mutation(
        "best_of_two_passes",
        "the TTT pass observed, a plain sliding pass on a deep copy not, and the lower one returned",
        [("def score_with_ttt(", BEST_OF_TWO)],
        "aligned",
        "reported_is_observed ttt geometry:aligned",
    ),
    Mutation(
        "min_of_sliding_and_ttt",
        "score_artifact reports min(sliding, ttt) on the ttt line",
        [
            ("def score_artifact(", MIN_OF_TWO),
            (
                "loss_and_bpb(score(*inputs, observe=observe and observe(kind)))",
                "loss_and_bpb(lower_of_sliding_and(kind, score(*inputs, observe=observe and observe(kind))))",
            ),
        ],
        "aligned",
        "reported_is_observed ttt geometry:aligned",
    ),
    Mutation(
        "train_before_score",
        "TTT trains on each chunk before it scores it (and again after)",
        [("for c in range(chunks):\n", TRAIN_FIRST)],
        "aligned",
        "causal_score_before_update ttt geometry:aligned",
    ),
]
CONDITIONS = ("causal_score_before_update", "single_pass", "normalized", "reported_is_observed")


def clean_env(**settings) -> dict[str, str]:
    """This process's environment without our variables, plus two layers (the default nine take far longer and
    check nothing more: every layer sees only earlier positions), one TTT step a chunk (three check nothing more
    either) and `settings`."""
    ours = {k: v for k, v in os.environ.items() if k not in OUR_NAMES} | {"NUM_LAYERS": "2", "TTT_EPOCHS": "1"}
    return ours | {k: str(v) for k, v in settings.items()}


def mutated_copy(mutation: Mutation, folder: Path) -> Path:
    source = (ROOT / "train_gpt.py").read_text(encoding="utf-8")
    for old, new in mutation.edits:
        assert source.count(old) == 1, f"{mutation.name}: {old!r} occurs {source.count(old)} times: re-anchor it"
        source = source.replace(old, new)
    path = folder / "train_gpt.py"
    path.write_text(source, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def observed() -> dict[int, dict]:
    return {n: check_legality.run_workers(n, clean_env(TTT_LR=0.05)) for n in (1, 2)}


@pytest.mark.parametrize("processes", [1, 2])
@pytest.mark.parametrize("geometry", list(check_legality.GEOMETRIES))
@pytest.mark.parametrize("path", check_legality.PATHS)
def test_every_scoring_path_meets_every_condition(observed, path, geometry, processes):
    results = check_legality.conditions(observed[processes][geometry], path)
    assert set(results) == set(CONDITIONS) | ({"ttt_adapts"} if path == "ttt" else set())
    for name, (holds, evidence) in results.items():
        assert holds, f"{name} {path} {geometry} with {processes} processes: {evidence}"


def test_the_geometries_and_the_probes_cover_what_matters():
    """One geometry whose stride divides window and chunk, one where it divides neither and the chunk is no multiple
    of the window; both with a ragged last chunk. Probes on both sides of every chunk boundary, at every chunk's
    last trained target, in the last chunk, and a few seeded others."""
    aligned, ragged = check_legality.GEOMETRIES["aligned"], check_legality.GEOMETRIES["ragged"]
    assert aligned.window % aligned.stride == 0 and aligned.chunk % aligned.stride == 0
    assert ragged.window % ragged.stride and ragged.chunk % ragged.stride and ragged.chunk % ragged.window
    for geometry in (aligned, ragged):
        total, size = geometry.tokens - 1, geometry.chunk
        assert total % size != 0  # a ragged last chunk
        probes = set(check_legality.probes(geometry))
        chunks = -(-total // size)
        for c in range(1, chunks):
            assert {c * size - 1, c * size, c * size + 1} <= probes
        for c in range(chunks - 1):
            assert c * size + size // geometry.window * geometry.window in probes
        assert max(probes) > (chunks - 1) * size + 1  # a target of the last chunk (its predictions' targets)
        assert len(probes) >= 3 * (chunks - 1) + check_legality.INTERIOR_PROBES + 1


def test_ttt_adapts_and_one_and_two_processes_report_the_same(observed):
    """TTT changes the score (else causality would be checked on a model that never trained), and 1 and 2 processes
    report the same score up to rounding (2 ranks sum two half-means where 1 sums all, and TTT carries that on)."""
    for geometry in check_legality.GEOMETRIES:
        one, two = (check_legality.reported(observed[n][geometry]["original"][1]) for n in (1, 2))
        assert abs(one["ttt"][0][0] - one["sliding_window"][0][0]) > 1e-3
        for path in check_legality.PATHS:
            assert one[path][0] == pytest.approx(two[path][0], rel=1e-5), (geometry, path)


def test_bits_per_byte_accounting_is_the_same_on_every_path(observed):
    """Every path scores every target once, so its tokens and bytes are the plain evaluation's: the reported
    val_loss / val_bpb (= ln 2 * bytes / tokens) is the same on all three, in both geometries (strides that do and
    do not divide the window, ragged last chunks), with 1 and 2 processes."""
    for processes, results in observed.items():
        for geometry, result in results.items():
            lines = check_legality.reported(result["original"][1])
            ratios = {path: lines[path][0][0] / lines[path][0][1] for path in check_legality.PATHS}
            expected = math.log(2.0) * float(result["target_bytes"].sum()) / (result["tokens"].numel() - 1)
            for path, ratio in ratios.items():
                assert ratio == pytest.approx(expected, rel=1e-6), (processes, geometry, path)


@pytest.mark.parametrize("window,stride,chunk,tokens", [(32, 8, 64, 200), (24, 7, 50, 190), (16, 16, 40, 123)])
def test_every_target_is_scored_once_with_the_same_bytes_on_every_path(window, stride, chunk, tokens):
    """More shapes than the check's two, in this process: a stride that divides the window, one that does not, one
    equal to it; splits that are not whole windows; ragged last chunks."""
    geometry = check_legality.Geometry(window, stride, chunk, tokens)
    args = check_legality.tiny_args(train_gpt, clean_env(TTT_LR=0.05), geometry)
    ctx = train_gpt.DistContext(0, 1, 0, torch.device("cpu"))
    token_ids = torch.randint(0, args.vocab_size, (tokens,), generator=torch.Generator().manual_seed(5))
    run = check_legality.make_run(
        train_gpt, args, ctx, check_legality.tiny_val(train_gpt, args, ctx, token_ids), train_gpt.Logger(None)
    )
    all_bytes = int(run.val.token_bytes[1:].sum())
    model = check_legality.tiny_model(train_gpt, args, ctx.device)
    scores = {
        "roundtrip": lambda observe: train_gpt.score_windows(model, run.val, ctx, 0, None, observe),
        "sliding_window": lambda observe: train_gpt.score_windows(model, run.val, ctx, stride, None, observe),
        "ttt": lambda observe: train_gpt.score_with_ttt(run, model, observe),
    }
    for path, score in scores.items():
        seen = []
        sums = score(lambda positions, hidden: seen.extend(positions.tolist()))
        assert sorted(seen) == list(range(1, tokens)), path
        assert sums[1:].tolist() == [tokens - 1, all_bytes], path


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_the_check_fails_each_broken_copy_of_train_gpt_naming_the_condition(mutation, tmp_path):
    """Each variant, a small patch to a copy of train_gpt.py, fails the check on that condition and no other. The
    last runs through the command line, as a user would: exit 1."""
    script = mutated_copy(mutation, tmp_path)
    if mutation is MUTATIONS[-1]:
        command = [sys.executable, str(ROOT / "scripts" / "check_legality.py"), "--script", str(script)]
        command += ["--processes", "1", "--geometries", mutation.geometry]
        result = subprocess.run(command, env=clean_env(TTT_LR=0.05), capture_output=True, text=True, timeout=600)
        assert result.returncode == 1, result.stdout + result.stderr
        lines = result.stdout.splitlines()
    else:
        lines, _ = check_legality.check(clean_env(TTT_LR=0.05), script, (1,), geometries=[mutation.geometry])
    failed = [line for line in lines if line.startswith("FAIL")]
    assert failed and lines[-1] == f"NOT LEGAL: {len(failed)} condition(s) failed", "\n".join(lines)
    assert all(line.startswith(f"FAIL {mutation.fails} processes:1: ") for line in failed), "\n".join(failed)


@pytest.fixture(scope="module")
def broken() -> dict:
    """The check's own --broken TTT (trains on each chunk before it scores it), one process, the aligned geometry."""
    return check_legality.run_workers(1, clean_env(TTT_LR=0.05), broken=True, geometries=["aligned"])["aligned"]


def test_a_leak_fails_the_causal_condition_even_within_the_bf16_tolerance(broken):
    """On CUDA the causal condition allows each log-probability to move by BF16_LOGP_TOLERANCE; training on a token
    before scoring it moves them more than ten times that, so the GPU check still fails it."""
    holds, evidence = check_legality.conditions(broken, "ttt")["causal_score_before_update"]
    assert not holds and "moved the distribution of target" in evidence
    assert max(diff for _, _, diff in check_legality.causal_differences(broken, "ttt")) > (
        10 * check_legality.BF16_LOGP_TOLERANCE
    )
    holds, evidence = check_legality.conditions(dict(broken, device="cuda"), "ttt")["causal_score_before_update"]
    assert not holds and "within 0.0312 (bf16)" in evidence
    for path in ("roundtrip", "sliding_window"):  # those paths do not train: the broken TTT leaves them legal
        assert check_legality.conditions(broken, path)["causal_score_before_update"][0]


def test_the_cuda_tolerance_passes_a_rounding_step_and_fails_more(observed):
    """The tolerance logic of the GPU path, on CPU results labelled CUDA: each changed distribution moved by half
    the tolerance passes the causal condition; one moved by twice the tolerance fails it."""
    result = observed[1]["aligned"]
    for scale, holds in ((0.5, True), (2.0, False)):
        probes = {}
        for probe, record in result["probes"].items():
            positions, logp = record["ttt"]
            moved = logp + scale * check_legality.BF16_LOGP_TOLERANCE * torch.where(positions[:, None] % 2 == 0, 1, -1)
            probes[probe] = dict(record, ttt=(positions, moved))
        cuda = dict(result, device="cuda", probes=probes)
        assert check_legality.conditions(cuda, "ttt")["causal_score_before_update"][0] is holds
        assert not check_legality.conditions(dict(cuda, device="cpu"), "ttt")["causal_score_before_update"][0]


def test_one_bf16_rounding_step_of_the_hidden_state_stays_within_the_tolerance():
    """The docstring's bound on the tiny model: its logits are under 4 in size, and moving every element of a bf16
    hidden state by one rounding step moves no log-probability by BF16_LOGP_TOLERANCE."""
    geometry = check_legality.GEOMETRIES["aligned"]
    args = check_legality.tiny_args(train_gpt, clean_env(), geometry)
    model = check_legality.tiny_model(train_gpt, args, torch.device("cpu"))
    tokens = check_legality.tiny_tokens(geometry)[None, : geometry.window]
    with torch.no_grad():
        hidden = model.hidden(tokens)[0].to(torch.bfloat16)  # (T, C)
        logits = hidden.float() @ model.tok_emb.weight.T
        assert float(logits.abs().max()) < 4
        up = (hidden.view(torch.int16) + 1).view(torch.bfloat16)  # one step away from zero, every element
        every_id = torch.arange(args.vocab_size).repeat(len(hidden))

        def logp(h):
            return -model.loss(h.float().repeat_interleave(args.vocab_size, 0), every_id, per_token=True)

        assert float((logp(up) - logp(hidden)).abs().max()) < check_legality.BF16_LOGP_TOLERANCE


def test_a_ttt_that_changes_nothing_fails_unless_allowed():
    """TTT_LR=0: the TTT path scores as the sliding windows do, so causality passes for nothing: the check says so."""
    result = check_legality.run_workers(1, clean_env(TTT_LR=0), geometries=["aligned"])["aligned"]
    holds, evidence = check_legality.conditions(result, "ttt")["ttt_adapts"]
    assert not holds and evidence.startswith("0 of 224 distributions differ") and "TTT changed nothing" in evidence
    holds, evidence = check_legality.conditions(result, "ttt", allow_no_adaptation=True)["ttt_adapts"]
    assert holds and "allowed by --allow-no-adaptation" in evidence


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the GPU path needs CUDA")
def test_the_gpu_path_is_legal_and_fails_the_broken_ttt():
    """The docstring's GPU commands: the Triton loss, bf16 autocast, compiled scoring; legal, and --broken fails."""
    env = clean_env(TTT_LR=0.05, LOSS_IMPL="triton")
    lines, failed = check_legality.check(env, processes=(1,), device="cuda")
    assert failed == 0, "\n".join(lines)
    lines, failed = check_legality.check(env, processes=(1,), device="cuda", broken=True)
    assert failed and all(line.startswith("FAIL causal_score_before_update ttt") for line in lines if "FAIL" in line)


def test_ttt_is_validated_and_needs_whole_sequences_in_a_chunk():
    shape = {"TRAIN_SEQ_LEN": "32", "TRAIN_BATCH_TOKENS": "256", "VAL_BATCH_SIZE": "256", "TTT_CHUNK_TOKENS": "16"}
    with pytest.raises(train_gpt.ConfigError, match="TTT_CHUNK_TOKENS"):
        train_gpt.Hyperparameters.from_env(shape | {"TTT_ENABLED": "1"})
    with pytest.raises(train_gpt.ConfigError, match="TTT_MOMENTUM=1.0 must be in"):
        train_gpt.Hyperparameters.from_env({"TTT_MOMENTUM": "1"})
    assert train_gpt.Hyperparameters.from_env({"RECIPE": "record"}).ttt_enabled
    assert not train_gpt.Hyperparameters.from_env({"RECIPE": "record_2026_04_05"}).ttt_enabled


def test_the_last_chunk_is_scored_but_never_trained_on(monkeypatch):
    """After the last chunk's windows no step runs: nothing learns from the split's last tokens."""
    geometry = check_legality.GEOMETRIES["aligned"]
    args = check_legality.tiny_args(train_gpt, clean_env(TTT_LR=0.05), geometry)
    ctx = train_gpt.DistContext(0, 1, 0, torch.device("cpu"))
    val = check_legality.tiny_val(train_gpt, args, ctx, check_legality.tiny_tokens(geometry))
    run = check_legality.make_run(train_gpt, args, ctx, val, train_gpt.Logger(None))
    trained = []
    monkeypatch.setattr(
        train_gpt, "train_on_chunk", lambda run, model, sgd, begin, end, lr: trained.append((begin, end))
    )
    train_gpt.score_with_ttt(run, check_legality.tiny_model(train_gpt, args, ctx.device))
    size = args.ttt_chunk_tokens
    assert trained == [(c * size, (c + 1) * size) for c in range((geometry.tokens - 2) // size)]
