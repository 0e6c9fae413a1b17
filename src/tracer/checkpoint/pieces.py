"""A token's piece as a person should see it: spaces and control characters visible, partial UTF-8 as bytes.

Below the reports because the diff of two tokenizations shows pieces too."""

from __future__ import annotations

import unicodedata

SPACE = "␣"


def visible_text(text: str) -> str:
    """Spaces as ␣, control and invisible characters as escapes, everything else as is."""
    out = []
    for ch in text:
        if ch == " ":
            out.append(SPACE)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif unicodedata.category(ch) in ("Cc", "Cf", "Zs", "Zl", "Zp", "Cs", "Co", "Cn"):
            out.append(f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)


def _utf8_length(lead: int) -> int:
    if lead < 0x80:
        return 1
    if 0xC2 <= lead <= 0xDF:
        return 2
    if 0xE0 <= lead <= 0xEF:
        return 3
    if 0xF0 <= lead <= 0xF4:
        return 4
    return 0  # a continuation byte or an invalid lead: cannot start a character


def split_utf8(raw: bytes) -> list[str | bytes]:
    """Whole characters as str; runs of bytes that are only part of a character as bytes."""
    parts: list[str | bytes] = []
    i = 0
    while i < len(raw):
        n = _utf8_length(raw[i])
        ch = None
        if n and i + n <= len(raw):
            try:
                ch = raw[i : i + n].decode("utf-8")
            except UnicodeDecodeError:
                ch = None
        if ch is not None:
            parts.append(ch)
            i += n
            continue
        if parts and isinstance(parts[-1], bytes):
            parts[-1] += raw[i : i + 1]
        else:
            parts.append(raw[i : i + 1])
        i += 1
    return parts


def byte_group(raw: bytes) -> str:
    return "<" + raw.hex(" ") + ">"


def shown_piece(piece: str, bytes_hex: str, special: bool, pad: bool = False) -> str:
    """The piece a person reads: `<s>` for specials, `␣the` for ' the', `<e6 98>` for part of 春."""
    if pad:
        return "<pad>"
    if special or not bytes_hex:
        return piece
    parts = split_utf8(bytes.fromhex(bytes_hex))
    return "".join(byte_group(p) if isinstance(p, bytes) else visible_text(p) for p in parts)


def is_partial(bytes_hex: str, special: bool) -> bool:
    """True when the token's bytes are not whole UTF-8 characters."""
    if special or not bytes_hex:
        return False
    return any(isinstance(p, bytes) for p in split_utf8(bytes.fromhex(bytes_hex)))
