"""tracer: how a transformer turns text into a next-token distribution, step by step, in NumPy.

    import tracer
    model = tracer.load_model("fixtures/models/llama")
    trace = model.run("春天来")          # a Trace: trace["logits"], trace.names, trace.save(...)
    model.generate("春天来", max_new_tokens=8)
    tracer.diff_runs(trace, "other.safetensors")   # what `tracer diff` computes
    tracer.cost_of(model)                          # what `tracer cost` counts
"""

__version__ = "0.1.0"


def _interrupted_while_loading(_signum, _frame):  # Ctrl-C before the command runs: nothing written yet
    import os

    os.write(2, b"interrupted\n")
    os._exit(130)


def _started_as_the_command() -> bool:
    """The `tracer` console script imports this package first: from its first line, Ctrl-C is one line and exit
    130 (tracer.cli.main takes over once the command runs). A notebook or a library import is left alone, and
    so is a SIGINT a parent process chose to ignore."""
    import os
    import signal
    import sys

    if os.path.basename(sys.argv[0] if sys.argv else "") != "tracer":
        return False
    if not _SIGINT_IGNORED:
        signal.signal(signal.SIGINT, _interrupted_while_loading)
    return True


def _sigint_ignored() -> bool:
    import signal

    return signal.getsignal(signal.SIGINT) == signal.SIG_IGN


_SIGINT_IGNORED = _sigint_ignored()  # as the process started (e.g. a background job of a script): kept so
_started_as_the_command()

from tracer.threads import park_blas_threads  # noqa: E402  (before anything loads NumPy: see tracer.threads)

park_blas_threads()

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
