"""The steps a Spec's forward pass records: names in the engine's order, what each reads, which spec flag makes it.

This is the one description of a pass. The keep policy (model.keep), the cost counts (cost.counts), the shape
flow's inputs (report.flow) and the diff's data flow (diff.profile, when a trace carries its spec) derive from
it. tests/test_steps_of.py runs every fixture through the engine and checks that it records exactly these
names in this order, and that the transformers names (names.hf, as a capture lists them) follow the same order.

A block's steps are listed with their names local to the block (`attn.q`), their inputs as full step names,
and `when`: the spec field that decides whether the step exists ("" = always).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tracer.arch.spec import Spec


@dataclass(frozen=True)
class PlannedStep:
    name: str  # the full step name, e.g. "decoder.blocks.3.attn.q"
    local: str  # the name within its block or stack, e.g. "attn.q", "embed.out", "logits"
    inputs: tuple[str, ...] = ()  # full names of the steps it is computed from
    when: str = ""  # the spec field that produces it ("qk_norm", "positions == rotary", ...); "" = always


def _step(prefix: str, local: str, inputs=(), when: str = "") -> PlannedStep:
    return PlannedStep(prefix + local, local, tuple(i for i in inputs if i), when)


# ---------- inputs ----------

def input_steps(spec: Spec) -> list[PlannedStep]:
    """The inputs the engine records first (engine.forward.record_inputs): the encoder's, then the decoder's."""
    enc = spec.encoder or spec
    out = [_step("", "input.ids"), _step("", "input.mask")]
    if enc.positions != "relative":
        out.append(_step("", "input.positions", when="positions != relative"))
    if enc.token_types:
        out.append(_step("", "input.token_types", when="token_types"))
    if spec.route == "encoder-decoder":
        out += [_step("", "input.decoder_ids"), _step("", "input.decoder_mask")]
        if spec.positions != "relative":
            out.append(_step("", "input.decoder_positions", when="positions != relative"))
    return out


# ---------- one stack ----------

def embed_steps(spec: Spec, prefix: str = "") -> list[PlannedStep]:
    """Token ids -> the stream entering block 0 (engine.embed); `prefix` names the stack ("encoder.")."""
    ins = "input.decoder_" if prefix == "decoder." else "input."
    e = prefix + "embed."
    out = [_step(prefix, "embed.tokens", [ins + "ids"])]
    last = e + "tokens"
    if spec.d_embed is not None:
        out.append(_step(prefix, "embed.project_in", [last], "d_embed"))
        last = e + "project_in"
    terms = [last]
    if spec.token_types:
        out.append(_step(prefix, "embed.token_types", ["input.token_types"], "token_types"))
        terms.append(e + "token_types")
    if spec.positions == "learned":
        out.append(_step(prefix, "embed.positions", [ins + "positions"], "positions == learned"))
        terms.append(e + "positions")
    out.append(_step(prefix, "embed.out", terms))
    return out


def attention_steps(spec: Spec, p: str, x: str, mask: str, part: str = "attn", memory: str | None = None
                    ) -> list[PlannedStep]:
    """One attention sublayer (engine.attention, uncached) reading `x` (or `memory` for keys and values)."""
    a = p + part + "."
    src = memory or x
    out = [_step(p, part + ".q", [x]), _step(p, part + ".k", [src]), _step(p, part + ".v", [src])]
    q, k = a + "q", a + "k"
    if spec.qk_norm != "none" and memory is None:
        out += [_step(p, part + ".q_norm", [q], "qk_norm"), _step(p, part + ".k_norm", [k], "qk_norm")]
        q, k = a + "q_norm", a + "k_norm"
    if spec.positions == "rotary" and memory is None:
        rotary = "positions == rotary"
        out += [_step(p, part + ".q_rot", [q], rotary), _step(p, part + ".k_rot", [k], rotary)]
        q, k = a + "q_rot", a + "k_rot"
    bias = None
    if spec.relative_bias is not None and memory is None:
        out.append(_step(p, part + ".position_bias", when="relative_bias"))
        bias = a + "position_bias"
    if spec.attn_softcap is not None and memory is None:
        out += [_step(p, part + ".scores.raw", [q, k, bias], "attn_softcap"),
                _step(p, part + ".scores", [a + "scores.raw"])]
    else:
        out.append(_step(p, part + ".scores", [q, k, bias]))
    out += [_step(p, part + ".mask", [mask]),
            _step(p, part + ".masked_scores", [a + "scores", a + "mask"]),
            _step(p, part + ".weights", [a + "masked_scores"]),
            _step(p, part + ".z", [a + "weights", a + "v"]),
            _step(p, part + ".out", [a + "z"])]
    return out


def mlp_steps(spec: Spec, p: str, h: str, layer: int | None) -> list[PlannedStep]:
    """The MLP (engine.mlp) or, on a mixture-of-experts layer, the router and experts (engine.moe)."""
    m = p + "mlp."
    if spec.moe is not None and (layer is None or spec.moe.on(layer)):
        out = [_step(p, "mlp.router.logits", [h], "moe"),
               _step(p, "mlp.router.experts", [m + "router.logits"], "moe"),
               _step(p, "mlp.router.weights", [m + "router.logits", m + "router.experts"], "moe"),
               _step(p, "mlp.expert_out", [h, m + "router.experts"], "moe")]
        outs = [m + "expert_out", m + "router.weights"]
        if spec.moe.d_shared:
            out += [_step(p, "mlp.shared.out", [h], "moe.d_shared"), _step(p, "mlp.shared.gate", [h], "moe.d_shared")]
            outs += [m + "shared.out", m + "shared.gate"]
        return out + [_step(p, "mlp.out", outs)]
    out = [_step(p, "mlp.pre", [h])]
    if spec.mlp == "gated":
        out.append(_step(p, "mlp.up", [h], "mlp == gated"))
    out.append(_step(p, "mlp.post", [m + "pre", m + "up" if spec.mlp == "gated" else None]))
    return out + [_step(p, "mlp.out", [m + "post"])]


def block_steps(spec: Spec, layer: int, prefix: str = "", cross: bool = False) -> list[PlannedStep]:
    """Block `layer` of a stack (engine.block): its steps in order, by norm placement and residual kind.

    `cross`: a decoder block of an encoder-decoder model, with cross-attention on the encoder's output."""
    p = f"{prefix}blocks.{layer}."
    x = prefix + "embed.out" if layer == 0 else f"{prefix}blocks.{layer - 1}.resid_post"
    mask = "input.decoder_mask" if prefix == "decoder." else "input.mask"
    memory = stack_output(spec.encoder, "encoder.") if cross and spec.encoder is not None else None

    def attn(h: str) -> list[PlannedStep]:
        return attention_steps(spec, p, h, mask)

    def cross_attn(h: str) -> list[PlannedStep]:
        return attention_steps(spec, p, h, "input.mask", "cross_attn", memory)

    if spec.norm_placement == "post":  # BERT, BART, OPT-350m: each sublayer's sum is normed
        out = attn(x) + [_step(p, "resid_mid", [x, p + "attn.out"]), _step(p, "ln1.out", [p + "resid_mid"])]
        h = p + "ln1.out"
        if cross:
            out += cross_attn(h) + [_step(p, "resid_cross", [h, p + "cross_attn.out"]),
                                    _step(p, "ln_cross.out", [p + "resid_cross"])]
            h = p + "ln_cross.out"
        return out + mlp_steps(spec, p, h, layer) + [_step(p, "resid_post", [h, p + "mlp.out"])]
    if spec.norm_placement in ("sandwich", "after"):  # gemma2/3 (norm before and after), olmo2 (after only)
        before = spec.norm_placement == "sandwich"
        out = [_step(p, "ln1.out", [x], "norm_placement == sandwich")] if before else []
        out += attn(p + "ln1.out" if before else x)
        out += [_step(p, "ln1_post.out", [p + "attn.out"], "norm_placement in (sandwich, after)"),
                _step(p, "resid_mid", [x, p + "ln1_post.out"])]
        mid = p + "resid_mid"
        out += [_step(p, "ln2.out", [mid], "norm_placement == sandwich")] if before else []
        out += mlp_steps(spec, p, p + "ln2.out" if before else mid, layer)
        return out + [_step(p, "ln2_post.out", [p + "mlp.out"], "norm_placement in (sandwich, after)"),
                      _step(p, "resid_post", [mid, p + "ln2_post.out"])]
    out = [_step(p, "ln1.out", [x])] + attn(p + "ln1.out")
    if spec.residual == "parallel":  # attention and MLP both read the block input
        h = p + "ln1.out"
        if not spec.shared_norm:  # phi-1/2 share ln1 between them
            out.append(_step(p, "ln2.out", [x], "not shared_norm"))
            h = p + "ln2.out"
        return out + mlp_steps(spec, p, h, layer) + [_step(p, "resid_post", [x, p + "attn.out", p + "mlp.out"])]
    out.append(_step(p, "resid_mid", [x, p + "attn.out"], "residual == sequential"))
    stream = p + "resid_mid"
    if cross:
        out += [_step(p, "ln_cross.out", [stream])] + cross_attn(p + "ln_cross.out")
        out.append(_step(p, "resid_cross", [stream, p + "cross_attn.out"]))
        stream = p + "resid_cross"
    out += [_step(p, "ln2.out", [stream])] + mlp_steps(spec, p, p + "ln2.out", layer)
    return out + [_step(p, "resid_post", [stream, p + "mlp.out"])]


def last_block_output(spec: Spec, prefix: str = "") -> str:
    return f"{prefix}blocks.{spec.n_layers - 1}.resid_post"


def stack_output(spec: Spec, prefix: str = "") -> str:
    """The last step of a stack: its final norm, else its last block's resid_post."""
    return prefix + "final_norm.out" if spec.final_norm else last_block_output(spec, prefix)


def final_steps(spec: Spec, prefix: str = "") -> list[PlannedStep]:
    out = [_step(prefix, "final_norm.out", [last_block_output(spec, prefix)], "final_norm")] if spec.final_norm else []
    if spec.d_embed is not None:  # OPT-350m: back to the embedding width the head reads
        out.append(_step(prefix, "project_out", [stack_output(spec, prefix)], "d_embed"))
    return out


def stack_steps(spec: Spec, prefix: str = "", cross: bool = False) -> list[PlannedStep]:
    """Embed, every block, final norm of one stack (engine.forward.run_stack)."""
    out = embed_steps(spec, prefix)
    for i in range(spec.n_layers):
        out += block_steps(spec, i, prefix, cross)
    return out + final_steps(spec, prefix)


# ---------- the head ----------

def head_steps(spec: Spec) -> list[PlannedStep]:
    """lm: logits over the vocabulary; mlm: BERT's transform first; none: one pooled vector per row."""
    prefix = "decoder." if spec.route == "encoder-decoder" else ""
    last = stack_output(spec, prefix)
    if spec.head == "none":
        return [_step("", "pooled", [last, "input.mask"], "head == none")]
    out = []
    if spec.head == "mlm":
        out = [_step("", "head.dense", [last], "head == mlm"), _step("", "head.act", ["head.dense"], "head == mlm"),
               _step("", "head.ln.out", ["head.act"], "head == mlm")]
        last = "head.ln.out"
    elif spec.d_embed is not None:
        last = "project_out"
    if spec.logit_softcap is not None:
        out += [_step("", "logits.raw", [last], "logit_softcap"), _step("", "logits", ["logits.raw"])]
    else:
        out.append(_step("", "logits", [last]))
    return out + [_step("", "probs", ["logits"])]


# ---------- the whole pass ----------

def pass_steps(spec: Spec) -> list[PlannedStep]:
    """Every step one forward pass of this model records, in the engine's order (engine.forward.forward)."""
    out = input_steps(spec)
    if spec.route == "encoder-decoder":
        out += stack_steps(spec.encoder, "encoder.") + stack_steps(spec, "decoder.", cross=True)
    else:
        out += stack_steps(spec)
    return out + head_steps(spec)


_LAYER = re.compile(r"blocks\.\d+\.")


def template(name: str) -> str:
    """blocks.3.attn.q -> blocks.{i}.attn.q (the catalogue's template)."""
    return _LAYER.sub("blocks.{i}.", name, count=1)


def pass_templates(spec: Spec) -> set[str]:
    """The catalogue templates this model records (in at least one layer)."""
    return {template(s.name) for s in pass_steps(spec)}
