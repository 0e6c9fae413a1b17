"""Tokens as a person should see them: spaces and control characters visible, partial UTF-8 as bytes."""

from __future__ import annotations

from tracer.checkpoint.pieces import is_partial, shown_piece, visible_text


def token_rows(meta: dict, row: int, key: str = "tokens", vocab=None) -> list[dict]:
    """The batch row's tokens with what the screen shows; `part` says "1/2" when tokens share one span.

    key: "tokens" (the input) or "decoder_tokens" (an encoder-decoder model's decoder input).
    vocab (the tokenizer's describe_id): padding shows the piece of the id it is ([PAD] for BERT), else <pad>."""
    tokens = meta.get(key) or []
    if not tokens:
        return []
    out = []
    for t in tokens[row]:
        special, pad = bool(t.get("special")), bool(t.get("pad"))
        unknown, cont = bool(t.get("unknown")), bool(t.get("continuation"))
        bytes_hex = t.get("bytes", "")
        shown = t["piece"] if unknown or cont else shown_piece(t["piece"], bytes_hex, special, pad)
        if special and not pad and shown != shown.strip():  # an lstrip special (RoBERTa's " <mask>"): the text has the space
            shown = shown.strip()
        if pad and vocab is not None:
            shown = t["piece"] = vocab(t["id"])["piece"]
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
        head = f"{len(real)} token ids given directly"
    else:
        head = f"{len(prompt)} characters -> {len(real)} tokens"
    extras = ["no text, so no spans"] if prompt is None else []
    if added:  # ids typed by the user went through no tokenizer: they are only special
        said = "special" if prompt is None else "added by the tokenizer"
        extras.append(f"{len(added)} {said}: " + " ".join(r["token"] for r in added))
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
