"""Tiny real data for the tests, made on the spot: a SentencePiece BPE tokenizer trained with the
published sp1024 settings (smaller vocabulary) and shards of documents encoded with it, each
document preceded by BOS. Used by tests/test_train_gpt.py and tests/test_end_to_end.py.

The text is the first ~300 KB of the FineWeb sample documents in ../shared/data/fineweb_docs when
that folder exists, and otherwise the docstrings of Python's own standard library, so the suite runs
anywhere. Nothing here is a test; the fixtures are imported by the test modules that use them.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import lzma
import os
import re
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

import build_shards
import train_gpt

ROOT = Path(__file__).resolve().parents[1]
SHARED_DOCS = ROOT.parent / "shared" / "data" / "fineweb_docs" / "fineweb_sample_val.jsonl.xz"
PUBLISHED_TOKENIZER = ROOT.parent / "shared" / "data" / "tokenizers" / "fineweb_1024_bpe.model"
CORPUS_CHARS = 300_000
VOCAB_SIZE = 512  # 256 byte pieces + 4 specials + 252 merges: plenty for 300 KB of text
BOS_ID = 1
VAL_CHARS = CORPUS_CHARS // 10  # the last documents of the corpus, this much text, are the validation split

# Text the tokenizer rarely or never saw: digits (split one by one), accents, emoji and CJK (byte
# fallback), NFKC-normalised forms, runs of whitespace (collapsed), leading spaces (dropped).
ODD_DOCS = [
    "Invoice 2024-03-17: 1234567 units at 0.25 EUR (total 308641.75).",
    "naïve café, Straße, Ærøskøbing, São Paulo, Dvořák",
    "emoji 😀🎉👍🏽 and CJK 漢字かな and math ∑ √2 ≈ 1.41421 ≠ π",
    "   leading spaces,\ttabs\n\nand  blank   lines   ",
    "full-width ｆｕｌｌ ｗｉｄｔｈ and the ligature ﬁne, ½ and ²",
    "7",
]


@dataclass
class TinyData:
    tokenizer_path: Path
    data_path: Path  # holds fineweb_train_00000{0,1}.bin and fineweb_val_000000.bin
    sp: object  # sentencepiece.SentencePieceProcessor
    train_docs: list[str]
    val_docs: list[str]
    vocab_size: int = VOCAB_SIZE


def stdlib_docstrings(limit_chars: int) -> list[str]:
    """Docstrings of the standard library's pure-Python modules, in a fixed order."""
    docs, total = [], 0
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        nodes = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
        for node in nodes:
            doc = ast.get_docstring(node)
            if doc and len(doc) > 40:
                docs.append(doc)
                total += len(doc)
                if total >= limit_chars:
                    return docs
    return docs


def corpus_documents(limit_chars: int = CORPUS_CHARS) -> list[str]:
    if SHARED_DOCS.is_file():
        docs, total = [], 0
        with lzma.open(SHARED_DOCS, "rt", encoding="utf-8") as f:
            for line in f:
                docs.append(json.loads(line)["text"])
                total += len(docs[-1])
                if total >= limit_chars:
                    break
        return docs
    return stdlib_docstrings(limit_chars)


def train_tokenizer(docs: list[str], path: Path, vocab_size: int = VOCAB_SIZE, **overrides):
    """The tests' tokenizer (settings below, any of them overridden) written to path; its processor."""
    import sentencepiece as spm

    # One line per sentence: SentencePiece skips sentences longer than max_sentence_length (4192 B). The settings are
    # build_shards.py's, but SentencePiece's defaults for these two (left unset: a .model stores what is set): the
    # tokenizer the tests' numbers were made with, byte for byte (scripts/compare_revisions.py compares them).
    lines = [line for doc in docs for line in doc.splitlines() if line.strip()]
    settings = dict(build_shards.TOKENIZER_SETTINGS)
    del settings["character_coverage"], settings["hard_vocab_limit"]
    with open(path, "wb") as f:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines), model_writer=f, vocab_size=vocab_size, minloglevel=2, **settings | overrides
        )
    return spm.SentencePieceProcessor(model_file=str(path))


def encode_documents(sp, docs: list[str]) -> np.ndarray:
    """The shard layout: [BOS] + ids of each document, concatenated."""
    ids = []
    for doc in docs:
        ids.append(BOS_ID)
        ids.extend(sp.encode(doc))
    return np.asarray(ids, dtype=np.uint16)


def make_tiny_data(root: Path) -> TinyData:
    import sentencepiece as spm

    docs = corpus_documents()
    split = len(docs) - 1
    while sum(len(doc) for doc in docs[split:]) < VAL_CHARS:
        split -= 1
    train_docs, val_docs = docs[:split], docs[split:] + ODD_DOCS
    tokenizer_path = root / "tokenizer.model"
    train_tokenizer(docs, tokenizer_path)
    sp = spm.SentencePieceProcessor(model_file=str(tokenizer_path))
    data_path = root / "shards"
    data_path.mkdir()
    half = len(train_docs) // 2
    build_shards.write_data_shard(data_path / "fineweb_train_000000.bin", encode_documents(sp, train_docs[:half]))
    build_shards.write_data_shard(data_path / "fineweb_train_000001.bin", encode_documents(sp, train_docs[half:]))
    build_shards.write_data_shard(data_path / "fineweb_val_000000.bin", encode_documents(sp, val_docs))
    return TinyData(tokenizer_path, data_path, sp, train_docs, val_docs)


_cache: dict[str, TinyData] = {}  # one build per session, shared by every module that imports the fixture


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> TinyData:
    if "data" not in _cache:
        _cache["data"] = make_tiny_data(tmp_path_factory.mktemp("tiny_data"))
    return _cache["data"]


def tiny_env(data: TinyData, tmp_path: Path, **overrides) -> dict[str, str]:
    """Environment variables for a tiny run on `data` that writes only under tmp_path."""
    env = dict(
        DATA_PATH=str(data.data_path),
        TOKENIZER_PATH=str(data.tokenizer_path),
        VOCAB_SIZE=str(data.vocab_size),
        RUN_ID="test",
        LOG_DIR=str(tmp_path / "logs"),
        ARTIFACT_PATH=str(tmp_path / "model.int8.ptz"),
        NUM_LAYERS="2",
        MODEL_DIM="64",
        NUM_HEADS="2",
        NUM_KV_HEADS="1",
        MLP_MULT="2",
        TRAIN_SEQ_LEN="64",
        TRAIN_BATCH_TOKENS=str(8 * 2 * 64),
        VAL_BATCH_SIZE=str(8 * 8 * 64),
        ITERATIONS="10",
        WARMDOWN_ITERS="0",
        WARMUP_STEPS="0",
        VAL_LOSS_EVERY="0",
        TRAIN_LOG_EVERY="1",
        MAX_WALLCLOCK_SECONDS="0",
        LOSS_IMPL="torch",
        COMPILE="0",
    )
    env.update({k: str(v) for k, v in overrides.items()})
    return env


def cpu_run(
    args: train_gpt.Hyperparameters,
    val: train_gpt.ValData | None = None,
    train_files=(),
    log: train_gpt.Logger | None = None,
) -> train_gpt.Run:
    """A Run of one CPU process for a unit test of one phase, without the pre-flight (which needs a tokenizer and
    validation shards): the PyTorch loss, no manifest, no artifact; a silent logger unless one is given."""
    ctx = train_gpt.DistContext(0, 1, 0, torch.device("cpu"))
    return train_gpt.Run(
        args, ctx, log or train_gpt.Logger(None), val, list(train_files), ("torch", "test"), "no_manifest", None
    )


FRONTIER = ROOT / "records" / "frontier" / "train_gpt.py"  # our record script


def load_frontier():
    """The record script as a module of its own name (the root's is train_gpt), once a process."""
    if "frontier_gpt" not in sys.modules:
        import importlib.util

        spec = importlib.util.spec_from_file_location("frontier_gpt", FRONTIER)
        module = importlib.util.module_from_spec(spec)
        sys.modules["frontier_gpt"] = module
        spec.loader.exec_module(module)
    return sys.modules["frontier_gpt"]


def patched_copy(
    edits: list[tuple[str, str]], folder: Path, name: str = "", script: Path = ROOT / "train_gpt.py"
) -> Path:
    """folder/train_gpt.py: `script` (the root's, or our record script) with each (old, new) edit made once; a
    broken copy for the legality tests. An edit whose text does not occur exactly once fails, naming the copy."""
    source = script.read_text(encoding="utf-8")
    for old, new in edits:
        assert source.count(old) == 1, f"{name}: {old!r} occurs {source.count(old)} times in {script}: re-anchor it"
        source = source.replace(old, new)
    path = folder / "train_gpt.py"
    path.write_text(source, encoding="utf-8")
    return path


# ---- Running train_gpt.py as a user would (tests/test_end_to_end.py, tests/test_export.py) ----

SCRIPT = ROOT / "train_gpt.py"
RUN_TIMEOUT_S = 300
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0  # those the trainer's processes see
EVENT_LINE = re.compile(r"[a-z0-9_]+:\S+( [a-z0-9_]+:\S+)*")
OUR_NAMES = {f.name.upper() for f in dataclasses.fields(train_gpt.Hyperparameters)}


def runs_processes(n: int):
    """The condition of a test that runs train_gpt.py in n processes: where CUDA is visible the trainer gives each
    process a GPU of its own, so it needs n of them; on the CPU (gloo, CUDA hidden or absent) it runs anywhere. The
    test's other runs are then on the same device, as its comparisons (1 process against n) assume."""
    return pytest.mark.skipif(
        0 < GPUS < n,
        reason=f"{n} processes, a GPU each, and CUDA shows {GPUS} GPU(s): run it on a host with {n}, or on the CPU "
        "with CUDA_VISIBLE_DEVICES= (the whole file: its 1-process runs are what it compares with)",
    )


@dataclass
class Run:
    """A finished subprocess run of train_gpt.py: what it printed, and the variables it was given."""

    result: subprocess.CompletedProcess
    env: dict[str, str]

    @property
    def lines(self) -> list[str]:
        return self.result.stdout.splitlines()

    @property
    def log_path(self) -> Path:
        return Path(self.env["LOG_DIR"]) / f"{self.env['RUN_ID']}.txt"

    @property
    def artifact_path(self) -> Path:
        return Path(self.env["ARTIFACT_PATH"])

    @property
    def score_line(self) -> str:
        return score_line(self.lines)

    def events(self, key: str) -> list[dict[str, str]]:
        """The printed key:value lines that have `key`, as dicts."""
        found = []
        for line in self.lines:
            if EVENT_LINE.fullmatch(line):
                fields = dict(token.split(":", 1) for token in line.split(" "))
                if key in fields:
                    found.append(fields)
        return found


def score_line(lines: list[str]) -> str:
    """A finished run's score: the line before the wall time's accounting that ends the log (phase:teardown, then
    wall_time:, the last line)."""
    assert lines[-2].startswith("phase:teardown ") and lines[-1].startswith("wall_time:"), lines[-3:]
    return lines[-3]


def run_script(env_vars: dict[str, str], cwd: Path, nproc: int = 1, run_class: type = Run, script=SCRIPT) -> Run:
    """train_gpt.py (or `script`, our record script) in a subprocess with env_vars on top of a clean environment
    (none of our variables, no torchrun ones), one thread; nproc > 1: under torchrun (gloo on CPU)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in OUR_NAMES and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
    }
    env.update(env_vars)
    env["OMP_NUM_THREADS"] = "1"
    command = [sys.executable, str(script)]
    if nproc > 1:
        command[1:1] = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    return run_class(result, env_vars)


def randomize_matrices(model: torch.nn.Module) -> torch.nn.Module:
    """Every matrix and the embedding (parameter_roles: all but the scalars) ~ N(0, 1/fan_in), the zero-initialised
    projections too, so the model's predictions depend on its inputs and quantization has something to round."""
    with torch.no_grad():
        roles = train_gpt.parameter_roles(model)
        for name, p in model.named_parameters():
            if roles[name] != "scalar":
                p.normal_(0.0, p.size(1) ** -0.5)
    return model
