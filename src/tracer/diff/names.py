"""Name maps: bring a foreign dump's tensor names (and layouts) to tracer's step names.

    identity      names are already tracer's (a dump without the batch axis gets it back)
    hf            transformers module paths, e.g. `model.layers.0.self_attn.q_proj`
                  (`MODULE` or `MODULE:output` is the module's output, `MODULE:input` its first
                  input, `MODULE:output[1]` the second output, `MODULE:attention_mask` the mask kwarg)
    tl            TransformerLens hook names, e.g. `blocks.0.attn.hook_q` ([batch, pos, head, d_head]);
                  the table is tracer.names.transformerlens
    FILE          a JSON or TOML map {"their.name": "tracer.name"} or
                  {"their.{i}.q": {"name": "blocks.{i}.attn.q", "transpose": [0, 2, 1, 3]}},
                  `{i}` standing for a block index; a null value ignores the tensor

The reference trace supplies the target shapes (so heads and d_head need no
config) and, for `hf`, the family and each step's transformers module.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from tracer.diff import layouts
from tracer.diff.layouts import AS_IS, HEADS_SECOND, Layout
from tracer.errors import TracerError
from tracer.names.transformerlens import RESID_PRE, TL_BLOCK, TL_IGNORED, TL_TOP
from tracer.steps import describe
from tracer.trace import Step, Trace, tensor_stats

BUILT_IN = ("identity", "hf", "tl")
ALIASES = {"transformers": "hf", "transformer-lens": "tl", "transformer_lens": "tl", "transformerlens": "tl", "none": "identity"}


@dataclass(frozen=True)
class Rule:
    """Where one foreign tensor goes: one or more (step name, layout) targets, or why it is left out."""

    targets: tuple[tuple[str, Layout], ...] = ()
    ignored: str = ""


Resolver = Callable[[str], "Rule | None"]


@dataclass
class Translation:
    trace: Trace
    map_name: str
    renamed: list[tuple[str, str, str]] = field(default_factory=list)  # (their name, step name, layout note)
    ignored: list[tuple[str, str]] = field(default_factory=list)  # (their name, why)
    unmatched: list[str] = field(default_factory=list)  # no rule: kept under their own name


def canonical_map_name(names: str) -> str:
    return ALIASES.get(names.lower(), names.lower()) if names.lower() in (*BUILT_IN, *ALIASES) else names


def translate(trace: Trace, names: str, reference: Trace) -> Translation:
    """`trace` renamed into tracer's step names (and layouts) using `reference` for shapes and modules."""
    map_name = canonical_map_name(names)
    resolve = resolver_for(map_name, reference, trace.names())
    shapes = {s.name: s for s in reference.steps}
    out = Translation(Trace([], dict(trace.meta, name_map=map_name)), map_name)
    produced: set[str] = set()
    for step in trace.steps:
        rule = resolve(step.name)
        if rule is None:
            out.unmatched.append(step.name)
            out.trace.steps.append(step)
            continue
        if rule.ignored:
            out.ignored.append((step.name, rule.ignored))
            continue
        for target, layout in rule.targets:
            if target in produced:
                out.ignored.append((step.name, f"{target} already given by another tensor"))
                continue
            produced.add(target)
            new, note = _rearranged(step, target, layout, shapes.get(target))
            if target != step.name or note:
                out.renamed.append((step.name, target, note))
            out.trace.steps.append(new)
    return out


def _rearranged(step: Step, target: str, layout: Layout, ref: Step | None) -> tuple[Step, str]:
    if step.array is None:
        return replace(step, name=target), ""
    shape = ref.shape if ref is not None else None
    array = layout.apply(step.array, shape)
    changed = array is not step.array  # layouts hand back the same object when they have nothing to do
    array, batch_note = layouts.add_batch_if_missing(array, shape)
    notes = [n for n in (layout.note if changed else "", batch_note) if n]
    axes = ref.axes if ref is not None and tuple(array.shape) == tuple(ref.shape) else tuple(f"dim{i}" for i in range(array.ndim))
    new = Step(
        name=target,
        axes=axes,
        op=step.op or f"from {step.name}",
        hf_module=ref.hf_module if ref is not None else step.hf_module,
        shape=tuple(array.shape),
        dtype=str(array.dtype),
        stats=tensor_stats(array) if array is not step.array else step.stats,
        array=array,
    )
    return new, "; ".join(notes)


def resolver_for(map_name: str, reference: Trace, their_names: list[str] = ()) -> Resolver:
    if map_name == "identity":
        return lambda name: Rule(((name, AS_IS),))
    if map_name == "hf":
        return hf_resolver(reference)
    if map_name == "tl":
        return bridge_aware(tl_resolver, their_names)
    path = Path(map_name)
    if not path.is_file():
        raise TracerError(
            f"--names {map_name!r}: neither a built-in map nor a map file",
            hint="use identity, hf, tl (transformer-lens), or a JSON/TOML file of their-name -> step-name",
        )
    return file_resolver(path)


# ---------- transformers module names ----------


def hf_resolver(reference: Trace) -> Resolver:
    """Module-path keys -> the reference's steps, through tracer.names.hf and the trace's hf_module column."""
    from tracer.names.hf import FUSED_QKV, hf_source

    family = (reference.meta.get("model") or {}).get("family")
    shapes = {s.name: s.shape for s in reference.steps}
    by_key: dict[str, list[tuple[str, Layout]]] = {}
    for step in reference.steps:
        source = hf_source(family, step.name) if family else None
        if step.hf_module and source is not None and source[0] != step.hf_module and source[0].endswith("." + step.hf_module):
            source = (step.hf_module, source[1])  # a headless encoder (BertModel): the same take, without `bert.`
        elif step.hf_module and (source is None or source[0] != step.hf_module):
            source = (step.hf_module, "output")
        if source is None:
            continue
        module, take = source
        layout = _hf_layout(step.name, take, FUSED_QKV.get(family or "", "blocks"), shapes)
        for key in _hf_keys(module, take):
            by_key.setdefault(key, []).append((step.name, layout))
    if not by_key:
        raise TracerError(
            "--names hf: the reference trace says nothing about transformers modules",
            hint="use a trace written by tracer (tracer run --save, tracer capture) as the reference",
        )

    def resolve(name: str) -> Rule | None:
        targets = by_key.get(name)
        return Rule(tuple(targets)) if targets else None

    return resolve


def _hf_keys(module: str, take: str) -> list[str]:
    if take == "output" or take.startswith("split:"):
        return [module, f"{module}:output", f"{module}.output"]
    if take == "input[0]":
        return [f"{module}:input", f"{module}:input[0]", f"{module}.input"]
    if take == "output[1]":
        return [f"{module}:output[1]"]
    if take.startswith("kwarg:"):
        kwarg = take.split(":", 1)[1]
        return [f"{module}:{kwarg}", f"{module}:{take}"]
    return [f"{module}:{take}"]


def _hf_layout(step_name: str, take: str, fused_scheme: str, shapes: dict[str, tuple[int, ...]]) -> Layout:
    if step_name.endswith((".attn.mask", ".cross_attn.mask")):
        return layouts.ADDITIVE_TO_KEEP
    if take in ("split:q", "split:k", "split:v"):
        block = step_name.rsplit(".attn.", 1)[0]
        heads = shapes.get(f"{block}.attn.q", (0, 0))[1]
        kv_heads = shapes.get(f"{block}.attn.k", (0, 0))[1]
        return layouts.fused_qkv_part(take[-1], fused_scheme, heads, kv_heads)
    if take in ("split:gate", "split:up"):
        return layouts.then(layouts.fused_half(take.split(":")[1]), layouts.UNFLATTEN_POSITIONS)
    doc = describe(step_name)
    if doc is not None and len(doc.axes) == 4 and doc.axes[-1] == "d_head":
        return layouts.SPLIT_HEADS
    if doc is not None and doc.axes[:2] == ("batch", "pos"):
        return layouts.UNFLATTEN_POSITIONS
    return AS_IS


# ---------- TransformerLens hook names ----------

_TL_LAYOUTS: dict[str, Layout] = {"as_is": AS_IS, "heads_second": HEADS_SECOND, "split_heads": layouts.SPLIT_HEADS}
_TL_BLOCK_NAME = re.compile(r"^blocks\.(\d+)\.(.+)$")


def tl_resolver(name: str) -> Rule | None:
    """TransformerLens hook name -> tracer step (legacy HookedTransformer names and a few bridge names)."""
    if name in TL_TOP:
        return Rule((_tl_target(*TL_TOP[name]),))
    m = _TL_BLOCK_NAME.match(name)
    if m is None:
        return _tl_ignored(name)
    i, rest = int(m.group(1)), m.group(2)
    if rest in RESID_PRE:
        if i == 0:
            return Rule((("embed.out", AS_IS),))
        return Rule(ignored=f"the same tensor as blocks.{i - 1}.resid_post")
    if rest in TL_BLOCK:
        step, layout = TL_BLOCK[rest]
        return Rule((_tl_target(f"blocks.{i}.{step}", layout),))
    return _tl_ignored(rest)


def _tl_target(step: str, layout: str) -> tuple[str, Layout]:
    return step, _TL_LAYOUTS[layout]


def bridge_aware(resolve: Resolver, their_names) -> Resolver:
    """In a TransformerBridge cache (it has `ln*.hook_out`), `hook_normalized` is taken before the norm's
    weight and bias (measured with TransformerLens 4.3), so only `hook_out` is tracer's `ln*.out`.
    In a legacy HookedTransformer cache there is no `hook_out` and `hook_normalized` is the output."""
    if not any(n.endswith(("ln1.hook_out", "ln_final.hook_out")) for n in their_names):
        return resolve

    def resolve_bridge(name: str) -> Rule | None:
        if name.endswith("hook_normalized"):
            return Rule(ignored="TransformerBridge normalizes before weight and bias; its hook_out is the norm's output")
        return resolve(name)

    return resolve_bridge


def _tl_ignored(rest: str) -> Rule | None:
    for suffix, why in TL_IGNORED.items():
        if rest == suffix or rest.endswith("." + suffix):
            return Rule(ignored=why)
    return None


# ---------- a user's map file ----------


def file_resolver(path: Path) -> Resolver:
    entries = _flatten(read_map_file(path))
    exact: dict[str, Rule] = {}
    templated: list[tuple[re.Pattern, object, str]] = []
    for their, spec in entries.items():
        if "{i}" in their:
            pattern = re.compile("^" + re.escape(their).replace(r"\{i\}", r"(\d+)") + "$")
            templated.append((pattern, spec, their))
        else:
            exact[their] = _rule_from_spec(spec, None, path, their)

    def resolve(name: str) -> Rule | None:
        if name in exact:
            return exact[name]
        for pattern, spec, their in templated:
            m = pattern.match(name)
            if m:
                return _rule_from_spec(spec, m.group(1), path, their)
        return None

    return resolve


def read_map_file(path: Path) -> dict:
    from tracer.checkpoint.jsonload import load_json
    from tracer.checkpoint.safetensors_file import check_regular_file

    check_regular_file(path, "name map file")
    if path.stat().st_size > 16 * 1024 * 1024:
        raise TracerError(f"{path}: too large for a name map file")
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise TracerError(f"{path}: a name map file must be UTF-8 text") from None
    if path.suffix.lower() == ".toml":
        try:
            import tomllib
        except ModuleNotFoundError:  # Python 3.10
            raise TracerError(f"{path}: TOML map files need Python 3.11+", hint="write the map as JSON") from None
        try:
            data = tomllib.loads(text)
        except RecursionError:
            raise TracerError(f"{path}: not valid TOML (nested too deeply)") from None
        except tomllib.TOMLDecodeError as exc:
            raise TracerError(f"{path}: not valid TOML ({exc})") from None
    else:
        data = load_json(text, str(path))
    if not isinstance(data, dict):
        raise TracerError(f"{path}: a name map is an object of their-name -> step-name")
    return data


def _flatten(data: dict, prefix: str = "") -> dict:
    """TOML turns unquoted dotted keys into nested tables; join them back into dotted names."""
    flat: dict = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and "name" not in value and "ignore" not in value:
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def _rule_from_spec(spec: object, block: str | None, path: Path, their: str) -> Rule:
    fill = (lambda s: s.replace("{i}", block)) if block is not None else (lambda s: s)
    if spec is None or spec is False or (isinstance(spec, dict) and spec.get("ignore")):
        return Rule(ignored=f"ignored by {path.name}")
    if isinstance(spec, str):
        return Rule(((fill(spec), AS_IS),))
    if isinstance(spec, dict) and isinstance(spec.get("name"), str):
        layout = AS_IS
        if spec.get("split_heads"):
            layout = layouts.SPLIT_HEADS
        if "transpose" in spec:
            perm = spec["transpose"]
            if not (isinstance(perm, list) and sorted(perm) == list(range(len(perm)))):
                raise TracerError(f"{path}: {their!r}: transpose must list every axis once, e.g. [0, 2, 1, 3]")
            layout = layouts.then(layouts.transpose(tuple(perm)), layout) if layout is not AS_IS else layouts.transpose(tuple(perm))
        return Rule(((fill(spec["name"]), layout),))
    raise TracerError(
        f"{path}: {their!r}: expected a step name, null, or {{\"name\": ..., \"transpose\": [...], \"split_heads\": true}}"
    )
