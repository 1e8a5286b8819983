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
