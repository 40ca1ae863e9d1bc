r"""Download the published pre-tokenized FineWeb shards and their tokenizer from the Hugging Face hub.

  python3 data/cached_challenge_fineweb.py --variant sp1024 --train-shards 1   # full val + 1 train shard
  python3 data/cached_challenge_fineweb.py --variant sp1024                    # full val + 80 train shards
  python3 data/cached_challenge_fineweb.py --variant sp1024 --train-shards 0 --with-docs  # + the documents
  # the records' CaseOps dataset (validation shards with byte sidecars):
  MATCHED_FINEWEB_REPO_ID=romeerp/parameter-golf-caseops-v1 MATCHED_FINEWEB_REMOTE_ROOT_PREFIX=datasets \
      python3 data/cached_challenge_fineweb.py --variant sp8192_lossless_caps_caseops_v1_reserved --train-shards 80
  # your own export in the same layout (data/build_shards.py writes a matching manifest.json):
  MATCHED_FINEWEB_REPO_ID=you/your-repo MATCHED_FINEWEB_REMOTE_ROOT_PREFIX=my_export \
      python3 data/cached_challenge_fineweb.py --dataset mytext_sp1024 --train-shards 4

The hub side (dataset repo willdepueoai/parameter-golf; every path below its prefix `datasets`):
  <prefix>/manifest.json                                    datasets, their shard counts, tokenizers
  <prefix>/datasets/fineweb10B_<variant>/fineweb_val_000000.bin ...    the validation split (all of it)
  <prefix>/datasets/fineweb10B_<variant>/fineweb_val_bytes_000000.bin ...  its byte sidecars, where the
      manifest marks them (val_bytes_glob, or sidecar files listed with the dataset)
  <prefix>/datasets/fineweb10B_<variant>/fineweb_train_000000.bin ...  training shards (the first N)
  <prefix>/tokenizers/fineweb_1024_bpe.model ...            the dataset's tokenizer files
  <prefix>/docs_selected.jsonl, docs_selected.source_manifest.json    the documents (--with-docs)
lands here as data/datasets/manifest.json, data/datasets/fineweb10B_<variant>/, data/tokenizers/ and
data/docs_selected.jsonl. The dataset's folder also gets a manifest.json of its own: the dataset's entry,
with val_bytes saying which bytes its sidecars count (data/README.md, "Which bytes a sidecar counts"),
which train_gpt.py reads there.

Run it again to resume: a file already here is kept when it is complete and valid (the size the hub
reports; for shards also the header and its exact size, via train_gpt.read_shard_header; a sidecar as
long as its shard), anything else is fetched again (huggingface_hub retries and resumes a transfer that
breaks during a run). Files are fetched into data/datasets/.download/ and checked before they are moved
into place: size, shard header, a sidecar's length, and the sha256 where the manifest lists one or the
hub's ETag is one (git LFS files); the documents against docs_sha256 and num_docs of their source manifest.
The hub is HF_ENDPOINT or --endpoint; a token from `hf auth login` is used for private repos.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import constants as hf_constants
from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import train_gpt  # noqa: E402  (the trainer defines the shard format: its reader and ShardError)
import build_shards  # noqa: E402  (this script's folder is on sys.path)
from build_shards import file_sha256  # noqa: E402

DEFAULT_REPO_ID = "willdepueoai/parameter-golf"
DEFAULT_REMOTE_ROOT = "datasets"
DEFAULT_TRAIN_SHARDS = 80  # 8B tokens of the sp1024 export, as the published instructions
DATA_DIR = Path(__file__).resolve().parent
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
VARIANT_DATASET = re.compile(r"fineweb10B_(\w+)")  # --variant V is the dataset fineweb10B_V
METADATA_TIMEOUT_S = 30.0


class DownloadError(RuntimeError):
    """A download that cannot go on; the message says what to do."""


# =================================================================================================
# The hub: where files are, what the hub says about them, and fetching one
# =================================================================================================


@dataclass
class Hub:
    repo_id: str
    remote_root: str  # path prefix inside the repo; "" for the repo root
    revision: str = "main"
    endpoint: str | None = None  # None: HF_ENDPOINT or huggingface.co

    def remote(self, relative: str) -> str:
        return "/".join(p.strip("/") for p in (self.remote_root, relative) if p.strip("/"))

    def where(self) -> str:
        return f"dataset repo {self.repo_id!r} (revision {self.revision}) at {self.endpoint or hf_constants.ENDPOINT}"

    def file_info(self, relative: str) -> tuple[int | None, str | None]:
        """(size, etag) of a file on the hub; one request, no retries."""
        url = hf_hub_url(
            self.repo_id, self.remote(relative), repo_type="dataset", revision=self.revision, endpoint=self.endpoint
        )
        try:
            meta = get_hf_file_metadata(url, timeout=METADATA_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - translated into a message that says what to do, then raised
            raise self.explain(exc, relative) from exc
        return meta.size, meta.etag

    def fetch(self, relative: str, staging: Path) -> Path:
        """Download one file into the staging folder (huggingface_hub retries transient errors)."""
        try:
            return Path(
                hf_hub_download(
                    self.repo_id,
                    self.remote(relative),
                    repo_type="dataset",
                    revision=self.revision,
                    local_dir=staging,
                    endpoint=self.endpoint,
                )
            )
        except Exception as exc:  # noqa: BLE001 - as above
            raise self.explain(exc, relative) from exc

    def explain(self, exc: Exception, relative: str) -> DownloadError:
        path = self.remote(relative)
        if isinstance(exc, LocalEntryNotFoundError):  # before EntryNotFoundError: a subclass of it
            reason = "cannot reach the hub (no connection)"
        elif isinstance(exc, GatedRepoError):
            reason = "the repo is gated: accept its terms on the hub and log in (hf auth login)"
        elif isinstance(exc, RepositoryNotFoundError):
            reason = (
                "no such repo, or it is private (log in with hf auth login); set --repo-id or MATCHED_FINEWEB_REPO_ID"
            )
        elif isinstance(exc, RevisionNotFoundError):
            reason = "no such revision; set --revision"
        elif isinstance(exc, EntryNotFoundError):
            reason = "no such file in the repo; check --remote-root (MATCHED_FINEWEB_REMOTE_ROOT_PREFIX)"
        elif isinstance(exc, HfHubHTTPError):
            reason = "the hub answered with an error"
        else:
            reason = "cannot reach the hub"
        return DownloadError(
            f"{path} from {self.where()}: {reason}. ({type(exc).__name__}: {exc})\n"
            "Check the network (and HF_ENDPOINT if set), then run the same command "
            "again: complete files are kept. Without hub access, build shards from your "
            "own text with data/build_shards.py, or try data/quickstart.py."
        )


# =================================================================================================
# The plan: which files, from the manifest
# =================================================================================================


@dataclass
class FileTask:
    remote: str  # relative to the remote root
    local: Path
    kind: str = "file"  # "shard", "sidecar" (a validation shard's byte sidecar), "docs" or "file"
    sha256: str | None = None  # from the manifest, when it lists one
    shard: Path | None = None  # a sidecar's shard: the sidecar must be as long as it
    documents: int | None = None  # the documents' count (num_docs of their source manifest), when given

    @property
    def is_shard(self) -> bool:
        return self.kind in ("shard", "sidecar")


def dataset_entry(manifest: dict, dataset_name: str) -> dict:
    datasets = {d.get("name"): d for d in manifest.get("datasets", [])}
    if dataset_name not in datasets:
        names = sorted(map(str, datasets))
        variants = [m.group(1) for m in map(VARIANT_DATASET.fullmatch, names) if m]
        as_variants = f" (--variant {', '.join(variants)})" if variants else ""
        raise DownloadError(
            f"the manifest has no dataset {dataset_name!r}; it has: {', '.join(names) or 'none'}"
            f"{as_variants}. Pick one with --variant "
            "(fineweb10B_<variant>) or --dataset. Shards of another vocabulary come from another repo or "
            'are made here: data/README.md, "Which shards for which vocabulary".'
        )
    return datasets[dataset_name]


def has_sidecars(entry: dict) -> bool:
    """Whether the dataset's validation shards have byte sidecars: the records' exporter marks them with
    val_bytes_glob, data/build_shards.py lists them among its files (split val_bytes) and names them in val_bytes."""
    listed = any(f.get("split") == "val_bytes" for f in entry.get("files", []))
    return bool(entry.get("val_bytes_glob")) or listed or entry.get("val_bytes") in ("sidecar", "sidecar_raw")


def val_bytes_convention(entry: dict) -> str:
    """Which bytes bpb divides by (data/README.md): "tokenizer" (no sidecars), "sidecar" (this project's: the text
    as the tokenizer normalizes it) or "sidecar_raw" (the original document's UTF-8 bytes: the records' exporter,
    whose manifest marks sidecars with val_bytes_glob and says nothing of which bytes)."""
    if entry.get("val_bytes") in ("tokenizer", "sidecar", "sidecar_raw"):
        return entry["val_bytes"]
    return "sidecar_raw" if has_sidecars(entry) else "tokenizer"


def shard_tasks(entry: dict, train_shards: int, data_dir: Path) -> list[FileTask]:
    """Validation shards (all, each followed by its byte sidecar where the dataset has them), then the first
    train_shards training shards."""
    name = entry["name"]
    remote_dir = entry.get("path") or f"datasets/{name}"
    listed = {f["name"]: f for f in entry.get("files", [])}
    stats = entry.get("stats") or {}
    names = {}
    for split in ("val", "train"):
        count = stats.get(f"files_{split}")
        if count is None:
            count = sum(f.get("split") == split for f in listed.values())
        names[split] = [f"fineweb_{split}_{i:06d}.bin" for i in range(int(count))]
    if not names["val"]:
        raise DownloadError(f"the manifest lists no validation shards for {name!r}.")
    if train_shards > len(names["train"]):
        raise DownloadError(f"--train-shards {train_shards}: {name} has {len(names['train'])} training shards.")
    local_dir = data_dir / "datasets" / name
    tasks = []
    for n in names["val"] + names["train"][:train_shards]:
        tasks.append(FileTask(f"{remote_dir}/{n}", local_dir / n, "shard", listed.get(n, {}).get("sha256")))
        if n.startswith("fineweb_val_") and has_sidecars(entry):
            side = n.replace("fineweb_val_", "fineweb_val_bytes_", 1)
            sha = listed.get(side, {}).get("sha256")
            tasks.append(FileTask(f"{remote_dir}/{side}", local_dir / side, "sidecar", sha, local_dir / n))
    return tasks


def tokenizer_entry(manifest: dict, entry: dict) -> dict:
    tokenizers = {t.get("name"): t for t in manifest.get("tokenizers", [])}
    tokenizer = tokenizers.get(entry.get("tokenizer_name"))
    if tokenizer is None:
        raise DownloadError(
            f"the manifest names tokenizer {entry.get('tokenizer_name')!r} for {entry['name']!r} but does not list it."
        )
    return tokenizer


def tokenizer_tasks(tokenizer: dict, data_dir: Path) -> list[FileTask]:
    paths = [tokenizer[k] for k in ("model_path", "vocab_path", "path") if tokenizer.get(k)]
    if not paths:
        raise DownloadError(f"the manifest's tokenizer entry {tokenizer.get('name')!r} names no file.")
    return [
        FileTask(
            remote, data_dir / "tokenizers" / Path(remote).name, "file", tokenizer.get("sha256") if i == 0 else None
        )
        for i, remote in enumerate(paths)
    ]


def plan(manifest: dict, dataset_name: str, train_shards: int, data_dir: Path) -> list[FileTask]:
    """Validation shards (all) and their byte sidecars, the first train_shards training shards, then the tokenizer
    files."""
    entry = dataset_entry(manifest, dataset_name)
    return shard_tasks(entry, train_shards, data_dir) + tokenizer_tasks(tokenizer_entry(manifest, entry), data_dir)


# =================================================================================================
# The challenge's documents (--with-docs)
# =================================================================================================

DOCS = "docs_selected.jsonl"  # the challenge's documents, in the order of its split: validation first
DOCS_MANIFEST = "docs_selected.source_manifest.json"  # docs_sha256 (of that file), num_docs, docs_val


def docs_source(hub: Hub, data_dir: Path, staging: Path) -> dict:
    """Fetch the documents' source manifest (small: always) and read it."""
    task = FileTask(DOCS_MANIFEST, data_dir / DOCS_MANIFEST)
    fetch_checked(hub, task, staging, *hub.file_info(task.remote))
    try:
        source = json.loads(task.local.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DownloadError(f"{task.local}: not a JSON manifest ({exc}); delete it and run again.") from None
    if not isinstance(source, dict) or not SHA256_HEX.fullmatch(str(source.get("docs_sha256", ""))):
        raise DownloadError(
            f"{hub.remote(DOCS_MANIFEST)} from {hub.where()} gives no docs_sha256: without it the documents' list and "
            "order cannot be checked. Is this the challenge's export (--repo-id, --remote-root)?"
        )
    return source


def count_documents(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


# =================================================================================================
# Checking and fetching files
# =================================================================================================


def problem_with(path: Path, task: FileTask, size: int | None, etag: str | None, full: bool) -> str | None:
    """Why the file at `path` is not the hub's file, or None. full: also hash it (and count the documents)."""
    if not path.is_file():
        return "missing"
    actual = path.stat().st_size
    if size is not None and actual != size:
        return f"{actual} bytes, the hub has {size}"
    if task.is_shard:
        try:
            tokens = train_gpt.read_shard_header(path)
        except train_gpt.ShardError as exc:
            return str(exc)
        shard_tokens = train_gpt.read_shard_header(task.shard) if task.kind == "sidecar" else tokens
        if tokens != shard_tokens:
            return f"a byte sidecar of {tokens} values, its shard {task.shard.name} has {shard_tokens} tokens"
    expected_sha = task.sha256 or (etag if etag and SHA256_HEX.fullmatch(etag) else None)
    if full and expected_sha and file_sha256(path) != expected_sha:
        return f"sha256 differs from {expected_sha}"
    if full and task.documents is not None and (found := count_documents(path)) != task.documents:
        return f"it holds {found} documents, its source manifest says {task.documents}"
    return None


def fetch_checked(hub: Hub, task: FileTask, staging: Path, size: int | None, etag: str | None) -> None:
    """Fetch into staging, check, then move into place (so a bad file never sits at task.local)."""
    fetched = hub.fetch(task.remote, staging)
    problem = problem_with(fetched, task, size, etag, full=True)
    if problem:
        fetched.unlink()
        raise DownloadError(
            f"{hub.remote(task.remote)} from {hub.where()} is not valid after download: "
            f"{problem}. Run again to retry; if it persists, the file on the hub is bad."
        )
    task.local.parent.mkdir(parents=True, exist_ok=True)
    os.replace(fetched, task.local)


def write_dataset_manifest(manifest: dict, dataset_name: str, hub: Hub, data_dir: Path) -> tuple[Path, str]:
    """DATA_PATH/manifest.json: the dataset's entry, val_bytes saying which bytes its sidecars count, and its
    tokenizer's; train_gpt.py reads it there (as it reads the one data/build_shards.py writes beside its shards)."""
    entry = dataset_entry(manifest, dataset_name)
    local = {
        "datasets": [{**entry, "val_bytes": val_bytes_convention(entry)}],
        "tokenizers": [tokenizer_entry(manifest, entry)],
        "downloaded_from": hub.where(),
    }
    path = data_dir / "datasets" / dataset_name / "manifest.json"
    build_shards.write_json(path, local)
    return path, local["datasets"][0]["val_bytes"]


def download(
    hub: Hub, dataset_name: str, train_shards: int, data_dir: Path = DATA_DIR, say=print, with_docs: bool = False
) -> list[Path]:
    """Fetch the manifest, then every file it calls for that is not here yet; returns their paths. with_docs: also
    the challenge's documents and their source manifest, checked against its docs_sha256 and num_docs."""
    staging = data_dir / "datasets" / ".download"
    manifest_task = FileTask("manifest.json", data_dir / "datasets" / "manifest.json")
    size, etag = hub.file_info(manifest_task.remote)  # fails fast (no retries) when the hub is out of reach
    fetch_checked(hub, manifest_task, staging, size, etag)  # always: it is small and may have changed
    try:
        manifest = json.loads(manifest_task.local.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DownloadError(f"{manifest_task.local}: not a JSON manifest ({exc}); delete it and run again.") from None
    tasks = plan(manifest, dataset_name, train_shards, data_dir)
    source = docs_source(hub, data_dir, staging) if with_docs else None
    if source is not None:
        num_docs = None if source.get("num_docs") is None else int(source["num_docs"])
        tasks.append(FileTask(DOCS, data_dir / DOCS, "docs", source["docs_sha256"], documents=num_docs))
    count = {k: sum(t.kind == k for t in tasks) for k in ("shard", "sidecar", "file", "docs")}
    say(
        f"{dataset_name}: {count['shard'] - train_shards} validation shards, {count['sidecar']} byte sidecars, "
        f"{train_shards} training shards, {count['file']} tokenizer files{', the documents' * bool(source)} "
        f"from {hub.where()}"
    )
    t0, fetched_bytes = time.perf_counter(), 0
    for i, task in enumerate(tasks, 1):
        size, etag = hub.file_info(task.remote)
        problem = problem_with(task.local, task, size, etag, full=False)
        where = task.local.relative_to(data_dir) if task.local.is_relative_to(data_dir) else task.local
        if problem is None:
            say(f"[{i}/{len(tasks)}] {where}: complete, kept")
            continue
        say(f"[{i}/{len(tasks)}] {where}: fetching {size / 1e6 if size else float('nan'):.1f}MB ({problem})")
        t1 = time.perf_counter()
        fetch_checked(hub, task, staging, size, etag)
        fetched_bytes += task.local.stat().st_size
        seconds = time.perf_counter() - t1
        rate = task.local.stat().st_size / 1e6 / max(seconds, 1e-9)
        say(f"[{i}/{len(tasks)}] {where}: ok {seconds:.1f}s {rate:.1f}MB/s")
    shutil.rmtree(staging, ignore_errors=True)  # only hub bookkeeping is left in it
    local_manifest, val_bytes = write_dataset_manifest(manifest, dataset_name, hub, data_dir)
    say(
        f"done: fetched {fetched_bytes / 1e6:.1f}MB in {time.perf_counter() - t0:.1f}s; "
        f"DATA_PATH={local_manifest.parent} (val_bytes:{val_bytes})"
        + (f"; documents: {data_dir / DOCS}" if source else "")
    )
    return [t.local for t in tasks]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    description, details = __doc__.split("\n\n", 1)  # the docstring's first line; the rest as written
    p = argparse.ArgumentParser(
        description=description, epilog=details, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--variant", default="sp1024", help="tokenizer variant: the dataset is fineweb10B_<variant>")
    p.add_argument("--dataset", help="dataset name in the manifest (overrides --variant)")
    p.add_argument(
        "--train-shards",
        type=int,
        default=DEFAULT_TRAIN_SHARDS,
        help=f"how many training shards, from the first (default {DEFAULT_TRAIN_SHARDS})",
    )
    p.add_argument(
        "--repo-id",
        default=os.environ.get("MATCHED_FINEWEB_REPO_ID", DEFAULT_REPO_ID),
        help="hub dataset repo (env MATCHED_FINEWEB_REPO_ID)",
    )
    p.add_argument(
        "--remote-root",
        default=os.environ.get("MATCHED_FINEWEB_REMOTE_ROOT_PREFIX", DEFAULT_REMOTE_ROOT),
        help="path prefix inside the repo, '' for its root (env MATCHED_FINEWEB_REMOTE_ROOT_PREFIX)",
    )
    p.add_argument("--revision", default="main", help="branch, tag or commit of the repo")
    p.add_argument(
        "--endpoint", default=None, help="hub URL, scheme included (default: HF_ENDPOINT or https://huggingface.co)"
    )
    p.add_argument("--data-dir", type=Path, default=DATA_DIR, help="where datasets/ and tokenizers/ go")
    p.add_argument(
        "--with-docs",
        action="store_true",
        help=f"also the challenge's documents: {DOCS} (validation split first) and {DOCS_MANIFEST}, "
        "checked against its docs_sha256 and num_docs, into --data-dir",
    )
    args = p.parse_args(argv)
    if args.train_shards < 0:
        p.error("--train-shards must be >= 0")
    endpoint_error = bad_endpoint(args.endpoint, "--endpoint ") if args.endpoint is not None else None
    if args.endpoint is None and os.environ.get("HF_ENDPOINT"):
        endpoint_error = bad_endpoint(os.environ["HF_ENDPOINT"], "HF_ENDPOINT=")
    if endpoint_error:
        p.error(endpoint_error)
    return args


def bad_endpoint(url: str, name: str) -> str | None:
    """What is wrong with a hub URL given as `name` (--endpoint or HF_ENDPOINT), or None. Without a scheme
    (example.org) huggingface_hub's requests fail as if the network were down: say so before any request."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme in ("http", "https") and parts.netloc:
        return None
    host = (url.strip("/") if "://" not in url else parts.netloc + parts.path) or "huggingface.co"
    shown = url or "''"
    return f"{name}{shown} is not a hub URL: give the scheme and host, e.g. {name}https://{host}"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    hub = Hub(args.repo_id, args.remote_root, args.revision, args.endpoint)
    try:
        dataset = args.dataset or f"fineweb10B_{args.variant}"
        download(hub, dataset, args.train_shards, args.data_dir, with_docs=args.with_docs)
    except (DownloadError, train_gpt.ShardError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
