"""Routes as stacks of per-step formulas: decoder and encoder (one stack), encoder-decoder (two, then the head).

A Stack names its steps (which of its formulas this spec has, in the engine's order), its step-name
prefix, which Spec it counts (an encoder-decoder's encoder has its own) and which pass it sees (the
encoder runs over the input once; a decoding step finds its output cached). Adding a route, or MoE
blocks (moe.py), is adding stacks and formulas here, not editing the formulas.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable

from tracer.arch.spec import Spec
from tracer.cost.counts import (BLOCK, EMBED, FINAL, HEAD, Formula, Pass, StepCost, block_steps, embed_steps,
                                final_steps, head_steps)
from tracer.cost.moe import engine_moe_formulas
from tracer.errors import TracerError


def _moe_or_dense(spec: Spec, p: Pass, layer) -> StepCost:
    """mlp.out: the down projection, or in a mixture of experts the weighted sum of the chosen experts."""
    moe = spec.moe is not None and (layer is None or spec.moe.on(layer))
    return (_MOE["mlp.out"] if moe else BLOCK["mlp.out"])(spec, p, layer)


_MOE = engine_moe_formulas()
BLOCKS = {**BLOCK, **_MOE, "mlp.out": _moe_or_dense}  # block formulas, mixture-of-experts steps included


def _same(x):
    return x


@dataclass(frozen=True)
class Stack:
    name: str
    steps: Callable[[Spec], tuple[str, ...]]  # which of `formulas` this spec has, in order
    formulas: dict[str, Formula]
    prefix: str = ""  # step-name prefix; "{i}" in it repeats the stack per layer
    spec_of: Callable[[Spec], Spec] = _same  # the Spec this stack counts
    pass_of: Callable[[Pass], Pass | None] = _same  # the pass it sees; None: it does not run
    by_layer: bool = False  # steps(spec, layer): the steps differ per layer (qwen2/3_moe's dense layers)

    def per_layer(self) -> bool:
        return "{i}" in self.prefix


def _encoder(spec: Spec) -> Spec:
    return spec.encoder


def _encoder_pass(p: Pass) -> Pass | None:
    """The encoder reads the input once (memory_len positions); decoding steps find its output cached."""
    if p.memory_cached:
        return None
    return Pass(p.batch, p.memory_len, 0, p.itemsize, p.dense)


SINGLE = (
    Stack("embed", embed_steps, EMBED),
    Stack("blocks", block_steps, BLOCKS, prefix="blocks.{i}.", by_layer=True),
    Stack("final_norm", final_steps, FINAL),
    Stack("head", head_steps, HEAD),
)
ENCODER_DECODER = (
    Stack("encoder.embed", embed_steps, EMBED, "encoder.", _encoder, _encoder_pass),
    Stack("encoder.blocks", block_steps, BLOCKS, "encoder.blocks.{i}.", _encoder, _encoder_pass, True),
    Stack("encoder.final_norm", final_steps, FINAL, "encoder.", _encoder, _encoder_pass),
    Stack("decoder.embed", embed_steps, EMBED, "decoder."),
    Stack("decoder.blocks", block_steps, BLOCKS, "decoder.blocks.{i}.", by_layer=True),
    Stack("decoder.final_norm", final_steps, FINAL, "decoder."),
    Stack("head", head_steps, HEAD),
)
ROUTES: dict[str, tuple[Stack, ...]] = {"decoder": SINGLE, "encoder": SINGLE, "encoder-decoder": ENCODER_DECODER}


def route_of(spec: Spec) -> tuple[Stack, ...]:
    route = getattr(spec, "route", "decoder") or "decoder"
    if route not in ROUTES:
        raise TracerError(f"tracer cost does not count the {route} route yet", hint="counted: " + ", ".join(ROUTES))
    return ROUTES[route]


def _layers(spec: Spec, one_per_window: bool) -> list[tuple[int, int]]:
    """(layer, how many layers it stands for): every layer, or the first of each distinct window (and MLP kind)."""
    if not one_per_window:
        return [(i, 1) for i in range(spec.n_layers)]
    kind = [(spec.window(i), spec.moe is None or spec.moe.on(i)) for i in range(spec.n_layers)]  # MoE or dense MLP
    return [(kind.index(k), n) for k, n in Counter(kind).items()]


def pass_costs(spec: Spec, p: Pass, route: tuple[Stack, ...] | None = None,
               one_per_window: bool = False) -> list[StepCost]:
    """Every step of one pass, named as a run records it, in order (route: the spec's own by default).

    one_per_window: count one layer per distinct window and set its `repeat` (for fast searches)."""
    out: list[StepCost] = []
    for stack in route if route is not None else route_of(spec):
        s, sp = stack.spec_of(spec), stack.pass_of(p)
        if sp is None:
            continue
        for layer, repeat in _layers(s, one_per_window) if stack.per_layer() else [(None, 1)]:
            prefix = stack.prefix.format(i=layer)
            for step in stack.steps(s, layer) if stack.by_layer else stack.steps(s):
                cost = stack.formulas[step](s, sp, layer)
                cost.name, cost.stack, cost.repeat = prefix + step, stack.name, repeat
                out.append(cost)
    return out
