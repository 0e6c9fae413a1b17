"""Decoding speed and memory: tracer with its KV cache, transformers' generate with its cache, tracer without a cache.

    pip install -e '.[bench]'      # torch==2.13.0 and transformers, for the reference side
    python bench/generate.py       # the GPT-2-small-sized random checkpoint of bench_forward.py (bench/out/)

A 128-token prompt, 64 new greedy tokens, EOS disabled, float32, one thread pool per side. Each side runs in
its own subprocess, warms up once, then runs `--repeat` times; medians are reported. Decoding tokens per second
leave the prefill out: (new tokens - 1) / (time for all new tokens - time for the first), the first new token
being the prefill's. "tracer-nocache" reruns the whole sequence for every new token (what the cache saves).
Peak memory is the subprocess's peak resident set size (VmHWM).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_forward import _rss_mb, build_checkpoint  # noqa: E402


def prompt_ids(n: int) -> list[int]:
    return [(i * 7919) % 50000 for i in range(n)]


def side(kind: str, folder: str, n_prompt: int, n_new: int, repeat: int) -> dict:
    """Runs in a subprocess: load, warm up, time `repeat` generations -> (prefill s, total s, new ids)."""
    import numpy as np

    ids = [prompt_ids(n_prompt)]
    if kind == "transformers":
        import torch
        from transformers import GPT2LMHeadModel

        model = GPT2LMHeadModel.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
        model.generation_config.eos_token_id = None
        x = torch.tensor(ids)

        def once(n):
            with torch.no_grad():
                out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False,
                                     use_cache=True, pad_token_id=0)
            return out[0, n_prompt:].tolist()

        def timed():
            t0 = time.perf_counter()
            once(1)
            t1 = time.perf_counter()
            new = once(n_new)
            t2 = time.perf_counter()
            return t1 - t0, t2 - t1, new
    else:
        import tracer
        from tracer.engine.forward import forward
        from tracer.model.generate import GenerateOptions, generate

        model = tracer.load_model(folder)

        class Last:  # the whole-sequence forward, keeping only the logits
            logits = None

            def __call__(self, name, array, axes, op):
                if name == "logits":
                    self.logits = array
                return array

        def timed():
            if kind == "tracer-cache":
                t0 = time.perf_counter()
                g = generate(model, ids=ids, options=GenerateOptions(n_new, ignore_eos=True))
                total = time.perf_counter() - t0
                return g.steps[0].seconds, total, g.rows[0].new_ids
            seq, new = list(ids[0]), []
            t0 = time.perf_counter()
            prefill = None
            for _ in range(n_new):
                b = model.batch(ids=[seq])
                rec = Last()
                with np.errstate(over="ignore", under="ignore"):
                    forward(b.inputs, model.weights, model.spec, rec)
                tok = int(rec.logits[0, -1].argmax())
                new.append(tok)
                seq.append(tok)
                if prefill is None:
                    prefill = time.perf_counter() - t0
            return prefill, time.perf_counter() - t0, new

    base = _rss_mb()
    timed()  # warm-up
    runs = [timed() for _ in range(repeat)]
    prefill = statistics.median(r[0] for r in runs)
    total = statistics.median(r[1] for r in runs)
    decode = statistics.median((n_new - 1) / max(r[1] - r[0], 1e-9) for r in runs)
    return {"kind": kind, "prefill_s": prefill, "total_s": total, "decode_tok_s": decode,
            "peak_mb": _rss_mb(), "base_mb": base, "new_ids": runs[0][2]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--folder", type=Path, default=HERE / "out" / "gpt2-small")
    ap.add_argument("--side", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.side:
        print(json.dumps(side(args.side, str(args.folder), args.prompt, args.new, args.repeat)))
        return
    if not (args.folder / "config.json").is_file():
        subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(HERE)!r}); "
                        f"import bench_forward as b; from pathlib import Path; b.build_checkpoint(Path({str(args.folder)!r}))"],
                       check=True)
    results = {}
    for kind in ("transformers", "tracer-cache", "tracer-nocache"):
        out = subprocess.run([sys.executable, __file__, "--side", kind, "--folder", str(args.folder), "--prompt",
                              str(args.prompt), "--new", str(args.new), "--repeat", str(args.repeat)],
                             check=True, capture_output=True, text=True, env=os.environ)
        results[kind] = json.loads(out.stdout.strip().splitlines()[-1])
    ref = results["transformers"]
    print(f"GPT-2-small-sized random checkpoint: {args.prompt}-token prompt, {args.new} new greedy tokens, "
          f"median of {args.repeat}, float32")
    print(f"{'side':<15} {'prefill s':>9} {'total s':>8} {'decode tok/s':>12} {'vs hf':>6} {'peak MB':>8} {'vs hf':>6} "
          f"{'above base':>10}  same tokens as hf")
    for kind, r in results.items():
        print(f"{kind:<15} {r['prefill_s']:9.3f} {r['total_s']:8.2f} {r['decode_tok_s']:12.1f} "
              f"{r['decode_tok_s'] / ref['decode_tok_s']:6.2f} {r['peak_mb']:8.0f} {r['peak_mb'] / ref['peak_mb']:6.2f} "
              f"{r['peak_mb'] - r['base_mb']:10.0f}  {r['new_ids'] == ref['new_ids']}")
    cache, nocache = results["tracer-cache"], results["tracer-nocache"]
    print(f"tracer: the cache decodes {cache['decode_tok_s'] / nocache['decode_tok_s']:.1f}x faster than recomputing")
    print(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "new_ids"} for k, v in results.items()}))


if __name__ == "__main__":
    main()
