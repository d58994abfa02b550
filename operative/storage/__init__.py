"""Conditional text-value stores: versioned values, all-or-nothing conditional batches."""

from .._errors import ConflictError as ConflictError
from ._memory import MemoryStore as MemoryStore
from ._protocol import ANY as ANY
from ._protocol import AnyVersion as AnyVersion
from ._protocol import ConditionalTextValueStore as ConditionalTextValueStore
from ._protocol import Delete as Delete
from ._protocol import ExpectedVersion as ExpectedVersion
from ._protocol import Operation as Operation
from ._protocol import Put as Put
from ._protocol import Versioned as Versioned

__all__ = [
    "ANY",
    "AnyVersion",
    "ConditionalTextValueStore",
    "ConflictError",
    "Delete",
    "ExpectedVersion",
    "MemoryStore",
    "Operation",
    "Put",
    "Versioned",
]
