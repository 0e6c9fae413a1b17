"""Find the first step where two runs disagree.

    from tracer.diff import diff_traces
    report = diff_traces(Trace.load("ref.safetensors"), Trace.load("port.safetensors"), names="hf")
    report.first_divergence          # None, or the first failing StepDiff (name, reason, detail)

Layers: `metrics` (pure measures), `layouts` and `names` (bringing a foreign
dump to tracer's names and axes), `compare` (verdict per step and the first
divergence), `profile` (error introduced vs inherited), `distribution`
(KL, top-1, top-k), `weights` (two checkpoint folders), `report` (JSON).
"""

from __future__ import annotations

from tracer.diff.compare import DEFAULT_ATOL, DEFAULT_RTOL, REASONS, DiffReport, StepDiff, compare
from tracer.diff.names import Translation, translate
from tracer.diff.report import report_json
from tracer.trace import Trace

__all__ = [
    "DEFAULT_ATOL", "DEFAULT_RTOL", "REASONS", "DiffReport", "StepDiff", "Translation",
    "aligned_pair", "compare", "diff_traces", "is_engine_trace", "report_json", "translate",
]


def is_foreign(trace: Trace) -> bool:
    """A dump written without tracer's metadata (names and axes are the writer's)."""
    return trace.meta.get("format") == "foreign"


def is_engine_trace(trace: Trace) -> bool:
    """Written by tracer's own engine, so its step list is complete for its architecture."""
    return "tracer_version" in trace.meta and "source" not in trace.meta and not is_foreign(trace)


def diff_traces(
    ref: Trace,
    mine: Trace,
    names: str = "identity",
    atol: float = DEFAULT_ATOL,
    rtol: float = DEFAULT_RTOL,
    steps: tuple[str, ...] | None = None,
    top_k: int = 5,
    ref_label: str = "ref",
    mine_label: str = "mine",
    missing_fails: bool | None = None,
) -> DiffReport:
    """Translate the foreign side into tracer's names, then compare step by step.

    The name map applies to `mine`, with `ref` supplying target shapes and
    transformers module names; when only `ref` is a foreign dump, it applies
    to `ref` instead. missing_fails (default: both are complete engine traces)
    makes a step present on one side only a divergence rather than a note.
    """
    if missing_fails is None:
        missing_fails = is_engine_trace(ref) and is_engine_trace(mine)
    ref, mine, translation, on_ref = aligned_pair(ref, mine, names)
    side = ref_label if on_ref else mine_label
    report = compare(ref, mine, atol, rtol, steps, missing_fails, top_k, ref_label, mine_label)
    if translation.renamed or translation.ignored or translation.map_name != "identity":
        report.extras["names"] = {
            "map": translation.map_name,
            "applied_to": side,
            "renamed": [{"from": a, "to": b, "layout": note} for a, b, note in translation.renamed],
            "ignored": [{"name": a, "why": why} for a, why in translation.ignored],
            "unmatched": translation.unmatched,
        }
    return report


def aligned_pair(ref: Trace, mine: Trace, names: str = "identity") -> tuple[Trace, Trace, Translation, bool]:
    """Both traces under tracer's names: the name map applies to `mine` (the reference supplies shapes and
    module names), or to `ref` when only the reference is a foreign dump. The flag says it went to `ref`."""
    if is_foreign(ref) and not is_foreign(mine):
        translation = translate(ref, names, mine)
        return translation.trace, mine, translation, True
    translation = translate(mine, names, ref)
    return ref, translation.trace, translation, False
