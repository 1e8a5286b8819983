"""Parsing of broker metric samples and quorum captures (``kraft_replay.ingest.metrics``): no Spark."""

from __future__ import annotations

import json

import pytest

from kraft_replay.ingest import metrics as M

OFF = M.DEFAULT_METRICS["offset"]
TS = M.DEFAULT_METRICS["timestamp"]
T0 = 1_795_514_400_000  # 2026-11-24T10:00:00Z


def test_prometheus_text_pairs_offset_and_timestamp_per_broker() -> None:
    text = (f"# HELP {OFF} last applied\n# TYPE {OFF} untyped\n"
            f'{OFF}{{broker_id="1",}} 1234.0\n'
            f'{TS}{{broker_id="1",}} 1.795514399123E12\n'
            f'{OFF}{{broker_id="2",cluster="x"}} -1.0\n'
            f'{TS}{{broker_id="2",cluster="x"}} -1.0\n'
            'jvm_threads_current 41.0\njvm_gc_pause_seconds NaN\n')
    p = M.parse_prometheus_text(text, "s.prom", T0)
    assert p.rejects == []
    assert p.samples == [M.Sample(1, T0, 1234, 1_795_514_399_123, "s.prom", 3),
                         M.Sample(2, T0, -1, None, "s.prom", 5)]


def test_prometheus_sample_timestamps_and_broker_id_option() -> None:
    text = f"{OFF} 10 {T0 + 5}\n{TS} {T0 - 7} {T0 + 5}\n{OFF} 12 {T0 + 1005}\n"
    p = M.parse_prometheus_text(text, "b1", 0, broker_id=7)
    assert [(s.broker_id, s.observed_ms, s.applied_offset, s.applied_record_ms) for s in p.samples] == [
        (7, T0 + 5, 10, T0 - 7), (7, T0 + 1005, 12, None)]


def test_prometheus_bad_lines_are_rejected_with_line_numbers() -> None:
    text = (f'{OFF}{{broker_id="1"}} NaN\n'
            "this is not exposition\n"
            "broken line\n"
            f'{OFF}{{broker_id="x"}} 5\n'
            f"{OFF} 5\n"
            f'{OFF}{{broker_id="3"}} 5.5\n'
            f'{TS}{{broker_id="4"}} {T0}\n')
    p = M.parse_prometheus_text(text, "f", T0)
    assert p.samples == []
    assert [(r.line, r.reason_code) for r in p.rejects] == [
        (1, "BAD_VALUE"), (2, "UNPARSEABLE"), (3, "UNPARSEABLE"), (4, "NO_BROKER_ID"), (5, "NO_BROKER_ID"),
        (6, "BAD_VALUE"), (7, "MISSING_OFFSET")]
    assert "no --broker-id" in p.rejects[4].reason


def test_metric_map_and_broker_label() -> None:
    names = M.metric_names(["offset=kafka_meta_offset", "timestamp=kafka_meta_ts"], "instance_broker")
    text = f'kafka_meta_offset{{instance_broker="3"}} 99\nkafka_meta_ts{{instance_broker="3"}} {T0}\n{OFF}{{broker_id="1"}} 5\n'
    p = M.parse_prometheus_text(text, "f", T0, names)
    assert [(s.broker_id, s.applied_offset, s.applied_record_ms) for s in p.samples] == [(3, 99, T0)]
    with pytest.raises(ValueError, match="bad --metric-map"):
        M.metric_names(["lag=x"])


def test_query_range_result() -> None:
    doc = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": OFF, "broker_id": "1", "instance": "b1:7071"},
         "values": [[1795514400, "100"], [1795514401.5, "120"]]},
        {"metric": {"__name__": TS, "broker_id": "1"}, "values": [[1795514400, str(T0 - 20)]]},
        {"metric": {"__name__": OFF, "broker_id": "2"}, "values": [[1795514400, "oops"]]},
    ]}}
    text = json.dumps(doc, indent=2)
    assert M.detect_format(text, "export.json") == "query_range"
    p = M.parse_query_range(text, "export.json")
    assert [(s.broker_id, s.observed_ms, s.applied_offset, s.applied_record_ms) for s in p.samples] == [
        (1, T0, 100, T0 - 20), (1, T0 + 1500, 120, None)]
    assert [(r.line, r.reason_code) for r in p.rejects] == [(3, "BAD_VALUE")]
    bad = M.parse_query_range('{"status": "error", "error": "timeout"}', "e.json")
    assert [r.reason_code for r in bad.rejects] == ["UNPARSEABLE"] and "status 'error'" in bad.rejects[0].reason


def test_csv_and_jsonl() -> None:
    csv_text = ("cluster_id,broker_id,observed_at,applied_offset,applied_record_time\n"
                "c1,1,2026-11-24T10:00:00Z,10,2026-11-24T09:59:59.5Z\n"
                "c1,2,2026-11-24T10:00:00Z,-1,\n"
                "c1,1,yesterday,11,\n"
                "c2,1,2026-11-24T10:00:01Z,12,\n"
                "c1,1\n")
    assert M.detect_format(csv_text, "p.txt") == "csv"
    p = M.parse_csv(csv_text, "p.csv", "c1")
    assert [(s.broker_id, s.observed_ms, s.applied_offset, s.applied_record_ms) for s in p.samples] == [
        (1, T0, 10, T0 - 500), (2, T0, -1, None)]
    assert [(r.line, r.reason_code) for r in p.rejects] == [(4, "BAD_VALUE"), (5, "OTHER_CLUSTER"), (6, "UNPARSEABLE")]
    jl = ('{"broker_id": 1, "observed_at": 1795514400000, "applied_offset": 5}\n'
          "{broken\n\n"
          '{"broker_id": 1, "observed_at": "2026-11-24T10:00:02Z", "applied_offset": 6, "applied_record_time": "2026-11-24T10:00:01Z"}\n')
    assert M.detect_format(jl, "x") == "jsonl"
    p = M.parse_jsonl(jl, "x.jsonl", "c1")
    assert [(s.observed_ms, s.applied_offset, s.applied_record_ms) for s in p.samples] == [(T0, 5, None), (T0 + 2000, 6, T0 + 1000)]
    assert [(r.line, r.reason_code) for r in p.rejects] == [(2, "UNPARSEABLE")]


QUORUM = """Tue Nov 24 10:00:00 UTC 2026
NodeId  DirectoryId             LogEndOffset    Lag     LastFetchTimestamp      LastCaughtUpTimestamp   Status
1       J8aAPcfLQt2bqs1JT_rMgQ  61              0       1795514399990           1795514399990           Leader
2       b4Ob3qsYR0uhHjPILuBLxA  58              3       1795514399871           1795514399500           Follower
3       SUGD5KmuQD6OGdQ1qZ_oeA  61              0       -1                      -1                      Observer
2026-11-24T10:00:10Z
NodeId  LogEndOffset    Lag     LastFetchTimestamp      LastCaughtUpTimestamp   Status
1       70              0       5 ms ago                5 ms ago                Leader
2       x               0       5 ms ago                5 ms ago                Follower
"""


def test_quorum_replication_captures() -> None:
    assert M.detect_format(QUORUM, "q.txt") == "quorum"
    p = M.parse_quorum_text(QUORUM, "q.txt", 0)
    assert [(r.observed_ms, r.node_id, r.directory_id, r.log_end_offset, r.lag, r.last_fetch_ms, r.last_caught_up_ms, r.status)
            for r in p.quorum] == [
        (T0, 1, "J8aAPcfLQt2bqs1JT_rMgQ", 61, 0, 1795514399990, 1795514399990, "Leader"),
        (T0, 2, "b4Ob3qsYR0uhHjPILuBLxA", 58, 3, 1795514399871, 1795514399500, "Follower"),
        (T0, 3, "SUGD5KmuQD6OGdQ1qZ_oeA", 61, 0, None, None, "Observer"),
        (T0 + 10_000, 1, None, 70, 0, T0 + 9_995, T0 + 9_995, "Leader")]
    assert [(r.line, r.reason_code) for r in p.rejects] == [(9, "BAD_VALUE")]
    assert p.samples == []  # fetch positions never become applied-offset samples


# `kafka-metadata-quorum describe --status` then `describe --replication` (one invocation each: the tool
# takes one of the two), Kafka 3.9 on, as Kafka's operations guide prints the status block (the voter and
# observer lists wrapped over several lines) and with the tool's padded replication table
CAPTURE_39 = """2026-11-24T10:00:00Z
ClusterId:              MkU3OEVBNTcwNTJENDM2Qg
LeaderId:               3002
LeaderEpoch:            2
HighWatermark:          61
MaxFollowerLag:         3
MaxFollowerLagTimeMs:   -1
CurrentVoters:          [{"id": 3000, "directoryId": "ILZ5MPTeRWakmJu99uBJCA", "endpoints": ["CONTROLLER://localhost:9093"]},
                         {"id": 3001, "directoryId": "b-DwmhtOheTqZzPoh52kfA", "endpoints": ["CONTROLLER://localhost:9094"]},
                         {"id": 3002, "directoryId": "g42deArWBTRM5A1yuVpMCg", "endpoints": ["CONTROLLER://localhost:9095"]}]
CurrentObservers:       [{"id": 0, "directoryId": "3Db5QLSqSZieL3rJBUUegA"},
                         {"id": 1, "directoryId": "UegA3Db5QLSqSZieL3rJBU"}]
NodeId  DirectoryId             LogEndOffset    Lag     LastFetchTimestamp      LastCaughtUpTimestamp   Status
3002    g42deArWBTRM5A1yuVpMCg  61              0       1795514399990           1795514399990           Leader
3000    ILZ5MPTeRWakmJu99uBJCA  61              0       1795514399871           1795514399871           Follower
3001    b-DwmhtOheTqZzPoh52kfA  58              3       1795514399500           1795514399100           Follower
0       3Db5QLSqSZieL3rJBUUegA  60              1       1795514399950           1795514399950           Observer
1       UegA3Db5QLSqSZieL3rJBU  61              0       1795514399960           1795514399960           Observer
"""

# before Kafka 3.9: no directory ids, the lists are ids; here the replication table comes first and the
# status block (one line each, as the tool prints it) after it, the next capture without a time line
CAPTURE_38 = """Tue Nov 24 10:00:05 UTC 2026
NodeId  LogEndOffset    Lag     LastFetchTimestamp      LastCaughtUpTimestamp   Status
1       880             0       1795514404990           1795514404990           Leader
4       876             4       1795514404918           1795514404018           Observer
ClusterId:              MkU3OEVBNTcwNTJENDM2Qg
LeaderId:               1
LeaderEpoch:            3
HighWatermark:          877
MaxFollowerLag:         0
MaxFollowerLagTimeMs:   0
CurrentVoters:          [1,2,3]
CurrentObservers:       [4]
"""


def test_quorum_status_and_replication_blocks() -> None:
    for text in (CAPTURE_39, CAPTURE_38):  # either block first is a quorum capture
        assert M.detect_format(text, "capture.txt") == "quorum"
    p = M.parse_quorum_text(CAPTURE_39 + CAPTURE_38, "capture.txt", 0, "MkU3OEVBNTcwNTJENDM2Qg")
    assert p.rejects == [] and p.samples == []
    assert [(r.observed_ms, r.node_id, r.directory_id, r.log_end_offset, r.lag, r.status) for r in p.quorum] == [
        (T0, 3002, "g42deArWBTRM5A1yuVpMCg", 61, 0, "Leader"), (T0, 3000, "ILZ5MPTeRWakmJu99uBJCA", 61, 0, "Follower"),
        (T0, 3001, "b-DwmhtOheTqZzPoh52kfA", 58, 3, "Follower"), (T0, 0, "3Db5QLSqSZieL3rJBUUegA", 60, 1, "Observer"),
        (T0, 1, "UegA3Db5QLSqSZieL3rJBU", 61, 0, "Observer"),
        (T0 + 5000, 1, None, 880, 0, "Leader"), (T0 + 5000, 4, None, 876, 4, "Observer")]
    new, old = p.status
    assert (new.observed_ms, new.reported_cluster_id, new.leader_id, new.leader_epoch, new.high_watermark,
            new.max_follower_lag, new.max_follower_lag_time_ms, new.line) == (
        T0, "MkU3OEVBNTcwNTJENDM2Qg", 3002, 2, 61, 3, None, 2)  # -1: not known
    assert new.voters == ((3000, "ILZ5MPTeRWakmJu99uBJCA", ("CONTROLLER://localhost:9093",)),
                          (3001, "b-DwmhtOheTqZzPoh52kfA", ("CONTROLLER://localhost:9094",)),
                          (3002, "g42deArWBTRM5A1yuVpMCg", ("CONTROLLER://localhost:9095",)))
    assert new.observers == ((0, "3Db5QLSqSZieL3rJBUUegA", ()), (1, "UegA3Db5QLSqSZieL3rJBU", ()))
    assert (old.observed_ms, old.leader_id, old.high_watermark, old.max_follower_lag_time_ms, old.voters, old.observers) == (
        T0 + 5000, 1, 877, 0, ((1, None, ()), (2, None, ()), (3, None, ())), ((4, None, ()),))
    rows = M.status_table("c1", p.status).to_pylist()
    assert rows[0]["current_voters"][2] == {"id": 3002, "directory_id": "g42deArWBTRM5A1yuVpMCg",
                                            "endpoints": ["CONTROLLER://localhost:9095"]}
    assert rows[1]["current_observers"] == [{"id": 4, "directory_id": None, "endpoints": []}]
    # the same text through the format's dispatch: nothing quarantined (before: 8 status lines were)
    q = M.parse(CAPTURE_39, "capture.txt", "quorum", cluster_id="MkU3OEVBNTcwNTJENDM2Qg", observed_ms=0)
    assert (len(q.quorum), len(q.status), q.rejects) == (5, 1, [])


def test_quorum_status_bad_blocks_are_quarantined() -> None:
    text = ("2026-11-24T10:00:00Z\nClusterId: OtherCluster0000000000A\nLeaderId: 1\nLeaderEpoch: 3\nHighWatermark: 9\n"
            "2026-11-24T10:00:01Z\nLeaderId: 1\nLeaderEpoch: 3\nHighWatermark: nine\n"
            "2026-11-24T10:00:02Z\nLeaderId: 1\nLeaderEpoch: 3\nHighWatermark: 9\nCurrentVoters: [1,2,\n"
            "2026-11-24T10:00:03Z\nClusterId: C\nLeaderId: 1\nHighWatermark: 9\n"
            "2026-11-24T10:00:04Z\nLeaderId: 2\nLeaderEpoch: 4\nHighWatermark: -1\nCurrentVoters: [{\"id\": 1}]\n"
            "LeaderId: 3\nLeaderEpoch: 5\nHighWatermark: 7\n")
    p = M.parse_quorum_text(text, "s.txt", 0, "C")
    assert [(r.line, r.reason_code) for r in p.rejects] == [
        (2, "OTHER_CLUSTER"), (9, "BAD_VALUE"), (14, "BAD_VALUE"), (16, "UNPARSEABLE"), (24, "DUPLICATE_SAMPLE")]
    assert [(s.observed_ms, s.leader_id, s.high_watermark, s.voters, s.observers) for s in p.status] == [
        (T0 + 4000, 2, None, ((1, None, ()),), None)]  # HighWatermark -1: not known; no observers line


def test_checks_unknown_broker_time_backwards_duplicates() -> None:
    s = [M.Sample(1, T0, 5, None, "a", 1), M.Sample(9, T0, 5, None, "a", 2), M.Sample(1, T0 - 1, 4, None, "a", 3),
         M.Sample(1, T0, 5, None, "a", 4), M.Sample(1, T0, 6, None, "a", 5), M.Sample(1, T0 - 1, 4, None, "b", 1),
         M.Sample(1, T0 + 1, 2, None, "a", 6)]
    kept, rej = M.check_samples(s, {1, 2})
    assert [(k.source, k.line) for k in kept] == [("a", 1), ("b", 1), ("a", 6)]  # an offset may go down (restart)
    assert [(r.line, r.reason_code) for r in rej] == [(2, "UNKNOWN_BROKER"), (3, "TIME_BACKWARDS"), (5, "DUPLICATE_SAMPLE")]
    kept, rej = M.check_samples(s[:2], None)
    assert len(kept) == 2 and rej == []


def test_parse_time_forms() -> None:
    for text in ("2026-11-24T10:00:00Z", "2026-11-24T11:00:00+01:00", "2026-11-24 10:00:00", "1795514400",
                 "1795514400000", "Tue Nov 24 10:00:00 UTC 2026"):
        assert M.parse_time(text) == T0, text
    assert M.parse_time("soon") is None and M.parse_time("-5") is None
