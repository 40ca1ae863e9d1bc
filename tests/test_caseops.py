"""CaseOps (data/caseops.py): the transform is lossless on every text, and the bytes it gives each piece and token add
up to the original text's UTF-8 length, in the text's order.

CPU only, no network. Then CaseOps data end to end: build_shards.py --caseops on the tests' tiny text, and train_gpt.py
scoring it on every path with 1 and 2 processes (about a minute). Run: python3 -m pytest -q tests/test_caseops.py
"""

import dataclasses
import json
import math
import random
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "data"))

import build_shards  # noqa: E402
import caseops  # noqa: E402
import train_gpt  # noqa: E402
from caseops import ALLCAPS, CAPNEXT, ESC, TITLE  # noqa: E402
from helpers import TinyData, run_script, runs_processes, tiny_env  # noqa: E402
from train_gpt import Hyperparameters  # noqa: E402

ONE_CPU = train_gpt.DistContext(0, 1, 0, torch.device("cpu"))

# Each case the issue names: control symbols in the input, mixed scripts, digits and apostrophes inside words,
# one-letter words, runs of capitals, the empty document; and capitals before combining marks.
CASES = [
    "",
    "The NASA Launch",
    "McDonald's iPhone, eBay and HTTPs URLs",
    "I A a x Y z",
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ ABCdef abcDEF aBcDeF",
    "COVID19 B2B x86_64 O'Neil don't DON'T",
    "Straße ÆRØ Ωmega НАСА 漢字 Ünïcödé résumé RÉSUMÉ",
    f"literal controls {TITLE}{ALLCAPS} and {CAPNEXT}{ESC}{ESC} x{TITLE}Y",
    "J\u030cosé W\u030aX ABJ\u030c T\u0308\u0308 i\u0307",
    "  spaces\tand\nnewlines  ",
    "😀 emoji 👍🏽 A😀B",
]
ALPHABET = "aAzZbQ '1_\u030c\u0301éÉß漢😀\n" + "".join(caseops.CONTROLS)


def random_texts(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    texts = ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 16))) for _ in range(count)]
    texts += ["".join(chr(rng.randint(1, 0x2FFFF)) for _ in range(rng.randint(1, 12))) for _ in range(count // 4)]
    return [t for t in texts if not any(0xD800 <= ord(c) <= 0xDFFF for c in t)]  # no lone surrogates


def test_the_issue_example_and_each_rule():
    assert caseops.encode("The NASA Launch") == f"{TITLE}the {ALLCAPS}nasa {TITLE}launch"
    assert caseops.encode("the") == "the"
    assert caseops.encode("A") == f"{TITLE}a"
    assert caseops.encode("McDonald") == f"{TITLE}mc{CAPNEXT}donald"
    assert caseops.encode("iPhone") == f"i{CAPNEXT}phone"
    assert caseops.encode(f"x{ESC}") == f"x{ESC}{ESC}"
    assert caseops.encode("Ünïcödé") == "Ünïcödé"  # only ASCII letters are words


def test_decode_of_encode_is_the_text():
    for text in CASES + random_texts(3000):
        encoded = caseops.encode(text)
        assert caseops.decode(encoded) == text, (text, encoded)
        assert caseops.encode(text.lower()) == text.lower() or any(c in text for c in caseops.CONTROLS)


@pytest.mark.parametrize(
    "bad", [TITLE, f"a{TITLE}", f"{TITLE}A", f"{ESC}x", f"ab{TITLE}c", f"{ALLCAPS}a{ALLCAPS}b", f"x{CAPNEXT}"]
)
def test_decode_refuses_what_encode_never_makes(bad):
    with pytest.raises(caseops.CaseOpsError):
        caseops.decode(bad)


def cuts(text: str, rng: random.Random) -> list[str]:
    """text cut into pieces at random places (each piece may hold several control symbols, or half a word)."""
    points = sorted(rng.sample(range(len(text) + 1), min(4, len(text) + 1)))
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)])]


def test_piece_bytes_add_up_to_the_original_bytes_in_the_texts_order():
    for text in CASES + random_texts(1000, seed=1):
        check_piece_bytes(text)


def check_piece_bytes(text: str) -> None:
    encoded, rng = caseops.encode(text), random.Random(text)
    pieces = cuts(encoded, rng) + list(encoded)  # random cuts, then every character alone
    counts = caseops.piece_bytes(pieces)
    half = len(pieces) - len(encoded)
    assert sum(counts[:half]) == sum(counts[half:]) == len(text.encode("utf-8"))
    for k in range(len(encoded) + 1):  # in order: the bytes before each character are its prefix's original bytes
        try:
            prefix = caseops.decode(encoded[:k], strict=False)
        except caseops.CaseOpsError:  # a marker whose letter is past the cut
            continue
        assert sum(counts[half : half + k]) == len(prefix.encode("utf-8"))
    if ESC not in encoded:  # (an escaped symbol is the original's: its 3 bytes)
        assert all(c == 0 for c, piece in zip(counts[half:], encoded) if piece in caseops.CONTROLS)


@pytest.fixture(scope="module")
def caseops_sp(tmp_path_factory) -> spm.SentencePieceProcessor:
    """A CaseOps tokenizer trained as build_shards.py --caseops trains one, on the cases and English-like text."""
    words = "The the NASA nasa iPhone Launch of AND and In in McDonald it's 2024 x86".split()
    rng = random.Random(0)
    texts = [" ".join(rng.choice(words) for _ in range(40)) for _ in range(300)] + CASES
    model = build_shards.train_tokenizer_model(texts, 320, use_caseops=True)
    return spm.SentencePieceProcessor(model_proto=model)


def test_the_control_symbols_are_pieces_of_a_caseops_tokenizer(caseops_sp, tiny_data):
    assert train_gpt.is_caseops(caseops_sp)
    assert not train_gpt.is_caseops(tiny_data.sp)
    for symbol in caseops.CONTROLS:
        assert caseops_sp.encode(symbol) == [caseops_sp.piece_to_id(symbol)]


def test_token_bytes_add_up_to_the_normalized_text_that_the_tokens_decode_to(caseops_sp):
    for text in CASES + random_texts(300, seed=2):
        normalized = build_shards.normalized_text(caseops_sp, text)  # what bpb counts (data/README.md)
        encoded = caseops.encode(normalized)
        assert build_shards.normalized_text(caseops_sp, encoded) == encoded  # the tokenizer changes nothing
        ids = caseops_sp.encode(encoded)
        assert caseops.decode(caseops_sp.decode(ids)) == normalized
        assert int(caseops.token_bytes(caseops_sp, ids).sum()) == len(normalized.encode("utf-8"))


def test_a_capital_before_a_combining_mark_stays_out_of_words(caseops_sp):
    """Lowercased, "J" + U+030C would become "ǰ" under NFKC: the tokens would no longer decode to the text."""
    assert caseops.encode("J\u030c") == "J\u030c"
    assert caseops.encode("ABW\u030a") == f"{ALLCAPS}abW\u030a"
    naive = f"{TITLE}j\u030c"  # what the rule without the exception would make
    assert build_shards.normalized_text(caseops_sp, naive) != naive


# ---- CaseOps data end to end: build_shards.py --caseops, then train_gpt.py scores the original bytes on every path ----


@pytest.fixture(scope="module")
def caseops_data(tiny_data, tmp_path_factory) -> TinyData:
    """The tiny data's documents built with --caseops (its own tokenizer, two validation shards with sidecars)."""
    root = tmp_path_factory.mktemp("caseops_data")
    train, val = root / "train.jsonl", root / "val.jsonl"
    for path, docs in ((train, tiny_data.train_docs), (val, tiny_data.val_docs)):
        path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")
    argv = [str(train), "--val", str(val), "--output", str(root / "shards"), "--caseops", "--workers", "1"]
    argv += ["--vocab-size", str(tiny_data.vocab_size), "--tokenizer-out", str(root / "caseops.model")]
    build_shards.build(dataclasses.replace(build_shards.parse_args(argv + ["--shard-tokens", "7000"]), quiet=True))
    sp = spm.SentencePieceProcessor(model_file=str(root / "caseops.model"))
    return TinyData(root / "caseops.model", root / "shards", sp, tiny_data.train_docs, tiny_data.val_docs)


def sidecar_bytes(data: TinyData) -> torch.Tensor:
    return torch.cat([train_gpt.load_data_shard(f) for f in sorted(data.data_path.glob("fineweb_val_bytes_*.bin"))])


def test_preflight_takes_the_sidecars_bytes_which_are_the_plain_texts_bytes(caseops_data, tiny_data, tmp_path):
    assert len(list(caseops_data.data_path.glob("fineweb_val_bytes_*.bin"))) > 1
    val = train_gpt.preflight(Hyperparameters.from_env(tiny_env(caseops_data, tmp_path)), ONE_CPU).val
    assert val.bytes_from["val_bytes"] == "sidecar"
    sidecar = sidecar_bytes(caseops_data)
    assert torch.equal(val.token_bytes, sidecar[: val.tokens.numel()].to(torch.int32))
    # The whole split counts what the plain tokenizer counts for the same documents: their normalized text's bytes.
    plain = train_gpt.preflight(Hyperparameters.from_env(tiny_env(tiny_data, tmp_path, RUN_ID="plain")), ONE_CPU).val
    plain_all = train_gpt.tokenizer_bytes(
        train_gpt.load_data_shard(tiny_data.data_path / "fineweb_val_000000.bin").to(torch.int64),
        *train_gpt.build_byte_luts(tiny_data.sp, tiny_data.vocab_size),
    )
    assert plain.bytes_from == {"val_bytes": "tokenizer"} and int(sidecar.sum()) == int(plain_all.sum())
    # and the CaseOps tokenizer's own pieces would count more (each control symbol is 3 bytes): the sidecar matters
    caseops_tokens = val.tokens
    luts = train_gpt.build_byte_luts(caseops_data.sp, caseops_data.vocab_size)
    assert int(train_gpt.tokenizer_bytes(caseops_tokens, *luts).sum()) > int(val.token_bytes.sum())


SCORE_LINE = re.compile(r"final_int8_zlib_(roundtrip|sliding_window|ttt)_exact val_loss:(\S+) val_bpb:(\S+)")


@pytest.mark.parametrize("nproc", [1, pytest.param(2, marks=runs_processes(2))])
def test_every_scoring_path_divides_by_the_sidecars_bytes(caseops_data, tmp_path, nproc):
    """A CaseOps run, 1 and 2 processes: validation after training, the round trip, sliding windows and TTT each score
    every target once, so each one's bpb is its loss / ln 2 * targets / (the sidecar's bytes of those targets)."""
    env = tiny_env(caseops_data, tmp_path, ITERATIONS=2, EVAL_STRIDE=32, TTT_ENABLED=1, TTT_CHUNK_TOKENS=2048)
    run = run_script(env, tmp_path, nproc=nproc)
    assert run.result.returncode == 0, run.result.stderr[-3000:]
    [source] = run.events("val_bytes")  # which bytes, and which sidecars (the sha256 of each, as in the manifest)
    sidecars = sorted(caseops_data.data_path.glob("fineweb_val_bytes_*.bin"))
    assert source["val_bytes"] == "sidecar" and source["val_bytes_sha256"].split(",") == [
        build_shards.file_sha256(f) for f in sidecars
    ]
    val = train_gpt.preflight(Hyperparameters.from_env(dict(env, RUN_ID="check")), ONE_CPU).val
    targets = val.tokens.numel() - 1
    num_bytes = int(sidecar_bytes(caseops_data)[1 : targets + 1].sum())  # read here, not through train_gpt
    scores = {m[1]: (float(m[2]), float(m[3])) for m in map(SCORE_LINE.fullmatch, run.lines) if m}
    assert sorted(scores) == ["roundtrip", "sliding_window", "ttt"]
    for kind, (loss, bpb) in scores.items():
        assert bpb == pytest.approx(loss / math.log(2) * targets / num_bytes, rel=1e-6), kind
    [validation] = [e for e in run.events("val_bpb") if "val_loss" in e]  # after training (4 decimals logged)
    expected = float(validation["val_loss"]) / math.log(2) * targets / num_bytes
    assert float(validation["val_bpb"]) == pytest.approx(expected, rel=1e-4)


def test_a_wrong_or_missing_sidecar_or_caseops_without_sidecars_is_an_error_before_training(caseops_data, tmp_path):
    def error(folder: Path, **env) -> str:
        args = Hyperparameters.from_env(tiny_env(dataclasses.replace(caseops_data, data_path=folder), tmp_path, **env))
        with pytest.raises(train_gpt.ConfigError) as raised:
            train_gpt.preflight(args, ONE_CPU)
        return str(raised.value)

    folder = tmp_path / "shards"
    shutil.copytree(caseops_data.data_path, folder)
    first = folder / "fineweb_val_bytes_000000.bin"
    counts = train_gpt.load_data_shard(first).numpy()
    build_shards.write_data_shard(first, counts[:-1])  # one value short
    assert "fineweb_val_bytes_000000.bin missing or not as long as its shard" in error(folder)
    first.unlink()  # one of the two sidecars missing
    assert "fineweb_val_bytes_000000.bin missing" in error(folder, RUN_ID="b")
    for sidecar in folder.glob("fineweb_val_bytes_*.bin"):
        sidecar.unlink()
    message = error(folder, RUN_ID="c")
    assert "(CaseOps) needs byte sidecars fineweb_val_bytes_*.bin" in message and str(folder) in message


def test_the_records_caseops_enabled_runs_unchanged_here():
    """The records' command lines set CASEOPS_ENABLED=1; ours needs no setting (the sidecars are used where they are),
    and the variable is not taken for a misspelling of one of ours."""
    assert Hyperparameters.from_env({"CASEOPS_ENABLED": "1", "RUN_ID": "r"}) == Hyperparameters.from_env(
        {"RUN_ID": "r"}
    )


# ---- Issue 44 row 1 / issue 41: a sidecar must count these shards' bytes, by the convention its manifest names ----


def caseops_error(data: TinyData, folder: Path, tmp_path: Path, **env) -> str:
    """The message that refuses DATA_PATH=folder before training (the pre-flight)."""
    args = Hyperparameters.from_env(tiny_env(dataclasses.replace(data, data_path=folder), tmp_path, **env))
    with pytest.raises((train_gpt.ConfigError, train_gpt.ShardError)) as raised:
        train_gpt.preflight(args, ONE_CPU)
    return str(raised.value)


def split_like(values: np.ndarray, folder: Path) -> None:
    """Write values over the folder's sidecars, each as long as its shard."""
    start = 0
    for sidecar in sorted(folder.glob("fineweb_val_bytes_*.bin")):
        n = train_gpt.read_shard_header(sidecar)
        build_shards.write_data_shard(sidecar, values[start : start + n])
        start += n


def edit_manifest(folder: Path, **changes) -> None:
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    manifest["datasets"][0].update(changes)
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


def sidecars_in_manifest(folder: Path) -> list[dict]:
    """The manifest's file list with each sidecar's sha256 as it is now."""
    files = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))["datasets"][0]["files"]
    for f in files:
        f["sha256"] = build_shards.file_sha256(folder / f["name"])
    return files


def test_a_sidecar_of_another_build_is_refused_before_scoring(caseops_data, tmp_path):
    """Issue 44 row 1: the sidecars of another build of other documents (the same tokenizer), cut to this split's
    length, once divided val_bpb silently. Each check refuses them on its own: the per-token count (this project's
    sidecars), the per-document count with document starts at 0 (sidecar_raw), the manifest's sha256."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "val.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in caseops_data.val_docs[::-1]))
    (other / "train.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in caseops_data.train_docs[:20]))
    argv = [str(other / "train.jsonl"), "--val", str(other / "val.jsonl"), "--output", str(other / "shards")]
    argv += ["--caseops", "--tokenizer", str(caseops_data.tokenizer_path), "--workers", "1"]
    build_shards.build(dataclasses.replace(build_shards.parse_args(argv), quiet=True))
    foreign = train_gpt.load_data_shard(other / "shards" / "fineweb_val_bytes_000000.bin").numpy()
    folder = tmp_path / "shards"
    shutil.copytree(caseops_data.data_path, folder)
    split_like(foreign, folder)
    message = caseops_error(caseops_data, folder, tmp_path)  # as it comes: the manifest lists other sha256s
    assert "byte sidecars (sidecar) not of these shards" in message
    assert "fineweb_val_bytes_000000.bin not its sha256" in message
    assert re.search(r"\d+ tokens off", message) and "rebuild them: data/build_shards.py" in message
    edit_manifest(folder, files=sidecars_in_manifest(folder))  # the sha256 agree: the counts alone refuse them
    message = caseops_error(caseops_data, folder, tmp_path, RUN_ID="b")
    assert re.search(r"\(\d+ tokens off\)", message) and "sha256" not in message
    edit_manifest(folder, val_bytes="sidecar_raw")  # counted as the original documents' bytes: per document
    assert re.search(r"\(\d+ documents off\)", caseops_error(caseops_data, folder, tmp_path, RUN_ID="c"))
    shutil.rmtree(folder)  # the sidecars as built, the manifest's sha256 of one changed: refused for that alone
    shutil.copytree(caseops_data.data_path, folder)
    files = sidecars_in_manifest(folder)
    files[[f["name"] for f in files].index("fineweb_val_bytes_000001.bin")]["sha256"] = "0" * 64
    edit_manifest(folder, files=files)
    message = caseops_error(caseops_data, folder, tmp_path, RUN_ID="d")
    assert "(fineweb_val_bytes_000001.bin not its sha256)" in message


def raw_sidecar_values(data: TinyData) -> np.ndarray:
    """A stand-in for the records' exporter: this project's sidecar values, each document's largest count changed
    so that the document adds up to its original UTF-8 bytes (not the bytes of its normalized text)."""
    tokens = torch.cat([train_gpt.load_data_shard(f) for f in sorted(data.data_path.glob("fineweb_val_0*.bin"))])
    values = sidecar_bytes(data).numpy().astype(np.int64)
    starts = list(np.flatnonzero(tokens.numpy() == build_shards.BOS_ID)) + [len(values)]
    assert len(starts) - 1 == len(data.val_docs)
    for doc, a, b in zip(data.val_docs, starts, starts[1:]):
        values[a + 1 + np.argmax(values[a + 1 : b])] += len(doc.encode("utf-8")) - values[a:b].sum()
    assert values.min() >= 0
    return values


def test_sidecars_that_count_the_original_bytes_are_scored_as_they_are_and_named(caseops_data, tmp_path):
    """Issue 41: the records' sidecars count the original document's UTF-8 bytes (sidecar_raw in the manifest); ours
    the bytes of the text as the tokenizer normalizes it (sidecar). Both are taken as they are, and the log's
    val_bytes says which; their totals differ on a document with collapsed whitespace."""
    folder = tmp_path / "shards"
    shutil.copytree(caseops_data.data_path, folder)
    split_like(raw_sidecar_values(caseops_data), folder)
    edit_manifest(folder, files=sidecars_in_manifest(folder), val_bytes="sidecar_raw")
    data = dataclasses.replace(caseops_data, data_path=folder)
    val = train_gpt.preflight(Hyperparameters.from_env(tiny_env(data, tmp_path)), ONE_CPU).val
    assert val.bytes_from["val_bytes"] == "sidecar_raw"
    ours = train_gpt.preflight(Hyperparameters.from_env(tiny_env(caseops_data, tmp_path, RUN_ID="o")), ONE_CPU).val
    assert ours.bytes_from["val_bytes"] == "sidecar"
    raw_total = sum(len(d.encode("utf-8")) for d in caseops_data.val_docs)
    normalized_total = sum(
        len(build_shards.normalized_text(caseops_data.sp, d).encode()) for d in caseops_data.val_docs
    )
    assert int(sidecar_bytes(data).sum()) == raw_total and int(sidecar_bytes(caseops_data).sum()) == normalized_total
    whitespace = "   leading spaces,\ttabs\n\nand  blank   lines   "  # one of the tiny data's documents
    assert whitespace in caseops_data.val_docs
    assert (len(whitespace.encode()), len(build_shards.normalized_text(caseops_data.sp, whitespace))) == (46, 36)
    assert raw_total - normalized_total >= 46 - 36
    edit_manifest(folder, val_bytes="sidecar")  # the same values taken for ours: refused token by token
    assert re.search(r"\(\d+ tokens off\)", caseops_error(caseops_data, folder, tmp_path, RUN_ID="x"))


def test_a_truncated_sidecar_built_here_is_to_be_rebuilt_not_fetched(caseops_data, tmp_path):
    """Issue 44 row 7: a sidecar cut by 100 bytes in a folder data/build_shards.py made: rebuild it, it was never
    downloaded; in a downloaded folder (its manifest not made here) download it again."""
    folder = tmp_path / "shards"
    shutil.copytree(caseops_data.data_path, folder)
    sidecar = folder / "fineweb_val_bytes_000000.bin"
    sidecar.write_bytes(sidecar.read_bytes()[:-100])
    message = caseops_error(caseops_data, folder, tmp_path)
    assert (
        "fineweb_val_bytes_000000.bin missing or not as long as its shard: rebuild them: data/build_shards.py"
        in message
    )
    assert "fetch" not in message and "download" not in message
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    del manifest["built_with"]
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    assert "as long as its shard: download them again" in caseops_error(caseops_data, folder, tmp_path, RUN_ID="b")
