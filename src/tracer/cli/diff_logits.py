"""`tracer diff REF data/llamacpp-MODEL.bin`: llama.cpp's model-conversion logits against a reference.

REF is a trace, a model (folder or GGUF, run on the file's token ids or TEXT), or the other side's
`pytorch-MODEL.bin`. Tokens are compared first (as compare-logits.py does), then the last position's logits:
llama.cpp's NMSE with its band (the verdict and the exit status: 0 below 1e-2), max |Δ|, the top-1 pick and
the top-k overlap.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import typer

from tracer.errors import TracerError


def diff_logits(ref: Path, path: Path, text: str | None, id_rows, dtype: str, top_k: int, as_json: bool,
                tokenizer: str | None = None) -> None:
    from tracer.capture.conversion_files import is_logits_file, read_logits_file
    from tracer.cli.common import make_console
    from tracer.diff.verdicts import NMSE_PASS, llamacpp_nmse, nmse_band

    theirs = read_logits_file(path)
    ref_ids, ref_logits = _reference(ref, theirs, text, id_rows, dtype, tokenizer, is_logits_file(ref))
    console = make_console()
    if ref_ids != theirs.tokens:
        from tracer.cli.diff_llamacpp import ids_apart

        ids_apart(console, str(ref), ref_ids, f"{path.name} holds", theirs.tokens, as_json,
                  "run the reference on the file's ids: leave out TEXT")
    if ref_logits.shape != theirs.logits.shape:
        raise TracerError(f"{path}: {theirs.logits.size} logits, the reference has {ref_logits.size}",
                          hint="the two sides are different models (or one holds embeddings)")
    a, b = ref_logits.astype(np.float64), theirs.logits.astype(np.float64)
    nmse = llamacpp_nmse(a, b)
    k = min(top_k, a.size)
    top_a, top_b = np.argsort(-a, kind="stable")[:k], np.argsort(-b, kind="stable")[:k]
    out = {"verdict": "pass" if nmse < NMSE_PASS else "fail", "band": nmse_band(nmse), "nmse": nmse,
           "max_abs": float(np.abs(a - b).max()), "top1_ref": int(top_a[0]), "top1_mine": int(top_b[0]),
           "top_k": k, "top_k_overlap": len(set(top_a.tolist()) & set(top_b.tolist())) / k,
           "n_tokens": len(ref_ids), "vocab": int(a.size), "file": str(path)}
    if as_json:
        console.file.write(json.dumps(out) + "\n")
    else:
        mark, style = ("✓", "bold green") if out["verdict"] == "pass" else ("✗", "bold red")
        db = f", {10 * np.log10(nmse):.1f} dB" if nmse > 0 else ""
        console.print(f"{mark} {out['band']}: NMSE {nmse:.3g}{db} on the last position's logits "
                      f"(llama.cpp passes below {NMSE_PASS:g})", style=style, markup=False)
        console.print(f"  {ref}  →  {path}   {len(ref_ids)} tokens, the same on both sides; vocab {a.size:,}",
                      style="dim", markup=False)
        agree = "agrees" if out["top1_ref"] == out["top1_mine"] else "differs"
        console.print(f"  max |Δ| {out['max_abs']:.4g} · top-1 {agree} ({out['top1_ref']} / {out['top1_mine']}) · "
                      f"top-{k} overlap {out['top_k_overlap']:.2f}", markup=False)
    raise typer.Exit(0 if out["verdict"] == "pass" else 1)


def _reference(ref: Path, theirs, text, id_rows, dtype, tokenizer, ref_is_file: bool):
    """(token ids, last position's float logits) of REF."""
    from tracer.capture.conversion_files import prompt_logits, read_logits_file
    from tracer.cli.diff_llamacpp import reference_trace

    if ref_is_file:
        if text is not None or id_rows:
            raise TracerError("TEXT and --ids are for a model; both sides are model-conversion files")
        other = read_logits_file(ref)
        return other.tokens, other.logits
    trace, _ = reference_trace(ref, text, id_rows, theirs.tokens, dtype, tokenizer)
    try:
        return prompt_logits(trace)
    except TracerError as exc:
        raise TracerError(f"{ref}: {exc.message}", hint=exc.hint) from None
