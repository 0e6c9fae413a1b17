"""The diff page: the verdict, the per-step error profile on a log axis with the first divergence marked, tables."""

from __future__ import annotations

import json

from tracer.html.chart import log_chart
from tracer.html.common import esc, fmt, shape_text
from tracer.html.page import document, generic_section

SHOWN_EXTRAS = ("moved_tokens", "weights")


def cosine_text(c) -> str:
    """A cosine near 1 as 1 − gap (0.9999928 is `1 − 7.2e-06`, not `1`); exactly 1 as 1."""
    if not isinstance(c, (int, float)) or c == 1 or not 0.999 < c < 1:
        return fmt(c)
    return f"1 − {fmt(1 - c, 2)}"


def error_points(steps: list[dict]) -> tuple[list[dict], float]:
    """One point per step: its max |B - A| (None when not compared), and the floor exact matches sit on."""
    values = [s["metrics"].get("max_abs") for s in steps]
    nonzero = [v for v in values if isinstance(v, (int, float)) and v > 0]
    floor = max(1e-30, min(nonzero) / 10) if nonzero else 1e-12
    floor = min(floor, 1e-9)
    points = []
    for x, (s, v) in enumerate(zip(steps, values)):
        m = s["metrics"]
        tip = f"{s['name']}: {s['status']}"
        if v is not None:
            tip += f"; max |B−A| {fmt(v)}" + (" (exact)" if v == 0 else "")
        if m.get("nmse_db") is not None:  # a number, or "-inf" / "inf" / "nan" (JSON's non-finite strings)
            tip += f"; NMSE {m['nmse_db']:.1f} dB" if isinstance(m["nmse_db"], float) else f"; NMSE {m['nmse_db']} dB"
        if m.get("cosine") is not None:
            tip += f"; cosine {cosine_text(m['cosine'])}"
        if s.get("reason"):
            tip += f"; {s['reason']}: {s.get('detail', '')}"
        y = None if v is None or s["status"] not in ("pass", "fail") else float(v)
        points.append({"x": x, "y": y, "status": s["status"], "tip": tip, "name": s["name"]})
    return points, floor


def block_starts(steps: list[dict]) -> list[tuple[int, str]]:
    out, seen = [], set()
    for x, s in enumerate(steps):
        b = s.get("block")
        stack = s["name"].split(".")[0] if s["name"].startswith(("encoder.", "decoder.")) else ""
        key = (stack, b) if b is not None else s["name"].rsplit(".", 1)[0] if stack else s["name"].split(".")[0]
        if key in seen:
            continue
        seen.add(key)
        label = f"{stack + ' ' if stack else ''}block {b}" if b is not None else (key if isinstance(key, str) else "")
        out.append((x, label))
    return out


def profile_section(diff: dict) -> tuple[str, str, str]:
    steps = diff.get("steps") or []
    points, floor = error_points(steps)
    first = diff.get("first_divergence")
    marker = next((x for x, s in enumerate(steps) if first and s["name"] == first["step"]), None)
    chart = log_chart(points, floor=floor, threshold=diff.get("atol"), marker=marker, groups=block_starts(steps),
                      y_label="max |B − A| (log scale)")
    note = ('<p class="note">One point per step in execution order: the largest absolute difference (log scale). '
            'Green passed, red failed, hollow = exactly equal (drawn at the floor); the dashed line is atol; '
            'the red line marks the first divergence. Hover a point for its numbers.</p>')
    return "profile", "error profile", f'{note}<div class="readable"><div class="readout">hover a point</div>{chart}</div>'


def first_section(diff: dict):
    first = diff.get("first_divergence")
    if not first:
        return None
    step = next((s for s in diff.get("steps") or [] if s["name"] == first["step"]), {})
    m = step.get("metrics") or {}
    facts = [f"shape ref {shape_text(step.get('ref_shape'))} {step.get('ref_dtype') or ''}, "
             f"mine {shape_text(step.get('mine_shape'))} {step.get('mine_dtype') or ''}"]
    if "max_abs" in m:
        facts.append(" · ".join(f"{k.replace('_', ' ')} {cosine_text(m[k]) if k == 'cosine' else fmt(m[k])}"
                                for k in ("max_abs", "mean_abs", "max_rel", "cosine", "nmse_db") if m.get(k) is not None))
    if step.get("introduced"):
        facts.append("the error starts here: every input of this step matched exactly")
    body = (f'<p><span class="bad mono">{esc(first["step"])}</span> [{esc(first.get("reason"))}]</p>'
            f'<p>{esc(first.get("detail"))}</p>' + "".join(f'<p class="note">{esc(f)}</p>' for f in facts))
    return "first", "first divergence", body


def blocks_section(diff: dict):
    blocks = diff.get("blocks") or []
    if not blocks:
        return None
    rows = "".join(
        f'<tr><td class="num">{b["block"]}</td><td class="num">{fmt(b.get("input_db"), 3)}</td>'
        f'<td class="num">{fmt(b.get("attn_gain_db"), 3)}</td><td class="num">{fmt(b.get("mlp_gain_db"), 3)}</td>'
        f'<td class="num">{fmt(b.get("output_db"), 3)}</td><td class="mono">{esc(b.get("first_failure") or "")}</td></tr>'
        for b in blocks)
    return "blocks", "error by block", (
        '<p class="note">NMSE of the residual stream in dB (lower is closer); what attention and the MLP add.</p>'
        '<table><thead><tr><th class="num">block</th><th class="num">entering</th><th class="num">attn adds</th>'
        '<th class="num">mlp adds</th><th class="num">leaving</th><th>first failure</th></tr></thead>'
        f'<tbody>{rows}</tbody></table>')


def steps_section(diff: dict):
    rows = []
    for s in diff.get("steps") or []:
        m = s.get("metrics") or {}
        css = "bad" if s["status"] == "fail" else "ok" if s["status"] == "pass" else "dim"
        rows.append(f'<tr><td class="mono">{esc(s["name"])}</td><td class="{css}">{esc(s["status"])}</td>'
                    f'<td class="num">{fmt(m.get("max_abs"))}</td><td class="num">{fmt(m.get("nmse_db"), 3)}</td>'
                    f'<td>{esc(s.get("reason") or "")} {esc(s.get("detail") or "")}</td></tr>')
    table = ('<table><thead><tr><th>step</th><th>status</th><th class="num">max |B−A|</th><th class="num">NMSE dB</th>'
             f'<th>why</th></tr></thead><tbody>{"".join(rows)}</tbody></table>')
    return "steps", "every step", f'<details><summary>{len(rows)} steps</summary><div class="body">{table}</div></details>'


def moved_section(diff: dict):
    moved = diff.get("moved_tokens")
    if not moved:
        return None
    rows = "".join(
        f'<tr><td class="num">{p.get("pos")}</td><td>{esc(t.get("piece", t.get("id")))}</td><td class="num">{fmt(t["ref"])}</td>'
        f'<td class="num">{fmt(t["mine"])}</td><td class="num">{fmt(t["delta"])}</td></tr>'
        for p in moved for t in p.get("moved", []))
    return "moved", "tokens that moved most", (
        '<table><thead><tr><th class="num">pos</th><th>token</th><th class="num">p ref</th><th class="num">p mine</th>'
        f'<th class="num">change</th></tr></thead><tbody>{rows}</tbody></table>')


def weights_section(diff: dict):
    weights = diff.get("weights")
    if not weights:
        return None
    rows = "".join(
        f'<tr><td class="mono">{esc(t["name"])}</td><td>{esc(t.get("status"))}</td><td class="num">{fmt(t.get("rel_change"))}</td>'
        f'<td class="num">{fmt(t.get("max_abs"))}</td></tr>' for t in weights.get("tensors") or [])
    return "weights", "weights", (
        f'<details><summary>{len(weights.get("tensors") or [])} weight tensors compared</summary><div class="body"><table>'
        '<thead><tr><th>tensor</th><th>status</th><th class="num">relative change</th><th class="num">max abs</th></tr>'
        f'</thead><tbody>{rows}</tbody></table></div></details>')


def _inputs_note(inputs: dict | None) -> str:
    """Two runs of different inputs: what each ran, and that only their shared positions were compared."""
    if not inputs:
        return ""
    n = inputs.get("compared_positions", 0)
    return (f'<p class="note">the inputs differ: reference ran {esc(inputs.get("ref"))}, mine ran '
            f'{esc(inputs.get("mine"))}; only the first {n} position(s), where both read the same tokens, are compared</p>')


def diff_document(diff: dict) -> str:
    verdict = diff.get("verdict", "?")
    css = "ok" if verdict == "match" else "bad"  # "inputs differ" is not a match either
    first = diff.get("first_divergence")
    counts = ", ".join(f"{n} {k}" for k, n in (diff.get("counts") or {}).items() if n)
    header = (f'<h1>tracer diff · <span class="{css}">{esc(verdict.upper())}</span></h1>'
              f'<p class="prompt">{esc(diff.get("reference"))} → {esc(diff.get("mine"))}</p>'
              f'<p class="note">atol {esc(fmt(diff.get("atol")))}, rtol {esc(fmt(diff.get("rtol")))} · steps: {esc(counts)}'
              + (f' · first divergence at <span class="mono">{esc(first["step"])}</span>' if first else "") + "</p>"
              + "".join(f'<p class="note">note: {esc(n)}</p>' for n in diff.get("notes") or [])
              + "".join(f'<p class="warn" data-code="{esc(w.get("code"))}">warning ({esc(w.get("side"))}): '
                        f'{esc(w.get("message"))}</p>' for w in diff.get("warnings") or [])
              + _inputs_note(diff.get("inputs")))
    sections = [s for s in (profile_section(diff), first_section(diff), blocks_section(diff), moved_section(diff),
                            weights_section(diff), steps_section(diff)) if s is not None]
    known = {"verdict", "reference", "mine", "atol", "rtol", "first_divergence", "counts", "steps", "blocks", "missing",
             "extra", "notes", "inputs", "warnings", *SHOWN_EXTRAS}
    for key, value in diff.items():
        if key not in known and value:
            sections.append((key, *generic_section(key, json.loads(json.dumps(value, default=str)))))
    return document(f"tracer diff · {verdict}", header, sections)
