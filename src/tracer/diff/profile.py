"""Where error is introduced rather than carried: each step's error against its inputs' error.

Error here is NMSE (error energy over signal energy), which is relative, so a
step and its inputs can be compared even when their magnitudes differ. A
step's growth is its NMSE in dB minus the largest NMSE among the steps it
reads. +inf dB means the error starts here (its inputs matched exactly); about
0 dB means it was carried.

What a step reads comes from the one description of the pass (arch.steps_of)
when a trace carries its model's spec (`plan_of`); an input the other side did
not dump is replaced by what it read in turn. A dump with no spec (a port's
`save_file`) falls back to the name-only table below, with alternatives for
the steps a partial dump lacks.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from tracer.diff.metrics import to_db

Plan = dict[str, tuple[str, ...]]  # step name -> the steps it is computed from (arch.steps_of)

IN = "<in>"  # the residual stream entering the block

# step suffix inside a block -> its inputs; each input lists alternatives, the first one that ran earlier wins
_BLOCK_INPUTS: dict[str, list[tuple[str, ...]]] = {
    "ln1.out": [(IN,), ("attn.out",)],  # post-norm: ln1 reads the block input plus attention
    "attn.q": [("ln1.out", IN)],
    "attn.k": [("ln1.out", IN)],
    "attn.v": [("ln1.out", IN)],
    "attn.mask": [],  # built from the input mask alone
    "attn.q_rot": [("attn.q",)],
    "attn.k_rot": [("attn.k",)],
    "attn.scores": [("attn.q_rot", "attn.q"), ("attn.k_rot", "attn.k")],
    "attn.masked_scores": [("attn.scores",)],
    "attn.weights": [("attn.masked_scores", "attn.scores")],
    "attn.z": [("attn.weights",), ("attn.v",)],
    "attn.out": [("attn.z",)],
    "resid_mid": [(IN,), ("attn.out",)],
    "ln2.out": [("resid_mid", IN)],
    "mlp.pre": [("ln2.out", "ln1.out")],
    "mlp.up": [("ln2.out", "ln1.out")],
    "mlp.post": [("mlp.pre",), ("mlp.up",)],
    "mlp.out": [("mlp.post",)],
    "resid_post": [("resid_mid", IN), ("mlp.out",)],
}
_TOP_INPUTS: dict[str, list[tuple[str, ...]]] = {
    "embed.tokens": [("input.ids",)],
    "embed.positions": [("input.positions",)],
    "embed.out": [("embed.tokens",), ("embed.positions",)],
    "probs": [("logits",)],
}
_BLOCK_NAME = re.compile(r"^((?:\w+\.)?)blocks\.(\d+)\.(.+)$")


@dataclass
class BlockProfile:
    block: int
    input_db: float | None  # NMSE of the residual stream entering the block
    mid_db: float | None  # after the attention sublayer (None with a parallel residual)
    output_db: float | None  # leaving the block
    attn_gain_db: float | None
    mlp_gain_db: float | None
    gain_db: float | None  # output minus input: what this block added
    first_failure: str | None
    worst_step: str | None  # the step whose error grew most over its inputs'

    @property
    def introduced(self) -> bool:
        return self.gain_db is not None and self.gain_db == math.inf


def gain(own_db: float | None, inherited_db: float | None) -> float | None:
    """own - inherited in dB, with exact matches (-inf dB) handled: carried exactness is 0 dB."""
    if own_db is None or inherited_db is None:
        return None
    if own_db == inherited_db:  # includes -inf == -inf
        return 0.0
    return own_db - inherited_db


def plan_of(*traces) -> Plan | None:
    """The data flow of the first trace whose metadata holds its model's spec, or None."""
    for trace in traces:
        spec = trace.meta.get("model", {}).get("spec") if isinstance(trace.meta.get("model"), dict) else None
        if isinstance(spec, dict):
            try:
                from tracer.arch.spec import Spec  # here: `tracer diff --help` need not load the arch room
                from tracer.arch.steps_of import pass_steps

                return {s.name: s.inputs for s in pass_steps(Spec.from_dict(spec))}
            except (TypeError, ValueError, KeyError, AttributeError):  # a hand-written or foreign spec
                continue
    return None


def _planned_inputs(name: str, plan: Plan, ran_before) -> list[str]:
    """The plan's inputs of `name` that ran before it; one that did not is replaced by its own inputs."""
    out: list[str] = []
    for n in plan[name]:
        found = [n] if ran_before(n) else _planned_inputs(n, plan, ran_before) if n in plan else []
        out += [m for m in found if m not in out]
    return out


def step_inputs(name: str, order: list[str], measured: set[str] | frozenset[str] | None = None,
                plan: Plan | None = None) -> list[str]:
    """The earlier steps `name` reads, by tracer's data flow (falls back to the previous step).

    measured: when given, an input counts only if it was measured (a dump without q_rot
    falls back to q). plan: the data flow of the model's spec (plan_of), when a trace has one."""
    position = {n: i for i, n in enumerate(order)}
    here = position.get(name, len(order))

    def ran_before(candidate: str) -> bool:
        return position.get(candidate, here) < here and (measured is None or candidate in measured)

    if plan is not None and name in plan:
        return _planned_inputs(name, plan, ran_before)
    m = _BLOCK_NAME.match(name)
    if m:
        prefix, i, suffix = m.group(1), int(m.group(2)), m.group(3)
        block_in = f"{prefix}embed.out" if i == 0 else f"{prefix}blocks.{i - 1}.resid_post"
        known = suffix in _BLOCK_INPUTS
        table = [tuple(block_in if a == IN else f"{prefix}blocks.{i}.{a}" for a in alts) for alts in _BLOCK_INPUTS.get(suffix, [])]
        if suffix == "resid_post" and position.get(f"{prefix}blocks.{i}.resid_mid", here) >= here:  # parallel residual
            table.append((f"{prefix}blocks.{i}.attn.out",))
    else:
        known = name in _TOP_INPUTS or name.startswith("input.") or name in ("final_norm.out", "logits")
        table = list(_TOP_INPUTS.get(name, []))
        if name in ("final_norm.out", "logits"):
            last_resid = [n for n in order[:here] if n.endswith(".resid_post")]
            table = [(("final_norm.out",) if name == "logits" else ()) + tuple(last_resid[-1:])]
    inputs = []
    for alternatives in table:
        chosen = next((a for a in alternatives if ran_before(a)), None)
        if chosen:
            inputs.append(chosen)
    if not known and here > 0:  # a step tracer's catalogue does not have: assume it reads the one before
        inputs = [order[here - 1]]
    return inputs


def step_growth(name: str, order: list[str], nmse_of: dict[str, float],
                plan: Plan | None = None) -> tuple[float | None, float | None]:
    """(inherited NMSE dB, growth dB) for one step; None where either side was not measured."""
    if name not in nmse_of:
        return None, None
    measured = [nmse_of[p] for p in step_inputs(name, order, nmse_of.keys(), plan) if p in nmse_of]
    if not measured:
        return None, None
    inherited_db = to_db(max(measured))
    return inherited_db, gain(to_db(nmse_of[name]), inherited_db)


def block_profiles(order: list[str], nmse_of: dict[str, float], results: list) -> list[BlockProfile]:
    """One row per block (top-level `blocks.{i}` only): error entering, after attention, leaving."""
    blocks = sorted({int(m.group(2)) for n in order if (m := _BLOCK_NAME.match(n)) and not m.group(1)})
    by_block: dict[int, list] = {}
    for r in results:
        m = _BLOCK_NAME.match(r.name)
        if m and not m.group(1):
            by_block.setdefault(int(m.group(2)), []).append(r)

    def db(step: str) -> float | None:
        return to_db(nmse_of[step]) if step in nmse_of else None

    profiles = []
    for i in blocks:
        steps = by_block.get(i, [])
        input_db = db("embed.out" if i == 0 else f"blocks.{i - 1}.resid_post")
        mid_db = db(f"blocks.{i}.resid_mid")
        output_db = db(f"blocks.{i}.resid_post")
        if output_db is None:  # a partial dump: the last measured step of the block stands in
            measured = [s.name for s in steps if s.name in nmse_of]
            output_db = db(measured[-1]) if measured else None
        grown = [s for s in steps if s.growth_db is not None]
        worst = max(grown, key=lambda s: s.growth_db, default=None)
        profiles.append(BlockProfile(
            block=i,
            input_db=input_db,
            mid_db=mid_db,
            output_db=output_db,
            attn_gain_db=gain(mid_db, input_db),
            mlp_gain_db=gain(output_db, mid_db),
            gain_db=gain(output_db, input_db),
            first_failure=next((s.name for s in steps if s.failed), None),
            worst_step=worst.name if worst is not None and worst.growth_db > 0 else None,
        ))
    return profiles
