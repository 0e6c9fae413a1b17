"""tracer: how a transformer turns text into a next-token distribution, step by step, in NumPy.

    import tracer
    model = tracer.load_model("fixtures/models/llama")
    trace = model.run("春天来")          # a Trace: trace["logits"], trace.names, trace.save(...)
    model.generate("春天来", max_new_tokens=8)
    tracer.diff_runs(trace, "other.safetensors")   # what `tracer diff` computes
    tracer.cost_of(model)                          # what `tracer cost` counts
"""

__version__ = "0.1.0"

from tracer.errors import TracerError  # noqa: E402

# Lazy so that `import tracer` stays cheap and the CLI starts fast.
_API = ("load_model", "Model", "InputOptions", "Generation", "DiffReport", "MaskOverride", "diff_runs", "cost_of")
__all__ = ["TracerError", "__version__", *_API, "Trace"]


def __getattr__(name):
    if name in _API:
        from tracer import api

        return getattr(api, name)
    if name == "Trace":
        from tracer.trace import Trace

        return Trace
    raise AttributeError(f"module 'tracer' has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *__all__})
