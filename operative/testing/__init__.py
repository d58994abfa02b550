"""Test kit for agents built on operative (not imported by ``import operative``)."""

from ._invariants import check_run_invariants as check_run_invariants
from ._scripted import HANG as HANG
from ._scripted import ScriptedModel as ScriptedModel
from ._scripted import ScriptExhausted as ScriptExhausted

__all__ = ["HANG", "ScriptExhausted", "ScriptedModel", "check_run_invariants"]
