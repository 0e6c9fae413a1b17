"""A quantized GGUF against the same model in bf16 safetensors (issue 17): peak memory and time of a forward
pass with statistics only.

    pip install -e '.[gguf]'
    python bench/bench_gguf.py                    # ~1.1B llama-shaped, 512 tokens: bf16 folder, Q8_0, Q4_0
    python bench/bench_gguf.py --shape small --tokens 128   # a quick run (hidden 512, 8 layers)

The bf16 checkpoint is bench_scale.py's (random normal weights, std 0.02; norms 1); the GGUF files are
written from it by this script the way convert_hf_to_gguf.py + llama-quantize would lay them out (q/k rows
permuted for ggml's rope, matrices quantized with `gguf.quants.quantize`, norms kept F32), streamed one
tensor at a time, under `--scratch` (default bench/out/, not committed). Each side runs in its own process
(bench_scale.side: best of `--repeat` after loading, peak RSS = VmHWM, peak anonymous memory sampled every
10 ms). Goal (issue 17): no more memory than the bf16 run, time within 1.3x.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_scale  # noqa: E402  (the checkpoint writer and the measuring side)


def permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf's LlamaModel.permute (q/k rows for ggml's interleaved rope)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


GGUF_NAMES = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
              "lm_head.weight": "output.weight", "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
              "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
              "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
              "mlp.down_proj": "ffn_down"}


def gguf_name(hf: str) -> str:
    if hf in GGUF_NAMES:
        return GGUF_NAMES[hf]
    _, _, layer, rest = hf.split(".", 3)  # model.layers.N.<module>.weight
    return f"blk.{layer}.{GGUF_NAMES[rest.removesuffix('.weight')]}.weight"


def write_gguf(folder: Path, out: Path, qtype_name: str) -> None:
    """The bf16 folder as a GGUF of `qtype_name` (matrices) and F32 (norms), one tensor in memory at a time."""
    if out.is_file():
        return
    import gguf
    from gguf import GGMLQuantizationType as Q

    from tracer.checkpoint.weights import WeightFiles

    qtype = Q[qtype_name]
    cfg = json.loads((folder / "config.json").read_text())
    files = WeightFiles(folder)
    names = [n for n, _ in bench_scale.llama_tensors(**_shape_of(cfg))]

    def converted(hf: str) -> np.ndarray:
        a = np.asarray(files.get(hf), dtype=np.float32)
        if hf.endswith("q_proj.weight"):
            a = permute(a, cfg["num_attention_heads"])
        if hf.endswith("k_proj.weight"):
            a = permute(a, cfg["num_key_value_heads"])
        return gguf.quants.quantize(a, qtype) if a.ndim == 2 else a

    w = gguf.GGUFWriter(str(out) + ".partial", "llama")
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_rope_dimension_count(cfg["hidden_size"] // cfg["num_attention_heads"])
    w.add_file_type({"Q8_0": 7, "Q4_0": 2}.get(qtype_name, 0))
    for hf in names:  # headers first: shapes from the safetensors header, bytes from the type
        shape = files.shape(hf)
        if len(shape) == 2:
            block, size = gguf.GGML_QUANT_SIZES[qtype]
            byte_shape = (shape[0], shape[1] // block * size)
            w.add_tensor_info(gguf_name(hf), byte_shape, np.dtype(np.uint8), int(np.prod(byte_shape)), raw_dtype=qtype)
        else:
            w.add_tensor_info(gguf_name(hf), shape, np.dtype(np.float32), 4 * int(np.prod(shape)))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for hf in names:
        w.write_tensor_data(converted(hf))
    w.close()
    os.rename(str(out) + ".partial", out)


def _shape_of(cfg: dict) -> dict:
    return dict(hidden=cfg["hidden_size"], layers=cfg["num_hidden_layers"], heads=cfg["num_attention_heads"],
                kv=cfg["num_key_value_heads"], d_ff=cfg["intermediate_size"], vocab=cfg["vocab_size"],
                max_pos=cfg["max_position_embeddings"])


def run_side(path: Path, tokens: int, repeat: int, label: str) -> dict:
    out = subprocess.run([sys.executable, str(HERE / "bench_scale.py"), "--side", "tracer-stats", "--folder", str(path),
                          "--tokens", str(tokens), "--repeat", str(repeat)],
                         check=True, capture_output=True, text=True, env=os.environ)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    row["kind"] = label
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=("1b", "small"), default="1b")
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--types", default="Q8_0,Q4_0", help="GGUF types to write, comma separated")
    ap.add_argument("--scratch", type=Path, default=HERE / "out")
    args = ap.parse_args()
    folder = args.scratch / f"llama-{args.shape}-bf16"
    t0 = time.perf_counter()
    bench_scale.write_checkpoint(folder, bench_scale.SHAPES[args.shape])
    files = {"bf16": folder}
    for q in args.types.split(","):
        files[q] = args.scratch / f"llama-{args.shape}-{q.lower()}.gguf"
        write_gguf(folder, files[q], q)
    print(f"checkpoints ready in {time.perf_counter() - t0:.0f} s: " + ", ".join(
        f"{k} {(p / 'model.safetensors' if p.is_dir() else p).stat().st_size / 1e9:.2f} GB" for k, p in files.items()))
    for p in files.values():
        bench_scale.warm_page_cache(p / "model.safetensors" if p.is_dir() else p)
    print(f"this machine now: sgemm {bench_scale.sgemm_gflops():.0f} GFLOPS (float32, 2048 x 4096 x 14336)")
    rows = [run_side(p, args.tokens, args.repeat, f"tracer {k}") for k, p in files.items()]
    print(f"{args.tokens} tokens, statistics only; ratios against the bf16 folder")
    bench_scale.table(rows, rows[0])
    goal = all(r["peak_rss_mb"] <= rows[0]["peak_rss_mb"] * 1.02 and r["best_s"] <= 1.3 * rows[0]["best_s"] for r in rows[1:])
    print("goal met (memory <= bf16, time within 1.3x)" if goal else "goal NOT met (memory <= bf16, time within 1.3x)")


if __name__ == "__main__":
    main()
