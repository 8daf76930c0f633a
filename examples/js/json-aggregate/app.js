// A realistic processor: parses JSON events, keeps purchases, sums their
// amounts per user, and checkpoints after each batch. The same logic as
// examples/rust/json-aggregate, examples/go/json-aggregate and
// examples/python/json-aggregate.
//
// Events look like {"user": "u1", "kind": "purchase", "amount": 12.5}.
// Records that are not such events are counted as rejected and logged; one
// bad record never stops the shard.
import * as kcl from "./kcl.js";

/** The event in `record`, or undefined when it is not one. */
function event(record) {
  let value;
  try {
    value = record.json();
  } catch {
    return undefined;
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) return undefined;
  const { user, kind, amount } = value;
  if (typeof user !== "string" || typeof kind !== "string" || typeof amount !== "number") return undefined;
  return { user, kind, amount };
}

class JsonAggregate extends kcl.RecordProcessor {
  initialize(shard) {
    this.shardId = shard.shardId;
    this.perUser = new Map();
    this.purchases = 0;
    this.rejected = 0;
  }

  processRecords(batch, checkpointer) {
    const rejectedBefore = this.rejected;
    for (const record of batch) {
      const parsed = event(record);
      if (parsed === undefined) {
        this.rejected += 1;
      } else if (parsed.kind === "purchase") {
        this.purchases += 1;
        this.perUser.set(parsed.user, (this.perUser.get(parsed.user) ?? 0) + parsed.amount);
      }
    }
    if (this.rejected > rejectedBefore) {
      kcl.log.warn(`${this.rejected - rejectedBefore} records in this batch were not purchase events`);
    }
    try {
      checkpointer.checkpoint();
    } catch (e) {
      throw e instanceof kcl.CheckpointError ? new kcl.Retryable(e.message) : e;
    }
  }

  shutdown(reason) {
    kcl.log.info(`${this.shardId} ${reason}: ${this.purchases} purchases, ${this.rejected} rejected, ${this.perUser.size} users`);
    for (const [user, total] of [...this.perUser].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
      kcl.log.info(`total ${user} ${total.toFixed(2)}`);
    }
  }
}

export const recordProcessor = kcl.exportProcessor(JsonAggregate);
