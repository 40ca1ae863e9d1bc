"""Is train_gpt.py's evaluation legal? It runs the checked script's own main() under EVAL_ONLY on an artifact of a
tiny random model that the script itself wrote, on a validation split made with a tiny SentencePiece tokenizer (or a
prefix of the one in your DATA_PATH), with 1 and 2 processes, in two geometries (three with the user's), watches
every distribution that scores a token on the three scoring paths (the round trip, sliding windows, sliding windows
with score-first test-time training), reads the run's log, and checks them against the conditions of the challenge's
issue #1017. One line per loss path, geometry, scoring path and condition. Exit codes, one answer each (the last line
says which):
  0  legal: every condition holds;
  1  NOT LEGAL: a condition fails (its lines FAIL);
  2  error: a command line, environment or data that train_gpt.py would refuse (on stderr);
  3  cannot verify: none fails, but the check could not observe one (lines UNVERIFIED; condition 4);
  4  cannot check: a script the check cannot run here, so no verdict: one that does not load on this Python (a
     record written for 3.12, a module not installed) or is no copy of this project's train_gpt.py (the challenge's
     baseline); the line says why and what it would need.

  python3 scripts/check_legality.py                        # the model and TTT settings of the environment, CPU
  RECIPE=record TTT_LR=0.01 python3 scripts/check_legality.py
  TRAIN_SEQ_LEN=16 EVAL_STRIDE=5 TTT_CHUNK_TOKENS=40 python3 scripts/check_legality.py   # a third geometry: yours
  DATA_PATH=./data/datasets/fineweb10B_sp1024 python3 scripts/check_legality.py   # on (a prefix of) your split
  python3 scripts/check_legality.py --broken               # a TTT that trains on each chunk before scoring it
  python3 scripts/check_legality.py --script /tmp/copy.py  # check another copy of train_gpt.py
  # our record script's document-wise TTT (each document adapted on its own), with two phases of SGD
  TTT_MODE=doc TTT_LORA_LR=0.01 PHASED_TTT_PREFIX_DOCS=2 PHASED_TTT_NUM_PHASES=2 \
    python3 scripts/check_legality.py --script records/frontier/train_gpt.py
  # on one GPU, as a training run scores: the Triton loss and bf16 autocast (tolerances below)
  LOSS_IMPL=triton TTT_LR=0.05 python3 scripts/check_legality.py --device cuda --processes 1
  LOSS_IMPL=triton TTT_LR=0.05 python3 scripts/check_legality.py --device cuda --processes 1 --broken  # must fail

The environment is read as train_gpt.py reads it (Hyperparameters.from_env: RECIPE, loops, XSA, TTT_LR, ...; a
misspelt variable is refused as train_gpt.py refuses it); TTT is always on, EVAL_ONLY is set, and the size, the
vocabulary (64 ids), the data, the tokenizer and the geometry are made tiny. With DATA_PATH set (and TOKENIZER_PATH,
else train_gpt.py's default for VOCAB_SIZE), each geometry's split is instead the first tokens of that validation
split (its shards in order), scored with that tokenizer and vocabulary, and the output says so: the data you score
on, with its documents and its bytes (counted from the decoded text; with CaseOps, from the original text it decodes
to, and its byte sidecars, which the script divides by, must count each document the same or the check refuses the
data). The observer scores every id of the vocabulary for every target, so the sp1024 split takes ~5 min a geometry
and process count on a CPU. The interpreted Triton geometry below always uses a split made here. Geometries:
  aligned: a 32-token window every 8 tokens, 64-prediction chunks (the stride divides window and chunk);
  ragged:  a 24-token window every 7 tokens, 50-prediction chunks (the stride divides neither, the chunk is no
           multiple of the window: windows straddle chunk boundaries, and TTT trains on 48 of a chunk's 50);
  user:    when the environment sets TRAIN_SEQ_LEN, EVAL_SEQ_LEN, EVAL_STRIDE or TTT_CHUNK_TOKENS, those values
           (the others: aligned's) on a split of three and a half chunks.
Each has a ragged last chunk. On a CPU the loss runs as torch, and also as the Triton kernel under
TRITON_INTERPRET=1 when Triton is installed: one process, a split of 8 targets (the interpreter takes ~4 ms a row),
the original run only, for the conditions a kernel can break (single pass, normalized, reported is observed).

What is watched: score_windows hands its observer each scored target's position and its log-probabilities over the
whole vocabulary, taken where the score is computed (the loss of every id as the target), so a mixture, a cache or
a temperature is checked as it scores. The bytes of every target are counted here, from the tokenizer's decoded text
of the split (the UTF-8 bytes each token adds to its document's decoded text), never by a function of the checked
script. The conditions:
  0. accepts the data (one line a geometry): the script starts on the check's split. A pre-flight that refuses it
     where the project's train_gpt.py, run on the same split with the same settings, accepts it (byte tables that
     miscount the tokenizer's pieces, a changed check of the validation shards) fails here, named, and that geometry
     is checked no further. A refusal the project's train_gpt.py shares is the settings' or the data's, not the
     script's: `error:` (exit 2).
  1. causal (score before update): the distribution over the whole vocabulary that scores the token at position t
     depends only on the tokens before t. For each probe p the tokens from p on are changed, the whole run is made
     again, and every distribution of a target at or before p must stay the same, bit for bit (CPU arithmetic is
     deterministic, and the changed run has the same shapes). Probes: both sides of every chunk boundary
     (c*size - 1, c*size, c*size + 1), the last token TTT trains on in each chunk, the last chunk, and a seeded
     sample of other positions. Each is changed to random tokens; the first of each chunk, and the first probe,
     also to the model's most likely tokens and to tokens copied from elsewhere in the split, which flip a choice
     made on the whole split (a temperature or a learning rate picked by its score). And the whole future, from
     target 1 on, is replaced twice by what the scored model generates itself, each token its likeliest (then its
     unlikeliest) next one given the window before it: the splits it predicts best and worst. A setting picked from
     a grid, however coarse, by the score of the whole split moves to one end of its grid on one of them (on its
     likeliest tokens a sharper temperature scores better, on its unlikeliest a flatter one), and target 1, scored
     with it, moves: issue 44's temperature and logit softcap from grids of seven, which no other probe flipped. A
     choice that no probe flips is caught by what it does: every update of the run (an optimizer step on any model,
     the scored one or a deep copy of it, or a change of the scored model's weights however it is made: p.data,
     copy_, load_state_dict, seen as a changed digest of its weights at the next observation) is compared, bit for
     bit, with the original run's while a target up to the probe is still to be scored; one that differs trained on
     tokens from the probe on before scoring that target (named: which update, on which model, before which
     target). So is every module outside the scored model (a deep copy, its weights made however: an optimizer,
     p.data.add_, copy_) at each call: weights the original run never called it with, while a target up to the
     probe is still to be scored, were made from tokens from the probe on. Not caught: a choice that no probe flips
     made with no module's weights (counts of the split's tokens, a cache outside any module; a setting whose best
     value is the same on the split, on the model's likeliest future and on its unlikeliest, such as one picked by
     a statistic of the split that these futures share rather than by how well the model predicts it), or with
     weights used outside a call of the module that holds them (a copy's tensors passed to F.linear by hand; a
     GPT's own parameters, such as skip_weights, when only its methods are called: its blocks' are seen). On CUDA
     updates are not compared (their rounding differs from run to run): the distributions are. A changed run stops
     when the scored model takes an optimizer step, or (one process) its weights change however it is made, after
     every target up to the probe was scored on the path it is on: what it does, not which function it calls. A
     path a changed run never scored up to its probe fails, named.
  2. single pass: every target of the split in DATA_PATH is scored once, and the bytes counted here for them are
     the split's decoded bytes.
  3. normalized: each distribution sums to 1 (a target scored with probability 0 is said so, never a NaN).
  4. reported is observed: the log's final_..._exact line of the path (exactly one) is the watched pass: its
     val_loss is minus the mean log-probability of the targets in the watched distributions, its val_bpb that over
     the bytes counted here. It is checked twice: with the environment's TTT, and with a TTT that makes the score
     worse (TTT_LR=10), so that a line that reports the better of the TTT pass and another pass shows the other one.
     Where the val_loss is not the watched distributions' in either run, the script scores with distributions it
     does not hand the observer. Not legal: a val_bpb that is not the val_loss over the bytes counted here, the
     watched pass reported in one run and another score in the other, another path's score, or a score that stays
     where the watched distributions move. Legal: in both runs the loss of one mixture w * p(path) + (1 - w) *
     p(other path) of two watched distributions (each checked on its own path), the same w in (0, 1) in both (a
     weight fitted to the split's score would differ between them): issue 44's 0.5 p(adapted) + 0.5 p(frozen copy)
     with the observer handed the adapted model's, as the frozen copy scores as the sliding windows do. Anything
     else (a cache of the targets already scored, a copy's output that no path scores, a weight that differs) the
     check cannot see: "cannot verify: ...". It is never called legal; hand score_windows' observe the
     distributions that score, and the check judges them.
  5. TTT adapts: TTT changed some distribution (else 1 passed for nothing: TTT_LR=0, TTT_EPOCHS=0, one chunk).
     --allow-no-adaptation lets it pass, saying so.
  6. documents isolated (TTT_MODE=doc, below): nothing passes from one document to another but by the phases.
TTT_MODE=doc (a script whose TTT adapts each validation document on its own, from the trained weights, a chunk of
TTT_CHUNK_SIZE of its predictions at a time: our record script's, records/frontier). A document is a BOS and the
tokens up to the next one (the split starts one too); its last target is the next BOS. The geometry sets the chunk
(8 predictions, ragged 7); the causal probes, instead of the stream's chunk boundaries, are each document's BOS (the
last target of the one before), its first target and its first two chunk boundaries (the last and the first target
of each side), with the flips at each document's first target. The runs behind conditions 1 to 5 batch one document
at a time (TTT_BATCH_SIZE=1): the script then takes them in stream order, and every update (an Adam step on one
document's adapters, a phase's SGD on the scored model) is compared as the stream TTT's are; with several processes,
an update of a model other than the scored one (each rank steps its own documents' adapters) while a target up to
the probe is still to be scored by that rank. The hurting TTT also sets TTT_LORA_LR=0.1; condition 5 compares with a
run of no step (TTT_LORA_LR=0 GLOBAL_TTT_LR=0), not the sliding windows, which see across documents. Condition 6
runs the script with TTT_BATCH_SIZE=2 (several batches, two documents side by side in each) on the split, and once
for each document with its tokens but its BOS changed to random ids, no BOS among them (every document keeps its place
and length, every batch its shapes): the distribution of every target of every other document stays the same, bit
for bit, but for the documents of later phases (PHASED_TTT_PREFIX_DOCS and PHASED_TTT_NUM_PHASES, the records' cut:
those start from a model trained on it); and that run scores every target once and reports what it observed. It
fails adapters shared by the documents of a batch, or carried from one to the next, which condition 1 passes where
they go in stream order. Not probed: causality inside a document at two documents a batch or more (conditions 1 to 5
run one a batch; tests/test_doc_ttt.py probes a chunk at four). --broken breaks the stream TTT only, and is refused.
The check runs the script's own main() with hooks in its functions, so it checks copies of this project's
train_gpt.py: a script that does not load here (a syntax this Python does not parse, a module not installed, an
error at import) or lacks what it hooks (dist_context, preflight, score_artifact with an observe, ...) is "cannot
check: ..." (exit 4), never a verdict. A traceback of a checked copy's main() fails the conditions it blocks and
shows its last line; the check never ends in a traceback of its own on a broken copy. The verdict, the last line:
"NOT LEGAL: ..." (exit 1) where a condition fails (lines FAIL); else "cannot verify: ..." (exit 3) where the check
could not observe one (lines UNVERIFIED: condition 4, above); else "legal: ..." (exit 0). The interpreted Triton
geometry runs no hurting TTT, so it cannot tell a mixture on its own: where its report is no watched pass, it
accepts the loss of a mixture the torch loss's geometries recognised (the same w and paths, computed from its own
watched distributions), says "cannot verify" where they could not see the rule, and fails anything else.

On CUDA (--device cuda) the scoring runs as a training run's does: the environment's LOSS_IMPL (auto: Triton), bf16
autocast (torch.compile stays off: each of the check's many short runs would compile again). Hidden states are then
bf16, with 8 significant bits, and a legitimate difference between two runs (the order of the atomic adds in a TTT
backward) can move an element by one rounding step, 2^-8 of its size. The tiny model's logits are under 4 in size (a
rms-normed hidden state of 32 elements against embedding rows of norm about 1), so one step moves a logit by at most
4 * 2^-8 = 2^-6 and a log-probability (a logit less a log-sum-exp of logits) by at most twice that: the causal
condition allows 2^-5 = 0.031 per log-probability on CUDA and prints the largest difference it saw. A real leak
moves them further: --broken fails by more than ten times that (tests/test_legality.py measures it on the CPU). The
observer's log-probabilities come from another matrix shape than the score, so cuBLAS may round their bf16 logits
apart: the reported val_loss may differ from the observed one by the same 2^-5 there (a better-of-two report differs
by nats). So may condition 4's mixture in the run with a hurting TTT: on CUDA a mixture weight fitted to each run's
score passes where the two fits move that run's loss by less than 2^-5 of it; the CPU check holds it to 1e-5.
"""

from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import hashlib
import importlib.util
import inspect
import math
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import tempfile
import traceback
import weakref
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.modules.module import register_module_forward_pre_hook
from torch.optim.optimizer import register_optimizer_step_pre_hook

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "data")]
import caseops  # noqa: E402  (the CaseOps inverse: the original text whose bytes a CaseOps split scores)

VOCAB = 64
TINY = dict(
    VOCAB_SIZE=str(VOCAB),
    MODEL_DIM="32",
    NUM_HEADS="2",
    NUM_KV_HEADS="1",
    ROPE_DIMS="0",
    EVAL_SEQ_LEN="0",
    TTT_ENABLED="1",
    EVAL_ONLY="1",
    COMPILE="0",
    MATRIX_BITS="8",
    EMBED_BITS="8",
    COMPRESSOR="zlib",
    GPTQ_CALIBRATION_BATCHES="0",
)
GEOMETRY_NAMES = ("TRAIN_SEQ_LEN", "EVAL_SEQ_LEN", "EVAL_STRIDE", "TTT_CHUNK_TOKENS")
USER_GEOMETRY_MAX_TOKENS = 8192  # on a CPU: a few seconds a run
WORKER_TIMEOUT_S = int(os.environ.get("LEGALITY_WORKER_TIMEOUT_S", "900"))


@dataclasses.dataclass(frozen=True)
class Geometry:
    window: int
    stride: int
    chunk: int
    tokens: int  # the validation split: whole windows of predictions and one more token, as preflight trims it
    doc_chunk: int = 8  # TTT_MODE=doc: a document's predictions scored between two steps (TTT_CHUNK_SIZE)

    def settings(self, doc: bool = False) -> dict[str, str]:
        """The geometry's settings; doc (TTT_MODE=doc): also its chunk, and one document a batch (DOC_CAUSAL_BATCH)."""
        doc_settings = dict(TTT_CHUNK_SIZE=str(self.doc_chunk), TTT_BATCH_SIZE=str(DOC_CAUSAL_BATCH)) if doc else {}
        return dict(
            TRAIN_SEQ_LEN=str(self.window),
            EVAL_SEQ_LEN="0",
            EVAL_STRIDE=str(self.stride),
            TTT_CHUNK_TOKENS=str(self.chunk),
            TRAIN_BATCH_TOKENS=str(8 * self.window),
            VAL_BATCH_SIZE=str(8 * self.window * 4),  # 4 windows a batch: several batches per chunk
            **doc_settings,
        )


GEOMETRIES = {
    "aligned": Geometry(window=32, stride=8, chunk=64, tokens=7 * 32 + 1),  # chunks 3 x 64 and 32
    "ragged": Geometry(window=24, stride=7, chunk=50, tokens=7 * 24 + 1, doc_chunk=7),  # chunks 3 x 50 and 18
}
GEOMETRY_CHOICES = (*GEOMETRIES, "user")  # what --geometries takes: user is the environment's (user_geometry)
# The Triton kernel in its interpreter takes ~4 ms a row, and the observer scores every id of every target: 8 targets
# (two chunks), the original run only, for the conditions a kernel can break (normalized, reported, single pass).
INTERPRETED = {"interpreted": Geometry(window=4, stride=2, chunk=4, tokens=2 * 4 + 1, doc_chunk=2)}
PATHS = ("roundtrip", "sliding_window", "ttt")
HURTING_TTT = dict(TTT_LR="10", TTT_EPOCHS="1")  # steps far too large: TTT then scores worse than sliding windows
# TTT_MODE=doc (each document adapted on its own, docstring): the adapters' steps far too large, or none at all. Adam
# moves each weight by about its lr a step: 0.1 is a thousand times the records' 1e-4, and scores far worse (10, with
# weight decay 1, scores as no step: every step then zeroes the adapters; 10 makes the tiny model's losses NaN).
HURTING_DOC_TTT = dict(TTT_LORA_LR="0.1")
FROZEN_DOC_TTT = dict(TTT_LORA_LR="0", GLOBAL_TTT_LR="0")
# Its causal probes run one document a batch: the script then takes them in stream order, and every update (an Adam
# step on one document's adapters) is compared with the original run's as the stream TTT's are. Its isolation runs
# batch two (several batches, each of two documents that train side by side): each document changed alone.
DOC_CAUSAL_BATCH = 1
DOC_ISOLATION_BATCH = 2
DOC_CONFIG = ("ttt_mode", "ttt_lora_lr", "ttt_chunk_size", "phased_ttt_prefix_docs", "phased_ttt_num_phases")
INTERIOR_PROBES = 4
# The two futures generated by the scored model itself, each token its likeliest (unlikeliest) next one given the
# window before it: the split it predicts best and worst (extreme_futures).
EXTREMES = ("likeliest", "unlikeliest")
# The largest legitimate difference of a log-probability between two runs on CUDA (bf16), as the docstring derives.
BF16_LOGP_TOLERANCE = 2.0**-5
REPORT_RTOL_FP32 = 1e-6  # fp32 per-token losses summed in fp64 in another order; the line prints 8 decimals
MARKS = {True: "ok  ", False: "FAIL", None: "UNVERIFIED"}  # a condition's line: holds, fails, cannot be seen
EXIT_CANNOT_VERIFY = 3  # no condition failed, but one the check could not observe: neither legal (0) nor not (1)
EXIT_CANNOT_CHECK = 4  # a script the check cannot run here (CannotCheck): no verdict at all
# What the check calls or hooks in the checked script (a copy of train_gpt.py); score_artifact must take an observe.
INTERFACE = (
    "Hyperparameters.from_env",
    "ConfigError",
    "dist_context",
    "init_distributed",
    "preflight",
    "score_artifact",
    "main",
    "GPT",
    "quantize_state_dict",
    "parameter_roles",
    "artifact_header",
    "save_artifact",
)
MIXTURE_GRID = 1000  # mixture weights: a grid of (0, 1), then bisection where the mixture's loss crosses the report
MIXTURE_TOLERANCE = 10  # times REPORT_RTOL_FP32: the weight, solved from one rounded report, carries its error
LINE = re.compile(r"final_\w+?_(roundtrip|sliding_window|ttt)_exact val_loss:(\S+) val_bpb:(\S+)")
# The challenge's shard format (train_gpt.py reads it): a header of 256 int32 (magic, version, count), uint16 ids.
SHARD_MAGIC, SHARD_VERSION, SHARD_HEADER_INTS = 20240520, 1, 256
BOS_ID = 1
# The published tokenizers' normalization and ids, as data/build_shards.py's TOKENIZER_SETTINGS holds them, but every
# character covered and no byte fallback: 64 pieces hold no 256 byte pieces. Repeated, not imported: build_shards
# imports train_gpt, and the check must judge a train_gpt.py that fails at import (tests/test_legality.py compares).
TOKENIZER_SETTINGS = dict(
    model_type="bpe",
    character_coverage=1.0,
    byte_fallback=False,
    split_digits=True,
    normalization_rule_name="nmt_nfkc",
    add_dummy_prefix=False,
    remove_extra_whitespaces=True,
    pad_id=0,
    bos_id=BOS_ID,
    eos_id=2,
    unk_id=3,
)
WORDS = (
    "the of and a to in is was he for it with as his on be at by had are but from or have an they which one you "
    "were all we her she there would their will when who him been has more if no out so said what up its about into "
    "than them can only other new some could time these two may first then do any like my now over such our man me "
    "even most made after also did many before must through back years where much your way well down should because "
    "each just those people how too little state good very make world still own see men work long get here between"
).split()


class CheckError(Exception):
    """A command line or environment the check cannot run with: printed as `error: ...`, exit 2."""


class CannotCheck(Exception):
    """A script the check cannot run here (it does not load, or it is no copy of train_gpt.py): printed as `cannot
    check: ...`, exit 4, never a verdict."""


def load_script(path: Path):
    """train_gpt.py (or a patched copy) as a module named checked_train_gpt. One per process: the file registers a
    torch custom op, which cannot be registered twice, so each copy is checked in worker processes of its own."""
    spec = importlib.util.spec_from_file_location("checked_train_gpt", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


def unloadable(script: Path, exc: BaseException) -> str:
    """Why the script does not load here, and what it would need: CannotCheck's message."""
    python = f"Python {platform.python_version()}"
    if isinstance(exc, SyntaxError):  # a packed script's exec'd source names itself <string>
        where = f"line {exc.lineno} of {Path(exc.filename or script).name}"
        if exc.filename == "<string>":  # a packed record: the source it unpacks and exec()s
            where = f"line {exc.lineno} of the source it unpacks"
        return (
            f"{script} does not compile on {python} (SyntaxError: {exc.msg} at {where}): written for a newer Python "
            "(3.12 parses f-strings that reuse their quotes), it needs that one: run the check with it (python3.12 "
            f"scripts/check_legality.py --script {script}, with torch and the script's imports there); else fix "
            "that line"
        )
    if isinstance(exc, ImportError):
        return (
            f"{script} imports {exc.name or 'a module'}, which is not installed here ({short_error(exc)}): install "
            "it, or run the check where it is"
        )
    return f"{script} raises when it is loaded ({short_error(exc)}): the check runs its main(), so it must load"


def missing_interface(T) -> list[str]:
    """What of INTERFACE the loaded script lacks: the check runs a copy of train_gpt.py, hooked in these."""
    missing = []
    for name in INTERFACE:
        found = T
        for part in name.split("."):
            found = getattr(found, part, None)
        if found is None:
            missing.append(name)
    score = getattr(T, "score_artifact", None)
    if callable(score) and "observe" not in inspect.signature(score).parameters:
        missing.append("score_artifact's observe")
    return missing


# ==== The data: a tiny tokenizer, a validation split per geometry, and its bytes counted from decoded text =========


def documents(count: int, seed: int = 0) -> list[str]:
    """Sentences of common words: a vocabulary of 64 pieces covers them without unknown ones."""
    r = random.Random(seed)
    punctuation = [".", ",", "!", "?", ";"]

    def sentence() -> str:
        words = WORDS[: r.randint(20, len(WORDS))]
        return " ".join(r.choice(words) for _ in range(r.randint(4, 12))) + r.choice(punctuation)

    return [" ".join(sentence() for _ in range(r.randint(1, 4))) for _ in range(count)]


def make_tokenizer(path: Path, texts: list[str] | None = None, use_caseops: bool = False):
    """A BPE tokenizer of VOCAB pieces on texts (else documents(400)), with TOKENIZER_SETTINGS. use_caseops: on their
    CaseOps form, the control symbols pieces of their own (data/build_shards.py --caseops)."""
    import sentencepiece as spm

    texts = documents(400) if texts is None else texts
    symbols = dict(user_defined_symbols=list(caseops.CONTROLS)) if use_caseops else {}
    with open(path, "wb") as model:
        sentences = iter(map(caseops.encode, texts) if use_caseops else texts)
        spm.SentencePieceTrainer.train(
            sentence_iterator=sentences,
            model_writer=model,
            vocab_size=VOCAB,
            minloglevel=2,
            **TOKENIZER_SETTINGS,
            **symbols,
        )
    return spm.SentencePieceProcessor(model_file=str(path))


def split_tokens(sp, count: int) -> torch.Tensor:
    """`count` tokens of documents, each BOS and its ids, as the shards hold them (the last one cut)."""
    ids, seed = [], 1
    while len(ids) < count:
        for doc in documents(50, seed):
            ids += [BOS_ID] + sp.encode(doc)
        seed += 1
    return torch.tensor(ids[:count], dtype=torch.int64)


def write_shard(path: Path, tokens: torch.Tensor) -> None:
    header = np.zeros(SHARD_HEADER_INTS, dtype="<i4")
    header[:3] = (SHARD_MAGIC, SHARD_VERSION, tokens.numel())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(header.tobytes() + tokens.numpy().astype("<u2").tobytes())


def read_shard(path: Path, count: int | None = None) -> torch.Tensor:
    """The first `count` (all: None) values of a shard in the challenge's format, as int64."""
    header = np.fromfile(path, "<i4", count=SHARD_HEADER_INTS)
    if len(header) < 3 or header[0] != SHARD_MAGIC or header[1] != SHARD_VERSION:
        raise CheckError(f"{path} is not a shard of the challenge's format (magic {SHARD_MAGIC}, version "
                         f"{SHARD_VERSION}): rebuild it (data/README.md).")  # fmt: skip
    size = int(header[2]) if count is None else min(count, int(header[2]))
    return torch.from_numpy(np.fromfile(path, "<u2", count=size, offset=4 * SHARD_HEADER_INTS).astype(np.int64))


@dataclasses.dataclass(frozen=True)
class UserData:
    """The validation split in the user's DATA_PATH, the split a run scores: the check scores a prefix of it."""

    data_path: str
    tokenizer_path: str
    vocab: int
    files: tuple[Path, ...]  # the validation shards, sorted as train_gpt.py reads them
    sidecars: tuple[Path, ...]  # their byte sidecars (CaseOps), or none
    tokens: int  # in all of them

    def prefix(self, count: int, sidecars: bool = False) -> torch.Tensor:
        pieces, left = [], count
        for path in self.sidecars if sidecars else self.files:
            pieces.append(read_shard(path, left))
            left -= len(pieces[-1])
            if left <= 0:
                break
        return torch.cat(pieces)


def user_data(environ: dict[str, str]) -> UserData | None:
    """The environment's DATA_PATH, TOKENIZER_PATH (else train_gpt.py's default for VOCAB_SIZE) and VOCAB_SIZE (else
    the tokenizer's), checked; None without DATA_PATH (the check makes its own split)."""
    raw = environ.get("DATA_PATH", "").strip()
    if not raw:
        return None
    files = sorted(p for p in Path(raw).glob("fineweb_val_*.bin") if not p.name.startswith("fineweb_val_bytes_"))
    if not files:
        raise CheckError(f"DATA_PATH={raw}: no validation shards fineweb_val_*.bin there: point it at the folder of the "
                         "split your runs score (data/README.md), or unset it to check on a split made here.")  # fmt: skip
    vocab = environ.get("VOCAB_SIZE", "").strip()
    folder = environ.get("DATA_DIR", "").strip() or "./data"
    tokenizer = environ.get("TOKENIZER_PATH", "").strip() or f"{folder}/tokenizers/fineweb_{vocab or 1024}_bpe.model"
    if not Path(tokenizer).is_file():
        raise CheckError(f"TOKENIZER_PATH={tokenizer}: no such file: with DATA_PATH set, point TOKENIZER_PATH at the "
                         ".model file its shards were made with.")  # fmt: skip
    import sentencepiece as spm

    try:
        pieces = spm.SentencePieceProcessor(model_file=tokenizer).vocab_size()
    except (RuntimeError, OSError):
        raise CheckError(
            f"TOKENIZER_PATH={tokenizer} is not a SentencePiece model: point it at the .model file."
        ) from None
    if vocab and vocab != str(pieces):
        raise CheckError(f"VOCAB_SIZE={vocab}, but TOKENIZER_PATH={tokenizer} has {pieces} pieces: set VOCAB_SIZE="
                         f"{pieces} or use the matching tokenizer.")  # fmt: skip
    sidecars = tuple(f.with_name(f.name.replace("fineweb_val_", "fineweb_val_bytes_")) for f in files)
    sidecars = sidecars if any(path.is_file() for path in sidecars) else ()
    length = {f: int(np.fromfile(f, "<i4", count=3)[2]) if f.is_file() else -1 for f in files + list(sidecars)}
    wrong = [s.name for s, f in zip(sidecars, files) if length[s] != length[f]]
    if wrong:  # as train_gpt.py refuses them
        raise CheckError(f"DATA_PATH={raw}: {', '.join(wrong)} missing or not as long as its shard: rebuild the byte "
                         "sidecars (data/README.md: CaseOps).")  # fmt: skip
    return UserData(raw, tokenizer, pieces, tuple(files), sidecars, sum(length[f] for f in files))


def caseops_original(text: str) -> str:
    """The original of a prefix of CaseOps text: a marker at its end marks a letter the next token holds (0 bytes)."""
    try:
        return caseops.decode(text, strict=False)
    except caseops.CaseOpsError:
        return caseops.decode(text[:-1], strict=False)


def decoded_bytes(sp, tokens: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(bytes of each token, the split's decoded bytes): token t stands for the UTF-8 bytes it adds to the decoded
    text of its document (from the last BOS before it); BOS adds none. The text is what the tokenizer decodes to, and
    with a CaseOps tokenizer the original text that text stands for (caseops.decode: a marker adds no byte, the
    letter it marks one). A byte-fallback piece adds its byte, also where the split ends inside a character.
    Counted here, from the tokenizer's decoding, not by any function of the checked script; the total is the bytes
    of every document as the split decodes."""
    # train_gpt's test of a CaseOps tokenizer, imported here, not at the top: a worker loads the checked copy instead
    from build_shards import train_gpt

    ids, bos, original = tokens.tolist(), sp.bos_id(), train_gpt.is_caseops(sp)

    def length(doc: list[int]) -> int:  # UTF-8 bytes of doc's text; a trailing run of byte pieces counted raw
        whole = len(doc)
        while whole and sp.is_byte(doc[whole - 1]):
            whole -= 1
        text = sp.decode(doc[:whole])  # a cut character would decode to U+FFFD, 3 bytes for each of its pieces
        return len((caseops_original(text) if original else text).encode("utf-8")) + len(doc) - whole

    counted = [0] * len(ids)
    total, start = 0, 0
    for end in range(len(ids) + 1):
        if end == len(ids) or ids[end] == bos:
            doc, previous = ids[start + 1 : end] if start < end and ids[start] == bos else ids[start:end], 0
            offset = end - len(doc)
            for k in range(len(doc)):
                now = length(doc[: k + 1])
                counted[offset + k], previous = now - previous, now
            total += length(doc)
            start = end
    return torch.tensor(counted, dtype=torch.int64), total


def user_geometry(environ: dict[str, str], device: str) -> Geometry | None:
    """The environment's window, stride and chunk (the others: aligned's) on a split of 3.5 chunks; None if unset."""
    if not any(environ.get(name, "").strip() for name in GEOMETRY_NAMES):
        return None
    base, values = GEOMETRIES["aligned"], {}
    for name in GEOMETRY_NAMES:
        raw = environ.get(name, "").strip()
        try:
            values[name] = int(raw) if raw else 0
        except ValueError:
            raise CheckError(f"{name}={raw!r} is not an integer: set it to a whole number of tokens.") from None
    window = values["EVAL_SEQ_LEN"] or values["TRAIN_SEQ_LEN"] or base.window
    chunk = values["TTT_CHUNK_TOKENS"] or base.chunk
    stride = values["EVAL_STRIDE"] if "EVAL_STRIDE" in environ else base.stride
    if window < 2 or stride < 1 or chunk < window or stride > window:
        raise CheckError(
            f"the geometry of the environment (window {window}, EVAL_STRIDE={stride}, TTT_CHUNK_TOKENS={chunk}) "
            "cannot be checked: it needs 1 <= EVAL_STRIDE <= the window <= TTT_CHUNK_TOKENS."
        )
    tokens = -(-(3 * chunk + chunk // 2) // window) * window + 1
    if device == "cpu" and tokens > USER_GEOMETRY_MAX_TOKENS:
        raise CheckError(
            f"the geometry of the environment needs a split of {tokens} tokens (3.5 chunks of TTT_CHUNK_TOKENS="
            f"{chunk}), over {USER_GEOMETRY_MAX_TOKENS} on a CPU: run it with --device cuda, or smaller values."
        )
    return Geometry(window=window, stride=stride, chunk=chunk, tokens=tokens, doc_chunk=min(8, window))


def doc_mode(environ: dict[str, str]) -> bool:
    """TTT_MODE=doc in the environment: the checked script's TTT adapts each document on its own (docstring)."""
    return environ.get("TTT_MODE", "").strip() == "doc"


def document_spans(tokens: torch.Tensor) -> list[tuple[int, int]]:
    """(first input, predictions) of each document of a split, counted here: a BOS starts one, and so does the split;
    a document's last target is the next one's BOS (TTT_MODE=doc scores each of them so)."""
    total = len(tokens) - 1
    starts = sorted({0} | set((tokens[:total] == BOS_ID).nonzero().flatten().tolist()))
    return [(start, end - start) for start, end in zip(starts, starts[1:] + [total])]


def doc_phases(documents: int, prefix: int, phases: int) -> list[int]:
    """Each document's phase under PHASED_TTT_PREFIX_DOCS=prefix and PHASED_TTT_NUM_PHASES=phases (the records' cut:
    phase k of the first `prefix` documents ends at prefix * (k + 1) // phases; the rest come after them all). A
    document may depend on those of earlier phases (SGD on them ran before it), on no other."""
    cuts = [min(prefix, documents) * (k + 1) // phases for k in range(phases)]
    return [sum(d >= cut for cut in cuts) for d in range(documents)]


def probes(geometry: Geometry, spans: list[tuple[int, int]] | None = None) -> list[int]:
    """Target positions to change the tokens from. Chunk c's predictions c*size .. (c+1)*size-1 score the targets one
    further on, so c*size is the last target of chunk c-1 and c*size+1 the first of chunk c. TTT trains on the whole
    windows of a chunk: its last trained target is c*size + size // window * window, short of the boundary when the
    window does not divide the chunk. Then the last chunk, and a seeded sample of the other positions. spans
    (TTT_MODE=doc, document_spans'): instead of the chunks of the stream, each document's and its first two chunks'
    boundaries: its BOS (the previous document's last target), its first target, and the last and first target of
    chunks 0 and 1, 1 and 2 (doc_chunk predictions each)."""
    total, size = geometry.tokens - 1, geometry.chunk
    chunks = -(-total // size)
    chosen = set()
    if spans is None:
        for c in range(1, chunks):
            chosen |= {c * size - 1, c * size, c * size + 1}
        for c in range(chunks - 1):
            chosen.add(c * size + size // geometry.window * geometry.window)
    for start, predictions in spans or []:
        ends = [start + k * geometry.doc_chunk for k in (1, 2) if k * geometry.doc_chunk < predictions]
        chosen |= {p for p in [start, start + 1, *ends, *(end + 1 for end in ends)] if 1 <= p <= total}
    last = (chunks - 1) * size
    chosen.add(last + 1 + (total - last) // 2)
    others = sorted(set(range(2, total + 1)) - chosen)
    chosen |= set(random.Random(3).sample(others, min(INTERIOR_PROBES, len(others))))
    return sorted(chosen)


def probe_runs(geometry: Geometry, spans: list[tuple[int, int]] | None = None) -> list[tuple[int, str]]:
    """(probe, how its tokens change): random everywhere; likely and copied at each chunk's first target (with spans,
    TTT_MODE=doc: each document's) and the first probe (a long changed tail: what flips a choice made on the whole
    split); and the whole future from target 1 on made the scored model's likeliest and its unlikeliest tokens
    (EXTREMES: what moves a choice from a grid)."""
    every = probes(geometry, spans)
    firsts = {c * geometry.chunk + 1 for c in range(1, -(-(geometry.tokens - 1) // geometry.chunk))}
    flips = {every[0]} | (firsts if spans is None else {start + 1 for start, _ in spans[1:]})
    extremes = [(1, kind) for kind in EXTREMES]
    return (
        extremes + [(p, "random") for p in every] + [(p, kind) for p in sorted(flips) for kind in ("likely", "copied")]
    )


def changed_from(
    tokens: torch.Tensor, probe: int, kind: str, likely=None, vocab: int = VOCAB, futures: dict | None = None
) -> torch.Tensor:
    """The tokens with every one from `probe` on replaced: by another random id, by the model's most likely token at
    that position (where none was observed, a random one), by the tokens half the split further on, or (EXTREMES) by
    the future the scored model generated from the probe on (futures: extreme_futures')."""
    if kind in EXTREMES:
        return futures[kind].clone()
    changed = tokens.clone()
    shift = torch.randint(1, vocab, (len(tokens) - probe,), generator=torch.Generator().manual_seed(4))
    changed[probe:] = (changed[probe:] + shift) % vocab
    if kind == "likely" and likely is not None:
        changed[probe:] = torch.where(likely[probe:] >= 0, likely[probe:], changed[probe:])
    elif kind == "copied":
        changed[probe:] = tokens.roll(len(tokens) // 2)[probe:]
    return changed


# ==== What runs in each worker process (T: the checked train_gpt module) ===========================================


class EnoughObserved(BaseException):
    """A changed run has scored every target up to its probe and steps the scored model: what it would score next is
    not compared. A BaseException, so that the checked script's `except Exception` neither logs nor keeps it."""


def tiny_args(T, environ: dict[str, str], geometry: Geometry, vocab: int = VOCAB, **overrides: str):
    """The environment's config (RECIPE, switches, TTT settings) at the tiny size and the geometry's shape, read as
    train_gpt.py reads it: a misspelt or invalid variable raises its ConfigError."""
    settings = geometry.settings(doc_mode(environ))
    return T.Hyperparameters.from_env(environ | TINY | dict(VOCAB_SIZE=str(vocab)) | settings | overrides)


def tiny_model(T, args, device: torch.device):
    """A GPT whose predictions depend on every earlier token (random matrices and gains, the zero ones too)."""
    torch.manual_seed(0)
    model = T.GPT(args)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape) * (p.size(-1) ** -0.5 if p.ndim == 2 else 0.5) + (p.ndim < 2))
    model.looping = args.num_loops > 0
    return model.to(device)


def fingerprint(tensors) -> bytes:
    """A digest of the tensors' values (None: absent, as a gradient may be): equal bit for bit, or not."""
    digest = hashlib.blake2b(digest_size=16)
    for t in tensors:
        digest.update(b"-" if t is None else t.detach().float().cpu().contiguous().numpy().tobytes())
    return digest.digest()


class Watcher:
    """The observer that score_artifact hands to each scoring path, and the optimizer hook that ends a changed run.
    `upto`: the probe of a changed run (None: the original run, everything kept). An update is an optimizer step on
    any model (the scored one or a copy of it) or a change of the scored model's weights however it was made, seen
    at the next observation. The original run records a digest of each (`trace`); a changed run compares its own to
    `reference` (the original run's, on this rank: its updates, the weights of its calls, the targets it scored on
    each path) while a target up to the probe is still to be scored: an update that differs there used tokens from
    the probe on before that target was scored (`leak`)."""

    def __init__(self, upto: int | None, total: int, device: torch.device, reference: tuple | None = None):
        self.upto, self.record, self.kind, self.model = upto, {}, None, None
        self.artifact = None  # (weights, looping) score_artifact was first handed: extreme_futures' model
        self.covered = {}  # path -> (total + 1,) bool: targets at or before the probe this rank scored
        self.total, self.device = total, device
        self.trace, self.reference, self.leak = [], reference, None
        self.weights, self.steps_since_look = None, 0  # the scored model's weights at the last observation
        self.scored = set()  # ids of the scored model's modules
        self.calls = set()  # digests of the weights of modules outside the scored model at their calls (call_hook)
        self.weights_at_call = weakref.WeakKeyDictionary()  # module outside the scored model -> its weights' digest

    def watch(self, model) -> None:
        self.model, self.scored = model, {id(m) for m in model.modules()}

    def missing(self, covered: torch.Tensor) -> int | None:
        """The first target up to the probe not yet scored on the current path (covered: per target 1..upto)."""
        left = (covered == 0).nonzero()
        return int(left[0]) + 1 if len(left) else None

    def first_unscored(self) -> int | None:
        """The first target up to the probe that this rank has still to score on the current path. Of several
        processes, only those it scored in the original run count: the others are other ranks' to score (a rank
        that steps a model alone, TTT_MODE=doc's adapters, is judged by what it scores itself)."""
        none = torch.zeros(self.total + 1, dtype=torch.bool)
        covered = self.covered.get(self.kind, none)[1 : self.upto + 1]
        if self.reference is not None and dist.is_initialized():
            covered = covered | ~self.reference[2].get(self.kind, none)[1 : self.upto + 1]
        return self.missing(covered)

    def update(self, digest: bytes, what: str, target: int | None) -> None:
        """The run's next update; in a changed run, one that differs from the original run's while `target` (up to
        the probe) is still to be scored is the first leak. Compared on the CPU only (bit for bit)."""
        index = len(self.trace)
        self.trace.append(digest)
        if self.upto is None or self.reference is None or self.leak is not None or target is None:
            return
        if index >= len(self.reference[0]) or self.reference[0][index] != digest:
            self.leak = (self.kind, target, f"{what} (update {index + 1} of the run) used tokens from the probe on "
                         f"before target {target} was scored")  # fmt: skip

    def observe(self, kind: str):
        self.kind = kind
        covered = self.covered.setdefault(kind, torch.zeros(self.total + 1, dtype=torch.bool))

        def seen(positions: torch.Tensor, logp: torch.Tensor) -> None:
            positions = positions.detach().cpu().long()
            if not len(positions):
                return
            self.look(positions)
            logp = logp.detach().float().cpu().reshape(len(positions), -1)
            keep = positions <= self.upto if self.upto is not None else torch.ones_like(positions, dtype=torch.bool)
            self.record.setdefault(kind, []).append((positions[keep], logp[keep]))
            covered[positions[keep].clamp(0, self.total)] = True

        return seen

    def look(self, positions: torch.Tensor) -> None:
        """Before an observation is kept: has the scored model's weights changed since the last one, and how? With
        every target up to the probe scored on this path, a change ends a changed run (one process: the ranks of
        several do not observe in step, so there the optimizer hook ends it); before, it is an update to compare."""
        if self.model is None:
            return
        weights = fingerprint(self.model.parameters())
        changed, stepped = self.weights is not None and weights != self.weights, self.steps_since_look
        self.weights, self.steps_since_look = weights, 0
        if not changed or self.upto is None:
            if changed:
                self.trace.append(weights)
            return
        covered = self.covered[self.kind][1 : self.upto + 1]
        if bool(covered.all()) and not dist.is_initialized():
            raise EnoughObserved
        early = positions[positions <= self.upto]
        how = "an optimizer step" if stepped else "something other than an optimizer step (p.data, copy_, ...)"
        target = int(early.min()) if len(early) else None  # none up to the probe: these weights scored none of them
        self.update(weights, f"a change of the scored model's weights by {how}", target)

    def step_hook(self, optimizer, args, kwargs) -> None:
        """Before any optimizer step, on the scored model or another (a copy): an update, compared while a target up
        to the probe is still to be scored on the current path: by any rank for a step on the scored model, which
        every rank takes together (the gradient is all-reduced first), so every rank asks and raises at the same
        step; by this rank for a step on another model (first_unscored). One on the scored model once every target
        up to the probe is scored ends a changed run, as does a leak."""
        if self.model is None:
            return
        params = [p for group in optimizer.param_groups for p in group["params"]]
        ours = {id(p) for p in self.model.parameters()}
        scored = any(id(p) in ours for p in params)
        self.steps_since_look += scored
        digest = fingerprint([p.grad for p in params] + params)
        if self.upto is None:
            self.trace.append(digest)
            return
        target = self.first_unscored()
        if dist.is_initialized() and scored:
            empty = torch.zeros(self.total + 1, dtype=torch.bool)
            covered = self.covered.get(self.kind, empty)[1 : self.upto + 1].to(self.device, torch.int32)
            dist.all_reduce(covered, op=dist.ReduceOp.MAX)  # scored by some rank
            target = self.missing(covered.cpu())
        what = "an optimizer step on the scored model" if scored else "an optimizer step on another model (a copy?)"
        self.update(digest, what, target)
        if target is None and scored:
            raise EnoughObserved

    def call_hook(self, module, args) -> None:
        """Before any module's forward, outside the scored model (a deep copy of it, or any other): its own weights.
        In a changed run, weights that the original run never called the module with, however they were made (an
        optimizer, p.data, copy_), while a target up to the probe is still to be scored on the current path by this
        rank (first_unscored), were made from tokens from the probe on: a copy trained by hand on tokens not yet
        scored, once used. Compared as a set, not in order: a copy a script keeps from one run of main() to the next
        is no leak."""
        if self.model is None or self.device.type != "cpu" or id(module) in self.scored:
            return  # on CUDA no update is compared (docstring)
        params = list(module.parameters(recurse=False))
        if not params or self.weights_at_call.get(module) == (digest := fingerprint(params)):
            return
        how = "changed since its last call" if module in self.weights_at_call else "at its first call"
        self.weights_at_call[module] = digest
        self.calls.add(digest)
        if self.upto is None or self.reference is None or self.leak is not None or digest in self.reference[1]:
            return
        target = self.first_unscored()
        if target is not None:
            self.leak = (self.kind, target, f"the weights of a {type(module).__name__} outside the scored model (a "
                         f"copy?), {how}, are none the original run called it with: they used tokens from the probe "
                         f"on before target {target} was scored")  # fmt: skip


def short_error(exc: BaseException) -> str:
    """The exception's last frame in the checked script and its message, on one line."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "check_legality" not in f.filename]
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno} in {frames[-1].name}" if frames else ""
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}{where}"


def run_main(T, environ: dict[str, str], watcher: Watcher, tokens: torch.Tensor | None, log_path: Path, first=False):
    """The checked script's main() as `python3 train_gpt.py` runs it under `environ`, every scoring path watched;
    tokens: the validation split's tokens replace what preflight read (a changed run). (error or None, log lines).
    first: the original run, whose ConfigError (a configuration the script refuses) is raised: the check then asks
    whether the project's train_gpt.py refuses it too (condition 0)."""
    saved_env = dict(os.environ)
    preflight, score_artifact, destroy = T.preflight, T.score_artifact, dist.destroy_process_group

    def changed_preflight(args, ctx):
        run = preflight(args, ctx)
        if tokens is not None:
            changed = tokens[: run.val.tokens.numel()].to(run.val.tokens.dtype)
            run = dataclasses.replace(run, val=dataclasses.replace(run.val, tokens=changed))
        return run

    def watched(run, model, header, weights, observe=None):
        watcher.watch(model)
        if watcher.artifact is None:
            watcher.artifact = ({k: v.detach().cpu().clone() for k, v in weights.items()}, header["looping"])
        return score_artifact(run, model, header, weights, watcher.observe)

    hook = register_optimizer_step_pre_hook(watcher.step_hook)
    calls = register_module_forward_pre_hook(watcher.call_hook)
    T.preflight, T.score_artifact = changed_preflight, watched
    dist.destroy_process_group = lambda *a, **k: None  # the worker's process group serves every run
    os.environ.clear()
    os.environ.update(environ)
    error, saved_argv = None, sys.argv
    sys.argv = [str(T.__file__)]  # as `python3 train_gpt.py` starts it: the script takes no arguments
    try:
        T.main()
    except EnoughObserved:
        pass
    except BaseException as exc:  # the checked script's own failure: reported with the conditions it blocks
        if first and isinstance(exc, T.ConfigError):
            raise
        error = short_error(exc)
    finally:
        sys.argv = saved_argv
        os.environ.clear()
        os.environ.update(saved_env)
        hook.remove()
        calls.remove()
        T.preflight, T.score_artifact, dist.destroy_process_group = preflight, score_artifact, destroy
    lines = log_path.read_text(encoding="utf-8").splitlines() if log_path.is_file() else []
    return error, lines


def broken_ttt(T):
    """score_with_ttt with its two steps swapped: each chunk is trained on before it is scored. Not legal."""

    def score_with_ttt(run, model, observe=None):
        args, val, stride = run.args, run.val, run.args.eval_stride
        total, size, seq = val.tokens.numel() - 1, args.ttt_chunk_tokens, val.seq_len
        starts, chunks = T.window_starts(val, stride), -(-total // size)
        chunk_of = (torch.where(starts == 0, 0, starts + seq - stride) // size).clamp_max(chunks - 1)
        sgd = torch.optim.SGD(model.parameters(), lr=args.ttt_lr, momentum=args.ttt_momentum)
        sums = torch.zeros(3, dtype=torch.float64, device=run.ctx.device)
        for c in range(chunks):
            if c < chunks - 1:
                T.train_on_chunk(run, model, sgd, c * size, min((c + 1) * size, total), args.ttt_lr)
            sums += T.score_windows(model, val, run.ctx, stride, starts[chunk_of == c], observe)
        return sums

    return score_with_ttt


def extreme_futures(T, args, artifact: tuple, tokens: torch.Tensor, probe: int, window: int) -> dict[str, torch.Tensor]:
    """{kind: the split with every token from `probe` on replaced, one at a time, by the scored model's likeliest
    (unlikeliest) next token given the `window` tokens before it}: the futures it predicts best and worst. A setting
    chosen by the score of the whole split (a temperature from a grid, a mixture weight) moves to one end of its range
    on one of them whatever the grid (on the likeliest tokens the sharpest temperature scores best, on the unlikeliest
    the flattest), and the causal condition then sees the targets before the probe scored otherwise. artifact: the
    weights and looping the original run's score_artifact was handed, loaded here as it loads them."""
    weights, looping = artifact
    model = T.GPT(args)
    model.load_state_dict(weights, strict=True)
    model.looping = looping
    model.eval()
    ids = torch.arange(model.tok_emb.num_embeddings)
    futures = tokens.repeat(2, 1)  # (2, N): the likeliest, the unlikeliest, generated side by side
    with torch.no_grad():
        for t in range(probe, tokens.numel()):
            h = model.scoring_hidden(futures[:, max(0, t - window) : t])[:, -1]  # (2, C): the last prediction's
            logp = -model.loss(h[:, None].expand(-1, len(ids), -1), ids.expand(2, -1), True).view(2, -1)
            futures[:, t] = torch.stack([logp[0].argmax(), logp[1].argmin()])
    return dict(zip(EXTREMES, futures))


def likely_tokens(record: dict, total: int) -> torch.Tensor:
    """(total + 1,) the most likely id at each position in the original run's first observed distribution (-1: none)."""
    likely = torch.full((total + 1,), -1, dtype=torch.int64)
    for kind in ("roundtrip", "sliding_window", "ttt"):
        positions, logp = record.get(kind, (None, torch.zeros(0)))
        if logp.numel():
            fresh = (positions <= total) & (likely[positions.clamp(0, total)] < 0)
            likely[positions[fresh]] = logp[fresh].argmax(-1)
    return likely


def worker_geometry(
    T,
    ctx,
    folder: Path,
    name: str,
    environ: dict[str, str],
    geometry: Geometry,
    device: str,
    vocab: int,
    only: bool = False,
):
    """One geometry: the artifact (written by the checked script), then main() on the original split, on each
    probe's changed one and with a hurting TTT; with TTT_MODE=doc also with frozen adapters and the isolation runs.
    What this rank observed, and rank 0's log lines. only: the artifact and the pre-flight alone (of the project's
    train_gpt.py: does it accept the data?); {} where it does."""
    data, path = folder / name, folder / f"artifact_{name}.ptz"
    settings = dict(DATA_PATH=str(data), TOKENIZER_PATH=str(folder / "tokenizer.model"), ARTIFACT_PATH=str(path))
    base = (
        environ
        | TINY
        | dict(VOCAB_SIZE=str(vocab))
        | geometry.settings(doc_mode(environ))
        | settings
        | dict(LOG_DIR=str(folder / "logs"))
    )
    tokens = torch.from_numpy(np.fromfile(data / "fineweb_val_000000.bin", "<u2", offset=4 * SHARD_HEADER_INTS))
    tokens = tokens.to(torch.int64)
    total = tokens.numel() - 1
    args = T.Hyperparameters.from_env(base | {"RUN_ID": "artifact"})
    if ctx.rank == 0:
        model = tiny_model(T, args, torch.device("cpu"))
        obj = T.quantize_state_dict(model.state_dict(), args, T.parameter_roles(model))
        T.save_artifact(obj, T.artifact_header(args, "raw", model.looping), str(path))
    if dist.is_initialized():
        dist.barrier()
    if only:
        T.preflight(T.Hyperparameters.from_env(base | {"RUN_ID": f"{name}_preflight"}), ctx)
        return {}

    def run(tag: str, upto=None, changed=None, reference=None, **overrides):
        run_id = f"{name}_{tag}"  # unique in this worker's folder: a log is never overwritten
        watcher = Watcher(upto, total, ctx.device, reference)
        log_path = Path(base["LOG_DIR"]) / f"{run_id}.txt"
        error, lines = run_main(T, base | overrides | {"RUN_ID": run_id}, watcher, changed, log_path, tag == "original")
        return watcher, error, lines if ctx.rank == 0 else []

    doc = getattr(args, "ttt_mode", "stream") == "doc"
    watcher, error, lines = run("original")
    found = dict(
        original=(watcher.record, error, lines),
        config={k: getattr(args, k) for k in ("ttt_lr", "ttt_epochs", "ttt_momentum") + DOC_CONFIG * doc},
    )
    if name in INTERPRETED:
        return found
    hurting, error, lines = run("hurting", **HURTING_TTT, **(HURTING_DOC_TTT if doc else {}))
    found |= dict(hurting=(hurting.record, error, lines), probes={})
    # on CUDA, rounding differs run to run; covered: the targets each rank scores
    reference = (watcher.trace, watcher.calls, watcher.covered) if device == "cpu" else None
    spans = document_spans(tokens) if doc else None
    if doc:
        frozen, error, lines = run("frozen", **FROZEN_DOC_TTT)
        found["frozen"] = (frozen.record, error, lines)
        found["isolation"] = isolation_runs(run, tokens, spans, args.vocab_size)
    likely = likely_tokens(merge_records(gather(found["original"][0])), total)
    futures = {} if watcher.artifact is None else extreme_futures(T, args, watcher.artifact, tokens, 1, geometry.window)
    for kind, future in futures.items():  # every rank changes its split the same: rank 0's
        if dist.is_initialized():
            future = future.to(ctx.device)
            dist.broadcast(future, 0)
            futures[kind] = future.cpu()
    for probe, kind in probe_runs(geometry, spans):
        if kind in EXTREMES and kind not in futures:  # the original run never reached score_artifact: blocked anyway
            continue
        changed = changed_from(tokens, probe, kind, likely, args.vocab_size, futures)
        probed, error, _ = run(f"p{probe}{kind}", upto=probe, changed=changed, reference=reference)
        found["probes"][(probe, kind)] = (probed.record, error, probed.leak)
    return found


def isolation_runs(run, tokens: torch.Tensor, spans: list[tuple[int, int]], vocab: int) -> dict:
    """TTT_MODE=doc, DOC_ISOLATION_BATCH documents a batch: main() on the split, then once for each document with its
    tokens (all but its BOS) changed to random ids, no BOS among them, so that every document keeps its place and
    length and every batch its shapes: what another document scored must stay the same, bit for bit (condition 6).
    run: worker_geometry's."""
    batch = dict(TTT_BATCH_SIZE=str(DOC_ISOLATION_BATCH))
    watcher, error, lines = run("isolated", **batch)
    changed = {}
    for d, (start, predictions) in enumerate(spans):
        inner = torch.arange(start + int(tokens[start] == BOS_ID), start + predictions)
        if not len(inner):  # a document of its BOS alone: nothing to change
            continue
        altered = tokens.clone()
        ids = torch.randint(BOS_ID + 1, vocab, (len(inner),), generator=torch.Generator().manual_seed(d))
        altered[inner] = ids
        probed, probed_error, _ = run(f"isolated_doc{d}", changed=altered, **batch)
        changed[d] = (probed.record, probed_error)
    return dict(original=(watcher.record, error, lines), changed=changed, spans=spans, batch=DOC_ISOLATION_BATCH)


def gather(record: dict) -> list[dict]:
    if not dist.is_initialized():
        return [record]
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, record)
    return every


def worker(
    out: Path,
    script: Path,
    device: str,
    broken: bool,
    geometries: list[str],
    folder: Path,
    vocab: int,
    only: bool = False,
) -> None:
    """Each geometry in this process; each rank saves what it observed (out.rankN) and any error of the script.
    only: the pre-flight alone, where the project's train_gpt.py is asked whether it accepts the data (refusals)."""
    faulthandler.dump_traceback_later(WORKER_TIMEOUT_S - 60, exit=True)  # a rank waiting for another: say where
    rank = int(os.environ.get("RANK", "0"))
    target = Path(f"{out}.rank{rank}")
    saved = dict(config_error=None, cannot_check=None, geometries={}, device=device)
    try:
        T = load_script(script)
        missing = missing_interface(T)
    except BaseException as exc:  # SyntaxError, ImportError, whatever its top level raises
        saved["cannot_check"] = unloadable(script, exc)
        torch.save(saved, target)
        return
    if missing:
        saved["cannot_check"] = (
            f"{script} is no copy of this project's train_gpt.py: it has no {', '.join(missing)}, which the check "
            "calls to run its main() and watch what scores each token. Port its evaluation onto a copy of "
            "train_gpt.py (score_windows hands observe the distributions that score) and check that copy"
        )
        torch.save(saved, target)
        return
    if broken:
        T.score_with_ttt = broken_ttt(T)  # score_artifact looks it up by name when it runs
    environ = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    ctx = T.dist_context()
    if device == "cpu":
        ctx = dataclasses.replace(ctx, device=torch.device("cpu"))
        T.dist_context = lambda: ctx  # a CPU check on a machine with a GPU stays on the CPU
    T.init_distributed(ctx)  # one process group for every run of this worker
    initialize = T.init_distributed
    # Each run's init_distributed meets the others at a barrier, as the process group's rendezvous would: no rank
    # starts its log before every rank's pre-flight has checked that it does not exist.
    T.init_distributed = lambda ctx: dist.barrier() if dist.is_initialized() else initialize(ctx)
    for name in geometries:
        geometry = (GEOMETRIES | INTERPRETED).get(name) or user_geometry(environ, device)
        try:
            tiny_args(T, environ, geometry, vocab)
        except T.ConfigError as exc:  # as train_gpt.py would refuse it: the user's to fix, not a verdict
            saved["config_error"] = str(exc)
            break
        try:
            saved["geometries"][name] = worker_geometry(T, ctx, folder, name, environ, geometry, device, vocab, only)
        except T.ConfigError as exc:  # it refused the run: the check compares the project's train_gpt.py (refusals)
            saved["geometries"][name] = dict(refused=str(exc))
        except BaseException as exc:  # the script's failure outside a run, or the check's own: on stderr in full
            traceback.print_exc()
            saved["geometries"][name] = dict(error="the check could not run the script: " + short_error(exc))
    torch.save(saved, target)
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


# ==== The check: workers, then the conditions on what they observed ================================================


@dataclasses.dataclass
class Split:
    tokens: torch.Tensor
    bytes: torch.Tensor  # (N,) bytes of each token as the target, counted here
    total_bytes: int  # the bytes of the split's targets (all but its first token): its decoded bytes


def make_data(folder: Path, geometries: dict[str, Geometry], data: UserData | None = None) -> dict[str, Split]:
    """The tokenizer and a validation shard per geometry in folder; each split's tokens and bytes, counted from the
    decoded text. With the user's data: their tokenizer, and each split the first tokens of DATA_PATH's, with the
    same prefix of its byte sidecars (CaseOps), which must count each document's bytes as its decoded text does."""
    if data is None:
        sp = make_tokenizer(folder / "tokenizer.model")
    else:
        import sentencepiece as spm

        shutil.copyfile(data.tokenizer_path, folder / "tokenizer.model")
        sp = spm.SentencePieceProcessor(model_file=str(folder / "tokenizer.model"))
    splits = {}
    for name, geometry in geometries.items():
        if data is not None and data.tokens < geometry.tokens:
            raise CheckError(f"DATA_PATH={data.data_path}: its validation split holds {data.tokens} tokens, the "
                             f"geometry {name} needs {geometry.tokens}.")  # fmt: skip
        tokens = split_tokens(sp, geometry.tokens) if data is None else data.prefix(geometry.tokens)
        write_shard(folder / name / "fineweb_val_000000.bin", tokens)
        try:
            counted, total = decoded_bytes(sp, tokens)
        except caseops.CaseOpsError as exc:
            raise CheckError(f"DATA_PATH={data.data_path}: its tokens do not decode to CaseOps text ({exc}): "
                             "TOKENIZER_PATH must be the tokenizer its shards were made with.") from None  # fmt: skip
        if data is not None and data.sidecars:
            sidecar = data.prefix(geometry.tokens, sidecars=True)
            write_shard(folder / name / "fineweb_val_bytes_000000.bin", sidecar)
            check_sidecars(data, tokens, sidecar, counted, sp.bos_id())
        splits[name] = Split(tokens, counted, total - int(counted[0]))
    return splits


def check_sidecars(data: UserData, tokens: torch.Tensor, sidecar: torch.Tensor, counted: torch.Tensor, bos: int):
    """The byte sidecars (what the checked script divides by) count each document of the split as many bytes as its
    decoded text holds: else the data, not the script, is wrong, and no verdict on the script would mean anything."""
    document = torch.cumsum(tokens == bos, 0)  # the document of each token (its BOS included)
    theirs, ours = (torch.bincount(document, weights=c.double()).long() for c in (sidecar, counted))
    wrong = (theirs != ours).nonzero()
    if len(wrong):
        d, start = int(wrong[0]), int((document == wrong[0]).nonzero()[0])
        raise CheckError(
            f"DATA_PATH={data.data_path}: its byte sidecars ({data.sidecars[0].name}, ...) count {int(theirs[d])} "
            f"bytes for the document at token {start}, whose decoded text holds {int(ours[d])} ({len(wrong)} of the "
            f"{len(ours)} documents in its first {len(tokens)} tokens differ): rebuild them (data/README.md: CaseOps)."
        )


def run_workers(
    processes: int,
    environ: dict[str, str],
    script: Path = ROOT / "train_gpt.py",
    device: str = "cpu",
    broken: bool = False,
    geometries: list[str] | None = None,
    loss: str = "torch",
) -> dict:
    """The worker in `processes` processes (gloo on the CPU, NCCL on CUDA); what every rank observed, merged per
    geometry with the split's tokens and bytes. loss "triton" on a CPU: the Triton kernel under TRITON_INTERPRET=1.
    The split: a prefix of DATA_PATH's when the environment sets it (not for the interpreted geometry: the kernel's
    interpreter would take minutes a run over a real vocabulary), else one made here. Raises CannotCheck for a script
    the worker cannot run, CheckError for settings or data that it and the project's train_gpt.py both refuse; a
    geometry whose data only the script refuses holds `refused` (condition 0)."""
    chosen = geometries if isinstance(geometries, dict) else resolve_geometries(environ, device, geometries)
    data = None if set(chosen) <= set(INTERPRETED) else user_data(environ)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        splits = make_data(folder, chosen, data)
        vocab = data.vocab if data else VOCAB
        saved, failure = launch(processes, environ, script, device, broken, list(chosen), folder, vocab, loss)
        first = saved[0] or {}
        if first.get("cannot_check"):
            raise CannotCheck(first["cannot_check"])
        if first.get("config_error"):
            raise CheckError(first["config_error"])
        refused = {name: r["refused"] for name, r in first["geometries"].items() if "refused" in r} if first else {}
        ours = {}  # the project's train_gpt.py on the refused geometries: {name: its refusal, or None: it accepts}
        if refused and Path(script).read_bytes() == (ROOT / "train_gpt.py").read_bytes():
            ours = refused
        elif refused:
            reference, why = launch(processes, environ, ROOT / "train_gpt.py", device, False, list(refused), folder,
                                    vocab, loss, only=True)  # fmt: skip
            ours = project_refusals(script, refused, reference[0], why)
    for name, message in refused.items():
        if ours[name] is not None:  # the settings' or the data's: no verdict on the script
            also = "" if ours[name] == message else f" (the project's train_gpt.py refuses it too: {ours[name]})"
            raise CheckError(f"{script.name} refuses the run on the check's copy of the data: {message}{also}")
    merged = merge(saved, splits, device, failure)
    for name, message in refused.items():
        merged[name]["refused"] = (
            f"{script.name} refuses the run on the check's copy of the data, which the project's train_gpt.py accepts "
            f"with the same settings: {message}"
        )
    return merged


def project_refusals(script: Path, refused: dict[str, str], saved: dict | None, failure: str | None) -> dict:
    """{geometry: the project's train_gpt.py's refusal of the data the script refused, or None where it accepts it},
    from its pre-flight worker's rank 0; CheckError where that worker gave no answer."""
    answers = {} if saved is None else saved["geometries"]
    ours = {}
    for name, message in refused.items():
        answer = answers.get(name)
        if saved is not None and saved["config_error"]:
            ours[name] = saved["config_error"]
        elif answer == {} or (answer and "refused" in answer):
            ours[name] = answer.get("refused")
        else:
            why = failure or (answer or {}).get("error") or "no answer"
            raise CheckError(f"{script.name} refuses the run on the check's copy of the data ({name}): {message} "
                             f"(the project's train_gpt.py could not be run on it to compare: {why})")  # fmt: skip
    return ours


def launch(
    processes: int,
    environ: dict[str, str],
    script: Path,
    device: str,
    broken: bool,
    names: list[str],
    folder: Path,
    vocab: int,
    loss: str,
    only: bool = False,
) -> tuple[list[dict | None], str | None]:
    """The worker on the data in folder: what each rank saved (None: nothing), and how it failed (None: exit 0)."""
    out = folder / ("preflight.pt" if only else "observed.pt")
    command = [sys.executable, __file__, "--worker", str(out), "--script", str(script), "--device", device]
    command += ["--geometries", ",".join(names), "--folder", str(folder)] + ["--broken"] * broken
    command += ["--vocab", str(vocab)] + ["--preflight-only"] * only
    if processes > 1:
        command[1:1] = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]
    env = {k: v for k, v in environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env |= dict(OMP_NUM_THREADS="1")
    if device == "cpu":
        env |= dict(LOSS_IMPL=loss) | (dict(TRITON_INTERPRET="1") if loss == "triton" else {})
    try:
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=WORKER_TIMEOUT_S)
        failure = None if result.returncode == 0 else f"exit {result.returncode}: {last_line(result.stderr)}"
    except subprocess.TimeoutExpired:
        failure = f"the worker ran past {WORKER_TIMEOUT_S} s (a rank waiting for another?)"
    saved = []
    for rank in range(processes):
        path = Path(f"{out}.rank{rank}")
        saved.append(torch.load(path, weights_only=False) if path.is_file() else None)
    return saved, failure


def last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(nothing on stderr)"


def resolve_geometries(environ: dict[str, str], device: str, names: list[str] | None = None) -> dict[str, Geometry]:
    """{name: geometry} of the names (all: None), the user's when the environment sets one of GEOMETRY_NAMES."""
    user = user_geometry(environ, device)
    known = dict(GEOMETRIES) | ({"user": user} if user else {})
    names = list(known) if names is None else names
    unknown = [n for n in names if n not in known]
    strange = [n or "''" for n in names if n not in GEOMETRY_CHOICES]
    if strange or not names:  # every name --help lists
        raise CheckError(f"--geometries {','.join(names)}: {', '.join(strange) or 'none'} not one of "
                         f"{', '.join(GEOMETRY_CHOICES)}.")  # fmt: skip
    if unknown:  # user, which the environment does not make
        raise CheckError(f"--geometries {','.join(names)}: user is the geometry of {', '.join(GEOMETRY_NAMES[:-1])} "
                         f"or {GEOMETRY_NAMES[-1]}, and the environment sets none of them: set one, or leave user "
                         "out.")  # fmt: skip
    return {n: known[n] for n in names}


def merge_records(records: list[dict]) -> dict:
    """Every rank's observations of a run as one (positions, log-probabilities) pair per path observed."""
    joined = {}
    for kind in sorted({k for record in records for k in record}):
        pieces = [piece for record in records for piece in record.get(kind, []) if len(piece[0])]
        widths = {lp.shape[-1] for _, lp in pieces}
        if not pieces or len(widths) > 1:  # rows of different widths are no distributions over one vocabulary
            joined[kind] = (torch.zeros(0, dtype=torch.int64), torch.zeros(0, VOCAB))
            continue
        joined[kind] = (torch.cat([p for p, _ in pieces]), torch.cat([lp for _, lp in pieces]))
    return joined


def merge(saved: list[dict | None], splits: dict[str, Split], device: str, failure: str | None) -> dict:
    """{geometry: result}; a result holds `error` where the worker or the script failed for the whole geometry."""
    merged = {}
    missing = [r for r, s in enumerate(saved) if s is None]
    for name, split in splits.items():
        result = dict(device=device, tokens=split.tokens, bytes=split.bytes, total_bytes=split.total_bytes)
        ranks = [s["geometries"].get(name) for s in saved if s is not None]
        error = next((r["error"] for r in ranks if r and "error" in r), None)
        if not missing and ranks and all(r is not None and "refused" in r for r in ranks):
            merged[name] = result  # run_workers says why (condition 0)
            continue
        if missing or any(r is None for r in ranks) or error:
            result["error"] = error or f"the worker failed ({failure or 'no result from ranks ' + str(missing)})"
            merged[name] = result
            continue
        for run in [r for r in ("original", "hurting", "frozen") if r in ranks[0]]:
            result[run] = (
                merge_records([r[run][0] for r in ranks]),
                ranks[0][run][2],
                next((r[run][1] for r in ranks if r[run][1]), None),
            )
        result["probes"] = None if "probes" not in ranks[0] else {
            key: (merge_records([r["probes"][key][0] for r in ranks]),
                  *(next((r["probes"][key][i] for r in ranks if r["probes"][key][i]), None) for i in (1, 2)))
            for key in ranks[0].get("probes", {})
        }  # fmt: skip
        result["config"] = ranks[0]["config"]
        if "isolation" in ranks[0]:  # TTT_MODE=doc
            result["isolation"] = merge_isolation([r["isolation"] for r in ranks])
        merged[name] = result
    return merged


def merge_isolation(ranks: list[dict]) -> dict:
    """Every rank's isolation runs (isolation_runs') as one: each run's records merged, its first error kept."""
    first = ranks[0]
    runs = {d: [r["changed"][d] for r in ranks] for d in first["changed"]}
    return dict(
        first,
        original=(
            merge_records([r["original"][0] for r in ranks]),
            first["original"][2],
            next((r["original"][1] for r in ranks if r["original"][1]), None),
        ),
        changed={
            d: (merge_records([r for r, _ in run]), next((e for _, e in run if e), None)) for d, run in runs.items()
        },
    )


def by_position(observed: tuple[torch.Tensor, torch.Tensor] | None) -> dict[int, torch.Tensor]:
    """{position: its first observed distribution}."""
    rows = {}
    if observed is None:
        return rows
    positions, logp = observed
    for position, row in zip(positions.tolist(), logp):
        rows.setdefault(position, row)
    return rows


def difference(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest |a - b| of two log-probability rows; equal entries (two -inf: probability 0 in both) are 0, never
    NaN; a NaN anywhere is inf."""
    if a.shape != b.shape:
        return math.inf
    diff = torch.where(a == b, torch.zeros_like(a), (a - b).abs())
    diff = torch.where(torch.isnan(diff), torch.full_like(diff, math.inf), diff)
    return float(diff.max()) if diff.numel() else 0.0


def causal_differences(result: dict, path: str) -> list[tuple[int, str, int, float, str]]:
    """(probe, its kind, target, the largest |difference| of its log-probabilities from the original run's, why) for
    every target at or before each probe that the original run scored; inf where the changed run did not score it."""
    original = by_position(result["original"][0].get(path))
    found = []
    for (probe, kind), (changed_run, error, _) in result["probes"].items():
        changed = by_position(changed_run.get(path))
        for position in range(1, probe + 1):
            if position in original:
                row = changed.get(position)
                if row is None:
                    why = f"the {path} path was not observed before the probe" if not changed else "not observed"
                    why += f" (the changed run raised {error})" if error else ""
                    found.append((probe, kind, position, math.inf, why))
                else:
                    found.append((probe, kind, position, difference(row, original[position]), ""))
    return found


def updates_before_scoring(result: dict, path: str) -> list[tuple[int, str, str]]:
    """(probe, its kind, the update) of each changed run whose first update that differed from the original run's,
    while a target up to the probe was still to be scored, came on this path (or before any path began)."""
    found = []
    for (probe, kind), (_, _, leak) in result["probes"].items():
        if leak is not None and leak[0] in (path, None):
            found.append((probe, kind, leak[2]))
    return found


def reported(lines: list[str]) -> dict[str, list[tuple[float, float]]]:
    """{path: [(val_loss, val_bpb) of each final_..._exact line]}."""
    found = {}
    for line in lines:
        match = LINE.fullmatch(line.strip())
        if match:
            found.setdefault(match[1], []).append((float(match[2]), float(match[3])))
    return found


def observed_score(rows: dict[int, torch.Tensor], tokens: torch.Tensor, target_bytes: torch.Tensor):
    """(val_loss, val_bpb) of the watched distributions: minus the targets' mean log-probability, and in bits per byte
    over the bytes counted here."""
    if not rows:
        return math.nan, math.nan
    loss_sum = -sum(float(row[tokens[position]]) for position, row in rows.items())
    count = len(rows)
    num_bytes = sum(int(target_bytes[position]) for position in rows)
    return loss_sum / count, loss_sum / count / math.log(2.0) * count / max(num_bytes, 1)


def close(reported_value: float, observed_value: float, tolerance: float) -> bool:
    if reported_value == observed_value:  # inf for inf: a target scored with probability 0
        return True
    return abs(reported_value - observed_value) <= tolerance * max(1.0, abs(observed_value)) + 1e-8


def report_matches(lines, observed, path, tokens, target_bytes, tolerance) -> tuple[bool, str]:
    found = reported(lines).get(path, [])
    if len(found) != 1:
        shown = f" ({', '.join(f'{loss:.8f} {bpb:.8f}' for loss, bpb in found)})" if found else ""
        return False, f"{len(found)} final_..._{path}_exact lines in the log{shown}"
    rows = by_position(observed.get(path))
    if not rows:
        return False, f"the {path} path was not observed"
    loss, bpb = observed_score(rows, tokens, target_bytes)
    holds = close(found[0][0], loss, tolerance) and close(found[0][1], bpb, tolerance)
    return holds, f"reported {found[0][0]:.8f} {found[0][1]:.8f}, observed {loss:.8f} {bpb:.8f}"


def target_logp(observed: dict, path: str, positions: list[int], tokens: torch.Tensor) -> torch.Tensor | None:
    """(n,) fp64 the log-probability of each target at `positions` in the path's first observed distribution of it;
    None where one of them was not observed there."""
    rows = by_position(observed.get(path))
    if any(p not in rows for p in positions):
        return None
    return torch.tensor([float(rows[p][tokens[p]]) for p in positions], dtype=torch.float64)


def mixture_loss(a: torch.Tensor, b: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """(W,) minus the mean log-probability of the targets under w * p_a + (1 - w) * p_b, for each w of weights."""
    mixed = torch.logaddexp(a[None] + weights.log()[:, None], b[None] + torch.log1p(-weights)[:, None])
    return -mixed.mean(-1)


def mixture_weights(a: torch.Tensor, b: torch.Tensor, loss: float) -> list[float]:
    """Every w in (0, 1) whose mixture w * p_a + (1 - w) * p_b scores `loss` (at most two: the mixture's loss is
    convex in w), by bisection between the points of a grid where the loss crosses it."""
    grid = torch.linspace(0, 1, MIXTURE_GRID + 1, dtype=torch.float64)[1:-1]
    above = (mixture_loss(a, b, grid) - loss).sign()
    found = []
    for k in (above[:-1] * above[1:] <= 0).nonzero().flatten().tolist():
        lo, hi = float(grid[k]), float(grid[k + 1])
        for _ in range(60):
            mid = (lo + hi) / 2
            same = float(mixture_loss(a, b, torch.tensor([mid], dtype=torch.float64))[0]) - loss
            lo, hi = (mid, hi) if (same > 0) == (float(above[k]) > 0) else (lo, mid)
        found.append((lo + hi) / 2)
    return found


def mixture_explanation(
    result: dict, path: str, losses: list[float], tolerance: float
) -> tuple[str, tuple[float, str]] | None:
    """Where the path's reported val_loss is not its watched distributions': is it, in the original run and the run
    with a hurting TTT, the loss of one mixture w * p(path) + (1 - w) * p(other path) with the same w in (0, 1), each
    distribution one the observer was handed (the adapted model's and a frozen copy's, which scores as the sliding
    windows do)? The runs' distributions of the path must differ, so that the second run pins w on its own: a weight
    fitted to the split's score would differ between them. (The evidence, (w, the other path)), or None."""
    tokens, runs = result["tokens"], [result["original"][0], result["hurting"][0]]
    positions = [sorted(by_position(observed.get(path))) for observed in runs]
    for other in [p for p in PATHS if p != path]:
        pairs = [
            (target_logp(observed, path, where, tokens), target_logp(observed, other, where, tokens))
            for observed, where in zip(runs, positions)
        ]
        if any(a is None or b is None for a, b in pairs) or len(pairs[0][0]) != len(pairs[1][0]):
            continue
        if torch.equal(pairs[0][0], pairs[1][0]) and torch.equal(pairs[0][1], pairs[1][1]):
            continue  # the same distributions in both runs: the second run says nothing of w
        for w in mixture_weights(*pairs[0], losses[0]):
            second = float(mixture_loss(*pairs[1], torch.tensor([w], dtype=torch.float64))[0])
            if close(losses[1], second, tolerance):
                return (
                    f": in both runs the loss of {w:.4f} * p({path}) + {1 - w:.4f} * p({other}), one weight whichever "
                    f"the TTT (not fitted to the split's score), of two distributions each watched and checked on its "
                    f"own path (with a hurting TTT: {second:.8f})",
                    (w, other),
                )
    return None


def report_verdict(result: dict, path: str, tolerance: float) -> tuple[bool | None, str, tuple[float, str] | None]:
    """reported_is_observed from the original run and the run with a hurting TTT: True, False, or None where the
    check cannot verify it (the docstring's condition 4); its evidence; and (w, the other path) where the report is
    the loss of that mixture, else None."""
    tokens, target_bytes = result["tokens"], result["bytes"]
    told, seen, others, parts = [], [], [], []  # per run: reported (loss, bpb), observed (loss, bpb), {path: loss}
    settings = HURTING_TTT | (HURTING_DOC_TTT if result["config"].get("ttt_mode") == "doc" else {})
    hurting = f"with a hurting TTT ({' '.join(f'{k}={v}' for k, v in settings.items())}): "
    for run, label in (("original", ""), ("hurting", hurting)):
        observed, lines, error = result[run]
        raised = f" (it raised {error})" if error and run == "hurting" else ""
        found = reported(lines).get(path, [])
        rows = by_position(observed.get(path))
        if len(found) != 1:
            shown = f" ({', '.join(f'{loss:.8f} {bpb:.8f}' for loss, bpb in found)})" if found else ""
            parts.append(f"{label}{len(found)} final_..._{path}_exact lines in the log{shown}{raised}")
            return False, "; ".join(parts), None
        if not rows:
            return False, "; ".join(parts + [f"{label}the {path} path was not observed{raised}"]), None
        loss, bpb = observed_score(rows, tokens, target_bytes)
        parts.append(f"{label}reported {found[0][0]:.8f} {found[0][1]:.8f}, observed {loss:.8f} {bpb:.8f}{raised}")
        told.append(found[0])
        seen.append((loss, bpb))
        others.append({p: observed_score(by_position(observed.get(p)), tokens, target_bytes)[0] for p in PATHS})
    evidence = "; ".join(parts)
    if any(not close(r[1], r[0] * o[1] / o[0], tolerance) for r, o in zip(told, seen) if 0 < o[0] < math.inf):
        return False, evidence + ": the reported val_bpb is not its val_loss over the bytes counted here", None
    matches = [close(r[0], o[0], tolerance) for r, o in zip(told, seen)]
    if all(matches):
        return True, evidence, None
    if any(matches):
        why = ": the watched pass is reported in one run, another score in the other (a best of two?)"
        return False, evidence + why, None
    for (loss, _), scores in zip(told, others):
        other = next((p for p in PATHS if p != path and close(loss, scores[p], tolerance)), None)
        if other is not None:
            return False, evidence + f": the {path} line reports the {other} path's score", None
    if close(told[0][0], told[1][0], tolerance) and not close(seen[0][0], seen[1][0], tolerance):
        why = ": the reported score stays where the watched distributions move: it is not theirs"
        return False, evidence + why, None
    mixture_tolerance = max(tolerance, MIXTURE_TOLERANCE * REPORT_RTOL_FP32)  # on CUDA, bf16's
    mixture = mixture_explanation(result, path, [loss for loss, _ in told], mixture_tolerance)
    if mixture is not None:
        return True, evidence + mixture[0], mixture[1]
    return (
        None,
        (
            f"cannot verify: {evidence}: the script scores this path with distributions it does not hand the observer "
            "(a cache, a copy's output, a mixture) and no mixture of two watched ones explains both runs, so the check "
            "cannot see whether they are causal; hand score_windows' observe the distributions that score"
        ),
        None,
    )


def recognised_report(result: dict, path: str, found: set, evidence: str, tolerance: float) -> tuple[bool | None, str]:
    """reported_is_observed on the interpreted geometry where the report is no watched pass. It runs no hurting TTT,
    so it cannot tell a mixture on its own: it follows what the torch loss's geometries found for the path (found,
    conditions' rules). The loss of a mixture they recognised, w * p(path) + (1 - w) * p(other) of its own watched
    distributions with their w, holds; else a rule they could not see (None in found) cannot be verified; else the
    report is misreported and fails."""
    tokens, target_bytes = result["tokens"], result["bytes"]
    observed, lines, _ = result["original"]
    told = reported(lines).get(path, [])
    where = sorted(by_position(observed.get(path)))
    seen_loss, seen_bpb = observed_score(by_position(observed.get(path)), tokens, target_bytes)
    mixture_tolerance = max(tolerance, MIXTURE_TOLERANCE * REPORT_RTOL_FP32)  # w carries a rounded report's error
    for w, other in sorted(rule for rule in found if rule is not None) if len(told) == 1 and where else []:
        a, b = target_logp(observed, path, where, tokens), target_logp(observed, other, where, tokens)
        if a is None or b is None or not 0 < seen_loss < math.inf:
            continue
        mixed = float(mixture_loss(a, b, torch.tensor([w], dtype=torch.float64))[0])
        loss, bpb = told[0]
        if close(loss, mixed, mixture_tolerance) and close(bpb, loss * seen_bpb / seen_loss, tolerance):
            return True, (
                f"{evidence}: the loss of {w:.4f} * p({path}) + {1 - w:.4f} * p({other}) of its watched distributions "
                f"({mixed:.8f}), the mixture the torch loss's geometries recognised"
            )
    if None in found:
        return None, f"cannot verify: {evidence}, which could not see the rule that scores this path"
    return False, evidence


def isolated(result: dict, tolerance: float, report_tolerance: float) -> tuple[bool, str]:
    """Condition 6 (TTT_MODE=doc): nothing passes from one document to another but by the phases. The run of
    DOC_ISOLATION_BATCH documents a batch scores every target once and reports what it scored; and with any one
    document's tokens changed, the distribution of every target of another document stays the same (bit for bit on a
    CPU), but for the documents of later phases, which start from a model trained on it."""
    iso, tokens, config = result["isolation"], result["tokens"], result["config"]
    spans, (observed, lines, error) = iso["spans"], iso["original"]
    runs, targets = f"the runs of {iso['batch']} documents a batch", tokens.numel() - 1
    positions = observed.get("ttt", (torch.zeros(0, dtype=torch.int64), None))[0]
    counts = torch.bincount(positions.clamp(0, targets + 1), minlength=targets + 2)
    if error or len(positions) != targets or not bool((counts[1 : targets + 1] == 1).all()):
        raised = f"; it raised {error}" if error else ""
        return False, f"{runs}: {int((counts[1 : targets + 1] > 0).sum())} of {targets} targets scored{raised}"
    honest, evidence = report_matches(lines, observed, "ttt", tokens, result["bytes"], report_tolerance)
    if not honest:
        return False, f"{runs}: {evidence}"
    phase = doc_phases(len(spans), config["phased_ttt_prefix_docs"], config["phased_ttt_num_phases"])
    owner = {start + k: d for d, (start, predictions) in enumerate(spans) for k in range(1, predictions + 1)}
    original, compared, moved = by_position(observed.get("ttt")), 0, []
    for d, (record, raised) in iso["changed"].items():
        changed = by_position(record.get("ttt"))
        for target, row in original.items():
            other = owner[target]
            if other == d or phase[other] > phase[d]:
                continue
            compared += 1
            diff = difference(changed[target], row) if target in changed else math.inf
            if diff > tolerance:
                moved.append((d, target, other, diff, raised))
    bound = "bit for bit" if tolerance == 0 else f"within {tolerance:.4f} (bf16)"
    if moved:
        d, target, other, diff, raised = moved[0]
        start, predictions = spans[d]
        return False, (
            f"{len(moved)} of {compared} distributions of other documents moved ({runs}); changing document {d} (tokens "
            f"{start + 1}..{start + predictions - 1}) moved target {target} of document {other} by {diff:.3g}"
            + (f" (that run raised {raised})" if raised else "")
        )
    return True, (
        f"{runs}: every target scored once and reported; {len(iso['changed'])} documents changed one at a time, "
        f"{compared} distributions of the others (not of later phases: {max(phase) + 1 if phase else 0} phase(s)) "
        f"compared {bound}"
    )


def blocked(result: dict, path: str) -> dict[str, tuple[bool, str]]:
    why = result.get("error") or result["refused"]
    names = ["causal_score_before_update", "single_pass", "normalized", "reported_is_observed"]
    return {name: (False, f"blocked: {why}") for name in names + (["ttt_adapts"] if path == "ttt" else [])}


def conditions(
    result: dict, path: str, allow_no_adaptation: bool = False, rules: dict[str, set] | None = None
) -> dict[str, tuple[bool | None, str]]:
    """{condition: (holds, evidence)} of one path in one geometry, from the worker's observations; holds is None where
    the check cannot verify it. rules: {path: what the torch loss's geometries found its report to be where it is no
    watched pass: (w, the other path) for a mixture they recognised, None where they could not see the rule}; a
    torch geometry adds to it, the interpreted Triton geometry (no run with a hurting TTT to tell) follows it."""
    if result.get("error") or result.get("refused"):
        return blocked(result, path)
    cuda = result["device"] == "cuda"
    tolerance = BF16_LOGP_TOLERANCE if cuda else 0.0
    tokens, target_bytes = result["tokens"], result["bytes"]
    observed, lines, error = result["original"]
    raised = f"; the original run raised {error}" if error else ""
    targets = tokens.numel() - 1
    positions = observed.get(path, (torch.zeros(0, dtype=torch.int64), None))[0]
    counts = torch.bincount(positions.clamp(0, targets + 1), minlength=targets + 2)
    once = len(positions) == targets and bool((counts[1 : targets + 1] == 1).all())
    rows = by_position(observed.get(path))
    num_bytes = sum(int(target_bytes[p]) for p in rows if 0 <= p <= targets)
    single = (
        once and num_bytes == result["total_bytes"] and not error,
        f"{len(set(positions.tolist()))} targets of the split's {targets} scored, {len(positions)} "
        f"scorings; bytes {num_bytes} of the split's {result['total_bytes']} (decoded here){raised}",
    )
    sums = [float(torch.logsumexp(row, 0)) for row in rows.values()]
    worst_sum = max((abs(s) if s == s else math.inf for s in sums), default=math.inf)
    zero = [p for p, row in rows.items() if 0 <= p <= targets and float(row[tokens[p]]) == -math.inf]
    normalized = (
        worst_sum < 1e-5,
        (f"max |log sum p| {worst_sum:.1e}" if rows else f"the {path} path was not observed")
        + (f"; {len(zero)} target(s) scored with probability 0 (first: {zero[0]}): an infinite loss" if zero else ""),
    )

    report_tolerance = BF16_LOGP_TOLERANCE if cuda else REPORT_RTOL_FP32
    honest, evidence = report_matches(lines, observed, path, tokens, target_bytes, report_tolerance)
    if result.get("probes") is None:  # the interpreted Triton loss: the conditions a kernel can break
        evidence += "; causality, adaptation and the hurting TTT are checked with the torch loss"
        if not honest:
            found = (rules or {}).get(path, set())
            honest, evidence = recognised_report(result, path, found, evidence, report_tolerance)
        return {"single_pass": single, "normalized": normalized, "reported_is_observed": (honest, evidence)}
    differences = causal_differences(result, path)
    leaks = [d for d in differences if d[3] > tolerance]
    worst = max((d[3] for d in differences), default=math.inf)
    bound = "bit for bit" if tolerance == 0 else f"within {tolerance:.4f} (bf16)"
    early = updates_before_scoring(result, path)
    if not rows:
        causal_evidence = f"the {path} path was not observed{raised}"
    elif early:
        probe, kind, what = early[0]
        causal_evidence = (
            f"{len(early)} of {len(result['probes'])} probes updated a model on tokens from the probe on before "
            f"scoring every target up to it; probe {probe} ({kind}): {what}; {len(leaks)} of {len(differences)} "
            f"distributions moved"
        )
    elif not leaks:
        causal_evidence = (
            f"{len(differences)} distributions at or before the changed position, {len(result['probes'])} probes, "
            f"compared {bound}; largest difference {worst:.3g}"
        )
    else:
        probe, kind, position, diff, why = leaks[0]
        causal_evidence = f"{len(leaks)} of {len(differences)} compared {bound}; " + (
            f"probe {probe} ({kind}): target {position}: {why}"
            if why
            else f"tokens changed from {probe} ({kind}) moved the distribution of target {position} by {diff:.3g}"
        )
    causal = (bool(differences) and not leaks and not early, causal_evidence)
    honest, evidence, mixture = report_verdict(result, path, report_tolerance)
    if rules is not None and (honest is None or mixture is not None):  # what the interpreted geometry follows
        rules.setdefault(path, set()).add(mixture)
    found = {
        "causal_score_before_update": causal,
        "single_pass": single,
        "normalized": normalized,
        "reported_is_observed": (honest, evidence),
    }
    doc = result["config"].get("ttt_mode") == "doc"
    if path == "ttt" and doc:
        found["documents_isolated"] = isolated(result, tolerance, report_tolerance)
    if path == "ttt":
        # the split scored without adaptation: by the sliding windows, or (TTT_MODE=doc: each document alone, the
        # sliding windows see across them) by the TTT path with its adapters and phases frozen
        unadapted = by_position(result["frozen"][0].get("ttt") if doc else observed.get("sliding_window"))
        frozen = " ".join(f"{k}={v}" for k, v in FROZEN_DOC_TTT.items())
        against = f"those of a run with no step ({frozen})" if doc else "the sliding windows'"
        moved = [p for p, row in rows.items() if p in unadapted and difference(row, unadapted[p]) > tolerance]
        adapted = len(moved) > 0
        found["ttt_adapts"] = (
            adapted or allow_no_adaptation,
            f"{len(moved)} of {len(rows)} distributions differ from {against} (config {result['config']})"
            + (
                ""
                if adapted
                else ": TTT changed nothing, so causality was checked on a model that never trained"
                + (" (allowed by --allow-no-adaptation)" if allow_no_adaptation else "")
            ),
        )
    return found


def loss_paths(device: str, processes: tuple[int, ...]) -> list[tuple[int, str]]:
    """(processes, loss) to run: every process count with the torch loss; on a CPU with Triton installed also the
    Triton kernel in its interpreter (one process: it is slow); on CUDA the environment's LOSS_IMPL."""
    if device == "cuda":
        return [(n, "env") for n in processes]
    runs = [(n, "torch") for n in processes]
    if importlib.util.find_spec("triton") is not None:
        runs.append((1, "triton"))
    return runs


def check(
    environ: dict[str, str],
    script: Path = ROOT / "train_gpt.py",
    processes: tuple[int, ...] = (1, 2),
    device: str = "cpu",
    broken: bool = False,
    allow_no_adaptation: bool = False,
    geometries: list[str] | None = None,
    losses: list[tuple[int, str]] | None = None,
) -> tuple[list[str], int]:
    """The check's lines (one a loss path, geometry, scoring path, condition and process count, each ok or FAIL) and
    how many failed. Raises CheckError for what the user must fix first."""
    if device == "cuda" and not torch.cuda.is_available():
        raise CheckError("--device cuda: no CUDA device here (torch.cuda.is_available() is False): run it on a GPU "
                         "machine, or leave --device out for the CPU check.")  # fmt: skip
    if not Path(script).is_file():
        raise CheckError(f"--script {script}: no such file: point it at a copy of train_gpt.py.")
    if Path(script).suffix != ".py":  # a text or a binary was "raises when it is loaded (AttributeError: ...)"
        raise CheckError(f"--script {script}: not a Python file (.py): point it at a copy of train_gpt.py.")
    chosen = resolve_geometries(environ, device, geometries)
    data = user_data(environ)
    if broken and doc_mode(environ):
        raise CheckError("--broken breaks the stream TTT (score_with_ttt): with TTT_MODE=doc it would check the "
                         "script as it is. TTT_MODE=doc's broken copies are tests/test_doc_ttt.py's.")  # fmt: skip
    lines = [f"checking {script} on {device}" + (" with a BROKEN TTT (trains before it scores)" if broken else "")]
    if doc_mode(environ):
        lines.append(
            f"TTT_MODE=doc (a script that has it): causal probes at each document's boundaries, its first chunks' "
            f"and a sample, the script run with TTT_BATCH_SIZE={DOC_CAUSAL_BATCH} (documents in stream order, every "
            f"update compared); "
            f"isolation: TTT_BATCH_SIZE={DOC_ISOLATION_BATCH}, each document changed alone"
        )
    if data is None:
        lines.append(f"data: a validation split made here, tokenizer of {VOCAB} pieces (set DATA_PATH to check yours)")
    else:
        lines.append(
            f"data: DATA_PATH={data.data_path}: a prefix of its validation split of {data.tokens} tokens, as long as "
            f"each geometry's split below; TOKENIZER_PATH={data.tokenizer_path}, VOCAB_SIZE={data.vocab}; bytes "
            + "counted from the decoded text"
            + ("; its byte sidecars, which the script divides by, count the same" if data.sidecars else "")
        )
    for name, g in chosen.items():
        lines.append(
            f"geometry {name}: window {g.window}, stride {g.stride}, chunks of {g.chunk}, {g.tokens} tokens, "
            + (f"TTT_CHUNK_SIZE={g.doc_chunk}" if doc_mode(environ) else f"probes {probes(g)}")
        )
    runs = losses or loss_paths(device, processes)
    if any(loss == "triton" for _, loss in runs):
        g = INTERPRETED["interpreted"]
        lines.append(f"geometry interpreted (the Triton loss under TRITON_INTERPRET=1): window {g.window}, stride "
                     f"{g.stride}, chunks of {g.chunk}, {g.tokens} tokens of a split made here, no probes")  # fmt: skip
    failed = unverified = 0
    rules = {}  # what the torch loss's geometries found of each path's report: the interpreted one follows it
    for count, loss in sorted(runs, key=lambda run: run[1] == "triton"):  # the torch loss first
        observed = run_workers(
            count, environ, script, device, broken, chosen if loss != "triton" else INTERPRETED, loss
        )
        found, failures, unverifiable = judge(count, loss, observed, allow_no_adaptation, rules)
        lines += found
        failed += failures
        unverified += unverifiable
    lines.append(verdict(failed, unverified))
    return lines, failed


def judge(
    count: int, loss: str, observed: dict, allow_no_adaptation: bool = False, rules: dict | None = None
) -> tuple[list[str], int, int]:
    """The lines of one worker run's results ({geometry: result}, from `count` processes with `loss`), how many
    conditions failed and how many cannot be verified. rules: conditions', shared by every run of a check."""
    lines, failed, unverified = [], 0, 0
    for name, result in observed.items():
        where = f"geometry:{name} processes:{count} loss:{loss}"
        if result.get("refused"):  # condition 0: nothing more is checked on this geometry
            lines.append(f"{MARKS[False]} accepts_the_data {where}: {result['refused']}")
            failed += 1
            continue
        for path in PATHS:
            for condition, (holds, evidence) in conditions(result, path, allow_no_adaptation, rules).items():
                failed += holds is False
                unverified += holds is None
                lines.append(f"{MARKS[holds]} {condition} {path} {where}: {evidence}")
    return lines, failed, unverified


def verdict(failed: int, unverified: int) -> str:
    """The check's last line: NOT LEGAL where a condition failed, else cannot verify where one could not be seen."""
    if failed:
        return f"NOT LEGAL: {failed} condition(s) failed" + (f", {unverified} cannot be verified" if unverified else "")
    if unverified:
        return f"cannot verify: {unverified} condition(s) the check cannot observe, none failed"
    return "legal: 0 condition(s) failed"


def parse_processes(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        counts = ()
    if not counts or any(n not in (1, 2, 4, 8) for n in counts):
        raise CheckError(f"--processes {text}: give process counts from 1, 2, 4, 8 (they must divide 8, as "
                         "train_gpt.py's), comma-separated, e.g. --processes 1,2.")  # fmt: skip
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--script", type=Path, default=ROOT / "train_gpt.py", help="the train_gpt.py to check")
    parser.add_argument("--processes", default="1,2", help="process counts to check, of 1, 2, 4, 8 (default: 1,2)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="cuda: the GPU path (docstring)")
    parser.add_argument("--geometries", help="of " + ", ".join(GEOMETRY_CHOICES) + " (default: all)")
    parser.add_argument("--broken", action="store_true", help="check a TTT that trains on each chunk first: must fail")
    parser.add_argument("--allow-no-adaptation", action="store_true", help="pass although TTT changed nothing")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--vocab", type=int, default=VOCAB, help=argparse.SUPPRESS)
    parser.add_argument("--preflight-only", action="store_true", help=argparse.SUPPRESS)
    cli = parser.parse_args()
    geometries = cli.geometries.split(",") if cli.geometries is not None else None
    if cli.worker:
        worker(cli.worker, cli.script, cli.device, cli.broken, geometries, cli.folder, cli.vocab, cli.preflight_only)
        return 0
    try:
        lines, failed = check(
            dict(os.environ),
            cli.script,
            parse_processes(cli.processes),
            cli.device,
            cli.broken,
            cli.allow_no_adaptation,
            geometries,
        )
    except CheckError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except CannotCheck as exc:  # no verdict: the line says why and what it would need
        print(f"cannot check: {exc}")
        return EXIT_CANNOT_CHECK
    print("\n".join(lines))
    return 1 if failed else EXIT_CANNOT_VERIFY if lines[-1].startswith("cannot verify") else 0


if __name__ == "__main__":
    sys.exit(main())
