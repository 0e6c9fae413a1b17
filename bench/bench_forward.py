"""Speed and memory of tracer's forward pass next to transformers', in the same run: every GPT-2 and BERT row
of issue 20's table, then decoding with a cache.

    pip install -e '.[bench]'                  # torch==2.13.0 and transformers, for the reference side
    python bench/bench_forward.py              # every row (about 4 minutes on 2 cores); random checkpoints are
                                               #   built once under bench/out/ (not committed)
    python bench/bench_forward.py --rows gpt2-512,bert-128 --repeat 5
    python bench/bench_forward.py --blas as-is # keep this machine's OPENBLAS_CORETYPE pin (see below)

Rows: GPT-2-small-sized (124M) at 128, 512 and 2,048 tokens (a 2,048-position table for the last), a
BERT-base-sized encoder (110M) at 128 tokens, and `tracer generate` against transformers' generate (a
128-token prompt, 64 new greedy tokens, bench/generate.py's sides). Sides: transformers eager float32 with
attentions and hidden states; tracer through the Python API exactly as documented (`tracer.load_model(dir)
.run(ids=..., keep=...)`, no tuning call) keeping every step (`all`), statistics only (`stats`), and the bare
forward with no recorder (`bare`). Each side runs in its own fresh process and warms up once; then `--repeat`
rounds each time one forward of every side of the row in turn (the order rotating), so that a host whose speed
drifts, as a shared machine's does, slows the sides of a round alike. Times: median, min-max. A ratio is
tracer / transformers within a round; the row's ratio is the median of its rounds' (min-max beside it).

Floor: each row also times the dense matrix products alone (x @ W for every projection and the head, on the
weights as tracer maps them, back to back), and for decoding one token's products (each weight read once from
memory). That is the least time any forward running these products on this machine's BLAS can take; a goal
beyond it is marked NOT* (not reachable here by any implementation, however little else it does).

BLAS: numpy's OpenBLAS picks its kernel for the CPU at import. Some hosts pin OPENBLAS_CORETYPE (and
OPENBLAS_L2_SIZE) in the environment for older OpenBLAS builds, which makes a current numpy run an older,
narrower kernel (Haswell's AVX2 on an AVX-512 CPU); torch brings its own kernels and ignores it. By default
(`--blas native`) every side runs with both variables removed, as on a machine without the pin; `--blas
as-is` keeps the environment. The kernel numpy used and the machine's sgemm speed at 2 threads are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BLAS_PINS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")

ARCHS = {"gpt2": "GPT-2-small-sized (124M) random decoder", "bert": "BERT-base-sized (110M) random encoder"}
# row -> (arch, tokens, tracer sides, goal per side: tracer / transformers at most)
ROWS = {
    "gpt2-512": ("gpt2", 512, {"stats": 0.75, "all": 0.85, "bare": 0.70}),
    "gpt2-2048": ("gpt2", 2048, {"stats": 0.60}),
    "gpt2-128": ("gpt2", 128, {"stats": 0.80}),
    "bert-128": ("bert", 128, {"stats": 0.85}),
    "generate": ("gpt2", 128, {}),  # decoding tokens/s: tracer with its cache at least 3x transformers'
}
GENERATE_GOAL = 3.0


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


def folder_of(arch: str, tokens: int) -> Path:
    if arch == "bert":
        return HERE / "out" / "bert-base"
    return HERE / "out" / ("gpt2-small" if tokens <= 1024 else "gpt2-small-2048")  # GPT-2's table: 1,024 rows


def _rss_mb() -> float:
    """Peak resident set size of this process (VmHWM; unlike ru_maxrss it is not inherited across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def blas_kernel() -> str:
    try:
        from threadpoolctl import threadpool_info

        info = [i for i in threadpool_info() if i.get("user_api") == "blas"]
        return f"{info[0]['internal_api']} {info[0].get('architecture')}, {info[0]['num_threads']} threads" if info else "?"
    except ImportError:
        return "? (pip install threadpoolctl to see it)"


def sgemm_gflops() -> float:
    """float32 matrix products of a GPT-2 MLP's size (512 x 768 x 3072), best of 20."""
    import numpy as np

    a, b = np.ones((512, 768), np.float32), np.ones((768, 3072), np.float32)
    a @ b
    best = min(_timed(lambda: a @ b) for _ in range(20))
    return 2 * 512 * 768 * 3072 / best / 1e9


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def prepare(kind: str, folder: str, n_tokens: int):
    """Load one side's model -> a function running one forward of `n_tokens` tokens."""
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
        return once
    import tracer

    model = tracer.load_model(folder)  # the API as documented: no tuning call of our own
    keep = ("*",) if kind == "all" else ()
    if kind == "bare":  # the forward pass alone, no statistics: what the statistics cost
        import numpy as np
        from tracer.engine.forward import forward
        from tracer.trace.recorder import NullRecorder

        inputs = model.batch(ids=ids).inputs

        def bare():
            with np.errstate(over="ignore", under="ignore"):
                return forward(inputs, model.weights, model.spec, NullRecorder())
        return bare
    return lambda: model.run(ids=ids, keep=keep)


def side(kind: str, folder: str, n_tokens: int, repeat: int) -> dict:
    """Runs in a fresh subprocess: the floor (the forward sides run as workers, see run_interleaved)."""
    if kind != "floor":
        raise SystemExit(f"--side {kind}: only the floor runs alone; the forward sides take turns (--worker)")
    return products_floor(folder, n_tokens, repeat)


def worker(kind: str, folder: str, n_tokens: int) -> None:
    """A side kept alive for interleaved rounds: load and warm up, say `ready`, then time one forward per `run`
    line on stdin (printing its seconds) until `done`, which prints the side's memory as JSON."""
    base = _rss_mb()
    once = prepare(kind, folder, n_tokens)
    first = _timed(once)
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() != "run":
            break
        print(_timed(once), flush=True)
    print(json.dumps({"kind": kind, "first_s": first, "peak_mb": _rss_mb(), "base_mb": base, "kernel": blas_kernel()}),
          flush=True)


def products_floor(folder: str, n_tokens: int, repeat: int) -> dict:
    """The least time any forward of this checkpoint can take with this machine's BLAS: the dense matrix products
    alone (every projection and the head: x [n, in] @ W for each 2-D weight but the embedding tables), on the
    weights as tracer maps them, back to back with nothing else, best of `repeat` after a warm-up. Attention's own
    products, the elementwise steps and the statistics come on top, so a ratio goal below floor / transformers
    cannot be met on this machine by any implementation that runs these products on this BLAS. With n_tokens 1
    it is one decoding step's products (each weight read once from memory): 1 / floor bounds tokens/s."""
    import numpy as np
    import tracer

    model = tracer.load_model(folder)
    weights = [np.asarray(w) for name, w in model.weights.items()
               if w.ndim == 2 and not name.startswith("embed.") and name.rsplit(".", 1)[-1].startswith("W_")]
    x = {w.shape[0]: np.ones((n_tokens, w.shape[0]), np.float32) for w in weights}

    def once():
        for w in weights:
            x[w.shape[0]] @ w

    once()
    best = min(_timed(once) for _ in range(repeat))
    flops = sum(2 * n_tokens * w.size for w in weights)
    return {"kind": "floor", "median_s": best, "min_s": best, "max_s": best, "gflops": flops / best / 1e9,
            "weight_mb": sum(w.nbytes for w in weights) / 1e6, "peak_mb": _rss_mb(), "kernel": blas_kernel()}


def _verdict(met: bool, beyond_floor: bool) -> str:
    return "met" if met else ("NOT*" if beyond_floor else "NOT ")


def add_common_args(ap: argparse.ArgumentParser) -> None:
    """--repeat, --blas and the hidden options a side's subprocess is called with (bench_scale.py too)."""
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--blas", choices=("native", "as-is"), default="native")
    ap.add_argument("--side", help=argparse.SUPPRESS)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--tokens", type=int, help=argparse.SUPPRESS)


def environment(blas: str) -> dict:
    env = dict(os.environ)
    if blas == "native":
        for var in BLAS_PINS:
            env.pop(var, None)
    return env


PAUSE_S = 0.3  # between two sides' runs: the last one's idle BLAS/OpenMP threads stop spinning first


def run_interleaved(kinds: list[str], folder: Path, tokens: int, repeat: int, env: dict,
                    script: str = __file__) -> dict[str, dict]:
    """Every side of a row in its own fresh process, all loaded and warmed up, then `repeat` rounds that time one
    forward of each side in turn (the order rotating each round). A host whose speed drifts (a shared machine)
    slows the sides of a round alike, so each round's ratio to transformers (the first kind) is measured within
    seconds; the row's ratio is their median."""
    procs, logs = {}, {}
    for kind in kinds:  # one at a time, so loading does not overlap
        logs[kind] = tempfile.TemporaryFile("w+")  # a side's stderr (transformers' progress bars), shown if it fails
        p = procs[kind] = subprocess.Popen([sys.executable, script, "--worker", kind, "--folder", str(folder),
                                            "--tokens", str(tokens)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                           stderr=logs[kind], text=True, env=env)
        if p.stdout.readline().strip() != "ready":
            p.wait()
            logs[kind].seek(0)
            raise SystemExit(f"the {kind} side failed to start:\n{logs[kind].read()}")
    times: dict[str, list[float]] = {k: [] for k in kinds}
    for r in range(repeat):
        for kind in kinds[r % len(kinds):] + kinds[: r % len(kinds)]:
            time.sleep(PAUSE_S)
            p = procs[kind]
            p.stdin.write("run\n")
            p.stdin.flush()
            times[kind].append(float(p.stdout.readline()))
    out = {}
    for kind, p in procs.items():
        p.stdin.write("done\n")
        p.stdin.flush()
        tail = json.loads(p.stdout.readline())
        p.wait()
        t = times[kind]
        ratios = [a / b for a, b in zip(t, times[kinds[0]])]
        out[kind] = {**tail, "median_s": statistics.median(t), "min_s": min(t), "best_s": min(t), "max_s": max(t), "times_s": t,
                     "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)}
    return out


def run_side(kind: str, folder: Path, tokens: int, repeat: int, env: dict) -> dict:
    out = subprocess.run([sys.executable, __file__, "--side", kind, "--folder", str(folder), "--tokens", str(tokens),
                          "--repeat", str(repeat)], check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_generate(repeat: int, env: dict) -> dict:
    """bench/generate.py's sides (transformers generate, tracer with its cache), each in its own process."""
    out = {}
    for kind in ("transformers", "tracer-cache"):
        done = subprocess.run([sys.executable, str(HERE / "generate.py"), "--side", kind, "--folder",
                               str(folder_of("gpt2", 128)), "--repeat", str(repeat)],
                              check=True, capture_output=True, text=True, env=env)
        out[kind] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def _ensure(arch: str, tokens: int) -> Path:
    folder = folder_of(arch, tokens)
    if not (folder / "config.json").is_file():  # in a subprocess, so torch's memory stays out of the figures
        subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(HERE)!r}); import bench_forward as b; "
                        f"from pathlib import Path; b.build_checkpoint(Path({str(folder)!r}), {arch!r}, {max(1024, tokens)})"],
                       check=True)
    return folder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, of: {', '.join(ROWS)}")
    add_common_args(ap)
    args = ap.parse_args()
    if args.side:
        print(json.dumps(side(args.side, str(args.folder), args.tokens, args.repeat)))
        return
    if args.worker:
        worker(args.worker, str(args.folder), args.tokens)
        return
    rows = [r for r in args.rows.split(",") if r]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        ap.error(f"unknown row {unknown[0]!r}; rows: {', '.join(ROWS)}")
    env = environment(args.blas)
    probe = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(HERE)!r}); import bench_forward as b; "
                            "print(b.sgemm_gflops()); print(b.blas_kernel())"], check=True, capture_output=True, text=True,
                           env=env).stdout.splitlines()
    print(f"numpy BLAS: {probe[1]} (--blas {args.blas}); sgemm {float(probe[0]):.0f} GFLOPS (512 x 768 x 3072, float32); "
          f"median of {args.repeat} rounds after a warm-up, each side in a fresh process, one forward of each side "
          f"per round (ratio: the median of the rounds' ratios)")
    print(f"{'row':<10} {'side':<13} {'median s':>9} {'min-max s':>15} {'ratio':>6} {'min-max':>11} {'goal':>6} {'':>4} "
          f"{'peak MB':>8} {'ratio':>6}")
    results, verdicts, starred = {}, [], False  # starred: some goal is beyond its row's floor
    for row in rows:
        arch, tokens, goals = ROWS[row]
        folder = _ensure(arch, tokens)
        if row == "generate":
            g = results[row] = run_generate(args.repeat, env)
            ref, ours = g["transformers"], g["tracer-cache"]
            speed = ours["decode_tok_s"] / ref["decode_tok_s"]
            floor = g["floor"] = run_side("floor", folder, 1, 5, env)  # one token's products: every weight read once
            most = 1.0 / floor["median_s"] / ref["decode_tok_s"]  # the best any decoder on this BLAS could do
            met = speed >= GENERATE_GOAL
            verdicts.append(met)
            starred |= not met and GENERATE_GOAL > most
            print(f"{row:<10} {'transformers':<13} {ref['decode_tok_s']:8.1f}/s {'':>15} {1:6.2f}")
            print(f"{row:<10} {'floor':<13} {1 / floor['median_s']:8.1f}/s {'':>15} {most:5.2f}x {'':>11} {'':>6} {'':>4} "
                  f"{'':>8} {'':>6}   (one token's products: {floor['weight_mb']:.0f} MB of weights at "
                  f"{floor['weight_mb'] / 1e3 / floor['median_s']:.1f} GB/s)")
            print(f"{row:<10} {'tracer cache':<13} {ours['decode_tok_s']:8.1f}/s {'':>15} {speed:5.2f}x {'':>11} {'>=3x':>6} "
                  f"{_verdict(met, GENERATE_GOAL > most)} {ours['peak_mb']:8.0f} {ours['peak_mb'] / ref['peak_mb']:6.2f}   "
                  f"(decoding tokens/s; same tokens: {ours['new_ids'] == ref['new_ids']})")
            continue
        floor = run_side("floor", folder, tokens, max(3, args.repeat), env)
        sides = run_interleaved(["transformers", *goals], folder, tokens, args.repeat, env)
        ref = sides["transformers"]
        results[row] = {**sides, "floor": floor}
        print(f"{row:<10} {'transformers':<13} {ref['median_s']:9.3f} {ref['min_s']:7.3f}-{ref['max_s']:<7.3f} {1:6.2f} "
              f"{'':>11} {'':>6} {'':>4} {ref['peak_mb']:8.0f} {1:6.2f}")
        least = floor["median_s"] / ref["median_s"]  # the lowest ratio any forward on this BLAS could reach
        print(f"{row:<10} {'floor':<13} {floor['median_s']:9.3f} {'':>15} {least:6.2f} {'':>11} {'':>6} {'':>4} {'':>8} "
              f"{'':>6}   (the dense products alone, {floor['gflops']:.0f} GFLOPS)")
        for kind, goal in goals.items():
            r = sides[kind]
            met = r["ratio"] <= goal
            verdicts.append(met)
            starred |= not met and goal < least
            print(f"{row:<10} {'tracer ' + kind:<13} {r['median_s']:9.3f} {r['min_s']:7.3f}-{r['max_s']:<7.3f} "
                  f"{r['ratio']:6.2f} {r['ratio_min']:5.2f}-{r['ratio_max']:<5.2f} {goal:6.2f} {_verdict(met, goal < least)} "
                  f"{r['peak_mb']:8.0f} {r['peak_mb'] / ref['peak_mb']:6.2f}")
    print(f"goals met: {sum(verdicts)} of {len(verdicts)}")
    if starred:
        print("NOT*: the goal lies beyond the floor row, which is the dense products alone on this machine's BLAS "
              "(decoding: one pass over every weight); no implementation that runs them can meet it here")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
