"""The engine's only side channel: it hands every intermediate tensor to a Recorder."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from tracer.steps import matches
from tracer.trace.stats import tensor_stats
from tracer.trace.trace import Step


class Recorder:
    """Keeps statistics for every step and the whole array for steps matching `keep`.

    keep: glob patterns over step names (`*` keeps everything, `()` keeps
    statistics only). hf_module: maps a step name to the transformers module it
    corresponds to, for the trace's metadata. clock (e.g. time.perf_counter): when
    given, each Step's `seconds` is the time the engine spent since the previous
    step was recorded (the recorder's own work excluded; the first step gets 0).
    """

    def __init__(self, keep: Sequence[str] = ("*",), hf_module: Callable[[str], str | None] | None = None,
                 clock: Callable[[], float] | None = None):
        self.keep = tuple(keep)
        self.hf_module = hf_module or (lambda name: None)
        self.steps: list[Step] = []
        self.clock = clock
        self._since: float | None = None  # when the previous call returned

    def __call__(self, name: str, array: np.ndarray, axes: Sequence[str], op: str) -> np.ndarray:
        arrived = self.clock() if self.clock is not None else None
        if len(axes) != array.ndim:
            raise ValueError(f"step {name}: {len(axes)} axis names for a {array.ndim}-d array")
        kept = array if matches(name, self.keep) else None
        self.steps.append(
            Step(
                name=name,
                axes=tuple(axes),
                op=op,
                hf_module=self.hf_module(name),
                shape=tuple(array.shape),
                dtype=str(array.dtype),
                stats=tensor_stats(array),
                array=kept,
            )
        )
        if arrived is not None:
            self.steps[-1].seconds = arrived - self._since if self._since is not None else 0.0
            self._since = self.clock()
        return array


class NullRecorder(Recorder):
    """Records nothing: the plain forward pass, for benchmarks and the logit lens."""

    def __init__(self):
        super().__init__(keep=())

    def __call__(self, name, array, axes, op):
        return array
