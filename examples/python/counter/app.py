"""Counts records per shard, logs each one, and checkpoints every 100
records and once more when the worker stops. It never checkpoints at a
shard's end: there kcl-host records SHARD_END on its own. The same logic as
examples/rust/counter and examples/go/counter."""

import logging

import kcl

CHECKPOINT_EVERY = 100
log = logging.getLogger("counter")


class Counter(kcl.RecordProcessor):
    def initialize(self, shard):
        log.info("initialize %s from %s", shard.shard_id, shard.starting_checkpoint)
        self.shard_id = shard.shard_id
        self.seen = 0
        self.since_checkpoint = 0

    def process_records(self, batch, checkpointer):
        for record in batch:
            log.info("record %s %s %s", record.sequence_number, record.partition_key, record.data.decode(errors="replace"))
            self.seen += 1
            self.since_checkpoint += 1
            if self.since_checkpoint >= CHECKPOINT_EVERY:
                try:
                    checkpointer.checkpoint(record)
                except kcl.CheckpointError as e:
                    raise kcl.Retryable(str(e)) from e
                self.since_checkpoint = 0

    def shutdown(self, reason, checkpointer):
        log.info("shutdown %s after %d records: %s", self.shard_id, self.seen, reason.value)
        if reason is kcl.ShutdownReason.REQUESTED:
            try:
                checkpointer.checkpoint()
            except kcl.CheckpointError as e:
                raise kcl.Retryable(str(e)) from e


RecordProcessor = kcl.export(Counter)
