"""The HTML report: one self-contained page (inline CSS, SVG and a few lines of script; no network).

A page is a list of sections, each built by a small function from the report
dict that `tracer.report.build_report` makes (plus `collect.add_page_data` for
what only a page has room for). A section the page has no view for yet is
shown as its data, folded, so a newer report never breaks the page.
"""

from __future__ import annotations

from tracer.html import (attention, card, cost, distribution, flow, generation, lens, mask, pooled, routing, tokens,
                         values)
from tracer.html.live import live_data
from tracer.html.page import build_sections, document

RUN_SECTIONS = {
    "model": card.section,
    "tokens": tokens.section,
    "steps": flow.section,
    "values": values.section,
    "mask": mask.section,
    "attention": attention.section,
    "routing": routing.section,
    "top_k": distribution.section,
    "pooled": pooled.section,
    "lens": lens.section,
    "cost": cost.section,
    "generation": generation.section,
}

__all__ = ["RUN_SECTIONS", "run_page", "diff_page"]


def run_page(report: dict) -> str:
    """The page for one run (tracer run --export-html, tracer report)."""
    model = (report.get("model") or {}).get("name") or "model"
    prompt = report.get("prompt")
    title = f"tracer · {model}" + (f" · {prompt[:60]}" if prompt else "")
    return document(title, card.header(report), build_sections(report, RUN_SECTIONS), live_data(report))


def diff_page(diff: dict) -> str:
    """The page for a diff (tracer diff --export-html), from the diff's JSON form."""
    from tracer.html.diff import diff_document

    return diff_document(diff)
