"""Replay benchmark: the generator's scenario (bronze tables) replayed into every silver table with
Spark, and the sequential replay (``kraft_replay.replay.sequential``, the peer) producing the same
tables from the same rows, in the same run.

    flock /tmp/kraft-heavy.lock .venv/bin/python bench/replay.py [--scenario medium] [--cut 1000000]
        [--no-sequential] [--driver-memory 8g] [--data-dir DIR] [--copy-files] [--cli]
        [--backends deltars,delta-spark] [--floor]

The Spark replay runs in a child process (its JVM is gone before the sequential replay runs: at 10M
records the sequential replay's own tables take most of the machine's memory; it writes its closed
versions to Arrow files along the way, ``SPILL_ROWS``, or they would not fit in 24 GiB). The
scenario's bronze tables are generated once (``kraft-replay generate``) into a lake cached in
``--data-dir`` and copied for each run: rewritten with Spark (partitioned by cluster), or with
``--copy-files`` their files copied as generated (also partitioned by offset bucket; ~20 min less
at 100M). ``--cut N`` replays only offsets < N. Prints Spark wall time (plan + every silver
table computed and written to a fresh lake, as ``kraft-replay replay`` does), records/s, peak RSS of
the process tree (driver JVM + Python workers, sampled from /proc), the sequential replay's wall time
on the same rows and the ratio. Speed is measured here, never asserted in tests. Targets (issue 49):
10M in <= 90 s and >= 10x the sequential replay; 100M records (``large``) in < 10 min with peak RSS < 8 GiB.

``--cli`` also times ``kraft-replay replay`` as users run it: a cold CLI process with the profile's own
driver memory on a copy of the whole bronze lake (``broker_progress`` too, so ``broker_applied`` and
``cache_lag`` are written after the silver tables), each of its progress lines stamped with the seconds
since the process started, and its peak RSS. The targets hold for this figure too.

``--floor`` also times, in the Spark child after the replay (its JVM warm), what any Spark replay of
these rows must do besides applying the rules: the log's batches aggregated from every row's
position, and the partition events (the bulk of the records) shuffled by partition into the
replay's tasks, handed to Python on Arrow batches and written there as Parquet, with no rule
applied. The sequential replay's time over that floor bounds the ratio any Spark replay could reach
on this machine.

``--backends deltars,delta-spark`` replays the same bronze rows into a lake of each backend, one child
after the other, and prints native / embedded (issue 48: the embedded default stays unless native
measures better here).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _mem(pid: int) -> tuple[int, int, int]:
    """``(VmRSS, RssAnon, VmSize)`` of ``pid`` in bytes. Anonymous is heap and other private memory,
    not the pages of files it has mapped, which the kernel can drop and which RSS counts too."""
    got = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "RssAnon:", "VmSize:")):
                got[line.split(":")[0]] = int(line.split()[1]) * 1024
    return got.get("VmRSS", 0), got.get("RssAnon", 0), got.get("VmSize", 0)


def tree_sum(procs: dict[int, tuple[int, tuple[int, int, int]]], root: int) -> tuple[int, int, list[tuple[int, int, int]]]:
    """Resident and anonymous bytes of ``root`` and its descendants, from ``{pid: (ppid, (rss, anon,
    size))}``, and each process's own ``(pid, rss, anon)``. A child whose memory figures all equal its
    parent's (:func:`_same_memory`) shares the parent's memory and counts 0: a process being started runs
    in its parent's address space until it execs (``posix_spawn`` / ``vfork``, as the JVM starts every
    child process; or shares its pages copy-on-write after a ``fork``), and ``/proc`` shows it the
    parent's whole RSS — summed, a 9 GiB JVM starting a shell command read as 18 GiB for a moment."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    total, anon, todo, each = 0, 0, [root], []
    while todo:
        p = todo.pop()
        ppid, mem = procs.get(p, (0, (0, 0, 0)))
        shared = p != root and _same_memory(mem, procs.get(ppid, (0, (0, 0, 0)))[1])
        r, a = (0, 0) if shared else mem[:2]
        total, anon = total + r, anon + a
        each.append((p, r, a))
        todo.extend(children.get(p, []))
    return total, anon, each


def _same_memory(a: tuple[int, int, int], b: tuple[int, int, int]) -> bool:
    """Two processes' ``(rss, anon, size)`` are one address space's: their anonymous and virtual sizes
    equal within 1 % (the two are read one after the other while the parent's other threads go on
    allocating). Not the resident size: a ``fork``'s child gets the parent's anonymous pages and mappings
    at once, but its file-backed pages only as it touches them again — a child not yet scheduled
    read ~6 MiB (1.2 %) below its parent under the test suite's load, and counted whole."""
    return a[0] > 0 and all(abs(x - y) <= max(y // 100, 4 << 20) for x, y in zip(a[1:], b[1:], strict=True))


def _tree_rss(pid: int) -> tuple[int, int, list[tuple[int, int, int]]]:
    """:func:`tree_sum` of ``pid`` and its descendants, read from /proc."""
    return tree_sum(processes(), pid)


def processes() -> dict[int, tuple[int, tuple[int, int, int]]]:
    """``{pid: (ppid, (rss, anon, size))}`` of every process, from /proc."""
    procs: dict[int, tuple[int, tuple[int, int, int]]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            procs[int(d)] = (ppid, _mem(int(d)))
        except (OSError, ValueError, IndexError):
            continue
    return procs


def _role(pid: int) -> str:
    """What a process of the tree is, for the peak's breakdown: the JVM, a Python worker, this driver."""
    if pid == os.getpid():
        return "python driver"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().split(b"\0")
    except OSError:
        return "gone"
    name = os.path.basename(cmd[0].decode(errors="replace")) if cmd and cmd[0] else "?"
    if name == "java":
        return "driver JVM"
    line = b" ".join(cmd)
    if b"pyspark.daemon" in line or b"pyspark.worker" in line:
        return "python worker"
    words = [w.decode(errors="replace") for w in cmd if w]
    if "kraft_replay.serve.cli" in words or any(w.endswith("/kraft-replay") for w in words):
        sub = next((w for w in words[1:] if not w.startswith("-") and "/" not in w and w != "kraft_replay.serve.cli"), "?")
        return f"kraft-replay {sub}"
    if "-m" in words[:-1]:  # e.g. PySpark's streaming source runner
        return words[words.index("-m") + 1].rsplit(".", 1)[-1]
    return name


class PeakRss:
    """Peak resident memory of this process tree, sampled every 0.5 s: ``peak`` (all of RSS) and
    ``peak_anon`` (anonymous memory only: RSS also counts the pages of files a process maps, e.g.
    Spark's blocks read back from disk, which are page cache the kernel can reclaim). ``children_only``:
    this process left out (a bench that only stands in for the world around the processes it measures)."""

    def __init__(self, children_only: bool = False) -> None:
        self.children_only = children_only
        self.peak = 0
        self.peak_anon = 0
        self.at_peak: list[tuple[str, int, int]] = []  # (role, rss, anon) of each process at the peak
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            rss, anon, each = _tree_rss(os.getpid())
            if self.children_only:
                me = next((e for e in each if e[0] == os.getpid()), (0, 0, 0))
                rss, anon, each = rss - me[1], anon - me[2], [e for e in each if e[0] != os.getpid()]
            if rss > self.peak:
                self.at_peak = [(_role(p), r, a) for p, r, a in each if r]
            self.peak, self.peak_anon = max(self.peak, rss), max(self.peak_anon, anon)
            self._stop.wait(0.5)

    def __enter__(self) -> "PeakRss":
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


def bronze_lake(data_dir: Path, scenario: str) -> Path:
    lake = data_dir / f"bronze-{scenario}"
    if not (lake / "metadata_log").exists():
        t = time.perf_counter()
        shutil.rmtree(lake, ignore_errors=True)
        env = {**os.environ, "PYTHONPATH": str(ROOT / "lib")}
        subprocess.run([sys.executable, "-m", "kraft_replay.serve.cli", "--lake", str(lake), "generate",
                        "--scenario", scenario], check=True, env=env, cwd=ROOT)
        print(f"generated scenario {scenario} into {lake} in {time.perf_counter() - t:.1f}s", flush=True)
    return lake


def spark_phase(args: argparse.Namespace, src: Path, out_root: Path) -> dict:
    """Copy the (cut) bronze tables into ``out_root`` and replay them there with Spark; returns the
    figures. Runs in a child process so that its JVM is gone before the sequential replay runs."""
    from pyspark.sql import functions as F

    from kraft_replay.lake import Lake
    from kraft_replay.replay.run import run_replay
    from kraft_replay.spark import get_spark

    backend = args.backend_phase or "deltars"
    spark = get_spark(args.profile, delta=backend == "delta-spark", **{"spark.driver.memory": args.driver_memory})
    bronze = Lake(str(src), spark, backend="deltars")
    out = Lake(str(out_root), spark, backend=backend)
    cut = (lambda df: df.where(F.col("offset") < args.cut)) if args.cut else (lambda df: df)
    for t in ("metadata_log", "metadata_control", "snapshot_records"):
        if args.copy_files:
            shutil.copytree(src / t, out_root / t)
            continue
        df = bronze.read(t)
        if t != "snapshot_records":
            df = cut(df)
        if t == "snapshot_records" and args.cut:
            df = df.where(F.col("snapshot_end_offset") <= args.cut)
        out.create_table(t, df.schema, partition_by=["cluster_id"])
        out.overwrite(t, df)
    records = out.read("metadata_log").count()
    print(f"replaying {records:,} records of scenario {args.scenario}" + (f" (offsets < {args.cut:,})" if args.cut else ""),
          flush=True)
    with PeakRss() as rss:
        t = time.perf_counter()
        summary = run_replay(spark, out, say=lambda line: print(line, flush=True))
        spark_s = time.perf_counter() - t
    for line in summary.lines():
        print(line)
    floor = io_floor(out, records) if args.floor else None
    spark.stop()
    return {"records": records, "spark_s": spark_s, "rss": rss.peak, "rss_anon": rss.peak_anon,
            "at_peak": rss.at_peak, "floor": floor}


def io_floor(lake, records: int) -> dict[str, float]:  # noqa: ANN001 - a Lake
    """The seconds of what any Spark replay of ``lake``'s bronze rows does besides applying the rules
    (the module docstring's ``--floor``), each part timed alone: ``batches``, the log's batches from
    every row's position (one aggregate, the table's columns); ``partition_events``, the partition
    records as the partitions' state reads them (:data:`~kraft_replay.replay.partition_state.STATE_INPUT`),
    shuffled by partition into the replay's tasks and written by the Python workers as the replay's
    tasks write its versions (a staged write, :func:`~kraft_replay.lake.staged.write_staged_arrow`),
    then dropped."""
    from pyspark.sql import functions as F

    from kraft_replay.lake.staged import task_part_id, write_staged_arrow
    from kraft_replay.replay import log as L
    from kraft_replay.replay.partitions import KEY, TASK_ROWS, partition_events
    from kraft_replay.replay.partition_state import STATE_INPUT
    from kraft_replay.replay.versioning import MAIN, STREAM
    from kraft_replay.spark import tasks_holding
    from kraft_replay.spark.arrow import ddl_fields

    log, control = lake.read("metadata_log"), lake.read("metadata_control")

    def timed(df) -> float:  # noqa: ANN001 - a DataFrame
        t = time.perf_counter()
        df.write.format("noop").mode("overwrite").save()
        return time.perf_counter() - t

    recs = log.select("*", F.lit(MAIN).cast("long").alias("_sid"), F.col("offset").alias("_vis"),
                      F.col("append_time").alias("_vtime"))
    ev = partition_events(recs)
    inp = ev.select(*[(F.unix_micros("_vtime") if c == "_vtime" else F.col(c) if c in ev.columns else F.lit(None))
                      .cast(t).alias(c) for c, t in ddl_fields(STATE_INPUT)])
    tasks = tasks_holding(lake.spark, records, TASK_ROWS)
    lake.create_table("floor_events", inp.schema, partition_by=["cluster_id"])
    sink = lake.new_staging("floor_events")

    def write(batches):  # noqa: ANN001, ANN202 - Arrow batches in, none out
        write_staged_arrow(sink, batches, part_id=task_part_id())
        return iter(())

    try:
        return {"batches": timed(L.log_batches(L.log_positions(log, control))),
                "partition_events": timed(inp.repartition(tasks, *STREAM, *KEY).mapInArrow(write, inp.schema))}
    finally:
        lake.abort_staged(sink)


def child_result(cmd: list[str]) -> dict | None:
    """Run a benchmark's Spark phase as a child process (its JVM gone when it returns), echoing its
    output; its figures are the JSON of its ``RESULT`` line (None, said on stderr, when it failed)."""
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    result = None
    assert child.stdout is not None
    for line in child.stdout:
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
        else:
            print(line, end="", flush=True)
    if child.wait() != 0 or result is None:
        print(f"the Spark phase failed (exit {child.returncode})", file=sys.stderr)
        return None
    return result


def cli_phase(args: argparse.Namespace, src: Path) -> tuple[float, PeakRss]:
    """``kraft-replay replay`` on a copy of the whole bronze lake ``src``, as users run it (its own
    process, ``--profile``'s driver memory); echoes its lines stamped with the seconds since it started.
    Returns the wall time and the peak RSS of its process tree."""
    root = Path(tempfile.mkdtemp(prefix="kraft-bench-cli-"))
    try:
        shutil.copytree(src, root / "lake")
        cmd = [sys.executable, "-m", "kraft_replay.serve.cli", "--profile", args.profile, "replay", "--lake", str(root / "lake")]
        env = {**os.environ, "PYTHONPATH": str(ROOT / "lib")}
        with PeakRss() as rss:
            t = time.perf_counter()
            child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=env)
            assert child.stdout is not None
            for line in child.stdout:
                print(f"  [cli {time.perf_counter() - t:6.1f} s] {line.rstrip()}", flush=True)
            rc = child.wait()
            wall = time.perf_counter() - t
        if rc != 0:
            raise SystemExit(f"kraft-replay replay failed (exit {rc})")
        return wall, rss
    finally:
        shutil.rmtree(root, ignore_errors=True)


# the sequential replay's closed versions go to an Arrow file every this many version dicts of a table: at
# 10M records its versions as Python dicts alone would not fit in 24 GiB (kraft_replay.replay.sequential)
SPILL_ROWS = 500_000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="medium")
    ap.add_argument("--cut", type=int, default=None, help="replay only offsets < N")
    ap.add_argument("--no-sequential", action="store_true", help="skip the sequential replay (the peer)")
    ap.add_argument("--profile", default="local")
    ap.add_argument("--driver-memory", default="8g")
    ap.add_argument("--data-dir", type=Path, default=Path(tempfile.gettempdir()) / "kraft-replay-bench-replay")
    ap.add_argument("--copy-files", action="store_true",
                    help="copy the tables' files as generated (partitioned by offset bucket too) instead of "
                         "rewriting them with Spark by cluster (~2 min at 10M, ~20 min at 100M); not with --cut")
    ap.add_argument("--cli", action="store_true",
                    help="also time `kraft-replay replay` as users run it (a cold process, the profile's driver memory, "
                         "the whole bronze lake: broker_applied and cache_lag too)")
    ap.add_argument("--backends", default="deltars",
                    help="lake backends whose replays are timed one after the other (deltars, delta-spark or both, "
                         "comma-separated); the first is the one compared with the sequential replay")
    ap.add_argument("--floor", action="store_true",
                    help="also time the Spark I/O floor (no rule applied) after the replay, and print the ratio it bounds")
    ap.add_argument("--spark-phase", type=Path, default=None, help=argparse.SUPPRESS)  # internal: the child
    ap.add_argument("--backend-phase", default=None, help=argparse.SUPPRESS)  # internal: the child's backend
    args = ap.parse_args()
    if args.copy_files and args.cut:
        ap.error("--copy-files copies whole tables: not with --cut")
    if args.cli and args.cut:
        ap.error("--cli replays the whole bronze lake: not with --cut")
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if not backends or any(b not in ("deltars", "delta-spark") for b in backends):
        ap.error(f"--backends: a comma-separated list of deltars and delta-spark, got {args.backends!r}")
    args.data_dir.mkdir(parents=True, exist_ok=True)
    src = bronze_lake(args.data_dir, args.scenario)
    if args.spark_phase is not None:
        print("RESULT " + json.dumps(spark_phase(args, src, args.spark_phase)), flush=True)
        return 0

    out_root = Path(tempfile.mkdtemp(prefix="kraft-bench-replay-"))
    try:
        results = {}
        for b in backends:  # each in a child of its own (its JVM gone before the next runs)
            shutil.rmtree(out_root, ignore_errors=True)
            out_root.mkdir()
            result = child_result([sys.executable, __file__, *sys.argv[1:], "--spark-phase", str(out_root),
                                   "--backend-phase", b])
            if result is None:
                return 1
            results[b] = result
            print(f"spark ({b}): {result['spark_s']:.1f}s, {result['records'] / result['spark_s']:,.0f} records/s, "
                  f"peak RSS {result['rss'] / 2**30:.2f} GiB (anonymous memory alone: {result['rss_anon'] / 2**30:.2f} GiB)")
            print("  at the peak: " + ", ".join(f"{role} {r / 2**30:.2f} GiB ({a / 2**30:.2f} anonymous)"
                                               for role, r, a in sorted(result["at_peak"], key=lambda x: -x[1])))
        if len(results) == 2:
            print(f"delta-spark / deltars: x{results['delta-spark']['spark_s'] / results['deltars']['spark_s']:.2f} "
                  "the embedded backend's replay time")
        result = results[backends[0]]
        records, spark_s = result["records"], result["spark_s"]
        if args.cli:
            wall, cli_rss = cli_phase(args, src)
            print(f"cli: kraft-replay replay (profile {args.profile}) {wall:.1f}s, {records / wall:,.0f} records/s, "
                  f"peak RSS {cli_rss.peak / 2**30:.2f} GiB")
        if not args.no_sequential:
            from deltalake import DeltaTable

            from kraft_replay.replay.sequential import replay

            tabs = [DeltaTable(str(out_root / t)).to_pyarrow_table()
                    for t in ("metadata_log", "metadata_control", "snapshot_records")]
            with PeakRss() as rss:
                t = time.perf_counter()
                replay(*tabs, spill_rows=SPILL_ROWS)
                sequential_s = time.perf_counter() - t
            print(f"sequential: {sequential_s:.1f}s, {records / sequential_s:,.0f} records/s, peak RSS {rss.peak / 2**30:.2f} GiB; "
                  f"spark is {sequential_s / spark_s:.2f}x the sequential replay")
            if result.get("floor"):
                floor = sum(result["floor"].values())
                print(f"floor: {floor:.1f}s (" + ", ".join(f"{k} {v:.1f}s" for k, v in result["floor"].items())
                      + f"), no rule applied; a Spark replay here is at most {sequential_s / floor:.2f}x the sequential replay")
    finally:
        shutil.rmtree(out_root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
