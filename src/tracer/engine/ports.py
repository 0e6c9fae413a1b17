"""The engine's two ports: the weights it reads and the step sink it hands every intermediate tensor to.

Both are structural (typing.Protocol): checkpoint.weights.LazyWeights and trace.recorder.Recorder are the
implementations the model uses; ArrayWeights holds arrays already in memory (tests, hand-built models).
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import numpy as np


@runtime_checkable
class Weights(Protocol):
    """Canonical weight name (`blocks.0.attn.W_Q`) -> array in the compute dtype."""

    @property
    def dtype(self) -> np.dtype: ...  # the compute dtype, known without reading a tensor

    def __getitem__(self, name: str) -> np.ndarray: ...

    def __contains__(self, name: object) -> bool: ...  # asks whether an optional tensor (a bias) exists

    def get(self, name: str, default=None) -> np.ndarray | None: ...  # an optional tensor (a bias), or default

    def rows(self, name: str, index: np.ndarray) -> np.ndarray: ...  # W[name][index], reading only those rows


@runtime_checkable
class BlockSink(Protocol):
    """One step's statistics, handed over a block of rows at a time."""

    def add(self, block: np.ndarray) -> np.ndarray: ...

    def add_shared(self, block: np.ndarray, other: "BlockSink") -> np.ndarray: ...  # `block` is other's too: one scan

    def add_constant(self, value: float, count: int) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class StepSink(Protocol):
    """Where the engine records each step: `sink(name, array, axes, op)` returns the array the engine computes
    on from: the one it was given, or what a hook put in its place (tracer.model.patch)."""

    def __call__(self, name: str, array: np.ndarray, axes: Sequence[str], op: str) -> np.ndarray: ...

    def keeps(self, name: str) -> bool: ...  # False: the engine may compute the step in blocks (see `blocks`)

    def blocks(self, name: str, axes: Sequence[str], op: str, shape: Sequence[int], dtype) -> BlockSink: ...


class ArrayWeights(dict):
    """Weights already held as arrays of one dtype: the Weights port over a plain dict."""

    @property
    def dtype(self) -> np.dtype:
        return self["embed.W_E"].dtype

    def rows(self, name: str, index: np.ndarray) -> np.ndarray:
        return self[name][index]
