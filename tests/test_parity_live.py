"""Live parity: rebuild every fixture and its references with transformers, then hold tracer to them.

Skipped without torch; CI installs torch==2.13.0 and transformers so it runs there. It also proves
the committed fixtures are what the script builds (byte for byte), so they cannot drift from it.
"""

import hashlib
import importlib.util

import numpy as np
import pytest

from conftest import ENCODERS, FAMILIES, MODELS, ROOT, SEQ2SEQ, VARIANTS
from parity_check import ATOL32, ATOL64, check_coverage, compare, run_like
from tracer import load_model
from tracer.trace import Trace

pytestmark = pytest.mark.live
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("build_fixtures", ROOT / "fixtures" / "build_fixtures.py")
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    out = tmp_path_factory.mktemp("fixtures")
    builder.build_all(out, list(FAMILIES + VARIANTS + ENCODERS + SEQ2SEQ))
    return out


@pytest.mark.parametrize("name", FAMILIES + VARIANTS)
def test_fresh_references_hold(rebuilt, name):
    folder = rebuilt / name
    model = load_model(folder)
    ref = Trace.load(folder / "reference.safetensors")
    errors = compare(ref, run_like(model, ref), ATOL32)
    check_coverage(errors, model.spec.n_layers, model.spec.final_norm)
    ref64 = Trace.load(folder / "reference64.safetensors")
    compare(ref64, run_like(load_model(folder, dtype="float64"), ref64), ATOL64)


def _sha256_of_files(folder):
    """{path relative to the folder: sha256} of every file, subfolders included (bert has 1_Pooling/)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()}


def _same_reference(fresh: Trace, committed: Trace) -> list[str]:
    """What differs between two reference traces beyond the rounding of the processor that computed them.

    torch's CPU kernels differ between processors (the committed references rebuilt on an AMD EPYC differ
    from the originals by up to 5e-6 in float32 and 1e-14 in float64), so references are compared as
    numbers: the same steps, shapes, dtypes and integers, floats within 1e-5 (float32) or 1e-12 (float64)
    times max(1, the step's largest magnitude). Everything else in a fixture folder is compared byte for byte.
    """
    problems = []
    if fresh.names() != committed.names():
        return [f"steps differ: {sorted(set(fresh.names()) ^ set(committed.names()))}"]
    for a, b in zip(fresh.steps, committed.steps):
        if (a.shape, a.dtype, a.axes, a.kept) != (b.shape, b.dtype, b.axes, b.kept):
            problems.append(f"{a.name}: shape/dtype/axes differ")
        elif a.kept and np.issubdtype(b.array.dtype, np.floating):
            tol = (1e-5 if b.array.dtype == np.float32 else 1e-12) * max(1.0, float(np.abs(b.array).max(initial=0)))
            if not float(np.abs(a.array.astype(np.float64) - b.array).max(initial=0)) <= tol:
                problems.append(f"{a.name}: values differ beyond rounding")
        elif a.kept and not np.array_equal(a.array, b.array):
            problems.append(f"{a.name}: integers differ")
    for key in ("tokens", "prompts", "model"):
        if fresh.meta.get(key) != committed.meta.get(key):
            problems.append(f"metadata {key} differs")
    return problems


@pytest.mark.parametrize("name", FAMILIES + VARIANTS + ENCODERS + SEQ2SEQ)
def test_committed_fixtures_are_what_the_script_builds(rebuilt, name):
    fresh, committed = _sha256_of_files(rebuilt / name), _sha256_of_files(MODELS / name)
    assert fresh.keys() == committed.keys(), "fixtures/models is stale: rerun python fixtures/build_fixtures.py"
    references = {f for f in fresh if f.startswith("reference") and f.endswith(".safetensors")}
    stale = [f for f in fresh if f not in references and fresh[f] != committed[f]]
    assert not stale, f"{stale} differ: rerun python fixtures/build_fixtures.py"
    for f in sorted(references):
        problems = _same_reference(Trace.load(rebuilt / name / f), Trace.load(MODELS / name / f))
        assert not problems, f"{f}: {problems[:5]}"


@pytest.mark.parametrize("name", ENCODERS + SEQ2SEQ)
def test_fresh_route_references_hold(rebuilt, name):
    """The encoder and encoder-decoder fixtures, rebuilt: tracer holds to every reference (float32, float64, batches)."""
    import route_parity as routes

    folder = rebuilt / name
    model = load_model(folder)
    ref = Trace.load(folder / "reference.safetensors")
    errors = routes.compare(ref, routes.run_like(model, ref), routes.ATOL32)
    assert not [n for n in routes.must_compare(model) if n not in errors]
    ref64 = Trace.load(folder / "reference64.safetensors")
    routes.compare(ref64, routes.run_like(load_model(folder, dtype="float64"), ref64), routes.ATOL64)
    for filename in ("reference_batch.safetensors", "reference_batch_left.safetensors"):
        if (folder / filename).is_file():
            batch = Trace.load(folder / filename)
            routes.compare(batch, routes.run_like(model, batch), routes.ATOL32)
