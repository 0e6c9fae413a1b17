"""Patching and ablation: a Recorder hook that replaces named steps' values as the engine records them.

The engine computes on from what its step sink hands back (engine.ports.StepSink), so replacing a value in
the sink's hook is all a patch takes: the steps before it are untouched, the steps after it are computed
from the new value.

- patch: step name -> array of the step's shape; the step's value becomes that array (in the compute dtype).
- ablate: `blocks.L.attn.head.H` zeroes head H of `blocks.L.attn.z` (the head's output before the output
  projection mixes the heads), `blocks.L.mlp` zeroes `blocks.L.mlp.out`. Encoder-decoder stacks prefix them
  (`decoder.blocks.0.cross_attn.head.1`).
"""

from __future__ import annotations

import difflib
import re
from typing import Mapping, Sequence

import numpy as np

from tracer.arch.spec import Spec
from tracer.arch.steps_of import pass_steps
from tracer.errors import TracerError

# Steps the engine records but does not compute on (their value is an input or a side record): a patch
# there would change the trace and nothing else, so it is refused.
_NOT_PATCHABLE = re.compile(r"^input\.|(^|\.)attn\.mask$|cross_attn\.mask$|position_bias$|router\.experts$|expert_out$")
_ABLATE = re.compile(r"^(?P<p>(?:encoder\.|decoder\.)?blocks\.(?P<layer>\d+)\.)(?:(?P<part>attn|cross_attn)\.head\.(?P<head>\d+)|mlp)$")


class Intervention:
    """The hook: (name, value) -> value. `targets` are the step names it changes; `seen` those it met."""

    def __init__(self, patch: Mapping[str, np.ndarray], heads: Mapping[str, tuple[int, ...]], zeroed: Sequence[str]):
        self.patch, self.heads, self.zeroed = dict(patch), dict(heads), tuple(zeroed)
        self.targets = frozenset(self.patch) | frozenset(self.heads) | frozenset(self.zeroed)
        self.seen: set[str] = set()

    def __call__(self, name: str, value: np.ndarray) -> np.ndarray:
        if name not in self.targets:
            return value
        self.seen.add(name)
        if name in self.patch:
            value = _replacement(name, self.patch[name], value)
        if name in self.heads:
            value = value.copy()
            value[:, list(self.heads[name])] = 0  # z [batch, heads, q_len, d_head]
        if name in self.zeroed:
            value = np.zeros_like(value)
        return value

    def describe(self) -> list[str]:
        """One line per change, for the screen and --json."""
        return ([f"patched {n}" for n in self.patch] + [f"ablated {n}[:, {h}]" for n, hs in self.heads.items() for h in hs]
                + [f"zeroed {n}" for n in self.zeroed])


def _replacement(name: str, given, value: np.ndarray) -> np.ndarray:
    new = np.asarray(given)
    if new.shape != value.shape:
        raise TracerError(f"patch {name}: the file's value has shape {tuple(new.shape)}, the run's is {tuple(value.shape)}",
                          hint="patch from a trace of the same input (same ids, batch and padding)")
    if new.dtype.kind not in "fiub" or (new.dtype.kind == "b") != (value.dtype.kind == "b"):
        raise TracerError(f"patch {name}: the file's value has dtype {new.dtype}, the run's is {value.dtype}")
    return np.array(new, dtype=value.dtype, copy=True)  # the engine may add into it in place


def intervention(spec: Spec, patch: Mapping[str, np.ndarray] | None = None,
                 ablate: Sequence[str] | str | None = None) -> Intervention | None:
    """Check the names against the steps this model records; None when there is nothing to change."""
    patch = dict(patch or {})
    ablate = [ablate] if isinstance(ablate, str) else list(ablate or ())
    if not patch and not ablate:
        return None
    planned = [s.name for s in pass_steps(spec)]
    known = set(planned)
    for name in patch:
        if name not in known:
            raise unknown_step(name, planned, "patch")
        if _NOT_PATCHABLE.search(name):
            raise TracerError(f"patch {name}: the engine records this step but computes nothing from it",
                              hint="patch a step the pass computes on, e.g. embed.out or blocks.0.resid_post")
    heads: dict[str, tuple[int, ...]] = {}
    zeroed: list[str] = []
    for item in ablate:
        m = _ABLATE.match(item.strip())
        if m is None:
            raise TracerError(f"ablate {item!r}: not blocks.L.attn.head.H or blocks.L.mlp",
                              hint="e.g. --ablate blocks.0.attn.head.1 or --ablate blocks.1.mlp")
        stack = (spec.encoder or spec) if m["p"].startswith("encoder.") else spec
        n_layers = stack.n_layers
        if int(m["layer"]) >= n_layers:
            raise TracerError(f"ablate {item}: the stack has {n_layers} blocks (0..{n_layers - 1})")
        if m["head"] is None:
            target = m["p"] + "mlp.out"
            if target not in known:
                raise unknown_step(target, planned, "ablate")
            zeroed.append(target)
            continue
        target, head = f"{m['p']}{m['part']}.z", int(m["head"])
        if target not in known:
            raise unknown_step(target, planned, "ablate")
        if head >= stack.n_heads:
            raise TracerError(f"ablate {item}: the model has {stack.n_heads} heads (0..{stack.n_heads - 1})")
        heads[target] = tuple(sorted(set(heads.get(target, ()) + (head,))))
    return Intervention(patch, heads, zeroed)


def unknown_step(name: str, planned: list[str], what: str) -> TracerError:
    close = difflib.get_close_matches(name, planned, n=1)
    return TracerError(f"{what} {name}: this model records no such step",
                       hint=f"did you mean {close[0]}?" if close else "tracer steps lists the names a model records")
