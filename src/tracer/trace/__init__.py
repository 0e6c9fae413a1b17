"""What a run recorded: ordered steps with arrays, named axes and statistics."""

from tracer.trace.recorder import Recorder
from tracer.trace.stats import tensor_stats
from tracer.trace.trace import Step, Trace

__all__ = ["Recorder", "Step", "Trace", "tensor_stats"]
