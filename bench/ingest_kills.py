"""An ingest run killed after every one of its commits: the whole loop of
``tests/ingest/test_ingest_atomic.py::test_killed_at_every_commit_readers_see_the_published_state_and_the_rerun_repairs``.

    flock /tmp/kraft-heavy.lock .venv/bin/python bench/ingest_kills.py

The suite kills a real ``kraft-replay ingest`` process after the run's first commit and after its last
(right before the publish); this runs the same test with ``KRAFT_REPLAY_KILL_POINTS=all``: killed after
each of the five commits, readers see the published state every time, and the rerun repairs. Prints the
test's outcome and wall time; exits with pytest's code. Nothing here asserts a speed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST = ("tests/ingest/test_ingest_atomic.py::"
        "test_killed_at_every_commit_readers_see_the_published_state_and_the_rerun_repairs")


def main() -> int:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", TEST],
                          cwd=ROOT, env={**os.environ, "KRAFT_REPLAY_KILL_POINTS": "all"})
    print(f"ingest killed after every commit (5 points): {'passed' if proc.returncode == 0 else 'FAILED'} "
          f"in {time.perf_counter() - t0:.1f} s")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
