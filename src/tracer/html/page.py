"""The page around the sections: head, navigation, one <section> per report section, the inline style and script."""

from __future__ import annotations

import json
from typing import Callable

from tracer import __version__
from tracer.html.common import esc
from tracer.html.live import data_holder
from tracer.html.live_js import LIVE_SCRIPT
from tracer.html.style import CSS, SCRIPT

SectionBuilder = Callable[[dict], "tuple[str, str] | None"]  # report -> (title, body html) or None when absent


def document(title: str, header: str, sections: list[tuple[str, str, str]], live: dict | None = None) -> str:
    """sections: (name, title, body html), in page order; numbered as they appear. `live`: the numbers the
    live views read (tracer.html.live), with their script."""
    nav = "".join(f'<a href="#sec-{esc(name)}">{esc(t)}</a>' for name, t, _ in sections)
    body = "".join(
        f'<section id="sec-{esc(name)}" data-section="{esc(name)}"><h2>{n} · {esc(t)}</h2>{html}</section>'
        for n, (name, t, html) in enumerate(sections, start=1))
    return ("<!DOCTYPE html>\n"
            f'<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
            f"<header>{header}<nav>{nav}</nav></header><main>{body}</main>"
            f"<footer>made by tracer {esc(__version__)} · one self-contained file, no network</footer>"
            + (data_holder(live) if live else "") + f"<script>{LIVE_SCRIPT}</script>"
            f"<script>{SCRIPT}</script></body></html>\n")  # the live views first: one layout, measured last


def generic_section(name: str, data) -> tuple[str, str]:
    """A section this page has no view for yet (a newer report): its data, folded, so nothing is lost."""
    text = json.dumps(data, ensure_ascii=False, indent=1, default=str)
    if len(text) > 200_000:
        text = text[:200_000] + "\n…"
    return name.replace("_", " "), (f'<p class="note">no page view for this section yet; its data:</p>'
                                    f'<details><summary>{esc(name)}</summary><pre class="json">{esc(text)}</pre></details>')


def build_sections(report: dict, builders: dict[str, SectionBuilder]) -> list[tuple[str, str, str]]:
    """Each section the report names, in its order; missing data or an unknown name never breaks the page."""
    out = []
    for name in report.get("sections") or list(builders):
        builder = builders.get(name)
        if builder is None:
            if name in report:
                out.append((name, *generic_section(name, report[name])))
            continue
        built = builder(report)
        if built is not None:
            out.append((name, *built))
    return out
