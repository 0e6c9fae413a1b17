"""CLI glue of the self-consistency checks: `tracer run --check-batch` and `tracer generate --check-chunked N`.

Each prints a verdict line per check after the command's own screen (or puts it in --json) and makes the
command exit 1 when a check fails."""

from __future__ import annotations

from tracer.errors import TracerError


def batch_check(m, prompts, id_rows, inputs, mask_given: bool):
    """--check-batch: the prompts (or --ids rows) padded left and right against each alone."""
    from tracer.diff.batch_check import check_batch

    rows = prompts or id_rows or []
    if len(rows) < 2:
        raise TracerError("--check-batch compares the rows of a padded batch with each prompt alone: give at least two prompts",
                          hint='tracer run --check-batch "a" "bb ccc"')
    if mask_given:
        raise TracerError("--check-batch builds the mask of each batch itself; drop --mask")
    return check_batch(m, text=prompts or None, ids=id_rows, options=inputs)


def batch_check_text(check) -> str:
    """The verdict lines, one per padding side, under a heading naming the rule."""
    from tracer.diff.batch_check import verdict_line

    lines = ["", f"Batch check: each row against its prompt alone, step by step (tracer diff's rule: "
             f"|Δ| <= {check.atol:g} + {check.rtol:g} × |alone|; ids, masks exactly; padding cells left out)"]
    lines += [f"  {verdict_line(v)}" for v in check.sides]
    lines += [f"  note: {n}" for n in check.notes]
    lines.append("  " + ("✓ padding leaks nowhere" if check.passed else "✗ padding leaks: exit status 1"))
    return "\n".join(lines) + "\n"


def chunked_check(m, prompts, id_rows, chunk: int, special_tokens: bool, allow_long: bool):
    """--check-chunked N: the prompt prefilled N tokens at a time against the whole prefill."""
    from tracer.model.chunked import check_chunked

    if chunk < 1:
        raise TracerError(f"--check-chunked must be at least 1 token, not {chunk}")
    return check_chunked(m, prompts or None, id_rows, chunk, special_tokens=special_tokens, allow_long=allow_long)


def chunked_check_text(check) -> str:
    return f"\n  chunked prefill: {check.line()}\n"
