r"""CaseOps: the records' lossless case transform of text before tokenization, its inverse, and the bytes each token
of transformed text stands for in the original (2026-04-18 record, PRs #1729/#1736: `lossless_caps_caseops_v1`).

A tokenizer trained on transformed text spends no vocabulary on case variants: "The", "THE" and "the" share the
pieces of "the". Over each word (a maximal run of ASCII letters; every other character passes through as it is):

    lowercase            as it is                      "the"      -> "the"
    Title (or "A")       TITLE + lowercase             "The"      -> TITLE "the"
    ALLCAPS (2+ letters) ALLCAPS + lowercase           "NASA"     -> ALLCAPS "nasa"
    any other mix        TITLE if the first letter is  "McDonald" -> TITLE "mc" CAPNEXT "donald"
                         a capital, CAPNEXT before     "iPhone"   -> "i" CAPNEXT "phone"
                         each later capital

The control symbols are the private-use characters U+E001..U+E004 (the records' choice), one user-defined piece each
in a CaseOps tokenizer (data/build_shards.py --caseops trains it so; train_gpt.is_caseops tells one from a plain
tokenizer trained on text that holds them). A control symbol that occurs in the text is escaped: ESC + the symbol. A
capital followed by a combining mark (U+0300..U+036F) stays as it is, outside any word: lowercased, some of them
would compose with the mark under the tokenizer's NFKC ("J" + U+030C -> "ǰ") and the inverse would no longer see a
letter. So `encode` applied to normalized text gives text that the normalization leaves unchanged.

Bits per byte must count the bytes of the original text, not of the transformed one (each control symbol is 3 UTF-8
bytes): `piece_bytes` and `token_bytes` give each piece or token its share, markers 0, an escaped symbol its 3, any
other character its own UTF-8 length (lowercasing an ASCII letter keeps its one byte). Summed over a document this is
exactly the UTF-8 length of its original text; the data tools write it as the validation shards' byte sidecars.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np

TITLE = "\ue001"  # the next letter, the first of its word, is a capital
ALLCAPS = "\ue002"  # every letter of the next word is a capital
CAPNEXT = "\ue003"  # the next letter, inside a word, is a capital
ESC = "\ue004"  # the next character is a control symbol of the original text, not an operation
CONTROLS = (TITLE, ALLCAPS, CAPNEXT, ESC)
NAME = "lossless_caps_caseops_v1"  # the records' name of this transform (their tokenizers' file names carry it)

_CONTROL = re.compile("[\ue001-\ue004]")
_WORD = re.compile(r"(?:[a-z]|[A-Z](?![\u0300-\u036f]))+")
# An escaped symbol, an ALLCAPS word, a capital after TITLE or CAPNEXT; the last alternative is a stray control.
_OPERATION = re.compile("\ue004([\ue001-\ue004])|\ue002([a-z]+)|[\ue001\ue003]([a-z])|([\ue001-\ue004])")


class CaseOpsError(ValueError):
    """Text that no original text transforms into (a stray or misplaced control symbol)."""


def _encode_word(match: re.Match) -> str:
    word = match.group()
    if word.islower():
        return word
    lower = word.lower()
    if word.isupper() and len(word) >= 2:
        return ALLCAPS + lower
    if word[0].isupper() and (len(word) == 1 or word[1:].islower()):
        return TITLE + lower
    head = (TITLE if word[0].isupper() else "") + lower[0]
    return head + "".join(CAPNEXT + c if o.isupper() else c for o, c in zip(word[1:], lower[1:]))


def encode(text: str) -> str:
    """The CaseOps form of text (rules above)."""
    return _WORD.sub(_encode_word, _CONTROL.sub(lambda m: ESC + m.group(), text))


def _decode_operation(match: re.Match) -> str:
    escaped, allcaps, capital, stray = match.groups()
    if stray is not None:
        raise CaseOpsError(
            f"control symbol U+{ord(stray):04X} at character {match.start()} is not followed by what "
            "it operates on (a lowercase ASCII letter, or a control symbol after ESC)"
        )
    return escaped or (allcaps or capital).upper()


def decode(text: str, strict: bool = True) -> str:
    """The original of CaseOps text: decode(encode(t)) == t for every t. strict: raise CaseOpsError unless text is
    exactly what encode makes of the result (no marker inside a word, none before a word that needs none)."""
    original = _OPERATION.sub(_decode_operation, text)
    if strict and encode(original) != text:
        raise CaseOpsError("the text is not a CaseOps encoding: a marker stands where encode would not put it")
    return original


def piece_bytes(pieces: Iterable[str]) -> list[int]:
    """UTF-8 bytes of the original text that each piece of a CaseOps text stands for, in order (a piece: any string;
    together they are the text): markers 0, an escaped control symbol 3, every other character its own length. The
    sum is len(decode("".join(pieces)).encode("utf-8"))."""
    counts, escaped = [], False
    for piece in pieces:
        if not escaped and not _CONTROL.search(piece):  # nearly every piece: its own bytes
            counts.append(len(piece.encode("utf-8")))
            continue
        count = 0
        for char in piece:
            if escaped or char not in CONTROLS:
                count += len(char.encode("utf-8"))
                escaped = False
            else:
                escaped = char == ESC
        counts.append(count)
    return counts


def token_bytes(sp, ids: list[int]) -> np.ndarray:
    """(len(ids),) uint16: the original bytes each token of one document stands for, where ids (no BOS) encode
    CaseOps text with the CaseOps tokenizer sp. A byte-fallback piece is 1 byte, a control or unknown token 0, a
    leading "▁" a space except on the document's first token (decoding drops it there, as train_gpt.py's count
    does after BOS). The sum is the UTF-8 length of decode(sp.decode(ids))."""
    pieces = []
    for k, i in enumerate(ids):
        if sp.is_byte(i):
            pieces.append("\x00")  # one byte of a character the vocabulary lacks; never a control symbol
        elif sp.is_control(i) or sp.is_unknown(i) or sp.is_unused(i):
            pieces.append("")
        else:
            piece = sp.id_to_piece(i)
            pieces.append((piece[1:] if k == 0 and piece.startswith("\u2581") else piece).replace("\u2581", " "))
    return np.array(piece_bytes(pieces), dtype=np.uint16)
