"""Which ONNX graphs make up an export, and how to read them as one model's modules.

An export is one graph (torch.onnx.export of the model; optimum's `model.onnx`), or optimum's split
encoder-decoder: `encoder_model.onnx` (input_ids, attention_mask -> last_hidden_state) run first, its output
fed to `decoder_model.onnx` or `decoder_model_merged.onnx` (optimum-onnx 0.1.0 `optimum/onnxruntime/
constants.py` names the files; `ORTModelForSeq2SeqLM._from_pretrained` prefers the merged decoder, tracer the
plain one: both give the same first pass). optimum's merged decoder is an `If` on `use_cache_branch` between the
graph with past (then) and the one without (else, `optimum/onnx/graph_transformations.py` `merge_decoders`);
a value inside a branch cannot be made a graph output, so tracer inlines the no-past branch.

A split graph's module scopes start where the exported module does: optimum exports `model.get_encoder()`,
whose scopes read `block.0...` (T5) or `layers.0...` (BART) where the whole model's read `encoder.block.0...`,
`model.encoder.layers.0...`. `align_scopes` finds the prefix to drop and the one to add so the most scopes
name a module tracer's own run records.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tracer.capture.onnx_inputs import is_split_decoder
from tracer.errors import TracerError

DECODER_ONLY_FILES = ("model.onnx", "decoder_model.onnx", "decoder_model_merged.onnx", "decoder_with_past_model.onnx")
SEQ2SEQ_DECODER_FILES = ("decoder_model.onnx", "decoder_model_merged.onnx")


@dataclass(frozen=True)
class GraphFiles:
    decoder: Path  # the graph that makes the logits (or the only graph)
    encoder: Path | None = None  # optimum's encoder graph, run first
    found: str = ""  # how the files were picked, to tell the user

    @property
    def paths(self) -> list[Path]:
        return [p for p in (self.encoder, self.decoder) if p is not None]


def find_graphs(path: Path, takes_encoder_output=None) -> GraphFiles:
    """The graphs to run for `path`: a folder of an export, an encoder graph (its decoder found next to it), a
    split decoder graph (its encoder found next to it), or one whole graph. `takes_encoder_output(file)` says
    whether a graph is a split decoder (it reads the graph's inputs)."""
    if path.is_dir():
        return _in_folder(path)
    if not path.is_file():
        raise TracerError(f"{path}: no such ONNX file")
    if _is_encoder_name(path):
        decoder = _first(path.parent, _decoder_names_for(path))
        if decoder is None:
            raise TracerError(f"{path.name} is an encoder graph and there is no "
                              f"{' or '.join(_decoder_names_for(path))} next to it",
                              hint="export the decoder too (optimum writes decoder_model.onnx beside encoder_model.onnx)")
        return GraphFiles(decoder, path, f"decoder: {decoder.name}, found next to {path.name}")
    if takes_encoder_output is not None and takes_encoder_output(path):
        encoder = _first(path.parent, _encoder_names_for(path))
        if encoder is None:
            raise TracerError(f"{path.name} is an encoder-decoder's decoder graph (it takes encoder_hidden_states) "
                              f"and there is no {' or '.join(_encoder_names_for(path))} next to it",
                              hint="export the encoder too, or give the export's folder")
        return GraphFiles(path, encoder, f"encoder: {encoder.name}, found next to {path.name}")
    return GraphFiles(path)


def graphs_for(path: Path) -> GraphFiles:
    """The graph files `path` stands for (onnx_graphs.find_graphs, a split decoder told by its inputs)."""
    return find_graphs(path, takes_encoder_output=_takes_encoder_output)


def _takes_encoder_output(path: Path) -> bool:
    import onnx

    try:
        graph = onnx.load(str(path), load_external_data=False).graph
    except Exception:  # unreadable: load_graph says so when it runs
        return False
    return is_split_decoder(graph)


def _in_folder(folder: Path) -> GraphFiles:
    files = sorted(p.name for p in folder.glob("*.onnx"))
    if not files:
        raise TracerError(f"{folder}: no .onnx file in this folder")
    encoders = [f for f in files if _is_encoder_name(Path(f))]
    if encoders:
        encoder = folder / ("encoder_model.onnx" if "encoder_model.onnx" in encoders else encoders[0])
        decoder = _first(folder, _decoder_names_for(encoder))
        if decoder is None:
            raise TracerError(f"{folder}: {encoder.name} but no {' or '.join(_decoder_names_for(encoder))}",
                              hint="a decoder_with_past_model.onnx alone cannot run a first pass (it needs the "
                              "cross-attention cache)")
        return GraphFiles(decoder, encoder, f"{encoder.name} then {decoder.name}, in {folder.name}/")
    chosen = _first(folder, DECODER_ONLY_FILES) or (folder / files[0] if len(files) == 1 else None)
    if chosen is None:
        raise TracerError(f"{folder}: several .onnx files and none tracer knows to pick ({', '.join(files)})",
                          hint="give the file itself: tracer capture FOLDER/FILE.onnx --model DIR ...")
    return GraphFiles(chosen, None, f"{chosen.name}, in {folder.name}/" if len(files) > 1 else "")


def _is_encoder_name(path: Path) -> bool:
    return "encoder" in path.stem and "decoder" not in path.stem


def _decoder_names_for(encoder: Path) -> list[str]:
    stem = encoder.stem.replace("encoder", "decoder")  # encoder_model_quantized -> decoder_model_quantized
    merged = stem.replace("decoder_model", "decoder_model_merged") if "decoder_model" in stem else stem + "_merged"
    return [stem + ".onnx", merged + ".onnx"]


def _encoder_names_for(decoder: Path) -> list[str]:
    stem = decoder.stem.replace("decoder_model_merged", "decoder_model").replace("decoder_with_past_model",
                                                                                 "decoder_model")
    return list(dict.fromkeys([stem.replace("decoder", "encoder") + ".onnx", "encoder_model.onnx"]))


def _first(folder: Path, names) -> Path | None:
    return next((folder / n for n in names if (folder / n).is_file()), None)


def no_past_branch(model):
    """An optimum merged decoder with its `If` on `use_cache_branch` replaced by the else branch's nodes (the
    graph without past), so every value is a value of the main graph; other models unchanged."""
    import onnx
    from onnx import helper

    ifs = [n for n in model.graph.node if n.op_type == "If" and n.input and n.input[0] == "use_cache_branch"]
    if not ifs:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    taken = {i.name for i in out.graph.initializer} | {o for n in out.graph.node for o in n.output}
    nodes, branching = [], {id(n) for n in out.graph.node if n.op_type == "If" and n.input[0] == "use_cache_branch"}
    for node in out.graph.node:
        if id(node) not in branching:
            nodes.append(node)
            continue
        branch = next(a.g for a in node.attribute if a.name == "else_branch")
        made = {i.name for i in branch.initializer} | {o for n in branch.node for o in n.output}
        taken_here = (taken | {i.name for i in out.graph.input}) - set(node.output)
        renamed = {name: f"{name}__no_past" for name in made if name in taken_here}  # the main graph's names win
        for init in branch.initializer:
            copy = out.graph.initializer.add()
            copy.CopyFrom(init)
            copy.name = renamed.get(init.name, init.name)
        for inner in branch.node:
            new = onnx.NodeProto()
            new.CopyFrom(inner)
            new.input[:] = [renamed.get(i, i) for i in inner.input]
            new.output[:] = [renamed.get(o, o) for o in inner.output]
            nodes.append(new)
        for inner_out, outer in zip(branch.output, node.output):
            if inner_out.name != outer:
                nodes.append(helper.make_node("Identity", [renamed.get(inner_out.name, inner_out.name)], [outer]))
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out


def align_scopes(named: dict[str, str], known: set[str], hint: str = "") -> tuple[dict[str, str], str]:
    """`named` (MODULE or MODULE:part -> value) with each module renamed by the one (drop, add) prefix pair under
    which the most modules are in `known` (the module paths tracer's run records); ties go to a pair whose
    added prefix contains `hint` (`encoder`, `decoder`), then to changing nothing. Also says what it did."""
    modules = {k.split(":", 1)[0] for k in named}
    drops = {""} | {_head(m, n) for m in modules for n in (1, 2) if m.count(".") >= n}
    adds = {""} | {_head(k, n) for k in known for n in (1, 2) if k.count(".") >= n}

    def hits(drop: str, add: str) -> int:
        return sum(1 for m in modules if _moved(m, drop, add) in known)

    best = max(((d, a) for d in drops for a in adds),
               key=lambda p: (hits(*p), bool(hint) and hint in p[1], p == ("", ""), -len(p[0]) - len(p[1])))
    if best == ("", "") or hits(*best) <= hits("", ""):
        return named, ""
    drop, add = best
    moved = {}
    for key, value in named.items():
        module, sep, part = key.partition(":")
        new = _moved(module, drop, add)
        if new is not None:
            moved[new + sep + part] = value
    said = f"scopes {drop or '(root)'}.* read as {add or '(root)'}.*" if drop else f"scopes read under {add}."
    return moved, said


def _head(module: str, n: int) -> str:
    return ".".join(module.split(".")[:n])


def _moved(module: str, drop: str, add: str) -> str | None:
    if drop and not (module == drop or module.startswith(drop + ".")):
        return None
    rest = module[len(drop):].lstrip(".") if drop else module
    return ".".join(p for p in (add, rest) if p) or None
