// Counts records per shard, logs each one, and checkpoints every 100 records
// and once more when the worker stops. It never checkpoints at a shard's end:
// there kcl-host records SHARD_END on its own. The same logic as
// examples/rust/counter, examples/go/counter and examples/python/counter.
import * as kcl from "./kcl.js";

const CHECKPOINT_EVERY = 100;

// A refused checkpoint is worth retrying, not worth failing the shard.
function checkpoint(checkpointer, record) {
  try {
    checkpointer.checkpoint(record);
  } catch (e) {
    throw e instanceof kcl.CheckpointError ? new kcl.Retryable(e.message) : e;
  }
}

class Counter extends kcl.RecordProcessor {
  initialize(shard) {
    kcl.log.info(`initialize ${shard.shardId} from ${shard.startingCheckpoint}`);
    this.shardId = shard.shardId;
    this.seen = 0;
    this.sinceCheckpoint = 0;
  }

  processRecords(batch, checkpointer) {
    for (const record of batch) {
      kcl.log.info(`record ${record.sequenceNumber} ${record.partitionKey} ${record.text()}`);
      this.seen += 1;
      this.sinceCheckpoint += 1;
      if (this.sinceCheckpoint >= CHECKPOINT_EVERY) {
        checkpoint(checkpointer, record);
        this.sinceCheckpoint = 0;
      }
    }
  }

  shutdown(reason, checkpointer) {
    kcl.log.info(`shutdown ${this.shardId} after ${this.seen} records: ${reason}`);
    if (reason === kcl.ShutdownReason.REQUESTED) checkpoint(checkpointer);
  }
}

export const recordProcessor = kcl.exportProcessor(Counter);
