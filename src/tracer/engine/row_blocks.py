"""Steps computed a block of rows at a time, so that a statistics-only run never holds them whole.

The attention scores [batch, heads, q, kv] grow with the square of the input and the logits
[batch, pos, vocab] with the vocabulary; when the recorder keeps none of those steps whole, the engine
computes them a block of query rows (positions) at a time and the recorder merges each block's
statistics exactly (trace.stats.RunningStats). A sink that keeps a step whole gets it whole.
"""

from __future__ import annotations

from tracer.engine.ports import StepSink

BLOCK_BYTES = 8 * 2**20  # one block of scores: small enough to stay in cache (measured best of 1-32 MiB)
HEAD_BLOCK_BYTES = 128 * 2**20  # one block of logits: each block packs all of W_U again (GPT-2: 154 MB), so few
# large blocks beat many small ones: GPT-2 small at 512 tokens 0.65-0.68 s in one block against 0.70-0.77 s in
# four of 32 MiB (nine rounds alternating in one process); a block holds 667 rows of a 50,257 vocabulary


def block_rows(rec: StepSink, names: tuple[str, ...], n_rows: int, row_bytes: int,
               target: int | None = None) -> int | None:
    """Rows per block of about `target` bytes (BLOCK_BYTES), or None to compute whole (a step in `names` is
    kept whole, or the whole is one block)."""
    if any(rec.keeps(n) for n in names):
        return None
    rows = max(1, (BLOCK_BYTES if target is None else target) // max(1, row_bytes))
    return rows if rows < n_rows else None
