"""What a forward pass costs, from the Spec alone: multiply-adds, FLOPs, bytes, parameters, KV cache.

Pure arithmetic over the architecture's sizes (no weights, no NumPy arrays, no rich), so `tracer cost`
can answer for a model whose config.json is all there is.
"""

from tracer.cost.counts import Pass, StepCost
from tracer.cost.params import parameter_groups
from tracer.cost.routes import pass_costs

__all__ = ["Pass", "StepCost", "parameter_groups", "pass_costs"]
