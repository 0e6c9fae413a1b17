"""The Python API as a caller meets it: repr, docstrings, dir(tracer), Trace as a mapping, flat ids, keep globs,
InputOptions, errors in the library's own terms, the mask lab's reading, and the entry points of generate,
diff and cost (each checked against what the command prints for the same input)."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import tracer
from conftest import ENCODERS, FAMILIES, SEQ2SEQ, VARIANTS, model_dir
from tracer.cli.main import app
from tracer.errors import TracerError
from tracer.trace import Trace

runner = CliRunner()
IDS = [5, 17, 42]


@pytest.fixture(scope="module")
def llama():
    return tracer.load_model(model_dir("llama"))


def cli_json(*args):
    result = runner.invoke(app, [*map(str, args), "--json"], env={"COLUMNS": "120"})
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


# ---------- what a newcomer sees ----------


def test_the_model_says_what_it_is(llama):
    text = repr(llama)
    assert "object at" not in text
    for part in ("'llama'", "llama, decoder", f"{llama.spec.n_layers} layers", f"d_model {llama.spec.d_model}",
                 f"{llama.n_params:,} parameters", "float32"):
        assert part in text, text


def test_the_entry_points_are_documented_and_listed():
    for fn in (tracer.load_model, tracer.Model.run, tracer.Model.generate, tracer.Model.batch, tracer.diff_runs,
               tracer.cost_of, tracer.Trace):
        assert fn.__doc__ and len(fn.__doc__.split()) > 8, fn
    for name in ("load_model", "Trace", "Model", "InputOptions", "diff_runs", "cost_of", "TracerError", "__version__"):
        assert name in dir(tracer)
        getattr(tracer, name)
    with pytest.raises(AttributeError):
        tracer.no_such_thing  # noqa: B018


def test_a_trace_reads_as_a_mapping_of_steps(llama):
    trace = llama.run(ids=[IDS], keep=["logits"])
    assert len(trace) == len(trace.steps) > 10
    assert trace.keys() == [s.name for s in trace.steps] == list(trace.names) == trace.names()
    assert "logits" in trace.names and "no.such.step" not in trace.names
    with pytest.raises(KeyError) as err:
        trace["embed.out"]  # statistics only
    assert "--keep" not in str(err.value) and "keep=['embed.out']" in str(err.value)


def test_a_flat_list_of_ids_is_one_row(llama):
    flat, rows = llama.run(ids=IDS), llama.run(ids=[IDS])
    np.testing.assert_array_equal(flat["logits"], rows["logits"])
    assert flat["input.ids"].tolist() == [IDS]
    np.testing.assert_array_equal(llama.run(ids=np.array(IDS))["logits"], rows["logits"])
    for bad in (5, "5,17", [[5, "x"]], [], [5, [17]]):
        with pytest.raises(TracerError):
            llama.run(ids=bad)


def test_a_keep_glob_that_matches_nothing_is_named(llama):
    with pytest.raises(TracerError, match=r"'nomatch\*' matches no step"):
        llama.run(ids=IDS, keep=["nomatch*"])
    with pytest.raises(TracerError, match=r"'blocks.9.\*'"):
        llama.run(ids=IDS, keep=["logits", "blocks.9.*"])  # the model has 2 blocks
    with pytest.raises(TracerError, match="'nomatch'"):
        llama.generate(ids=IDS, max_new_tokens=2, record=True, keep=["nomatch"])
    assert llama.run(ids=IDS, keep=[]).step("logits").array is None  # keeping nothing on purpose still works
    result = runner.invoke(app, ["run", "--model", str(model_dir("llama")), "--ids", "5,17", "--keep", "nomatch*"])
    assert result.exit_code == 2 and result.output.startswith("error: --keep pattern 'nomatch*' matches no step")


# ---------- typed input options, the library's terms ----------


def test_input_options_and_keywords_are_the_same_run(llama):
    rows = [IDS, [7, 8]]
    a = llama.run(ids=rows, options=tracer.InputOptions(pad_side="left", positions="index"))
    b = llama.run(ids=rows, pad_side="left", positions="index")
    np.testing.assert_array_equal(a["logits"], b["logits"])
    assert a.meta == b.meta and a.meta["pad_side"] == "left"
    c = llama.run(ids=rows, options=tracer.InputOptions(pad_side="right"), pad_side="left")  # keywords win
    assert c.meta["pad_side"] == "left"
    with pytest.raises(TypeError, match="pad_sid"):
        llama.run(ids=rows, pad_sid="left")


@pytest.mark.parametrize("call,words", [
    (lambda m: m.run(ids=IDS, pad_side="middle"), "`pad_side` must be left or right"),
    (lambda m: m.run(ids=IDS, positions="from-mask"), "`positions` must be"),
    (lambda m: m.run(ids=IDS, decoder_ids=[0]), "`decoder_text`/`decoder_ids` apply"),
    (lambda m: m.run(ids=IDS, token_types=[[0, 0, 1]]), "`token_types` apply to the BERT family"),
    (lambda m: m.run(ids=IDS, pair="x"), "text `pair` goes with prompt text"),
    (lambda m: m.run(ids=[[5] * 300]), "`allow_long`"),
    (lambda m: m.generate(ids=IDS, max_new_tokens=0), "`max_new_tokens` must be at least 1"),
    (lambda m: m.generate(ids=IDS, seed=3), "`seed` only matters when sampling"),
])
def test_library_errors_name_parameters_not_flags(llama, call, words):
    with pytest.raises(TracerError) as err:
        call(llama)
    assert words in err.value.message + (err.value.hint or "")
    assert "--" not in err.value.message and "--" not in (err.value.hint or "")


def test_the_command_line_translates_them_to_flags():
    result = runner.invoke(app, ["run", "--model", str(model_dir("llama")), "--ids", "5,17", "--pad-side", "middle"])
    assert result.exit_code == 2 and result.output.splitlines()[0] == "error: --pad-side must be left or right, not 'middle'"
    result = runner.invoke(app, ["generate", "--model", str(model_dir("llama")), "--ids", "5", "--seed", "3"])
    assert result.output.splitlines()[0] == "error: --seed only matters when sampling, and greedy decoding is chosen"


# ---------- the mask lab's reading, the batch built once ----------


def test_run_takes_the_mask_labs_reading(llama, tmp_path, monkeypatch):
    from tracer.checkpoint.tokenizer import Tokenizer
    from tracer.masks.conventions import canonical_mask

    shape = (1, llama.spec.n_heads, 3, 3)
    reading = canonical_mask("hf-2d", "[[1,1,0]]", shape)
    given = llama.run(ids=IDS, mask=reading)
    asked = llama.run(ids=IDS, mask=lambda score_shape: canonical_mask("hf-2d", "[[1,1,0]]", score_shape))
    np.testing.assert_array_equal(given["logits"], asked["logits"])
    assert given.meta["mask"]["source"] == "override" and given.meta["mask"]["read"]["convention"] == "hf-2d"
    weights = given["blocks.0.attn.weights"][0]  # key 2 is padding in hf-2d: no query reads it
    assert np.all(weights[:, :, 2] == 0)
    # the command saves the same trace, and tokenizes its prompts once
    calls = []
    encode = Tokenizer.encode
    monkeypatch.setattr(Tokenizer, "encode", lambda self, *a, **k: calls.append(a) or encode(self, *a, **k))
    out = tmp_path / "m.safetensors"
    n = len(llama.batch("hello").tokens[0])
    literal = "[[" + ",".join(["1"] * (n - 1) + ["0"]) + "]]"
    calls.clear()
    result = runner.invoke(app, ["run", "--model", str(model_dir("llama")), "hello", "--mask", literal,
                                 "--mask-convention", "hf-2d", "--save", str(out), "--only", "top_k"])
    assert result.exit_code == 0, result.output
    assert len(calls) == 1  # was 2: once to learn the batch shape, once to run
    saved = Trace.load(out)
    assert saved.meta["mask"]["read"]["convention"] == "hf-2d"
    api = llama.run("hello", mask=lambda s: canonical_mask("hf-2d", literal, s))
    np.testing.assert_array_equal(saved["logits"], api["logits"])


# ---------- generate, diff, cost from Python: what the commands compute ----------


def test_generate_is_what_the_command_generates(llama):
    gen = llama.generate(ids=IDS, max_new_tokens=4, ignore_eos=True)
    printed = cli_json("generate", "--model", model_dir("llama"), "--ids", "5,17,42", "-n", "4", "--ignore-eos")
    assert [r.new_ids for r in gen.rows] == [r["new_ids"] for r in printed["rows"]]
    sampled = llama.generate(ids=IDS, max_new_tokens=4, temperature=0.9, seed=1, ignore_eos=True)
    printed = cli_json("generate", "--model", model_dir("llama"), "--ids", "5,17,42", "-n", "4", "--ignore-eos",
                       "--temperature", "0.9", "--seed", "1")
    assert sampled.rows[0].new_ids == printed["rows"][0]["new_ids"]
    assert llama.generate(ids=IDS, max_new_tokens=2, record=True).trace.meta["generation"]["steps"] == 2
    with pytest.raises(TracerError, match="pass record=True"):
        llama.generate(ids=IDS, max_new_tokens=2, keep=["logits"])  # would be ignored silently


def test_diff_runs_finds_what_the_command_finds(llama, tmp_path):
    ref = llama.run(ids=IDS)
    same = tracer.diff_runs(ref, llama, ids=IDS)
    assert not same.diverged and len(same.compared) > 10
    bad = llama.run(ids=IDS)
    step = bad.step("blocks.1.attn.out")
    step.array = step.array + 1.0
    ref.save(tmp_path / "a.safetensors")
    bad.save(tmp_path / "b.safetensors")
    found = tracer.diff_runs(tmp_path / "a.safetensors", str(tmp_path / "b.safetensors"))
    printed = cli_json("diff", tmp_path / "a.safetensors", tmp_path / "b.safetensors")
    assert found.diverged and found.first_divergence.name == "blocks.1.attn.out"
    assert printed["first_divergence"]["step"] == found.first_divergence.name
    assert tracer.diff_runs(ref, bad).first_divergence.name == "blocks.1.attn.out"
    with pytest.raises(TracerError, match="two models need an input"):
        tracer.diff_runs(llama, llama)


@pytest.mark.parametrize("name", ["llama", "bert", "t5"])
def test_cost_of_is_what_the_command_counts(name, llama):
    counted = tracer.cost_of(model_dir(name), tokens=[16, 64])
    printed = cli_json("cost", "--model", model_dir(name), "--tokens", "16,64")
    assert json.loads(json.dumps(counted)) == printed
    if name == "llama":
        assert tracer.cost_of(llama, tokens=[16, 64]) == counted
    assert tracer.cost_of(model_dir(name) / "config.json", tokens=[16, 64])["model"] == printed["model"]


@pytest.mark.parametrize("name", FAMILIES + VARIANTS + ENCODERS + SEQ2SEQ)
def test_cost_and_capture_build_the_spec_run_builds(name):
    from tracer.cli.cost_cmd import spec_from_path

    spec = tracer.load_model(model_dir(name)).spec
    assert spec_from_path(model_dir(name))[0] == spec  # pooling included (cost dropped it)
    assert spec_from_path(model_dir(name) / "config.json")[0] == spec


def test_unused_weights_name_the_parameter_in_python_and_the_flag_on_the_command_line(tmp_path):
    import shutil

    folder = tmp_path / "llama"
    shutil.copytree(model_dir("llama"), folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 1}))  # block 1 goes unused
    with pytest.raises(TracerError) as err:
        tracer.load_model(folder)
    assert "`allow_unused` runs anyway" in err.value.hint
    assert tracer.load_model(folder, allow_unused=True).unused_weights
    result = runner.invoke(app, ["run", "--model", str(folder), "--ids", "5,17"])
    assert result.exit_code == 2 and "hint: a config with fewer layers" in result.output
    assert "--allow-unused runs anyway" in result.output
