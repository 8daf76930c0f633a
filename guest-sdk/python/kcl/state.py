"""Values kept per key across batches, restarts, handoffs, swaps and
reshards, committed with the checkpoint: after any crash the state is
exactly the effect of the records up to the last checkpoint, each applied
once. ::

    total = kcl.state.get_int(record.partition_key) + cents
    kcl.state.set_int(record.partition_key, total)
    checkpointer.checkpoint()  # commits the totals with the checkpoint

A key belongs to the shard its records go to: use a record's partition key.
Reads see this instance's own changes at once. Integers are kept as decimal
text and JSON as UTF-8 text, as the Rust, Go and JavaScript SDKs keep them,
so processors in any language read each other's state.
"""

from __future__ import annotations

import json
from typing import Any, List, Optional, Sequence, Union

from componentize_py_types import Err
from wit_world.imports import state as _state


class StateError(Exception):
    """A state call did nothing. ``kind`` is ``"not-this-shard"`` (the key's
    MD5 hash is outside the shard's hash-key range: use the record's
    partition key), ``"too-large"`` (a key, value or the changes since the
    last checkpoint: checkpoint more often) or ``"unavailable"`` (try again
    later); the typed readers add ``"not-an-integer"`` and ``"not-json"`` for
    a value that is not what they read."""

    def __init__(self, kind: str, message: str):
        super().__init__(f"state: {message}")
        self.kind = kind


def _call(call, *args):
    try:
        return call(*args)
    except Err as e:
        error = e.value
        if isinstance(error, _state.StateError_NotThisShard):
            raise StateError("not-this-shard", error.value) from None
        if isinstance(error, _state.StateError_TooLarge):
            raise StateError("too-large", error.value) from None
        raise StateError("unavailable", error.value) from None


def get(key: str) -> Optional[bytes]:
    """``key``'s value, or ``None`` when it has none."""
    return _call(_state.get, key)


def get_many(keys: Sequence[str]) -> List[Optional[bytes]]:
    """The values of ``keys``, in order: one crossing into the host, and one
    read for the keys it has not cached."""
    return _call(_state.get_many, list(keys))


def set(key: str, value: Union[bytes, str]) -> None:  # noqa: A001 (the contract's name)
    """Sets ``key`` to ``value``, committed with the next checkpoint."""
    _call(_state.set, key, value.encode() if isinstance(value, str) else bytes(value))


def delete(key: str) -> None:
    """Removes ``key``'s value, committed with the next checkpoint."""
    _call(_state.delete, key)


def _int(key: str, value: Optional[bytes], default: int) -> int:
    if value is None:
        return default
    try:
        return int(value.decode())
    except (UnicodeDecodeError, ValueError):
        raise StateError("not-an-integer", f"the value of {key!r} is {value[:40]!r}, not a decimal integer") from None


def get_int(key: str, default: int = 0) -> int:
    """``key``'s value as an integer (kept as decimal text), ``default`` when it has none."""
    return _int(key, get(key), default)


def get_many_int(keys: Sequence[str], default: int = 0) -> List[int]:
    """The values of ``keys`` as integers, in order, in one read."""
    return [_int(key, value, default) for key, value in zip(keys, get_many(keys))]


def set_int(key: str, value: int) -> None:
    """Sets ``key`` to the integer ``value``, as decimal text."""
    set(key, str(int(value)))


def _json(key: str, value: Optional[bytes], default: Any) -> Any:
    if value is None:
        return default
    try:
        return json.loads(value)
    except ValueError:
        raise StateError("not-json", f"the value of {key!r} is {value[:40]!r}, not JSON") from None


def get_json(key: str, default: Any = None) -> Any:
    """``key``'s value parsed as JSON, ``default`` when it has none."""
    return _json(key, get(key), default)


def get_many_json(keys: Sequence[str], default: Any = None) -> List[Any]:
    """The values of ``keys`` parsed as JSON, in order, in one read."""
    return [_json(key, value, default) for key, value in zip(keys, get_many(keys))]


def set_json(key: str, value: Any) -> None:
    """Sets ``key`` to ``value`` as compact JSON."""
    set(key, json.dumps(value, separators=(",", ":")))
