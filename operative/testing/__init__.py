"""Test kit for agents built on operative (not imported by ``import operative``).

Hypothesis strategies live in :mod:`operative.testing.strategies`, the only module here
that imports hypothesis. The pytest plugin (fixtures ``scripted_model``,
``run_recorder``, ``operative_clock``) loads automatically through its entry point.
"""

from ._faults import Fault as Fault
from ._faults import FaultHit as FaultHit
from ._faults import FaultPlan as FaultPlan
from ._faults import InjectedError as InjectedError
from ._faults import faulty_generate as faulty_generate
from ._faults import faulty_tool as faulty_tool
from ._invariants import check_run_invariants as check_run_invariants
from ._recorder import RunRecorder as RunRecorder
from ._schema_values import SchemaValues as SchemaValues
from ._scripted import HANG as HANG
from ._scripted import ScriptedModel as ScriptedModel
from ._scripted import ScriptExhausted as ScriptExhausted
from ._temporal import TemporalDevServer as TemporalDevServer
from ._temporal import temporal_binary as temporal_binary
from ._temporal import temporal_dev_server as temporal_dev_server
from ._tool_calling import ToolCallingModel as ToolCallingModel

__all__ = [
    "HANG",
    "Fault",
    "FaultHit",
    "FaultPlan",
    "InjectedError",
    "RunRecorder",
    "SchemaValues",
    "ScriptExhausted",
    "ScriptedModel",
    "TemporalDevServer",
    "ToolCallingModel",
    "check_run_invariants",
    "faulty_generate",
    "faulty_tool",
    "temporal_binary",
    "temporal_dev_server",
]
