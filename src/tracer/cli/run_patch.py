"""`tracer run --patch FILE:STEP[,STEP...]` and `--ablate blocks.L.attn.head.H|blocks.L.mlp`: the glue.

The patched run is the one shown; the unpatched run of the same input is made too, and the next-token
section gains a table of the change (top tokens before and after, each one's probability change).
"""

from __future__ import annotations

from pathlib import Path

from tracer.cli.common import split_list
from tracer.errors import TracerError

PATCH_HELP = ("Replace these steps' values by those in FILE (a trace .safetensors or a .npy/.npz dump of the same "
              "input) and run the rest of the model from there: FILE:STEP[,STEP...] (repeatable). The screen and "
              "--json add the change against the unpatched run.")
ABLATE_HELP = ("Zero one head's output (blocks.L.attn.head.H: its slice of attn.z, before the output projection) "
               "or one MLP's (blocks.L.mlp: mlp.out); repeatable.")


def patch_values(specs: list[str] | None) -> dict:
    """--patch FILE:STEP[,STEP...] -> step name -> array (each named step must be held whole in FILE)."""
    from tracer.diff.files import load_side

    values: dict = {}
    for spec in specs or ():
        file, sep, names = spec.rpartition(":")
        if not sep or not file or not names.strip():
            raise TracerError(f"--patch {spec!r}: write FILE:STEP[,STEP...]", hint="--patch ref.safetensors:blocks.1.resid_post")
        path = Path(file)
        if not path.exists():
            raise TracerError(f"--patch: {file}: no such file")
        trace = load_side(path)
        for name in split_list(names, "--patch"):
            if name not in trace:
                raise TracerError(f"--patch: {file} has no step {name}",
                                  hint=f"it holds {', '.join(trace.names()[:4])} ...")
            if trace.step(name).array is None:
                raise TracerError(f"--patch: {file} holds only statistics of {name}",
                                  hint="save it whole: tracer run --save FILE --keep STEP")
            values[name] = trace[name]
    return values


def hook_options(patch: list[str] | None, ablate: list[str] | None) -> dict:
    """Model.run's patch= and ablate= keywords ({} when neither flag is given)."""
    if not patch and not ablate:
        return {}
    return {"patch": patch_values(patch), "ablate": [a for item in ablate or () for a in split_list(item, "--ablate")]}


def change_of(base, patched, report: dict, top_k: int, vocab) -> dict:
    """The intervention section's data, at the position and row the next-token section shows."""
    from tracer.report.distribution import resolve_position
    from tracer.report.intervention import intervention_report

    d = report.get("distribution") or {}
    row = d.get("batch_row", report.get("batch_row", 0))
    key = "decoder_tokens" if patched.meta.get("decoder_tokens") else "tokens"
    position = d["position"] if "position" in d else resolve_position(None, _token_rows(patched.meta[key][row]))
    return intervention_report(base, patched, row, position, top_k, vocab)


def _token_rows(tokens: list[dict]) -> list[dict]:
    return [{"pos": i, "pad": bool(t.get("pad"))} for i, t in enumerate(tokens)]


def render_change(change: dict):
    """The table printed under the next-token section."""
    from rich import box
    from rich.console import Group
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    lines = [Text("Patched run against the unpatched one: " + "; ".join(change["changes"]), style="bold")]
    first = change.get("first_changed")
    lines.append(Text(f"first step that changed: {first}" if first else "no step changed: the run is bit-identical",
                      style="dim"))
    if "pooled" in change:
        c = change["pooled"]
        cos = "n/a" if c["cosine"] is None else f"{c['cosine']:.6f}"
        lines.append(Text(f"pooled vector of row {change['batch_row']}: max|Δ| {c['max_abs_change']:.3g}, "
                          f"cosine to the unpatched one {cos}", style="dim"))
        return Group(*lines)
    if change.get("missing"):
        lines.append(Text(change["missing"], style="dim"))
        return Group(*lines)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, header_style="bold")
    for col, just in (("token", "left"), ("id", "right"), ("rank before", "right"), ("prob before", "right"),
                      ("rank after", "right"), ("prob after", "right"), ("change", "right")):
        table.add_column(col, justify=just, no_wrap=True)
    for t in change["tokens"]:
        table.add_row(escape(t["token"]), str(t["id"]), str(t["rank_before"]), _prob(t["prob_before"]),
                      str(t["rank_after"]), _prob(t["prob_after"]), _prob(t["change"], "+"))
    kl = change["kl_nats"]
    top = "the top token changed" if change["top1_changed"] else "the top token is the same"
    summary = f"after position {change['position']}: {top}; KL(before || after) = " + ("inf" if kl is None else f"{kl:.4g}") + " nats"
    return Group(*lines, table, Text(summary, style="dim"))


def _prob(p: float, sign: str = "") -> str:
    return f"{p:{sign}.4f}" if abs(p) >= 1e-3 or p == 0 else f"{p:{sign}.1e}"
