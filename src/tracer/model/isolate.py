"""The error each block of a port adds, measured alone: the reference reruns block L from the port's own input.

A port's accumulated error at `blocks.L.resid_post` mixes what block L did wrong with what the blocks before
it passed on. Patching the residual stream entering block L (`embed.out` for block 0, else
`blocks.{L-1}.resid_post`) with the port's value and running the reference from there gives the reference's
answer to the port's own input; the port's `blocks.L.resid_post` differs from it only by block L's error.

An encoder-decoder has two stacks, each isolated the same way under its prefix (`encoder.blocks.L`,
`decoder.blocks.L`); a decoder block also reads the encoder's output through cross-attention, so its rerun
is given the port's encoder output too (`encoder.final_norm.out`, or the last encoder block's resid_post
where the encoder has no final norm): a faulty encoder is charged to its own blocks, not to the decoder's.
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


def block_steps(n_layers: int, prefix: str = "") -> list[tuple[str, str | None, str]]:
    """(block, the step entering it or None for the embedding, the step leaving it), in order, for one stack."""
    out = [(f"{prefix}embed", None, f"{prefix}embed.out")]
    for i in range(n_layers):
        entering = f"{prefix}embed.out" if i == 0 else f"{prefix}blocks.{i - 1}.resid_post"
        out.append((f"{prefix}blocks.{i}", entering, f"{prefix}blocks.{i}.resid_post"))
    return out


def plan_of(spec) -> tuple[list[tuple[str, str | None, str]], str | None]:
    """Every block of every stack in order, and the step a decoder's cross-attention reads (None: one stack)."""
    if spec.route != "encoder-decoder":
        return block_steps(spec.n_layers), None
    enc = spec.encoder
    memory = "encoder.final_norm.out" if enc.final_norm else f"encoder.blocks.{enc.n_layers - 1}.resid_post"
    return block_steps(enc.n_layers, "encoder.") + block_steps(spec.n_layers, "decoder."), memory


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
    """`port`: a Trace under tracer's names holding embed.out and every blocks.L.resid_post whole (of each stack,
    and the encoder's output, for an encoder-decoder);
    run_inputs: Model.run's input keywords (ids=..., pad_side=...), the port's input."""
    plan, memory = plan_of(model.spec)
    needed = [leaving for _, _, leaving in plan] + ([memory] if memory and memory not in [p[2] for p in plan] else [])
    missing = [n for n in needed if n not in port or port.step(n).array is None]
    if missing:
        keep = "--keep '*embed.out' --keep '*blocks.*.resid_post' --keep " + memory if memory else \
            "--keep embed.out --keep 'blocks.*.resid_post'"
        raise TracerError(f"--isolate needs the port's residual stream at every block; it lacks {missing[0]}"
                          + (f" and {len(missing) - 1} more" if len(missing) > 1 else ""),
                          hint=f"record them whole: tracer run {keep}")
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
            patch = {entering: port[entering]}
            if memory and block.startswith("decoder."):  # cross-attention reads the port's encoder output
                patch[memory] = port[memory]
            expected = model.run(keep=(leaving,), patch=patch, **run_inputs)[leaving]
        added = _max_abs(mine, expected)
        scale = float(np.abs(ref.astype(np.float64)).max()) if ref.size else 0.0
        rows.append(BlockError(block, leaving, added, accumulated, scale, _within(mine, expected, atol, rtol)))
    out_of_tolerance = [r for r in rows if not r.within]
    responsible = max(out_of_tolerance, key=lambda r: r.added).block if out_of_tolerance else None
    return Isolation(rows, responsible, atol, rtol)
