// {name}: a kcl-host record processor. It reads each record as JSON, sends
// every event on to the output "events" (declare where it goes:
// --output events=kinesis:STREAM, =dynamodb:TABLE, =https://..., =stdout),
// and checkpoints after every batch. kcl-host writes the outputs before the
// checkpoint, so a restart resumes after the last batch whose events were all
// written.
import * as kcl from "./kcl.js";

class Processor extends kcl.RecordProcessor {
  initialize(shard) {
    this.shard = shard.shardId;
    this.records = 0;
    this.notJson = 0;
    kcl.log.info(`starting ${shard.shardId} at ${shard.startingCheckpoint}`);
  }

  processRecords(batch, checkpointer) {
    const events = [];
    for (const record of batch) {
      this.records += 1;
      let event;
      try {
        event = record.json();
      } catch (e) {
        // One bad record must not stop the shard: count it and go on.
        this.notJson += 1;
        kcl.log.warn(`record ${record.sequenceNumber} is not JSON: ${e.message}`);
        continue;
      }
      events.push({ partitionKey: record.partitionKey, data: JSON.stringify(event) });
    }
    // An output that is not declared, or that the target cannot take, is a
    // setup error: the exception fails the shard and says so.
    kcl.send("events", events);
    // A refused checkpoint is worth retrying, not worth failing the shard.
    try {
      checkpointer.checkpoint();
    } catch (e) {
      throw e instanceof kcl.CheckpointError ? new kcl.Retryable(e.message) : e;
    }
  }

  shutdown(reason) {
    // At SHARD_END kcl-host writes the checkpoint itself once this returns.
    kcl.log.info(`${this.shard}: ${this.records} records, ${this.notJson} not JSON; ${reason}`);
  }
}

export const recordProcessor = kcl.exportProcessor(Processor);
