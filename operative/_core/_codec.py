"""The one place where records become JSON bytes and bytes become records again.

Records are ``msgspec.Struct``s; decoding validates in the same pass as parsing, with one
cached ``msgspec.json.Decoder`` per type. Every way bytes can be bad (truncated, invalid
UTF-8, wrong types, unknown tags, missing fields) surfaces as
:class:`~operative.errors.CorruptRecordError`, naming what was decoded and the JSON path of the
problem; bytes written by a newer operative raise its subclass
:class:`~operative.errors.SchemaVersionError`. msgspec's own exceptions never escape.

The path and the cause come from structure, not from msgspec's wording: only when a
decode fails, the bytes are read again as plain JSON and walked against the type to the
part that fails (:func:`~operative._core._locate.locate_problem`). Success pays nothing.
"""

from __future__ import annotations

import builtins
import functools
from typing import Any, TypeAlias, TypeVar, cast, overload

import msgspec

from ._errors import CorruptRecordError, InvalidArgument, SchemaVersionError

__all__ = [
    "MAX_JSON_DEPTH",
    "check_schema_version",
    "decode",
    "encode",
    "json_problem",
    "json_too_deep",
    "supported_schema_version",
]

MAX_JSON_DEPTH = 100
"""How deeply the JSON a model or a tool produces may nest (arrays and objects).

Tool-call arguments, tool results and response metadata are stored inside records that
are themselves nested; a value nested deeper than this is refused where the loop
receives it (the model reads an ``error`` result instead), so it never reaches storage
or a recursive decoder."""

T = TypeVar("T")
_Data: TypeAlias = bytes | bytearray | memoryview | str

_encoder = msgspec.json.Encoder()

_NEWER = "written by a newer operative"

_OUTSIDE_BRACKETS = bytes(b for b in range(256) if b not in b'[]{}"')


def json_too_deep(data: bytes | str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether JSON text nests arrays and objects deeper than ``limit``.

    Cheap for the common case (a count of opening brackets); otherwise string contents
    are dropped and the innermost bracket pairs peeled ``limit`` times, all with C
    string operations and without recursing. Text that is not valid JSON is judged by
    its brackets alone (unmatched openers count: a recursive decoder would follow them).
    """
    if isinstance(data, str):
        if data.count("[") + data.count("{") <= limit:
            return False
        raw = data.encode("utf-8", "surrogatepass")
    else:
        if data.count(b"[") + data.count(b"{") <= limit:
            return False
        raw = bytes(data)
    # Escaped backslashes, then escaped quotes: what is left of a quote opens or closes
    # a string, so every other piece between quotes is outside the strings.
    raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _OUTSIDE_BRACKETS)
    brackets = b"".join(raw.split(b'"')[::2])
    for peeled in range(limit):
        # One pass removes exactly the innermost pairs (a placeholder keeps the pairs
        # that a removal would make adjacent apart until the pass is over).
        peeled_once = (
            brackets.replace(b"[]", b"-")
            .replace(b"{}", b"-")
            .replace(b"[}", b"-")
            .replace(b"{]", b"-")
        )
        if len(peeled_once) == len(brackets):  # nothing matched: unmatched brackets
            return peeled + brackets.count(b"[") + brackets.count(b"{") > limit
        brackets = peeled_once.replace(b"-", b"")
        if not brackets:
            return False
    return True


def json_problem(value: Any) -> str | None:
    """Why ``value`` cannot be stored and sent as JSON, or ``None`` when it can.

    A value can when msgspec encodes it (str-like or number keys, no integer of more
    than 4,300 digits, no value that contains itself) and it nests no deeper than
    :data:`MAX_JSON_DEPTH`. The answer is a phrase such as ``"not JSON-encodable
    (...)"``, to follow "is" or a colon.
    """
    try:
        data = _encoder.encode(value)
    except RecursionError:
        return f"nested deeper than {MAX_JSON_DEPTH} levels or self-referencing"
    except (TypeError, ValueError, OverflowError) as exc:
        return f"not JSON-encodable ({exc})"
    if json_too_deep(data):
        return f"nested deeper than {MAX_JSON_DEPTH} levels"
    return None


def encode(record: Any) -> bytes:
    """JSON bytes for ``record`` (a Struct, or anything msgspec can encode).

    Raises:
        InvalidArgument: ``record`` holds a value JSON cannot represent.
    """
    try:
        return _encoder.encode(record)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidArgument(
            f"cannot encode {_name_of(type(record))} as JSON: {exc}; records may only hold "
            "JSON-encodable values (str, numbers, bools, None, lists, dicts, Structs)"
        ) from exc


@overload
def decode(data: _Data, type: builtins.type[T], *, what: str = "") -> T: ...
@overload
def decode(data: _Data, type: Any, *, what: str = "") -> Any: ...
def decode(data: _Data, type: Any, *, what: str = "") -> Any:
    """Decode and validate ``data`` as a ``type`` in one pass.

    Args:
        data: JSON, as bytes (or str).
        type: the record type expected, e.g. ``ConversationHistory``.
        what: how to name the record in errors (default: the type's name).

    Raises:
        SchemaVersionError: the record was written by a newer operative.
        CorruptRecordError: the bytes are not a valid ``type`` (truncated, edited, ...).
        InvalidArgument: ``type`` is not a type msgspec can decode, or ``data`` is not
            bytes or str.
    """
    decoder = _decoder(type)
    try:
        return decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise _corrupt(exc, data, type, what or _name_of(type)) from None
    except RecursionError:
        detail = "nested deeper than the decoder can follow"
        raise _corrupt_record(what or _name_of(type), detail) from None
    except TypeError as exc:
        raise InvalidArgument(
            f"decode() takes bytes or str, not {_name_of(builtins.type(data))}"
        ) from exc


def supported_schema_version(type: Any) -> int | None:
    """The schema version this code writes for ``type``, or ``None`` when unversioned.

    It is the default of the Struct's ``schema_version`` field.
    """
    field = _version_field(type)
    return None if field is None else field[1]


def check_schema_version(what: str, found: int, supported: int) -> None:
    """Reject a record version this code does not know; call it from ``__post_init__``.

    Raising there means the check also runs when the record is nested inside another
    one, and :func:`decode` turns it into a :class:`~operative.errors.SchemaVersionError` that
    names the outer record.

    Raises:
        SchemaVersionError: ``found`` is newer than ``supported`` (a ``ValueError``, so
            msgspec reports it as a validation failure and keeps it as the cause).
    """
    if found > supported:
        raise SchemaVersionError(
            f"{_NEWER}: {what} schema version {found}, this version reads up to {supported}; "
            "upgrade operative to read it",
            what=what,
            found=found,
            supported=supported,
        )


@functools.lru_cache(maxsize=512)
def _cached_decoder(type: Any) -> msgspec.json.Decoder[Any]:
    return msgspec.json.Decoder(type)


def _decoder(type: type[T]) -> msgspec.json.Decoder[T]:
    try:
        hash(type)
    except TypeError:  # an unhashable annotation: build a decoder without caching it
        build: Any = msgspec.json.Decoder
    else:
        build = _cached_decoder
    try:
        return cast("msgspec.json.Decoder[T]", build(type))
    except TypeError as exc:
        raise InvalidArgument(f"cannot decode records of type {type!r}: {exc}") from exc


def _version_field(type: Any) -> tuple[str, int] | None:
    """(JSON name, default) of a Struct's ``schema_version`` field, when it has one."""
    if not (isinstance(type, builtins.type) and issubclass(type, msgspec.Struct)):
        return None
    from ._locate import struct_fields  # once per decoded type: the decoders are cached

    for field in struct_fields(type):
        if field.name == "schema_version" and isinstance(field.default, int):
            return field.encode_name, field.default
    return None


def _corrupt(exc: msgspec.DecodeError, data: Any, type: Any, what: str) -> CorruptRecordError:
    """The error for bytes that do not decode, explained from structure, not wording.

    Bytes that are not JSON at all are explained by msgspec's parser. Otherwise the
    plain JSON is walked against ``type`` (:func:`locate_problem`) to the part that fails,
    which gives the path and the cause; a record on that path whose version is newer than
    this code's (or a ``SchemaVersionError`` a ``__post_init__`` raised) makes it a
    :class:`SchemaVersionError`. When the walk cannot tell, msgspec's whole message is
    the explanation and the path is left out.
    """
    from ._locate import Problem, json_check, locate_problem  # only failures pay for it

    problem: Problem | None = None
    nodes: tuple[tuple[Any, Any], ...] = ()
    if isinstance(exc, msgspec.ValidationError):
        try:
            value = msgspec.json.decode(data)
        except msgspec.DecodeError as broken:  # not JSON either: that is the problem
            exc = broken
        except RecursionError:
            pass
        else:
            problem = locate_problem(value, type, json_check)
            nodes = ((type, value),) if problem is None else problem.nodes
    if problem is None:
        detail = str(exc)
    else:
        where = "" if problem.path == "$" else f" (at {problem.path})"
        detail = f"{problem.cause}{where}"
    newer = _newer(nodes, exc if problem is None else problem.error)
    if newer is not None:
        record, found, supported = newer
        return SchemaVersionError(
            f"cannot decode {what}: it was {_NEWER} ({record} schema version {found}; this "
            f"version reads up to {supported}). Upgrade operative to read it; the record "
            "was left as it is.",
            what=what,
            detail=detail,
            found=found,
            supported=supported,
        )
    return _corrupt_record(what, detail)


def _corrupt_record(what: str, detail: str) -> CorruptRecordError:
    return CorruptRecordError(
        f"cannot decode {what}: {detail}. The bytes are not a valid {what}: they were "
        "truncated, edited, or written by other software. Restore the record from a "
        "backup, or delete it.",
        what=what,
        detail=detail,
    )


def _newer(nodes: tuple[tuple[Any, Any], ...], error: BaseException) -> tuple[str, int, int] | None:
    """(record, found, supported) when a newer operative wrote what failed to decode.

    The outermost versioned record on the failing path whose version is above this
    code's decides (a newer writer may have used a tag or field this code does not know:
    that is not corruption); else a ``SchemaVersionError`` raised while building a record.
    """
    for node_type, node_value in nodes:
        field = _version_field(node_type)
        if field is not None and isinstance(node_value, dict):
            found = node_value.get(field[0])
            if type(found) is int and found > field[1]:
                return _name_of(node_type), found, field[1]
    cause = error.__cause__
    if isinstance(cause, SchemaVersionError):
        return cause.what, cause.found, cause.supported
    return None


def _name_of(type: Any) -> str:
    return getattr(type, "__name__", None) or repr(type)
