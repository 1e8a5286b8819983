"""``ingest-metrics`` into a real lake: bronze rows, quarantine, idempotence, a live endpoint, the CLI."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from kraft_replay.ingest import metrics as M
from kraft_replay.ingest.metrics_run import ingest_metrics, known_brokers

ROOT = Path(__file__).resolve().parents[2]
OFF = M.DEFAULT_METRICS["offset"]
TS = M.DEFAULT_METRICS["timestamp"]
T0 = 1_795_514_400_000


@pytest.fixture()
def sample_lake(spark, lake):
    """A lake holding the sample node's log (its registered brokers) for cluster ``cid``."""
    from kraft_replay.ingest import run_ingest

    run_ingest(spark, lake, [str(ROOT / "data" / "samples" / "node1")], say=lambda s: None)
    cid = lake.read("metadata_log").select("cluster_id").first().cluster_id
    return lake, cid


def _rows(lake, table: str) -> list[tuple]:
    return sorted(tuple(r) for r in lake.read(table).drop("ingested_at").collect())


def test_files_into_bronze_with_quarantine_and_idempotent(spark, sample_lake, tmp_path: Path) -> None:
    lake, cid = sample_lake
    brokers = known_brokers(lake, cid)
    assert brokers, "the sample log registers brokers"
    b = min(brokers)
    prom = tmp_path / "scrape-1.prom"
    prom.write_text(f'{OFF}{{broker_id="{b}"}} 40 {T0}\n{TS}{{broker_id="{b}"}} {T0 - 30} {T0}\n'
                    f'{OFF}{{broker_id="999"}} 40 {T0}\n'
                    "garbage\n")
    csv = tmp_path / "more.csv"
    csv.write_text("broker_id,observed_at,applied_offset,applied_record_time\n"
                   f"{b},2026-11-24T10:00:01Z,41,2026-11-24T10:00:00.990Z\n"
                   f"{b},2026-11-24T09:00:00Z,1,\n")
    quorum = tmp_path / "quorum.txt"
    quorum.write_text("2026-11-24T10:00:00Z\nNodeId  LogEndOffset  Lag  LastFetchTimestamp  LastCaughtUpTimestamp  Status\n"
                      f"{b}  45  0  {T0 - 3}  {T0 - 3}  Leader\n")
    s = ingest_metrics(lake, [str(prom), str(csv), str(quorum)], cid)
    assert (s.samples, s.quorum_rows, s.rejected) == (2, 1, {"UNPARSEABLE": 1, "UNKNOWN_BROKER": 1, "TIME_BACKWARDS": 1})
    from datetime import datetime, timezone

    def ts(ms: int) -> datetime:
        return datetime.fromtimestamp(ms / 1000, timezone.utc).replace(tzinfo=None)

    got = [(r[1], r[3]) for r in _rows(lake, "broker_progress")]
    assert got == [(b, 40), (b, 41)]
    progress = lake.read("broker_progress").orderBy("observed_at").collect()
    assert (progress[0].observed_at, progress[0].applied_record_time) == (ts(T0), ts(T0 - 30))
    assert (progress[1].observed_at, progress[1].applied_record_time) == (ts(T0 + 1000), ts(T0 + 990))
    assert [(r.node_id, r.log_end_offset, r.status) for r in lake.read("quorum_replication").collect()] == [(b, 45, "Leader")]
    q = {(r.source.rsplit("/", 1)[-1], r.line, r.reason_code) for r in lake.read("metrics_quarantine").collect()}
    assert q == {("scrape-1.prom", 4, "UNPARSEABLE"), ("scrape-1.prom", 3, "UNKNOWN_BROKER"), ("more.csv", 3, "TIME_BACKWARDS")}
    before = {t: _rows(lake, t) for t in ("broker_progress", "quorum_replication", "metrics_quarantine")}
    ingest_metrics(lake, [str(tmp_path)], cid)  # the same files again, as a directory: nothing new
    assert {t: _rows(lake, t) for t in before} == before


class _Exporter(http.server.BaseHTTPRequestHandler):
    hits = 0

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        type(self).hits += 1
        body = f"# a JMX exporter page\n{OFF} {100 + self.hits}.0\n{TS} {T0 + self.hits}.0\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_follow_scrapes_a_live_endpoint(tmp_path: Path) -> None:
    """Each scrape is appended and published by a lake opened driver only: no Spark job (any would fail)."""
    from kraft_replay.lake import Lake

    lake = Lake(str(tmp_path / "lake"), None, backend="deltars")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Exporter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        lines: list[str] = []
        s = ingest_metrics(lake, [url], "live", broker_id=3, follow=True, interval=0.3, polls=3, say=lines.append)
    finally:
        server.shutdown()
    assert s.polls == 3 and s.samples == 3 and not s.brokers_checked
    rows = sorted(lake.read_arrow("broker_progress", ["broker_id", "observed_at", "applied_offset"]).to_pylist(),
                  key=lambda r: r["observed_at"])
    assert [r["applied_offset"] for r in rows] == [101, 102, 103]
    assert [r["broker_id"] for r in rows] == [3, 3, 3]
    assert len({r["observed_at"] for r in rows}) == 3 and len(lines) == 3
    history = lake.history("broker_progress")
    assert [h.get("kraft_replay.operation") for h in history[:3]] == ["MERGE"] * 3


CAPTURE = """2026-11-24T10:00:00Z
ClusterId:              {cid}
LeaderId:               1
LeaderEpoch:            3
HighWatermark:          47
MaxFollowerLag:         2
MaxFollowerLagTimeMs:   120
CurrentVoters:          [{{"id": 1, "directoryId": "J8aAPcfLQt2bqs1JT_rMgQ", "endpoints": ["CONTROLLER://kraft1:9093"]}}]
CurrentObservers:       [{{"id": 2, "directoryId": "b4Ob3qsYR0uhHjPILuBLxA"}}]
NodeId  DirectoryId             LogEndOffset    Lag     LastFetchTimestamp      LastCaughtUpTimestamp   Status
1       J8aAPcfLQt2bqs1JT_rMgQ  48              0       1795514399990           1795514399990           Leader
2       b4Ob3qsYR0uhHjPILuBLxA  46              2       1795514399871           1795514399500           Observer
"""


def test_a_status_and_replication_capture_without_format(tmp_path: Path) -> None:
    """``describe --status`` and ``--replication`` of one capture, format detected: the replicas into
    quorum_replication, the status block into quorum_status, nothing quarantined; again: nothing new."""
    from kraft_replay.lake import Lake

    cid = "MkU3OEVBNTcwNTJENDM2Qg"
    f = tmp_path / "quorum-capture.txt"
    f.write_text(CAPTURE.format(cid=cid))
    lake = Lake(str(tmp_path / "lake"), None, backend="deltars")
    s = ingest_metrics(lake, [str(f)], cid)
    assert (s.quorum_rows, s.status_rows, s.rejected) == (2, 1, {})
    assert sorted((r["node_id"], r["log_end_offset"], r["status"]) for r in
                  lake.read_arrow("quorum_replication", ["node_id", "log_end_offset", "status"]).to_pylist()) == [
        (1, 48, "Leader"), (2, 46, "Observer")]
    (st,) = lake.read_arrow("quorum_status", lake.schema("quorum_status").fieldNames()).to_pylist()
    assert (st["cluster_id"], st["reported_cluster_id"], st["leader_id"], st["leader_epoch"], st["high_watermark"],
            st["max_follower_lag"], st["max_follower_lag_time_ms"]) == (cid, cid, 1, 3, 47, 2, 120)
    assert st["current_voters"] == [{"id": 1, "directory_id": "J8aAPcfLQt2bqs1JT_rMgQ", "endpoints": ["CONTROLLER://kraft1:9093"]}]
    assert st["current_observers"] == [{"id": 2, "directory_id": "b4Ob3qsYR0uhHjPILuBLxA", "endpoints": []}]
    assert lake.read_arrow("metrics_quarantine", ["line"]).num_rows == 0
    versions = lake.published_versions()
    again = ingest_metrics(lake, [str(f)], cid)
    assert (again.quorum_rows, again.status_rows) == (2, 1)
    assert lake.read_arrow("quorum_status", ["leader_id"]).num_rows == 1
    assert lake.read_arrow("quorum_replication", ["node_id"]).num_rows == 2
    assert lake.published_versions()["quorum_status"] > versions["quorum_status"]  # merged: replaced, not added


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib")}
    return subprocess.run([sys.executable, "-m", "kraft_replay.serve.cli", "--profile", "test", *args],
                          capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)


def test_cli_help_and_bad_input(tmp_path: Path) -> None:
    h = _cli("ingest-metrics", "--help")
    assert h.returncode == 0 and "--metric-map" in h.stdout and "examples:" in h.stdout
    out = _cli("ingest-metrics", str(tmp_path / "nope.prom"), "--lake", str(tmp_path / "lake"))
    assert out.returncode == 2
    assert [x for x in out.stderr.splitlines() if x.strip()] == [
        f"kraft-replay ingest-metrics: error: ingest-metrics: no such file or directory: {tmp_path / 'nope.prom'}"]
    bad = _cli("ingest-metrics", "x", "--interval", "fast")
    assert bad.returncode == 2 and "bad interval 'fast'" in bad.stderr
    mm = _cli("ingest-metrics", str(tmp_path), "--metric-map", "lag=x", "--lake", str(tmp_path / "lake"))
    assert mm.returncode == 2 and "bad --metric-map 'lag=x'" in mm.stderr


def test_follow_rereads_a_growing_file_without_false_time_errors(spark, lake, tmp_path: Path) -> None:
    f = tmp_path / "broker2.prom"
    f.write_text(f"{OFF} 5 {T0}\n")
    lines: list[str] = []

    def say(line: str) -> None:  # called after each poll: the exporter's file grows between polls
        lines.append(line)
        if len(lines) == 1:
            with open(f, "a") as h:
                h.write(f"{OFF} 6 {T0 + 1000}\n")
            st = f.stat()
            os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))

    s = ingest_metrics(lake, [str(f)], "grow", broker_id=2, follow=True, interval=0.1, polls=3, say=say)
    assert (s.polls, s.samples, s.rejected) == (3, 2, {})  # poll 2 reads both lines again; poll 3: unchanged file
    assert [r.applied_offset for r in lake.read("broker_progress").orderBy("observed_at").collect()] == [5, 6]
    assert lines[2].startswith("  poll 3: 0 sample(s)")


def test_job_entry_point(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib")}
    out = subprocess.run([sys.executable, str(ROOT / "jobs" / "ingest_metrics.py"), str(tmp_path / "none.prom"),
                          "--lake", str(tmp_path / "lake"), "--profile", "test"], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 2 and "ingest-metrics: no such file or directory" in out.stderr


def test_cli_json_summary(spark, tmp_path: Path, capsys) -> None:
    """``--json``: the run's summary as one object on stdout, progress on stderr."""
    import json

    from kraft_replay.serve.cli import main

    f = tmp_path / "broker1.prom"
    f.write_text(f"{OFF} 7 {T0}\n{OFF} 9 {T0 + 1000}\nnot a sample line\n")
    rc = main(["--profile", "test", "ingest-metrics", str(f), "--lake", str(tmp_path / "lake"), "--cluster-id", "cj",
               "--broker-id", "1", "--json"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    doc = json.loads(out.out)
    assert (doc["cluster_id"], doc["polls"], doc["samples"], sum(doc["rejected"].values())) == ("cj", 1, 2, 1), doc
    assert "broker_progress" in doc["published"]
