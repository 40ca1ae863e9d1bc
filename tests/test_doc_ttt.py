"""TTT_MODE=doc in our record script (issue 56): each validation document adapted on its own by batched LoRA
adapters, scored a chunk at a time before the adapters train on it, and PHASED_TTT_*'s plain SGD on the documents
already scored. On the CPU: every target scored once with its bytes; the leak probe (a document's scores do not move
when another document changes); the chunk probe (a token of the next chunk cannot move the current chunk's scores);
the phases train only on scored documents; and scripts/check_legality.py fails copies of the script broken the ways
the issue names (train before score, adapters shared across documents, a document's own future, a phase on documents
not yet scored, the best of two passes) on the condition each breaks, and passes the legal ones (the script as it is,
and adapters reset at every chunk). On CUDA: the compiled forward scores as the eager one.

    python3 -m pytest -q tests/test_doc_ttt.py

The legality checks run on a split of 113 tokens (three documents), each copy with 1 process and the script as it is
with 2: 5-9 s each on 2 shared cores, ~50 s for the file.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import check_legality  # noqa: E402
from helpers import FRONTIER, load_frontier, patched_copy  # noqa: E402

fg = load_frontier()
OURS = {name.upper() for name in fg.Hyperparameters.__dataclass_fields__}
TINY = dict(VOCAB_SIZE="64", MODEL_DIM="32", NUM_HEADS="2", NUM_KV_HEADS="1", NUM_LAYERS="2", TRAIN_SEQ_LEN="32")
TINY |= dict(TRAIN_BATCH_TOKENS=str(8 * 32), VAL_BATCH_SIZE=str(8 * 32 * 4), COMPILE="0")
DOC = dict(TTT_ENABLED="1", TTT_MODE="doc", TTT_CHUNK_SIZE="8", TTT_LORA_LR="0.01")
CPU = fg.DistContext(0, 1, 0, torch.device("cpu"))
STARTS = (0, 30, 31, 100, 108, 180, 250, 290)  # documents of 30, 1, 69, 8, 72, 70, 40 and 10 predictions


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny tensors: one thread is faster, and other sessions share the machine's two cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def split() -> torch.Tensor:
    """301 random tokens (300 targets), a BOS at each of STARTS."""
    tokens = torch.randint(2, 64, (301,), generator=torch.Generator().manual_seed(0))
    tokens[list(STARTS)] = fg.BOS_ID
    return tokens


def tiny_run(tokens: torch.Tensor, device=CPU, **settings):
    """A Run on `tokens` with random bytes per target (as a sidecar's: tied to the position, not the token)."""
    args = fg.Hyperparameters.from_env(TINY | DOC | {k: str(v) for k, v in settings.items()})
    token_bytes = torch.randint(0, 4, tokens.shape, generator=torch.Generator().manual_seed(1), dtype=torch.int32)
    val = fg.ValData(tokens, token_bytes.to(device.device), {"val_bytes": "sidecar"}, args.val_seq_len, 4)
    return fg.Run(args, device, fg.Logger(None), val, [], ("torch", "test"), ("dense", "test"), "", None)


def tiny_model(run):
    """A GPT whose predictions depend on every earlier token (random weights, the zero-initialised ones too)."""
    return check_legality.tiny_model(fg, run.args, run.ctx.device)


def observed_ttt(tokens: torch.Tensor, **settings) -> tuple[dict[int, torch.Tensor], torch.Tensor]:
    """({target: its log-probabilities as TTT_MODE=doc scored it}, the (loss sum, tokens, bytes))."""
    run = tiny_run(tokens, **settings)
    rows = {}

    def observe(positions, logp):
        for position, row in zip(positions.tolist(), logp):
            assert position not in rows, f"target {position} scored twice"
            rows[position] = row.clone()

    sums = fg.score_docs_with_ttt(run, tiny_model(run), observe)
    return rows, sums


# ---- settings, documents, phases, batches ----


@pytest.mark.parametrize(
    "settings,says",
    [
        (dict(PHASED_TTT_PREFIX_DOCS="2500", TTT_LORA_RANK="80"), "set TTT_MODE=doc"),
        (dict(TTT_MODE="doc"), "TTT_MODE=doc does nothing with TTT_ENABLED=0"),
        (dict(TTT_MODE="doc", TTT_ENABLED="1", TTT_CHUNK_SIZE="64"), "TTT_CHUNK_SIZE=64 must be at most"),
        (dict(TTT_MODE="dokument"), "TTT_MODE='dokument' must be one of stream, doc"),
    ],
)
def test_settings_that_cannot_work_are_refused_before_any_work(settings, says):
    with pytest.raises(fg.ConfigError, match=says):
        fg.Hyperparameters.from_env(TINY | settings)


def test_documents_phases_and_batches():
    """A BOS starts a document and so does the split; a document's last target is the next one's BOS, so every
    target is one document's. Phases cut the first PHASED_TTT_PREFIX_DOCS documents in stream order (the records'
    cut); batches group documents by length, the longest first, except one a batch: stream order."""
    tokens = torch.tensor([5, 6, 1, 7, 1, 1, 8, 9, 10, 1])  # a piece without BOS, then documents of 2, 1, 4
    assert fg.document_spans(tokens).tolist() == [[0, 2], [2, 2], [4, 1], [5, 4]]
    assert sum(n for _, n in fg.document_spans(split()).tolist()) == 300
    args = fg.Hyperparameters.from_env(TINY | DOC | dict(PHASED_TTT_PREFIX_DOCS="5", PHASED_TTT_NUM_PHASES="2"))
    assert fg.doc_phases(8, args) == [range(0, 2), range(2, 5), range(5, 8)]
    assert fg.doc_phases(3, args) == [range(0, 1), range(1, 3)]  # a prefix of every document: no rest
    assert check_legality.doc_phases(8, 5, 2) == [0, 0, 1, 1, 1, 2, 2, 2]  # the check's own count agrees
    lengths = [30, 1, 69, 8, 72]
    assert fg.doc_batches(lengths, range(5), 2) == [[4, 2], [0, 3], [1]]
    assert fg.doc_batches(lengths, range(1, 5), 1) == [[1], [2], [3], [4]]


# ---- scoring: once each, its bytes, isolated, score before update ----


@pytest.mark.parametrize("batch,phases", [(1, 0), (3, 0), (3, 3)])
def test_every_target_is_scored_once_with_its_bytes(batch, phases):
    """Every target of the split once, each as its document's (a 1-token document too), the bytes the position's,
    and the loss the observed distributions'. Without phases the batch size changes nothing but rounding."""
    tokens = split()
    settings = dict(TTT_BATCH_SIZE=batch, PHASED_TTT_PREFIX_DOCS=phases, PHASED_TTT_NUM_PHASES=2)
    rows, sums = observed_ttt(tokens, **settings)
    run = tiny_run(tokens)
    assert sorted(rows) == list(range(1, 301))
    assert sums[1:].tolist() == [300, int(run.val.token_bytes[1:].sum())]
    observed_loss = -sum(float(row[tokens[p]]) for p, row in rows.items())
    assert observed_loss == pytest.approx(float(sums[0]), rel=1e-6)
    if not phases:
        _, one_by_one = observed_ttt(tokens, TTT_BATCH_SIZE=1)
        assert float(sums[0]) == pytest.approx(float(one_by_one[0]), rel=1e-6)


def document_of(position: int) -> int:
    """The document (index into STARTS) whose targets hold `position`."""
    return sum(start < position for start in STARTS) - 1


@pytest.mark.parametrize("changed", [0, 2, 4, 6])
def test_a_documents_scores_do_not_move_when_another_document_changes(changed):
    """The leak probe: one document's tokens (not its BOS) changed, four documents a batch (so it shares batches
    with others); every other document's distributions stay the same, bit for bit. Its own move, and adaptation
    moves them at all (TTT_LORA_LR=0 scores otherwise): the probe can fail."""
    tokens = split()
    rows, _ = observed_ttt(tokens, TTT_BATCH_SIZE=4)
    start, end = STARTS[changed], (STARTS + (300,))[changed + 1]
    altered = tokens.clone()
    altered[start + 1 : end] = torch.randint(2, 64, (end - start - 1,), generator=torch.Generator().manual_seed(9))
    moved, _ = observed_ttt(altered, TTT_BATCH_SIZE=4)
    frozen, _ = observed_ttt(tokens, TTT_BATCH_SIZE=4, TTT_LORA_LR=0)
    for position, row in rows.items():
        if document_of(position) != changed:
            assert torch.equal(moved[position], row), f"target {position}: moved by document {changed}"
    assert any(not torch.equal(moved[p], rows[p]) for p in rows if document_of(p) == changed)
    assert sum(not torch.equal(frozen[p], row) for p, row in rows.items()) > 100


@pytest.mark.parametrize("batch", [1, 4])
def test_a_chunk_is_scored_before_its_update(batch):
    """A probe token at the first target of chunk 3 of a document (8 predictions a chunk): every distribution up to
    it, its own included (it is the next chunk's), stays the same bit for bit; after it, the adapters trained on it
    move the document's later distributions: the probe reaches them."""
    tokens = split()
    probe = STARTS[2] + 3 * 8 + 1  # document 2, the first target of its chunk 3
    rows, _ = observed_ttt(tokens, TTT_BATCH_SIZE=batch)
    altered = tokens.clone()
    altered[probe] = 2 + (int(tokens[probe]) - 1) % 62  # another id, not a BOS
    moved, _ = observed_ttt(altered, TTT_BATCH_SIZE=batch)
    for position in range(STARTS[2] + 1, probe + 1):
        assert torch.equal(moved[position], rows[position]), f"target {position} moved by the token at {probe}"
    later = range(probe + 1, STARTS[3] + 1)
    assert sum(not torch.equal(moved[p], rows[p]) for p in later) == len(later)
    assert all(torch.equal(moved[p], row) for p, row in rows.items() if document_of(p) != 2)


def test_the_phases_train_only_on_documents_already_scored(monkeypatch):
    """Each phase's SGD (train_on_chunk) trains on predictions whose every target was scored before it began, and
    on every scored one, in chunks of GLOBAL_TTT_CHUNK_TOKENS of whole 32-token sequences. PHASED_TTT_PREFIX_DOCS=6
    in 3 phases ends them after documents 1, 3 and 5 (targets 31, 108 and 250): the first too short to train on."""
    tokens = split()
    scored, trained = set(), []
    original = fg.train_on_chunk

    def watched(run, model, sgd, begin, end, lr, epochs):
        assert set(range(1, end + 1)) <= scored, f"trained on predictions up to {end} before they were scored"
        trained.append((begin, end, max(scored)))
        return original(run, model, sgd, begin, end, lr, epochs)

    monkeypatch.setattr(fg, "train_on_chunk", watched)
    settings = dict(PHASED_TTT_PREFIX_DOCS=6, PHASED_TTT_NUM_PHASES=3, GLOBAL_TTT_CHUNK_TOKENS=64)
    run = tiny_run(tokens, TTT_BATCH_SIZE=3, **settings)
    fg.score_docs_with_ttt(run, tiny_model(run), lambda positions, logp: scored.update(positions.tolist()))
    assert trained == [(0, 64, 108), (64, 108, 108)] + [(b, min(b + 64, 250), 250) for b in range(0, 250, 64)]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the compiled forward needs CUDA")
def test_the_compiled_forward_scores_as_the_eager_one():
    """On CUDA the adapters' forward is compiled (dynamic shapes: the windows grow); bf16 autocast either way."""
    cuda = fg.DistContext(0, 1, 0, torch.device("cuda"))
    sums = {}
    for compile_ in ("0", "1"):
        run = tiny_run(split(), cuda, COMPILE=compile_, TTT_BATCH_SIZE=4, PHASED_TTT_PREFIX_DOCS=3)
        sums[compile_] = fg.score_docs_with_ttt(run, tiny_model(run)).cpu()
    assert sums["0"][1:].tolist() == sums["1"][1:].tolist()
    assert float(sums["1"][0]) == pytest.approx(float(sums["0"][0]), rel=2e-3)


# ---- scripts/check_legality.py on broken and legal copies ----

# The check's user geometry of these settings: a split of 113 tokens, three documents (24, 82 and 6 predictions),
# 8 predictions a chunk, a 16-token window. The phases put the first document in phase 1, the second in phase 2, the
# third after them.
SMALL = dict(TRAIN_SEQ_LEN="16", EVAL_STRIDE="8", TTT_CHUNK_TOKENS="32")
PHASES = dict(PHASED_TTT_PREFIX_DOCS="2", PHASED_TTT_NUM_PHASES="2")
STEP = """        if train.any():
            adam.zero_grad(set_to_none=True)
            (losses.mean(1) * train.to(ctx.device)).sum().backward()
            adam.step()
"""
FORWARD = """            with ctx.autocast():
                logp = doc.adapters.log_probs(doc.gpt, doc.hidden(x)[:, -C:])
            losses = -logp.gather(-1, y[..., None])[..., 0]
"""
# Legal: the chunk scored with the adapters trained on the chunk before it alone; then fresh ones train on it.
RESET_EACH_CHUNK = (
    """        if train.any():
            doc.adapters.reset()
            adam = torch.optim.AdamW(doc.adapters.parameters(), lr=args.ttt_lora_lr)
"""
    + FORWARD
    + """            (losses.mean(1) * train.to(ctx.device)).sum().backward()
            adam.step()
"""
)
SCORE = "        losses = -logp.gather(-1, y[..., None])[..., 0]  # (D, C)\n"
BEST_OF_TWO = """def score_docs_with_ttt(run, model, observe=None):
    import copy

    plain = score_windows(copy.deepcopy(model), run.val, run.ctx, run.args.eval_stride)
    return min(observed_doc_ttt(run, model, observe), plain, key=lambda sums: float(sums[0]))

def observed_doc_ttt("""
CAUSAL, ISOLATED, REPORTED = "causal_score_before_update", "documents_isolated", "reported_is_observed"
# name: (edits, settings, the conditions it fails on the ttt path; none: legal). The isolation runs batch two
# documents, the causal ones one: adapters shared by a batch, or carried to the next one in stream order, pass the
# causal probes and fail isolation. A phase's SGD on the next phase's first document reaches, with three documents,
# only a document of a later phase, which isolation allows: causality fails it. The best of two passes reports a
# plain pass's score in the isolation run too.
COPIES = {
    "train_before_score": (
        [(SCORE, SCORE + STEP.replace("train.any():", "train.any():  # broken: the step first") + FORWARD)],
        {},
        {CAUSAL},
    ),
    "adapters_shared_by_a_batch": (
        [
            ("start.repeat(docs, 1, 1)", "start[None].clone()"),
            ("torch.zeros(docs, d_out, rank)", "torch.zeros(1, d_out, rank)"),
        ],
        {},
        {ISOLATED},
    ),
    "adapters_carried_to_the_next_batch": ([("    doc.adapters.reset()\n", "")], {}, {ISOLATED}),
    "a_documents_own_next_token": (
        [("x = torch.where(inside, val.tokens[at], 0)", "x = torch.where(inside, val.tokens[at + 1], 0)")],
        {},
        {CAUSAL},
    ),
    "a_phase_on_the_next_documents": (
        [("end = int(spans[phase[-1]].sum())", "end = int(spans[phase[-1] + 1].sum())")],
        PHASES,
        {CAUSAL},
    ),
    "best_of_two_passes": ([("def score_docs_with_ttt(", BEST_OF_TWO)], {}, {REPORTED, ISOLATED}),
    "adapters_reset_at_every_chunk": ([(STEP, RESET_EACH_CHUNK)], {}, set()),
}


def check(script: Path, processes: int = 1, **settings) -> dict:
    """check_legality's conditions of `script` in TTT_MODE=doc on the SMALL geometry: {(condition, path): evidence}
    of those that fail; none may be unverifiable."""
    env = {k: v for k, v in os.environ.items() if k not in OURS}
    env |= dict(NUM_LAYERS="2", TTT_EPOCHS="1", TTT_LR="0.05", TTT_MODE="doc", TTT_LORA_LR="0.01") | SMALL | settings
    result = check_legality.run_workers(processes, env, script, geometries=["user"])["user"]
    failed = {}
    for path in check_legality.PATHS:
        for condition, (holds, evidence) in check_legality.conditions(result, path).items():
            assert holds is not None, f"{condition} {path} cannot be verified: {evidence}"
            if not holds:
                failed[(condition, path)] = evidence
    return failed


@pytest.mark.parametrize("name", list(COPIES))
def test_the_check_fails_each_broken_copy_on_its_condition_and_passes_the_legal_one(name, tmp_path):
    """Each broken copy fails the conditions named, on the ttt path, and no other; the legal one fails none."""
    edits, settings, conditions = COPIES[name]
    failed = check(patched_copy(edits, tmp_path, name, FRONTIER), **settings)
    assert set(failed) == {(condition, "ttt") for condition in conditions}, failed


def test_the_script_as_it_is_is_legal_with_phases_on_two_processes():
    """Two ranks, each its own documents' adapters (stepped alone: the check compares those steps by what each rank
    scores) and the phases' SGD together."""
    assert check(FRONTIER, processes=2, **PHASES) == {}


# ---- end to end ----


def test_a_run_scores_each_document_alone_and_estimates_its_eval_time_on_8_gpus(tiny_data, tmp_path):
    """As a user runs it: trained, then scored with TTT_MODE=doc in two phases, DOC_MASK=1 in training. The log says
    how many documents and phases, each phase's SGD, and the ttt line's eval time with its 8-GPU estimate (this
    run's time over 8, as the stream TTT's: the work divides among the ranks); the final line is the ttt path's."""
    from helpers import run_script, tiny_env

    settings = dict(TTT_CHUNK_SIZE=64, TTT_BATCH_SIZE=4, PHASED_TTT_PREFIX_DOCS=6, PHASED_TTT_NUM_PHASES=2)
    env = tiny_env(tiny_data, tmp_path, DOC_MASK=1, TTT_ENABLED=1, TTT_MODE="doc", **settings)
    run = run_script(env, tmp_path, script=FRONTIER)
    assert run.result.returncode == 0, run.result.stderr[-2000:]
    tokens = fg.load_data_shard(tiny_data.data_path / "fineweb_val_000000.bin").long()
    usable = (len(tokens) - 1) // 64 * 64  # whole TRAIN_SEQ_LEN windows, as the pre-flight trims the split
    documents = len(fg.document_spans(tokens[: usable + 1]))
    assert run.events("ttt_mode") == [
        dict(ttt_mode="doc", ttt_docs=str(documents), ttt_phases="2", ttt_batch_size="4", ttt_chunk_size="64")
    ]
    assert [e["ttt_phase"] for e in run.events("ttt_phase")] == ["1/2", "2/2"]
    [score] = run.events("ttt_val_bpb")
    eval_ms, estimate_ms = (int(score[key].removesuffix("ms")) for key in ("eval_time", "eval_time_8gpu_est"))
    assert abs(estimate_ms - eval_ms / 8) <= 1  # each rounded to the ms
    assert run.score_line.startswith("final_int8_zlib_ttt_exact val_loss:")
