"""Checking what a store is asked to write, and decoding what it reads back.

Shared by the SQL stores: a malformed batch is :class:`~operative.InvalidArgument`
before anything runs, and a row that cannot be read is a
:class:`~operative.errors.CorruptRecordError` naming its key, never skipped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .._core._errors import CorruptRecordError, InvalidArgument
from ._protocol import ANY, AnyVersion, ConflictError, Delete, Operation, Put, Versioned

__all__ = [
    "check_limit",
    "check_operations",
    "check_text",
    "check_versions",
    "decode_row",
    "decode_text",
    "decode_version",
    "prefix_upper_bound",
]

_MAX_CHAR = 0x10FFFF


def prefix_upper_bound(prefix: str) -> str | None:
    """The smallest string above every string that starts with ``prefix`` (code-point
    order, which is also UTF-8 byte order), or ``None`` when there is none."""
    stripped = prefix.rstrip(chr(_MAX_CHAR))
    if not stripped:
        return None
    last = ord(stripped[-1]) + 1
    if 0xD800 <= last <= 0xDFFF:  # surrogates cannot be stored; skip past them
        last = 0xE000
    return stripped[:-1] + chr(last)


def check_operations(operations: Sequence[Operation], *, forbid_nul: bool = False) -> None:
    """Raise :class:`InvalidArgument` for anything a store cannot apply."""
    seen: set[str] = set()
    for op in operations:
        if not isinstance(op, Put | Delete):
            raise InvalidArgument(f"a batch holds Put and Delete operations, not {op!r}")
        check_text("key", op.key, forbid_nul=forbid_nul)
        if isinstance(op, Put):
            check_text("value", op.value, forbid_nul=forbid_nul)
        expected = op.expected_version
        if not (
            expected is None
            or isinstance(expected, AnyVersion)
            or (isinstance(expected, int) and not isinstance(expected, bool))
        ):
            raise InvalidArgument(f"expected_version must be an int, None or ANY, not {expected!r}")
        if op.key in seen:
            raise InvalidArgument(f"key {op.key!r} appears twice in one batch; merge them")
        seen.add(op.key)


def check_text(what: str, text: object, *, forbid_nul: bool = False) -> None:
    """A key or value must be a ``str`` that encodes as UTF-8."""
    if not isinstance(text, str):
        raise InvalidArgument(f"a {what} must be a str, not {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(f"{what} {text[:80]!r} is not valid Unicode text: {exc}") from None
    if forbid_nul and "\x00" in text:
        raise InvalidArgument(
            f"{what} {text[:80]!r} contains a NUL character, which PostgreSQL text cannot hold"
        )


def check_limit(limit: object) -> int | None:
    """A page size: ``None`` or an int >= 0."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
        raise InvalidArgument(f"limit must be None or an int, not {limit!r}")
    if limit is not None and limit < 0:
        raise InvalidArgument(f"limit must be None or >= 0, not {limit!r}")
    return limit


def check_versions(operations: Sequence[Operation], current: Mapping[str, int]) -> None:
    """Raise :class:`ConflictError` for the first operation whose condition fails."""
    for op in operations:
        expected = op.expected_version
        if expected is ANY:
            continue
        actual = current.get(op.key)
        if expected != actual:
            raise ConflictError(op.key, expected=expected, actual=actual)


def corrupt(where: str, key: object, problem: str) -> CorruptRecordError:
    """The error for a row that cannot be read; the row itself is left untouched."""
    return CorruptRecordError(
        f"the value stored under key {key!r} in {where} cannot be read: {problem}; "
        "the row is left as it is: repair or delete it",
        what=f"stored value of key {key!r}",
        detail=problem,
    )


def decode_version(where: str, key: object, version: object) -> int:
    """A stored version is an int of at least 1."""
    if type(version) is not int or version < 1:
        raise corrupt(where, key, f"its version {version!r} is not a positive integer")
    return version


def decode_text(where: str, key: object, what: str, raw: object) -> str:
    """Stored text comes back as bytes (or str) and must be UTF-8."""
    if isinstance(raw, str):
        return raw
    if isinstance(raw, bytes):
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise corrupt(where, key, f"its {what} is not valid UTF-8 ({exc})") from None
    raise corrupt(where, key, f"its {what} is {type(raw).__name__} {raw!r}, not text")


def decode_row(where: str, row: Sequence[object]) -> Versioned:
    """A ``(key, value, version)`` row."""
    raw_key, raw_value, raw_version = row
    key = decode_text(where, raw_key, "key", raw_key)
    return Versioned(
        key=key,
        value=decode_text(where, key, "value", raw_value),
        version=decode_version(where, key, raw_version),
    )
