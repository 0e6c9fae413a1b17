"""Where each tracer step shows up in llama.cpp's compute graph (the names `llama-eval-callback` prints), pure data.

Per family: (ggml base name, op) -> (step template, layout). A graph name is `<base>-<layer>` inside a block and
bare outside (`embd`, `result_norm`, `result_output`); one base can be printed several times (Qcur after the
matmul, after the reshape to heads and after ROPE), so the op tells them apart. Layouts say how a tracer array
lines up with the ggml tensor once ggml's `ne` is reversed into NumPy order:

    "btd"     tracer [batch, pos, d]              ggml [1, 1, pos, d]
    "heads"   tracer [batch, heads, pos, d_head]  ggml [1, pos, heads, d_head]
    "merged"  tracer [batch, heads, pos, d_head]  ggml [1, 1, pos, heads * d_head]  (heads merged)
    "bhqk"    tracer [batch, heads, q, k]         ggml [1, heads, q, k]             (k may be padded cache cells)

`ROPE_PERMUTED` families had their q/k projection rows permuted by convert_hf_to_gguf.py for ggml's interleaved
RoPE: ggml's d_head entry 2i+s is the folder's entry s*d_head/2 + i, before and after rotation alike.
Graph nodes with no tracer step (the bare `norm-N` before the weight, views, `inp_pos`, masks) are not listed.
In the last block llama.cpp keeps only the output rows (GET_ROWS by out_ids, the last token by default) from
`ffn_inp` on: those tensors have fewer positions than the trace and are compared with its last rows.
"""

from __future__ import annotations

import re

Entry = tuple[str, str]  # (step template, layout)

_LLAMA: dict[tuple[str, str], Entry] = {
    ("embd", "GET_ROWS"): ("embed.tokens", "btd"),
    ("attn_norm", "MUL"): ("blocks.{i}.ln1.out", "btd"),
    ("Qcur", "RESHAPE"): ("blocks.{i}.attn.q", "heads"),
    ("Kcur", "RESHAPE"): ("blocks.{i}.attn.k", "heads"),
    ("Vcur", "RESHAPE"): ("blocks.{i}.attn.v", "heads"),
    ("Qcur", "ROPE"): ("blocks.{i}.attn.q_rot", "heads"),
    ("Kcur", "ROPE"): ("blocks.{i}.attn.k_rot", "heads"),
    ("kq_soft_max", "SOFT_MAX"): ("blocks.{i}.attn.weights", "bhqk"),
    ("kqv_out", "CONT"): ("blocks.{i}.attn.z", "merged"),
    ("attn_out", "MUL_MAT"): ("blocks.{i}.attn.out", "btd"),
    ("ffn_inp", "ADD"): ("blocks.{i}.resid_mid", "btd"),
    ("ffn_norm", "MUL"): ("blocks.{i}.ln2.out", "btd"),
    ("ffn_gate", "MUL_MAT"): ("blocks.{i}.mlp.pre", "btd"),
    ("ffn_up", "MUL_MAT"): ("blocks.{i}.mlp.up", "btd"),
    ("ffn_swiglu", "SWIGLU"): ("blocks.{i}.mlp.post", "btd"),
    ("ffn_out", "MUL_MAT"): ("blocks.{i}.mlp.out", "btd"),
    ("l_out", "ADD"): ("blocks.{i}.resid_post", "btd"),
    ("result_norm", "MUL"): ("final_norm.out", "btd"),
    ("result_output", "MUL_MAT"): ("logits", "btd"),
}

# qwen2: biases on q/k/v, so the flat projections are ADD nodes; the reshaped and rotated ones are as llama's.
_QWEN2 = dict(_LLAMA)

# qwen3: q/k RMSNorm per head after the reshape (Qcur_normed), then RoPE; its attention output node is unnamed.
_QWEN3 = dict(_LLAMA)
_QWEN3[("Qcur_normed", "MUL")] = ("blocks.{i}.attn.q_norm", "heads")
_QWEN3[("Kcur_normed", "MUL")] = ("blocks.{i}.attn.k_norm", "heads")

GGML_STEPS: dict[str, dict[tuple[str, str], Entry]] = {
    "llama": _LLAMA,
    "mistral": _LLAMA,
    "qwen2": _QWEN2,
    "qwen3": _QWEN3,
}

ROPE_PERMUTED = frozenset({"llama", "mistral"})

# Nodes some graphs leave unnamed (`node_31`), known by the weight they multiply: (weight name, op) -> step.
# qwen2's attention output projection is one.
_BY_WEIGHT: dict[tuple[str, str], Entry] = {
    ("blk.{i}.attn_output.weight", "MUL_MAT"): ("blocks.{i}.attn.out", "btd"),
}


def ggml_step(family: str, base: str, op: str, layer: int | None) -> Entry | None:
    """The tracer step (with its layout) a ggml graph node stands for, or None."""
    table = GGML_STEPS.get(family)
    if table is None:
        return None
    entry = table.get((base, op))
    if entry is None:
        return None
    template, layout = entry
    if "{i}" in template:
        if layer is None:
            return None
        template = template.format(i=layer)
    return template, layout


def ggml_step_by_weight(family: str, weight: str, op: str) -> Entry | None:
    """The step of an unnamed node from the weight it multiplies (its first source), or None."""
    if family not in GGML_STEPS:
        return None
    m = re.fullmatch(r"blk\.(\d+)\.(.+)", weight)
    if not m:
        return None
    entry = _BY_WEIGHT.get(("blk.{i}." + m.group(2), op))
    return (entry[0].format(i=int(m.group(1))), entry[1]) if entry else None


def rope_permutation(d_head: int) -> list[int]:
    """ggml d_head index -> the folder's index, for a family in ROPE_PERMUTED."""
    return [(j % 2) * (d_head // 2) + j // 2 for j in range(d_head)]
