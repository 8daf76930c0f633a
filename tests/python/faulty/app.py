"""A Python processor for the SDK's tests: prints each record, raises an
exception it did not plan for at a record whose data is "crash", reports a
record whose data is "fail" as failed, sends a request with a header that
cannot be sent at "bad-header", and checkpoints after each batch."""

import kcl
from kcl import http


class Faulty(kcl.RecordProcessor):
    def process_records(self, batch, checkpointer):
        for record in batch:
            print(f"saw {record.sequence_number} {record.data.decode()}")
            if record.data == b"crash":
                {}["no such key"]
            if record.data == b"fail":
                raise kcl.FailedAt(record, f"asked to fail at {record.sequence_number}")
            if record.data == b"bad-header":
                http.get("http://127.0.0.1:9/", headers=[("bad header", "x")])
        checkpointer.checkpoint()


RecordProcessor = kcl.export(Faulty)
