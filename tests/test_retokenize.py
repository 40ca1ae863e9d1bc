"""data/retokenize.py: shards re-tokenized with another SentencePiece model, and its errors.

CPU only, no network, about 10 s (two tiny tokenizers are trained here). The FineWeb check uses
../shared/data (next to the repo) and skips where it is absent.
Run: python3 -m pytest -q tests/test_retokenize.py
"""

import json
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "data"))

import build_shards  # noqa: E402
import cached_challenge_fineweb  # noqa: E402
import retokenize  # noqa: E402
import train_gpt  # noqa: E402
from test_data import ODD_TEXTS, english_docs  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
SP1024 = SHARED / "tokenizers" / "fineweb_1024_bpe.model"
FINEWEB_VAL = SHARED / "fineweb_sample_sp1024" / "fineweb_val_000000.bin"
DOCS = english_docs(120, seed=3) + ODD_TEXTS + [""]  # "" : a document that is only its BOS


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory) -> tuple[Path, Path]:
    """Two different tokenizers: the shards' (300 tokens) and the new one (400)."""
    root = tmp_path_factory.mktemp("tokenizers")
    old, new = root / "old.model", root / "new.model"
    build_shards.train_tokenizer(english_docs(400, seed=1) + ODD_TEXTS, 300, old)
    build_shards.train_tokenizer(english_docs(400, seed=2) + ODD_TEXTS, 400, new)
    return old, new


def encode(model: Path, docs: list[str]) -> np.ndarray:
    sp = spm.SentencePieceProcessor(model_file=str(model))
    return np.array([t for d in docs for t in [sp.bos_id()] + sp.encode(d)], dtype=np.uint16)


@pytest.fixture()
def shards(tmp_path, tokenizers) -> Path:
    """Two train shards and a val shard; the second train shard starts inside a document."""
    folder = tmp_path / "in"
    folder.mkdir()
    train = encode(tokenizers[0], DOCS[:100])
    cut = int(np.flatnonzero(train == 1)[60]) + 5  # five tokens into document 60
    build_shards.write_data_shard(folder / "fineweb_train_000000.bin", train[:cut])
    build_shards.write_data_shard(folder / "fineweb_train_000001.bin", train[cut:])
    build_shards.write_data_shard(folder / "fineweb_val_000000.bin", encode(tokenizers[0], DOCS[100:]))
    return folder


def retok(old: Path, new: Path, inputs, output: Path, *extra: str) -> None:
    retokenize.main(
        [
            "--from-model",
            str(old),
            "--to-model",
            str(new),
            "--input",
            str(inputs),
            "--output",
            str(output),
            "--quiet",
            *extra,
        ]
    )


def documents(tokens: np.ndarray, bos: int = 1) -> list[np.ndarray]:
    """Cut before every BOS; the first piece is what precedes the first BOS (may be empty)."""
    return np.split(tokens, np.flatnonzero(tokens == bos))


def fails_with(capsys, argv_call, *needles: str) -> str:
    with pytest.raises(SystemExit) as exc:
        argv_call()
    assert exc.value.code == 2
    err = capsys.readouterr().err
    for needle in needles:
        assert needle in err, err
    return err


@pytest.mark.parametrize("script", [retokenize, build_shards, cached_challenge_fineweb])
def test_help_shows_the_description_once_and_the_examples_as_written(script, capsys):
    """--help: the docstring's first line once, the options, then the rest of the docstring line for line as the
    source file has it: the examples keep their backslash line breaks, so they can be pasted. (retokenize printed
    the description twice and joined each backslash-ended line with the next: the docstring was no raw string.)
    The other data tools' --help is checked alike."""
    written = Path(script.__file__).read_text(encoding="utf-8").split('"""')[1]
    with pytest.raises(SystemExit) as exc:
        script.parse_args(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    description, details = written.split("\n\n", 1)
    assert out.count(description) == 1
    assert "\\\n" in details  # the examples break lines with backslashes
    assert details in out
    assert out.index(description) < out.index("--help") < out.index(details)


def test_same_model_gives_identical_shards(tmp_path, tokenizers, shards):
    retok(tokenizers[0], tokenizers[0], shards, tmp_path / "out", "--workers", "2")
    for path in sorted(shards.glob("*.bin")):
        assert (tmp_path / "out" / path.name).read_bytes() == path.read_bytes()


def test_other_model_gives_the_ids_of_the_decoded_text(tmp_path, tokenizers, shards):
    old = spm.SentencePieceProcessor(model_file=str(tokenizers[0]))
    new = spm.SentencePieceProcessor(model_file=str(tokenizers[1]))
    out = tmp_path / "out"
    retok(tokenizers[0], tokenizers[1], shards, out, "--workers", "2")
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in shards.iterdir()) + ["manifest.json"]
    for path in sorted(shards.glob("*.bin")):
        before = documents(train_gpt.load_data_shard(path).numpy())
        after = documents(train_gpt.load_data_shard(out / path.name).numpy(), new.bos_id())
        assert len(after) == len(before)
        # The piece before the first BOS (a document begun in the previous shard) gets no BOS.
        assert after[0].tolist() == new.encode(old.decode(before[0].tolist()))
        for doc_in, doc_out in zip(before[1:], after[1:]):
            assert doc_out[0] == new.bos_id()
            assert doc_out[1:].tolist() == new.encode(old.decode(doc_in[1:].tolist()))
    val = train_gpt.load_data_shard(out / "fineweb_val_000000.bin").numpy()
    assert np.array_equal(val, encode(tokenizers[1], [old.decode(old.encode(d)) for d in DOCS[100:]]))

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["tokenizers"][0]["sha256"] == build_shards.file_sha256(tokenizers[1])
    assert manifest["tokenizers"][0]["vocab_size"] == 400 and manifest["retokenized_from"]["vocab_size"] == 300
    stats = manifest["datasets"][0]["stats"]
    assert stats["docs_train"] == 100 and stats["docs_val"] == len(DOCS) - 100
    assert stats["tokens_val"] == val.size
    for entry in manifest["datasets"][0]["files"]:
        assert entry["sha256"] == build_shards.file_sha256(out / entry["name"])
        assert entry["tokens"] == train_gpt.read_shard_header(out / entry["name"])


def test_worker_count_and_chunking_do_not_change_the_output(tmp_path, tokenizers, shards, monkeypatch):
    retok(tokenizers[0], tokenizers[1], shards, tmp_path / "one", "--workers", "1")
    monkeypatch.setattr(retokenize, "CHUNK_TOKENS", 97)  # many chunks per shard, cut at BOS
    assert len(retokenize.chunk_bounds(shards / "fineweb_train_000000.bin", 1)) > 10
    retok(tokenizers[0], tokenizers[1], shards, tmp_path / "three", "--workers", "3")
    for path in sorted(shards.glob("*.bin")):
        assert (tmp_path / "three" / path.name).read_bytes() == (tmp_path / "one" / path.name).read_bytes()


def test_empty_shards_and_shards_without_bos(tmp_path, tokenizers):
    old, new = (spm.SentencePieceProcessor(model_file=str(m)) for m in tokenizers)
    folder = tmp_path / "in"
    folder.mkdir()
    build_shards.write_data_shard(folder / "fineweb_train_000000.bin", [])
    middle = encode(tokenizers[0], ["the middle of a document"])[1:]  # no BOS at all
    build_shards.write_data_shard(folder / "fineweb_train_000001.bin", middle)
    retok(tokenizers[0], tokenizers[1], folder, tmp_path / "out", "--workers", "2")
    assert train_gpt.read_shard_header(tmp_path / "out" / "fineweb_train_000000.bin") == 0
    assert train_gpt.load_data_shard(tmp_path / "out" / "fineweb_train_000001.bin").tolist() == new.encode(
        old.decode(middle.tolist())
    )


def test_a_glob_selects_the_inputs(tmp_path, tokenizers, shards):
    retok(tokenizers[0], tokenizers[1], shards / "fineweb_val_*.bin", tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["fineweb_val_000000.bin", "manifest.json"]


def huge_model(path: Path, base: Path) -> Path:
    """`base` with 65,300 more pieces appended to its proto (a repeated field: appending adds pieces)."""

    def varint(n: int) -> bytes:
        out = b""
        while n > 0x7F:
            out, n = out + bytes([n & 0x7F | 0x80]), n >> 7
        return out + bytes([n])

    extra = bytearray()
    for i in range(65_300):
        piece = f"zz{i}".encode()
        inner = b"\x0a" + varint(len(piece)) + piece + b"\x15" + struct.pack("<f", -1e6)
        extra += b"\x0a" + varint(len(inner)) + inner
    path.write_bytes(base.read_bytes() + bytes(extra))
    assert spm.SentencePieceProcessor(model_file=str(path)).vocab_size() > 65_536
    return path


def test_errors_exit_2_naming_the_file_before_any_output(tmp_path, tokenizers, shards, capsys):
    old, new = tokenizers
    out = tmp_path / "out"
    missing = tmp_path / "missing.model"
    fails_with(capsys, lambda: retok(missing, new, shards, out), str(missing), "no such file")
    not_a_model = tmp_path / "notes.model"
    not_a_model.write_text("hello")
    fails_with(capsys, lambda: retok(old, not_a_model, shards, out), str(not_a_model), "not a SentencePiece model")
    huge = huge_model(tmp_path / "huge.model", new)
    fails_with(capsys, lambda: retok(old, huge, shards, out), str(huge), "at most 65536")
    fails_with(capsys, lambda: retok(old, new, tmp_path / "nothing_*.bin", out), "nothing_*.bin", "no file matches")
    fails_with(capsys, lambda: retok(old, new, shards, shards), str(shards), "overwrite")
    # Ids the --from-model does not have: the shards were made with another tokenizer.
    wide = tmp_path / "wide"
    wide.mkdir()
    build_shards.write_data_shard(wide / "fineweb_val_000000.bin", [1, 5, 399, 7])
    fails_with(
        capsys,
        lambda: retok(old, new, wide, out),
        str(wide / "fineweb_val_000000.bin"),
        "token id 399",
        "only 300 tokens",
    )
    # Not a shard: the trainer's own check (ShardError) says so.
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "fineweb_train_000000.bin").write_bytes(b"\0" * 2048)
    fails_with(capsys, lambda: retok(old, new, bad, out), str(bad / "fineweb_train_000000.bin"), "magic/version")
    # A manifest in the input folder that names another tokenizer.
    (shards / "manifest.json").write_text(json.dumps({"tokenizers": [{"name": "other", "sha256": "ab" * 32}]}))
    fails_with(capsys, lambda: retok(old, new, shards, out), "manifest.json", "not --from-model")
    assert not out.exists()  # every check runs before anything is written


def test_swapped_models_on_shards_without_a_manifest_are_refused_before_any_output(
    tmp_path, tokenizers, shards, capsys
):
    """Issue 20: exit 0 and garbage shards (ratio 1.2251) whose new manifest then made the trainer say verified."""
    old, new = tokenizers
    assert not (shards / "manifest.json").exists()
    fails_with(
        capsys,
        lambda: retok(new, old, shards, tmp_path / "out"),
        f"--from-model {new} did not make the input shards",
        "swapped?",
    )
    assert not (tmp_path / "out").exists()
    retok(old, new, shards, tmp_path / "out")  # the right way round passes the same check


def test_an_output_that_holds_shards_needs_overwrite(tmp_path, tokenizers, shards, capsys):
    out = tmp_path / "out"
    retok(tokenizers[0], tokenizers[1], shards, out)
    before = (out / "fineweb_val_000000.bin").read_bytes()
    fails_with(capsys, lambda: retok(tokenizers[0], tokenizers[0], shards, out), "--overwrite")
    assert (out / "fineweb_val_000000.bin").read_bytes() == before
    retok(tokenizers[0], tokenizers[0], shards, out, "--overwrite")
    assert (out / "fineweb_val_000000.bin").read_bytes() == (shards / "fineweb_val_000000.bin").read_bytes()


def test_progress_and_summary(tmp_path, tokenizers, shards, capsys):
    retokenize.main(
        [
            "--from-model",
            str(tokenizers[0]),
            "--to-model",
            str(tokenizers[1]),
            "--input",
            str(shards),
            "--output",
            str(tmp_path / "out"),
            "--workers",
            "1",
        ]
    )
    captured = capsys.readouterr()
    assert "retokenize:" in captured.err and "tokens/s" in captured.err and "eta:" in captured.err
    assert f"docs:{len(DOCS)}" in captured.out and "ratio:" in captured.out and "seconds:" in captured.out


@pytest.mark.skipif(not (SP1024.is_file() and FINEWEB_VAL.is_file()), reason="needs ../shared/data")
def test_fineweb_sample_reencodes_to_the_same_ids(tmp_path):
    retok(SP1024, SP1024, FINEWEB_VAL, tmp_path / "out", "--workers", "2")
    assert (tmp_path / "out" / FINEWEB_VAL.name).read_bytes() == FINEWEB_VAL.read_bytes()


CASED = ["The NASA Launch of Apollo 11", "McDonald's iPhone, HTTPs and eBay", "J\u030cosé and ALL CAPS"]


def test_caseops_retokenizing_gives_what_build_shards_caseops_gives_and_back(tmp_path, tokenizers):
    """--caseops: decode with --from-model, transform, encode with a CaseOps --to-model; the validation shard gets its
    byte sidecar. The tokens and sidecar are those build_shards.py --caseops makes of the same documents, and
    re-tokenizing them back to the plain tokenizer gives the plain shards again."""
    docs = english_docs(60, seed=6) + CASED + ODD_TEXTS
    jsonl, train = tmp_path / "docs.jsonl", tmp_path / "train.jsonl"  # build_shards refuses one file as both
    jsonl.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")
    train.write_text("".join(json.dumps({"text": d}) + "\n" for d in english_docs(60, seed=16)), "utf-8")
    casemodel = tmp_path / "caseops.model"
    built = tmp_path / "built"
    argv = [str(train), "--val", str(jsonl), "--output", str(built), "--caseops", "--workers", "1"]
    build_shards.build(
        build_shards.config_from(
            build_shards.build_parser(),
            build_shards.build_parser().parse_args(argv + ["--vocab-size", "320", "--tokenizer-out", str(casemodel)]),
        )
    )
    plain = tmp_path / "plain"
    plain.mkdir()
    build_shards.write_data_shard(plain / "fineweb_val_000000.bin", encode(tokenizers[0], docs))
    retok(tokenizers[0], casemodel, plain, tmp_path / "out", "--caseops", "--workers", "2")
    out = tmp_path / "out"
    for name in ("fineweb_val_000000.bin", "fineweb_val_bytes_000000.bin"):
        assert np.array_equal(train_gpt.load_data_shard(out / name), train_gpt.load_data_shard(built / name)), name
    manifest = json.loads((out / "manifest.json").read_text())["datasets"][0]
    val = manifest["splits"]["val"]
    assert manifest["caseops"] == "lossless_caps_caseops_v1" and val["sidecar_bytes"] == val["normalized_bytes"]
    assert {f["name"]: f["split"] for f in manifest["files"]}["fineweb_val_bytes_000000.bin"] == "val_bytes"
    # back to the plain tokenizer: the sidecar is not an input, and the CaseOps text decodes to the original
    retok(casemodel, tokenizers[0], out, tmp_path / "back", "--workers", "1")
    assert sorted(p.name for p in (tmp_path / "back").glob("*.bin")) == ["fineweb_val_000000.bin"]
    assert np.array_equal(
        train_gpt.load_data_shard(tmp_path / "back" / "fineweb_val_000000.bin"),
        train_gpt.load_data_shard(plain / "fineweb_val_000000.bin"),
    )


def test_caseops_and_the_to_model_must_agree(tmp_path, tokenizers, shards, capsys):
    casemodel = tmp_path / "caseops.model"
    casemodel.write_bytes(build_shards.train_tokenizer_model(english_docs(100), 300, use_caseops=True))
    for to_model, flag, message in (
        (tokenizers[1], ["--caseops"], "--caseops needs a CaseOps --to-model"),
        (casemodel, [], "is a CaseOps tokenizer: pass --caseops"),
    ):
        with pytest.raises(SystemExit) as exit_:
            retok(tokenizers[0], to_model, shards, tmp_path / "out", *flag)
        assert exit_.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
