"""Change data capture: a DynamoDB table's changes summed into state, run with
``kcl-host run py-table-totals.wasm --dynamodb-table orders``. The same logic
as examples/rust/table-totals: ``total/<pk>`` is the sum of the ``amount`` of
that partition key's items, ``item/<pk>/<sk>`` the amount last seen of each
item; a change whose old image does not match what was last seen is logged
and counted in ``gaps/<pk>``. The state is committed with each checkpoint."""

import logging

import kcl

log = logging.getLogger("table-totals")


class TableTotals(kcl.RecordProcessor):
    def initialize(self, shard):
        log.info("initialize %s of %s at %s", shard.shard_id, shard.stream_name, shard.starting_checkpoint)

    def process_records(self, batch, checkpointer):
        values = {}  # what this batch changed, read once and written once

        def read(key):
            if key not in values:
                values[key] = kcl.state.get_int(key, None)
            return values[key]

        for record in batch:
            change = record.change()
            pk, sk = change.keys["pk"], change.keys["sk"]
            item = f"{pk}/{sk}"
            new = (change.new_image or {}).get("amount", 0)
            old = (change.old_image or {}).get("amount", 0)
            seen = read(f"item/{item}")
            expected_old = None if change.event_name == "INSERT" else old
            if seen != expected_old:
                log.warning("%s of %s at %s: saw %s last, the change says %s", change.event_name, item, change.sequence_number, seen, expected_old)
                values[f"gaps/{pk}"] = (read(f"gaps/{pk}") or 0) + 1
            total = read(f"total/{pk}") or 0
            if change.event_name == "INSERT":
                values[f"total/{pk}"], values[f"item/{item}"] = total + new, new
            elif change.event_name == "MODIFY":
                values[f"total/{pk}"], values[f"item/{item}"] = total + new - old, new
            else:
                values[f"total/{pk}"], values[f"item/{item}"] = total - old, None
        for key, value in values.items():
            if value is None:
                kcl.state.delete(key)
            else:
                kcl.state.set_int(key, value)
        # Commits every change above with the checkpoint, in one write.
        try:
            checkpointer.checkpoint()
        except kcl.CheckpointError as e:
            raise kcl.Retryable(str(e)) from e
        log.info("committed %d changes", len(batch))


RecordProcessor = kcl.export(TableTotals)
