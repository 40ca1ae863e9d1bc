"""CaseOps (data/caseops.py): the transform is lossless on every text, and the bytes it gives each piece and token add
up to the original text's UTF-8 length, in the text's order.

CPU only, no network; a few seconds (one tiny tokenizer is trained). Run: python3 -m pytest -q tests/test_caseops.py
"""

import random
import sys
from pathlib import Path

import pytest
import sentencepiece as spm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "data"))

import build_shards  # noqa: E402
import caseops  # noqa: E402
from caseops import ALLCAPS, CAPNEXT, ESC, TITLE  # noqa: E402

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
    assert caseops.is_caseops_tokenizer(caseops_sp)
    assert not caseops.is_caseops_tokenizer(tiny_data.sp)
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
