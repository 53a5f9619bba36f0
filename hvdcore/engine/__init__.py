"""Background engine: negotiation (coordinator), fusion and execution, timeline."""

from hvdcore.engine.handle import Handle
from hvdcore.engine.loop import Engine
from hvdcore.engine.messages import Meta, ReduceOp, Response
from hvdcore.engine.timeline import Timeline

__all__ = ["Engine", "Handle", "Meta", "ReduceOp", "Response", "Timeline"]
