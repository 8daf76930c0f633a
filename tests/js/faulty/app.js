// A JavaScript processor for the SDK's tests: logs each record with
// console.log, throws an exception it did not plan for at a record whose data
// is "crash", rejects its promise at "reject" (processRecords is async),
// reports a record whose data is "fail" as failed, and checkpoints after each batch.
import * as kcl from "./kcl.js";

class Faulty extends kcl.RecordProcessor {
  async processRecords(batch, checkpointer) {
    for (const record of batch) {
      console.log(`saw ${record.sequenceNumber} ${record.text()}`);
      if (record.text() === "crash") {
        const missing = undefined;
        missing.field = 1;
      }
      if (record.text() === "reject") {
        await Promise.resolve();
        throw new RangeError(`rejected at ${record.sequenceNumber}`);
      }
      if (record.text() === "fail") throw new kcl.FailedAt(record, `asked to fail at ${record.sequenceNumber}`);
    }
    checkpointer.checkpoint();
  }
}

export const recordProcessor = kcl.exportProcessor(Faulty);
