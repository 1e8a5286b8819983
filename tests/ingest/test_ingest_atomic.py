"""An ingest run is all-or-nothing to readers (issue 15).

Real ``kraft-replay ingest`` processes are SIGKILLed right after a commit of a run (the first record
table's, and ``ingest_files``'s, i.e. just before the publish; every commit of the run in
``bench/ingest_kills.py``): after every kill, readers —
``lake.read`` from a fresh Lake object, the SQL views and a streaming query — see exactly the
previously published state. The next run rolls the dead commits back and completes; the lake then
equals a clean run's, without duplicates, and after vacuum without orphan files. A commit that fails
gives a one-line error that says what was committed. Damaged starts of segments are quarantined.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from kraft_replay.ingest import run_ingest
from kraft_replay.ingest.errors import IngestError
from kraft_replay.ingest.sources import discover
from kraft_replay.lake import Lake

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "data" / "samples" / "node1"
PART = SAMPLES / "__cluster_metadata-0"
TABLES = ("metadata_log", "snapshot_records", "metadata_control", "ingest_quarantine", "ingest_quarantine_raw",
          "ingest_files")
RUN_COLUMNS = ("ingested_at", "run_id")  # differ between runs of the same files
#: where the suite kills a run: after its first commit and after its last (right before the publish);
#: ``KRAFT_REPLAY_KILL_POINTS=all`` (bench/ingest_kills.py) kills it after every commit of TABLES
KILL_POINTS = TABLES if os.environ.get("KRAFT_REPLAY_KILL_POINTS") == "all" else (TABLES[0], TABLES[-1])


def _quiet(_: str) -> None:
    pass


def _inputs(tmp_path: Path) -> tuple[list[str], list[str], int]:
    """Two file sets of one cluster: A = the first segment and bootstrap.checkpoint; B = the second
    segment with a truncated batch at its end (a quarantine row) and the snapshot: B writes rows into
    every bronze table. Returns A, B and the bytes of B's truncated tail."""
    d = tmp_path / "in"
    d.mkdir()
    seg0 = (PART / "00000000000000000000.log").read_bytes()
    (d / "00000000000000000000.log").write_bytes(seg0)
    (d / "bootstrap.checkpoint").write_bytes((SAMPLES / "bootstrap.checkpoint").read_bytes())
    tail = seg0[:40]  # a batch header declaring far more bytes than follow
    (d / "00000000000000000024.log").write_bytes((PART / "00000000000000000024.log").read_bytes() + tail)
    (d / "00000000000000000047-0000000002.checkpoint").write_bytes(
        (PART / "00000000000000000047-0000000002.checkpoint").read_bytes())
    a = [str(d / "00000000000000000000.log"), str(d / "bootstrap.checkpoint")]
    b = [str(d / "00000000000000000024.log"), str(d / "00000000000000000047-0000000002.checkpoint")]
    return a, b, len(tail)


def _fingerprint(df, drop=()) -> list[str]:  # noqa: ANN001
    cols = [c for c in df.columns if c not in drop]
    return sorted(r[0] for r in df.select(F.sha2(F.to_json(F.struct(*cols)), 256)).collect())


def _state(spark, root: str, drop=()) -> dict[str, list[str]]:  # noqa: ANN001
    """Every bronze table as a fresh reader sees it (a new Lake object), rows fingerprinted."""
    lake = Lake(root, spark, backend="deltars")
    return {t: _fingerprint(lake.read(t), drop) for t in TABLES}


def _sql_counts(spark, root: str) -> dict[str, int]:  # noqa: ANN001
    Lake(root, spark, backend="deltars").register_views()
    return {t: spark.sql(f"SELECT count(*) AS n FROM {t}").first().n for t in TABLES}


def _kill_run(root: str, files: list[str], point: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("kraft-replay")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib"), "KRAFT_REPLAY_FAULT": f"kill-after-commit:{point}"}
    return subprocess.run([str(exe), "--profile", "test", "--lake", root, "ingest", *files, "--cluster-id", "c1"],
                          capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)


def _cli(capsys, *argv: str) -> tuple[int, str, str]:  # noqa: ANN001
    """``kraft-replay`` in this process (same Spark session): exit code, stdout, stderr."""
    from kraft_replay.serve.cli import main

    capsys.readouterr()
    rc = main(["--profile", "test", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _catch_up(spark, lake: Lake, copy: Lake, ck: str) -> list[int]:  # noqa: ANN001
    """Run a streaming copy of metadata_log (one checkpoint across calls) to the end; its offsets."""
    q = copy.write_stream(lake.read_stream("metadata_log"), "log_copy", ck, trigger={"availableNow": True})
    q.awaitTermination()
    return sorted(r.offset for r in copy.read("log_copy").select("offset").collect())


def _orphans(root: str, spark) -> dict[str, set[str]]:  # noqa: ANN001
    lake = Lake(root, spark, backend="deltars")
    out = {}
    for t in (*TABLES, "_published"):
        on_disk = {str(p.relative_to(Path(root) / t)) for p in (Path(root) / t).rglob("*.parquet")}
        out[t] = on_disk - {f.path for f in lake._impl.snapshot(t).files}
    return out


def test_killed_at_every_commit_readers_see_the_published_state_and_the_rerun_repairs(
        spark, tmp_path: Path, capsys, monkeypatch) -> None:
    a, b, tail = _inputs(tmp_path)
    root = str(tmp_path / "lake")
    lake = Lake(root, spark, backend="deltars")
    run_ingest(spark, lake, a, cluster_id="c1", say=_quiet)
    # the reference lake: a clean run of A (this one, copied before anything else touches the lake), then B
    clean_root = str(tmp_path / "clean")
    shutil.copytree(root, clean_root)
    before = _state(spark, root)
    before_sql = {t: len(v) for t, v in before.items()}
    assert all(before_sql[t] for t in ("metadata_log", "snapshot_records", "ingest_files"))

    copy = Lake(str(tmp_path / "copy"), spark, backend="deltars")
    copy.create_table("log_copy", lake.schema("metadata_log"), ["cluster_id", "offset_bucket"])
    ck = str(tmp_path / "ck")
    published_offsets = sorted(r.offset for r in lake.read("metadata_log").select("offset").collect())
    assert _catch_up(spark, lake, copy, ck) == published_offsets

    for point in KILL_POINTS:  # after a commit of the run; after ingest_files = right before the publish
        out = _kill_run(root, b, point)
        assert out.returncode == -9, f"{point}: {out.returncode} {out.stderr[-2000:]}"
        fresh = Lake(root, spark, backend="deltars")
        published = fresh.published_versions()
        ahead = [t for t in TABLES if fresh.version(t) > published[t]]
        assert point in ahead, f"the run was killed after committing {point}: {ahead}"
        assert _state(spark, root) == before, f"a reader saw part of the run killed after {point}"
        assert _sql_counts(spark, root) == before_sql
        if point in ("metadata_log", "ingest_files"):
            assert _catch_up(spark, lake, copy, ck) == published_offsets

    # a commit that fails after the record tables committed: the message says what happened
    monkeypatch.setenv("KRAFT_REPLAY_FAULT", "fail-commit:ingest_files")
    rc, stdout, stderr = _cli(capsys, "--lake", root, "ingest", *b, "--cluster-id", "c1")
    assert rc == 2 and stdout == ""
    errors = [line for line in stderr.splitlines() if "error" in line]
    assert len(errors) == 1, stderr
    assert "failed after committing metadata_log v" in errors[0] and "ingest_quarantine v" in errors[0]
    assert "commit failed (injected by KRAFT_REPLAY_FAULT" in errors[0]
    assert "unpublished (readers do not see them) and the next run on this lake rolls them back" in errors[0]
    assert "nothing" not in errors[0]
    assert "rolled back the unpublished commits" in stderr  # what the killed run left
    assert _state(spark, root) == before
    # a first commit that fails: then, and only then, nothing was committed
    monkeypatch.setenv("KRAFT_REPLAY_FAULT", "fail-commit:metadata_log")
    rc, stdout, stderr = _cli(capsys, "--lake", root, "ingest", *b, "--cluster-id", "c1")
    errors = [line for line in stderr.splitlines() if "error" in line]
    assert rc == 2 and len(errors) == 1 and "this run committed nothing" in errors[0], stderr
    assert "rolled back the unpublished commits" in stderr  # what the failed run left
    assert _state(spark, root) == before
    monkeypatch.delenv("KRAFT_REPLAY_FAULT")

    rc, stdout, stderr = _cli(capsys, "--lake", root, "ingest", *b, "--cluster-id", "c1")
    assert rc == 0, stderr
    assert "rolled back" not in stderr and "published: run" in stdout
    assert f"quarantined: 1 range(s), {tail} bytes; see table ingest_quarantine" in stdout

    # the same as a clean run of A then B, with nothing twice
    run_ingest(spark, Lake(clean_root, spark, backend="deltars"), b, cluster_id="c1", say=_quiet)
    assert _state(spark, root, RUN_COLUMNS) == _state(spark, clean_root, RUN_COLUMNS)
    log = Lake(root, spark, backend="deltars").read("metadata_log")
    assert log.count() == log.select("cluster_id", "offset").distinct().count()
    assert _catch_up(spark, lake, copy, ck) == sorted(r.offset for r in log.select("offset").collect())
    # a re-run is a no-op
    rc, stdout, _ = _cli(capsys, "--lake", root, "ingest", *b, "--cluster-id", "c1")
    assert rc == 0 and stdout.count("already ingested") == 2

    # the dead runs' files: their commits' files went with the rollbacks, their never-committed
    # staged files go with vacuum; the run staging dirs went with the rerun
    assert not (Path(root) / "_ingest_staging").exists()
    for t in (*TABLES, "_published"):
        Lake(root, spark, backend="deltars").vacuum(t, retain_hours=0)
    assert _orphans(root, spark) == {t: set() for t in (*TABLES, "_published")}
    assert _state(spark, root, RUN_COLUMNS) == _state(spark, clean_root, RUN_COLUMNS)


def _damaged(data: bytes, garbage: int = 30) -> bytes:
    """``data`` behind ``garbage`` bytes whose first header is no batch header (base offset -1)."""
    return b"\xff" * garbage + data


def test_damaged_start_is_quarantined_and_the_rest_ingested(spark, lake, tmp_path: Path, real_kraft_dir: Path,
                                                            quarantined) -> None:
    node = tmp_path / "node"
    part = node / "__cluster_metadata-0"
    part.mkdir(parents=True)
    (node / "meta.properties").write_text("cluster.id=c9\n")
    good = (real_kraft_dir / "hiage__kafka-raft__kafka1__00000000000000000000.log").read_bytes()
    (part / "00000000000000000000.log").write_bytes(_damaged(good))
    # the node's other segment is not held up by the damaged one
    (part / "00000000000000009999.log").write_bytes((PART / "00000000000000000024.log").read_bytes())
    files, _ = discover([str(node)])
    assert sorted(f.data_start for f in files) == [0, 30]

    lines: list[str] = []
    s = run_ingest(spark, lake, [str(node)], split_bytes=64 * 1024, say=lines.append)  # several resync tasks
    assert len(s.files) == 2
    out = "\n".join(s.lines())
    assert "00000000000000000000.log: 1 range(s), 30 bytes quarantined, first at byte 0 (CORRUPT_PREFIX)" in out
    assert "damaged start: bytes 0..30 quarantined (CORRUPT_PREFIX), batches from byte 30 on ingested" in out
    q = quarantined(lake)
    assert [(r.source_file, r.source_position, r.length, r.reason_code, len(r.raw)) for r in q] == \
        [("00000000000000000000.log", 0, 30, "CORRUPT_PREFIX", 30)]

    ref = Lake(str(tmp_path / "ref"), spark, backend="deltars")
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "00000000000000000000.log").write_bytes(good)
    run_ingest(spark, ref, [str(tmp_path / "plain" / "00000000000000000000.log")], cluster_id="c9", say=_quiet)
    got = lake.read("metadata_log").where("source_file = '00000000000000000000.log'")
    want = ref.read("metadata_log")
    assert got.count() == want.count() > 0
    shifted = got.select("offset", (F.col("source_position") - 30).alias("p"), "payload_json")
    assert shifted.exceptAll(want.select("offset", F.col("source_position").alias("p"), "payload_json")).count() == 0
    # the summary's quarantined bytes are the table's
    assert sum(r.length for r in q) == sum(f.quarantined_bytes for f in s.files) == 30


def test_damaged_start_under_strict_and_files_without_any_batch(tmp_path: Path) -> None:
    damaged = tmp_path / "00000000000000000000.log"
    damaged.write_bytes(_damaged((PART / "00000000000000000000.log").read_bytes()))
    exe = Path(sys.executable).with_name("kraft-replay")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib")}
    lake = tmp_path / "lake"
    out = subprocess.run([str(exe), "--profile", "test", "--lake", str(lake), "ingest", str(damaged), "--strict"],
                         capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert out.returncode == 2
    assert [line for line in out.stderr.splitlines() if line.strip()] == [
        f"kraft-replay ingest: error: --strict: {damaged}: bytes 0..30 before the first valid batch cannot be decoded "
        "(CORRUPT_PREFIX: damaged first batch header; the batch chain resumes at byte 30); nothing committed. "
        "Re-run without --strict to ingest the valid batches and quarantine the rest"]
    assert not lake.exists()  # refused before Spark started

    foreign = tmp_path / "00000000000000000100.log"
    foreign.write_bytes(b"\xff" * 30 + b"no record batch in here" * 50)
    with pytest.raises(IngestError, match=r"not a Kafka record-batch file .*no valid batch anywhere in the file"):
        discover([str(foreign)])
    # a lone batch cut short is a truncated tail for the decoder, not a foreign file
    cut = tmp_path / "00000000000000000200.log"
    cut.write_bytes((PART / "00000000000000000000.log").read_bytes()[:60])
    assert [f.data_start for f in discover([str(cut)])[0]] == [0]


def test_run_dying_before_ingest_files_is_invisible_and_redone(spark, lake, real_kraft_dir: Path, monkeypatch) -> None:
    """In-process variant (the driver dies, as a SystemExit, where ``ingest_files`` would commit): the
    record tables' commits are unpublished; the rerun rolls them back and commits everything again
    (its txn app ids carry its run id, so the dead commits' txns do not make it skip anything)."""
    name = "rjmfernandes__flink-on-prem__00000000000000000000.log"
    real_commit = Lake.commit_staged

    def dying_commit(self, staged, txn=None):  # noqa: ANN001, ANN202
        if staged.table == "ingest_files":
            raise SystemExit("killed before ingest_files")
        return real_commit(self, staged, txn=txn)

    monkeypatch.setattr(Lake, "commit_staged", dying_commit)
    lines: list[str] = []
    with pytest.raises(SystemExit):
        run_ingest(spark, lake, [str(real_kraft_dir / name)], cluster_id="r", say=lines.append)
    assert any("failed after committing metadata_log v" in line and "unpublished" in line for line in lines)
    assert lake.read("metadata_log").count() == 0 and lake.read("ingest_files").count() == 0
    rows = lake.read("metadata_log", latest=True).count()
    assert rows > 0
    monkeypatch.setattr(Lake, "commit_staged", real_commit)
    s = run_ingest(spark, lake, [str(real_kraft_dir / name)], cluster_id="r", say=_quiet)
    assert {r.table for r in s.rolled_back} == set(TABLES) - {"ingest_files"}
    assert s.rows["metadata_log"] == rows and s.rows["ingest_files"] == 1
    log = lake.read("metadata_log")
    assert log.count() == rows == log.select("offset").distinct().count()
