"""Tokens as a person should see them: spaces and control characters visible, partial UTF-8 as bytes."""

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


def token_rows(meta: dict, row: int, key: str = "tokens") -> list[dict]:
    """The batch row's tokens with what the screen shows; `part` says "1/2" when tokens share one span.

    key: "tokens" (the input) or "decoder_tokens" (an encoder-decoder model's decoder input)."""
    tokens = meta.get(key) or []
    if not tokens:
        return []
    out = []
    for t in tokens[row]:
        special, pad = bool(t.get("special")), bool(t.get("pad"))
        unknown, cont = bool(t.get("unknown")), bool(t.get("continuation"))
        bytes_hex = t.get("bytes", "")
        shown = t["piece"] if unknown or cont else shown_piece(t["piece"], bytes_hex, special, pad)
        out.append({
            "pos": t["pos"], "id": t["id"], "piece": t["piece"],
            "token": shown,
            "bytes": bytes_hex, "partial": is_partial(bytes_hex, special),
            "text": t.get("text", ""), "span": [t.get("start", 0), t.get("end", 0)],
            "special": special, "pad": pad, "part": None,
            "type": int(t.get("type", 0)), "unknown": unknown, "continuation": cont,
        })
    _number_shared_spans(out)
    return out


def _number_shared_spans(rows: list[dict]) -> None:
    """Tokens cut from one character (or one span) share it: label them 1/2, 2/2."""
    i = 0
    while i < len(rows):
        j = i
        while j + 1 < len(rows) and rows[j + 1]["text"] and rows[j + 1]["span"] == rows[i]["span"] and not rows[i]["special"]:
            j += 1
        if j > i and rows[i]["text"]:
            for k in range(i, j + 1):
                rows[k]["part"] = f"{k - i + 1}/{j - i + 1}"
        i = j + 1


def tokens_note(rows: list[dict], prompt: str | None) -> str:
    """One sentence that says what the table shows: how many characters became how many tokens, and why."""
    real = [r for r in rows if not r["pad"]]
    added = [r for r in real if r["special"] and not r["text"]]
    pads = len(rows) - len(real)
    if prompt is None:
        head = f"{len(real)} token ids given directly (no text, so no spans)"
    else:
        head = f"{len(prompt)} characters -> {len(real)} tokens"
    extras = []
    if added:
        extras.append(f"{len(added)} added by the tokenizer: " + " ".join(r["token"] for r in added))
    unknown = [r for r in real if r.get("unknown")]
    if unknown:
        extras.append(f"{len(unknown)} unknown to the vocabulary: " + " ".join(visible_text(r["text"]) or "?" for r in unknown))
    if pads:
        extras.append(f"{pads} padding")
    sentence = head + (f" ({'; '.join(extras)})" if extras else "") + "."
    split = next((r for r in real if r["part"] and r["partial"]), None)
    if split is not None:
        n = split["part"].split("/")[1]
        whole = bytes.fromhex("".join(r["bytes"].replace(" ", "") for r in real if r["span"] == split["span"]))
        sentence += (f" A token is not always a character: {visible_text(split['text'])} is {len(whole)} UTF-8 bytes "
                     f"({whole.hex(' ')}), cut here into {n} tokens.")
    elif any(r["text"] and len(r["text"].strip()) > 1 for r in real):
        sentence += " A token is often a piece of a word, not a word."
    return sentence
