r"""Re-tokenize shards with another SentencePiece tokenizer, in the format train_gpt.py reads.

  # FineWeb sp1024 shards -> sp8192 shards of the same documents, with 2 processes:
  python3 data/retokenize.py --from-model data/tokenizers/fineweb_1024_bpe.model \
      --to-model data/tokenizers/fineweb_8192_bpe.model \
      --input data/datasets/fineweb10B_sp1024 --output data/datasets/fineweb10B_sp8192 --workers 2
  # then train on them:
  DATA_PATH=data/datasets/fineweb10B_sp8192 TOKENIZER_PATH=data/tokenizers/fineweb_8192_bpe.model \
      VOCAB_SIZE=8192 python3 train_gpt.py
  # to a CaseOps tokenizer (build_shards.py --caseops trains one): the text is case-transformed before it is encoded,
  # and each validation shard gets its byte sidecar fineweb_val_bytes_NNNNNN.bin
  python3 data/retokenize.py --from-model data/tokenizers/fineweb_1024_bpe.model --caseops \
      --to-model data/tokenizers/mytext_sp8192_caseops.model \
      --input data/datasets/fineweb10B_sp1024 --output data/datasets/fineweb10B_sp8192_caseops

Every document of a shard starts with BOS. Each one is decoded with --from-model and the text encoded
with --to-model, behind the new model's BOS. Decoding gives the tokenizer's normalized text (NFKC,
whitespace runs collapsed), which is what bpb counts bytes of, so val_bpb stays comparable. Tokens
before a shard's first BOS (a document that began in the previous shard) are re-encoded on their own,
with no BOS; at such a cut the new tokens may differ from encoding the whole document by a token.
Each output shard keeps its input's name and is written atomically; --output also gets a
manifest.json in data/build_shards.py's format, recording the new tokenizer's sha256.
"""

from __future__ import annotations

import argparse
import glob
import json
import multiprocessing
import os
import platform
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import sentencepiece as spm

sys.path.insert(0, str(Path(__file__).resolve().parent))
import build_shards  # noqa: E402  (round_trip, write_data_shard, file_sha256, write_json, the manifest's shape)
import caseops  # noqa: E402  (the CaseOps transform, for --caseops and for shards made with a CaseOps tokenizer)
from build_shards import train_gpt  # noqa: E402  (the trainer defines the shard format: constants, reader)

CHUNK_TOKENS = 1 << 20  # input tokens handed to a worker at a time (cut at a BOS)
MAX_VOCAB = 65_536  # shards store uint16 ids
SPLIT_PATTERN = re.compile(r"fineweb_(train|val)_")


class RetokenizeError(ValueError):
    """Arguments or inputs that cannot be re-tokenized; the message says what to change."""


# =================================================================================================
# Checking everything before any work
# =================================================================================================


@dataclass
class Tokenizer:
    path: Path
    proto: bytes  # the serialized model, sent to the workers
    vocab_size: int
    bos_id: int
    sha256: str


def load_model(path: Path, flag: str) -> Tokenizer:
    if not path.is_file():
        raise RetokenizeError(f"{flag} {path}: no such file. Give the path of a SentencePiece .model file.")
    try:
        sp = spm.SentencePieceProcessor(model_file=str(path))
    except (RuntimeError, OSError) as exc:
        raise RetokenizeError(
            f"{flag} {path}: not a SentencePiece model ({str(exc).strip()}). Give the "
            ".model file the tokenizer was saved as, not the .vocab or another file."
        ) from None
    if sp.bos_id() < 0:
        raise RetokenizeError(
            f"{flag} {path}: the model has no BOS token; shards mark every document "
            "with BOS. Train the tokenizer with a bos_id (data/build_shards.py does)."
        )
    return Tokenizer(path, sp.serialized_model_proto(), sp.vocab_size(), sp.bos_id(), build_shards.file_sha256(path))


def input_files(pattern: str) -> list[Path]:
    """A folder: its fineweb_*.bin shards; anything else: a glob pattern (or one file name)."""
    path = Path(pattern)
    if path.is_dir():
        files = sorted(path.glob("fineweb_*.bin"))
        where = f"folder {path} holds no fineweb_*.bin shards"
    else:
        files = sorted(Path(p) for p in glob.glob(pattern) if Path(p).is_file())
        where = f"no file matches {pattern}"
    if not files:
        raise RetokenizeError(
            f"--input {pattern}: {where}. Give a folder of shards or a pattern such as "
            "'data/datasets/fineweb10B_sp1024/fineweb_*.bin' (quoted)."
        )
    names = [f.name for f in files]
    if len(set(names)) != len(names):
        raise RetokenizeError(
            f"--input {pattern}: two inputs share a file name, and outputs keep the input "
            "names. Re-tokenize one folder at a time."
        )
    return files


def check_shard(path: Path, tokenizer: Tokenizer) -> int:
    """The shard's token count, after checking its header and that its ids fit --from-model."""
    num_tokens = train_gpt.read_shard_header(path)
    tokens = (
        np.memmap(
            path, dtype=train_gpt.SHARD_TOKEN_DTYPE, mode="r", offset=train_gpt.SHARD_HEADER_BYTES, shape=(num_tokens,)
        )
        if num_tokens
        else np.zeros(0, np.uint16)
    )
    largest = int(tokens.max()) if num_tokens else 0
    if largest >= tokenizer.vocab_size:
        raise RetokenizeError(
            f"{path}: holds token id {largest}, but --from-model {tokenizer.path} has only "
            f"{tokenizer.vocab_size} tokens. Give the tokenizer these shards were made with."
        )
    return num_tokens


def check_manifest(folder: Path, tokenizer: Tokenizer) -> None:
    """When the inputs' folder has a manifest.json that records tokenizer sha256s, --from-model must be one."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        recorded = {t["sha256"]: t.get("name", "?") for t in manifest["tokenizers"] if t.get("sha256")}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return  # no manifest (or not one of ours): nothing to compare with
    if recorded and tokenizer.sha256 not in recorded:
        raise RetokenizeError(
            f"{folder / 'manifest.json'}: these shards were made with tokenizer "
            f"{', '.join(sorted(recorded.values()))} (sha256 {', '.join(sorted(recorded))}), "
            f"not --from-model {tokenizer.path} (sha256 {tokenizer.sha256}). "
            "Give the tokenizer the manifest names."
        )


@dataclass
class Plan:
    source: Tokenizer
    target: Tokenizer
    files: list[Path]
    tokens: list[int]  # per input file
    output: Path
    workers: int
    caseops: bool = False  # --caseops: the target is a CaseOps tokenizer; validation shards get byte sidecars
    from_caseops: bool = False  # the source is a CaseOps tokenizer: its text is decoded back to the original


def check_caseops(use_caseops: bool, source: Tokenizer, target: Tokenizer) -> bool:
    """--caseops goes with a CaseOps --to-model and only with one; returns whether --from-model is CaseOps."""
    is_caseops = {
        t.path: train_gpt.is_caseops(spm.SentencePieceProcessor(model_proto=t.proto)) for t in (source, target)
    }
    if use_caseops and not is_caseops[target.path]:
        raise RetokenizeError(
            f"--caseops needs a CaseOps --to-model, but {target.path} does not hold the control symbols "
            "U+E001..U+E004 as user-defined pieces (a tokenizer trained on text with them has plain ones): train "
            "one with data/build_shards.py --caseops, or drop --caseops."
        )
    if is_caseops[target.path] and not use_caseops:
        raise RetokenizeError(
            f"--to-model {target.path} is a CaseOps tokenizer: pass --caseops, which transforms the text the same way "
            "and writes the byte sidecars that bpb needs."
        )
    return is_caseops[source.path]


def make_plan(args: argparse.Namespace) -> Plan:
    """Every check, before any output is written: models, inputs, output folder, workers."""
    if args.workers < 1:
        raise RetokenizeError(f"--workers {args.workers} must be at least 1.")
    source = load_model(args.from_model, "--from-model")
    target = load_model(args.to_model, "--to-model")
    if target.vocab_size > MAX_VOCAB:
        raise RetokenizeError(
            f"--to-model {target.path}: {target.vocab_size} tokens, but shards store uint16 "
            f"ids: at most {MAX_VOCAB}. Use a smaller tokenizer."
        )
    from_caseops = check_caseops(args.caseops, source, target)
    files = [f for f in input_files(args.input) if not build_shards.is_sidecar(f)]  # a CaseOps input's sidecars
    output = args.output.resolve()
    for folder in sorted({f.resolve().parent for f in files}):
        if folder == output:
            raise RetokenizeError(
                f"--output {args.output} is the folder of the inputs: the outputs keep the "
                "input names and would overwrite them. Choose another --output."
            )
        check_manifest(folder, source)
    if output.is_file():
        raise RetokenizeError(f"--output {args.output} is a file; give a folder.")
    taken = [output / f.name for f in files if (output / f.name).exists()]
    taken += [output / "manifest.json"] if (output / "manifest.json").exists() else []
    if taken and not args.overwrite:
        raise RetokenizeError(
            f"--output {args.output} already holds {taken[0].name}"
            f"{f' and {len(taken) - 1} more' if len(taken) > 1 else ''}: pass --overwrite "
            "to replace them, or choose another --output."
        )
    tokens = [check_shard(f, source) for f in files]
    check_round_trip(source, files, tokens)
    return Plan(source, target, files, tokens, output, args.workers, args.caseops, from_caseops)


def check_round_trip(source: Tokenizer, files: list[Path], tokens: list[int]) -> None:
    """The inputs must be --from-model's: a sample of their documents decodes and encodes again to the same ids with the
    tokenizer that made them (train_gpt.py's pre-flight makes the same check), and not with another. Swapped
    --from-model and --to-model, on shards without a manifest, once wrote garbage shards whose new manifest then
    vouched for them."""
    sample = [shard_tokens(f, 0, min(n, 1 << 22)) for f, n in zip(files[:4], tokens[:4])]
    same, tried = build_shards.round_trip(spm.SentencePieceProcessor(model_proto=source.proto), sample)
    if same * 2 < tried:
        raise RetokenizeError(
            f"--from-model {source.path} did not make the input shards: {same} of {tried} sampled "
            "documents decode and encode again to their own ids (with the tokenizer that made them, "
            "nearly all do). Give the tokenizer the shards were made with; are --from-model and "
            "--to-model swapped?"
        )


# =================================================================================================
# The work: document-aligned chunks of every shard, re-encoded in worker processes
# =================================================================================================


def shard_tokens(path: Path, start: int = 0, stop: int | None = None) -> np.ndarray:
    num_tokens = train_gpt.read_shard_header(path)
    stop = num_tokens if stop is None else stop
    return np.fromfile(
        path,
        dtype=train_gpt.SHARD_TOKEN_DTYPE,
        count=stop - start,
        offset=train_gpt.SHARD_HEADER_BYTES + start * train_gpt.SHARD_TOKEN_DTYPE.itemsize,
    )


def chunk_bounds(path: Path, bos_id: int, chunk_tokens: int | None = None) -> list[tuple[int, int]]:
    """[start, stop) token ranges that cover the shard, each starting at a BOS (but the first) and
    about chunk_tokens (default CHUNK_TOKENS) long, so that one big shard keeps every worker busy."""
    chunk_tokens = chunk_tokens or CHUNK_TOKENS
    tokens = shard_tokens(path)
    starts = np.flatnonzero(tokens == bos_id)
    cuts = [0]
    for want in range(chunk_tokens, tokens.size, chunk_tokens):
        i = np.searchsorted(starts, want)  # the first document that starts at or after `want`
        if i < starts.size and starts[i] > cuts[-1]:
            cuts.append(int(starts[i]))
    cuts.append(tokens.size)
    return [(a, b) for a, b in zip(cuts[:-1], cuts[1:]) if b > a] or [(0, 0)]


_source: spm.SentencePieceProcessor | None = None
_target: spm.SentencePieceProcessor | None = None
_caseops = (False, False)  # (the target is CaseOps, the source is CaseOps)


def init_worker(source_proto: bytes, target_proto: bytes, use_caseops=(False, False)) -> None:
    global _source, _target, _caseops
    _source = spm.SentencePieceProcessor(model_proto=source_proto)
    _target = spm.SentencePieceProcessor(model_proto=target_proto)
    _caseops = use_caseops


@dataclass
class Chunk:
    tokens: np.ndarray  # (tokens out,) uint16: [BOS] + ids of each document
    docs: int  # documents that start here (a BOS)
    tokens_in: int
    text_bytes: int  # UTF-8 bytes of the decoded (normalized) text
    sidecar: np.ndarray | None = None  # CaseOps validation shards: the bytes of the original text each token stands for


def retokenize_chunk(task: tuple[Path, int, int]) -> Chunk:
    path, start, stop = task
    tokens = shard_tokens(path, start, stop)
    if not tokens.size:  # an empty shard (decode([]) would be one empty document, not none)
        return Chunk(np.zeros(0, np.uint16), 0, 0, 0)
    starts = np.flatnonzero(tokens == _source.bos_id())
    pieces = np.split(tokens, starts)  # pieces[0]: the tokens before the first BOS (often empty)
    lead, docs = pieces[0], [p[1:] for p in pieces[1:]]
    texts = _source.decode([d.tolist() for d in ([lead] if lead.size else []) + docs])
    to_caseops, from_caseops = _caseops
    texts = [caseops.decode(t, strict=False) for t in texts] if from_caseops else texts
    encoded = _target.encode([caseops.encode(t) for t in texts] if to_caseops else texts, num_threads=1)
    bos = _target.bos_id()
    out = []
    for i, ids in enumerate(encoded):
        if i > 0 or not lead.size:
            out.append(bos)
        out.extend(ids)
    sidecar = None
    if to_caseops and (m := SPLIT_PATTERN.match(path.name)) and m.group(1) == "val":
        sidecar = np.concatenate(
            [
                build_shards.caseops_token_bytes(_target, ids, text, bos=i > 0 or not lead.size)
                for i, (ids, text) in enumerate(zip(encoded, texts))
            ]
        )
    return Chunk(
        np.asarray(out, dtype=np.uint16),
        len(docs),
        int(tokens.size),
        sum(len(t.encode("utf-8")) for t in texts),
        sidecar,
    )


class Progress:
    """One status line on stderr: redrawn in place on a terminal, a plain line every 10 s otherwise."""

    def __init__(self, total_tokens: int):
        self.total, self.t0, self.last = total_tokens, time.perf_counter(), 0.0
        self.tty = sys.stderr.isatty()

    def update(self, docs: int, tokens_in: int, tokens_out: int, final: bool = False) -> None:
        now = time.perf_counter()
        if not final and now - self.last < (0.5 if self.tty else 10.0):
            return
        self.last = now
        rate = tokens_in / max(now - self.t0, 1e-9)
        eta = (self.total - tokens_in) / rate if rate > 0 else float("inf")
        line = (
            f"retokenize: {100 * tokens_in / max(self.total, 1):5.1f}% docs:{docs} tokens_in:{tokens_in} "
            f"tokens_out:{tokens_out} rate:{rate / 1e6:.2f}M tokens/s "
            f"eta:{f'{eta:.0f}s' if eta < float('inf') else '?'}"
        )
        if self.tty:
            sys.stderr.write("\r" + line + ("\n" if final else ""))
        elif not final:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


def run(plan: Plan, quiet: bool = False) -> dict:
    """Re-tokenize every file of the plan into plan.output; returns the manifest (also written there)."""
    t0 = time.perf_counter()
    tasks = [(path, a, b) for path in plan.files for a, b in chunk_bounds(path, plan.source.bos_id)]
    chunks_per_file = {path: sum(1 for t in tasks if t[0] == path) for path in plan.files}
    plan.output.mkdir(parents=True, exist_ok=True)
    progress = None if quiet else Progress(sum(plan.tokens))
    entries, totals = [], dict(docs=0, tokens_in=0, tokens_out=0, text_bytes=0)
    pending: list[Chunk] = []
    with multiprocessing.Pool(
        plan.workers,
        initializer=init_worker,
        initargs=(plan.source.proto, plan.target.proto, (plan.caseops, plan.from_caseops)),
    ) as pool:
        for (path, _, _), chunk in zip(tasks, pool.imap(retokenize_chunk, tasks)):  # in order: deterministic
            pending.append(chunk)
            for key in totals:
                totals[key] += getattr(chunk, key) if key != "tokens_out" else chunk.tokens.size
            if progress:
                progress.update(totals["docs"], totals["tokens_in"], totals["tokens_out"])
            if len(pending) == chunks_per_file[path]:
                entries.append(write_shard(plan.output / path.name, pending, path))
                entries += write_sidecar(plan.output / path.name, pending)
                pending = []
    if progress:
        progress.update(totals["docs"], totals["tokens_in"], totals["tokens_out"], final=True)
    seconds = time.perf_counter() - t0
    manifest = make_manifest(plan, entries, seconds)
    build_shards.write_json(plan.output / "manifest.json", manifest)
    if not quiet:
        print(
            f"done: {plan.output} files:{len(entries)} docs:{totals['docs']} tokens_in:{totals['tokens_in']} "
            f"tokens_out:{totals['tokens_out']} ratio:{totals['tokens_out'] / max(totals['tokens_in'], 1):.4f} "
            f"seconds:{seconds:.1f} rate:{totals['tokens_in'] / max(seconds, 1e-9) / 1e6:.2f}M_tokens_in/s "
            f"workers:{plan.workers}",
            flush=True,
        )
    return manifest


def write_shard(path: Path, chunks: list[Chunk], source: Path) -> dict:
    tokens = np.concatenate([c.tokens for c in chunks])
    build_shards.write_data_shard(path, tokens)
    m = SPLIT_PATTERN.match(path.name)
    return {
        "name": path.name,
        "split": m.group(1) if m else "other",
        "tokens": int(tokens.size),
        "bytes": path.stat().st_size,
        "sha256": build_shards.file_sha256(path),
        "source": str(source),
        "docs": sum(c.docs for c in chunks),
        "tokens_in": sum(c.tokens_in for c in chunks),
        "normalized_bytes": sum(c.text_bytes for c in chunks),
    }


def write_sidecar(path: Path, chunks: list[Chunk]) -> list[dict]:
    """The byte sidecar of the shard at path (a CaseOps validation shard), as a manifest entry; none for others."""
    if all(c.sidecar is None for c in chunks):
        return []
    sidecar = build_shards.sidecar_path(path)
    build_shards.write_data_shard(sidecar, np.concatenate([c.sidecar for c in chunks]))
    return [
        {
            "name": sidecar.name,
            "split": "val_bytes",
            "tokens": train_gpt.read_shard_header(sidecar),
            "bytes": sidecar.stat().st_size,
            "sha256": build_shards.file_sha256(sidecar),
            "sidecar_bytes": int(sum(int(c.sidecar.sum()) for c in chunks)),
        }
    ]


def make_manifest(plan: Plan, entries: list[dict], seconds: float) -> dict:
    """build_shards.py's manifest shape: the format, one dataset with its files, one tokenizer."""
    name = plan.output.name
    splits = {}
    for split in ("val", "train"):
        mine = [e for e in entries if e["split"] == split]
        tokens, normalized = sum(e["tokens"] for e in mine), sum(e["normalized_bytes"] for e in mine)
        splits[split] = {
            "docs": sum(e["docs"] for e in mine),
            "tokens": tokens,
            "text_bytes": None,
            "normalized_bytes": normalized,
            "files": len(mine),
            "tokens_per_byte": round(tokens / max(normalized, 1), 6),
        }
    if plan.caseops:  # what bpb divides by: the original text's bytes, the sum of normalized_bytes again
        splits["val"]["sidecar_bytes"] = sum(e["sidecar_bytes"] for e in entries if e["split"] == "val_bytes")
    return {
        "format": {
            "magic": train_gpt.SHARD_MAGIC,
            "version": train_gpt.SHARD_VERSION,
            "header_bytes": train_gpt.SHARD_HEADER_BYTES,
            "token_dtype": "uint16 little-endian",
            "bos_id": plan.target.bos_id,
            "eos": "none",
            "shard_tokens": None,
        },  # each output shard holds its input shard's documents
        "datasets": [
            {
                "name": name,
                "path": f"datasets/{name}",
                "tokenizer_name": plan.target.path.stem,
                "vocab_size": plan.target.vocab_size,
                "bos_id": plan.target.bos_id,
                "stats": {
                    "files_train": splits["train"]["files"],
                    "files_val": splits["val"]["files"],
                    "docs_train": splits["train"]["docs"],
                    "docs_val": splits["val"]["docs"],
                    "tokens_train": splits["train"]["tokens"],
                    "tokens_val": splits["val"]["tokens"],
                },
                "splits": splits,
                "split_rule": "as the input shards (by file name)",
                "files": entries,
                "caseops": caseops.NAME if plan.caseops else None,
                "val_bytes": "sidecar" if plan.caseops else "tokenizer",
            }
        ],
        "tokenizers": [
            {
                "name": plan.target.path.stem,
                "kind": "sentencepiece_bpe",
                "vocab_size": plan.target.vocab_size,
                "model_path": f"tokenizers/{plan.target.path.name}",
                "sha256": plan.target.sha256,
                "trained_here": False,
                "settings": None,
            }
        ],
        "retokenized_from": {
            "name": plan.source.path.stem,
            "vocab_size": plan.source.vocab_size,
            "sha256": plan.source.sha256,
        },
        "inputs": [str(p) for p in plan.files],
        "built_with": {
            "script": "data/retokenize.py",
            "python": platform.python_version(),
            "sentencepiece": spm.__version__,
            "numpy": np.__version__,
            "workers": plan.workers,
        },
        "encode_seconds": round(seconds, 3),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    description, details = __doc__.split("\n\n", 1)  # the docstring's first line; the rest as written
    p = argparse.ArgumentParser(
        description=description, epilog=details, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--from-model", required=True, type=Path, help="the SentencePiece .model the shards were made with")
    p.add_argument("--to-model", required=True, type=Path, help="the SentencePiece .model to re-tokenize with")
    p.add_argument("--input", required=True, help="a folder of fineweb_*.bin shards, or a (quoted) glob pattern")
    p.add_argument("--output", required=True, type=Path, help="folder for the new shards and manifest.json")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="encoding processes (default: all cores)")
    p.add_argument("--overwrite", action="store_true", help="replace shards already in --output")
    p.add_argument("--quiet", action="store_true", help="no progress line and no summary")
    p.add_argument(
        "--caseops",
        action="store_true",
        help="--to-model is a CaseOps tokenizer (data/caseops.py): case-transform the text before encoding it, and "
        "write a byte sidecar fineweb_val_bytes_*.bin beside each validation shard",
    )
    args, extra = p.parse_known_args(argv)
    if extra:  # most often an unquoted --input glob: the shell expanded it, and its first file became --input
        p.error(
            f"unrecognized arguments: {' '.join(extra[:2])}{' ...' * (len(extra) > 2)}; quote a --input pattern "
            "(--input 'DIR/fineweb_*.bin') so that the shell does not expand it"
        )
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        plan = make_plan(args)
        run(plan, args.quiet)
    except (RetokenizeError, train_gpt.ShardError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
