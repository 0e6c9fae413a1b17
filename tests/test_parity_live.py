"""Live parity: rebuild every fixture and its references with transformers, then hold tracer to them.

Skipped without torch; CI installs torch==2.13.0 and transformers so it runs there. It also proves
the committed fixtures are what the script builds (byte for byte), so they cannot drift from it.
"""

import hashlib
import importlib.util

import pytest

from conftest import ENCODERS, FAMILIES, MODELS, ROOT, SEQ2SEQ, VARIANTS
from test_parity import ATOL32, ATOL64, _check_coverage, _run_like, compare
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
    errors = compare(ref, _run_like(model, ref), ATOL32)
    _check_coverage(errors, model.spec.n_layers)
    ref64 = Trace.load(folder / "reference64.safetensors")
    compare(ref64, _run_like(load_model(folder, dtype="float64"), ref64), ATOL64)


def _sha256_of_files(folder):
    """{path relative to the folder: sha256} of every file, subfolders included (bert has 1_Pooling/)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("name", FAMILIES + VARIANTS + ENCODERS + SEQ2SEQ)
def test_committed_fixtures_are_what_the_script_builds(rebuilt, name):
    fresh, committed = _sha256_of_files(rebuilt / name), _sha256_of_files(MODELS / name)
    assert fresh == committed, "fixtures/models is stale: rerun python fixtures/build_fixtures.py"


@pytest.mark.parametrize("name", ENCODERS + SEQ2SEQ)
def test_fresh_route_references_hold(rebuilt, name):
    """The encoder and encoder-decoder fixtures, rebuilt: tracer holds to every reference (float32, float64, batches)."""
    import test_parity_routes as routes

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
