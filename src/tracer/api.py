"""The Python API: load a checkpoint folder, run text or ids, get a Trace.

    import tracer
    model = tracer.load_model("fixtures/models/llama")
    trace = model.run("春天来")                      # or ids=[[5, 17, 42]]
    trace["logits"].shape                            # (1, pos, vocab)
    trace.save("out.safetensors")
"""

from tracer.engine.forward import MaskOverride
from tracer.model.model import Model, load_model
from tracer.trace import Trace

__all__ = ["MaskOverride", "Model", "Trace", "load_model"]
