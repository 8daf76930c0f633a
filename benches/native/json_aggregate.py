"""The Python json-aggregate example run natively by CPython, for the
runtime comparison in docs/BENCHMARKS.md: the same app.py, its `kcl`
import answered by a stand-in that only has what the example uses, fed the
records of a replay input file in batches like `kcl-host replay`.

    python3 benches/native/json_aggregate.py /tmp/big.jsonl 500

`load_example()` is also how benches/kclpy runs the same app.py under Java
KCL's MultiLangDaemon.
"""

import json
import sys
import time
import types
from pathlib import Path


class Record:
    """What the example reads of a record."""

    def __init__(self, data: bytes):
        self.data = data


def _stand_in_kcl() -> types.ModuleType:
    kcl = types.ModuleType("kcl")

    class RecordProcessor:
        pass

    class CheckpointError(Exception):
        pass

    kcl.RecordProcessor = RecordProcessor
    kcl.CheckpointError = CheckpointError
    kcl.Retryable = Exception
    kcl.export = lambda cls: cls
    return kcl


def load_example() -> types.ModuleType:
    """examples/python/json-aggregate/app.py, imported over the stand-in `kcl`."""
    sys.modules["kcl"] = _stand_in_kcl()
    app_dir = Path(__file__).resolve().parents[2] / "examples/python/json-aggregate"
    sys.path.insert(0, str(app_dir))
    import app  # noqa: E402 - after the stand-in is in place

    return app


class _Checkpointer:
    def checkpoint(self, record=None):
        pass


def main() -> None:
    path, batch_size = sys.argv[1], int(sys.argv[2])
    app = load_example()
    records = [Record(json.loads(line)["data"].encode()) for line in open(path)]
    batches = [records[i : i + batch_size] for i in range(0, len(records), batch_size)]
    processor = app.RecordProcessor()
    processor.initialize(types.SimpleNamespace(shard_id="shardId-000000000000"))
    started = time.perf_counter()
    for batch in batches:
        processor.process_records(batch, _Checkpointer())
    took = time.perf_counter() - started
    print(f"CPython {sys.version.split()[0]}: {len(records)} records in {took * 1000:.1f} ms ({len(records) / took:.0f} records/s)")


if __name__ == "__main__":
    main()
