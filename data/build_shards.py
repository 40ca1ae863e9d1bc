r"""Build training shards from your own text, in the format train_gpt.py reads.

Input: JSONL files (one document per line, in a `text` field; .gz/.xz/.bz2 are read as they are)
or plain text files and folders of them (one document per file). Output, in --output:
fineweb_val_NNNNNN.bin and fineweb_train_NNNNNN.bin (each document is BOS + its tokens, no EOS;
documents run on across shard boundaries, so every shard but the last of a split holds exactly
--shard-tokens tokens) and manifest.json (counts, settings and the sha256 of every file).

  # train a 1024-token tokenizer on the text (the published tokenizer's settings) and shard it:
  python3 data/build_shards.py my_docs.jsonl --output data/datasets/mytext_sp1024 --vocab-size 1024
  # or tokenize with an existing tokenizer, e.g. the published sp1024 one:
  python3 data/build_shards.py my_docs/ --output data/datasets/mytext_sp1024 \
      --tokenizer data/tokenizers/fineweb_1024_bpe.model
  # then train on it:
  DATA_PATH=data/datasets/mytext_sp1024 TOKENIZER_PATH=data/tokenizers/mytext_sp1024.model \
      VOCAB_SIZE=1024 python3 train_gpt.py
  # CaseOps (data/caseops.py: the records' lossless case transform; validation shards get byte sidecars):
  python3 data/build_shards.py my_docs.jsonl --output data/datasets/mytext_sp1024_caseops --vocab-size 1024 --caseops
  # which tokenizer made a folder of shards (the .model files in data/tokenizers and in the folders named):
  python3 data/build_shards.py --which-tokenizer data/datasets/mytext_sp1024 --tokenizers ~/tokenizers

The validation split is chosen per document by a hash of its UTF-8 text (below --val-fraction:
validation), or given outright with --val FILE. So the same text lands in the same split whatever
the tokenizer (val_bpb of two tokenizers is only comparable on the same text), the split does not
depend on input order or worker count, and exact duplicates never straddle it. Or it is the challenge's
rule, --val-docs N: the first N documents of the inputs, in order, are validation and the rest train,
in order (blank documents are skipped; the challenge's have none). On the challenge's documents:

  python3 data/cached_challenge_fineweb.py --variant sp1024 --train-shards 0 --with-docs
  python3 data/build_shards.py data/docs_selected.jsonl --val-docs 50000 \
      --tokenizer data/tokenizers/fineweb_1024_bpe.model --output data/datasets/fineweb10B_sp1024_rebuilt
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import hashlib
import io
import json
import lzma
import multiprocessing
import os
import platform
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import sentencepiece as spm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import caseops  # noqa: E402  (the CaseOps transform and the bytes each token stands for)
import train_gpt  # noqa: E402  (the trainer defines the shard format: its constants, reader and ShardError)

DATA_DIR = Path(__file__).resolve().parent


def write_atomic(path: str | Path, data: bytes) -> None:
    """A temp file beside path, then a rename: no reader sees half a file, and an interrupt leaves none behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def sidecar_path(shard: str | Path) -> Path:
    """The byte sidecar of a validation shard: fineweb_val_bytes_NNNNNN.bin beside fineweb_val_NNNNNN.bin."""
    shard = Path(shard)
    return shard.with_name(shard.name.replace("fineweb_val_", "fineweb_val_bytes_", 1))


def is_sidecar(path: str | Path) -> bool:
    return Path(path).name.startswith("fineweb_val_bytes_")


def write_data_shard(path: str | Path, tokens) -> None:
    """Write tokens (any int array-like, values < 65536) as a shard in train_gpt.py's format (its data section:
    header, then uint16 ids), atomically."""
    array = np.asarray(tokens)
    if array.ndim != 1 or (array.size and (array.min() < 0 or array.max() >= 2**16)):
        raise train_gpt.ShardError(f"{path}: tokens must be a 1-D array of ids in [0, 65536).")
    header = np.zeros(train_gpt.SHARD_HEADER_INTS, dtype="<i4")
    header[:3] = (train_gpt.SHARD_MAGIC, train_gpt.SHARD_VERSION, array.size)
    write_atomic(path, header.tobytes() + array.astype(train_gpt.SHARD_TOKEN_DTYPE).tobytes())


def round_trip(sp: spm.SentencePieceProcessor, samples: list[np.ndarray], docs: int = 32) -> tuple[int, int]:
    """(documents that decode and encode again to their own ids, documents tried). A document is the ids between
    two BOS ids; up to `docs` of them are tried from each sample, spread evenly over it. With the tokenizer that
    made the shards nearly all come back unchanged, with another few do: train_gpt.py's pre-flight makes the same
    test, and retokenize.py and --which-tokenizer use this one."""
    same = tried = 0
    for tokens in samples:
        bos = np.flatnonzero(tokens == sp.bos_id())
        picks = np.linspace(0, len(bos) - 2, min(docs, max(len(bos) - 1, 0))).astype(int)
        for i in np.unique(picks):
            ids = tokens[bos[i] + 1 : bos[i + 1]].tolist()
            same += sp.encode(sp.decode(ids)) == ids
            tried += 1
    return same, tried


# The published FineWeb tokenizers' trainer and normalizer settings, as stored in the model proto of
# fineweb_1024_bpe.model (byte fallback: any byte is representable, so there is never an <unk>;
# split_digits: numbers are spelled digit by digit; no dummy prefix: a document does not start with
# a space). The ids are fixed because the shards store BOS = 1 and the trainer's bpb code relies on it.
TOKENIZER_SETTINGS = dict(
    model_type="bpe",
    character_coverage=0.999,
    byte_fallback=True,
    split_digits=True,
    hard_vocab_limit=False,
    normalization_rule_name="nmt_nfkc",
    add_dummy_prefix=False,
    remove_extra_whitespaces=True,
    pad_id=0,
    bos_id=1,
    eos_id=2,
    unk_id=3,
)
BOS_ID = 1
MIN_VOCAB_SIZE = 4 + 256 + 1  # the specials and the byte-fallback pieces, and at least one merge
MAX_VOCAB_SIZE = 65_536  # shards store uint16 ids
TOKENIZER_SEED = 1337
MAX_SENTENCE_CHARS = 4096  # longer lines are cut into pieces for tokenizer training
DEFAULT_SHARD_TOKENS = 100_000_000  # as the published shards
DEFAULT_VAL_FRACTION = 0.01  # the hash rule's share of validation documents, when --val and --val-docs are not given
DEFAULT_TOKENIZER_TRAIN_BYTES = 500_000_000
BATCH_BYTES = 1 << 20  # text handed to a worker at a time
COMPRESSED_SUFFIXES = {".gz": gzip.open, ".xz": lzma.open, ".bz2": bz2.open}
JSONL_SUFFIXES = {".jsonl", ".ndjson"}


class BuildError(ValueError):
    """Input or settings that cannot be built; the message says what to change."""


# =================================================================================================
# Reading documents
# =================================================================================================


def list_input_files(paths: Iterable[str | Path]) -> list[Path]:
    """Files named, and the files under folders named (sorted, hidden names skipped)."""
    files = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(
                p
                for p in path.rglob("*")
                if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
            if not found:
                raise BuildError(f"{path}: the folder holds no files.")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise BuildError(f"{path}: no such file or folder.")
    return files


def open_text(path: Path):
    opener = COMPRESSED_SUFFIXES.get(path.suffix, open)
    return opener(path, "rt", encoding="utf-8", newline="")


def is_jsonl(path: Path) -> bool:
    name = path.with_suffix("") if path.suffix in COMPRESSED_SUFFIXES else path
    return name.suffix in JSONL_SUFFIXES


def iter_documents(files: Iterable[Path], text_field: str = "text") -> Iterator[str]:
    """Every non-blank document, in file order: JSONL lines' `text_field`, or whole text files."""
    for path in files:
        try:
            with open_text(path) as f:
                if not is_jsonl(path):
                    text = f.read()
                    if text.strip():
                        yield text
                    continue
                for line_number, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    text = json_text(line, text_field, f"{path}:{line_number}")
                    if not isinstance(text, str):
                        raise BuildError(f"{path}:{line_number}: field {text_field!r} is not a string.")
                    if text.strip():
                        yield text
        except UnicodeDecodeError as exc:
            raise BuildError(f"{path}: not UTF-8 text ({exc}). Pass only text or JSONL files.") from None


def json_text(line: str, text_field: str, where: str):
    """The `text_field` of one JSONL line; an error that says which of the three is wrong: the JSON, the object, or
    the field's name."""
    try:
        record = json.loads(line.rstrip("\r\n"))  # its columns then count on this line alone
    except json.JSONDecodeError as exc:
        raise BuildError(
            f"{where}: not valid JSON ({exc.msg.removesuffix(' at')} at column {exc.colno}). A .jsonl file holds one JSON object a line, "
            'such as {"text": "..."}; a file of plain text is one document: name it .txt.'
        ) from None
    if not isinstance(record, dict):
        kind = {list: "array", str: "string", int: "number", float: "number", bool: "boolean"}.get(type(record), "null")
        raise BuildError(f'{where}: a JSON {kind}, not an object such as {{"{text_field}": "..."}}.')
    if text_field not in record:
        fields = ", ".join(map(repr, list(record)[:8])) or "none"
        raise BuildError(
            f"{where}: no {text_field!r} field (its fields: {fields}). Use --text-field to name the field that "
            "holds the text."
        )
    return record[text_field]


def document_digest(text: str) -> bytes:
    """What tells two documents apart: a hash of their UTF-8 text as read (blake2b, as the split's, 16 bytes)."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16, person=b"same-document").digest()


def unit_hash(text: str, purpose: bytes) -> float:
    """A number in [0, 1) fixed by the text; `purpose` makes independent draws (split, sampling)."""
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8, person=purpose).digest()
    return int.from_bytes(digest, "big") / 2**64


def is_validation(text: str, val_fraction: float) -> bool:
    return unit_hash(text, b"val-split") < val_fraction


def normalized_text(sp: spm.SentencePieceProcessor, text: str) -> str:
    """The text that the tokens stand for: the tokenizer's normalization (NFKC, control characters
    dropped, whitespace runs to one space, ends stripped), which is what decoding gives back."""
    return sp.normalize(text).replace("\u2581", " ")


# =================================================================================================
# Tokenizer
# =================================================================================================


def training_lines(texts: Iterable[str]) -> Iterator[str]:
    """SentencePiece trains on lines; newlines become spaces in normalization anyway."""
    for text in texts:
        for line in text.split("\n"):
            line = line.strip()
            for start in range(0, len(line), MAX_SENTENCE_CHARS):
                yield line[start : start + MAX_SENTENCE_CHARS]


def vocab_size_error(vocab_size: int) -> str:
    return (
        f"--vocab-size {vocab_size} must be in (260, 65536]: 4 special tokens and 256 byte-fallback tokens "
        "come first, and shards store uint16 ids. SentencePiece may ask for more when the text has many "
        "distinct characters."
    )


def caseops_settings(use_caseops: bool) -> dict:
    """What a CaseOps tokenizer adds to TOKENIZER_SETTINGS: the control symbols as pieces of their own."""
    return dict(user_defined_symbols=list(caseops.CONTROLS)) if use_caseops else {}


def train_tokenizer_model(texts: Iterable[str], vocab_size: int, num_threads: int = 1, use_caseops=False) -> bytes:
    """A BPE tokenizer trained with TOKENIZER_SETTINGS, as the bytes of its .model file. use_caseops: on the CaseOps
    form of the texts, with the control symbols as pieces."""
    if not MIN_VOCAB_SIZE <= vocab_size <= MAX_VOCAB_SIZE:
        raise BuildError(vocab_size_error(vocab_size))
    spm.set_random_generator_seed(TOKENIZER_SEED)
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=training_lines(map(caseops.encode, texts) if use_caseops else texts),
            model_writer=model,
            vocab_size=vocab_size,
            num_threads=num_threads,
            max_sentence_length=4 * MAX_SENTENCE_CHARS,
            input_sentence_size=0,
            minloglevel=2,
            **TOKENIZER_SETTINGS,
            **caseops_settings(use_caseops),
        )
    except RuntimeError as exc:  # SentencePiece's own message says what is wrong (e.g. vocab too small)
        raise BuildError(f"tokenizer training failed: {exc}") from None
    return model.getvalue()


def train_tokenizer(
    texts: Iterable[str], vocab_size: int, model_path: Path, num_threads: int = 1
) -> spm.SentencePieceProcessor:
    """Train a BPE tokenizer with TOKENIZER_SETTINGS; write it to model_path (atomically)."""
    write_atomic(model_path, train_tokenizer_model(texts, vocab_size, num_threads))
    return load_tokenizer(Path(model_path))


def load_tokenizer(path: Path) -> spm.SentencePieceProcessor:
    if not path.is_file():
        raise BuildError(f"--tokenizer {path}: no such file.")
    sp = spm.SentencePieceProcessor(model_file=str(path))
    if sp.bos_id() != BOS_ID or sp.vocab_size() > 65_536:
        raise BuildError(
            f"{path}: BOS id {sp.bos_id()} and vocabulary {sp.vocab_size()}; shards need BOS id "
            f"{BOS_ID} and at most 65536 tokens. Train one with --vocab-size instead."
        )
    return sp


# =================================================================================================
# Encoding: worker processes turn batches of documents into token arrays
# =================================================================================================

_worker_sp: spm.SentencePieceProcessor | None = None
_worker_caseops = False  # CaseOps: the texts are transformed, and validation documents get byte sidecar values


def init_worker(model_proto: bytes, use_caseops: bool = False) -> None:
    global _worker_sp, _worker_caseops
    _worker_sp = spm.SentencePieceProcessor(model_proto=model_proto)
    _worker_caseops = use_caseops


@dataclass
class EncodedBatch:
    tokens: np.ndarray  # (sum of lengths,) uint16: each document is BOS + its tokens
    lengths: np.ndarray  # (docs,) int64, BOS included
    text_bytes: np.ndarray  # (docs,) int64: UTF-8 bytes of the document as read
    normalized_bytes: np.ndarray  # (docs,) int64: UTF-8 bytes of the text the tokens decode to
    is_val: np.ndarray  # (docs,) bool: the document is in the validation split
    token_bytes: list[np.ndarray | None]  # CaseOps validation documents: the sidecar's values, BOS (0) included


def caseops_token_bytes(sp: spm.SentencePieceProcessor, ids: list[int], text: str, bos: bool = True) -> np.ndarray:
    """The byte sidecar's values of one CaseOps document (BOS, then ids; without bos: the ids alone), checked: the
    tokens decode to the text, and their bytes add up to its UTF-8 length."""
    counts = np.concatenate([[0] if bos else [], caseops.token_bytes(sp, ids)]).astype(np.uint16)
    decoded = caseops.decode(sp.decode(ids), strict=False)
    if decoded != text or int(counts.sum()) != len(text.encode("utf-8")):
        raise BuildError(
            f"a CaseOps document does not decode to its text ({len(text.encode('utf-8'))} bytes, counted "
            f"{int(counts.sum())}; it begins {text[:60]!r}). The tokenizer's normalization changed the transformed "
            "text: report this with the document."
        )
    return counts


def encode_batch(documents: list[tuple[str, bool]]) -> EncodedBatch:
    """Encode (text, is_val) pairs: each document is BOS + its ids; CaseOps validation documents get their byte
    sidecar values."""
    sp, use_caseops = _worker_sp, _worker_caseops
    texts_read = [text for text, _ in documents]
    is_val = np.array([v for _, v in documents], dtype=bool)
    # CaseOps: the normalized text (what bpb counts), transformed, is what is encoded
    texts = [normalized_text(sp, t) for t in texts_read] if use_caseops else texts_read
    ids = sp.encode([caseops.encode(t) for t in texts] if use_caseops else texts, num_threads=1)
    lengths = np.array([len(x) + 1 for x in ids], dtype=np.int64)
    tokens = np.empty(int(lengths.sum()), dtype=np.uint16)
    pos = 0
    for doc in ids:
        tokens[pos] = BOS_ID
        tokens[pos + 1 : pos + 1 + len(doc)] = doc
        pos += 1 + len(doc)
    return EncodedBatch(
        tokens=tokens,
        lengths=lengths,
        text_bytes=np.array([len(t.encode("utf-8")) for t in texts_read], dtype=np.int64),
        normalized_bytes=np.array([len(normalized_text(sp, t).encode("utf-8")) for t in texts], dtype=np.int64),
        is_val=is_val,
        token_bytes=[
            caseops_token_bytes(sp, doc, text) if use_caseops and v else None
            for doc, text, v in zip(ids, texts, is_val)
        ],
    )


def batches(documents: Iterable[tuple[str, bool]], batch_bytes: int = BATCH_BYTES) -> Iterator[list[tuple[str, bool]]]:
    batch, size = [], 0
    for document in documents:
        batch.append(document)
        size += len(document[0])
        if size >= batch_bytes:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def encode_all(
    documents: Iterable[tuple[str, bool]], model_proto: bytes, workers: int, use_caseops: bool = False
) -> Iterator[EncodedBatch]:
    """Encoded batches of (text, is_val) documents in input order (so the output does not depend on the worker
    count). use_caseops: the CaseOps form of the text, and byte sidecar values for the validation documents."""
    if workers <= 1:
        init_worker(model_proto, use_caseops)
        yield from map(encode_batch, batches(documents))
        return
    with multiprocessing.Pool(workers, initializer=init_worker, initargs=(model_proto, use_caseops)) as pool:
        yield from pool.imap(encode_batch, batches(documents))


# =================================================================================================
# Writing shards
# =================================================================================================


@dataclass
class SplitWriter:
    """Fills fineweb_{split}_NNNNNN.bin shards of exactly shard_tokens tokens (the last may be short); with sidecar,
    the byte sidecar of each beside it (fineweb_val_bytes_NNNNNN.bin: the same header, a uint16 per token)."""

    output: Path
    split: str
    shard_tokens: int
    sidecar: bool = False
    pending: list[np.ndarray] = field(default_factory=list)  # tokens of the shard being filled
    pending_bytes: list[np.ndarray] = field(default_factory=list)  # their sidecar values
    fill: int = 0
    files: list[dict] = field(default_factory=list)
    docs: int = 0
    tokens: int = 0
    text_bytes: int = 0
    normalized_bytes: int = 0
    sidecar_bytes: int = 0

    def add(self, tokens: np.ndarray, text_bytes: int, normalized_bytes: int, token_bytes=None) -> None:
        if self.sidecar and (token_bytes is None or len(token_bytes) != tokens.size):
            raise BuildError(f"internal: a {self.split} document without its byte sidecar values")
        self.docs += 1
        self.tokens += tokens.size
        self.text_bytes += text_bytes
        self.normalized_bytes += normalized_bytes
        self.sidecar_bytes += int(token_bytes.sum()) if self.sidecar else 0
        while tokens.size:
            n = min(tokens.size, self.shard_tokens - self.fill)
            self.pending.append(tokens[:n])
            if self.sidecar:
                self.pending_bytes.append(token_bytes[:n])
                token_bytes = token_bytes[n:]
            self.fill += n
            tokens = tokens[n:]
            if self.fill == self.shard_tokens:
                self.flush()

    def flush(self) -> None:
        if self.fill == 0:
            return
        path = self.output / f"fineweb_{self.split}_{len(self.files) // (1 + self.sidecar):06d}.bin"
        write_data_shard(path, np.concatenate(self.pending))
        paths = [path]
        if self.sidecar:
            write_data_shard(sidecar_path(path), np.concatenate(self.pending_bytes))
            paths.append(sidecar_path(path))
        for p in paths:
            self.files.append(
                {
                    "name": p.name,
                    "split": f"{self.split}_bytes" if is_sidecar(p) else self.split,
                    "tokens": train_gpt.read_shard_header(p),
                    "bytes": p.stat().st_size,
                    "sha256": file_sha256(p),
                }
            )
        self.pending, self.pending_bytes, self.fill = [], [], 0

    def stats(self) -> dict:
        shards = [f for f in self.files if not is_sidecar(f["name"])]
        return {
            "docs": self.docs,
            "tokens": self.tokens,
            "text_bytes": self.text_bytes,
            "normalized_bytes": self.normalized_bytes,
            "files": len(shards),
            "tokens_per_byte": round(self.tokens / max(self.normalized_bytes, 1), 6),
        } | (
            {"sidecar_bytes": self.sidecar_bytes, "sidecar_files": len(self.files) - len(shards)}
            if self.sidecar
            else {}
        )


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def clear_output(output: Path, overwrite: bool) -> None:
    old = sorted(output.glob("fineweb_*.bin")) + sorted(output.glob("manifest.json"))
    if old and not overwrite:
        raise BuildError(
            f"{output} already holds {len(old)} shard/manifest files: pass --overwrite to "
            "replace them, or choose another --output."
        )
    for path in old:
        path.unlink()
    output.mkdir(parents=True, exist_ok=True)


def write_json(path: Path, obj: dict) -> None:
    write_atomic(path, (json.dumps(obj, indent=2) + "\n").encode("utf-8"))


# =================================================================================================
# The build
# =================================================================================================


@dataclass
class BuildConfig:
    inputs: list[str]
    output: Path
    val_inputs: list[str] = field(default_factory=list)
    tokenizer: Path | None = None  # an existing .model; None: train one
    tokenizer_out: Path | None = None  # where a trained tokenizer goes
    vocab_size: int = 1024
    val_fraction: float | None = None  # the hash rule's share; None: DEFAULT_VAL_FRACTION (not with --val, --val-docs)
    shard_tokens: int = DEFAULT_SHARD_TOKENS
    workers: int = 1
    text_field: str = "text"
    tokenizer_train_bytes: int = DEFAULT_TOKENIZER_TRAIN_BYTES
    overwrite: bool = False
    name: str = ""  # dataset name in the manifest; default: the output folder's name
    quiet: bool = False
    caseops: bool = False  # the CaseOps form of the text (data/caseops.py), validation shards with byte sidecars
    val_docs: int | None = None  # the first N documents of the inputs are the validation split (the challenge's rule)

    @property
    def hash_fraction(self) -> float:
        """The share of documents the hash rule makes validation (used when neither --val nor --val-docs is given)."""
        return DEFAULT_VAL_FRACTION if self.val_fraction is None else self.val_fraction


def check_config(cfg: BuildConfig) -> None:
    """Every setting that can be checked without reading the text, before anything is made."""
    if cfg.tokenizer is None and not MIN_VOCAB_SIZE <= cfg.vocab_size <= MAX_VOCAB_SIZE:
        raise BuildError(vocab_size_error(cfg.vocab_size))
    if not 0 <= cfg.hash_fraction < 1:
        raise BuildError(f"--val-fraction {cfg.val_fraction} must be in [0, 1).")
    if cfg.val_docs is not None and cfg.val_docs < 1:
        raise BuildError(f"--val-docs {cfg.val_docs} must be at least 1 (the challenge's split: --val-docs 50000).")
    if cfg.val_docs is not None and cfg.val_inputs:
        raise BuildError("--val-docs and --val both choose the validation split: give one of them.")
    chosen_by = f"--val-docs {cfg.val_docs}" if cfg.val_docs is not None else "--val" if cfg.val_inputs else None
    if cfg.val_fraction is not None and chosen_by:
        raise BuildError(
            f"--val-fraction {cfg.val_fraction} and {chosen_by} both choose the validation split: give one of them "
            "(--val-docs N: the first N documents; --val FILE: its documents; --val-fraction: a share of the "
            "documents chosen by a hash of their text)."
        )
    if cfg.shard_tokens < 1:
        raise BuildError(f"--shard-tokens {cfg.shard_tokens} must be positive.")
    if cfg.workers < 1:
        raise BuildError(f"--workers {cfg.workers} must be at least 1.")
    if cfg.tokenizer_train_bytes < 1:
        raise BuildError(f"--tokenizer-train-bytes {cfg.tokenizer_train_bytes} must be positive.")
    if not cfg.text_field:
        raise BuildError("--text-field must name a field, e.g. --text-field text.")
    if Path(cfg.output).exists() and not Path(cfg.output).is_dir():
        raise BuildError(f"--output {cfg.output} is a file: give a folder.")
    trained = trained_tokenizer_path(cfg)
    if trained is not None and trained.exists() and not cfg.overwrite:
        raise BuildError(
            f"the tokenizer this build trains would replace {trained}, which shards made with it need: pass "
            "--overwrite to replace it, or choose another --tokenizer-out (default: data/tokenizers/<output "
            "name>.model)."
        )


def trained_tokenizer_path(cfg: BuildConfig) -> Path | None:
    """Where the tokenizer this build trains goes; None when it tokenizes with an existing one (--tokenizer)."""
    if cfg.tokenizer is not None:
        return None
    return Path(cfg.tokenizer_out or DATA_DIR / "tokenizers" / f"{Path(cfg.output).name}.model")


def check_caseops_tokenizer(path: Path, sp: spm.SentencePieceProcessor, use_caseops: bool) -> None:
    """A CaseOps build needs a CaseOps tokenizer (train_gpt.is_caseops), and a plain build a plain one."""
    if train_gpt.is_caseops(sp) != use_caseops:
        raise BuildError(
            f"--tokenizer {path} is a CaseOps tokenizer (its pieces hold the control symbols U+E001..U+E004): pass "
            "--caseops, which transforms the text the same way and writes the byte sidecars bpb needs."
            if not use_caseops
            else f"--caseops needs a CaseOps tokenizer, but --tokenizer {path} does not hold the control "
            "symbols U+E001..U+E004 as user-defined pieces: leave out --tokenizer to train one on the transformed "
            "text, or drop --caseops."
        )


def build(cfg: BuildConfig) -> dict:
    """Tokenize the inputs into shards in cfg.output; returns the manifest (also written there).
    Everything that can be checked is checked before the output folder is made; if the build fails
    later, the shards it wrote (and the folder, if it made it) are removed again. A tokenizer it trains
    is written only once the shards are built, so a failed build leaves none."""
    check_config(cfg)
    files, val_files = list_input_files(cfg.inputs), list_input_files(cfg.val_inputs)
    check_val_files(cfg, files, val_files)
    if cfg.tokenizer is not None:
        check_caseops_tokenizer(Path(cfg.tokenizer), load_tokenizer(Path(cfg.tokenizer)), cfg.caseops)
    trained = trained_tokenizer_path(cfg)
    new_tokenizer = trained is not None and not trained.exists()
    made_folder = not Path(cfg.output).exists()
    clear_output(cfg.output, cfg.overwrite)
    try:
        return build_into(cfg, files, val_files)
    except BaseException:
        for pattern in ("fineweb_*.bin", "fineweb_*.bin.tmp*", "manifest.json", "manifest.json.tmp*"):
            for path in cfg.output.glob(pattern):
                path.unlink()
        if made_folder and not any(cfg.output.iterdir()):
            cfg.output.rmdir()
        if new_tokenizer:  # written just before the manifest, which then failed
            trained.unlink(missing_ok=True)
        raise


def check_val_files(cfg: BuildConfig, files: list[Path], val_files: list[Path]) -> None:
    """--val documents must not be training documents too: the trainer would train on the text it is scored on. A
    file given both ways is refused at once; otherwise the inputs are read once to find documents of the --val files
    among them (the same UTF-8 text; the hash split and --val-docs cannot put one text in both splits)."""
    both = sorted({p.resolve() for p in files} & {p.resolve() for p in val_files})
    if both:
        raise BuildError(
            f"{', '.join(map(str, both))}: both an input and a --val file, so its documents would be trained on and "
            "scored. Give the validation documents in files of their own, or leave out --val (--val-fraction then "
            "takes a share of the inputs by a hash of each document)."
        )
    val = {document_digest(text) for text in iter_documents(val_files, cfg.text_field)}
    if not val:
        return
    seen = [text for text in iter_documents(files, cfg.text_field) if document_digest(text) in val]
    if seen:
        raise BuildError(
            f"{len(seen)} document(s) of the inputs are also in the --val files ({len(val)} documents; the first "
            f"begins {seen[0][:60]!r}): the trainer would train on the text it is scored on. Remove them from the "
            "inputs (or from the --val files)."
        )


def no_documents(files: list[Path]) -> str:
    """Why the inputs gave no document: the files that are empty, else every document blank."""
    empty = [str(p) for p in files if p.stat().st_size == 0]
    why = f"{', '.join(empty)} {'is' if len(empty) == 1 else 'are'} empty" if empty else "every document is blank"
    return f'the inputs hold no document ({why}). Give files with text: JSONL ({{"text": ...}} a line) or text files.'


def labelled_documents(cfg: BuildConfig, files: list[Path], val_files: list[Path]) -> Iterator[tuple[str, bool]]:
    """Every document with its split (True: validation), in the order they are written: the --val files' documents,
    then the inputs', of which the first --val-docs are validation, or those the hash rule picks (--val-fraction)."""
    for text in iter_documents(val_files, cfg.text_field):
        yield text, True
    val_fraction = 0.0 if val_files else cfg.hash_fraction
    for index, text in enumerate(iter_documents(files, cfg.text_field)):
        yield text, (index < cfg.val_docs) if cfg.val_docs is not None else is_validation(text, val_fraction)


def split_rule(cfg: BuildConfig, val_files: list[Path]) -> str:
    if val_files:
        return "documents of the --val inputs"
    if cfg.val_docs is not None:
        return f"the first {cfg.val_docs} documents of the inputs, in order; the rest, in order, train"
    return f"blake2b(utf-8 text, person=b'val-split') / 2**64 < {cfg.hash_fraction}"


def choose_tokenizer(cfg: BuildConfig, documents, say) -> tuple[Path, spm.SentencePieceProcessor, bytes | None]:
    """Step 1: the tokenizer given (--tokenizer), or one trained on a hash-chosen sample of the training documents.
    Returns its path, the processor and, when trained here, its .model bytes (written once the shards are built)."""
    if cfg.tokenizer is not None:
        return Path(cfg.tokenizer), load_tokenizer(Path(cfg.tokenizer)), None
    t0 = time.perf_counter()
    total = count = 0
    for text, is_val in documents():
        total += 0 if is_val else len(text.encode("utf-8"))
        count += 1
    if count == 0 or (cfg.val_inputs and total == 0):  # with --val, every document of the inputs trains
        raise BuildError(no_documents(list_input_files(cfg.inputs)))
    if total == 0:
        raise BuildError(
            f"no training document to train the tokenizer on ({count} documents, all validation"
            + (f": --val-docs {cfg.val_docs} takes the first {cfg.val_docs}" if cfg.val_docs is not None else "")
            + f"). Give more text, {fewer_validation(cfg)}, or a tokenizer with --tokenizer."
        )
    rate = min(1.0, cfg.tokenizer_train_bytes / max(total, 1))
    say(
        f"tokenizer: training BPE vocab_size:{cfg.vocab_size} on {rate * total / 1e6:.1f}MB of "
        f"{total / 1e6:.1f}MB of training text"
    )
    sample = (t for t, is_val in documents() if not is_val and unit_hash(t, b"tokenizer-pick") < rate)
    model = train_tokenizer_model(sample, cfg.vocab_size, cfg.workers, cfg.caseops)
    path = trained_tokenizer_path(cfg)
    say(f"tokenizer: trained time:{time.perf_counter() - t0:.1f}s (written to {path} with the shards)")
    return path, spm.SentencePieceProcessor(model_proto=model), model


def write_shards(cfg: BuildConfig, sp: spm.SentencePieceProcessor, documents, say) -> dict[str, SplitWriter]:
    """Step 2: encode the documents (in worker processes) and write each to its split's shards, in input order."""
    writers = {
        s: SplitWriter(cfg.output, s, cfg.shard_tokens, sidecar=cfg.caseops and s == "val") for s in ("val", "train")
    }
    t0, last_report, done_bytes = time.perf_counter(), time.perf_counter(), 0
    for batch in encode_all(documents(), sp.serialized_model_proto(), cfg.workers, cfg.caseops):
        ends = np.cumsum(batch.lengths)
        for i, end in enumerate(ends):
            writers["val" if batch.is_val[i] else "train"].add(
                batch.tokens[end - batch.lengths[i] : end],
                int(batch.text_bytes[i]),
                int(batch.normalized_bytes[i]),
                batch.token_bytes[i],
            )
        done_bytes += int(batch.text_bytes.sum())
        if time.perf_counter() - last_report > 10:
            last_report = time.perf_counter()
            say(f"encoding: {done_bytes / 1e6:.1f}MB {done_bytes / 1e6 / (last_report - t0):.2f}MB/s")
    for writer in writers.values():
        writer.flush()
    return writers


def fewer_validation(cfg: BuildConfig) -> str:
    """How to leave documents to the training split, by the rule that chose the validation split."""
    if cfg.val_docs is not None:
        return f"a smaller --val-docs (now {cfg.val_docs})"
    if cfg.val_inputs:
        return "inputs that are not all blank (every document of the --val files is validation)"
    return f"a smaller --val-fraction (now {cfg.hash_fraction})"


def check_splits(cfg: BuildConfig, writers: dict[str, SplitWriter], files: list[Path]) -> None:
    """Step 3: both splits hold documents, and --val-docs N took N of them. The advice names the flag that chose
    the validation split: --val-docs, --val or --val-fraction (the others are refused beside it)."""
    total = writers["val"].docs + writers["train"].docs
    if (writers["train"].docs if cfg.val_inputs else total) == 0:  # with --val, every document of the inputs trains
        raise BuildError(no_documents(files))
    if cfg.val_docs is not None and writers["val"].docs < cfg.val_docs:
        raise BuildError(
            f"--val-docs {cfg.val_docs}: the inputs hold only {total} documents (blank ones skipped). Give fewer, "
            "or more text."
        )
    if writers["val"].docs == 0 and cfg.val_inputs:
        raise BuildError(
            f"no document went to the val split: the --val files ({' '.join(cfg.val_inputs)}) hold only blank "
            "documents. Give --val files with text."
        )
    if writers["train"].docs == 0 and (cfg.val_docs is not None or cfg.val_inputs):
        raise BuildError(
            f"no document went to the train split ({len(files)} input files, {total} documents, all validation): "
            f"give more text or {fewer_validation(cfg)}."
        )
    for split, writer in writers.items():
        if writer.docs == 0:
            raise BuildError(
                f"no document went to the {split} split ({len(files)} input files, "
                f"--val-fraction {cfg.hash_fraction}): use more text, change --val-fraction, "
                "or pass validation documents with --val (or --val-docs N)."
            )


def build_manifest(
    cfg: BuildConfig,
    writers: dict[str, SplitWriter],
    tokenizer_path: Path,
    sp: spm.SentencePieceProcessor,
    trained: bool,
    inputs: list[Path],
    rule: str,
) -> dict:
    """Step 4: the manifest of what was built: the shards, the tokenizer and how the split was made."""
    name = cfg.name or cfg.output.name
    return {
        "format": {
            "magic": train_gpt.SHARD_MAGIC,
            "version": train_gpt.SHARD_VERSION,
            "header_bytes": train_gpt.SHARD_HEADER_BYTES,
            "token_dtype": "uint16 little-endian",
            "bos_id": BOS_ID,
            "eos": "none",
            "shard_tokens": cfg.shard_tokens,
        },
        # The "datasets"/"tokenizers" entries follow the published export's manifest, so a folder laid
        # out as <root>/manifest.json, <root>/datasets/NAME/, <root>/tokenizers/ can be served to
        # data/cached_challenge_fineweb.py from your own hub repo.
        "datasets": [
            {
                "name": name,
                "path": f"datasets/{name}",
                "tokenizer_name": tokenizer_path.stem,
                "vocab_size": sp.vocab_size(),
                "bos_id": BOS_ID,
                "stats": {
                    "files_train": writers["train"].stats()["files"],
                    "files_val": writers["val"].stats()["files"],
                    "docs_train": writers["train"].docs,
                    "docs_val": writers["val"].docs,
                    "tokens_train": writers["train"].tokens,
                    "tokens_val": writers["val"].tokens,
                },
                "splits": {s: w.stats() for s, w in writers.items()},
                "split_rule": rule,
                "files": writers["val"].files + writers["train"].files,
                # CaseOps: the transform, and where bpb's bytes come from: the sidecars, which count the bytes of
                # the text as the tokenizer normalizes it (data/README.md, "Which bytes a sidecar counts")
                "caseops": caseops.NAME if cfg.caseops else None,
                "val_bytes": "sidecar" if cfg.caseops else "tokenizer",
            }
        ],
        "tokenizers": [
            {
                "name": tokenizer_path.stem,
                "kind": "sentencepiece_bpe",
                "vocab_size": sp.vocab_size(),
                "model_path": f"tokenizers/{tokenizer_path.name}",
                "sha256": file_sha256(tokenizer_path),
                "trained_here": trained,
                "settings": {**TOKENIZER_SETTINGS, **caseops_settings(cfg.caseops), "vocab_size": sp.vocab_size()}
                if trained
                else None,
            }
        ],
        "inputs": [str(p) for p in inputs],
        "inputs_sha256": [file_sha256(p) for p in inputs],  # with --val-docs: docs_selected.jsonl's docs_sha256
        "built_with": {
            "script": "data/build_shards.py",
            "python": platform.python_version(),
            "sentencepiece": spm.__version__,
            "numpy": np.__version__,
            "workers": cfg.workers,
        },
    }


def build_into(cfg: BuildConfig, files: list[Path], val_files: list[Path]) -> dict:
    """The pipeline: tokenizer, shards, the splits checked, the tokenizer written (if trained here), the manifest."""
    say = (lambda *a: None) if cfg.quiet else (lambda *a: print(*a, flush=True))

    def documents() -> Iterator[tuple[str, bool]]:
        return labelled_documents(cfg, files, val_files)

    tokenizer_path, sp, model = choose_tokenizer(cfg, documents, say)
    t0 = time.perf_counter()
    writers = write_shards(cfg, sp, documents, say)
    encode_s = time.perf_counter() - t0
    check_splits(cfg, writers, files)
    if model is not None:
        write_atomic(tokenizer_path, model)
        say(f"tokenizer: wrote {tokenizer_path}")
    rule = split_rule(cfg, val_files)
    manifest = build_manifest(cfg, writers, tokenizer_path, sp, model is not None, val_files + files, rule)
    manifest["encode_seconds"] = round(encode_s, 3)
    write_json(cfg.output / "manifest.json", manifest)
    text_mb = (writers["train"].text_bytes + writers["val"].text_bytes) / 1e6
    say(
        f"done: {cfg.output} train_tokens:{writers['train'].tokens} val_tokens:{writers['val'].tokens} "
        f"docs:{writers['train'].docs + writers['val'].docs} text:{text_mb:.1f}MB encode_time:{encode_s:.1f}s "
        f"throughput:{text_mb / max(encode_s, 1e-9):.2f}MB/s workers:{cfg.workers} "
        f"tokens_per_byte:{writers['val'].stats()['tokens_per_byte']:.4f}(val)"
        + (f" caseops:sidecar_bytes:{writers['val'].sidecar_bytes}(val)" if cfg.caseops else "")
    )
    return manifest


# =================================================================================================
# Which tokenizer made a folder of shards (--which-tokenizer)
# =================================================================================================


@dataclass
class Candidate:
    """A .model file judged against sampled shards."""

    path: Path
    vocab_size: int | None = None  # None: not a SentencePiece model
    same: int = 0  # sampled documents that decode and encode again to their own ids
    tried: int = 0
    ids_fit: bool = False  # every sampled id is below vocab_size

    @property
    def fits(self) -> bool:
        return self.ids_fit and 2 * self.same >= self.tried

    def describe(self, largest_id: int) -> str:
        if self.vocab_size is None:
            return f"no    not a SentencePiece model  {self.path}"
        if not self.ids_fit:
            return f"no    vocab_size:{self.vocab_size} too small for id {largest_id}  {self.path}"
        verdict = "fits" if self.fits else "no"
        return f"{verdict:<5} vocab_size:{self.vocab_size} round_trip:{self.same}/{self.tried}  {self.path}"


def sample_shards(data_path: Path) -> tuple[list[np.ndarray], list[Path]]:
    """The tokens of the first validation shard and of the first training shard, as train_gpt.py's own check
    samples them (it takes the whole validation split, which is one shard in the published data)."""
    if not data_path.is_dir():
        raise BuildError(f"--which-tokenizer {data_path}: no such folder. Give the folder of the shards (DATA_PATH).")
    files = sorted(data_path.glob("fineweb_val_[0-9]*.bin"))[:1] + sorted(data_path.glob("fineweb_train_*.bin"))[:1]
    if not files:
        raise BuildError(
            f"--which-tokenizer {data_path}: the folder holds no fineweb_val_*.bin or fineweb_train_*.bin "
            "shards. Give the folder of the shards (DATA_PATH)."
        )
    return [train_gpt.load_data_shard(f).numpy() for f in files], files


def tokenizer_files(places: list[Path]) -> list[Path]:
    """The .model files under data/tokenizers and under each of `places` (a folder, or a .model file itself)."""
    found: dict[Path, Path] = {}
    for place in [DATA_DIR / "tokenizers", *places]:
        if place.is_file():
            paths = [place]
        elif place.is_dir():
            paths = sorted(place.rglob("*.model"))
        elif place in places:
            raise BuildError(f"--tokenizers {place}: no such folder or file.")
        else:
            paths = []
        for path in paths:
            found.setdefault(path.resolve(), path)
    return list(found.values())


def judge_tokenizer(path: Path, samples: list[np.ndarray], largest_id: int) -> Candidate:
    try:
        sp = spm.SentencePieceProcessor(model_file=str(path))
    except (RuntimeError, OSError):
        return Candidate(path)
    candidate = Candidate(path, sp.vocab_size(), ids_fit=sp.vocab_size() > largest_id)
    if candidate.ids_fit:  # an id beyond the vocabulary cannot be decoded
        candidate.same, candidate.tried = round_trip(sp, samples)
    return candidate


def which_tokenizer(data_path: Path, places: list[Path], say=print) -> list[Candidate]:
    """Every candidate tokenizer, judged on a sample of the shards in data_path: it fits when every id is below
    its vocabulary and at least half the sampled documents round-trip (nearly all do with the one that made them,
    few with another). Prints a line per candidate and what to set; returns them."""
    samples, files = sample_shards(data_path)
    largest_id = max(int(tokens.max(initial=0)) for tokens in samples)
    candidates = [judge_tokenizer(path, samples, largest_id) for path in tokenizer_files(places)]
    tried = next((c.tried for c in candidates if c.ids_fit), None)
    if tried == 0:
        raise BuildError(
            f"{', '.join(str(f) for f in files)}: no whole document (the ids between two BOS ids) to try: "
            "the shards are too small to tell which tokenizer made them."
        )
    say(f"shards: {', '.join(f.name for f in files)} in {data_path}, largest id {largest_id}")
    for candidate in candidates:
        say(candidate.describe(largest_id))
    fits = [c for c in candidates if c.fits]
    for c in fits:
        say(f"fits: TOKENIZER_PATH={c.path} VOCAB_SIZE={c.vocab_size}")
    if not candidates:
        searched = ", ".join(str(place) for place in [DATA_DIR / "tokenizers", *places])
        say(f"no .model file under {searched}. Name the folder that holds your tokenizers with --tokenizers DIR.")
    elif not fits:
        say(
            f"none of the {len(candidates)} tokenizers made these shards (a fit: every id below its vocabulary and "
            "at least half the sampled documents decode and encode again to their own ids). Name the folder that "
            "holds the right one with --tokenizers DIR, or get shards of your tokenizer: data/README.md, "
            '"Which shards for which vocabulary".'
        )
    return candidates


# =================================================================================================
# The command line
# =================================================================================================

USAGE = """%(prog)s INPUT [INPUT ...] --output DIR [options]
       %(prog)s --which-tokenizer DATA_PATH [--tokenizers DIR ...]"""


def build_parser() -> argparse.ArgumentParser:
    description, details = __doc__.split("\n\n", 1)  # the docstring's first line; the rest as written
    p = argparse.ArgumentParser(
        usage=USAGE,
        description=description,
        epilog=details,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("inputs", nargs="*", help="JSONL or text files, or folders of them")
    p.add_argument("--output", type=Path, help="folder for the shards and manifest.json (required to build)")
    p.add_argument(
        "--val",
        nargs="+",
        default=[],
        dest="val_inputs",
        help="files whose documents are the validation split (not with --val-fraction or --val-docs)",
    )
    p.add_argument(
        "--tokenizer", type=Path, help="an existing SentencePiece .model to tokenize with (default: train one)"
    )
    p.add_argument(
        "--vocab-size", type=int, default=1024, help="vocabulary of the tokenizer to train (default: %(default)s)"
    )
    p.add_argument(
        "--tokenizer-out",
        type=Path,
        help="where the trained tokenizer goes (default: data/tokenizers/<output name>.model)",
    )
    p.add_argument(
        "--tokenizer-train-bytes",
        type=int,
        default=DEFAULT_TOKENIZER_TRAIN_BYTES,
        help="train the tokenizer on a hash-chosen sample of about this much training text (default: %(default)s)",
    )
    p.add_argument(
        "--val-fraction",
        type=float,
        help=f"share of documents for validation, chosen by a hash of their text (default: {DEFAULT_VAL_FRACTION}); "
        "not with --val or --val-docs",
    )
    p.add_argument(
        "--val-docs",
        type=int,
        metavar="N",
        help="the first N documents of the inputs, in order, are the validation split and the rest train, in order: "
        "the challenge's split (--val-docs 50000 on docs_selected.jsonl); not with --val-fraction or --val",
    )
    p.add_argument(
        "--shard-tokens", type=int, default=DEFAULT_SHARD_TOKENS, help="tokens per shard (default: %(default)s)"
    )
    p.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="encoding processes (default: the number of cores, here %(default)s)",
    )
    p.add_argument("--text-field", default="text", help="the JSONL field that holds the text (default: %(default)s)")
    p.add_argument("--name", default="", help="dataset name in the manifest (default: the output folder's name)")
    p.add_argument(
        "--caseops",
        action="store_true",
        help="CaseOps (data/caseops.py): train the tokenizer on, and shard, the lossless case transform of the text; "
        "the validation shards get byte sidecars fineweb_val_bytes_*.bin, so bpb counts the original bytes",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace shards already in --output, and the tokenizer at --tokenizer-out (default: refuse)",
    )
    p.add_argument(
        "--which-tokenizer",
        type=Path,
        metavar="DATA_PATH",
        help="instead of building: sample the shards in DATA_PATH and say which .model files (under data/tokenizers "
        "and --tokenizers) made them; exit 0 if one fits, 1 if none",
    )
    p.add_argument(
        "--tokenizers",
        nargs="+",
        type=Path,
        default=[],
        metavar="DIR",
        help="with --which-tokenizer: more folders (or .model files) to try, beside data/tokenizers",
    )
    return p


def config_from(p: argparse.ArgumentParser, args: argparse.Namespace) -> BuildConfig:
    if args.tokenizers:
        p.error("--tokenizers goes with --which-tokenizer DATA_PATH")
    if not args.inputs or args.output is None:
        p.error("a build needs its inputs and --output DIR (or give --which-tokenizer DATA_PATH alone)")
    if args.tokenizer is not None and args.tokenizer_out is not None:
        p.error("--tokenizer-out is for a trained tokenizer; with --tokenizer nothing is trained")
    return BuildConfig(**{k: v for k, v in vars(args).items() if k not in ("which_tokenizer", "tokenizers")})


def parse_args(argv: list[str] | None = None) -> BuildConfig:
    """The build's settings from the command line (argparse exits 2 on a wrong one)."""
    p = build_parser()
    return config_from(p, p.parse_args(argv))


def main(argv: list[str] | None = None) -> None:
    p = build_parser()
    args = p.parse_args(argv)
    try:
        if args.which_tokenizer is None:
            build(config_from(p, args))
            return
        if args.inputs or args.output is not None:
            p.error("--which-tokenizer DATA_PATH reads shards and builds nothing: give no inputs and no --output")
        candidates = which_tokenizer(args.which_tokenizer, args.tokenizers)
        sys.exit(0 if any(c.fits for c in candidates) else 1)
    except (BuildError, train_gpt.ShardError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
