"""tokenizer.json through `tokenizers`, with what a person needs to see each token.

The post-processor in tokenizer.json adds BOS/EOS/CLS exactly as transformers'
fast tokenizers do; `special_tokens=False` turns that off.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from tracer.errors import TracerError


@dataclass(frozen=True)
class Token:
    id: int
    piece: str  # the vocabulary string, e.g. "Ġcat" or "æĺ¥"
    bytes: bytes  # what the piece stands for in the text (byte-level pieces decoded)
    start: int  # character span in the prompt; (0, 0) for added special tokens
    end: int
    special: bool

    def to_dict(self, pos: int, text: str) -> dict:
        return {
            "pos": pos,
            "id": self.id,
            "piece": self.piece,
            "bytes": self.bytes.hex(" "),
            "text": text[self.start : self.end],
            "start": self.start,
            "end": self.end,
            "special": self.special,
            "pad": False,
        }


class Tokenizer:
    def __init__(self, path: Path):
        from tokenizers import Tokenizer as HFTokenizer

        try:
            self._tok = HFTokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises a bare Exception on bad JSON
            raise TracerError(f"{path}: cannot read tokenizer ({str(exc).splitlines()[0][:120]})") from None
        self.path = path
        self.byte_level = _uses_byte_level(path)
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        self.special_ids = _special_ids(path)

    def encode(self, text: str, special_tokens: bool = True) -> list[Token]:
        enc = self._tok.encode(text, add_special_tokens=special_tokens)
        tokens = []
        for tid, piece, (start, end), special in zip(enc.ids, enc.tokens, enc.offsets, enc.special_tokens_mask):
            is_special = bool(special) or tid in self.special_ids
            tokens.append(Token(tid, piece, self.piece_bytes(piece, is_special), start, end, is_special))
        return tokens

    def piece(self, token_id: int) -> str:
        p = self._tok.id_to_token(token_id)
        return p if p is not None else f"<{token_id}>"

    def describe_id(self, token_id: int) -> dict:
        """{piece, bytes (hex), special} of a vocabulary id, for tables of ids that did not come from text."""
        piece = self.piece(token_id)
        special = token_id in self.special_ids
        return {"piece": piece, "bytes": self.piece_bytes(piece, special).hex(" "), "special": special}

    def piece_bytes(self, piece: str, special: bool = False) -> bytes:
        if special:
            return piece.encode()
        if self.byte_level:
            table = _unicode_to_byte()
            if all(ch in table for ch in piece):
                return bytes(table[ch] for ch in piece)
        if piece.startswith("<0x") and piece.endswith(">") and len(piece) == 6:  # sentencepiece byte fallback
            return bytes([int(piece[3:5], 16)])
        return piece.replace("\u2581", " ").encode()

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=False)


def _uses_byte_level(path: Path) -> bool:
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return False
    return '"ByteLevel"' in json.dumps(spec.get("pre_tokenizer")) or '"ByteLevel"' in json.dumps(spec.get("decoder"))


def _special_ids(path: Path) -> frozenset[int]:
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
        return frozenset(t["id"] for t in spec.get("added_tokens", []) if t.get("special"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
        return frozenset()


@lru_cache(maxsize=1)
def _unicode_to_byte() -> dict[str, int]:
    """Inverse of GPT-2's bytes_to_unicode: the printable stand-ins byte-level BPE uses for raw bytes."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars)}
