"""tracer: how a transformer turns text into a next-token distribution, step by step, in NumPy."""

__version__ = "0.1.0"

from tracer.errors import TracerError  # noqa: E402

__all__ = ["TracerError", "__version__", "load_model", "Model", "Trace"]


def __getattr__(name):
    # Lazy so that `import tracer` stays cheap and the CLI starts fast.
    if name in ("load_model", "Model"):
        from tracer import api

        return getattr(api, name)
    if name == "Trace":
        from tracer.trace import Trace

        return Trace
    raise AttributeError(name)
