"""The shard format as the data tools use it, and data/build_shards.py.

CPU only, no network. The FineWeb checks use ../shared/data (next to the repo) and skip where it is
absent. Run: python3 -m pytest -q tests/test_data.py
"""

import dataclasses
import gzip
import json
import os
import re
import shutil
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "data"))

import build_shards  # noqa: E402
import caseops  # noqa: E402
import train_gpt  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
FINEWEB_DOCS = SHARED / "fineweb_docs"
SP1024 = SHARED / "tokenizers" / "fineweb_1024_bpe.model"
needs_fineweb = pytest.mark.skipif(
    not (FINEWEB_DOCS.is_dir() and SP1024.is_file()),
    reason="needs ../shared/data/fineweb_docs and the sp1024 tokenizer",
)

# Text that exercises normalization: NFKC (ligature, fraction, full-width), runs of whitespace, tabs,
# newlines, leading/trailing space, digits, non-Latin scripts (byte fallback), emoji.
ODD_TEXTS = [
    "  Leading and trailing  ",
    "tabs\tand\nnew\n\nlines",
    "ﬁnance ½ ＡＢＣ",
    "numbers 1234567 and 3.14",
    "héllo wörld — “quotes” ‘and’ dashes",
    "日本語のテキスト",
    "emoji 🙂 here",
    "a\u00a0b\u3000c",
]


def english_docs(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    words = (
        "the of and to in is that for it as was with be by on not he this are or his from at which but "
        "have an they you were her she there one all we their been has more if will would about when "
        "model token byte shard train data value 2024 1337"
    ).split()
    return [" ".join(rng.choice(words, rng.integers(20, 200))).capitalize() + "." for _ in range(n)]


def write_jsonl(path: Path, texts: list[str], opener=open) -> Path:
    with opener(path, "wt", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"text": t, "id": hash(t)}) + "\n")
    return path


def split_documents(files: list[Path]) -> list[np.ndarray]:
    """The documents of a split: all its shards end to end, cut before every BOS."""
    tokens = np.concatenate([train_gpt.load_data_shard(f).numpy() for f in files])
    starts = np.flatnonzero(tokens == build_shards.BOS_ID)
    assert starts[0] == 0, "a split must start with BOS"
    return np.split(tokens, starts[1:])


@pytest.fixture(scope="module")
def small_tokenizer(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tok") / "small.model"
    build_shards.train_tokenizer(english_docs(400, seed=1) + ODD_TEXTS, 300, path)
    return path


# ------------------------------------------------------------------------------------------------
# The shard format (the trainer's reader and writer, as the data tools use them)
# ------------------------------------------------------------------------------------------------


def test_shard_write_and_read_agree(tmp_path):
    tokens = np.array([1, 0, 65535, 2, 1023, 1] + list(range(5000)), dtype=np.int64)
    path = tmp_path / "fineweb_train_000000.bin"
    build_shards.write_data_shard(path, tokens)
    assert path.stat().st_size == train_gpt.SHARD_HEADER_BYTES + 2 * tokens.size
    header = np.fromfile(path, dtype="<i4", count=3)
    assert header.tolist() == [20240520, 1, tokens.size]
    assert train_gpt.read_shard_header(path) == tokens.size
    assert np.array_equal(train_gpt.load_data_shard(path).numpy(), tokens)
    build_shards.write_data_shard(path, [])  # an empty shard is still well formed
    assert train_gpt.read_shard_header(path) == 0


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda b: b[:-1], "truncated or corrupt"),  # half a token missing
        (lambda b: b[:-200], "truncated or corrupt"),  # whole tokens missing
        (lambda b: b + b"\0\0", "truncated or corrupt"),  # trailing bytes
        (lambda b: b[:100], "shorter than the 1024-byte shard header"),
        (lambda b: struct.pack("<i", 1234) + b[4:], "magic/version 1234/1"),
        (lambda b: b[:4] + struct.pack("<i", 2) + b[8:], "magic/version 20240520/2"),
        (lambda b: b[:8] + struct.pack("<i", -5) + b[12:], "header says -5 tokens"),
    ],
)
def test_corrupt_or_truncated_shard_is_detected(tmp_path, damage, message):
    path = tmp_path / "shard.bin"
    build_shards.write_data_shard(path, np.arange(1000) % 1024)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(train_gpt.ShardError, match=message):
        train_gpt.read_shard_header(path)
    with pytest.raises(train_gpt.ShardError):
        train_gpt.load_data_shard(path)


# ------------------------------------------------------------------------------------------------
# The builder
# ------------------------------------------------------------------------------------------------


def test_shards_decode_to_the_normalised_documents(tmp_path, small_tokenizer):
    docs = english_docs(300) + ODD_TEXTS
    jsonl = write_jsonl(tmp_path / "docs.jsonl.gz", docs[:200], opener=gzip.open)
    folder = tmp_path / "texts"
    folder.mkdir()
    for i, text in enumerate(docs[200:]):
        (folder / f"{i:03d}.txt").write_text(text, encoding="utf-8")
    (folder / ".hidden.txt").write_text("not a document", encoding="utf-8")
    (folder / "blank.txt").write_text(" \n\t ", encoding="utf-8")  # blank: skipped
    texts_in_order = docs[:200] + [
        (folder / f"{i:03d}.txt").read_text(encoding="utf-8") for i in range(len(docs) - 200)
    ]

    out = tmp_path / "out"
    manifest = build_shards.build(
        build_shards.BuildConfig(
            inputs=[str(jsonl), str(folder)],
            output=out,
            tokenizer=small_tokenizer,
            val_fraction=0.2,
            shard_tokens=3000,
            workers=2,
            quiet=True,
        )
    )

    sp = spm.SentencePieceProcessor(model_file=str(small_tokenizer))
    is_val = [build_shards.is_validation(t, 0.2) for t in texts_in_order]
    assert 20 < sum(is_val) < 120
    for split, wanted in (("val", True), ("train", False)):
        files = sorted(out.glob(f"fineweb_{split}_*.bin"))
        expected = [t for t, v in zip(texts_in_order, is_val) if v == wanted]
        decoded = [sp.decode(doc[1:].tolist()) for doc in split_documents(files)]
        assert decoded == [build_shards.normalized_text(sp, t) for t in expected]
        sizes = [train_gpt.read_shard_header(f) for f in files]
        assert all(s == 3000 for s in sizes[:-1]) and 0 < sizes[-1] <= 3000  # full shards, docs span them
        stats = manifest["datasets"][0]["splits"][split]
        assert stats["docs"] == len(expected) and stats["tokens"] == sum(sizes) and stats["files"] == len(files)
        assert stats["text_bytes"] == sum(len(t.encode()) for t in expected)
    # Normalization as decoding shows it: NFKC, whitespace runs collapsed, ends stripped.
    assert build_shards.normalized_text(sp, "  ﬁ ½\t\tx\ny ") == "fi 1⁄2 x y"

    on_disk = json.loads((out / "manifest.json").read_text())
    assert on_disk == manifest
    for entry in manifest["datasets"][0]["files"]:
        assert build_shards.file_sha256(out / entry["name"]) == entry["sha256"]
        assert (out / entry["name"]).stat().st_size == entry["bytes"]

    # The same shards with one worker: the output does not depend on the worker count.
    out1 = tmp_path / "out1"
    build_shards.build(
        build_shards.BuildConfig(
            inputs=[str(jsonl), str(folder)],
            output=out1,
            tokenizer=small_tokenizer,
            val_fraction=0.2,
            shard_tokens=3000,
            workers=1,
            quiet=True,
        )
    )
    for entry in manifest["datasets"][0]["files"]:
        assert (out1 / entry["name"]).read_bytes() == (out / entry["name"]).read_bytes()


CASED_TEXTS = [
    "The NASA Launch",
    "McDonald's iPhone and HTTPs",
    f"a literal control {caseops.TITLE} here",
    "J\u030cosé",
]


def test_caseops_build_keeps_the_validation_documents_and_counts_their_original_bytes(tmp_path):
    """--caseops: the same validation documents as without it (the split is by the original text's hash); they decode
    to the same text; each validation shard has a byte sidecar as long as it, whose bytes add up to that text's."""
    docs = english_docs(300, seed=7) + ODD_TEXTS + CASED_TEXTS
    jsonl = write_jsonl(tmp_path / "docs.jsonl", docs)
    builds = {}
    for name, flag in (("plain", []), ("caseops", ["--caseops"])):
        out = tmp_path / name
        argv = [str(jsonl), "--output", str(out), "--tokenizer-out", str(tmp_path / f"{name}.model"), "--workers", "2"]
        argv += ["--vocab-size", "320", "--val-fraction", "0.3", "--shard-tokens", "2500", *flag]
        manifest = build_shards.build(dataclasses.replace(build_shards.parse_args(argv), quiet=True))
        sp = spm.SentencePieceProcessor(model_file=str(tmp_path / f"{name}.model"))
        shards = sorted(out.glob("fineweb_val_[0-9]*.bin"))
        texts = [sp.decode(doc[1:].tolist()) for doc in split_documents(shards)]
        builds[name] = manifest["datasets"][0], sp, shards, texts
    (plain, plain_sp, _, plain_texts), (entry, sp, shards, texts) = builds["plain"], builds["caseops"]
    assert train_gpt.is_caseops(sp) and not train_gpt.is_caseops(plain_sp)
    assert [caseops.decode(t) for t in texts] == plain_texts  # the same documents, the same text
    assert any(caseops.TITLE in t for t in texts) and len(shards) > 2
    val = entry["splits"]["val"]
    assert (
        val["docs"] == plain["splits"]["val"]["docs"]
        and val["normalized_bytes"] == plain["splits"]["val"]["normalized_bytes"]
    )
    assert val["sidecar_bytes"] == val["normalized_bytes"] == sum(len(t.encode()) for t in plain_texts)
    for shard in shards:
        sidecar = build_shards.sidecar_path(shard)
        assert train_gpt.read_shard_header(sidecar) == train_gpt.read_shard_header(shard)
        tokens, counts = train_gpt.load_data_shard(shard).numpy(), train_gpt.load_data_shard(sidecar).numpy()
        assert np.all(counts[tokens == build_shards.BOS_ID] == 0)
    assert (
        sum(int(train_gpt.load_data_shard(build_shards.sidecar_path(f)).sum()) for f in shards) == val["sidecar_bytes"]
    )
    assert entry["caseops"] == caseops.NAME and entry["val_bytes"] == "sidecar" and plain["val_bytes"] == "tokenizer"
    listed = {f["name"]: f for f in entry["files"]}
    for shard in shards:  # the sidecars are in the manifest with their sha256, as the shards are
        assert listed[build_shards.sidecar_path(shard).name]["sha256"] == build_shards.file_sha256(
            build_shards.sidecar_path(shard)
        )
    assert entry["stats"]["files_val"] == len(shards) == val["files"] == val["sidecar_files"]
    assert not list((tmp_path / "plain").glob("fineweb_val_bytes_*"))


def test_caseops_and_the_tokenizer_must_agree(tmp_path, small_tokenizer):
    jsonl = write_jsonl(tmp_path / "docs.jsonl", english_docs(50))
    with pytest.raises(build_shards.BuildError, match="--caseops needs a CaseOps tokenizer"):
        build_shards.build(
            build_shards.BuildConfig([str(jsonl)], tmp_path / "o", tokenizer=small_tokenizer, caseops=True, quiet=True)
        )
    model = tmp_path / "caseops.model"
    model.write_bytes(build_shards.train_tokenizer_model(english_docs(100), 300, use_caseops=True))
    with pytest.raises(build_shards.BuildError, match="is a CaseOps tokenizer .*pass --caseops"):
        build_shards.build(build_shards.BuildConfig([str(jsonl)], tmp_path / "o", tokenizer=model, quiet=True))
    assert not (tmp_path / "o").exists()


def test_trained_tokenizer_has_the_published_settings(tmp_path, small_tokenizer):
    sp = spm.SentencePieceProcessor(model_file=str(small_tokenizer))
    assert [sp.id_to_piece(i) for i in range(4)] == ["<pad>", "<s>", "</s>", "<unk>"]
    assert sp.is_byte(4) and sp.id_to_piece(4) == "<0x00>" and sp.vocab_size() == 300
    assert sp.encode("2024", out_type=str) == ["2", "0", "2", "4"]  # split digits, no dummy prefix
    assert not sp.encode("model", out_type=str)[0].startswith("\u2581")
    assert sp.decode(sp.encode("😀 Ω")) == "😀 Ω"  # byte fallback: nothing becomes <unk>
    assert 3 not in sp.encode("😀 Ω")
    if SP1024.is_file():  # the fields of the model proto that the settings set, against the published model
        ours, published = model_settings(small_tokenizer), model_settings(SP1024)
        assert {k: v for k, v in ours.items() if k != "vocab_size"} == {
            k: v for k, v in published.items() if k != "vocab_size"
        }
        ref = spm.SentencePieceProcessor(model_file=str(SP1024))
        for text in ODD_TEXTS:
            assert sp.normalize(text) == ref.normalize(text)


def model_settings(path: Path) -> dict:
    """Trainer/normalizer fields of a SentencePiece model, read from its protobuf wire format
    (field numbers from sentencepiece_model.proto), so the test needs no protobuf package."""

    def fields(buf: bytes) -> dict[int, list]:
        out, i = {}, 0
        while i < len(buf):
            key, i = varint(buf, i)
            number, wire = key >> 3, key & 7
            if wire == 0:
                value, i = varint(buf, i)
            elif wire == 1:
                value, i = buf[i : i + 8], i + 8
            elif wire == 2:
                n, i = varint(buf, i)
                value, i = buf[i : i + n], i + n
            elif wire == 5:
                value, i = struct.unpack("<f", buf[i : i + 4])[0], i + 4
            else:
                raise ValueError(f"wire type {wire}")
            out.setdefault(number, []).append(value)
        return out

    def varint(buf: bytes, i: int) -> tuple[int, int]:
        result = shift = 0
        while True:
            b = buf[i]
            result |= (b & 0x7F) << shift
            i, shift = i + 1, shift + 7
            if b < 0x80:
                return result, i

    model = fields(path.read_bytes())
    trainer, normalizer = fields(model[2][0]), fields(model[3][0])
    names = {
        3: "model_type",
        4: "vocab_size",
        10: "character_coverage",
        25: "split_digits",
        33: "hard_vocab_limit",
        35: "byte_fallback",
        40: "unk_id",
        41: "bos_id",
        42: "eos_id",
        43: "pad_id",
    }
    settings = {name: trainer.get(number) for number, name in names.items()}
    settings.update(
        normalizer_name=normalizer.get(1),
        add_dummy_prefix=normalizer.get(3),
        remove_extra_whitespaces=normalizer.get(4, [1]),
        escape_whitespaces=normalizer.get(5, [1]),
    )
    return settings


def test_tokenizer_training_is_deterministic(tmp_path):
    docs = english_docs(200, seed=3)
    a = build_shards.train_tokenizer(docs, 320, tmp_path / "a.model")
    b = build_shards.train_tokenizer(docs, 320, tmp_path / "b.model")
    assert (tmp_path / "a.model").read_bytes() == (tmp_path / "b.model").read_bytes()
    assert [a.id_to_piece(i) for i in range(320)] == [b.id_to_piece(i) for i in range(320)]


def test_builder_trains_a_tokenizer_and_uses_val_files(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", english_docs(300, seed=4))
    val = write_jsonl(tmp_path / "val.jsonl", english_docs(30, seed=5))
    out, tok = tmp_path / "ds", tmp_path / "tokenizers" / "ds.model"
    manifest = build_shards.build(
        build_shards.parse_args(
            [
                str(train),
                "--val",
                str(val),
                "--output",
                str(out),
                "--tokenizer-out",
                str(tok),
                "--vocab-size",
                "320",
                "--workers",
                "1",
            ]
        )
    )
    entry = manifest["datasets"][0]
    assert entry["stats"]["docs_val"] == 30 and entry["stats"]["docs_train"] == 300
    assert manifest["tokenizers"][0]["model_path"] == "tokenizers/ds.model"
    assert manifest["tokenizers"][0]["sha256"] == build_shards.file_sha256(tok)
    assert manifest["tokenizers"][0]["settings"]["byte_fallback"] is True
    assert spm.SentencePieceProcessor(model_file=str(tok)).vocab_size() == 320
    with pytest.raises(build_shards.BuildError, match="--overwrite"):  # never mixes old and new shards
        build_shards.build(build_shards.parse_args([str(train), "--output", str(out), "--tokenizer", str(tok)]))


def test_builder_errors_say_what_to_change(tmp_path, small_tokenizer):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"body": "no text field"}\n', encoding="utf-8")
    cfg = dict(output=tmp_path / "o", tokenizer=small_tokenizer, quiet=True)
    with pytest.raises(build_shards.BuildError, match=r"bad.jsonl:2: .*--text-field"):
        build_shards.build(build_shards.BuildConfig(inputs=[str(bad)], **cfg))
    with pytest.raises(build_shards.BuildError, match="no such file or folder"):
        build_shards.build(build_shards.BuildConfig(inputs=[str(tmp_path / "missing.jsonl")], **cfg))
    one = write_jsonl(tmp_path / "one.jsonl", ["a single document"])
    with pytest.raises(build_shards.BuildError, match="no document went to the (val|train) split"):
        build_shards.build(build_shards.BuildConfig(inputs=[str(one)], overwrite=True, **cfg))
    with pytest.raises(build_shards.BuildError, match=r"must be in \(260, 65536\]"):
        build_shards.train_tokenizer(["text"], 100, tmp_path / "t.model")
    with pytest.raises(build_shards.BuildError, match="Vocabulary size is smaller than required_chars"):
        build_shards.train_tokenizer(["".join(map(chr, range(0x4E00, 0x4E00 + 300)))], 400, tmp_path / "t.model")
    binary = tmp_path / "blob.bin"
    binary.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(build_shards.BuildError, match="not UTF-8 text"):
        build_shards.build(build_shards.BuildConfig(inputs=[str(binary)], overwrite=True, **cfg))


def test_validation_documents_that_are_also_training_documents_are_refused_with_their_count(tmp_path, small_tokenizer):
    """Issue 55, medium 8: --val FILE whose documents are also in the inputs built silently, and the trainer then
    trained on its own validation text. Low #165: the same file as input and --val built without a word."""
    docs = english_docs(60, seed=7)
    train = write_jsonl(tmp_path / "train.jsonl", docs)
    val = write_jsonl(tmp_path / "val.jsonl", [docs[10], "A validation text of its own.", docs[3], docs[40]])
    out = tmp_path / "out"
    cfg = dict(output=out, tokenizer=small_tokenizer, quiet=True)
    with pytest.raises(build_shards.BuildError) as error:
        build_shards.build(build_shards.BuildConfig(inputs=[str(train)], val_inputs=[str(val)], **cfg))
    assert str(error.value).startswith("3 document(s) of the inputs are also in the --val files (4 documents; the")
    assert "the trainer would train on the text it is scored on. Remove them from the inputs" in str(error.value)
    assert not out.exists()
    for inputs in ([str(train)], [str(tmp_path)]):  # the file itself, or a folder that holds it
        with pytest.raises(build_shards.BuildError, match=r"train\.jsonl: both an input and a --val file"):
            build_shards.build(build_shards.BuildConfig(inputs=inputs, val_inputs=[str(train)], **cfg))
    (tmp_path / "clean").mkdir()
    clean = write_jsonl(tmp_path / "clean" / "val.jsonl", ["A validation text of its own."])
    manifest = build_shards.build(build_shards.BuildConfig(inputs=[str(train)], val_inputs=[str(clean)], **cfg))
    assert manifest["datasets"][0]["stats"]["docs_val"] == 1 and manifest["datasets"][0]["stats"]["docs_train"] == 60


@pytest.mark.parametrize("tokenizer", [True, False], ids=["given", "trained"])
def test_an_empty_input_is_said_to_be_empty(tmp_path, small_tokenizer, tokenizer):
    """Issue 55, low #147: an empty input file was advised to use a smaller --val-fraction."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    blank = write_jsonl(tmp_path / "blank.jsonl", ["  ", "\n"])
    chosen = dict(tokenizer=small_tokenizer) if tokenizer else dict(tokenizer_out=tmp_path / "t.model", vocab_size=300)
    for inputs, why in (([empty], f"{empty} is empty"), ([blank], "every document is blank")):
        cfg = build_shards.BuildConfig(inputs=[str(p) for p in inputs], output=tmp_path / "out", quiet=True, **chosen)
        with pytest.raises(build_shards.BuildError) as error:
            build_shards.build(cfg)
        assert str(error.value).startswith(f"the inputs hold no document ({why}). Give files with text")
        assert "--val-fraction" not in str(error.value)
    val = write_jsonl(tmp_path / "val.jsonl", ["A validation text."])
    cfg = build_shards.BuildConfig(inputs=[str(empty)], val_inputs=[str(val)], output=tmp_path / "out", quiet=True)
    with pytest.raises(build_shards.BuildError, match=r"^the inputs hold no document \(.*empty\.jsonl is empty\)"):
        build_shards.build(dataclasses.replace(cfg, **chosen))


def test_a_line_that_is_not_json_is_said_so_with_its_line_and_column(tmp_path, small_tokenizer):
    """Issue 55, low #164: invalid JSON was advised to use --text-field; the field's name is the advice only where the
    field is missing."""
    cfg = dict(output=tmp_path / "o", tokenizer=small_tokenizer, quiet=True)
    for lines, said in (
        (
            '{"text": "fine"}\n{"text": "cut off"\n',
            r"bad\.jsonl:2: not valid JSON \(Expecting ',' delimiter at column 19\)",
        ),
        (
            '{"text": "fine"}\nplain prose\n',
            r"bad\.jsonl:2: not valid JSON \(Expecting value at column 1\)\. A \.jsonl",
        ),
        ('["text"]\n', r'bad\.jsonl:1: a JSON array, not an object such as \{"text": "\.\.\."\}'),
        ('{"body": "x", "id": 1}\n', r"bad\.jsonl:1: no 'text' field \(its fields: 'body', 'id'\)\. Use --text-field"),
    ):
        (tmp_path / "bad.jsonl").write_text(lines, encoding="utf-8")
        with pytest.raises(build_shards.BuildError) as error:
            build_shards.build(build_shards.BuildConfig(inputs=[str(tmp_path / "bad.jsonl")], **cfg))
        assert re.search(said, str(error.value)), str(error.value)
        assert ("--text-field" in str(error.value)) == ("no 'text' field" in str(error.value))


@needs_fineweb
def test_builder_on_real_fineweb_documents(tmp_path):
    """The published sp1024 tokenizer gives about 0.41-0.42 tokens per byte on FineWeb."""
    out = tmp_path / "fw"
    manifest = build_shards.build(
        build_shards.BuildConfig(
            inputs=[str(FINEWEB_DOCS / "fineweb_sample_train.jsonl.xz")],
            val_inputs=[str(FINEWEB_DOCS / "fineweb_sample_val.jsonl.xz")],
            output=out,
            tokenizer=SP1024,
            workers=2,
            quiet=True,
        )
    )
    splits = manifest["datasets"][0]["splits"]
    assert splits["train"]["docs"] == 2544 and splits["val"]["docs"] == 256
    for split in ("train", "val"):
        assert 0.41 < splits[split]["tokens_per_byte"] < 0.425, splits[split]
        assert 0.41 < splits[split]["tokens"] / splits[split]["text_bytes"] < 0.425
    # Byte for byte the shared pre-tokenized sample, made independently with the same tokenizer.
    shared_val = SHARED / "fineweb_sample_sp1024" / "fineweb_val_000000.bin"
    if shared_val.is_file():
        assert (out / "fineweb_val_000000.bin").read_bytes() == shared_val.read_bytes()
    # The trainer's bpb byte count (from the pieces) equals the normalized text's UTF-8 bytes.
    sp = spm.SentencePieceProcessor(model_file=str(SP1024))
    base, space, boundary = (t.numpy() for t in train_gpt.build_byte_luts(sp, 1024))
    tokens = train_gpt.load_data_shard(out / "fineweb_val_000000.bin").numpy().astype(np.int64)
    x, y = tokens[:-1], tokens[1:]
    counted = int(base[y].sum() + (space[y] & ~boundary[x]).sum())
    assert counted == splits["val"]["normalized_bytes"]


def fails(capsys, argv: list[str], message: str) -> str:
    """build_shards.main(argv) exits 2 with `error: ...` on stderr, which holds `message` (a regex)."""
    with pytest.raises(SystemExit) as exc:
        build_shards.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and re.search(message, err), err
    return err


def test_bad_settings_are_rejected_before_any_folder_is_made(tmp_path, small_tokenizer, capsys):
    docs = write_jsonl(tmp_path / "docs.jsonl", english_docs(50))
    out = tmp_path / "new" / "out"
    for flags, message in (
        (["--vocab-size", "100"], r"--vocab-size 100 must be in \(260, 65536\]"),
        (["--vocab-size", "70000"], r"--vocab-size 70000 must be in"),
        (["--workers", "0"], "--workers 0 must be at least 1"),
        (["--tokenizer", str(tmp_path / "nope.model")], "no such file"),
    ):
        tokenizer_out = [] if "--tokenizer" in flags else ["--tokenizer-out", str(tmp_path / "t.model")]
        fails(capsys, [str(docs), "--output", str(out), *tokenizer_out, *flags], message)
        assert not (tmp_path / "new").exists() and not (tmp_path / "t.model").exists()


def test_a_failed_build_leaves_no_folder_and_no_shards(tmp_path, small_tokenizer, capsys):
    one = write_jsonl(tmp_path / "one.jsonl", ["a single document"])
    out = tmp_path / "out"
    fails(capsys, [str(one), "--output", str(out), "--tokenizer", str(small_tokenizer)], "no document went to the")
    assert not out.exists()
    out.mkdir()  # a folder that was there before stays, without the shards of the failed build
    (out / "notes.txt").write_text("mine")
    fails(capsys, [str(one), "--output", str(out), "--tokenizer", str(small_tokenizer)], "no document went to the")
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_a_failed_build_leaves_no_tokenizer_it_trained_and_keeps_one_that_was_there(tmp_path, capsys):
    """Issue 24, row 8: a build on too little text (here: no validation document) failed after training its
    tokenizer, and left that tokenizer in data/tokenizers/. It is now written only with the shards."""
    docs = write_jsonl(tmp_path / "docs.jsonl", english_docs(100))
    out, tokenizer = tmp_path / "out", tmp_path / "tokenizers" / "out.model"
    argv = [str(docs), "--output", str(out), "--tokenizer-out", str(tokenizer), "--vocab-size", "300"]
    fails(capsys, [*argv, "--val-fraction", "0"], "no document went to the val split")
    assert not out.exists() and not tokenizer.exists()
    tokenizer.parent.mkdir()
    tokenizer.write_bytes(b"a tokenizer that other shards were made with")
    fails(capsys, argv, "would replace .*out.model, which shards made with it need: pass --overwrite")
    fails(capsys, [*argv, "--val-fraction", "0", "--overwrite"], "no document went to the val split")
    assert tokenizer.read_bytes() == b"a tokenizer that other shards were made with" and not out.exists()
    build_shards.main([*argv, "--overwrite", "--val-fraction", "0.2", "--workers", "1"])  # a build that succeeds
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["tokenizers"][0]["sha256"] == build_shards.file_sha256(tokenizer)
    assert spm.SentencePieceProcessor(model_file=str(tokenizer)).vocab_size() == 300


def test_help_shows_every_default(capsys):
    """Issue 24: build_shards.py --help did not show its defaults."""
    with pytest.raises(SystemExit) as exc:
        build_shards.main(["--help"])
    assert exc.value.code == 0
    options = " ".join(capsys.readouterr().out.split("\n\nInput:")[0].split())  # the options, lines joined
    for option, default in (
        ("--vocab-size VOCAB_SIZE", "1024"),
        ("--tokenizer-train-bytes TOKENIZER_TRAIN_BYTES", "500000000"),
        ("--val-fraction VAL_FRACTION", "0.01"),
        ("--shard-tokens SHARD_TOKENS", "100000000"),
        ("--workers WORKERS", f"the number of cores, here {os.cpu_count()}"),
        ("--text-field TEXT_FIELD", "text"),
        ("--tokenizer-out TOKENIZER_OUT", "data/tokenizers/<output name>.model"),
        ("--tokenizer TOKENIZER", "train one"),
        ("--name NAME", "the output folder's name"),
    ):
        within = r"(?:(?! --[a-z]).)*?"  # this option's help: up to the next option
        assert re.search(re.escape(option) + within + re.escape(f"(default: {default})"), options), option


# ------------------------------------------------------------------------------------------------
# The data tools' own helpers: write_atomic, round_trip
# ------------------------------------------------------------------------------------------------


def test_write_atomic_replaces_the_file_whole_and_leaves_no_temp_file(tmp_path, monkeypatch):
    path = tmp_path / "new" / "file.bin"
    build_shards.write_atomic(path, b"first")
    build_shards.write_atomic(path, b"second")
    assert path.read_bytes() == b"second" and sorted(p.name for p in path.parent.iterdir()) == ["file.bin"]

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(build_shards.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        build_shards.write_atomic(path, b"third")
    assert path.read_bytes() == b"second" and sorted(p.name for p in path.parent.iterdir()) == ["file.bin"]


def test_round_trip_tells_the_tokenizer_that_made_the_shards_from_another(tmp_path, small_tokenizer):
    sp = spm.SentencePieceProcessor(model_file=str(small_tokenizer))
    other = build_shards.train_tokenizer(english_docs(300, seed=9) + ODD_TEXTS, 400, tmp_path / "other.model")
    docs = english_docs(80, seed=10)
    tokens = np.array([t for d in docs for t in [build_shards.BOS_ID] + sp.encode(d)], dtype=np.uint16)
    assert build_shards.round_trip(sp, [tokens]) == (32, 32)  # 32 of the 79 documents between two BOS ids
    assert build_shards.round_trip(sp, [tokens, tokens[:40]], docs=5) == (5, 5)  # the second holds no whole one
    same, tried = build_shards.round_trip(other, [tokens])
    assert tried == 32 and same * 2 < tried
    edited = tokens.copy()
    edited[1] = sp.piece_to_id("<0x41>")  # the byte "A" where the text had a piece: decodes, encodes otherwise
    assert build_shards.round_trip(sp, [edited], docs=79) == (78, 79)


# ------------------------------------------------------------------------------------------------
# --which-tokenizer: the tokenizer that made a folder of shards
# ------------------------------------------------------------------------------------------------


def which(capsys, *argv: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exc:
        build_shards.main(["--which-tokenizer", *argv])
    captured = capsys.readouterr()
    return exc.value.code, captured.out + captured.err


def test_which_tokenizer_names_the_tokenizer_that_made_the_shards(tmp_path, tiny_data, monkeypatch, capsys):
    """The trainer's diagnosis of a TOKENIZER_PATH that did not make the shards moved here: candidates are the
    .model files of data/tokenizers and of the folders given; one fits when every id is below its vocabulary and at
    least half the sampled documents round-trip."""
    monkeypatch.setattr(build_shards, "DATA_DIR", tmp_path / "data")  # data/tokenizers: one that did not make them
    (tmp_path / "data" / "tokenizers").mkdir(parents=True)
    other = build_shards.train_tokenizer(
        english_docs(300, seed=2) + ODD_TEXTS, 600, tmp_path / "data" / "tokenizers" / "other.model"
    )
    mine = tmp_path / "mine"
    mine.mkdir()
    shutil.copyfile(tiny_data.tokenizer_path, mine / "tiny.model")
    (mine / "notes.model").write_text("not a model")
    small = build_shards.train_tokenizer(english_docs(300, seed=3), 300, mine / "sub" / "small.model")
    code, out = which(capsys, str(tiny_data.data_path), "--tokenizers", str(mine))
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0].startswith("shards: fineweb_val_000000.bin, fineweb_train_000000.bin in ")
    assert re.fullmatch(
        rf"no +vocab_size:{other.vocab_size()} round_trip:\d+/\d+  {re.escape(str(tmp_path))}/data/tokenizers/other.model",
        lines[1],
    )
    assert f"not a SentencePiece model  {mine / 'notes.model'}" in out
    assert f"vocab_size:{small.vocab_size()} too small for id" in out
    fits = re.search(rf"fits  vocab_size:512 round_trip:(\d+)/(\d+)  {re.escape(str(mine / 'tiny.model'))}\n", out)
    assert fits and fits.group(1) == fits.group(2) and int(fits.group(2)) >= 8, out
    assert lines[-1] == f"fits: TOKENIZER_PATH={mine / 'tiny.model'} VOCAB_SIZE=512"

    code, out = which(capsys, str(tiny_data.data_path))  # only data/tokenizers: none fits
    assert code == 1 and "none of the 1 tokenizers made these shards" in out
    assert '--tokenizers DIR, or get shards of your tokenizer: data/README.md, "Which shards for' in out

    monkeypatch.setattr(build_shards, "DATA_DIR", tmp_path / "empty")  # no tokenizer anywhere
    code, out = which(capsys, str(tiny_data.data_path))
    assert code == 1 and f"no .model file under {tmp_path / 'empty' / 'tokenizers'}. Name the folder" in out


def test_which_tokenizer_errors_exit_2(tmp_path, capsys):
    for argv, message in (
        ([str(tmp_path / "missing")], "no such folder. Give the folder of the shards"),
        ([str(tmp_path)], "holds no fineweb_val_\\*.bin or fineweb_train_\\*.bin shards"),
        ([str(tmp_path), "--tokenizers", str(tmp_path / "nope")], "--tokenizers .*nope: no such folder or file"),
    ):
        if argv == [str(tmp_path), "--tokenizers", str(tmp_path / "nope")]:
            build_shards.write_data_shard(tmp_path / "fineweb_val_000000.bin", [1, 5, 6, 1, 7, 1])
        fails(capsys, ["--which-tokenizer", *argv], message)
    with pytest.raises(SystemExit) as exc:  # a build's arguments with --which-tokenizer: argparse's usage error
        build_shards.main(["--which-tokenizer", str(tmp_path), "docs.jsonl"])
    assert exc.value.code == 2 and "builds nothing" in capsys.readouterr().err
