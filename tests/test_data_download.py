"""The downloader (data/cached_challenge_fineweb.py) against a stand-in hub on 127.0.0.1.

The stand-in implements the two requests huggingface_hub's hf_hub_download makes (HEAD and GET of
/datasets/<repo>/resolve/<revision>/<path>, with Range for resumed downloads), so the real download
code runs end to end; no network is used. Run: python3 -m pytest -q tests/test_data_download.py
"""

import hashlib
import http.server
import json
import re
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "data"))

import build_shards  # noqa: E402
import cached_challenge_fineweb as dl  # noqa: E402
import train_gpt  # noqa: E402

REPO = "someone/golf-export"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
    """Serves {path: bytes} as a hub dataset repo (and other_repos, {repo_id: files}, beside it); counts the GETs of
    each path."""

    def __init__(self, files: dict[str, bytes], repo_id: str = REPO, other_repos: dict | None = None):
        self.files, self.repo_id, self.gets = dict(files), repo_id, {}
        self.repos = {repo_id: self.files, **(other_repos or {})}
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_HEAD(self):
                self.answer(body=False)

            def do_GET(self):
                self.answer(body=True)

            def answer(self, body: bool):
                m = re.fullmatch(r"/datasets/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", self.path)
                if not m or m.group(1) not in hub.repos:
                    return self.error(404, "RepoNotFound")
                if m.group(2) not in ("main", COMMIT):
                    return self.error(404, "RevisionNotFound")
                data = hub.repos[m.group(1)].get(m.group(3))
                if data is None:
                    return self.error(404, "EntryNotFound")
                # LFS files carry their sha256 as the ETag; small git files a sha1.
                lfs = m.group(3).endswith((".bin", ".model", ".jsonl"))
                etag = hashlib.sha256(data).hexdigest() if lfs else hashlib.sha1(data).hexdigest()
                start = 0
                if body and self.headers.get("Range"):
                    start = int(re.fullmatch(r"bytes=(\d+)-", self.headers["Range"]).group(1))
                self.send_response(206 if start else 200)
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", f'"{etag}"')
                self.send_header("Content-Length", str(len(data) - start))
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.end_headers()
                if body:
                    hub.gets[m.group(3)] = hub.gets.get(m.group(3), 0) + 1
                    self.wfile.write(data[start:])

            def error(self, code: int, error_code: str):
                self.send_response(code)
                self.send_header("X-Error-Code", error_code)
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def shard_bytes(tmp_path: Path, tokens) -> bytes:
    path = tmp_path / "one_shard.bin"
    build_shards.write_data_shard(path, np.asarray(tokens, dtype=np.uint16))
    return path.read_bytes()


def published_export(tmp_path: Path, prefix: str = "datasets", train: int = 3) -> dict[str, bytes]:
    """A small export in the published layout: manifest, sp1024 shards, tokenizer files."""
    rng = np.random.default_rng(0)
    files = {}
    name = "fineweb10B_sp1024"
    for split, count in (("val", 1), ("train", train)):
        for i in range(count):
            tokens = np.concatenate([[1], rng.integers(4, 1024, 5000 + 100 * i)])
            files[f"{prefix}/datasets/{name}/fineweb_{split}_{i:06d}.bin"] = shard_bytes(tmp_path, tokens)
    files[f"{prefix}/tokenizers/fineweb_1024_bpe.model"] = b"model bytes " * 100
    files[f"{prefix}/tokenizers/fineweb_1024_bpe.vocab"] = b"vocab\t0\n" * 50
    manifest = {
        "datasets": [
            {
                "name": name,
                "tokenizer_name": "sp_bpe_1024",
                "path": f"datasets/{name}",
                "stats": {"files_train": train, "files_val": 1},
            },
            {"name": "fineweb10B_sp4096", "tokenizer_name": "sp_bpe_4096", "stats": {"files_train": 0, "files_val": 1}},
        ],
        "tokenizers": [
            {
                "name": "sp_bpe_1024",
                "kind": "sentencepiece_bpe",
                "model_path": "tokenizers/fineweb_1024_bpe.model",
                "vocab_path": "tokenizers/fineweb_1024_bpe.vocab",
            }
        ],
    }
    files[f"{prefix}/manifest.json"] = json.dumps(manifest).encode()
    return files


@pytest.fixture
def hub(tmp_path):
    with FakeHub(published_export(tmp_path)) as fake:
        yield fake


def run(fake: FakeHub, data_dir: Path, train_shards: int = 2, prefix: str = "datasets", repo: str = REPO):
    hub = dl.Hub(repo, prefix, "main", fake.endpoint)
    return dl.download(hub, "fineweb10B_sp1024", train_shards, data_dir, say=lambda *a: None)


def test_download_fetches_the_manifest_val_first_train_shards_and_tokenizer(hub, tmp_path):
    data = tmp_path / "data"
    paths = run(hub, data, train_shards=2)
    names = sorted(p.relative_to(data).as_posix() for p in paths)
    assert names == [
        "datasets/fineweb10B_sp1024/fineweb_train_000000.bin",
        "datasets/fineweb10B_sp1024/fineweb_train_000001.bin",
        "datasets/fineweb10B_sp1024/fineweb_val_000000.bin",
        "tokenizers/fineweb_1024_bpe.model",
        "tokenizers/fineweb_1024_bpe.vocab",
    ]
    for p in paths:
        assert p.read_bytes() == hub.files["datasets/" + p.relative_to(data).as_posix()]
    assert (data / "datasets" / "manifest.json").is_file()
    assert "datasets/datasets/fineweb10B_sp1024/fineweb_train_000002.bin" not in hub.gets
    assert not (data / "datasets" / ".download").exists()  # staging is cleaned up
    # The downloaded shards load with the trainer's reader.
    assert train_gpt.load_data_shard(paths[0]).numel() == train_gpt.read_shard_header(paths[0])


def test_resume_keeps_valid_files_and_refetches_truncated_corrupt_and_missing_ones(hub, tmp_path):
    data = tmp_path / "data"
    run(hub, data, train_shards=3)
    first_gets = dict(hub.gets)
    assert all(n == 1 for n in first_gets.values())
    shard_dir = data / "datasets" / "fineweb10B_sp1024"
    truncated = shard_dir / "fineweb_train_000000.bin"
    truncated.write_bytes(truncated.read_bytes()[:-10])
    corrupt = shard_dir / "fineweb_train_000001.bin"  # same size, bad magic
    raw = bytearray(corrupt.read_bytes())
    raw[0:4] = (12345).to_bytes(4, "little")
    corrupt.write_bytes(bytes(raw))
    (shard_dir / "fineweb_val_000000.bin").unlink()
    (data / "tokenizers" / "fineweb_1024_bpe.vocab").write_bytes(b"half")

    run(hub, data, train_shards=3)
    refetched = {k for k in hub.gets if hub.gets[k] > first_gets.get(k, 0)}
    assert refetched == {
        "datasets/manifest.json",  # always refreshed (small)
        "datasets/datasets/fineweb10B_sp1024/fineweb_train_000000.bin",
        "datasets/datasets/fineweb10B_sp1024/fineweb_train_000001.bin",
        "datasets/datasets/fineweb10B_sp1024/fineweb_val_000000.bin",
        "datasets/tokenizers/fineweb_1024_bpe.vocab",
    }
    for rel, data_bytes in hub.files.items():
        local = data / rel.removeprefix("datasets/")
        if rel != "datasets/manifest.json":
            assert local.read_bytes() == data_bytes, rel


def test_a_bad_file_on_the_hub_is_not_left_in_place(tmp_path):
    files = published_export(tmp_path)
    key = "datasets/datasets/fineweb10B_sp1024/fineweb_train_000000.bin"
    files[key] = files[key][:-2]  # header count no longer matches the size
    with FakeHub(files) as fake:
        with pytest.raises(dl.DownloadError, match="not valid after download.*truncated or corrupt"):
            run(fake, tmp_path / "data", train_shards=1)
    assert not (tmp_path / "data/datasets/fineweb10B_sp1024/fineweb_train_000000.bin").exists()


def test_sha256_from_the_manifest_is_checked(tmp_path):
    files = published_export(tmp_path)
    manifest = json.loads(files["datasets/manifest.json"])
    manifest["datasets"][0]["files"] = [{"name": "fineweb_val_000000.bin", "split": "val", "sha256": "0" * 64}]
    files["datasets/manifest.json"] = json.dumps(manifest).encode()
    with FakeHub(files) as fake:
        with pytest.raises(dl.DownloadError, match="sha256 differs"):
            run(fake, tmp_path / "data", train_shards=0)


def test_other_prefix_and_repo(tmp_path):
    files = {k.replace("datasets/", "my_export/", 1): v for k, v in published_export(tmp_path).items()}
    with FakeHub(files, repo_id="me/mine") as fake:
        paths = run(fake, tmp_path / "data", train_shards=1, prefix="my_export", repo="me/mine")
        assert len(paths) == 4
        with pytest.raises(dl.DownloadError, match="no such file in the repo; check --remote-root"):
            run(fake, tmp_path / "data2", prefix="datasets", repo="me/mine")
        with pytest.raises(dl.DownloadError, match="no such repo"):
            run(fake, tmp_path / "data3", prefix="my_export", repo="me/other")


def test_manifest_errors_name_what_is_available(hub, tmp_path):
    with pytest.raises(dl.DownloadError, match="has 3 training shards"):
        run(hub, tmp_path / "data", train_shards=4)
    hub_obj = dl.Hub(REPO, "datasets", "main", hub.endpoint)
    with pytest.raises(dl.DownloadError, match="no dataset 'fineweb10B_sp9'.*fineweb10B_sp1024, fineweb10B_sp4096"):
        dl.download(hub_obj, "fineweb10B_sp9", 1, tmp_path / "data", say=lambda *a: None)
    with pytest.raises(dl.DownloadError, match="tokenizer 'sp_bpe_4096'.*does not list it"):
        dl.download(hub_obj, "fineweb10B_sp4096", 0, tmp_path / "data", say=lambda *a: None)


def test_unreachable_hub_fails_fast_with_a_clear_message(tmp_path):
    fake = FakeHub({})
    endpoint = fake.endpoint
    fake.close()  # nothing listens there now
    hub = dl.Hub(REPO, "datasets", "main", endpoint)
    with pytest.raises(dl.DownloadError, match="(?s)cannot reach the hub.*run the same command again"):
        dl.download(hub, "fineweb10B_sp1024", 1, tmp_path / "data", say=lambda *a: None)


def test_command_line_exits_2_with_the_message_on_stderr(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("MATCHED_FINEWEB_REPO_ID", raising=False)
    fake = FakeHub({})
    endpoint = fake.endpoint
    fake.close()
    with pytest.raises(SystemExit) as exit_info:
        dl.main(["--variant", "sp1024", "--train-shards", "1", "--endpoint", endpoint, "--data-dir", str(tmp_path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: datasets/manifest.json from dataset repo 'willdepueoai/parameter-golf'")


def test_a_vocabulary_the_repo_does_not_have_names_the_variants_it_has(hub, tmp_path, capsys):
    """Issue 24, row 12: --variant sp512 from a repo without it. The message lists the variants (not only the
    datasets' names) and points to data/README.md's section on where shards of a vocabulary come from."""
    with pytest.raises(SystemExit) as exit_info:
        dl.main(["--variant", "sp512", "--endpoint", hub.endpoint, "--data-dir", str(tmp_path), "--repo-id", REPO])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert (
        "no dataset 'fineweb10B_sp512'; it has: fineweb10B_sp1024, fineweb10B_sp4096 (--variant sp1024, sp4096)" in err
    )
    assert '"Which shards for which vocabulary"' in err
    readme = (Path(dl.__file__).parent / "README.md").read_text(encoding="utf-8")
    assert "\n## Which shards for which vocabulary\n" in readme
    assert not (tmp_path / "datasets" / "fineweb10B_sp512").exists()


def test_an_export_made_by_build_shards_downloads_and_verifies(tmp_path):
    """build_shards.py's manifest is in the published shape: its output can be served and fetched."""
    import build_shards

    docs = tmp_path / "docs.jsonl"
    docs.write_text(
        "".join(
            json.dumps({"text": f"Document number {i} says {'hello ' * (i % 7)}world."}) + "\n" for i in range(300)
        ),
        encoding="utf-8",
    )
    out, tok = tmp_path / "build" / "mine_sp300", tmp_path / "build" / "mine_sp300.model"
    manifest = build_shards.build(
        build_shards.BuildConfig(
            inputs=[str(docs)],
            output=out,
            tokenizer_out=tok,
            vocab_size=300,
            val_fraction=0.1,
            shard_tokens=1500,
            quiet=True,
        )
    )
    files = {
        "my_export/manifest.json": (out / "manifest.json").read_bytes(),
        "my_export/tokenizers/mine_sp300.model": tok.read_bytes(),
    }
    for entry in manifest["datasets"][0]["files"]:
        files[f"my_export/datasets/mine_sp300/{entry['name']}"] = (out / entry["name"]).read_bytes()
    n_train = manifest["datasets"][0]["stats"]["files_train"]
    assert n_train >= 2
    with FakeHub(files, repo_id="me/mine") as fake:
        hub = dl.Hub("me/mine", "my_export", "main", fake.endpoint)
        paths = dl.download(hub, "mine_sp300", n_train, tmp_path / "data", say=lambda *a: None)
    assert len(paths) == len(files) - 1
    for p in paths:
        source = tok if p.suffix == ".model" else out / p.name
        assert p.read_bytes() == source.read_bytes()
