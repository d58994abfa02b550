"""Deprecated: the key-value stores are :mod:`operative.kvstore` now.

``operative.storage`` was renamed ``operative.kvstore`` so that it cannot be mistaken
for :mod:`operative.runstore`, the run store (which was ``operative.store``). For one
release the names of ``operative.kvstore`` can still be imported from here: each import
warns (``DeprecationWarning``) with the path to import it from instead.
"""

from __future__ import annotations

import warnings
from typing import Any

from . import kvstore as _new


def __getattr__(name: str) -> Any:
    if name.startswith("_") or name not in _new.__all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"operative.storage is deprecated and goes away in the next release: import {name} "
        "from operative.kvstore instead",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(_new, name)


def __dir__() -> list[str]:
    return sorted(_new.__all__)
