"""The lazy agents' errors: a loader that failed, a definition that is not an agent."""

from __future__ import annotations

from typing import Literal

from .._core._errors import OperativeError

__all__ = ["AgentContractError", "AsyncDefinitionLoadError"]


class AsyncDefinitionLoadError(OperativeError):
    """A lazy definition's loader raised; the loader's error is ``__cause__``.

    A failed load is not cached: the next run (or generate call) calls the loader again.
    """

    kind: Literal["load"] = "load"


class AgentContractError(OperativeError, TypeError):
    """A lazy loader produced something that is not what it promised.

    A lazy agent's loader must produce a :class:`operative.RunnableAgent` (or a module
    whose ``default`` is one), whose ``open_run`` yields a run handle; a lazy generate's
    loader must produce a ``GenerateFunction``. The load itself succeeded, so it is not
    retried: fix the loader.
    """

    kind: Literal["contract"] = "contract"
    code: str = "INVALID_AGENT_HANDLE"
