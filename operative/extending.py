"""The extension seam, for those who write features: what a feature attaches to a run.

A user of operative never needs this module; a feature (a budget, a journal, a tracer,
your own) does. See ``docs/extending.md``.
"""

from ._core._control import RunControl as RunControl
from ._core._extension import Answered as Answered
from ._core._extension import Execute as Execute
from ._core._extension import Extension as Extension
from ._core._extension import Feature as Feature
from ._core._extension import Parked as Parked
from ._core._extension import Recorded as Recorded
from ._core._extension import ResumePoint as ResumePoint
from ._core._extension import Settle as Settle
from ._core._extension import SpendSource as SpendSource
from ._core._extension import Step as Step
from ._core._extension import Switch as Switch
from ._core._options import RunConfig as RunConfig

__all__ = [
    "Answered",
    "Execute",
    "Extension",
    "Feature",
    "Parked",
    "Recorded",
    "ResumePoint",
    "RunConfig",
    "RunControl",
    "Settle",
    "SpendSource",
    "Step",
    "Switch",
]
