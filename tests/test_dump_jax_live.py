"""The dump API from a JAX port (issue 18): the llama fixture written in jax.numpy, recorded with
tracer.dump.Recorder, diffs clean against tracer's run (the diff's default atol 1e-4, rtol 1e-3: JAX's
float32 kernels sum in another order), and the same port with interleaved RoPE fails at q_rot with the reason."""

from __future__ import annotations

import pytest

jnp = pytest.importorskip("jax.numpy")

import tracer  # noqa: E402
from tracer.diff.compare import compare  # noqa: E402
from tracer.dump import Recorder  # noqa: E402
from tracer.trace import Trace  # noqa: E402

from conftest import model_dir  # noqa: E402
from ports import llama_port  # noqa: E402

pytestmark = pytest.mark.live
LLAMA = model_dir("llama")
IDS = [0, 378, 300, 331, 15, 277, 287, 336, 283]


def _jax_port(tmp_path, rope: str) -> Trace:
    path = tmp_path / f"jax-{rope}.safetensors"
    with Recorder(path, model=LLAMA) as rec:
        llama_port.run(LLAMA, IDS, rec, xp=jnp, rope=rope)
    return Trace.load(path)




def test_jax_port_matches_and_its_rope_bug_is_named(tmp_path):
    ref = tracer.load_model(LLAMA).run(ids=[IDS])
    good = compare(ref, _jax_port(tmp_path, "rotate_half"))
    assert not good.diverged, good.first_divergence
    assert len(good.compared) >= 30
    bad = compare(ref, _jax_port(tmp_path, "interleaved")).first_divergence
    assert bad is not None and bad.name == "blocks.0.attn.q_rot"
    assert "interleaved" in bad.note
