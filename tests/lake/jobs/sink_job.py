"""Helper job: for each lake given, stream its table ``src`` into ``dst`` through the exactly-once sink,
one file per batch - all the lakes' queries at once, in this one process (one JVM for the backends).

After a lake's sink has committed batch ``KILL_AFTER`` to Delta - and before Spark records the batch as
done in that lake's checkpoint - it writes the lake's ``MARKER`` and hangs, so the test can SIGKILL the
process once every lake's query is right there.
Usage: sink_job.py KILL_AFTER (BACKEND LAKE_ROOT CHECKPOINT MARKER)...
"""

import sys
import time
from pathlib import Path

from kraft_replay.lake import Lake
from kraft_replay.spark import get_spark

kill_after, specs = int(sys.argv[1]), sys.argv[2:]
assert specs and len(specs) % 4 == 0, sys.argv
spark = get_spark("test", delta="delta-spark" in specs[::4])
queries = []
for backend_name, root, checkpoint, marker in zip(*[iter(specs)] * 4):
    lake = Lake(root, spark, backend=backend_name, target_file_rows=10_000)
    backend = lake._impl

    def write_then_hang(name, df, *, _write=backend.write, _marker=marker, **kwargs):
        result = _write(name, df, **kwargs)
        txn = kwargs.get("txn")
        if txn is not None and txn[1] == kill_after:
            Path(_marker).write_text(f"{result.version}")
            time.sleep(600)
        return result

    backend.write = write_then_hang
    queries.append(lake.write_stream(lake.read_stream("src", max_files_per_trigger=1), "dst", checkpoint,
                                     trigger={"availableNow": True}))
for query in queries:
    query.awaitTermination()
