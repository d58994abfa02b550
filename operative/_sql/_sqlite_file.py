"""Refusing a file SQLite cannot use as a database, before anything writes to it.

A text file, random bytes, a file too short to be a database, a truncated or damaged
one: each is a :class:`~operative.errors.DatabaseFileError` naming the file and what to do, and
the file is left exactly as it was (operative never converts, repairs or truncates a file
it cannot read).
"""

from __future__ import annotations

import os
import sqlite3

from .._core._errors import OperativeError

__all__ = [
    "DatabaseFileError",
    "check_database_file",
    "database_file_error",
    "raise_for_database_file",
]


class DatabaseFileError(OperativeError):
    """A database file is not an SQLite database, or is damaged (truncated, malformed).

    Raised by every SQLite-backed store, engine and run store on the first use that meets
    the file. ``path`` names the file, ``detail`` what SQLite reported. The file is left
    exactly as it was: operative never converts, repairs or truncates a file it cannot
    read. Check the path; restore a damaged file from a backup (or try ``sqlite3 FILE
    .recover``); or move it away to start a new database there.
    """

    def __init__(self, message: str, *, path: str, detail: str = "") -> None:
        super().__init__(message)
        self.path = path
        self.detail = detail


_CORRUPT = 11  # SQLITE_CORRUPT: "database disk image is malformed"
_NOTADB = 26  # SQLITE_NOTADB: "file is not a database"


def database_file_error(path: str, detail: str, *, damaged: bool) -> DatabaseFileError:
    """The error for a file SQLite cannot use as a database; the file is left as it is."""
    if damaged:
        what = "is a damaged SQLite database"
        todo = (
            f"restore it from a backup (or try `sqlite3 {path} .recover`), or move it away "
            "to start a new database there"
        )
    else:
        what = "is not an SQLite database"
        todo = "check the path, or move the file away to start a new database there"
    return DatabaseFileError(
        f"{path!r} {what} ({detail}); it was left untouched: {todo}",
        path=path,
        detail=detail,
    )


def check_database_file(conn: sqlite3.Connection, path: str) -> None:
    """Raise :class:`DatabaseFileError` unless ``path`` (opened as ``conn``) is an SQLite
    database or empty; call it before anything may write to the file.

    It only reads, in one read transaction (the file cannot change under it): the header
    and the schema, and the page count, which SQLite reports as 0 for a short file it
    does not recognise. A database not yet in WAL mode is about to be converted, which
    writes to it, so it must first pass ``PRAGMA quick_check`` (once per file: a WAL
    database is not checked again).
    """
    try:
        conn.execute("BEGIN")
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            (pages,) = conn.execute("PRAGMA page_count").fetchone()
            if pages == 0:
                if os.path.getsize(path) > 0:
                    raise database_file_error(path, "it is too short", damaged=False)
                return
            (mode,) = conn.execute("PRAGMA journal_mode").fetchone()
            if mode in (b"wal", "wal"):
                return
            problems = [row[0] for row in conn.execute("PRAGMA quick_check(5)").fetchall()]
            if problems not in ([b"ok"], ["ok"]):
                detail = "; ".join(
                    p.decode("utf-8", "replace") if isinstance(p, bytes) else str(p)
                    for p in problems
                )
                raise database_file_error(path, f"quick_check: {detail}", damaged=True)
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")  # it only read
    except sqlite3.DatabaseError as exc:
        raise_for_database_file(path, exc)
        raise


def raise_for_database_file(path: str, exc: sqlite3.DatabaseError) -> None:
    """Raise :class:`DatabaseFileError` from ``exc`` when SQLite found the file is not a
    database or is damaged; return otherwise."""
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    if code in (_CORRUPT, _NOTADB):
        raise database_file_error(path, f"SQLite: {exc}", damaged=code == _CORRUPT) from exc
