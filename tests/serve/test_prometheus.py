"""``/metrics`` on the dashboard's server (:mod:`kraft_replay.serve.prometheus`): each broker's newest
``cache_lag`` bucket as Prometheus gauges, read back with ``prometheus_client``'s own text parser.

Lakes are the dashboard tests' delta-rs lakes (no Spark)."""

from __future__ import annotations

import base64
import re
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
from prometheus_client.parser import text_string_to_metric_families

from kraft_replay.lake.reader import LakeReader
from kraft_replay.serve.auth import BasicAuth, hash_line, load_users
from kraft_replay.serve.dashboard import create_app
from kraft_replay.serve.prometheus import BROKER_GAUGES, metrics_text
from test_dashboard import BROKERS, BUCKETS, C1, T0, cache_lag_rows, make_lake, write


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    """``{(sample name, sorted labels): value}`` of an exposition page, parsed by prometheus_client."""
    out = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge", family.name
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _broker(cluster: str, broker: int) -> tuple:
    return (("broker", str(broker)), ("cluster", cluster))


def test_each_broker_s_newest_bucket_served_at_metrics(tmp_path):
    """The page of a real dashboard app: one sample per gauge and broker, from the newest bucket, and
    the age of each cluster's newest data."""
    lake = make_lake(tmp_path / "lake", ("cache_lag",))
    app = create_app(str(lake))
    resp = app.server.test_client().get("/metrics")
    assert resp.status_code == 200 and resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    got = _samples(resp.get_data(as_text=True))
    last = BUCKETS - 1  # the rows of test_dashboard.cache_lag_rows at their newest bucket
    for cluster, brokers in BROKERS.items():
        for b in brokers:
            labels = _broker(cluster, b)
            assert got[("kraft_replay_broker_applied_offset", labels)] == 100 * last
            assert got[("kraft_replay_broker_log_end_offset", labels)] == 100 * last + (last * b) % 17
            assert got[("kraft_replay_broker_offset_lag", labels)] == (last * b) % 17
            assert got[("kraft_replay_broker_time_lag_ms", labels)] == 10 * ((last * b) % 23)
            assert got[("kraft_replay_broker_image_divergence", labels)] == (last + b) % 5
            assert got[("kraft_replay_broker_stalled", labels)] == 0
            assert got[("kraft_replay_broker_bucket_timestamp_seconds", labels)] == (T0 + timedelta(seconds=last)).timestamp()
        newest = (T0 + timedelta(seconds=last)).timestamp()
        assert got[("kraft_replay_newest_data_timestamp_seconds", (("cluster", cluster),))] == newest
        assert got[("kraft_replay_newest_data_age_seconds", (("cluster", cluster),))] > 0
    assert got[("kraft_replay_cache_lag_readable", ())] == 1
    per_broker = sum(len(b) for b in BROKERS.values())
    assert len(got) == len(BROKER_GAUGES) * per_broker + 2 * len(BROKERS) + 1


def test_a_new_version_is_seen_at_the_next_scrape_and_the_age_follows_the_clock(tmp_path):
    lake = make_lake(tmp_path / "lake", ("cache_lag",))
    reader = LakeReader(str(lake))
    newest = T0 + timedelta(seconds=BUCKETS - 1)
    now = newest.timestamp() + 7.5
    before = _samples(metrics_text(reader, now=lambda: now).decode())
    assert before[("kraft_replay_newest_data_age_seconds", (("cluster", C1),))] == 7.5
    stalled = cache_lag_rows(C1, [2], BUCKETS, 1)  # one newer bucket of broker 2, stalled
    i = stalled.schema.get_field_index("stalled")
    stalled = stalled.set_column(i, stalled.schema.field(i), pa.array([True]))
    write(lake, "cache_lag", stalled)
    after = _samples(metrics_text(reader, now=lambda: now).decode())
    assert after[("kraft_replay_broker_stalled", _broker(C1, 2))] == 1
    assert after[("kraft_replay_broker_applied_offset", _broker(C1, 2))] == 100 * BUCKETS
    assert after[("kraft_replay_broker_applied_offset", _broker(C1, 1))] == 100 * (BUCKETS - 1)  # the others unchanged
    assert after[("kraft_replay_newest_data_age_seconds", (("cluster", C1),))] == 6.5


def test_no_table_yet_and_an_unreadable_table_still_answer(tmp_path):
    """Before any replay: the page answers with no broker gauges. A ``cache_lag`` that cannot be read:
    ``kraft_replay_cache_lag_readable`` 0, still 200."""
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _samples(metrics_text(LakeReader(str(empty))).decode()) == {("kraft_replay_cache_lag_readable", ()): 1}
    lake = make_lake(tmp_path / "lake", ("cache_lag",))
    for f in (lake / "cache_lag").glob("cluster_id=*/*.parquet"):
        f.write_bytes(b"not parquet")
    resp = create_app(str(lake)).server.test_client().get("/metrics")
    assert resp.status_code == 200
    assert _samples(resp.get_data(as_text=True)) == {("kraft_replay_cache_lag_readable", ()): 0}


def test_metrics_sit_behind_the_dashboard_s_login(tmp_path):
    lake = make_lake(tmp_path / "lake", ("cache_lag",))
    users = tmp_path / "users.txt"
    users.write_text(hash_line("prometheus", "scrape me") + "\n")
    app = create_app(str(lake))
    BasicAuth(load_users(str(users))).install(app.server)
    client = app.server.test_client()
    assert client.get("/metrics").status_code == 401
    token = base64.b64encode(b"prometheus:scrape me").decode()
    ok = client.get("/metrics", headers={"Authorization": f"Basic {token}"})
    assert ok.status_code == 200 and "kraft_replay_broker_offset_lag" in ok.get_data(as_text=True)


def test_the_sample_alert_rules_name_only_served_gauges():
    """docs/alerts.md's rules use gauges this page serves (a renamed gauge would break them silently)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "alerts.md").read_text()
    used = set(re.findall(r"\bkraft_replay_[a-z_]+\b", text))
    served = set(BROKER_GAUGES) | {"kraft_replay_newest_data_timestamp_seconds", "kraft_replay_newest_data_age_seconds",
                                   "kraft_replay_cache_lag_readable"}
    assert used and used <= served, used - served
