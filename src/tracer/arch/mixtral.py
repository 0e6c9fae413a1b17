"""Mixtral: Mistral with a mixture of experts in place of every MLP (router `block_sparse_moe.gate`, experts
w1 = gate, w3 = up, w2 = down), top-k probabilities renormalised to sum to 1."""

from tracer.arch.canonical import Source, transposed
from tracer.arch.llama import IGNORED, llama_spec, llama_weights  # noqa: F401  (IGNORED: re-exported)
from tracer.arch.spec import MoeSpec
from tracer.arch.windows import every_layer
from tracer.checkpoint.config import cfg_int, cfg_size


def spec_from_config(cfg: dict):
    n_experts = cfg_int(cfg, "num_local_experts", "mixtral", maximum=1 << 16)
    moe = MoeSpec(
        n_experts=n_experts,
        top_k=cfg_int(cfg, "num_experts_per_tok", "mixtral", maximum=n_experts),
        d_expert=cfg_size(cfg, "intermediate_size", "mixtral", "d_ff"),
        normalize=True,
    )
    return llama_spec(cfg, "mixtral", moe=moe, sliding_window=every_layer(cfg, "mixtral"))


def moe_weights(spec, src: dict, layer: int, router: str, expert: str, names: tuple[str, str, str]) -> dict:
    """Replace one layer's dense MLP sources by the router and per-expert (gate, up, down) tensors."""
    p = f"blocks.{layer}."
    for key in ("mlp.W_in", "mlp.W_up", "mlp.W_out"):
        src.pop(p + key, None)
    src[p + "mlp.W_router"] = transposed(router)
    for e in range(spec.moe.n_experts):
        for ours, theirs in zip(("W_in", "W_up", "W_out"), names):
            src[f"{p}mlp.experts.{e}.{ours}"] = transposed(expert.format(e=e, w=theirs))
    return src


def weight_sources(spec) -> dict[str, Source]:
    src = llama_weights(spec)
    for i in range(spec.n_layers):
        hf = f"model.layers.{i}.block_sparse_moe."
        moe_weights(spec, src, i, hf + "gate.weight", hf + "experts.{e}.{w}.weight", ("w1", "w3", "w2"))
    return src
