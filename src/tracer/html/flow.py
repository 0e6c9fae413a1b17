"""The shape flow: every step in order with its inputs and statistics; each block a collapsible <details>."""

from __future__ import annotations

from tracer.html.common import esc, fmt, shape_text


def named_shape(axes, shape) -> str:
    if not axes or len(axes) != len(shape):
        return shape_text(shape)
    return "[" + ", ".join(f"{a}={n}" for a, n in zip(axes, shape)) + "]"


def _stats(s: dict, r: dict | None = None) -> str:
    """μ σ [min, max]; integer steps (ids, mask, positions) only their range; the masked scores' −inf are
    what the mask puts there (said plainly, not as a warning), NaN and any other Inf are warnings."""
    if not s:
        return ""
    r = r or {}
    if str(r.get("dtype", "")).startswith(("int", "uint", "bool")):
        whole = lambda v: fmt(int(v)) if isinstance(v, float) and v.is_integer() else fmt(v, 3)  # noqa: E731
        return esc(f"[{whole(s.get('min'))}, {whole(s.get('max'))}]")
    text = f"μ {fmt(s.get('mean'), 3)} σ {fmt(s.get('std'), 3)} [{fmt(s.get('min'), 3)}, {fmt(s.get('max'), 3)}]"
    masked = r.get("name", "").endswith("masked_scores")
    bad = [f"{s['nan']:g} NaN"] if s.get("nan") else []
    note = ""
    if s.get("inf") and masked:
        note = f' <span class="dim">{s["inf"]:g} × −inf: the blocked keys, as the mask sets them</span>'
    elif s.get("inf"):
        bad.append(f"{s['inf']:g} ±inf")
    return esc(text) + note + (f' <span class="warn">{esc(", ".join(bad))}</span>' if bad else "")


def _inputs(r: dict) -> str:
    parts = []
    for i in r.get("inputs") or []:
        rep = f"×{r['kv_repeat']}" if r.get("kv_repeat") and i["name"].rsplit(".", 1)[-1] in ("k", "k_rot", "v") else ""
        parts.append(f'{esc(i["name"])} <span class="dim">{esc(shape_text(i["shape"]))}{esc(rep)}</span>')
    return "<br>".join(parts)


def local_name(r: dict) -> str:
    """Inside a block the `blocks.i.` prefix (and the stack's) is the group label, so rows show the rest."""
    marker = f"blocks.{r.get('block')}."
    return r["name"].split(marker, 1)[1] if marker in r["name"] else r["name"]


def _row(r: dict, compute_dtype, local: bool) -> str:
    name = local_name(r) if local and r.get("block") is not None else r["name"]
    kept = "" if r.get("kept", True) else ' <span class="pill">stats only</span>'
    dtype = "" if r.get("dtype") == compute_dtype else f' <span class="dim">{esc(r.get("dtype"))}</span>'
    return (f'<tr><td class="mono" title="{esc(r["name"])}">{esc(name)}{kept}</td><td>{esc(r.get("op", ""))}</td>'
            f'<td class="mono">{_inputs(r)}</td><td class="mono">{esc(named_shape(r.get("axes"), r.get("shape")))}{dtype}</td>'
            f'<td class="mono">{_stats(r.get("stats") or {}, r)}</td></tr>')


HEAD = "<tr><th>step</th><th>op</th><th>from</th><th>shape</th><th>statistics</th></tr>"


def _table(rows: list[dict], compute_dtype, local: bool) -> str:
    return f'<table class="flow"><thead>{HEAD}</thead><tbody>{"".join(_row(r, compute_dtype, local) for r in rows)}</tbody></table>'


def _block_summary(key: tuple, rows: list[dict]) -> str:
    stack, block = key
    last = rows[-1]
    bad = [r["name"] for r in rows if (r.get("stats") or {}).get("nan")
           or ((r.get("stats") or {}).get("inf") and not r["name"].endswith("masked_scores"))]
    warn = f' <span class="warn">non-finite values in {esc(", ".join(bad))}</span>' if bad else ""
    return (f"{esc(stack + ' ' if stack else '')}block {block} · {len(rows)} steps · leaves as {esc(local_name(last))} "
            f'<span class="mono dim">{esc(named_shape(last.get("axes"), last.get("shape")))}</span>{warn}')


def section(report: dict):
    records = report.get("steps")
    if records is None:
        return None
    flow = report.get("flow") or {}
    dtype = report.get("dtype")
    if flow.get("mode") == "filtered":
        note = f'only steps matching {", ".join(flow.get("globs", []))}'
        return "shape flow", f'<p class="note">{esc(note)}</p>{_table(records, dtype, False)}'
    full = set(flow.get("full_blocks") or [])
    parts, group, current = [], [], None
    outer: list[dict] = []

    def flush_outer():
        if outer:
            parts.append(_table(list(outer), dtype, False))
            outer.clear()

    def flush_block():
        if group:
            opened = " open" if current[1] in full else ""
            parts.append(f'<details class="block"{opened}><summary>{_block_summary(current, group)}</summary>'
                         f'<div class="body">{_table(group, dtype, True)}</div></details>')
            group.clear()

    for r in records:
        b = r.get("block")
        if b is None:
            flush_block()
            outer.append(r)
            continue
        b = (r.get("stack") or "", b)
        if b != current:
            flush_block()
            flush_outer()
            current = b
        group.append(r)
    flush_block()
    flush_outer()
    note = ('<p class="note">Each row is one recorded step, in order; shapes name their axes; statistics are μ mean, '
            'σ std, [min, max]. Blocks fold: click one to open it. '
            '<button id="toggle-all" type="button">open all blocks</button></p>')
    from tracer.html.explain import explained

    return "shape flow", explained(report) + note + "".join(parts)
