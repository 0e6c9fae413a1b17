"""Speed and memory of tracer's forward pass next to transformers', in the same run.

    pip install -e '.[bench]'                  # torch==2.13.0 and transformers, for the reference side
    python bench/bench_forward.py              # builds a GPT-2-small-sized random checkpoint under bench/out/ (not committed)
    python bench/bench_forward.py --arch bert  # a BERT-base-sized random encoder (110M), the same way
    python bench/bench_forward.py --tokens 2048 --repeat 3   # past 1,024 tokens: a GPT-2 with a 2,048-row position table

Sides: transformers (eager float32, with attentions and hidden states), tracer keeping every step,
tracer keeping statistics only, and tracer-none, the bare forward pass with no recorder (statistics
only minus tracer-none is what the statistics cost). Each side runs in its own subprocess (so one side's imports and caches do not
count against the other), warms up once, then is timed `--repeat` times; the
median is reported. Peak memory is the subprocess's peak resident set size,
also shown above its baseline after imports and model load.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


ARCHS = {"gpt2": "GPT-2-small-sized (124M) random decoder", "bert": "BERT-base-sized (110M) random encoder"}


def build_checkpoint(folder: Path, arch: str = "gpt2", n_positions: int = 1024) -> None:
    if (folder / "config.json").is_file():
        return
    import torch
    import transformers as tf

    torch.manual_seed(0)
    if arch == "bert":
        model = tf.BertModel(tf.BertConfig())  # 110M parameters: 12 layers, d_model 768, vocab 30522
    else:
        model = tf.GPT2LMHeadModel(tf.GPT2Config(n_positions=n_positions))  # 124M: 12 layers, d_model 768, vocab 50257
    model.save_pretrained(folder)


def _rss_mb() -> float:
    """Peak resident set size of this process (VmHWM; unlike ru_maxrss it is not inherited across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def side(kind: str, folder: str, n_tokens: int, repeat: int) -> dict:
    """Runs in a subprocess: load, warm up, time `repeat` forwards."""
    ids = [[(i * 7919) % 30000 for i in range(n_tokens)]]
    if kind == "transformers":
        import torch
        from transformers import AutoModel, AutoModelForCausalLM

        auto = AutoModel if json.loads((Path(folder) / "config.json").read_text())["model_type"] == "bert" else AutoModelForCausalLM
        model = auto.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
        x = torch.tensor(ids)

        def once():
            with torch.no_grad():
                return model(x, output_attentions=True, output_hidden_states=True)
    else:
        import tracer
        from tracer.model.allocator import reuse_freed_memory

        reuse_freed_memory()  # as the tracer command does
        model = tracer.load_model(folder)
        keep = ("*",) if kind == "tracer-all" else ()

        def once():
            return model.run(ids=ids, keep=keep)

        if kind == "tracer-none":  # the forward pass alone, no statistics: what the statistics cost
            from tracer.engine.forward import forward
            from tracer.trace.recorder import NullRecorder

            inputs = model.batch(ids=ids, pad_side="right").inputs

            def once():
                return forward(inputs, model.weights, model.spec, NullRecorder())

    base = _rss_mb()
    once()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        once()
        times.append(time.perf_counter() - t0)
    return {"kind": kind, "median_s": statistics.median(times), "min_s": min(times), "peak_mb": _rss_mb(), "base_mb": base}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--arch", choices=tuple(ARCHS), default="gpt2")
    ap.add_argument("--folder", type=Path, default=None, help="default: bench/out/gpt2-small or bench/out/bert-base")
    ap.add_argument("--side", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.folder is None:
        gpt2 = "gpt2-small" if args.tokens <= 1024 else "gpt2-small-2048"  # GPT-2's table holds 1,024 positions
        args.folder = HERE / "out" / ("bert-base" if args.arch == "bert" else gpt2)
    if args.side:
        print(json.dumps(side(args.side, str(args.folder), args.tokens, args.repeat)))
        return
    if not (args.folder / "config.json").is_file():  # in a subprocess, so torch's memory stays out of the figures
        subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(HERE)!r}); "
                        f"import bench_forward as b; from pathlib import Path; b.build_checkpoint(Path({str(args.folder)!r}), {args.arch!r}, {max(1024, args.tokens)})"],
                       check=True)
    results = {}
    for kind in ("transformers", "tracer-all", "tracer-stats", "tracer-none"):
        out = subprocess.run([sys.executable, __file__, "--side", kind, "--folder", str(args.folder),
                              "--tokens", str(args.tokens), "--repeat", str(args.repeat)],
                             check=True, capture_output=True, text=True, env=os.environ)
        results[kind] = json.loads(out.stdout.strip().splitlines()[-1])
    ref = results["transformers"]
    print(f"{ARCHS[args.arch]}, {args.tokens} tokens, median of {args.repeat} runs, float32")
    print(f"{'side':<14} {'time s':>8} {'ratio':>6} {'peak MB':>8} {'ratio':>6} {'above base MB':>14}")
    for kind, r in results.items():
        print(f"{kind:<14} {r['median_s']:8.3f} {r['median_s'] / ref['median_s']:6.2f} {r['peak_mb']:8.0f} "
              f"{r['peak_mb'] / ref['peak_mb']:6.2f} {r['peak_mb'] - r['base_mb']:14.0f}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
