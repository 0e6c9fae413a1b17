"""Patch, ablate, isolate: Model.run(patch=, ablate=), tracer run --patch/--ablate, tracer diff --isolate."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import tracer
from conftest import model_dir
from tracer.arch.steps_of import pass_steps
from tracer.cli.default_model import default_model_path
from tracer.cli.main import app
from tracer.errors import TracerError
from tracer.model.isolate import isolate
from tracer.trace import Recorder, Trace

runner = CliRunner()
DEFAULT = default_model_path()
MODELS = [DEFAULT, model_dir("gpt2"), model_dir("qwen2")]  # llama (the default), gpt2, qwen2 (grouped kv heads)
IDS = [[5, 17, 42, 8, 9, 11]]


def _load(path):
    return tracer.load_model(path)


def _downstream(spec, start: str) -> set[str]:
    """Every step computed, directly or not, from `start` (steps_of's data flow)."""
    out = {start}
    for s in pass_steps(spec):
        if any(i in out for i in s.inputs):
            out.add(s.name)
    return out - {start}


def _same(a, b) -> bool:
    return np.array_equal(a, b, equal_nan=True) and a.dtype == b.dtype


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.name)
def test_patching_steps_with_their_own_values_reproduces_the_run_bit_for_bit(path):
    m = _load(path)
    base = m.run(ids=IDS)
    names = ["embed.out", "blocks.0.attn.weights", "blocks.0.mlp.post", "blocks.1.resid_post", "logits"]
    patched = m.run(ids=IDS, patch={n: base[n].copy() for n in names})
    assert patched.names() == base.names()
    for step in base.steps:
        assert _same(base[step.name], patched[step.name]), step.name
    assert patched.meta["intervention"] == [f"patched {n}" for n in names]


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.name)
def test_an_ablated_head_changes_exactly_the_steps_after_it(path):
    m = _load(path)
    layer, head = 1, 1
    z = f"blocks.{layer}.attn.z"
    base = m.run(ids=IDS)
    ablated = m.run(ids=IDS, ablate=f"blocks.{layer}.attn.head.{head}")
    after = _downstream(m.spec, z)
    assert f"blocks.{layer}.attn.out" in after and "logits" in after
    assert np.all(ablated[z][:, head] == 0) and np.abs(base[z][:, head]).max() > 0
    others = [h for h in range(m.spec.n_heads) if h != head]
    assert _same(ablated[z][:, others], base[z][:, others])  # only that head's slice
    position = [s.name for s in base.steps].index(z)
    for i, step in enumerate(base.steps):
        if step.name == z:
            continue
        changed = not _same(base[step.name], ablated[step.name])
        assert changed == (step.name in after), (step.name, "before" if i < position else "after")


@pytest.mark.parametrize("path", MODELS[:2], ids=lambda p: p.name)
def test_a_zeroed_mlp_changes_exactly_the_steps_after_it(path):
    m = _load(path)
    out = "blocks.0.mlp.out"
    base = m.run(ids=IDS)
    zeroed = m.run(ids=IDS, ablate=["blocks.0.mlp"])
    assert not zeroed[out].any() and base[out].any()
    after = _downstream(m.spec, out)
    for step in base.steps:
        if step.name != out:
            assert (not _same(base[step.name], zeroed[step.name])) == (step.name in after), step.name


def test_a_perturbed_patch_moves_the_distribution_and_the_cli_reports_the_change(tmp_path):
    m = _load(DEFAULT)
    base = m.run(text="春天来")
    bad = base["blocks.1.resid_post"] * 0.5
    np.save(tmp_path / "blocks.1.resid_post.npy", bad)  # a .npy dump: one step named after the file
    r = runner.invoke(app, ["run", "春天来", "--patch", f"{tmp_path / 'blocks.1.resid_post.npy'}:blocks.1.resid_post", "--json"])
    assert r.exit_code == 0, r.output
    change = json.loads(r.stdout)["intervention"]
    patched = m.run(text="春天来", patch={"blocks.1.resid_post": bad})
    p, q = base["probs"][0, -1].astype(np.float64), patched["probs"][0, -1].astype(np.float64)
    assert change["first_changed"] == "blocks.1.resid_post" and change["changes"] == ["patched blocks.1.resid_post"]
    assert change["top_before"][0] == int(p.argmax()) and change["top_after"][0] == int(q.argmax())
    by_id = {t["id"]: t for t in change["tokens"]}
    for tid in change["top_before"]:
        assert by_id[tid]["prob_before"] == pytest.approx(p[tid]) and by_id[tid]["prob_after"] == pytest.approx(q[tid])
        assert by_id[tid]["change"] == pytest.approx(q[tid] - p[tid])
    kl = float((p[p > 0] * np.log(p[p > 0] / q[p > 0])).sum())
    assert kl > 0 and change["kl_nats"] == pytest.approx(kl, rel=1e-6)
    screen = runner.invoke(app, ["run", "春天来", "--ablate", "blocks.2.attn.head.0", "--only", "top_k"])
    assert screen.exit_code == 0 and "ablated blocks.2.attn.z[:, 0]" in screen.stdout
    assert "first step that changed: blocks.2.attn.z" in screen.stdout


def test_a_patched_step_is_kept_whole_so_attention_is_not_run_in_blocks():
    rec = Recorder(keep=(), hook=tracer.model.patch.intervention(_load(DEFAULT).spec, ablate="blocks.0.attn.head.0"))
    assert rec.keeps("blocks.0.attn.z") and not rec.keeps("blocks.0.attn.weights")
    assert not Recorder(keep=()).keeps("blocks.0.attn.z")


def _port_with_a_faulty_block(m, tmp_path, block: int, size: float = 0.5):
    """The reference's trace with blocks.{block}.resid_post perturbed, the blocks after it run from there."""
    base = m.run(ids=IDS)
    bad = base[f"blocks.{block}.resid_post"].copy()
    bad[0, 3, 7] += size
    port = m.run(ids=IDS, patch={f"blocks.{block}.resid_post": bad})
    path = tmp_path / "port.safetensors"
    port.save(path)
    return base, port, path


@pytest.mark.parametrize("path,block", [(DEFAULT, 1), (model_dir("gpt2"), 0)], ids=["default", "gpt2"])
def test_isolate_attributes_the_whole_added_error_to_the_faulty_block(tmp_path, path, block):
    m = _load(path)
    base, port, _ = _port_with_a_faulty_block(m, tmp_path, block)
    result = isolate(m, Trace.load(tmp_path / "port.safetensors"), {"ids": IDS}, atol=1e-4, rtol=1e-3)
    rows = {r.block: r for r in result.blocks}
    assert [r.block for r in result.blocks] == ["embed"] + [f"blocks.{i}" for i in range(m.spec.n_layers)]
    assert result.responsible == f"blocks.{block}"
    assert rows[f"blocks.{block}"].added == pytest.approx(0.5, rel=1e-6) and not rows[f"blocks.{block}"].within
    for name, r in rows.items():
        if name != f"blocks.{block}":
            assert r.added == 0.0 and r.within, name  # every other block adds nothing
    last = f"blocks.{m.spec.n_layers - 1}"
    assert rows[last].accumulated > 0  # the accumulated profile still carries the error
    assert rows[last].accumulated == pytest.approx(
        float(np.abs(port[f"{last}.resid_post"].astype(np.float64) - base[f"{last}.resid_post"]).max()))


@pytest.mark.parametrize("name", ["t5", "bart"])
@pytest.mark.parametrize("stack", ["encoder", "decoder"])
def test_isolate_an_encoder_decoder_charges_each_stack_its_own_error(tmp_path, name, stack):
    """A faulty encoder block is named, and the decoder blocks, rerun on the port's encoder output, add nothing;
    a faulty decoder block is named, and no encoder block is charged."""
    m = _load(model_dir(name))
    inputs = {"ids": IDS, "decoder_ids": [[0, 4, 6]]}
    bad_step = f"{stack}.blocks.1.resid_post"
    bad = m.run(**inputs)[bad_step].copy()
    bad[0, 1, 3] += 0.5
    path = tmp_path / "port.safetensors"
    m.run(**inputs, patch={bad_step: bad}).save(path)
    result = isolate(m, Trace.load(path), inputs, atol=1e-4, rtol=1e-3)
    enc, dec = m.spec.encoder.n_layers, m.spec.n_layers
    assert [r.block for r in result.blocks] == (["encoder.embed"] + [f"encoder.blocks.{i}" for i in range(enc)]
                                                + ["decoder.embed"] + [f"decoder.blocks.{i}" for i in range(dec)])
    assert result.responsible == f"{stack}.blocks.1"
    for r in result.blocks:
        if r.block == f"{stack}.blocks.1":
            assert r.added == pytest.approx(0.5, rel=1e-6) and not r.within
        else:
            assert r.added <= 1e-6 and r.within, (r.block, r.added)  # a decoder rerun reads the port's encoder output
    if stack == "encoder":  # the error reached the decoder: its accumulated profile shows it
        assert max(r.accumulated for r in result.blocks if r.block.startswith("decoder.blocks")) > 1e-4


def test_isolate_an_encoder_decoder_on_the_command_line_runs_the_port_s_decoder_input(tmp_path):
    m = _load(model_dir("t5"))
    inputs = {"ids": IDS, "decoder_ids": [[0, 4, 6, 9]]}  # not the default decoder input (the start token alone)
    bad = m.run(**inputs)["decoder.blocks.0.resid_post"].copy()
    bad[0, 2, 5] -= 0.25
    path = tmp_path / "port.safetensors"
    m.run(**inputs, patch={"decoder.blocks.0.resid_post": bad}).save(path)
    j = runner.invoke(app, ["diff", "--isolate", str(model_dir("t5")), str(path), "--json"])
    assert j.exit_code == 1, j.output
    data = json.loads(j.stdout)
    assert data["responsible"] == "decoder.blocks.0"
    assert [b["block"] for b in data["blocks"] if not b["within"]] == ["decoder.blocks.0"]


def test_isolate_reads_a_port_under_its_own_names_through_a_map(tmp_path):
    """--names: a port's own names (here `emb`, `layer{i}/out`) mapped onto the residual steps --isolate reads."""
    from safetensors.numpy import save_file

    m = _load(DEFAULT)
    _, port, _ = _port_with_a_faulty_block(m, tmp_path, 1)
    dump = {"emb": port["embed.out"], **{f"layer{i}/out": port[f"blocks.{i}.resid_post"] for i in range(m.spec.n_layers)}}
    save_file({k: np.ascontiguousarray(v) for k, v in dump.items()}, str(tmp_path / "own.safetensors"))
    (tmp_path / "map.json").write_text(json.dumps({"emb": "embed.out", "layer{i}/out": "blocks.{i}.resid_post"}))
    r = runner.invoke(app, ["diff", "--isolate", str(DEFAULT), str(tmp_path / "own.safetensors"), "--ids",
                            ",".join(map(str, IDS[0])), "--names", str(tmp_path / "map.json"), "--json"])
    assert r.exit_code == 1, r.output
    assert json.loads(r.stdout)["responsible"] == "blocks.1"


def test_isolate_an_encoder_decoder_needs_both_stacks_and_the_encoder_output(tmp_path):
    m = _load(model_dir("t5"))
    path = tmp_path / "partial.safetensors"
    m.run(ids=IDS, decoder_ids=[[0, 4, 6]], keep=("decoder.*",)).save(path)
    with pytest.raises(TracerError, match="lacks encoder.embed.out") as err:
        isolate(m, Trace.load(path), {"ids": IDS, "decoder_ids": [[0, 4, 6]]}, atol=1e-4, rtol=1e-3)
    assert "encoder.final_norm.out" in err.value.hint


def test_isolate_on_the_command_line(tmp_path):
    m = _load(DEFAULT)
    _, _, path = _port_with_a_faulty_block(m, tmp_path, 1)
    r = runner.invoke(app, ["diff", "--isolate", str(DEFAULT), str(path)])
    assert r.exit_code == 1, r.output
    assert "responsible: blocks.1" in r.stdout
    j = runner.invoke(app, ["diff", "--isolate", str(DEFAULT), str(path), "--json"])
    data = json.loads(j.stdout)
    assert data["responsible"] == "blocks.1" and [b["within"] for b in data["blocks"]] == [True, True, False, True]
    clean = tmp_path / "clean.safetensors"
    m.run(ids=IDS).save(clean)
    ok = runner.invoke(app, ["diff", "--isolate", str(DEFAULT), str(clean), "--json"])
    assert ok.exit_code == 0 and json.loads(ok.stdout)["responsible"] is None


def _error(r) -> str:
    assert r.exit_code == 2, r.output
    lines = [line for line in r.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in r.output
    return lines[0]


def test_bad_step_names_shapes_and_ablations_are_one_error_line(tmp_path):
    m = _load(DEFAULT)
    trace = tmp_path / "t.safetensors"
    m.run(ids=[[5, 17, 42]]).save(trace)
    run = lambda *a: runner.invoke(app, ["run", "--ids", "5,17,42,8", *a])  # noqa: E731
    assert "has no step blocks.0.resid_pst" in _error(run("--patch", f"{trace}:blocks.0.resid_pst"))
    assert "shape (1, 3, 128)" in _error(run("--patch", f"{trace}:blocks.0.resid_post"))
    assert "computes nothing from it" in _error(run("--patch", f"{trace}:blocks.0.attn.mask"))
    assert "write FILE:STEP" in _error(run("--patch", str(trace)))
    assert "3 blocks" in _error(run("--ablate", "blocks.3.mlp"))
    assert "4 heads" in _error(run("--ablate", "blocks.0.attn.head.4"))
    assert "not blocks.L.attn.head.H" in _error(run("--ablate", "blocks.0.attn"))
    stats_only = tmp_path / "s.safetensors"
    m.run(ids=[[5, 17, 42, 8]], keep=("logits",)).save(stats_only)
    assert "only statistics" in _error(run("--patch", f"{stats_only}:embed.out"))
    with pytest.raises(TracerError, match="did you mean blocks.0.resid_post"):
        m.run(ids=IDS, patch={"blocks.0.resid_pots": np.zeros(1)})
    no_resid = tmp_path / "n.safetensors"
    m.run(ids=IDS, keep=("logits", "embed.out", "input.*")).save(no_resid)
    assert "lacks blocks.0.resid_post" in _error(runner.invoke(app, ["diff", "--isolate", str(DEFAULT), str(no_resid)]))


def test_encoder_decoder_cross_attention_ablation_leaves_the_encoder_alone():
    m = _load(model_dir("t5"))
    kw = dict(ids=[[5, 17, 42, 8]], decoder_ids=[[0, 5, 7]])
    base, ablated = m.run(**kw), m.run(**kw, ablate="decoder.blocks.0.cross_attn.head.1")
    after = _downstream(m.spec, "decoder.blocks.0.cross_attn.z")
    assert all(n.startswith("decoder.") or n in ("logits", "probs") for n in after)
    for step in base.steps:
        if step.name != "decoder.blocks.0.cross_attn.z":
            assert (not _same(base[step.name], ablated[step.name])) == (step.name in after), step.name


def test_a_model_without_a_head_reports_the_pooled_vector_change():
    r = runner.invoke(app, ["run", "-m", str(model_dir("bert")), "the cat", "a dog", "--ablate", "blocks.0.mlp", "--json"])
    assert r.exit_code == 0, r.output
    change = json.loads(r.stdout)["intervention"]
    m = _load(model_dir("bert"))
    a = m.run(["the cat", "a dog"])["pooled"][0].astype(np.float64)
    b = m.run(["the cat", "a dog"], ablate="blocks.0.mlp")["pooled"][0].astype(np.float64)
    assert change["pooled"]["max_abs_change"] == pytest.approx(np.abs(b - a).max())
    cosine = a @ b / np.linalg.norm(a) / np.linalg.norm(b)
    assert cosine < 0.9999 and change["pooled"]["cosine"] == pytest.approx(cosine)


@pytest.mark.parametrize("name", ["default", "t5", "qwen2_moe", "gemma2"])
def test_the_engine_computes_on_from_every_patchable_step(name):
    """The hook works because the engine uses what the recorder hands back; a step whose returned value it
    dropped would be patched in the trace and nowhere else. Each float step, perturbed, moves the output."""
    from tracer.model.patch import _NOT_PATCHABLE

    m = _load(DEFAULT if name == "default" else model_dir(name))
    kw = dict(ids=[[3, 5, 7, 9]], **({"decoder_ids": [[0, 4, 6]]} if m.route == "encoder-decoder" else {}))
    base = m.run(**kw)
    for step in base.steps:
        if step.array is None or step.array.dtype.kind != "f" or _NOT_PATCHABLE.search(step.name):
            continue
        moved = m.run(**kw, keep=("probs",), patch={step.name: step.array * 1.5 + 0.1})
        assert not np.array_equal(moved["probs"], base["probs"]), step.name


def test_isolate_refuses_the_step_wise_flags(tmp_path):
    m = _load(DEFAULT)
    _, _, path = _port_with_a_faulty_block(m, tmp_path, 1)
    assert "--verdict and --isolate" in _error(runner.invoke(app, ["diff", "--isolate", str(DEFAULT), str(path), "--verdict", "kl"]))
    assert "takes the reference model first" in _error(runner.invoke(app, ["diff", "--isolate", str(path), str(DEFAULT)]))
