"""Command start-up: the driver JVM with and without its class archive (kraft_replay.spark.classes).

    .venv/bin/python bench/startup.py [--rounds 3]

Ingests the bundled sample node into a scratch lake once, then runs ``kraft-replay sql`` (one query)
and ``kraft-replay replay`` on it as cold CLI processes, alternating without and with the archive
(``KRAFT_REPLAY_CLASS_ARCHIVE=0`` / ``1``) so that both see the same machine; prints each round, the
medians and their ratio. Makes the archive first if it is missing (its time printed).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))


def _cli() -> list[str]:
    exe = Path(sys.executable).with_name("kraft-replay")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "kraft_replay.serve.cli"]


def _timed(args: list[str], archive: bool) -> float:
    env = {**os.environ, "KRAFT_REPLAY_CLASS_ARCHIVE": "1" if archive else "0", "PYTHONPATH": str(ROOT / "lib")}
    t = time.perf_counter()
    proc = subprocess.run([*_cli(), *args], env=env, capture_output=True, text=True, timeout=900)
    took = time.perf_counter() - t
    if proc.returncode:
        sys.exit(f"kraft-replay {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}")
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="alternations of without / with the archive (default 3)")
    args = ap.parse_args()

    from kraft_replay.resources import samples_dir
    from kraft_replay.spark.classes import archive_path
    from kraft_replay.spark.session import find_java_home

    if not archive_path(find_java_home()).is_file():
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "kraft_replay.spark.classes"],
                              env={**os.environ, "PYTHONPATH": str(ROOT / "lib")}, check=False)
        print(f"made the archive in {time.perf_counter() - t:.1f} s (exit {proc.returncode})")
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        lake = str(Path(tmp) / "lake")
        _timed(["--profile", "test", "--lake", lake, "ingest", str(samples_dir() / "node1")], archive=True)
        backup = Path(tmp) / "bronze"
        shutil.copytree(lake, backup)
        times: dict[tuple[str, bool], list[float]] = {}
        for r in range(args.rounds):
            for archive in (False, True):
                shutil.rmtree(lake)
                shutil.copytree(backup, lake)
                replay = _timed(["--profile", "test", "--lake", lake, "replay"], archive)
                sql = _timed(["--profile", "test", "--lake", lake, "sql", "SELECT count(*) FROM partitions"], archive)
                times.setdefault(("replay", archive), []).append(replay)
                times.setdefault(("sql", archive), []).append(sql)
                print(f"round {r + 1} {'with   ' if archive else 'without'} the archive: replay {replay:6.1f} s   "
                      f"sql {sql:5.1f} s", flush=True)
    for cmd in ("sql", "replay"):
        without, with_ = statistics.median(times[(cmd, False)]), statistics.median(times[(cmd, True)])
        print(f"{cmd:6s} (sample node, cold CLI): {with_:.1f} s with the archive, {without:.1f} s without: "
              f"{without / with_:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
