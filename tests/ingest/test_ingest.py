"""Ingest with real Spark and a real Delta lake: real Kafka files in, exact counts out, idempotent
re-ingest, overlapping copies, truncated tails, --strict, splitting, and bad input."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from kraft_replay.ingest import IngestError, run_ingest
from kraft_replay.ingest.sources import discover

SEGMENT = "greenlemonT__kafka-temp__kafka1__00000000000000000000.log"

CLUSTER = "Mk3OEYBSD34fcwNTJENDM2Qk"
LOG_ROWS, CONTROL_ROWS, SNAP_ROWS = 30579, 59 + 2 + 2, 70 + 1


def _quiet(_: str) -> None:
    pass


def _counts(lake) -> dict[str, int]:
    return {t.name: t.num_rows for t in lake.tables()}


def test_node_dir_ingests_exact_counts(spark, lake, node_dir: Path) -> None:
    lines: list[str] = []
    s = run_ingest(spark, lake, [str(node_dir)], say=lines.append, split_bytes=512 * 1024)
    assert any("decoding 3 file(s)" in x for x in lines) and any("decoded" in x for x in lines)
    assert s.quarantined == 0 and len(s.files) == 3
    assert _counts(lake) == {"metadata_log": LOG_ROWS, "metadata_control": CONTROL_ROWS, "snapshot_records": SNAP_ROWS,
                             "ingest_quarantine": 0, "ingest_quarantine_raw": 0, "ingest_files": 3}
    log = lake.read("metadata_log")
    assert log.select("cluster_id").distinct().collect()[0][0] == CLUSTER
    assert log.select("offset").distinct().count() == LOG_ROWS
    both = log.select("offset").unionByName(lake.read("metadata_control").where("source_kind = 'log'").select("offset"))
    agg = both.agg(F.min("offset"), F.max("offset"), F.countDistinct("offset")).collect()[0]
    assert (agg[0], agg[1], agg[2]) == (0, 30637, 30638)
    by_type = {r["record_type"]: r["count"] for r in log.groupBy("record_type").count().collect()}
    assert by_type["NO_OP_RECORD"] == 26698 and by_type["PARTITION_CHANGE_RECORD"] == 3664
    assert by_type["REGISTER_BROKER_RECORD"] == 39
    pc = log.where("record_type = 'PARTITION_CHANGE_RECORD'").where(F.col("partition_change").isNotNull()).count()
    assert pc == 3664
    assert log.where("offset_bucket != 0").count() == 0
    snap = lake.read("snapshot_records")
    assert {tuple(r) for r in snap.select("snapshot_kind", "snapshot_end_offset", "snapshot_epoch").distinct().collect()} == {
        ("snapshot", 28869, 189), ("bootstrap", 0, 0)}
    ctrl = lake.read("metadata_control")
    kinds = {(r["source_kind"], r["control_type"]): r["count"] for r in ctrl.groupBy("source_kind", "control_type").count().collect()}
    assert kinds == {("log", "LEADER_CHANGE"): 59, ("snapshot", "SNAPSHOT_HEADER"): 1, ("snapshot", "SNAPSHOT_FOOTER"): 1,
                     ("bootstrap", "SNAPSHOT_HEADER"): 1, ("bootstrap", "SNAPSHOT_FOOTER"): 1}
    lc = ctrl.where("control_type = 'LEADER_CHANGE'").select("leader_change.leader_id").where("leader_id is not null").count()
    assert lc == 59
    files = {r["source_file"]: r for r in lake.read("ingest_files").collect()}
    seg = files["00000000000000000000.log"]
    assert (seg["batches"], seg["records"], seg["first_offset"], seg["last_offset"], seg["quarantined"]) == (26880, 30638, 0, 30637, 0)
    assert files["bootstrap.checkpoint"]["file_kind"] == "bootstrap"
    assert len(seg["sha256"]) == 64 and seg["size_bytes"] == 2098481

    # re-ingest: same files -> nothing new
    again = run_ingest(spark, lake, [str(node_dir)], say=_quiet)
    assert not again.files and len([s for s in again.skipped if "already ingested" in s[1]]) == 3
    assert _counts(lake)["metadata_log"] == LOG_ROWS and _counts(lake)["ingest_files"] == 3


def test_overlap_and_truncated_tail(spark, lake, tmp_path: Path, real_kraft_dir: Path, quarantined) -> None:
    data = (real_kraft_dir / SEGMENT).read_bytes()
    a = tmp_path / "a" / "__cluster_metadata-0"
    b = tmp_path / "b" / "__cluster_metadata-0"
    a.mkdir(parents=True)
    b.mkdir(parents=True)
    (a / "00000000000000000000.log").write_bytes(data[:1_000_000])       # copied mid-write
    s1 = run_ingest(spark, lake, [str(a)], cluster_id="c1", say=_quiet)
    assert s1.quarantined == 1
    q = quarantined(lake)
    assert len(q) == 1 and q[0]["reason_code"] == "TRUNCATED_BATCH" and q[0]["source_position"] + q[0]["length"] == 1_000_000
    assert q[0]["raw"] == data[q[0]["source_position"]:1_000_000]     # its bytes, in ingest_quarantine_raw
    assert "raw" not in lake.read("ingest_quarantine").columns
    n1 = lake.read("metadata_log").count()
    assert 0 < n1 < LOG_ROWS
    last = lake.read("metadata_log").agg(F.max("offset")).collect()[0][0]
    assert q[0]["offset"] > last - 5  # the tail starts right after the last ingested batch

    # the complete segment from another node of the same cluster overlaps: each offset once
    (b / "00000000000000000000.log").write_bytes(data)
    s2 = run_ingest(spark, lake, [str(tmp_path / "b")], cluster_id="c1", say=_quiet)
    assert s2.quarantined == 0 and s2.rows["metadata_log"] == LOG_ROWS - n1
    log = lake.read("metadata_log")
    assert log.count() == LOG_ROWS == log.select("offset").distinct().count()
    assert lake.read("metadata_control").count() == 59


def test_strict_commits_nothing(spark, lake, tmp_path: Path, real_kraft_dir: Path) -> None:
    d = tmp_path / "t"
    d.mkdir()
    (d / "00000000000000000000.log").write_bytes((real_kraft_dir / SEGMENT).read_bytes()[:500_000])
    with pytest.raises(IngestError, match=r"--strict: 1 range.*TRUNCATED_BATCH.*nothing committed"):
        run_ingest(spark, lake, [str(d)], cluster_id="s", strict=True, say=_quiet)
    assert all(n == 0 for n in _counts(lake).values())
    ok = run_ingest(spark, lake, [str(d)], cluster_id="s", say=_quiet)
    assert ok.quarantined == 1 and _counts(lake)["ingest_quarantine"] == 1


def test_split_tasks_give_same_rows(spark, lake, tmp_path: Path, real_kraft_dir: Path) -> None:
    name = "rjmfernandes__flink-on-prem__00000000000000000000.log"
    s = run_ingest(spark, lake, [str(real_kraft_dir / name)], cluster_id="r", split_bytes=64 * 1024, say=_quiet)
    assert s.quarantined == 0 and s.rows["metadata_log"] == 17026
    log = lake.read("metadata_log")
    assert log.select("offset").distinct().count() == 17026
    assert log.select("source_position").distinct().count() == 16340 - 1  # one batch is the LEADER_CHANGE control batch


def _err(paths: list[str], **kw) -> str:
    with pytest.raises(IngestError) as exc:
        discover(paths, **kw)
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_bad_inputs(tmp_path: Path) -> None:
    assert "no such file or directory" in _err([str(tmp_path / "missing")])
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "directory is empty" in _err([str(empty)])
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "notes.md").write_text("hello")
    assert "no KRaft metadata files found" in _err([str(junk)])
    assert "not a KRaft metadata file" in _err([str(junk / "notes.md")])
    fake = tmp_path / "00000000000000000000.log"
    fake.write_bytes(b"this is a text file, not a segment at all\n" * 3)
    assert "not a Kafka record-batch file" in _err([str(fake)])
    assert "matches no files" in _err([str(tmp_path / "nothing*" / "*.log")])
    assert "no input paths" in _err([])


def test_permission_denied(tmp_path: Path, real_kraft_dir: Path) -> None:
    """An unreadable segment is a one-line error naming the fix. Root reads anything, so the check runs in
    a forked child that drops to an unprivileged user after entering the file's directory: it needs no
    access to the checkout or to the directories above the file (the clone may sit where only root can
    enter), and the package is already imported."""
    d = tmp_path / "locked"
    d.mkdir()
    shutil.copy(real_kraft_dir / SEGMENT, d / "00000000000000000000.log")
    os.chmod(d / "00000000000000000000.log", 0o000)
    os.chmod(d, 0o755)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.close(read_end)
            os.chdir(d)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            try:
                discover(["00000000000000000000.log"])
                message = "no error"
            except IngestError as e:
                message, code = str(e), 2
            os.write(write_end, message.encode())
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as r:
        message = r.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 2, message
    assert "permission denied" in message and "chmod" in message and "\n" not in message


def test_discover_node_dir_rules(node_dir: Path) -> None:
    files, skipped = discover([str(node_dir)])
    assert sorted(f.name for f in files) == ["00000000000000000000.log", "00000000000000028869-0000000189.checkpoint", "bootstrap.checkpoint"]
    assert {f.cluster_id for f in files} == {CLUSTER}
    why = {Path(p).name: w for p, w in skipped}
    assert "another topic partition" in why["00000000000000000000.log"]
    assert "ignored" in why["00000000000000030000-0000000190.checkpoint.part"]
    # without meta.properties the data dir's name is the cluster id; --cluster-id wins over both
    (node_dir / "meta.properties").unlink()
    assert {f.cluster_id for f in discover([str(node_dir)])[0]} == {"node1"}
    assert {f.cluster_id for f in discover([str(node_dir / "__cluster_metadata-0")], cluster_id="X")[0]} == {"X"}
    assert {f.cluster_id for f in discover([str(node_dir / "__cluster_metadata-0")])[0]} == {"node1"}
    glob_files, _ = discover([str(node_dir / "__cluster_metadata-0" / "*.log")])
    assert [f.name for f in glob_files] == ["00000000000000000000.log"]


def test_dump_text_goes_through_the_text_parser(spark, lake, real_kraft_dir: Path) -> None:
    name = "text__strimzi-blog-2024-03-22__kafka-dump-log-cluster-metadata-decoder__3.7.txt"
    s = run_ingest(spark, lake, [str(real_kraft_dir / name)], cluster_id="strimzi", say=_quiet)
    assert [f.file.kind.value for f in s.files] == ["dump_text"]
    log = lake.read("metadata_log")
    types = {r["record_type"] for r in log.select("record_type").distinct().collect()}
    assert {"REGISTER_BROKER_RECORD", "TOPIC_RECORD", "CONFIG_RECORD", "PARTITION_RECORD"} <= types
    assert log.where(F.col("partition").isNotNull()).count() == 3
    files = lake.read("ingest_files").collect()
    assert len(files) == 1 and files[0]["file_kind"] == "dump_text" and files[0]["records"] == log.count()


def test_overlapping_nodes_in_one_run(spark, lake, tmp_path: Path, real_kraft_dir: Path) -> None:
    data = (real_kraft_dir / "hiage__kafka-raft__kafka1__00000000000000000000.log").read_bytes()
    for node, blob in (("n1", data), ("n2", data[:150_000]), ("n3", data)):
        part = tmp_path / "cluster" / node / "__cluster_metadata-0"
        part.mkdir(parents=True)
        (part / "00000000000000000000.log").write_bytes(blob)
        (part.parent / "meta.properties").write_text("cluster.id=shared\n")
    s = run_ingest(spark, lake, [str(tmp_path / "cluster")], say=_quiet)
    # n3 has the same bytes as n1: skipped by checksum; n2 overlaps n1 and ends in a truncated batch
    assert len(s.files) == 2 and any("same content as" in why for _, why in s.skipped)
    assert s.quarantined == 1
    log = lake.read("metadata_log")
    assert log.count() == 2981 == log.select("offset").distinct().count()
    assert lake.read("metadata_control").count() == 1
