"""Helper job: stream table ``src`` into ``dst`` through the exactly-once sink, one file per batch.

After the sink has committed batch ``KILL_AFTER`` to Delta - and before Spark records the batch as
done in the checkpoint - it writes ``MARKER`` and hangs, so the test can SIGKILL it right there.
Usage: sink_job.py LAKE_ROOT CHECKPOINT MARKER KILL_AFTER BACKEND
"""

import sys
import time
from pathlib import Path

from kraft_replay.lake import Lake
from kraft_replay.spark import get_spark

root, checkpoint, marker, kill_after, backend_name = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
spark = get_spark("test", delta=backend_name == "delta-spark")
lake = Lake(root, spark, backend=backend_name, target_file_rows=10_000)
backend = lake._impl
original_write = backend.write


def write_then_hang(name, df, **kwargs):
    result = original_write(name, df, **kwargs)
    txn = kwargs.get("txn")
    if txn is not None and txn[1] == kill_after:
        Path(marker).write_text(f"{result.version}")
        time.sleep(600)
    return result


backend.write = write_then_hang
query = lake.write_stream(lake.read_stream("src", max_files_per_trigger=1), "dst", checkpoint,
                          trigger={"availableNow": True})
query.awaitTermination()
