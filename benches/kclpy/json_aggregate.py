"""examples/python/json-aggregate/app.py run by Java KCL's MultiLangDaemon
through amazon-kclpy (its v3 processor interface), for the comparison in
docs/BENCHMARKS.md (`cargo bench -p kcl-host --bench multilang`). The
daemon starts this file once per shard; records arrive as base64 JSON lines
on stdin, so nothing here may print to stdout.
"""

import sys
import types
from pathlib import Path

from amazon_kclpy import kcl
from amazon_kclpy.v3 import processor

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "native"))
from json_aggregate import Record, load_example  # noqa: E402

example = load_example()


class Checkpointer:
    """The example's checkpointer over kclpy's: at the last record delivered."""

    def __init__(self, checkpointer):
        self._checkpointer = checkpointer

    def checkpoint(self, record=None):
        try:
            self._checkpointer.checkpoint()
        except kcl.CheckpointError as e:
            raise sys.modules["kcl"].CheckpointError(str(e)) from e


class JsonAggregate(processor.RecordProcessorBase):
    def initialize(self, initialize_input):
        self.app = example.RecordProcessor()
        self.app.initialize(types.SimpleNamespace(shard_id=initialize_input.shard_id))

    def process_records(self, process_records_input):
        batch = [Record(record.binary_data) for record in process_records_input.records]
        self.app.process_records(batch, Checkpointer(process_records_input.checkpointer))

    def lease_lost(self, lease_lost_input):
        pass

    def shard_ended(self, shard_ended_input):
        shard_ended_input.checkpointer.checkpoint()

    def shutdown_requested(self, shutdown_requested_input):
        shutdown_requested_input.checkpointer.checkpoint()


if __name__ == "__main__":
    kcl.KCLProcess(JsonAggregate()).run()
