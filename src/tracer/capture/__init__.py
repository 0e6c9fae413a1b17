"""Reference activations from transformers (the only part of tracer that touches torch).

    from tracer.capture import capture
    trace = capture("fixtures/models/llama", ids=[[0, 17, 42]])

Importing this package needs neither torch nor transformers; calling
`capture` without them raises a TracerError that says how to install them.
"""

from tracer.capture.hf import capture

__all__ = ["capture"]
