"""The challenge's data through our tools (issue 41): its documents (--with-docs) and its split (build_shards.py
--val-docs), the records' CaseOps dataset with its byte sidecars, and data/README.md's three recipes run as written
in a fresh copy of the repository, against a stand-in hub on 127.0.0.1 (tests/test_data_download.py's FakeHub).

CPU only, no network. The reference-procedure test needs ../shared (real FineWeb documents and the published sp1024
tokenizer) and is skipped without it. Run: python3 -m pytest -q tests/test_data_challenge.py
"""

import dataclasses
import hashlib
import json
import lzma
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import sentencepiece as spm
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "data"))

import build_shards  # noqa: E402
import cached_challenge_fineweb as dl  # noqa: E402
import train_gpt  # noqa: E402
from helpers import tiny_env  # noqa: E402
from test_data_download import FakeHub, published_export  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
VALPROXY = SHARED / "fineweb_docs" / "fineweb_valproxy200.jsonl.xz"
SP1024 = SHARED / "tokenizers" / "fineweb_1024_bpe.model"
RECORDS_REPO = "romeerp/parameter-golf-caseops-v1"
RECORDS_DATASET = "fineweb10B_sp8192_lossless_caps_caseops_v1_reserved"
RECORDS_TOKENIZER = "fineweb_8192_bpe_lossless_caps_caseops_v1_reserved"
CHALLENGE_REPO = "willdepueoai/parameter-golf"
VAL_DOCS = 40  # the fake challenge's validation split: its first 40 documents (the real one: 50,000)
ONE_CPU = train_gpt.DistContext(0, 1, 0, torch.device("cpu"))
WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from at which but have an they "
    "you were her she there been one all we their has would when if so no out up into new york nasa iphone"
).split()


def challenge_documents(count: int = 300, seed: int = 0) -> list[str]:
    """Documents in English-like words with what CaseOps and the normalization act on: Title and ALLCAPS words, runs
    of spaces, tabs and blank lines (collapsed), a ligature and a fraction (NFKC)."""
    rng = random.Random(seed)
    docs = []
    for _ in range(count):
        sentences = []
        for _ in range(rng.randint(2, 6)):
            words = [rng.choice(WORDS) for _ in range(rng.randint(4, 12))]
            words[0] = words[0].capitalize()
            if rng.random() < 0.3:
                words[1] = words[1].upper()
            sentences.append(" ".join(words) + rng.choice([".", ". \ufb01ne", ", \u00bd."]))
        docs.append(rng.choice([" ", "  ", "\n\n", " \t "]).join(sentences) + rng.choice(["", "  ", "\n"]))
    return docs


def write_jsonl(path: Path, docs: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")
    return path


def build(argv: list[str]) -> dict:
    return build_shards.build(dataclasses.replace(build_shards.parse_args(argv + ["--workers", "1"]), quiet=True))


def shard_tokens(folder: Path, split: str) -> list[np.ndarray]:
    return [train_gpt.load_data_shard(f).numpy() for f in sorted(folder.glob(f"fineweb_{split}_0*.bin"))]


# ---- build_shards.py --val-docs: the challenge's split --------------------------------------------------------------


def reference_shards(sp, docs: list[str], num_val_docs: int, shard_size: int) -> dict[str, list[list[int]]]:
    """The reference repository's export (data/download_hf_docs_and_tokenize.py), as its README and code describe
    it: the documents in order, each BOS + its ids and no EOS; the first num_val_docs are the validation split, the
    rest train; each split in shards of shard_size tokens, its last one short."""
    streams = {"val": [], "train": []}
    for index, text in enumerate(docs):
        streams["val" if index < num_val_docs else "train"] += [sp.bos_id(), *sp.encode(text)]
    return {k: [s[i : i + shard_size] for i in range(0, len(s), shard_size)] for k, s in streams.items()}


@pytest.mark.skipif(not (VALPROXY.is_file() and SP1024.is_file()), reason="needs ../shared (FineWeb documents)")
def test_val_docs_reproduces_the_reference_export_token_for_token(tmp_path):
    """200 of the challenge's own documents with the published sp1024 tokenizer: --val-docs 100 gives the reference
    procedure's validation and training shards exactly, boundaries included (329,104 and 299,353 tokens)."""
    with lzma.open(VALPROXY, "rt", encoding="utf-8") as f:
        docs = [json.loads(line)["text"] for line in f]
    inputs = write_jsonl(tmp_path / "docs_selected.jsonl", docs)
    out = tmp_path / "rebuilt"
    manifest = build([str(inputs), "--val-docs", "100", "--tokenizer", str(SP1024), "--output", str(out)])
    manifest = build(
        [str(inputs), "--val-docs", "100", "--tokenizer", str(SP1024), "--output", str(out)]
        + ["--shard-tokens", "100000", "--overwrite"]
    )
    expected = reference_shards(spm.SentencePieceProcessor(model_file=str(SP1024)), docs, 100, 100_000)
    for split in ("val", "train"):
        assert [s.tolist() for s in shard_tokens(out, split)] == expected[split], split
    entry = manifest["datasets"][0]
    assert (entry["stats"]["tokens_val"], entry["stats"]["tokens_train"]) == (329_104, 299_353)
    assert (entry["stats"]["docs_val"], entry["stats"]["docs_train"]) == (100, 100)
    assert entry["split_rule"] == "the first 100 documents of the inputs, in order; the rest, in order, train"
    assert manifest["inputs_sha256"] == [hashlib.sha256(inputs.read_bytes()).hexdigest()]


def test_val_docs_with_caseops_gives_the_first_n_documents_their_sidecars(tmp_path):
    """--val-docs 7 --caseops: the validation shards hold the first 7 documents in order (their CaseOps form), each
    with its byte sidecar values; the training shards the rest, in order, without sidecars."""
    docs = challenge_documents(60)
    inputs = write_jsonl(tmp_path / "docs.jsonl", docs)
    out, tok = tmp_path / "caseops", tmp_path / "caseops.model"
    manifest = build(
        [str(inputs), "--val-docs", "7", "--caseops", "--vocab-size", "300", "--output", str(out)]
        + ["--tokenizer-out", str(tok)]
    )
    sp = spm.SentencePieceProcessor(model_file=str(tok))
    import caseops

    def documents(tokens: np.ndarray) -> list[list[int]]:
        starts = list(np.flatnonzero(tokens == 1)) + [len(tokens)]
        return [tokens[a + 1 : b].tolist() for a, b in zip(starts, starts[1:])]

    val, train = (np.concatenate(shard_tokens(out, s)) for s in ("val", "train"))
    normalized = [build_shards.normalized_text(sp, d) for d in docs]
    assert [caseops.decode(sp.decode(ids)) for ids in documents(val)] == normalized[:7]
    assert [caseops.decode(sp.decode(ids)) for ids in documents(train)] == normalized[7:]
    sidecar = np.concatenate([train_gpt.load_data_shard(f).numpy() for f in sorted(out.glob("fineweb_val_bytes_*"))])
    starts = list(np.flatnonzero(val == 1)) + [len(val)]
    assert [int(sidecar[a:b].sum()) for a, b in zip(starts, starts[1:])] == [len(t.encode()) for t in normalized[:7]]
    assert not list(out.glob("fineweb_train_bytes_*"))
    assert manifest["datasets"][0]["split_rule"].startswith("the first 7 documents of the inputs, in order")


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--val-docs", "0"], "--val-docs 0 must be at least 1"),
        (["--val-docs", "3", "--val", "VAL"], "--val-docs and --val both choose the validation split"),
        (["--val-docs", "60"], "no training document to train the tokenizer on (60 documents, all validation: "),
        (["--val-docs", "61", "--tokenizer", "TOK"], "--val-docs 61: the inputs hold only 60 documents"),
        # issue 50: every document validation was told to change --val-fraction, which --val-docs ignores; and
        # --val-fraction beside --val-docs or --val was dropped without a word (NEW: a build that wrongly runs leaves
        # its tokenizer in tmp_path, not in data/tokenizers)
        (["--val-docs", "60", "--tokenizer", "TOK"], "give more text or a smaller --val-docs (now 60)"),
        (["--val-docs", "20", "--val-fraction", "0.5", "NEW"], "--val-fraction 0.5 and --val-docs 20 both choose"),
        (["--val", "VAL", "--val-fraction", "0.5", "NEW"], "--val-fraction 0.5 and --val both choose the validation"),
    ],
)
def test_val_docs_errors_say_what_to_change(tmp_path, capsys, extra, message):
    inputs = write_jsonl(tmp_path / "docs.jsonl", challenge_documents(60))
    if "TOK" in extra:
        build_shards.write_atomic(
            tmp_path / "tok.model", build_shards.train_tokenizer_model(challenge_documents(60), 400)
        )
    paths = {
        "VAL": [str(inputs)],
        "TOK": [str(tmp_path / "tok.model")],
        "NEW": ["--tokenizer-out", str(tmp_path / "new.model")],
    }
    extra = [b for a in extra for b in paths.get(a, [a])]
    with pytest.raises(SystemExit) as exit_info:
        build_shards.main([str(inputs), "--output", str(tmp_path / "out"), *extra])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# ---- The records' CaseOps dataset on the hub -----------------------------------------------------------------------


def raw_sidecars(values: np.ndarray, tokens: np.ndarray, docs: list[str]) -> np.ndarray:
    """The records' convention from ours: each document's largest count changed so that the document adds up to
    its original UTF-8 bytes (the records' exporter counts the original text each piece covers)."""
    values = values.astype(np.int64)
    starts = list(np.flatnonzero(tokens == 1)) + [len(tokens)]
    assert len(starts) - 1 == len(docs)
    for doc, a, b in zip(docs, starts, starts[1:]):
        values[a + 1 + np.argmax(values[a + 1 : b])] += len(doc.encode("utf-8")) - values[a:b].sum()
    assert values.min() >= 0
    return values


def records_export(tmp_path: Path, docs: list[str]) -> dict[str, bytes]:
    """The records' CaseOps dataset as their exporter lays it out under the prefix `datasets`: a manifest whose
    dataset marks its sidecars with val_bytes_glob (and says nothing of which bytes they count), validation shards
    with sidecars of the original bytes, training shards, the CaseOps tokenizer (.model, .vocab)."""
    work = tmp_path / "records_build"
    work.mkdir()
    out, tok = work / RECORDS_DATASET, work / f"{RECORDS_TOKENIZER}.model"
    argv = [str(write_jsonl(work / "docs.jsonl", docs)), "--val-docs", str(VAL_DOCS), "--caseops"]
    build(argv + ["--vocab-size", "8192", "--shard-tokens", "1000", "--output", str(out), "--tokenizer-out", str(tok)])
    val_files = sorted(out.glob("fineweb_val_0*.bin"))
    tokens = np.concatenate([train_gpt.load_data_shard(f).numpy() for f in val_files])
    ours = np.concatenate([train_gpt.load_data_shard(build_shards.sidecar_path(f)).numpy() for f in val_files])
    raw = raw_sidecars(ours, tokens, docs[:VAL_DOCS])
    prefix = f"datasets/datasets/{RECORDS_DATASET}"
    files, start = {}, 0
    for f in val_files:
        n = train_gpt.read_shard_header(f)
        build_shards.write_data_shard(work / "sidecar.bin", raw[start : start + n])
        files[f"{prefix}/{build_shards.sidecar_path(f).name}"] = (work / "sidecar.bin").read_bytes()
        start += n
    for f in sorted(out.glob("fineweb_*_0*.bin")):
        if not build_shards.is_sidecar(f):  # ours: the raw ones are above
            files[f"{prefix}/{f.name}"] = f.read_bytes()
    files[f"datasets/tokenizers/{RECORDS_TOKENIZER}.model"] = tok.read_bytes()
    files[f"datasets/tokenizers/{RECORDS_TOKENIZER}.vocab"] = b"pieces\t0\n" * 20
    stats = json.loads((out / "manifest.json").read_text())["datasets"][0]["stats"]
    manifest = {
        "version": "10B",
        "num_docs": len(docs),
        "num_val_docs": VAL_DOCS,
        "shard_size": 1000,
        "append_eos": False,
        "tokenizers": [
            {
                "name": "sp_bpe_8192_lossless_caps_caseops_v1_reserved",
                "kind": "sentencepiece_bpe",
                "model_path": f"tokenizers/{RECORDS_TOKENIZER}.model",
                "vocab_path": f"tokenizers/{RECORDS_TOKENIZER}.vocab",
                "text_transform": "lossless_caps_caseops_v1",
                "reserve_text_transform_controls": True,
            }
        ],
        "datasets": [
            {
                "name": RECORDS_DATASET,
                "tokenizer_name": "sp_bpe_8192_lossless_caps_caseops_v1_reserved",
                "tokenizer_kind": "sentencepiece_bpe",
                "path": f"datasets/{RECORDS_DATASET}",
                "train_glob": f"datasets/{RECORDS_DATASET}/fineweb_train_*.bin",
                "val_glob": f"datasets/{RECORDS_DATASET}/fineweb_val_*.bin",
                "val_bytes_glob": f"datasets/{RECORDS_DATASET}/fineweb_val_bytes_*.bin",
                "vocab_size": stats and spm.SentencePieceProcessor(model_file=str(tok)).vocab_size(),
                "bos_id": 1,
                "eos_id": 2,
                "stats": {k: stats[k] for k in ("docs_val", "docs_train", "files_val", "files_train")},
            }
        ],
    }
    files["datasets/manifest.json"] = json.dumps(manifest, indent=2).encode()
    return files


def challenge_export(tmp_path: Path, docs: list[str]) -> dict[str, bytes]:
    """The reference repository's export with its documents: docs_selected.jsonl and the source manifest beside the
    manifest (the sp1024 shards and tokenizer are tests/test_data_download.py's stand-ins)."""
    files = published_export(tmp_path)
    text = "".join(json.dumps({"text": d}) + "\n" for d in docs).encode()
    files["datasets/docs_selected.jsonl"] = text
    source = {"docs_sha256": hashlib.sha256(text).hexdigest(), "num_docs": len(docs), "docs_val": VAL_DOCS}
    files["datasets/docs_selected.source_manifest.json"] = json.dumps(source).encode()
    return files


@pytest.fixture(scope="module")
def docs() -> list[str]:
    return challenge_documents()


@pytest.fixture(scope="module")
def records_files(docs, tmp_path_factory) -> dict[str, bytes]:
    return records_export(tmp_path_factory.mktemp("records"), docs)


def download(fake: FakeHub, repo: str, dataset: str, data_dir: Path, train_shards: int = 1, **kw) -> list[Path]:
    hub = dl.Hub(repo, "datasets", "main", fake.endpoint)
    return dl.download(hub, dataset, train_shards, data_dir, say=lambda *a: None, **kw)


def test_the_records_caseops_dataset_downloads_with_its_sidecars_and_is_scored_on_the_original_bytes(
    records_files, docs, tmp_path
):
    """Issue 41: the records' dataset marks its sidecars with val_bytes_glob only; they are fetched with their
    shards, and DATA_PATH/manifest.json says they count the original bytes (sidecar_raw), which the trainer divides
    by and logs."""
    data = tmp_path / "data"
    with FakeHub(records_files, repo_id=RECORDS_REPO) as fake:
        paths = download(fake, RECORDS_REPO, RECORDS_DATASET, data)
    folder = data / "datasets" / RECORDS_DATASET
    sidecars = sorted(folder.glob("fineweb_val_bytes_*.bin"))
    assert len(sidecars) == len(list(folder.glob("fineweb_val_0*.bin"))) >= 2 and set(sidecars) <= set(paths)
    for path in sidecars:
        assert path.read_bytes() == records_files[f"datasets/datasets/{RECORDS_DATASET}/{path.name}"]
    local = json.loads((folder / "manifest.json").read_text())
    assert local["datasets"][0]["val_bytes"] == "sidecar_raw" and "built_with" not in local
    tokenizer = data / "tokenizers" / f"{RECORDS_TOKENIZER}.model"
    vocab = spm.SentencePieceProcessor(model_file=str(tokenizer)).vocab_size()
    env = tiny_env(SimpleNamespace(data_path=folder, tokenizer_path=tokenizer, vocab_size=vocab), tmp_path)
    val = train_gpt.preflight(train_gpt.Hyperparameters.from_env(env), ONE_CPU).val
    assert val.bytes_from["val_bytes"] == "sidecar_raw"
    everything = torch.cat([train_gpt.load_data_shard(s) for s in sidecars])
    assert int(everything.sum()) == sum(len(d.encode()) for d in docs[:VAL_DOCS])  # the original bytes


def test_a_sidecar_is_checked_like_a_shard_and_resumed(records_files, tmp_path):
    """A sidecar on the hub shorter than its shard is refused and not left in place; here, a truncated one is fetched
    again and a complete one kept; a sidecar the manifest lists with a sha256 is checked against it."""
    key = f"datasets/datasets/{RECORDS_DATASET}/fineweb_val_bytes_000001.bin"
    short = dict(records_files)
    short[key] = build_sidecar_shorter(records_files[key], tmp_path)
    with FakeHub(short, repo_id=RECORDS_REPO) as fake:
        with pytest.raises(dl.DownloadError, match="not valid after download: a byte sidecar of .* values, its shard"):
            download(fake, RECORDS_REPO, RECORDS_DATASET, tmp_path / "bad")
    assert not (tmp_path / "bad" / "datasets" / RECORDS_DATASET / "fineweb_val_bytes_000001.bin").exists()
    data = tmp_path / "data"
    with FakeHub(records_files, repo_id=RECORDS_REPO) as fake:
        download(fake, RECORDS_REPO, RECORDS_DATASET, data)
        local = data / "datasets" / RECORDS_DATASET / "fineweb_val_bytes_000000.bin"
        local.write_bytes(local.read_bytes()[:-100])
        before = dict(fake.gets)
        download(fake, RECORDS_REPO, RECORDS_DATASET, data)
        again = {k for k in fake.gets if fake.gets[k] > before.get(k, 0)}
        assert again == {"datasets/manifest.json", f"datasets/datasets/{RECORDS_DATASET}/fineweb_val_bytes_000000.bin"}
    listed = dict(records_files)
    manifest = json.loads(listed["datasets/manifest.json"])
    manifest["datasets"][0]["files"] = [
        {"name": "fineweb_val_bytes_000000.bin", "split": "val_bytes", "sha256": "0" * 64}
    ]
    listed["datasets/manifest.json"] = json.dumps(manifest).encode()
    with FakeHub(listed, repo_id=RECORDS_REPO) as fake:
        with pytest.raises(dl.DownloadError, match="fineweb_val_bytes_000000.bin .*sha256 differs from 0000"):
            download(fake, RECORDS_REPO, RECORDS_DATASET, tmp_path / "listed")


def test_a_caseops_export_of_ours_downloads_with_its_listed_sidecars(docs, tmp_path):
    """data/build_shards.py --caseops served as an export: its manifest lists the sidecars (split val_bytes, with
    their sha256) and says val_bytes: sidecar; they come with their shards and keep that convention."""
    out, tok = tmp_path / "build" / "ours_caseops", tmp_path / "build" / "ours_caseops.model"
    argv = [str(write_jsonl(tmp_path / "docs.jsonl", docs)), "--val-docs", str(VAL_DOCS), "--caseops"]
    manifest = build(
        argv + ["--vocab-size", "400", "--shard-tokens", "1000", "--output", str(out), "--tokenizer-out", str(tok)]
    )
    entry = manifest["datasets"][0]
    assert "val_bytes_glob" not in entry and entry["val_bytes"] == "sidecar"
    files = {"my_export/manifest.json": (out / "manifest.json").read_bytes()}
    files["my_export/tokenizers/ours_caseops.model"] = tok.read_bytes()
    for f in entry["files"]:
        files[f"my_export/datasets/ours_caseops/{f['name']}"] = (out / f["name"]).read_bytes()
    with FakeHub(files, repo_id="me/mine") as fake:
        hub = dl.Hub("me/mine", "my_export", "main", fake.endpoint)
        dl.download(hub, "ours_caseops", 1, tmp_path / "data", say=lambda *a: None)
    folder = tmp_path / "data" / "datasets" / "ours_caseops"
    sidecars = sorted(p.name for p in folder.glob("fineweb_val_bytes_*.bin"))
    assert sidecars == sorted(f["name"] for f in entry["files"] if f["split"] == "val_bytes") and len(sidecars) >= 2
    assert json.loads((folder / "manifest.json").read_text())["datasets"][0]["val_bytes"] == "sidecar"


def build_sidecar_shorter(data: bytes, tmp_path: Path) -> bytes:
    """A valid shard file with one value fewer than the sidecar given."""
    values = np.frombuffer(data[train_gpt.SHARD_HEADER_BYTES :], dtype="<u2")
    build_shards.write_data_shard(tmp_path / "short.bin", values[:-1])
    return (tmp_path / "short.bin").read_bytes()


# ---- --with-docs ----------------------------------------------------------------------------------------------------


def test_with_docs_fetches_the_documents_checked_against_their_source_manifest(docs, tmp_path):
    files = challenge_export(tmp_path, docs)
    data = tmp_path / "data"
    with FakeHub(files, repo_id=CHALLENGE_REPO) as fake:
        paths = download(fake, CHALLENGE_REPO, "fineweb10B_sp1024", data, train_shards=0, with_docs=True)
        assert data / "docs_selected.jsonl" in paths
        assert (data / "docs_selected.jsonl").read_bytes() == files["datasets/docs_selected.jsonl"]
        assert json.loads((data / "docs_selected.source_manifest.json").read_text())["num_docs"] == len(docs)
        download(fake, CHALLENGE_REPO, "fineweb10B_sp1024", data, train_shards=0, with_docs=True)  # resumed: kept
        assert fake.gets["datasets/docs_selected.jsonl"] == 1
        download(fake, CHALLENGE_REPO, "fineweb10B_sp1024", tmp_path / "plain", train_shards=0)
        assert not (tmp_path / "plain" / "docs_selected.jsonl").exists()  # only when asked
    for change, message in (
        (dict(docs_sha256="0" * 64), "docs_selected.jsonl .*sha256 differs from 0000"),
        (
            dict(num_docs=len(docs) + 1),
            f"not valid after download: it holds {len(docs)} documents, its source manifest says {len(docs) + 1}",
        ),
        (dict(docs_sha256=None), "gives no docs_sha256"),
    ):
        bad = dict(files)
        source = json.loads(bad["datasets/docs_selected.source_manifest.json"]) | change
        bad["datasets/docs_selected.source_manifest.json"] = json.dumps(source).encode()
        target = tmp_path / f"bad{len(message)}"
        with FakeHub(bad, repo_id=CHALLENGE_REPO) as fake:
            with pytest.raises(dl.DownloadError, match=message):
                download(fake, CHALLENGE_REPO, "fineweb10B_sp1024", target, train_shards=0, with_docs=True)
        assert not (target / "docs_selected.jsonl").exists()


# ---- data/README.md's three recipes, as written, in a fresh copy of the repository ----------------------------------

# Sizes only: the stand-in hub's data is small, and the runs are on one CPU process.
AT_A_TINY_SIZE = {
    "torchrun --standalone --nproc_per_node=8 train_gpt.py": "python3 train_gpt.py",
    "--train-shards 80": "--train-shards 2",
    "--val-docs 50000": f"--val-docs {VAL_DOCS}",
    "--vocab-size 8192": "--vocab-size 320",
}
RECORD_AT_A_TINY_SIZE = dict(
    NUM_LAYERS=4,
    LOOP_START=1,
    LOOP_END=2,
    PARALLEL_RESIDUAL_START=3,
    ROPE_DIMS=16,
    ITERATIONS=2,
    WARMUP_STEPS=1,
    EMA_DECAY=0.5,
    TTT_CHUNK_TOKENS=1024,
    TTT_EPOCHS=1,
    GPTQ_CALIBRATION_BATCHES=2,
)


def recipes() -> dict[int, str]:
    """The bash block of each '### Recipe N' of data/README.md."""
    text = (ROOT / "data" / "README.md").read_text(encoding="utf-8")
    found = re.findall(r"\n### Recipe (\d)[^\n]*\n(?:(?!\n### ).)*?```bash\n(.*?)```", text, re.DOTALL)
    return {int(n): block for n, block in found}


def test_the_readme_recipes_run_as_written_in_a_fresh_clone(docs, records_files, tmp_path):
    """Issue 41: (1) the records' CaseOps data from the hub and RECIPE=record on it, (2) CaseOps shards from the
    challenge's own documents with the records' tokenizer, (3) a new tokenizer on the challenge's documents, its
    validation split the challenge's. Each recipe's commands run in a copy of train_gpt.py and data/ against the
    stand-in hub (HF_ENDPOINT), sizes changed as AT_A_TINY_SIZE says; each score names its bytes."""
    blocks = recipes()
    assert sorted(blocks) == [1, 2, 3]
    clone = tmp_path / "clone"
    (clone / "data").mkdir(parents=True)
    shutil.copy(ROOT / "train_gpt.py", clone)
    for path in (ROOT / "data").glob("*.py"):
        shutil.copy(path, clone / "data")
    used = set()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MATCHED_FINEWEB_", "HF_"))}
    env |= {k: v for k, v in tiny_env(SimpleNamespace(data_path="", tokenizer_path="", vocab_size=0), tmp_path).items()}
    for name in ("DATA_PATH", "TOKENIZER_PATH", "VOCAB_SIZE", "ARTIFACT_PATH"):
        env.pop(name)
    env |= {k: str(v) for k, v in RECORD_AT_A_TINY_SIZE.items()} | {"OMP_NUM_THREADS": "1"}
    expected = {1: "sidecar_raw", 2: "sidecar", 3: "tokenizer"}
    records_vocab = None
    with FakeHub(challenge_export(tmp_path, docs), CHALLENGE_REPO, {RECORDS_REPO: records_files}) as fake:
        env["HF_ENDPOINT"] = fake.endpoint
        env["HF_HOME"] = str(tmp_path / "hf_home")
        for n in (1, 2, 3):
            block = blocks[n]
            for old, new in AT_A_TINY_SIZE.items():
                used |= {old} if old in block else set()
                block = block.replace(old, new)
            vocab = 320 if n == 3 else records_vocab
            run_env = env | {"RUN_ID": f"recipe{n}", "ARTIFACT_PATH": str(tmp_path / f"recipe{n}.ptz")}
            if n == 1:  # the tokenizer comes with the download: its vocabulary is known once it is here
                model = records_files[f"datasets/tokenizers/{RECORDS_TOKENIZER}.model"]
                records_vocab = vocab = spm.SentencePieceProcessor(model_proto=model).vocab_size()
            run_env["VOCAB_SIZE"] = str(vocab)
            result = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", block], cwd=clone, env=run_env, capture_output=True, text=True
            )
            assert result.returncode == 0, f"recipe {n}:\n{block}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
            [bytes_from] = re.findall(r"(?:^| )val_bytes:(\S+)", result.stdout, re.MULTILINE)
            assert bytes_from == expected[n], n
            assert re.search(r"^final_\S+_exact val_loss:\S+ val_bpb:\S+", result.stdout, re.MULTILINE), n
    assert used == set(AT_A_TINY_SIZE), "a size this test changes is no longer in the recipes"
    assert (clone / "data" / "docs_selected.jsonl").is_file()


def test_the_readmes_say_which_bytes_a_sidecar_holds_and_which_a_score_used():
    """Issue 44 row 13: README and data/README once said a sidecar holds "the UTF-8 bytes of the original text";
    ours hold the bytes of the text as the tokenizer normalizes it, the records' the original document's. Each value
    the trainer logs as val_bytes: (the recipes' test sees all three) is in README's table with what it divides by,
    and data/README's table names the manifest field and the same three values."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    data_readme = (ROOT / "data" / "README.md").read_text(encoding="utf-8")
    for text in (readme, data_readme):
        assert "bytes of the original text that token stands for" not in text
    rows = dict(re.findall(r"^\| `val_bytes:(\w+)` \| (.+) \|$", readme, re.MULTILINE))
    assert sorted(rows) == ["sidecar", "sidecar_raw", "tokenizer"]
    assert "as the tokenizer normalizes it" in rows["sidecar"] and "original document's" in rows["sidecar_raw"]
    rows = dict(re.findall(r"^\| `(\w+)` \| (.+?) \| .+ \|$", data_readme, re.MULTILINE))
    assert "as the tokenizer normalizes it" in rows["sidecar"] and "original document's" in rows["sidecar_raw"]
    assert "`DATA_PATH/manifest.json`" in data_readme and "`val_bytes` field" in data_readme
