"""The error each block of a port adds, measured alone: the reference reruns block L from the port's own input.

A port's accumulated error at `blocks.L.resid_post` mixes what block L did wrong with what the blocks before
it passed on. Patching the residual stream entering block L (`embed.out` for block 0, else
`blocks.{L-1}.resid_post`) with the port's value and running the reference from there gives the reference's
answer to the port's own input; the port's `blocks.L.resid_post` differs from it only by block L's error.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from tracer.errors import TracerError


@dataclass(frozen=True)
class BlockError:
    block: str  # "embed" or "blocks.L"
    step: str  # the step compared: embed.out or blocks.L.resid_post
    added: float  # max|port - reference run from the port's input to this block|
    accumulated: float  # max|port - reference run from the start|
    scale: float  # max|reference| at the step
    within: bool  # every cell: |port - reference from the port's input| <= atol + rtol * |reference from the port's input|


@dataclass(frozen=True)
class Isolation:
    blocks: list[BlockError]
    responsible: str | None  # the block adding the largest error, when some block is out of tolerance
    atol: float
    rtol: float

    def to_dict(self) -> dict:
        return {"blocks": [asdict(b) for b in self.blocks], "responsible": self.responsible,
                "atol": self.atol, "rtol": self.rtol}


def block_steps(n_layers: int) -> list[tuple[str, str | None, str]]:
    """(block, the step entering it or None for the embedding, the step leaving it), in order."""
    out = [("embed", None, "embed.out")]
    for i in range(n_layers):
        out.append((f"blocks.{i}", "embed.out" if i == 0 else f"blocks.{i - 1}.resid_post", f"blocks.{i}.resid_post"))
    return out


def _max_abs(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max()) if a.size else 0.0


def _within(mine: np.ndarray, expected: np.ndarray, atol: float, rtol: float) -> bool:
    """tracer diff's cell rule: |mine - expected| <= atol + rtol * |expected| (NaN only where expected has it)."""
    m, e = mine.astype(np.float64), expected.astype(np.float64)
    same_nan = np.isnan(m) == np.isnan(e)
    with np.errstate(invalid="ignore"):
        close = (np.abs(m - e) <= atol + rtol * np.abs(e)) | (np.isnan(m) & np.isnan(e)) | (m == e)
    return bool(same_nan.all() and close.all())


def isolate(model, port, run_inputs: dict, atol: float, rtol: float) -> Isolation:
    """`port`: a Trace under tracer's names holding embed.out and every blocks.L.resid_post whole;
    run_inputs: Model.run's input keywords (ids=..., pad_side=...), the port's input."""
    if model.route == "encoder-decoder":
        raise TracerError("--isolate reruns the blocks of one stack; encoder-decoder models have two",
                          hint="diff the two traces step by step instead (tracer diff REF PORT)")
    plan = block_steps(model.spec.n_layers)
    needed = [leaving for _, _, leaving in plan]
    missing = [n for n in needed if n not in port or port.step(n).array is None]
    if missing:
        raise TracerError(f"--isolate needs the port's residual stream at every block; it lacks {missing[0]}"
                          + (f" and {len(missing) - 1} more" if len(missing) > 1 else ""),
                          hint="record embed.out and blocks.{i}.resid_post whole (tracer run --keep 'blocks.*.resid_post' --keep embed.out)")
    clean = model.run(keep=tuple(needed), **run_inputs)
    rows = []
    for block, entering, leaving in plan:
        ref, mine = clean[leaving], port[leaving]
        if ref.shape != mine.shape:
            raise TracerError(f"--isolate: the port's {leaving} has shape {tuple(mine.shape)}, the reference's {tuple(ref.shape)}",
                              hint="the port must have run the same input")
        accumulated = _max_abs(mine, ref)
        expected = ref  # the embedding reads only the ids
        if entering is not None:
            expected = model.run(keep=(leaving,), patch={entering: port[entering]}, **run_inputs)[leaving]
        added = _max_abs(mine, expected)
        scale = float(np.abs(ref.astype(np.float64)).max()) if ref.size else 0.0
        rows.append(BlockError(block, leaving, added, accumulated, scale, _within(mine, expected, atol, rtol)))
    out_of_tolerance = [r for r in rows if not r.within]
    responsible = max(out_of_tolerance, key=lambda r: r.added).block if out_of_tolerance else None
    return Isolation(rows, responsible, atol, rtol)
