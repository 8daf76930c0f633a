"""A realistic processor: parses JSON events, keeps purchases, sums their
amounts per user, and checkpoints after each batch. The same logic as
examples/rust/json-aggregate and examples/go/json-aggregate.

Events look like ``{"user": "u1", "kind": "purchase", "amount": 12.5}``.
Records that are not such events are counted as rejected and logged; one
bad record never stops the shard."""

import json
import logging

import kcl

log = logging.getLogger("json-aggregate")


def event(data):
    """The event in ``data``, or ``None`` when it is not one."""
    try:
        value = json.loads(data)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    user, kind, amount = value.get("user"), value.get("kind"), value.get("amount")
    if not isinstance(user, str) or not isinstance(kind, str) or not isinstance(amount, (int, float)) or isinstance(amount, bool):
        return None
    return user, kind, float(amount)


class JsonAggregate(kcl.RecordProcessor):
    def initialize(self, shard):
        self.shard_id = shard.shard_id
        self.per_user = {}
        self.purchases = 0
        self.rejected = 0

    def process_records(self, batch, checkpointer):
        rejected_before = self.rejected
        for record in batch:
            parsed = event(record.data)
            if parsed is None:
                self.rejected += 1
            elif parsed[1] == "purchase":
                user, _, amount = parsed
                self.purchases += 1
                self.per_user[user] = self.per_user.get(user, 0.0) + amount
        if self.rejected > rejected_before:
            log.warning("%d records in this batch were not purchase events", self.rejected - rejected_before)
        try:
            checkpointer.checkpoint()
        except kcl.CheckpointError as e:
            raise kcl.Retryable(str(e)) from e

    def shutdown(self, reason, checkpointer):
        log.info("%s %s: %d purchases, %d rejected, %d users", self.shard_id, reason.value, self.purchases, self.rejected, len(self.per_user))
        for user, total in sorted(self.per_user.items()):
            log.info("total %s %.2f", user, total)


RecordProcessor = kcl.export(JsonAggregate)
