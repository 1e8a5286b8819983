"""Helper job: append rows 1000..1300 to ``events`` with txn ("crash-job", 1), but hang (and get
killed) after Spark has written the data files and before the Delta commit.
Usage: commit_crash_job.py LAKE_ROOT MARKER
"""

import sys
import time
from pathlib import Path

from lake_helpers import events
from kraft_replay.lake import Lake
from kraft_replay.spark import get_spark

root, marker = sys.argv[1], sys.argv[2]
spark = get_spark("test")
lake = Lake(root, spark, backend="deltars", target_file_rows=500)


def hang_before_commit(*_args, **_kwargs):
    Path(marker).write_text("staged")
    time.sleep(600)


lake._impl._commit = hang_before_commit
lake.append("events", events(spark, 1000, 1300), txn=("crash-job", 1))
