"""The engine's only side channel: it hands every intermediate tensor to a Recorder."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from tracer.steps import matches
from tracer.trace.stats import RunningStats, tensor_stats
from tracer.trace.trace import Step, derivation, derive_from


class Recorder:
    """Keeps statistics for every step and the whole array for steps matching `keep`.

    keep: glob patterns over step names (`*` keeps everything, `()` keeps
    statistics only). hf_module: maps a step name to the transformers module it
    corresponds to, for the trace's metadata. clock (e.g. time.perf_counter): when
    given, each Step's `seconds` is the time the engine spent since the previous
    step was recorded (the recorder's own work excluded; the first step gets 0). hook: (name, array) -> array,
    called on every step before it is recorded; what it returns is recorded and handed back to the engine,
    which computes on from it (patching and ablation, see tracer.model.patch). None costs nothing.
    """

    def __init__(self, keep: Sequence[str] = ("*",), hf_module: Callable[[str], str | None] | None = None,
                 clock: Callable[[], float] | None = None,
                 hook: Callable[[str, np.ndarray], np.ndarray] | None = None):
        self.hook = hook
        self.keep = tuple(keep)
        self.hf_module = hf_module or (lambda name: None)
        self.steps: list[Step] = []
        self.clock = clock
        self._since: float | None = None  # when the previous call returned
        self._by_name: dict[str, Step] = {}
        self.blocked: list[str] = []  # steps computed a block at a time (see `blocks`)

    def _derive(self, step: Step) -> None:
        """A kept step that is an exact function of kept steps (masked scores: where(mask, scores, -inf)) is
        not held: its array is recomputed when read, and the trace file stores the recipe."""
        found = derivation(step.name, step.op)
        if found is None:
            return
        inputs = [self._by_name.get(n) for n in found[1]]
        if all(s is not None and s.kept for s in inputs):
            step.array, step.derived, step.source = None, found[0], derive_from(found[0], inputs)

    def __call__(self, name: str, array: np.ndarray, axes: Sequence[str], op: str) -> np.ndarray:
        arrived = self.clock() if self.clock is not None else None
        given = array
        if self.hook is not None:
            array = self.hook(name, array)
        if len(axes) != array.ndim:
            raise ValueError(f"step {name}: {len(axes)} axis names for a {array.ndim}-d array")
        kept = array if matches(name, self.keep) else None
        step = Step(name=name, axes=tuple(axes), op=op, hf_module=self.hf_module(name), shape=tuple(array.shape),
                    dtype=str(array.dtype), stats=tensor_stats(array), array=kept)
        if kept is not None and array is given:  # a replaced value is not what its recipe would rebuild
            self._derive(step)
        self.steps.append(step)
        self._by_name[name] = step
        if arrived is not None:
            self.steps[-1].seconds = arrived - self._since if self._since is not None else 0.0
            self._since = self.clock()
        return array

    def keeps(self, name: str) -> bool:
        """Whether the step's whole tensor is kept (else the engine may compute it in blocks, see `blocks`)."""
        return matches(name, self.keep) or (self.hook is not None and name in getattr(self.hook, "targets", ()))

    def blocks(self, name: str, axes: Sequence[str], op: str, shape: Sequence[int], dtype) -> "BlockStats":
        """Record a step the engine computes a block at a time and never holds whole (statistics only).

        The step takes its place in the trace now; `add` each block, then `close`."""
        if len(axes) != len(shape):
            raise ValueError(f"step {name}: {len(axes)} axis names for a {len(shape)}-d array")
        step = Step(name=name, axes=tuple(axes), op=op, hf_module=self.hf_module(name), shape=tuple(shape),
                    dtype=str(np.dtype(dtype)), stats={})
        self.steps.append(step)
        self._by_name[name] = step
        self.blocked.append(name)
        if self.clock is not None:
            step.seconds = 0.0  # the blocks' time is counted in the step recorded after them
        return BlockStats(step)


class BlockStats:
    """A step's statistics gathered block by block (exact: see RunningStats)."""

    def __init__(self, step: Step | None):
        self.step = step
        self.running = RunningStats()

    def add(self, block: np.ndarray) -> np.ndarray:
        if self.step is not None:
            self.running.add(block)
        return block

    def add_shared(self, block: np.ndarray, other: "BlockStats") -> np.ndarray:
        """`block` belongs to this step and, the same values, to `other` (the keys every query row attends: the
        scores' and the masked scores'): scanned once, merged into both."""
        if self.step is not None or other.step is not None:
            s = tensor_stats(block)
            for sink in (self, other):
                if sink.step is not None:
                    sink.running.merge(s, block.size)
        return block

    def add_constant(self, value: float, count: int) -> None:
        if self.step is not None:
            self.running.add_constant(value, count)

    def close(self) -> None:
        if self.step is not None:
            self.step.stats = self.running.result()


class NullRecorder(Recorder):
    """Records nothing: the plain forward pass, for benchmarks and the logit lens."""

    def __init__(self):
        super().__init__(keep=())

    def __call__(self, name, array, axes, op):
        return array

    def blocks(self, name, axes, op, shape, dtype) -> BlockStats:
        return BlockStats(None)
