"""{name}: a kcl-host record processor. It reads each record as JSON, sends
every event on to the output "events" (declare where it goes:
--output events=kinesis:STREAM, =dynamodb:TABLE, =https://..., =stdout),
and checkpoints after every batch. kcl-host writes the outputs before the
checkpoint, so a restart resumes after the last batch whose events were all
written."""

import json
import logging

import kcl

log = logging.getLogger("{name}")


class Processor(kcl.RecordProcessor):
    def initialize(self, shard):
        self.shard = shard.shard_id
        self.records = 0
        self.not_json = 0
        log.info("starting %s at %s", shard.shard_id, shard.starting_checkpoint)

    def process_records(self, batch, checkpointer):
        events = []
        for record in batch:
            self.records += 1
            try:
                event = json.loads(record.data)
            except ValueError as e:
                # One bad record must not stop the shard: count it and go on.
                self.not_json += 1
                log.warning("record %s is not JSON: %s", record.sequence_number, e)
                continue
            events.append((record.partition_key, json.dumps(event, separators=(",", ":"))))
        # An output that is not declared, or that the target cannot take, is
        # a setup error: the exception fails the shard and says so.
        kcl.send("events", events)
        # A refused checkpoint is worth retrying, not worth failing the shard.
        try:
            checkpointer.checkpoint()
        except kcl.CheckpointError as e:
            raise kcl.Retryable(str(e)) from e

    def shutdown(self, reason, checkpointer):
        # At SHARD_END kcl-host writes the checkpoint itself once this returns.
        log.info("%s: %d records, %d not JSON; %s", self.shard, self.records, self.not_json, reason.value)


RecordProcessor = kcl.export(Processor)
