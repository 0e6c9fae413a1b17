"""TransformerLens hook names -> tracer's step names (legacy HookedTransformer names and a few of
TransformerBridge's architecture-native ones), as pure data; tracer.diff.names applies them.

The hook names are the same for every family TransformerLens supports, so the tables are not keyed by
family. Each entry gives the step (within a block for TL_BLOCK) and how the tensor is laid out:

    "as_is"         already tracer's layout
    "heads_second"  [batch, pos, head, d_head] (TransformerLens) -> [batch, head, pos, d_head]
    "split_heads"   [batch, pos, heads * d_head] -> [batch, head, pos, d_head]
"""

from __future__ import annotations

TL_TOP: dict[str, tuple[str, str]] = {
    "hook_embed": ("embed.tokens", "as_is"),
    "hook_pos_embed": ("embed.positions", "as_is"),
    "hook_tokens": ("input.ids", "as_is"),
    "ln_final.hook_normalized": ("final_norm.out", "as_is"),
    "unembed.hook_out": ("logits", "as_is"),
    "logits": ("logits", "as_is"),
    # TransformerBridge's architecture-native names
    "embed.hook_out": ("embed.tokens", "as_is"),
    "ln_final.hook_out": ("final_norm.out", "as_is"),
}
TL_BLOCK: dict[str, tuple[str, str]] = {
    "ln1.hook_normalized": ("ln1.out", "as_is"),
    "attn.hook_q": ("attn.q", "heads_second"),
    "attn.hook_k": ("attn.k", "heads_second"),
    "attn.hook_v": ("attn.v", "heads_second"),
    "attn.hook_rot_q": ("attn.q_rot", "heads_second"),
    "attn.hook_rot_k": ("attn.k_rot", "heads_second"),
    "attn.hook_attn_scores": ("attn.masked_scores", "as_is"),  # TL's scores are after the mask
    "attn.hook_pattern": ("attn.weights", "as_is"),
    "attn.hook_z": ("attn.z", "heads_second"),
    "hook_attn_out": ("attn.out", "as_is"),
    "hook_resid_mid": ("resid_mid", "as_is"),
    "ln2.hook_normalized": ("ln2.out", "as_is"),
    "mlp.hook_pre": ("mlp.pre", "as_is"),
    "mlp.hook_pre_linear": ("mlp.up", "as_is"),
    "mlp.hook_post": ("mlp.post", "as_is"),
    "hook_mlp_out": ("mlp.out", "as_is"),
    "hook_resid_post": ("resid_post", "as_is"),
    # TransformerBridge's architecture-native names
    "hook_out": ("resid_post", "as_is"),
    "ln1.hook_out": ("ln1.out", "as_is"),
    "ln2.hook_out": ("ln2.out", "as_is"),
    "attn.q.hook_out": ("attn.q", "split_heads"),
    "attn.k.hook_out": ("attn.k", "split_heads"),
    "attn.v.hook_out": ("attn.v", "split_heads"),
    "attn.hook_out": ("attn.out", "as_is"),
    "mlp.hook_out": ("mlp.out", "as_is"),
}
TL_IGNORED: dict[str, str] = {
    "hook_scale": "a norm's 1/scale factor: tracer records the normalized output instead",
    "attn.hook_result": "per-head output before the sum: tracer records attn.out",
    "hook_attn_in": "a copy of the block input per head",
    "hook_q_input": "a copy of the block input per head",
    "hook_k_input": "a copy of the block input per head",
    "hook_v_input": "a copy of the block input per head",
    "hook_mlp_in": "a copy of ln2's input",
    "unembed.hook_in": "the same tensor as final_norm.out",
}

# blocks.{i}.hook_resid_pre (bridge: hook_in): block 0's is embed.out, later ones repeat the previous resid_post
RESID_PRE = ("hook_resid_pre", "hook_in")
