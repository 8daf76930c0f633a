// Per-user purchase totals per window, exactly once: run it with
// `kcl-host run --window 60s --output totals=dynamodb:TABLE` and each
// minute's totals are written to the table as the minute closes, one item per
// user and minute. The same logic, and the same items byte for byte, as
// examples/rust/window-totals.
//
// Records are JSON like {"user": "u1", "cents": 1250}, put with the user as
// partition key. Each record adds its cents to the user's state (BigInts:
// exact); when the window closes, the host hands over the users whose state
// changed in it: their totals are sent to the `totals` target and their state
// is deleted for the next window.
import * as kcl from "./kcl.js";

class WindowTotals extends kcl.RecordProcessor {
  initialize(shard) {
    kcl.log.info(`initialize ${shard.shardId} at ${shard.startingCheckpoint}`);
  }

  processRecords(batch, checkpointer) {
    const added = new Map();
    for (const record of batch) {
      let cents;
      try {
        cents = record.json().cents;
      } catch {
        cents = undefined;
      }
      if (!Number.isInteger(cents)) {
        kcl.log.warn(`record ${record.sequenceNumber} is not a purchase; skipped`);
        continue;
      }
      added.set(record.partitionKey, (added.get(record.partitionKey) ?? 0n) + BigInt(cents));
    }
    const users = [...added.keys()].sort();
    kcl.state.getManyInt(users).forEach((total, i) => kcl.state.setInt(users[i], total + added.get(users[i])));
    try {
      checkpointer.checkpoint();
    } catch (e) {
      throw new kcl.Retryable(String(e));
    }
  }

  closeWindow(window, keys) {
    const totals = [];
    kcl.state.getMany(keys).forEach((cents, i) => {
      if (cents === undefined) return;
      const user = keys[i];
      // Keys in sorted order, compact: the same bytes as the Rust example's
      // (the cents spliced in as digits, exact past 2^53).
      const head = JSON.stringify({ cents: 0, shard_ended: window.shardEnded, user, window_end_ms: Number(window.endMs), window_start_ms: Number(window.startMs) });
      totals.push({ partitionKey: user, data: head.replace('"cents":0', `"cents":${kcl.state.getInt(user)}`) });
      kcl.state.delete(user);
    });
    if (totals.length) kcl.send("totals", totals);
    kcl.log.info(`window ${window.startMs}..${window.endMs}: ${totals.length} totals`);
  }
}

export const recordProcessor = kcl.exportProcessor(WindowTotals);
