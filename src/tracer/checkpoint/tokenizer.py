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

MAX_TOKENIZER_BYTES = 1 << 30


@dataclass(frozen=True)
class Token:
    id: int
    piece: str  # the vocabulary string, e.g. "Ġcat" or "æĺ¥"
    bytes: bytes  # what the piece stands for in the text (byte-level pieces decoded)
    start: int  # character span in the prompt; (0, 0) for added special tokens
    end: int
    special: bool
    type_id: int = 0  # segment: 0 = first text, 1 = the pair's second text (as the tokenizer's template marks it)
    sequence: int = 0  # which text the span indexes (0 or 1; specials count as 0)
    unknown: bool = False  # the unknown token: text the vocabulary cannot spell, not a special marker
    continuation: bool = False  # a WordPiece `##` piece, glued to the piece before it

    def to_dict(self, pos: int, text: str) -> dict:
        d = {
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
        if self.type_id:
            d["type"] = self.type_id
        if self.unknown:
            d["unknown"] = True
        if self.continuation:
            d["continuation"] = True
        return d


class Tokenizer:
    def __init__(self, path: Path):
        from tracer.checkpoint.jsonload import load_json
        from tracer.checkpoint.safetensors_file import check_regular_file

        check_regular_file(path, "tokenizer.json")
        if path.stat().st_size > MAX_TOKENIZER_BYTES:
            raise TracerError(f"{path}: {path.stat().st_size} bytes is too large for a tokenizer.json")
        raw = path.read_bytes()
        spec = load_json(raw, f"{path}: cannot read tokenizer", max_depth=32)
        if not isinstance(spec, dict):
            raise TracerError(f"{path}: cannot read tokenizer (not a JSON object)")
        self._setup(spec, raw.decode("utf-8"), str(path))
        self.path = path

    @classmethod
    def from_spec(cls, spec: dict, source: str) -> "Tokenizer":
        """A tokenizer from a tokenizer.json structure built in memory (e.g. from a GGUF file's metadata);
        `source` names where it came from in error messages."""
        if not isinstance(spec, dict):
            raise TracerError(f"{source}: cannot read tokenizer (not a JSON object)")
        tok = cls.__new__(cls)
        tok._setup(spec, json.dumps(spec, ensure_ascii=False), source)
        tok.path = None
        return tok

    def _setup(self, spec: dict, text: str, source: str) -> None:
        from tokenizers import Tokenizer as HFTokenizer

        try:
            self._tok = HFTokenizer.from_str(text)
        except Exception as exc:  # tokenizers raises a bare Exception on bad JSON
            raise TracerError(f"{source}: cannot read tokenizer ({(str(exc).splitlines() or [''])[0][:120]})") from None
        # tracer pads batches itself and reports a prompt that is too long: the file's own padding
        # (MiniLM pads every prompt to 128) and truncation (which cuts silently) are switched off.
        self._tok.no_padding()
        self._tok.no_truncation()
        self.source = source
        self.byte_level = _uses_byte_level(spec)
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        self.special_ids = _special_ids(spec)
        self.unk_id = _unk_id(spec, self._tok)
        self.continuation_prefix = _continuation_prefix(spec)

    def encode(self, text: str, special_tokens: bool = True, pair: str | None = None) -> list[Token]:
        enc = self._tok.encode(text, pair, add_special_tokens=special_tokens)
        tokens = []
        for tid, piece, (start, end), special, type_id, seq in zip(
            enc.ids, enc.tokens, enc.offsets, enc.special_tokens_mask, enc.type_ids, enc.sequence_ids
        ):
            unknown = tid == self.unk_id
            is_special = (bool(special) or tid in self.special_ids) and not unknown
            cont = bool(self.continuation_prefix) and not is_special and piece.startswith(self.continuation_prefix)
            spelled = ((text if not seq else pair) or "")[start:end].encode() if unknown else self.piece_bytes(piece, is_special)
            tokens.append(Token(tid, piece, spelled, start, end, is_special,
                                type_id, seq or 0, unknown, cont))
        return tokens

    def piece(self, token_id: int) -> str:
        p = self._tok.id_to_token(token_id)
        return p if p is not None else f"<{token_id}>"

    def describe_id(self, token_id: int) -> dict:
        """{piece, bytes (hex), special} of a vocabulary id, for tables of ids that did not come from text."""
        piece = self.piece(token_id)
        unknown = token_id == self.unk_id
        special = token_id in self.special_ids and not unknown
        d = {"piece": piece, "bytes": self.piece_bytes(piece, special).hex(" "), "special": special}
        if unknown:
            d["unknown"] = True
        if self.continuation_prefix and not special and piece.startswith(self.continuation_prefix):
            d["continuation"] = True
        return d

    def token_id(self, piece: str) -> int | None:
        return self._tok.token_to_id(piece)

    def piece_bytes(self, piece: str, special: bool = False) -> bytes:
        if special:
            return piece.encode()
        if self.continuation_prefix and piece.startswith(self.continuation_prefix):  # WordPiece "##ing" spells "ing"
            return piece[len(self.continuation_prefix):].encode()
        if self.byte_level:
            table = _unicode_to_byte()
            if all(ch in table for ch in piece):
                return bytes(table[ch] for ch in piece)
        if piece.startswith("<0x") and piece.endswith(">") and len(piece) == 6:  # sentencepiece byte fallback
            return bytes([int(piece[3:5], 16)])
        return piece.replace("\u2581", " ").encode()

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=False)


def _uses_byte_level(spec: dict) -> bool:
    return '"ByteLevel"' in json.dumps(spec.get("pre_tokenizer")) or '"ByteLevel"' in json.dumps(spec.get("decoder"))


def _special_ids(spec: dict) -> frozenset[int]:
    added = spec.get("added_tokens")
    if not isinstance(added, list):
        return frozenset()
    return frozenset(t["id"] for t in added
                     if isinstance(t, dict) and t.get("special") is True and isinstance(t.get("id"), int))


def _unk_id(spec: dict, tok) -> int | None:
    """The unknown token's id: WordPiece/BPE name it (`unk_token`), Unigram numbers it (`unk_id`)."""
    model = spec.get("model") if isinstance(spec.get("model"), dict) else {}
    if isinstance(model.get("unk_id"), int):
        return model["unk_id"]
    name = model.get("unk_token")
    return tok.token_to_id(name) if isinstance(name, str) else None


def _continuation_prefix(spec: dict) -> str:
    """WordPiece's `##` (the prefix marking a piece that continues a word), "" for other models."""
    model = spec.get("model") if isinstance(spec.get("model"), dict) else {}
    if model.get("type") != "WordPiece":
        return ""
    prefix = model.get("continuing_subword_prefix", "##")
    return prefix if isinstance(prefix, str) else ""


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
