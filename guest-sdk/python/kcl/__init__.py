"""Write kcl-host record processors in Python.

A processor serves one Kinesis shard at a time. kcl-host owns the shard's
lifecycle — leases, fetching, retries, and the SHARD_END checkpoint once a
closed shard is done — so a processor only handles records and says how far
it got::

    import kcl

    class Counter(kcl.RecordProcessor):
        def initialize(self, shard):
            self.seen = 0

        def process_records(self, batch, checkpointer):
            self.seen += len(batch)
            checkpointer.checkpoint()

    RecordProcessor = kcl.export(Counter)

The module-level name ``RecordProcessor`` is what the component exports
(componentize-py looks it up). Build with ``scripts/build-python.sh``.

Errors: an exception from a method is fatal (the host drops the instance and
starts a fresh one from the last checkpoint, after a backoff; the traceback
is in the log) unless it is ``Retryable`` (the host delivers the same batch
again) or ``FailedAt`` (the records before the failed one are done; the
batch comes again from it). ``print`` and the ``logging`` module both reach
the host's log, tagged with the shard.

DynamoDB streams: ``record.change()`` gives a table's change (``kcl.change``).

State: ``kcl.state.get_int(key)``, ``set_int``, ``get_json``/``set_json``,
``get_many_int`` (one read for many keys) and the raw ``get``/``set``/``delete``
keep values per key, committed in the same write as the checkpoint.
"""

from __future__ import annotations

import enum
import logging
import traceback
from dataclasses import dataclass
from typing import Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import checkpointer as _checkpointer
from wit_world.imports import log as _log
from wit_world.imports import output as _output
from wit_world.imports import store as _store
from wit_world.imports import kcl_processor_types as _types

from . import state  # kcl.state: values per key, committed with the checkpoint
from . import change  # kcl.change: DynamoDB stream records (record.change())

__all__ = [
    "Batch", "CheckpointError", "Checkpointer", "FailedAt", "Record", "RecordProcessor", "Retryable", "SendError",
    "ShardInfo", "ShutdownReason", "export", "send", "variable",
]


class Record:
    """One Kinesis record, as the producer wrote it: a view into its batch's
    columns, each field read when it is first used (a processor that reads
    only ``data`` pays for nothing else)."""

    __slots__ = ("_batch", "index")

    def __init__(self, batch: "Batch", index: int):
        self._batch = batch
        #: The record's index in its batch.
        self.index = index

    @property
    def data(self) -> bytes:
        """The payload."""
        c, i = self._batch._c, self.index
        ends = c.data_ends
        return c.data[ends[i - 1] if i else 0 : ends[i]]

    @property
    def partition_key(self) -> str:
        return self._batch._keys(self.index)

    @property
    def sequence_number(self) -> str:
        return self._batch._sequence_numbers(self.index)

    @property
    def sub_sequence_number(self) -> Optional[int]:
        """Set for a user record de-aggregated from a KPL record."""
        c, i = self._batch._c, self.index
        return c.sub_sequence_numbers[i] if c.flags[i] & Batch._AGGREGATED else None

    @property
    def approximate_arrival_ms(self) -> int:
        """When Kinesis accepted the record, in milliseconds since the Unix epoch."""
        return self._batch._c.arrival_timestamps_ms[self.index]

    @property
    def explicit_hash_key(self) -> Optional[str]:
        """``None`` when the producer set none."""
        c, i = self._batch._c, self.index
        return self._batch._hash_keys(i) if c.flags[i] & Batch._EXPLICIT_HASH_KEY else None

    def change(self) -> "change.Change":
        """The change this record carries, when it was read from a DynamoDB
        stream (``kcl.change``); ``kcl.change.NotAChange`` otherwise."""
        return change.change_of(self.data, self.sequence_number)

    def __eq__(self, other) -> bool:
        fields = ("data", "partition_key", "sequence_number", "sub_sequence_number", "approximate_arrival_ms", "explicit_hash_key", "index")
        return isinstance(other, Record) and all(getattr(self, f) == getattr(other, f) for f in fields)

    def __hash__(self) -> int:
        return hash((self.sequence_number, self.sub_sequence_number))

    def __repr__(self) -> str:
        return f"Record(sequence_number={self.sequence_number!r}, partition_key={self.partition_key!r}, data={self.data!r})"


def _span(ends: Sequence[int], i: int) -> Tuple[int, int]:
    return (ends[i - 1] if i else 0), ends[i]


def _string_column(text: str, ends: Sequence[int]):
    """Record ``i``'s string of a column. The host cuts at UTF-8 byte
    offsets, so a column with any non-ASCII text is cut as bytes."""
    if text.isascii():
        return lambda i: text[slice(*_span(ends, i))]
    encoded = text.encode()
    return lambda i: encoded[slice(*_span(ends, i))].decode()


class Batch(Sequence[Record]):
    """Records in shard order, read from the host's columns as they are used."""

    _AGGREGATED = 1
    _EXPLICIT_HASH_KEY = 2

    def __init__(self, columns: _types.Batch):
        self._c = columns
        self._keys = _string_column(columns.partition_keys, columns.partition_key_ends)
        self._sequence_numbers = _string_column(columns.sequence_numbers, columns.sequence_number_ends)
        self._hash_keys = _string_column(columns.explicit_hash_keys, columns.explicit_hash_key_ends)
        #: How far this batch is behind the tip of the shard (0 when caught up).
        self.millis_behind_latest: int = columns.millis_behind_latest

    def __len__(self) -> int:
        return len(self._c.data_ends)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [Record(self, j) for j in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        return Record(self, i)

    def __iter__(self) -> Iterator[Record]:
        return map(Record, [self] * len(self), range(len(self)))


@dataclass(frozen=True)
class ShardInfo:
    """The shard a processor serves and where delivery starts."""

    stream_name: str
    shard_id: str
    #: The last checkpointed sequence number, or TRIM_HORIZON, LATEST or
    #: AT_TIMESTAMP for a shard never checkpointed.
    starting_checkpoint: str
    starting_sub_sequence_number: Optional[int]


@dataclass(frozen=True)
class Window:
    """A window of arrival times (``kcl-host run --window``), in ms since the
    Unix epoch: ``start_ms`` is in it, ``end_ms`` the first after it;
    ``shard_ended`` when it closed early because the shard ended (a split or
    a merge: the children go on with the rest of the window)."""

    start_ms: int
    end_ms: int
    shard_ended: bool


class ShutdownReason(enum.Enum):
    """Why a processor is being shut down."""

    #: Every record was delivered; the host writes SHARD_END once shutdown returns.
    SHARD_END = "ShardEnd"
    #: Another worker holds the lease; checkpoints are refused.
    LEASE_LOST = "LeaseLost"
    #: The worker is stopping or swapping the processor: the last chance to checkpoint.
    REQUESTED = "Requested"


class Retryable(Exception):
    """Transient: the host delivers the same batch again after a backoff."""


class FailedAt(Exception):
    """The batch failed at ``record``: the records before it are done (the
    host checkpoints them) and the batch comes again from it."""

    def __init__(self, record: Union[Record, int], reason: str):
        super().__init__(reason)
        self.index = record if isinstance(record, int) else record.index
        self.reason = reason


class CheckpointError(Exception):
    """The host refused a checkpoint; nothing was recorded. ``kind`` is
    ``"lease-lost"``, ``"invalid-sequence-number"`` or ``"unavailable"``
    (the lease table could not be written: try again later)."""

    def __init__(self, kind: str, message: str):
        super().__init__(f"checkpoint refused ({kind}){': ' + message if message else ''}")
        self.kind = kind


def _checkpoint_result(call, *args) -> None:
    try:
        call(*args)
    except Err as e:
        error = e.value
        if isinstance(error, _types.CheckpointError_LeaseLost):
            raise CheckpointError("lease-lost", "this worker no longer holds the shard's lease") from None
        if isinstance(error, _types.CheckpointError_InvalidSequenceNumber):
            raise CheckpointError("invalid-sequence-number", error.value) from None
        raise CheckpointError("unavailable", error.value) from None


class Checkpointer:
    """Records how far the shard has been processed."""

    def checkpoint(self, record: Optional[Record] = None) -> None:
        """At ``record`` (of the batch being processed, or one delivered
        earlier), or at the last record delivered so far (in ``shutdown``:
        of the last batch that returned)."""
        if record is None:
            _checkpoint_result(_checkpointer.checkpoint)
        else:
            _checkpoint_result(_checkpointer.checkpoint_at, record.sequence_number, record.sub_sequence_number)

    def checkpoint_at(self, sequence_number: str, sub_sequence_number: Optional[int] = None) -> None:
        """At a sequence number (and sub-sequence number, inside a KPL
        aggregate) delivered to this instance, as Java KCL's
        ``checkpoint(sequenceNumber, subSequenceNumber)``."""
        _checkpoint_result(_checkpointer.checkpoint_at, sequence_number, sub_sequence_number)

    def checkpoint_at_index(self, index: int) -> None:
        """At record ``index`` of the batch being processed: nothing to parse on the host's side."""
        _checkpoint_result(_checkpointer.checkpoint_at_index, index)


class RecordProcessor:
    """Handles one shard, from ``initialize`` to ``shutdown``. Subclass it
    and export the subclass with ``RecordProcessor = kcl.export(MyClass)``."""

    def initialize(self, shard: ShardInfo) -> None:
        """Called once before any records."""

    def process_records(self, batch: Batch, checkpointer: Checkpointer) -> None:
        """Called with each batch, in order."""
        raise NotImplementedError("a processor implements process_records")

    def shutdown(self, reason: ShutdownReason, checkpointer: Checkpointer) -> None:
        """Called once at the end; checkpoint here when ``reason`` is REQUESTED."""

    def close_window(self, window: Window, keys: List[str]) -> None:
        """With ``kcl-host run --window``: ``window`` closed for this shard, with
        the state keys its records changed. Read their state, send results to
        an output, delete what the next window should not see; the host writes
        the outputs and commits the state changes like a checkpoint."""
        raise NotImplementedError(
            f"window [{window.start_ms}, {window.end_ms}) closed, but this processor does not implement RecordProcessor.close_window"
        )


class SendError(Exception):
    """The host took none of the records: an unknown target, or a record that does not fit it."""


OutputRecord = Union[Tuple[str, bytes], Tuple[str, bytes, Optional[str]]]


def send(target: str, records: Iterable[OutputRecord]) -> None:
    """Queues ``(partition_key, data[, explicit_hash_key])`` records for the
    output ``target`` (declared with ``kcl-host run --output NAME=URI``).
    They are written before any checkpoint that covers the record being
    processed."""
    data, data_ends, keys, key_ends, hashes, hash_ends = bytearray(), [], [], [], [], []
    key_len = hash_len = 0
    for record in records:
        key, payload = record[0], record[1]
        hash_key = record[2] if len(record) > 2 else None
        data += payload.encode() if isinstance(payload, str) else payload
        data_ends.append(len(data))
        keys.append(key)
        key_len += len(key.encode())
        key_ends.append(key_len)
        hashes.append(hash_key or "")
        hash_len += len((hash_key or "").encode())
        hash_ends.append(hash_len)
    columns = _output.Records(bytes(data), data_ends, "".join(keys), key_ends, "".join(hashes), hash_ends)
    try:
        _output.send(target, columns)
    except Err as e:
        raise SendError(e.value.value) from None


def variable(key: str) -> Optional[str]:
    """The operator's variable ``key`` (``kcl-host run --var KEY=VALUE``), or ``None``."""
    try:
        return _store.get(key)
    except Err as e:
        raise RuntimeError(f"reading variable {key!r} failed: {e.value}") from None


class _HostLog(logging.Handler):
    """The ``logging`` module's records, into the host's log."""

    _LEVELS = [
        (logging.ERROR, _log.Level.ERROR),
        (logging.WARNING, _log.Level.WARN),
        (logging.INFO, _log.Level.INFO),
        (logging.DEBUG, _log.Level.DEBUG),
    ]

    def emit(self, record: logging.LogRecord) -> None:
        level = next((host for py, host in self._LEVELS if record.levelno >= py), _log.Level.TRACE)
        _log.log(level, self.format(record))


logging.basicConfig(level=logging.INFO, handlers=[_HostLog()], format="%(message)s")

_processor: Optional[RecordProcessor] = None
_checkpointer_view = Checkpointer()


def _outcome(call) -> None:
    """Runs ``call``, turning its exception into the processor-error the host expects."""
    try:
        call()
    except Retryable as e:
        raise Err(_types.ProcessorError_Retryable(str(e))) from None
    except FailedAt as e:
        raise Err(_types.ProcessorError_FailedAt(_types.RecordFailure(e.index, e.reason))) from None
    except Err:
        raise
    except Exception as e:  # noqa: BLE001 - every other exception is fatal, with its traceback
        _log.log(_log.Level.ERROR, "".join(traceback.format_exception(e)).rstrip())
        raise Err(_types.ProcessorError_Fatal(f"{type(e).__name__}: {e}")) from None


def export(processor_class: type) -> type:
    """The component's export for ``processor_class``: assign it to the
    module-level name ``RecordProcessor`` of the app module."""

    class _Export(exports.RecordProcessor):
        def initialize(self, shard: _types.ShardInfo) -> None:
            global _processor
            instance = processor_class()
            info = ShardInfo(shard.stream_name, shard.shard_id, shard.starting_checkpoint, shard.starting_sub_sequence_number)
            _outcome(lambda: instance.initialize(info))
            _processor = instance

        def process_records(self, batch: _types.Batch) -> None:
            processor = _started("process-records")
            _outcome(lambda: processor.process_records(Batch(batch), _checkpointer_view))

        def shutdown(self, reason: _types.ShutdownReason) -> None:
            global _processor
            processor = _started("shutdown")
            _processor = None
            _outcome(lambda: processor.shutdown(_REASONS[reason], _checkpointer_view))

    _Export.__name__ = _Export.__qualname__ = "RecordProcessor"
    return _Export


class _WindowExport(exports.Window):
    """The component's ``window`` export: calls the shard's processor's
    ``close_window``. ``kcl_component`` names it ``Window`` for componentize-py."""

    def close(self, window, keys: List[str]) -> None:
        processor = _started("close")
        _outcome(lambda: processor.close_window(Window(window.start_ms, window.end_ms, window.shard_ended), list(keys)))


_REASONS = {
    _types.ShutdownReason.SHARD_END: ShutdownReason.SHARD_END,
    _types.ShutdownReason.LEASE_LOST: ShutdownReason.LEASE_LOST,
    _types.ShutdownReason.REQUESTED: ShutdownReason.REQUESTED,
}


def _started(call: str) -> RecordProcessor:
    if _processor is None:
        raise Err(_types.ProcessorError_Fatal(f"{call} was called before initialize"))
    return _processor
