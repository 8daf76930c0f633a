"""Per-user purchase totals per window, exactly once: run it with
``kcl-host run --window 60s --output totals=dynamodb:TABLE`` and each minute's
totals are written to the table as the minute closes, one item per user and
minute. The same logic, and the same items byte for byte, as
examples/rust/window-totals.

Records are JSON like ``{"user": "u1", "cents": 1250}``, put with the user as
partition key. Each record adds its cents to the user's state; when the
window closes, the host hands over the users whose state changed in it:
their totals are sent to the ``totals`` target and their state is deleted
for the next window."""

import json
import logging

import kcl

log = logging.getLogger("window-totals")


class WindowTotals(kcl.RecordProcessor):
    def initialize(self, shard):
        log.info("initialize %s at %s", shard.shard_id, shard.starting_checkpoint)

    def process_records(self, batch, checkpointer):
        added = {}
        for record in batch:
            try:
                cents = int(json.loads(record.data)["cents"])
            except (ValueError, KeyError, TypeError):
                log.warning("record %s is not a purchase; skipped", record.sequence_number)
                continue
            added[record.partition_key] = added.get(record.partition_key, 0) + cents
        users = sorted(added)
        for user, total in zip(users, kcl.state.get_many_int(users)):
            kcl.state.set_int(user, total + added[user])
        try:
            checkpointer.checkpoint()
        except kcl.CheckpointError as e:
            raise kcl.Retryable(str(e)) from e

    def close_window(self, window, keys):
        totals = []
        for user, cents in zip(keys, kcl.state.get_many(keys)):
            if cents is None:
                continue
            item = {
                "user": user,
                "window_start_ms": window.start_ms,
                "window_end_ms": window.end_ms,
                "cents": int(cents),
                "shard_ended": window.shard_ended,
            }
            # Sorted and compact: the same bytes as the Rust example's.
            totals.append((user, json.dumps(item, sort_keys=True, separators=(",", ":"))))
            kcl.state.delete(user)
        if totals:
            kcl.send("totals", totals)
        log.info("window %d..%d: %d totals", window.start_ms, window.end_ms, len(totals))


RecordProcessor = kcl.export(WindowTotals)
