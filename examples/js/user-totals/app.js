// Exactly-once totals: sums each user's purchases in the processor's state,
// which kcl-host commits in the same write as the checkpoint. After any
// crash, handoff, swap or reshard each user's total is exactly the sum of the
// purchases up to the last checkpoint — never counted twice. The same logic
// as examples/rust/user-totals.
//
// Records are JSON like {"user": "u1", "cents": 1250}, put with the user as
// partition key (a key's state lives with the shard its records go to).
// Amounts are integer cents, summed as BigInts, so sums are exact. A record
// that is not such an event is counted as rejected and logged.
import * as kcl from "./kcl.js";

class UserTotals extends kcl.RecordProcessor {
  initialize(shard) {
    kcl.log.info(`initialize ${shard.shardId} at ${shard.startingCheckpoint}`);
    this.rejected = 0;
  }

  processRecords(batch, checkpointer) {
    const purchases = [];
    for (const record of batch) {
      let cents;
      try {
        cents = record.json().cents;
      } catch {
        cents = undefined;
      }
      if (!Number.isInteger(cents)) {
        this.rejected += 1;
        kcl.log.warn(`record ${record.sequenceNumber} is not a purchase (${this.rejected} rejected so far)`);
        continue;
      }
      purchases.push([record.partitionKey, BigInt(cents)]);
    }
    // Every user's total in one read (the host reads the keys it has not cached).
    const users = [...new Set(purchases.map(([user]) => user))].sort();
    const totals = new Map(users.map((user, i) => [user, 0n]));
    kcl.state.getManyInt(users).forEach((total, i) => totals.set(users[i], total));
    for (const [user, cents] of purchases) totals.set(user, totals.get(user) + cents);
    for (const [user, total] of totals) kcl.state.setInt(user, total);
    // Commits every total with the checkpoint, in one write (however many users).
    try {
      checkpointer.checkpoint();
    } catch (e) {
      throw new kcl.Retryable(String(e));
    }
    kcl.log.info(`committed ${totals.size} totals`);
  }
}

export const recordProcessor = kcl.exportProcessor(UserTotals);
