"""Exactly-once totals: sums each user's purchases in the processor's state,
which kcl-host commits in the same write as the checkpoint. After any crash,
handoff, swap or reshard each user's total is exactly the sum of the
purchases up to the last checkpoint — never counted twice. The same logic as
examples/rust/user-totals.

Records are JSON like ``{"user": "u1", "cents": 1250}``, put with the user
as partition key (a key's state lives with the shard its records go to).
Amounts are integer cents, so sums are exact. A record that is not such an
event is counted as rejected and logged."""

import json
import logging

import kcl

log = logging.getLogger("user-totals")


class UserTotals(kcl.RecordProcessor):
    def initialize(self, shard):
        log.info("initialize %s at %s", shard.shard_id, shard.starting_checkpoint)
        self.rejected = 0

    def process_records(self, batch, checkpointer):
        purchases = []
        for record in batch:
            try:
                purchases.append((record.partition_key, int(json.loads(record.data)["cents"])))
            except (ValueError, KeyError, TypeError):
                self.rejected += 1
                log.warning("record %s is not a purchase (%d rejected so far)", record.sequence_number, self.rejected)
        # Every user's total in one read (the host reads the keys it has not cached).
        users = sorted({user for user, _ in purchases})
        totals = dict(zip(users, kcl.state.get_many_int(users)))
        for user, cents in purchases:
            totals[user] += cents
        for user, total in totals.items():
            kcl.state.set_int(user, total)
        # Commits every total with the checkpoint, in one write (however many users).
        try:
            checkpointer.checkpoint()
        except kcl.CheckpointError as e:
            raise kcl.Retryable(str(e)) from e
        log.info("committed %d totals", len(totals))


RecordProcessor = kcl.export(UserTotals)
