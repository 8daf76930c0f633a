// Change data capture: a DynamoDB table's changes summed into state, run with
// `kcl-host run js-table-totals.wasm --dynamodb-table orders`. The same logic
// as examples/rust/table-totals: `total/<pk>` is the sum of the `amount` of
// that partition key's items, `item/<pk>/<sk>` the amount last seen of each
// item; a change whose old image does not match what was last seen is logged
// and counted in `gaps/<pk>`. The state is committed with each checkpoint.
import * as kcl from "./kcl.js";

class TableTotals extends kcl.RecordProcessor {
  initialize(shard) {
    kcl.log.info(`initialize ${shard.shardId} of ${shard.streamName} at ${shard.startingCheckpoint}`);
  }

  processRecords(batch, checkpointer) {
    const values = new Map(); // what this batch changed, read once and written once
    const read = (key) => {
      if (!values.has(key)) {
        values.set(key, kcl.state.getInt(key, null));
      }
      return values.get(key);
    };
    for (const record of batch) {
      const change = record.change();
      const { pk, sk } = change.keys;
      const item = `${pk}/${sk}`;
      const amount = (image) => BigInt(image?.amount ?? 0);
      const [fresh, old] = [amount(change.newImage), amount(change.oldImage)];
      const seen = read(`item/${item}`);
      const expectedOld = change.eventName === "INSERT" ? null : old;
      if (seen !== expectedOld) {
        kcl.log.warn(`${change.eventName} of ${item} at ${change.sequenceNumber}: saw ${seen} last, the change says ${expectedOld}`);
        values.set(`gaps/${pk}`, (read(`gaps/${pk}`) ?? 0n) + 1n);
      }
      const total = read(`total/${pk}`) ?? 0n;
      if (change.eventName === "INSERT") {
        values.set(`total/${pk}`, total + fresh).set(`item/${item}`, fresh);
      } else if (change.eventName === "MODIFY") {
        values.set(`total/${pk}`, total + fresh - old).set(`item/${item}`, fresh);
      } else {
        values.set(`total/${pk}`, total - old).set(`item/${item}`, null);
      }
    }
    for (const [key, value] of values) {
      if (value === null) {
        kcl.state.delete(key);
      } else {
        kcl.state.setInt(key, value);
      }
    }
    // Commits every change above with the checkpoint, in one write.
    try {
      checkpointer.checkpoint();
    } catch (e) {
      throw new kcl.Retryable(e.message);
    }
    kcl.log.info(`committed ${batch.length} changes`);
  }
}

export const recordProcessor = kcl.exportProcessor(TableTotals);
