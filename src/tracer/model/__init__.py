"""A runnable model: the checkpoint opened, its inputs batched, the forward run into a Trace, generation.

    model.py     Model, load_model
    open.py      open_checkpoint: the one place that picks the reader (a folder; GGUF next), one config -> Spec
    options.py   InputOptions: how prompts or ids become the inputs (pad side, pair, decoder input, ...)
    meta.py      RunMeta: a trace's metadata, written by runs and generations alike
    inputs.py    prompts or ids -> a padded batch; how far each stack's positions may go (allow_long)
    keep.py      which steps a run, or a generation, keeps whole by default (memory policy)
    generate.py  decoding with a KV cache; sampling.py how the next token is chosen
    allocator.py glibc settings that let freed arrays be reused (the command's, and the API's, speed)
"""

__all__ = ["Model", "load_model"]


def __getattr__(name):
    # Lazy: a command imports tracer.model.keep without loading the whole model room at start-up.
    if name in __all__:
        from tracer.model import model

        return getattr(model, name)
    raise AttributeError(f"module 'tracer.model' has no attribute {name!r}")
