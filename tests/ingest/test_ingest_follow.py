"""``kraft-replay ingest DIR --follow``: a node dir written while it is tailed — a half-written batch
waits, whole batches are committed once, rolled segments and new snapshots are picked up, a restart
(also one that lost its positions) adds no duplicate, a rewritten tail is taken again as divergent
copies, a kill -9 at any commit loses and repeats nothing, Ctrl-C stops it with one line — and the
rows equal, column for column, what one batch ingest (Spark) of the finished files writes.

The live ingest runs on a lake opened driver only (``Lake(root, None)``): any Spark use would fail."""

from __future__ import annotations

import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from kraft_replay.ingest import follow as F
from kraft_replay.ingest import run_ingest
from kraft_replay.ingest.follow import FOLLOW_POSITIONS, _mark_at, follow
from kraft_replay.ingest.plan import walk_batches
from kraft_replay.lake import Lake, staged
from kraft_replay.serve.cli import main

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "samples" / "node1"
ROW_TABLES = ("metadata_log", "metadata_control", "snapshot_records", "ingest_quarantine", "ingest_quarantine_raw")
NOT_COMPARED = ("ingested_at", "run_id", "updated_at")  # when each run wrote; everything else must be equal


def _quiet(_: str) -> None:
    pass


def _driver_lake(root: Path) -> Lake:
    return Lake(str(root), None, backend="deltars")


def _batch_ends(path: Path) -> list[int]:
    end, ends = 0, []
    data = path.read_bytes()
    while end + 12 <= len(data):
        end += 12 + struct.unpack(">i", data[end + 8:end + 12])[0]
        ends.append(end)
    return ends


def _rows(lake: Lake, table: str) -> pa.Table:
    """A table's rows as readers see them, in one order, without the run's own columns."""
    t = lake.read_arrow(table, lake.schema(table).fieldNames())
    t = t.drop([c for c in NOT_COMPARED if c in t.column_names])
    keys = [(c, "ascending") for c in t.column_names
            if pa.types.is_integer(t.schema.field(c).type) or pa.types.is_string(t.schema.field(c).type)]
    return t.sort_by(keys)


def _assert_same_rows(got: Lake, want: Lake, tables: tuple[str, ...] = ROW_TABLES) -> None:
    for t in tables:
        a, b = _rows(got, t), _rows(want, t)
        assert a.schema.equals(b.schema), (t, a.schema, b.schema)
        assert a.num_rows == b.num_rows, (t, a.num_rows, b.num_rows)
        assert a.equals(b), (t, [c for c in a.column_names if not a.column(c).equals(b.column(c))])


def _offsets(lake: Lake) -> list[int]:
    return sorted(lake.read_arrow("metadata_log", ["offset"]).column("offset").to_pylist())


def test_the_chain_walk_stops_before_a_half_written_batch(tiny_generated, tmp_path) -> None:
    seg = tiny_generated.segments_dir / "__cluster_metadata-0" / "00000000000000000000.log"
    ends = _batch_ends(seg)
    cut = tmp_path / "cut.log"
    cut.write_bytes(seg.read_bytes()[: ends[2] + 30])  # two... three whole batches and 30 bytes of the fourth
    size = cut.stat().st_size
    walk = walk_batches(str(cut), size, size + 1)
    assert (walk.framed_end, walk.last_start) == (ends[2], ends[1])
    head = seg.read_bytes()[ends[1]: ends[1] + 21]
    assert _mark_at(str(cut), walk.last_start) == (struct.unpack(">i", head[12:16])[0], struct.unpack(">I", head[17:21])[0])
    rest = walk_batches(str(cut), size, size + 1, start=ends[2])
    assert (rest.framed_end, rest.last_start, rest.batches) == (ends[2], -1, 0)
    # a byte limit stops the walk at the first batch boundary at or past it (at least one batch)
    assert walk_batches(str(cut), size, size + 1, limit=ends[0] + 1).framed_end == ends[1]
    assert walk_batches(str(cut), size, size + 1, limit=1).framed_end == ends[0]


def test_follow_a_node_dir_while_it_is_written(spark, tiny_generated, tmp_path) -> None:
    cid = tiny_generated.cluster_id
    src = tiny_generated.segments_dir / "__cluster_metadata-0"
    logs = sorted(p for p in src.iterdir() if p.suffix == ".log")
    snaps = sorted(p for p in src.iterdir() if p.suffix == ".checkpoint")
    node = tmp_path / "node"
    part = node / "__cluster_metadata-0"
    part.mkdir(parents=True)
    shutil.copy(tiny_generated.segments_dir / "bootstrap.checkpoint", node / "bootstrap.checkpoint")
    lake = _driver_lake(tmp_path / "lake")

    def poll() -> F.FollowReport:
        return follow(lake, [str(node)], cluster_id=cid, interval=0.01, polls=1, say=_quiet)

    # the active segment, cut in the middle of a batch: only the whole batches are taken
    first = logs[0].read_bytes()
    ends = _batch_ends(logs[0])
    (part / logs[0].name).write_bytes(first[: ends[9] + 17])
    poll()
    got = _offsets(lake)
    assert got and len(got) == len(set(got))
    taken = lake.read_arrow(FOLLOW_POSITIONS, ["file_name", "position", "last_batch_start"],
                            filter=pc.field("file_name") == logs[0].name).to_pylist()
    assert taken == [{"file_name": logs[0].name, "position": ends[9], "last_batch_start": ends[8]}]
    assert lake.read_arrow("ingest_quarantine", ["source_file"]).num_rows == 0  # the half batch waited

    # Kafka finishes the batch and appends more; then nothing new: no run
    (part / logs[0].name).write_bytes(first)
    assert poll().runs == 1
    versions = lake.published_versions()
    assert poll().runs == 0 and lake.published_versions() == versions

    # segments roll, snapshots appear
    for p in [*logs[1:], *snaps]:
        shutil.copy(p, part / p.name)
    poll()
    got = _offsets(lake)
    assert len(got) == len(set(got))

    # a restart that lost its positions: everything is taken again, nothing is added twice
    empty = lake.new_staging(FOLLOW_POSITIONS)
    lake.commit_staged(empty, overwrite=True)
    assert lake.read_arrow(FOLLOW_POSITIONS, ["position"]).num_rows == 0
    again = poll()
    assert again.runs == 1 and _offsets(lake) == got

    # column for column what one batch ingest of the finished files writes (rows keep the node's
    # file names and byte positions, however many polls took them)
    whole = Lake(str(tmp_path / "whole"), spark, backend="deltars")
    run_ingest(spark, whole, [str(node)], cluster_id=cid, say=_quiet)
    _assert_same_rows(lake, whole)


def test_two_nodes_with_segments_of_one_base_offset_in_one_poll(spark, tmp_path) -> None:
    """Two node dirs of one cluster hold the same segments: one poll takes both and the bronze log
    holds each copy once, as a plain ingest of one node."""
    for n in ("node1", "node2"):
        shutil.copytree(SAMPLE, tmp_path / n)
    lake = _driver_lake(tmp_path / "lake")
    follow(lake, [str(tmp_path / "node1"), str(tmp_path / "node2")], interval=0.01, polls=1, say=_quiet)
    plain = Lake(str(tmp_path / "plain"), spark, backend="deltars")
    run_ingest(spark, plain, [str(SAMPLE)], say=_quiet)
    got, want = _offsets(lake), _offsets(plain)
    assert got == want and len(got) == len(set(got)) > 0
    assert lake.read_arrow("snapshot_records", ["position_in_snapshot"]).num_rows == \
        plain.read_arrow("snapshot_records", ["position_in_snapshot"]).num_rows > 0


def test_a_rewritten_tail_is_taken_again(tiny_generated, tmp_path) -> None:
    """A follower truncates its uncommitted tail and a new leader's batches replace it: the changed
    bytes are noticed (last batch's leader epoch) and the file is taken again; identical batches are
    not duplicated, the rewritten one is a second copy for replay to judge."""
    cid = tiny_generated.cluster_id
    seg = tiny_generated.segments_dir / "__cluster_metadata-0" / "00000000000000000000.log"
    data = seg.read_bytes()
    ends = _batch_ends(seg)
    node = tmp_path / "node" / "__cluster_metadata-0"
    node.mkdir(parents=True)
    live = node / seg.name
    live.write_bytes(data[: ends[5]])
    lake = _driver_lake(tmp_path / "lake")
    lines: list[str] = []
    follow(lake, [str(node)], cluster_id=cid, interval=0.01, polls=1, say=_quiet)
    before = lake.read_arrow("metadata_log", ["offset"]).num_rows
    # the last batch written again by a new leader: same records, higher leader epoch (which the
    # CRC does not cover, so the batch stays valid)
    last = bytearray(data[ends[4]: ends[5]])
    epoch = struct.unpack(">i", bytes(last[12:16]))[0]
    last[12:16] = (epoch + 1).to_bytes(4, "big", signed=True)
    live.write_bytes(data[: ends[4]] + bytes(last))
    report = follow(lake, [str(node)], cluster_id=cid, interval=0.01, polls=1, say=lines.append)
    assert report.retaken == [seg.name], lines
    after = lake.read_arrow("metadata_log", ["offset", "batch_base_offset", "batch_leader_epoch"])
    base = struct.unpack(">q", data[ends[4]:ends[4] + 8])[0]
    copies = after.filter(pc.equal(after.column("batch_base_offset"), base))
    n = pc.sum(pc.equal(copies.column("batch_leader_epoch"), epoch)).as_py()
    assert n > 0 and pc.sum(pc.equal(copies.column("batch_leader_epoch"), epoch + 1)).as_py() == n
    assert after.num_rows == before + n  # the unchanged batches were not added again
    assert after.select(["offset", "batch_leader_epoch"]).group_by(["offset", "batch_leader_epoch"]).aggregate([]).num_rows \
        == after.num_rows


@pytest.mark.parametrize("sample", ["real", "sample"])
def test_live_rows_equal_batch_ingest_rows(spark, node_dir, tmp_path, monkeypatch, sample) -> None:
    """Differential: a real node dir (a real segment of 2 MB, its snapshot, bootstrap.checkpoint) and the
    bundled sample node, written while followed — the segments grow batch range by batch range and a
    poll takes at most 256 KiB (so a backlog is taken over many polls) — give exactly the rows one
    Spark ingest of the finished files gives, every column but when they were written. The small files
    of the polls are compacted every 3 polls meanwhile (rows unchanged), in row groups of 4,000 rows at
    most (a compaction buffers one row group, not its whole input)."""
    src = node_dir if sample == "real" else SAMPLE
    monkeypatch.setattr(F, "POLL_BYTES", 256 * 1024)
    monkeypatch.setattr(F, "COMPACT_EVERY", 3)
    monkeypatch.setattr(staged, "COMPACTION_ROW_GROUP_ROWS", 4000)
    live = tmp_path / "live"
    shutil.copytree(src, live)
    segs = sorted((live / "__cluster_metadata-0").glob("*.log"))
    full = {p: p.read_bytes() for p in segs}
    for p in segs:  # each segment first cut in the middle of a batch
        ends = _batch_ends(p)
        p.write_bytes(full[p][: ends[len(ends) // 2] + 5])
    lake = _driver_lake(tmp_path / "lake")
    first = follow(lake, [str(live)], interval=0.01, polls=1, say=_quiet)
    for p in segs:
        p.write_bytes(full[p])
    rest = follow(lake, [str(live)], interval=0.01, polls=40, say=_quiet)
    assert first.runs == 1 and rest.runs >= (4 if sample == "real" else 1)  # a backlog over several polls
    if sample == "real":  # enough polls: every third compacted the tables' small files
        files = {t.name: t.num_files for t in lake.tables()}
        assert files["ingest_files"] < first.runs + rest.runs and files["metadata_log"] < first.runs + rest.runs, files
        groups = [[md.row_group(i).num_rows for i in range(md.num_row_groups)]
                  for md in (pq.ParquetFile(f).metadata for f in (tmp_path / "lake" / "metadata_log").rglob("*compact*.parquet"))]
        assert any(len(g) > 1 for g in groups) and max(map(max, groups)) == 4000, groups
    batch = Lake(str(tmp_path / "batch"), spark, backend="deltars")
    run_ingest(spark, batch, [str(src)], say=_quiet)
    _assert_same_rows(lake, batch)


def test_a_damaged_prefix_is_quarantined_with_its_bytes_apart(spark, tmp_path) -> None:
    """A segment whose first bytes are not a batch (zeroed by a crash, say): the live ingest quarantines
    ``[0, data_start)`` as batch ingest does, the row in ``ingest_quarantine`` and its bytes in
    ``ingest_quarantine_raw``, and takes the batches after it."""
    live = tmp_path / "live"
    shutil.copytree(SAMPLE, live)
    seg = sorted((live / "__cluster_metadata-0").glob("*.log"))[0]
    seg.write_bytes(b"\x07" * 40 + seg.read_bytes())
    lake = _driver_lake(tmp_path / "lake")
    follow(lake, [str(live)], interval=0.01, polls=3, say=_quiet)
    q = lake.read_arrow("ingest_quarantine", ["source_file", "source_position", "length", "reason_code"])
    assert q.to_pylist() == [{"source_file": seg.name, "source_position": 0, "length": 40, "reason_code": "CORRUPT_PREFIX"}]
    assert "raw" not in lake.columns("ingest_quarantine")
    assert lake.read_arrow("ingest_quarantine_raw", ["raw"]).column("raw").to_pylist() == [b"\x07" * 40]
    batch = Lake(str(tmp_path / "batch"), spark, backend="deltars")
    run_ingest(spark, batch, [str(live)], say=_quiet)
    _assert_same_rows(lake, batch)


def test_a_segment_with_no_valid_batch_is_quarantined_whole_and_the_rest_goes_on(tmp_path) -> None:
    """A segment zeroed by a crash (batch ingest refuses such a file): the live ingest names it,
    quarantines it whole once (one ``CORRUPT_PREFIX`` row of its length, its first bytes kept) and takes
    the node's other files; when batches appear at its start, it is taken again from there."""
    live = tmp_path / "live"
    shutil.copytree(SAMPLE, live)
    segs = sorted((live / "__cluster_metadata-0").glob("*.log"))
    original = segs[0].read_bytes()
    segs[0].write_bytes(bytes(len(original)))
    lake = _driver_lake(tmp_path / "lake")
    said: list[str] = []
    follow(lake, [str(live)], interval=0.01, polls=3, say=said.append)
    q = lake.read_arrow("ingest_quarantine", ["source_file", "source_position", "length", "reason_code", "reason"]).to_pylist()
    assert [(r["source_file"], r["source_position"], r["length"], r["reason_code"]) for r in q] == [
        (segs[0].name, 0, len(original), "CORRUPT_PREFIX")]
    assert "no valid batch anywhere" in q[0]["reason"]
    assert sum(f"{segs[0].name}: no valid batch anywhere in its {len(original)} bytes" in s for s in said) == 1, said
    rest = _offsets(lake)
    assert rest and len(rest) == len(set(rest))  # the other segment's rows
    assert lake.read_arrow("ingest_quarantine_raw", ["raw"]).column("raw").to_pylist() == [bytes(len(original))]
    segs[0].write_bytes(original)  # the node writes batches at its start after all
    follow(lake, [str(live)], interval=0.01, polls=2, say=_quiet)
    clean = _driver_lake(tmp_path / "clean")
    follow(clean, [str(live)], interval=0.01, polls=1, say=_quiet)
    assert _offsets(lake) == _offsets(clean)


def _cli(*args: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib"), **kw.pop("env", {})}
    return subprocess.Popen([sys.executable, "-m", "kraft_replay.serve.cli", "--profile", "test", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, **kw)


@pytest.mark.parametrize("point", ["follow_positions", "publish"])
def test_kill_9_at_a_commit_and_restart(tmp_path, point) -> None:
    """A real ``ingest --follow`` process killed with SIGKILL right after the last commit of its poll
    (the rows and the positions committed, not published), or just after the publish: readers never
    see half a poll, and the restarted process ends with exactly the rows of an uninterrupted run — no
    duplicate, no gap."""
    live = tmp_path / "live"
    shutil.copytree(SAMPLE, live)
    lake = tmp_path / "lake"
    p = _cli("ingest", str(live), "--lake", str(lake), "--follow", "--polls", "1",
             env={"KRAFT_REPLAY_FAULT": f"kill-after-commit:{point}"})
    p.communicate(timeout=120)
    assert p.returncode == -signal.SIGKILL
    seen = _driver_lake(lake)
    published = seen.published_versions()
    visible = seen.read_arrow("metadata_log", ["offset"]).num_rows
    assert visible == (0 if point != "publish" else 49), published  # all of the poll or none of it
    again = _cli("ingest", str(live), "--lake", str(lake), "--follow", "--polls", "2")
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, err
    assert ("rolled back" in err) == (point != "publish"), err
    clean = tmp_path / "clean"
    follow(_driver_lake(clean), [str(live)], polls=1, say=_quiet)
    _assert_same_rows(_driver_lake(lake), _driver_lake(clean), (*ROW_TABLES, "ingest_files", FOLLOW_POSITIONS))


def test_ctrl_c_stops_it_with_one_line_and_no_jvm(tmp_path) -> None:
    live = tmp_path / "live"
    shutil.copytree(SAMPLE, live)
    lake = tmp_path / "lake"
    p = _cli("ingest", str(live), "--lake", str(lake), "--follow", "--interval", "0.2")
    deadline = time.monotonic() + 60
    while (_driver_lake(lake).published_versions().get("follow_positions") or 0) < 1:  # the first poll published
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()
        time.sleep(0.1)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert out.strip().count("\n") == 0 and "interrupted: every published poll is kept" in out, out
    assert "Traceback" not in err and "py4j" not in err.lower(), err
    assert not (lake / "_logs").exists()  # no Spark session was started (its log would be there)


def test_cli_follow_options(capsys, tmp_path) -> None:
    code = main(["ingest", str(tmp_path), "--lake", str(tmp_path / "lake"), "--polls", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--polls is an option of --follow" in err[0]
    code = main(["ingest", str(tmp_path / "nope"), "--follow", "--polls", "1", "--lake", str(tmp_path / "lake")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "no such file or directory" in err[0]


@pytest.mark.parametrize("args, says", [(["--interval", "0"], "--interval must be > 0"), (["--strict"], "exclude each other")])
def test_cli_follow_bad_values(capsys, tmp_path, args, says) -> None:
    code = main(["ingest", str(tmp_path), "--follow", *args, "--lake", str(tmp_path / "lake")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and says in err[0]
