"""An ONNX export run value by value, its values named after the transformers modules they leave.

Both of torch's exporters say which module made each node: the TorchScript exporter (`dynamo=False`) in
the node name (`/model/layers.0/self_attn/q_proj/MatMul`), the dynamo exporter (the default since torch
2.9) in the node metadata `pkg.torch.onnx.name_scopes` (`['', 'model', 'model.layers.0', ...]`), which
survives its optimiser's folding and renaming (`val_257`). From the scopes:

    MODULE        the last activation the module's nodes make that is used outside them (its output, as a
                  forward hook sees it; TorchScript's common-subexpression pass can let an earlier value,
                  such as rotary cos/sin shared by every layer, leave too: those are listed, not named)
    MODULE:input  the activation that enters them from outside (its first input)
    ATTN:softmax  the Softmax inside an attention module's scope (the attention weights; with the scores
                  that feed it and the queries of the q.k product, placed by the reference's own module
                  column since transformers has no module for them)

Those are the names `tracer diff --names hf` already maps to steps (with q/k/v split into heads, fused
projections split), so the capture ends as a trace under tracer's step names. Values no rule names
(a fused attention kernel hides its weights) and nodes no module claims are reported, not guessed.

The graph runs unoptimised: with onnxruntime when installed (each named value added to the graph
outputs, graph optimisations off), else with onnx's pure-NumPy ReferenceEvaluator. Its inputs are filled
by name (onnx_inputs: optimum's past layouts on an empty cache, use_cache_branch, a split decoder's
encoder_hidden_states); an export may be several graphs (onnx_graphs: optimum's encoder then decoder, its
merged decoder's no-past branch inlined, scopes re-read under the model's own module paths).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tracer.capture.onnx_graphs import GraphFiles, align_scopes, graphs_for, no_past_branch  # noqa: F401
from tracer.capture.onnx_inputs import INPUT_ROLES, feeds_for, input_role, kv_dims, reference_inputs  # noqa: F401
from tracer.errors import TracerError

EXTRA_HINT = "pip install -e '.[onnx]' (from this checkout) installs onnx and onnxruntime"
_ATTENTION_SCOPES = ("self_attn", "attn", "attention", "self", "SelfAttention", "EncDecAttention", "encoder_attn",
                     "crossattention")


def require_onnx():
    try:
        import onnx
    except ImportError:
        raise TracerError("reading an ONNX export needs the onnx package", hint=EXTRA_HINT) from None
    return onnx


@dataclass
class Boundaries:
    """Values named after modules, and what could not be named."""
    named: dict[str, str] = field(default_factory=dict)  # our name -> the graph's value name
    also_left: dict[str, list[str]] = field(default_factory=dict)  # module -> values leaving it before its output
    unscoped: int = 0  # nodes no module claims


def node_scope(node) -> str | None:
    """The deepest module a node belongs to: from the dynamo exporter's metadata, else the node's name."""
    for prop in node.metadata_props:
        if prop.key == "pkg.torch.onnx.name_scopes":
            try:
                scopes = ast.literal_eval(prop.value)
            except (ValueError, SyntaxError):
                return None
            modules = [s for s in scopes[:-1] if s]  # the last entry names the op itself
            return modules[-1] if modules else None
    if node.name.startswith("/"):
        parts = node.name.strip("/").split("/")[:-1]  # "/model/layers.0/self_attn/q_proj/MatMul"
        return ".".join(parts) or None
    return None


def _within(scope: str | None, module: str) -> bool:
    return scope is not None and (scope == module or scope.startswith(module + "."))


def module_boundaries(graph) -> Boundaries:
    """For every module some node belongs to: the activation leaving it and the one entering it."""
    constants = {i.name for i in graph.initializer} | {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    producer, scope_of, consumers, made_of = {}, [], {}, {}
    for node in graph.node:
        s = node_scope(node)
        scope_of.append(s)
        for o in node.output:
            producer[o], made_of[o] = s, node
        for i in node.input:
            consumers.setdefault(i, []).append(s)
    graph_outputs, inputs = {o.name for o in graph.output}, _graph_inputs(graph)
    modules = sorted({prefix for s in scope_of if s for prefix in _prefixes(s)})
    out = Boundaries(unscoped=sum(1 for s in scope_of if s is None))
    for module in modules:
        inside = [n for n, s in zip(graph.node, scope_of) if _within(s, module)]
        made = [o for n in inside for o in n.output if o not in constants]
        made_set = set(made)
        leaving = [o for o in made if o in graph_outputs or any(not _within(c, module) for c in consumers.get(o, ()))]
        entering = [i for n in inside for i in n.input if i and i not in made_set and i not in constants]
        entering = list(dict.fromkeys(entering))
        if leaving:  # the module's output is what it computes last (as a forward hook sees it)
            out.named[module] = leaving[-1]
        if len(leaving) > 1:
            out.also_left[module] = leaving[:-1]
        activations = [i for i in entering if i in producer or i in inputs]
        if len(activations) >= 1:
            out.named[f"{module}:input"] = activations[0]
        if module.rsplit(".", 1)[-1] in _ATTENTION_SCOPES:
            out.named.update(attention_values(module, [n for n, s in zip(graph.node, scope_of) if _within(s, module)],
                                              made_of))
    return out


def attention_values(module: str, inside: list, made_of: dict) -> dict[str, str]:
    """Inside an eager attention module: the Softmax output (the weights); its input less the additive mask
    (the scores: Add(scores, mask) where the mask comes from outside, or a scaled q.k product itself); and
    the first operand of the q.k MatMul (queries after rotary). Only when the module has exactly one Softmax."""
    soft = [n for n in inside if n.op_type == "Softmax"]
    if len(soft) != 1:
        return {}
    found = {f"{module}:softmax": soft[0].output[0]}
    inside_values = {o for n in inside for o in n.output}
    scores = soft[0].input[0]
    node = made_of.get(scores)
    if node is not None and node.op_type == "Add":
        products = [i for i in node.input if i in inside_values and _reaches_matmul(i, made_of, inside_values)]
        scores = products[0] if len(products) == 1 else None
    if scores is None or not _reaches_matmul(scores, made_of, inside_values):
        return found
    found[f"{module}:scores"] = scores
    qk = _matmul_of(scores, made_of, inside_values)
    if qk is not None:
        found[f"{module}:q_rot"] = qk.input[0]
    return found


def _matmul_of(value: str, made_of: dict, inside: set[str], hops: int = 3):
    """The MatMul that makes `value`, through at most `hops` scaling ops (Mul, Div) inside the module."""
    node = made_of.get(value)
    for _ in range(hops):
        if node is None or value not in inside:
            return None
        if node.op_type == "MatMul":
            return node
        if node.op_type not in ("Mul", "Div"):
            return None
        value = node.input[0]
        node = made_of.get(value)
    return None


def _reaches_matmul(value: str, made_of: dict, inside: set[str]) -> bool:
    return _matmul_of(value, made_of, inside) is not None


def _prefixes(scope: str) -> list[str]:
    parts = scope.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _graph_inputs(graph) -> set[str]:
    return {i.name for i in graph.input}


def load_graph(path: Path):
    """The ModelProto with external data (`MODEL.onnx.data`) read in; errors in one line."""
    onnx = require_onnx()
    if not path.is_file():
        raise TracerError(f"{path}: no such ONNX file")
    try:
        return onnx.load(str(path), load_external_data=True)
    except Exception as exc:  # onnx raises DecodeError, FileNotFoundError (external data), ValidationError
        raise TracerError(f"{path}: not a readable ONNX model ({type(exc).__name__}: {str(exc)[:120]})") from None


def run_values(model, feeds: dict[str, np.ndarray], wanted: list[str]) -> dict[str, np.ndarray]:
    """The wanted values of one unoptimised run: onnxruntime when installed, else the reference evaluator."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return _run_reference(model, feeds, wanted)
    return _run_onnxruntime(model, feeds, wanted)


def _run_onnxruntime(model, feeds, wanted):
    import onnx
    import onnxruntime as ort

    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    typed = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
    present = {o.name for o in exposed.graph.output}
    for name in wanted:
        if name in present:
            continue
        info = typed.get(name)
        elem = info.type.tensor_type.elem_type if info is not None else onnx.TensorProto.FLOAT
        exposed.graph.output.append(onnx.helper.make_tensor_value_info(name, elem, None))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    blob = exposed.SerializeToString()
    try:
        session = ort.InferenceSession(blob, options, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        return dict(zip(names, session.run(names, feeds)))
    except Exception as exc:  # onnxruntime's own errors (Fail, InvalidArgument, ...): one line
        raise TracerError(f"onnxruntime could not run the export: {str(exc).splitlines()[0][:200]}") from None


def _run_reference(model, feeds, wanted):
    from onnx.reference import ReferenceEvaluator

    results = ReferenceEvaluator(model).run(None, feeds, intermediate=True)
    return {k: np.asarray(v) for k, v in results.items() if k in set(wanted)}


@dataclass
class OnnxCapture:
    tensors: dict[str, np.ndarray]  # under transformers module names (MODULE, MODULE:input, ...)
    boundaries: Boundaries
    exporter: str  # "dynamo" or "torchscript"
    outputs: dict[str, np.ndarray] = field(default_factory=dict)  # the graph's own outputs (last_hidden_state, ...)
    scopes: str = ""  # how the scopes were re-read to match the model's module paths, if they were


def exporter_of(graph) -> str:
    if any(p.key == "pkg.torch.onnx.name_scopes" for n in graph.node[:50] for p in n.metadata_props):
        return "dynamo"
    if any(n.name.startswith("/") for n in graph.node[:50]):
        return "torchscript"
    return "unknown"


def capture_onnx(path: Path, values: dict[str, np.ndarray], kv: dict | None = None, known: set[str] | None = None,
                 hint: str = "") -> OnnxCapture:
    """Run the export on the inputs by role (see onnx_inputs.feeds_for); every value a module boundary names,
    under that name (re-read to match `known` module paths when given), and the graph's outputs."""
    model = no_past_branch(load_graph(path))
    exporter = exporter_of(model.graph)
    if exporter == "unknown":
        raise TracerError(f"{path}: its nodes carry no module scopes (neither torch's TorchScript names nor the "
                          "dynamo exporter's name_scopes metadata)", hint="export it with torch.onnx.export")
    bounds = module_boundaries(model.graph)
    scopes = ""
    if known:
        bounds.named, scopes = align_scopes(bounds.named, known, hint)
    feeds = feeds_for(model.graph, values, kv)
    outputs = [o.name for o in model.graph.output]
    got = run_values(model, feeds, sorted(set(bounds.named.values()) | set(outputs)))
    tensors = {ours: got[v] for ours, v in bounds.named.items() if v in got and _is_activation(got[v])}
    return OnnxCapture(tensors, bounds, exporter, {o: got[o] for o in outputs if o in got}, scopes)


def _is_activation(a) -> bool:
    a = np.asarray(a)
    return a.ndim >= 2 and np.issubdtype(a.dtype, np.floating)


@dataclass
class OnnxTrace:
    trace: object  # Trace under tracer's step names
    unmatched: list[str]  # module values no step name maps to
    missing: list[str]  # steps the reference records that the export did not give
    exporter: str
    graphs: GraphFiles | None = None  # the files run, and how they were found
    scopes: list[str] = field(default_factory=list)  # per graph, how its scopes were re-read


def onnx_trace(path: Path, model_dir: Path, text: list[str] | None = None, ids: list[list[int]] | None = None,
               pad_side: str = "right", decoder_ids: list[list[int]] | None = None) -> OnnxTrace:
    """The export run on the prompt's tokens or `ids` (padded as tracer pads them), under tracer's step names.

    `path` is one graph, an export folder or a split encoder-decoder (see onnx_graphs.find_graphs): an encoder
    graph runs first and its output feeds the decoder graph. The checkpoint folder it was exported from
    supplies the tokenizer, the family and the target shapes: tracer runs it on the same input (a reference
    for names and shapes, not compared here: `tracer diff` does that)."""
    from tracer.diff.names import translate
    from tracer.model import load_model
    from tracer.trace import Step, Trace, tensor_stats

    graphs = graphs_for(Path(path))
    model = load_model(model_dir)
    options = {"decoder_ids": decoder_ids} if decoder_ids else {}
    reference = (model.run(text=text, pad_side=pad_side, **options) if text
                 else model.run(ids=ids, pad_side=pad_side, **options))
    values = reference_inputs(reference)
    kv, known = kv_dims(reference), {s.hf_module for s in reference.steps if s.hf_module}
    caps = []
    if graphs.encoder is not None:
        caps.append((graphs.encoder, capture_onnx(graphs.encoder, values, kv, known, "encoder")))
        values["encoder_hidden"] = encoder_output(caps[0][1], graphs.encoder)
    caps.append((graphs.decoder, capture_onnx(graphs.decoder, values, kv, known, "decoder" if caps else "")))
    split = len(caps) > 1
    foreign = [Step(n, tuple(f"dim{i}" for i in range(np.ndim(a))),
                    f"onnx {file.name + ':' if split else ''}{cap.boundaries.named[n]}", None,
                    tuple(np.shape(a)), str(np.asarray(a).dtype), tensor_stats(np.asarray(a)), np.asarray(a))
               for file, cap in caps for n, a in cap.tensors.items()]
    exporter = "+".join(dict.fromkeys(cap.exporter for _, cap in caps))
    meta = {"format": "foreign", "source": Path(path).name}
    inside, foreign = attention_steps(foreign, reference)
    translation = translate(Trace(foreign, meta), "hf", reference)
    translation.trace.steps += inside
    steps = [reference.step(n) for n in ("input.ids", "input.mask", "input.positions", "input.token_types",
                                         "input.decoder_ids", "input.decoder_mask", "input.decoder_positions")
             if n in reference]
    named = [s for s in translation.trace.steps if _is_step(s.name)]
    declared = declared_logits(caps[-1][1], reference, caps[-1][0].name if split else "")
    if declared is not None:  # what the model returns (BART adds final_logits_bias after lm_head)
        named = [s for s in named if s.name != "logits"] + [declared]
    order = {n: i for i, n in enumerate(reference.names())}
    named.sort(key=lambda s: order.get(s.name, len(order)))
    trace_meta = {k: reference.meta[k] for k in ("tracer_version", "model", "dtype", "prompts", "tokens", "pad_side",
                                                 "positions") if k in reference.meta}
    files = " + ".join(p.name for p in graphs.paths)
    trace_meta.update(source="onnx", exporter=exporter, onnx_file=files)
    got = {s.name for s in named} | {s.name for s in steps}
    missing = [n for n in reference.names() if n not in got]
    unmatched = [s.name for s in translation.trace.steps if not _is_step(s.name)]
    scopes = [f"{file.name}: {cap.scopes}" for file, cap in caps if cap.scopes]
    trace_meta["onnx"] = {"named_values": sum(len(cap.tensors) for _, cap in caps), "unmatched": unmatched,
                          "missing": missing, "unscoped_nodes": sum(cap.boundaries.unscoped for _, cap in caps),
                          **({"scopes": scopes} if scopes else {})}
    return OnnxTrace(Trace(steps + named, trace_meta), unmatched, missing, exporter, graphs, scopes)


def declared_logits(cap: OnnxCapture, reference, file: str):
    """The graph's own `logits` output as the step, when it has one of the reference's shape."""
    from tracer.trace import Step, tensor_stats

    value = cap.outputs.get("logits")
    if value is None or "logits" not in reference or tuple(np.shape(value)) != tuple(reference.step("logits").shape):
        return None
    ref = reference.step("logits")
    return Step("logits", ref.axes, f"onnx {file + ':' if file else ''}output logits", ref.hf_module,
                tuple(value.shape), str(value.dtype), tensor_stats(value), value)


def encoder_output(cap: OnnxCapture, path: Path) -> np.ndarray:
    """The encoder graph's hidden states for the decoder: its `last_hidden_state` output, else its only one."""
    floats = {k: v for k, v in cap.outputs.items() if _is_activation(v) and np.ndim(v) == 3}
    value = floats.get("last_hidden_state", next(iter(floats.values())) if len(floats) == 1 else None)
    if value is None:
        raise TracerError(f"{path.name}: no last_hidden_state output (outputs: {', '.join(cap.outputs) or 'none'})",
                          hint="optimum's encoder_model.onnx returns last_hidden_state [batch, pos, d_model]")
    return value


def _is_step(name: str) -> bool:
    from tracer.steps import describe

    return describe(name) is not None


def attention_steps(foreign: list, reference) -> tuple[list, list]:
    """(steps, the rest): ATTN:softmax, ATTN:scores and ATTN:q_rot under the step names of the attention module
    whose weights the reference records (its hf_module column), so no family table is needed for them."""
    from dataclasses import replace

    weights_at = {s.hf_module: s.name for s in reference.steps if s.hf_module and s.name.endswith("attn.weights")}
    parts = {"softmax": "weights", "scores": "scores", "q_rot": "q_rot"}
    steps, rest = [], []
    for step in foreign:
        module, _, part = step.name.rpartition(":")
        if part not in parts:
            rest.append(step)
            continue
        weights = weights_at.get(module)
        name = weights.rsplit(".", 1)[0] + "." + parts[part] if weights else None
        if name is not None and name in reference and tuple(reference.step(name).shape) == tuple(step.shape):
            steps.append(replace(step, name=name, axes=reference.step(name).axes))
    return steps, rest

