"""The second core (tracer.threads): the rows of an elementwise step or the chunks of the statistics split over
two threads give the same bits as one thread (statistics: within float64 merge rounding, 1e-12 relative); the
helper thread sees the caller's errstate and raises into it; OpenBLAS's spin is shortened at `import tracer`
before NumPy loads, or by load_model in the OpenBLAS already loaded (only while no other thread runs), and a
value the user set is kept."""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracer import threads
from tracer.engine import ops
from tracer.trace.stats import tensor_stats


@contextlib.contextmanager
def two_threads_on():
    """Two threads on, for any size, whatever this process has (on once its first load_model parked OpenBLAS)."""
    saved = threads._parked, threads._blas, threads.cores, threads.MIN_SPLIT_BYTES
    threads._parked, threads._blas, threads.cores, threads.MIN_SPLIT_BYTES = True, "scipy-openblas", (lambda: 2), 0
    try:
        yield
    finally:
        threads._parked, threads._blas, threads.cores, threads.MIN_SPLIT_BYTES = saved


@pytest.fixture
def two():
    with two_threads_on():
        yield


def test_in_halves_splits_rows_between_this_thread_and_the_helper(two):
    seen = []
    threads.in_halves(lambda r0, r1: seen.append((r0, r1, threading.current_thread() is threading.main_thread())), 7, 1)
    assert sorted(seen) == [(0, 3, True), (3, 7, False)]


def test_in_halves_runs_whole_when_off_small_or_single_row(monkeypatch):
    calls = []
    work = lambda r0, r1: calls.append((r0, r1))  # noqa: E731
    monkeypatch.setattr(threads, "_blas", "scipy-openblas")
    monkeypatch.setattr(threads, "_parked", False)
    threads.in_halves(work, 10, 1 << 30)  # off: OpenBLAS's threads spin on the second core
    monkeypatch.setattr(threads, "_parked", True)
    monkeypatch.setattr(threads, "cores", lambda: 2)
    threads.in_halves(work, 10, threads.MIN_SPLIT_BYTES - 1)  # too small to be worth a hand-off
    threads.in_halves(work, 1, 1 << 30)  # one row
    monkeypatch.setattr(threads, "cores", lambda: 1)
    threads.in_halves(work, 10, 1 << 30)  # one core
    assert calls == [(0, 10), (0, 10), (0, 1), (0, 10)]


@pytest.mark.parametrize("blas,parked,on", [("scipy-openblas", True, True), ("scipy-openblas", False, False),
                                            ("accelerate", False, True), ("mkl", True, False), ("", True, False)])
def test_two_threads_only_with_a_blas_whose_threads_sleep(monkeypatch, blas, parked, on):
    monkeypatch.setattr(threads, "_blas", blas)
    monkeypatch.setattr(threads, "_parked", parked)
    monkeypatch.setattr(threads, "cores", lambda: 2)
    assert threads.two_threads() is on


def test_the_blas_numpy_was_built_with_is_read():
    """A known vendor, not "" (which would leave the second core off for good)."""
    assert any(v in threads._blas_name() for v in ("openblas", "accelerate", "mkl", "blis")), threads._blas_name()


def test_the_helper_keeps_the_callers_errstate_and_raises_into_it(two):
    x = np.full((4, 8), 1e30, np.float32)

    def square(r0, r1):
        x[r0:r1] * x[r0:r1]  # overflows

    with np.errstate(over="raise"):
        with pytest.raises(FloatingPointError):
            threads.in_halves(lambda r0, r1: square(r0, r1) if r0 else None, 4, 1)  # only the helper's half
    with np.errstate(over="ignore"):
        threads.in_halves(square, 4, 1)  # ignored on both threads: no warning, no error


def test_a_split_inside_a_split_runs_whole_on_both_threads(two):
    """The helper is one thread: were it to wait for itself, a nested split would hang; on the calling thread a
    nested split would queue behind the helper's half and serialize the two halves."""
    seen = []

    def outer(r0, r1):
        threads.in_halves(lambda a, b: seen.append((r0, a, b, threading.current_thread().name)), 4, 1)

    threads.in_halves(outer, 2, 1)
    assert sorted(x[:3] for x in seen) == [(0, 0, 4), (1, 0, 4)]  # each half's inner work whole, on its own thread
    assert len({x[3] for x in seen}) == 2
    threads.in_halves(lambda a, b: seen.append((a, b)), 4, 1)  # and after it, a split splits again
    assert sorted(x for x in seen if len(x) == 2) == [(0, 2), (2, 4)]


_VALUES = st.one_of(st.floats(width=32, allow_nan=True), st.floats(-30, 30, width=32))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.integers(1, 40), st.sampled_from([1, 64, 1 << 20]), st.data())
def test_row_steps_split_over_two_threads_are_the_same_bits(rows, cols, piece_bytes, data):
    """Activations, softmax, norms and a bias add, split over two threads and, within each, in pieces of rows
    (1 byte: a row at a time)."""
    x = np.array(data.draw(st.lists(_VALUES, min_size=rows * cols, max_size=rows * cols)), np.float32).reshape(rows, cols)
    w, b = (np.array(data.draw(st.lists(st.floats(-3, 3, width=32), min_size=cols, max_size=cols)), np.float32)
            for _ in range(2))
    W = np.eye(cols, dtype=np.float32)  # x @ I is x exactly: the bias add is what is split

    def layer_norm(x):
        return ops.layer_norm(x, w, b, 1e-5)

    def rms_norm(x):
        return ops.rms_norm(x, w, 1e-6, offset=1.0)

    def linear(x):
        return ops.linear(x, W, b)

    fns = (ops.gelu_tanh, ops.gelu_erf, ops.silu, ops.softmax, layer_norm, rms_norm, linear)
    with np.errstate(all="ignore"):
        one = [f(x) for f in fns]
        saved = ops._PIECE_BYTES, ops._SOFTMAX_PIECE_BYTES
        ops._PIECE_BYTES = ops._SOFTMAX_PIECE_BYTES = piece_bytes
        try:
            with two_threads_on():
                both = [f(x) for f in fns]
        finally:
            ops._PIECE_BYTES, ops._SOFTMAX_PIECE_BYTES = saved
    for f, a, b in zip(fns, one, both):
        assert a.dtype == b.dtype == np.float32, f.__name__
        assert_same_bits(a, b, f.__name__)


def assert_same_bits(a: np.ndarray, b: np.ndarray, what: str = "") -> None:
    """Equal bits, NaN where NaN; a NaN's sign is not compared (x86 makes -NaN in a vector lane, +NaN in the
    scalar tail, and where a row's tail falls depends on the split; no step reads a NaN's sign)."""
    nan = np.isnan(a)
    np.testing.assert_array_equal(nan, np.isnan(b), err_msg=what)
    np.testing.assert_array_equal(a[~nan].view(np.uint32), b[~nan].view(np.uint32), err_msg=what)


@settings(max_examples=100, deadline=None)
@given(st.lists(_VALUES, min_size=1, max_size=64))
def test_gelu_erf_and_silu_are_their_expressions_bit_for_bit(values):
    """Both run into one output array; the bits are those of the expressions they replaced (inf and NaN too)."""
    x = np.array(values, np.float32)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(ops.gelu_erf(x), (ops.erf(x * (1.0 / math.sqrt(2.0))) + 1.0) * x * 0.5)
        np.testing.assert_array_equal(ops.silu(x), x / (1.0 + np.exp(-x)))


def test_logits_sized_softmax_and_a_masked_score_block_split_are_the_same_bits(two):
    rng = np.random.default_rng(5)
    logits = rng.standard_normal((1, 40, 50257)).astype(np.float32) * 4  # pieces of rows, then halves
    scores = rng.standard_normal((1, 12, 85, 512)).astype(np.float32)
    scores[..., 300:] = -np.inf  # masked keys; row 0 of head 0 fully masked
    scores[0, 0, 0] = -np.inf
    for x in (logits, scores):
        threads._parked = False
        one = ops.softmax(x)
        threads._parked = True
        assert_same_bits(ops.softmax(x), one)


@pytest.mark.parametrize("n", [2 * 2**18, 5 * 2**18 + 17])
def test_statistics_over_two_threads_match_one(two, n):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 3 + 1).astype(np.float32)
    x[::1001] = -np.inf
    x[5] = np.nan
    threads._parked = False
    one = tensor_stats(x)
    threads._parked = True
    both = tensor_stats(x)
    for k in ("min", "max", "absmax", "nan", "inf"):
        assert both[k] == one[k], k
    for k in ("mean", "std"):
        assert both[k] == pytest.approx(one[k], rel=1e-12), k  # the two halves merged in float64


def _in_fresh_python(code: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k != threads.SPIN_VAR}
    return subprocess.run([sys.executable, "-c", code], env={**clean, **env}, check=True, capture_output=True,
                          text=True).stdout.strip()


def test_import_tracer_before_numpy_shortens_openblas_spin_and_turns_two_threads_on():
    out = _in_fresh_python("import os, tracer, tracer.threads as t; print(os.environ['OPENBLAS_THREAD_TIMEOUT'], t._parked)")
    assert out == f"{threads.SPIN_LOG2_CYCLES} True"


_SPIN = """
import time, numpy
a = numpy.ones((512, 512), numpy.float32)
def spin():  # CPU seconds this process burns in the 0.3 s after a product: OpenBLAS's idle threads spinning
    a @ a
    c = time.process_time(); time.sleep(0.3); return time.process_time() - c
"""
_MODEL = str(Path(__file__).resolve().parents[1] / "fixtures" / "models" / "gpt2")


def test_numpy_loaded_first_load_model_parks_the_loaded_openblas():
    out = _in_fresh_python("import os, numpy, tracer, tracer.threads as t; a = os.environ.get('OPENBLAS_THREAD_TIMEOUT'); "
                           f"tracer.load_model({_MODEL!r}); print(a, os.environ['OPENBLAS_THREAD_TIMEOUT'], t._parked)")
    assert out == f"None {threads.SPIN_LOG2_CYCLES} True"


@pytest.mark.skipif(threads.cores() < 2 or threads._blas_name().find("openblas") < 0,
                    reason="OpenBLAS's threads spin only with two cores or more")
def test_openblas_threads_stop_spinning_after_a_product_either_import_order():
    """The effect itself: OpenBLAS's default spin burns ~0.1 s of CPU after each product (2^28 cycles); with the
    short spin, next to nothing. Measured in the process, NumPy first (load_model parks it) and tracer first."""
    late = _in_fresh_python(_SPIN + f"before = spin()\nimport tracer\ntracer.load_model({_MODEL!r})\nprint(before, spin())")
    before, after = map(float, late.split())
    assert before > 0.03 and after < 0.02, (before, after)
    early = float(_in_fresh_python("import tracer\n" + _SPIN + "print(spin())"))
    assert early < 0.02, early


def test_with_another_thread_alive_the_loaded_openblas_is_left_alone():
    """Stopping OpenBLAS's threads under another thread's product would break it: not while one exists."""
    out = _in_fresh_python("import os, threading, numpy, tracer, tracer.threads as t\n"
                           "stop = threading.Event(); other = threading.Thread(target=stop.wait); other.start()\n"
                           f"tracer.load_model({_MODEL!r}); print(t._parked, t._late)\n"
                           f"stop.set(); other.join(); tracer.load_model({_MODEL!r}); print(t._parked, t._late)")
    assert out.splitlines() == ["None True", "True False"]  # left alone, then parked at the next load_model


@pytest.mark.parametrize("value,parked", [("30", False), ("8", True), ("soon", False)])
def test_a_value_the_user_set_is_kept(value, parked):
    out = _in_fresh_python("import os, tracer, tracer.threads as t; print(os.environ['OPENBLAS_THREAD_TIMEOUT'], t._parked)",
                           OPENBLAS_THREAD_TIMEOUT=value)
    assert out == f"{value} {parked}"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork: POSIX only")
def test_a_forked_child_gets_its_own_helper_thread(two):
    """multiprocessing's fork start method copies the pool but not its thread: the child must not wait forever."""
    threads.in_halves(lambda r0, r1: None, 4, 1)  # the parent's helper exists now
    pid = os.fork()
    if pid == 0:  # the child: split once more, exit 0 if it came back
        seen = []
        threads.in_halves(lambda r0, r1: seen.append(r0), 4, 1)
        os._exit(0 if sorted(seen) == [0, 2] else 1)
    for _ in range(100):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        import time

        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail("the forked child hung on the parent's helper thread")


@pytest.mark.parametrize("shape", [(7, 5), (3,), (), (64, 33)])
def test_bf16_widened_on_two_threads_is_the_shifted_bits(two, shape):
    from tracer.checkpoint.safetensors_file import widen_bf16

    bits = np.random.default_rng(1).integers(0, 1 << 16, shape, dtype=np.uint16)  # every pattern: NaN and inf too
    got = widen_bf16(bits)
    assert got.dtype == np.float32 and got.shape == bits.shape
    np.testing.assert_array_equal(got.view(np.uint32), bits.astype(np.uint32) << 16)


@pytest.mark.parametrize("per_head", [False, True])
@pytest.mark.parametrize("poison", [None, np.nan, np.inf])
def test_the_mask_split_over_heads_is_np_where(two, per_head, poison):
    """Half of the heads on each core; a half holding NaN or +inf takes np.where itself (x + -inf would be NaN)."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 6, 5, 9)).astype(np.float32)
    if poison is not None:
        x[1, 4, 2, 3] = poison  # in the second half of the heads only
    keep = rng.random((2, 6 if per_head else 1, 5, 9)) < 0.6
    keep[1, 4 if per_head else 0, 2, 3] = False  # the poisoned cell blocked: -inf, where x + -inf is NaN
    got = ops.mask_blocked(x[..., 1:8], keep[..., 1:8])  # a column slice, as the blocked path passes
    want = np.where(keep[..., 1:8], x[..., 1:8], -np.inf)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("qname", ["Q8_0", "Q4_0", "Q4_K", "Q6_K", "BF16"])
def test_gguf_bands_dequantized_on_two_threads_are_the_same_bits(two, qname, monkeypatch):
    """Half of the bands of rows on each core: the same floats as one thread, for the fast paths and gguf's own."""
    gguf = pytest.importorskip("gguf")
    from tracer.checkpoint import gguf_dequant

    qtype = getattr(gguf.GGMLQuantizationType, qname)
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    rng = np.random.default_rng(11)
    raw = rng.integers(0, 256, (37, 2 * size), dtype=np.uint8)  # 37 rows of two blocks: any bytes decode
    if qname != "BF16":
        raw.reshape(37, 2, size)[..., :2] = np.frombuffer(np.float16(0.5).tobytes(), np.uint8)  # a finite scale d
    monkeypatch.setattr(gguf_dequant, "BAND_VALUES", 3 * block * 2)  # bands of three rows: 13 bands
    with np.errstate(all="ignore"):
        threads._parked = False
        one = gguf_dequant.dequantize(raw, qtype, gguf)
        threads._parked = True
        both = gguf_dequant.dequantize(raw, qtype, gguf)
    assert one.shape == both.shape == (37, 2 * block) and both.dtype == np.float32
    assert_same_bits(one, both, qname)
