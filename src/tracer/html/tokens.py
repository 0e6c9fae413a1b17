"""The tokens: a strip that reads like the prompt, and a table (position, piece, id, text, UTF-8 bytes)."""

from __future__ import annotations

from tracer.html.common import esc

OPEN_TABLE_UP_TO = 40  # longer prompts keep the table folded under the strip
STRIP_UP_TO = 128  # longer prompts fold the strip too


def _flags(t: dict) -> str:
    flags = [f for f, on in (("special", t.get("special")), ("padding", t.get("pad")),
                             ("part of a character", t.get("partial")), ("unknown to the vocabulary", t.get("unknown")),
                             ("continues a word", t.get("continuation")), (f"segment {t.get('type')}", t.get("type")))
             if on]
    if t.get("part"):
        flags.append(f"piece {t['part']}")
    return ", ".join(flags)


def _bytes(t: dict) -> str:
    """A special token (<s>, [CLS]) is a vocabulary entry, not text: its name has no bytes in the input."""
    if t.get("special") or t.get("pad"):
        return '<span class="dim">– (special token, no text)</span>'
    return esc(t.get("bytes", ""))


def section(report: dict):
    tokens = report.get("tokens")
    if tokens is None:
        return None
    note = f'<p class="note">{esc(report["tokens_note"])}</p>' if report.get("tokens_note") else ""
    if report.get("decoder_tokens"):  # data-stack on the chips: a click works that stack's row
        body = ("<h3>encoder input</h3>" + token_block(tokens, note, report.get("other_rows") or [], "encoder")
                + "<h3>decoder input</h3>" + token_block(report["decoder_tokens"], "", [], "decoder"))
    else:
        body = token_block(tokens, note, report.get("other_rows") or [])
    return "tokens", body


def token_block(tokens: list[dict], note: str, others: list[dict], stack: str = "") -> str:
    where = f' data-stack="{stack}"' if stack else ""
    strip = "".join(
        f'<span class="pill"{where} data-pos="{t["pos"]}" title="position {t["pos"]}, id {t["id"]}">{esc(t["token"])}</span> '
        for t in tokens)
    rows = "".join(
        f'<tr><td class="num">{t["pos"]}</td><td class="piece">{esc(t["token"])}</td><td class="num">{t["id"]}</td>'
        f'<td>{esc(t.get("text", ""))}</td><td class="mono">{_bytes(t)}</td><td class="dim">{esc(_flags(t))}</td></tr>'
        for t in tokens)
    table = ('<table class="tokens"><thead><tr><th class="num">pos</th><th>token</th><th class="num">id</th><th>text</th>'
             f'<th>UTF-8 bytes</th><th></th></tr></thead><tbody>{rows}</tbody></table>')
    opened = " open" if len(tokens) <= OPEN_TABLE_UP_TO else ""
    other = ""
    if others:
        other = '<p class="note">other batch rows: ' + "; ".join(
            f'row {o["row"]}: {o["tokens"]} tokens, {o["pads"]} padding' for o in others) + "</p>"
    if len(tokens) > STRIP_UP_TO:
        strip = f'<details><summary>all {len(tokens)} tokens in a row</summary><div class="body">{strip}</div></details>'
    else:
        strip = f'<p class="strip">{strip}</p>'
    return (f'{note}{strip}{other}'
                      f'<details{opened}><summary>{len(tokens)} tokens, one per row</summary><div class="body">{table}</div></details>')
