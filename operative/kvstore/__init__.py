"""Conditional text-value stores: versioned values, all-or-nothing conditional batches.

``MemoryStore`` (one process), ``SqliteStore`` (one file, many processes) and
``PostgresStore`` (one database, many machines; needs ``operative[postgres]``) implement
:class:`ConditionalTextValueStore`. Importing this package never imports psycopg;
the SQL stores (and ``sqlite3``) load when one is first named.
"""

import typing

from ._memory import MemoryStore as MemoryStore
from ._protocol import ANY as ANY
from ._protocol import AnyVersion as AnyVersion
from ._protocol import ConditionalTextValueStore as ConditionalTextValueStore
from ._protocol import ConflictError as ConflictError
from ._protocol import Delete as Delete
from ._protocol import ExpectedVersion as ExpectedVersion
from ._protocol import Operation as Operation
from ._protocol import Put as Put
from ._protocol import Versioned as Versioned

if typing.TYPE_CHECKING:
    from ._postgres import PostgresStore as PostgresStore
    from ._sqlite import SqliteStore as SqliteStore

__all__ = [
    "ANY",
    "AnyVersion",
    "ConditionalTextValueStore",
    "ConflictError",
    "Delete",
    "ExpectedVersion",
    "MemoryStore",
    "Operation",
    "PostgresStore",
    "Put",
    "SqliteStore",
    "Versioned",
]


def __getattr__(name: str) -> object:
    # The SQL stores (and sqlite3) load on first use: a plain run needs only MemoryStore.
    # They are features, while the protocol and MemoryStore are beneath the kernel,
    # which imports this package: import them here, never at module level.
    if name == "PostgresStore":
        from ._postgres import PostgresStore

        value: object = PostgresStore
    elif name == "SqliteStore":
        from ._sqlite import SqliteStore

        value = SqliteStore
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value
