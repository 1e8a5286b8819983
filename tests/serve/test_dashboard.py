"""The live dashboard (``kraft-replay dashboard``): the JVM-free lake reader, the chart functions, the page's
refresh callback, the CLI, and the page in a real headless Chromium.

Lakes are written with delta-rs (``write_deltalake`` of hand-made Arrow tables), no Spark; without a
``_published`` table every table is read at its head.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path

import dash
import pandas as pd
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from kraft_replay.lake.reader import LakeReader
from kraft_replay.serve import charts
from kraft_replay.serve.dashboard import NO_DATA, create_app, reader_for, refresh
from kraft_replay.serve.report import write_report

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2025, 3, 1, tzinfo=timezone.utc)
C1, C2 = "clusterA", "clusterB"
BROKERS = {C1: [1, 2, 3], C2: [7, 8]}
BUCKETS = 40
TS = pa.timestamp("us", tz="UTC")
I64, I32 = pa.int64(), pa.int32()

CACHE_LAG = pa.schema([("cluster_id", pa.string()), ("broker_id", I32), ("bucket_start", TS),
                       ("samples", I64), ("applied_offset", I64), ("log_end_offset", I64),
                       ("offset_lag_p50", I64), ("offset_lag_p99", I64), ("offset_lag_max", I64),
                       ("time_lag_ms_p50", I64), ("time_lag_ms_p99", I64), ("time_lag_ms_max", I64),
                       ("registered", pa.bool_()), ("fenced", pa.bool_()), ("stalled", pa.bool_()),
                       ("image_divergence", I64)])
BROKER_STATES = pa.schema([("cluster_id", pa.string()), ("broker_id", I32), ("state", pa.string()),
                           ("from_time", TS), ("to_time", TS), ("broker_epoch", I64), ("heartbeat_gap", pa.bool_()),
                           ("gap_ms", I64)])
CONSISTENCY = pa.schema([("cluster_id", pa.string()), ("target_broker", I32), ("hour", TS), ("policy", pa.string()),
                         ("requests", I64), ("attempts", I64), ("admitted", I64), ("admitted_after_wait", I64),
                         ("stale_metadata", I64), ("violations_avoided", I64)])
FENCING = pa.schema([("cluster_id", pa.string()), ("topic_name", pa.string()), ("hour", TS), ("requests", I64),
                     ("stale_leader_accepts", I64), ("fenced_by_check", I64), ("lost_acks_0_1", I64),
                     ("lost_acks_all", I64)])
FEATURES = pa.schema([("cluster_id", pa.string()), ("name", pa.string()), ("feature_level", pa.int16()),
                      ("metadata_version", pa.string()), ("deleted", pa.bool_()), ("valid_from_time", TS),
                      ("valid_to_time", TS)])
TRANSITIONS = pa.schema([("cluster_id", pa.string()), ("feature", pa.string()), ("time", TS), ("from_level", I32),
                         ("to_level", I32), ("from_version", pa.string()), ("to_version", pa.string()),
                         ("kind", pa.string()), ("unsupported_nodes", pa.list_(pa.string()))])
PUBLISHED = pa.schema([pa.field("table_name", pa.string(), nullable=False), pa.field("version", I64, nullable=False),
                       ("run_id", pa.string()), ("published_at", TS)])


# --- lakes written with delta-rs ----------------------------------------------------------------------

def cache_lag_rows(cluster: str, brokers: list[int], first: int, count: int) -> pa.Table:
    """``count`` one-second buckets from ``T0 + first`` s for each broker; lag values vary by broker and bucket."""
    rows = [(cluster, b, T0 + timedelta(seconds=i), 1, 100 * i, 100 * i + (i * b) % 17, (i * b) % 11, (i * b) % 17,
             (i * b) % 23, 10 * ((i * b) % 11), 10 * ((i * b) % 17), 10 * ((i * b) % 23), True, i % 13 == 0, False,
             (i + b) % 5)
            for b in brokers for i in range(first, first + count)]
    return pa.Table.from_pylist([dict(zip(CACHE_LAG.names, r, strict=True)) for r in rows], schema=CACHE_LAG)


def broker_state_rows(cluster: str, brokers: list[int]) -> pa.Table:
    """Per broker: OFFLINE [0 s, 1 s), ONLINE [1 s, 20 s), FENCED [20 s, 25 s) after a heartbeat gap, ONLINE from 25 s (open)."""
    def at(s: float) -> datetime:
        return T0 + timedelta(seconds=s)
    rows = []
    for b in brokers:
        rows += [(cluster, b, "OFFLINE", at(0), at(1), b, None, None), (cluster, b, "ONLINE", at(1), at(20), b, None, None),
                 (cluster, b, "FENCED", at(20), at(25), b, True, 9000), (cluster, b, "ONLINE", at(25), None, b + 10, None, None)]
    return pa.Table.from_pylist([dict(zip(BROKER_STATES.names, r, strict=True)) for r in rows], schema=BROKER_STATES)


def consistency_rows(cluster: str, brokers: list[int]) -> pa.Table:
    """Per broker and policy, one hour: 100 requests; fail and wait differ so the rates tell them apart."""
    per_policy = {"none": (100, 90, 0, 0, 0), "fail": (120, 80, 0, 20, 4), "wait": (102, 85, 10, 2, 5)}
    rows = [(cluster, b, T0, policy, 100, attempts, admitted, after_wait, stale, avoided)
            for b in brokers for policy, (attempts, admitted, after_wait, stale, avoided) in per_policy.items()]
    return pa.Table.from_pylist([dict(zip(CONSISTENCY.names, r, strict=True)) for r in rows], schema=CONSISTENCY)


def fencing_rows(cluster: str) -> pa.Table:
    """Two topics, one hour, 2000 produce requests: outcome rates of 1.2 %, 0.8 %, 0.6 % and 0.4 % (a share
    axis labelled in whole percents reads them 0%, 0%, 0%, 1%, ...: issue 45)."""
    rows = [(cluster, f"topic-{t}", T0, 1000, 11 + 2 * t, 8, 6, 4) for t in range(2)]
    return pa.Table.from_pylist([dict(zip(FENCING.names, r, strict=True)) for r in rows], schema=FENCING)


def feature_rows(cluster: str) -> tuple[pa.Table, pa.Table]:
    """metadata.version 11 until 30 s, then 21 (open); the matching INITIAL and UPGRADE transitions."""
    up = T0 + timedelta(seconds=30)
    features = [(cluster, "metadata.version", 11, "3.5-IV2", False, T0, up), (cluster, "metadata.version", 21, "3.9-IV0", False, up, None)]
    transitions = [(cluster, "metadata.version", T0, None, 11, None, "3.5-IV2", "INITIAL", []),
                   (cluster, "metadata.version", up, 11, 21, "3.5-IV2", "3.9-IV0", "UPGRADE", ["3"])]
    return (pa.Table.from_pylist([dict(zip(FEATURES.names, r, strict=True)) for r in features], schema=FEATURES),
            pa.Table.from_pylist([dict(zip(TRANSITIONS.names, r, strict=True)) for r in transitions], schema=TRANSITIONS))


def write(root: Path, name: str, table: pa.Table, mode: str = "append") -> None:
    write_deltalake(str(root / name), table, mode=mode, partition_by=["cluster_id"])


def make_lake(root: Path, tables: tuple[str, ...] = tuple(charts.TABLE_COLUMNS)) -> Path:
    """A lake with both clusters in each of ``tables`` (no ``_published``: heads are read)."""
    for cluster, brokers in BROKERS.items():
        feats, trans = feature_rows(cluster)
        content = {"cache_lag": cache_lag_rows(cluster, brokers, 0, BUCKETS),
                   "broker_states": broker_state_rows(cluster, brokers),
                   "consistency_summary": consistency_rows(cluster, brokers), "fencing_summary": fencing_rows(cluster),
                   "features": feats, "feature_transitions": trans}
        for name in tables:
            write(root, name, content[name])
    return root


@pytest.fixture(scope="module")
def full_lake(tmp_path_factory) -> Path:
    """A lake with every charted table; tests must not write to it (copy it first)."""
    return make_lake(tmp_path_factory.mktemp("dash") / "lake")


def traces(fig, name: str | None = None) -> list:
    return [t for t in fig.data if name is None or t.name == name]


def annotation_texts(fig) -> list[str]:
    return [a.text for a in fig.layout.annotations]


def lag_points(result: dict) -> dict[str, int]:
    """Points per trace of the offsets lag chart."""
    return {t.name: len(t.x) for t in result["lag-offsets"].data}


# --- the reader -----------------------------------------------------------------------------------------

def test_reader_reads_head_caches_and_picks_up_new_versions(tmp_path):
    write(tmp_path, "cache_lag", cache_lag_rows(C1, [1], 0, 5))
    reader = LakeReader(str(tmp_path))
    first = reader.read("cache_lag")
    assert reader.version("cache_lag") == 0 and first.num_rows == 5 and reader.reads == 1
    assert reader.read("cache_lag") is first and reader.reads == 1  # no new version: nothing read
    write(tmp_path, "cache_lag", cache_lag_rows(C1, [1], 5, 3))
    second = reader.read("cache_lag")
    assert reader.version("cache_lag") == 1 and second.num_rows == 8 and reader.reads == 2
    assert reader.read("cache_lag", ["broker_id"]).column_names == ["broker_id"]


def test_reader_missing_lake_and_table(tmp_path):
    reader = LakeReader(str(tmp_path / "no-such-lake"))
    assert reader.published_versions() == {}
    assert reader.version("cache_lag") is None and reader.read("cache_lag") is None
    write(tmp_path / "lake", "features", feature_rows(C1)[0])
    reader = LakeReader(str(tmp_path / "lake"))
    assert reader.read("cache_lag") is None and reader.read("features").num_rows == 2


def test_reader_and_page_read_the_published_version(tmp_path):
    """A table named in ``_published`` is read at that version even when its head is newer; others at their head."""
    write(tmp_path, "cache_lag", cache_lag_rows(C1, [1, 2], 0, 10))  # v0: 20 rows
    write(tmp_path, "cache_lag", cache_lag_rows(C1, [1, 2], 10, 30))  # v1 (unpublished): 60 more
    write(tmp_path, "features", feature_rows(C1)[0])
    write(tmp_path, "features", feature_rows(C2)[0])  # head v1, not in _published
    write_deltalake(str(tmp_path / "_published"), pa.Table.from_pylist(
        [{"table_name": "cache_lag", "version": 0, "run_id": "r1", "published_at": T0}], schema=PUBLISHED))
    reader = LakeReader(str(tmp_path))
    assert reader.published_versions() == {"cache_lag": 0}
    assert reader.version("cache_lag") == 0 and reader.read("cache_lag").num_rows == 20
    assert reader.version("features") == 1 and reader.read("features").num_rows == 4
    result = refresh(1, C1, None, None, None, str(tmp_path))
    assert lag_points(result) == {"broker 1": 10, "broker 1 max": 10, "broker 2": 10, "broker 2 max": 10}
    assert "cache_lag v0" in result["status"] and "features v1" in result["status"]


# --- chart functions --------------------------------------------------------------------------------------

def test_every_chart_says_no_data_yet_on_empty_frames():
    frames = charts.load_frames(LakeReader("/nonexistent/lake"))
    figures = charts.chart_figures(frames)
    assert list(figures) == list(charts.CHARTS)
    for chart_id, fig in figures.items():
        assert charts.NO_DATA in annotation_texts(fig), chart_id
        assert all(len(t.x or ()) == 0 for t in fig.data), chart_id


def test_lag_and_divergence_charts_have_one_point_per_row_and_broker(full_lake):
    frames = charts.load_frames(LakeReader(str(full_lake)), C1)
    lag = frames.cache_lag
    for fig, column, names in ((charts.lag_offsets_figure(lag), "offset_lag_p99", ("broker {b}", "broker {b} max")),
                               (charts.lag_ms_figure(lag), "time_lag_ms_p99", ("broker {b}", "broker {b} max")),
                               (charts.divergence_figure(lag), "image_divergence", ("broker {b}",))):
        assert sorted(t.name for t in fig.data) == sorted(n.format(b=b) for b in BROKERS[C1] for n in names)
        for b in BROKERS[C1]:
            (trace,) = traces(fig, f"broker {b}")
            assert len(trace.x) == BUCKETS
            assert list(trace.y) == list(lag[lag["broker_id"] == b].sort_values("bucket_start")[column])


def test_broker_states_chart_closes_open_intervals_at_the_end_given(full_lake):
    frames = charts.load_frames(LakeReader(str(full_lake)), C1)
    end = pd.Timestamp("2025-03-01 00:01:00")
    fig = charts.broker_states_figure(frames.broker_states, end)
    assert sorted(t.name for t in fig.data) == ["FENCED", "OFFLINE", "ONLINE"]
    (online,) = traces(fig, "ONLINE")
    assert len(online.x) == 2 * len(BROKERS[C1])
    ends = [pd.Timestamp(base) + pd.Timedelta(milliseconds=ms) for base, ms in zip(online.base, online.x, strict=True)]
    assert max(ends) == end and sorted(set(online.y)) == [f"broker {b}" for b in BROKERS[C1]]
    default = charts.broker_states_figure(frames.broker_states)  # no end: the frame's last time (25 s)
    (online,) = traces(default, "ONLINE")
    assert min(online.x) == 0  # the open intervals, starting at the last time, have no width


def test_rate_charts_divide_by_requests_or_attempts(full_lake):
    frames = charts.load_frames(LakeReader(str(full_lake)), C1)
    fig = charts.consistency_rates_figure(frames.consistency_summary)
    by_policy = {(t.name, t.hovertemplate.split("policy=")[1].split("<")[0]): list(t.y) for t in fig.data}
    assert by_policy[("admitted", "none")] == [pytest.approx(0.90)]
    assert by_policy[("stale (per attempt)", "fail")] == [pytest.approx(20 / 120)]
    assert by_policy[("admitted after wait", "wait")] == [pytest.approx(0.10)]
    assert by_policy[("violations avoided", "wait")] == [pytest.approx(0.05)]
    fig = charts.fencing_rates_figure(frames.fencing_summary)
    rates = {t.name: list(t.y) for t in fig.data}
    assert rates == {"stale leader accepts": [pytest.approx(0.012)], "fenced by check": [pytest.approx(0.008)],
                     "lost, acks 0/1": [pytest.approx(0.006)], "lost, acks all": [pytest.approx(0.004)]}


# plotly.js facts the two tests below rely on: its mode bar (the chart toolbar) is a row of 22 px buttons at
# 2 px from the figure's top edge (CSS .modebar{top:2px} .modebar-btn{height:22px}); the auto tick step of a
# linear axis is 1, 2 or 5 times a power of ten, giving 4 to 9 intervals (axes.js autoTicks)
MODEBAR_BOTTOM_PX = 2 + 22


def plotly_tick_format(axis, dtick: float) -> str:
    """The tick format plotly uses on a linear ``axis`` at tick step ``dtick`` (axes.js getTickFormat): the
    first enabled tickformatstop whose dtickrange holds it (bounds inclusive, None open), else tickformat."""
    for stop in axis.tickformatstops or ():
        low, high = stop.dtickrange
        if stop.enabled is not False and (low is None or low <= dtick) and (high is None or dtick <= high):
            return stop.value
    return axis.tickformat


def d3_percent(value: float, fmt: str) -> str:
    """``value`` as d3-format renders the percent format ``fmt`` (``.N%``, ``,.N%``)."""
    match = re.fullmatch(r"(,?)\.(\d+)%", fmt or "")
    assert match, f"not a percent tick format: {fmt!r}"
    return f"{value * 100:{match[1]}.{match[2]}f}%"


def tick_steps(span: float) -> list[float]:
    """Every step plotly's auto ticks may choose over ``span`` (with margin: 2 to 20 intervals)."""
    return [m * 10.0 ** e for e in range(-9, 2) for m in (1, 2, 5) if 2 <= span / (m * 10.0 ** e) <= 20]


def tick_labels(axis, lo: float, hi: float, step: float) -> list[str]:
    """The labels plotly draws on ``axis`` for the ticks at multiples of ``step`` in ``[lo, hi]``."""
    fmt = plotly_tick_format(axis, step)
    first = int(lo // step) + (lo % step > 1e-12)
    return [d3_percent(k * step, fmt) for k in range(first, int(hi / step + 1e-9) + 1)]


def y_axes(fig) -> list:
    return [fig.layout[name] for name in fig.layout if re.fullmatch(r"yaxis\d*", name)]


def test_share_axes_tell_every_tick_apart():
    """Issue 45: the fencing chart labelled rates of 0.4 %..1.2 % 0%, 0%, 0%, 1%, 1% (``.0%`` whatever the
    step). Every share axis (each facet's too) shows the decimals its tick step needs, at every step plotly
    may pick for the data and when zoomed in anywhere."""
    hour = pd.Timestamp("2025-03-01")
    fencing = pd.DataFrame([{"hour": hour, "requests": 2000, "stale_leader_accepts": 24, "fenced_by_check": 16,
                             "lost_acks_0_1": 12, "lost_acks_all": 8}])
    consistency = pd.DataFrame([{"hour": hour, "policy": p, "requests": 100_000, "attempts": 100_000 + s,
                                 "admitted": 99_000, "admitted_after_wait": w, "stale_metadata": s,
                                 "violations_avoided": v} for p, w, s, v in (("none", 0, 0, 0), ("fail", 0, 40, 7),
                                                                             ("wait", 30, 3, 2))])
    for fig in (charts.fencing_rates_figure(fencing), charts.consistency_rates_figure(consistency)):
        axes = y_axes(fig)
        assert len(axes) == (1 if "Fencing" in fig.layout.title.text else 3)
        top = max(max(t.y) for t in fig.data) * 1.05  # plotly pads the bars' range by 5 %
        for axis in axes:
            for step in tick_steps(top):
                labels = tick_labels(axis, 0, top, step)
                assert len(set(labels)) == len(labels), (fig.layout.title.text, step, labels)
            for step in (m * 10.0 ** e for e in range(-8, 0) for m in (1, 2, 5)):  # zoomed in around 50 %
                labels = tick_labels(axis, 0.5, 0.5 + 6 * step, step)
                assert len(set(labels)) == len(labels), (fig.layout.title.text, step, labels)
    axis = y_axes(charts.fencing_rates_figure(fencing))[0]
    assert tick_labels(axis, 0, 0.0126, 0.002) == ["0.0%", "0.2%", "0.4%", "0.6%", "0.8%", "1.0%", "1.2%"]
    assert tick_labels(axis, 0, 0.9, 0.2) == ["0%", "20%", "40%", "60%", "80%"]
    assert tick_labels(axis, 0, 0.00012, 0.00002) == ["0.000%", "0.002%", "0.004%", "0.006%", "0.008%", "0.010%",
                                                       "0.012%"]


def title_rows(fig) -> tuple[float, float]:
    """The pixel rows (from the figure's top edge) the title's line takes: placed at the top of the figure
    (``yref`` container, ``yanchor`` top) it starts ``pad.t`` down; otherwise plotly centers it in the top
    margin. A line is taken as 1.3 font sizes."""
    title, layout = fig.layout.title, fig.layout
    line = 1.3 * title.font.size
    if title.yref == "container" and title.yanchor == "top" and title.y is not None:
        top = (1 - title.y) * layout.height + (title.pad.t or 0)
    else:
        top = layout.margin.t / 2 - line / 2
    return top, top + line


def test_titles_sit_under_the_mode_bar_and_above_the_plot(full_lake):
    """Issue 45: a chart's title sat in the mode bar's row (centered in a 50 px top margin), under its
    buttons. Every chart, with and without data, starts its title below the mode bar and ends it above the
    plot area."""
    with_data = charts.chart_figures(charts.load_frames(LakeReader(str(full_lake)), C1))
    empty = charts.chart_figures(charts.load_frames(LakeReader("/nonexistent/lake")))
    for chart_id, fig in [*with_data.items(), *empty.items()]:
        assert fig.layout.title.text, chart_id
        top, bottom = title_rows(fig)
        assert top >= MODEBAR_BOTTOM_PX + 4, (chart_id, top)
        assert bottom <= fig.layout.margin.t, (chart_id, bottom, fig.layout.margin.t)


def test_feature_chart_steps_to_the_end_and_marks_transitions(full_lake):
    frames = charts.load_frames(LakeReader(str(full_lake)), C1)
    end = pd.Timestamp("2025-03-01 00:01:00")
    fig = charts.feature_levels_figure(frames.features, frames.feature_transitions, end)
    (line,) = traces(fig, "metadata.version")
    assert list(line.y) == [11, 21, 21] and pd.Timestamp(line.x[-1]) == end and line.line.shape == "hv"
    (upgrade,) = traces(fig, "UPGRADE")
    assert list(upgrade.y) == [21] and "unsupported on: 3" in upgrade.text[0]
    assert list(traces(fig, "INITIAL")[0].y) == [11]


# --- the refresh callback ------------------------------------------------------------------------------

def test_refresh_shows_the_first_cluster_with_versions(full_lake):
    result = refresh(0, None, None, None, None, str(full_lake))
    assert result["cluster"] == C1 and [o["value"] for o in result["cluster_options"]] == [C1, C2]
    assert [o["value"] for o in result["broker_options"]] == BROKERS[C1]
    assert lag_points(result) == {f"broker {b}{s}": BUCKETS for b in BROKERS[C1] for s in ("", " max")}
    for chart_id in charts.CHARTS:
        assert charts.NO_DATA not in annotation_texts(result[chart_id]), chart_id
    assert f"cluster {C1}" in result["status"] and "cache_lag v1" in result["status"]  # v0 C1, v1 C2
    assert result["start_placeholder"] == "2025-03-01T00:00:00Z" and result["end_placeholder"] == "2025-03-01T00:00:39Z"


def _strip(result: dict) -> list[list[str]]:
    """The cells of the "now" strip's rows, top to bottom."""
    table = result["now"].children[1]
    return [[td.children for td in tr.children] for tr in table.children[1].children]


def test_refresh_opens_with_the_now_strip_worst_first(full_lake, tmp_path):
    """Each broker of the shown cluster as of its newest bucket, the one to look at first on top (by
    time lag here: 160, 90, 20 ms), and a stalled broker above every other; the status line says how
    old the newest data is."""
    result = refresh(0, None, None, None, None, str(full_lake))
    last = BUCKETS - 1  # the rows of cache_lag_rows at the newest bucket: offset lag (39 b) % 17, ...
    assert _strip(result) == [[f"broker {b}", str((last * b) % 17), f"{10 * ((last * b) % 23)} ms", str((last + b) % 5),
                               "no", "2025-03-01 00:00:39"] for b in (1, 2, 3)]
    assert re.search(r"newest data \d+ d \d+ h old", result["status"]), result["status"]
    assert [r[0] for r in _strip(refresh(0, C2, None, None, None, str(full_lake)))] == ["broker 7", "broker 8"]  # 200, 130 ms
    lake = tmp_path / "lake"
    shutil.copytree(full_lake, lake)
    stalled = cache_lag_rows(C1, [3], BUCKETS, 1)
    i = stalled.schema.get_field_index("stalled")
    write(lake, "cache_lag", stalled.set_column(i, stalled.schema.field(i), pa.array([True])))
    assert [r[0] for r in _strip(refresh(0, C1, None, None, None, str(lake)))] == ["broker 3", "broker 1", "broker 2"]
    assert _strip(refresh(0, C1, None, None, None, str(lake)))[0][4] == "STALLED"


def test_refresh_filters_by_cluster_broker_and_time(full_lake):
    root = str(full_lake)
    other = refresh(0, C2, None, None, None, root)
    assert other["cluster"] == C2 and {t.name for t in other["lag-offsets"].data} == {"broker 7", "broker 7 max", "broker 8", "broker 8 max"}
    assert [o["value"] for o in other["broker_options"]] == BROKERS[C2]
    one = refresh(0, C1, [2], None, None, root)
    assert lag_points(one) == {"broker 2": BUCKETS, "broker 2 max": BUCKETS}
    assert {y for t in one["broker-states"].data for y in t.y} == {"broker 2"}
    assert [o["value"] for o in one["broker_options"]] == BROKERS[C1]  # the choices stay every broker
    window = refresh(0, C1, [1, 3], "2025-03-01T00:00:10Z", "2025-03-01 00:00:19", root)
    assert lag_points(window) == {f"broker {b}{s}": 10 for b in (1, 3) for s in ("", " max")}
    assert all(pd.Timestamp("2025-03-01 00:00:10") <= pd.Timestamp(x) <= pd.Timestamp("2025-03-01 00:00:19")
               for t in window["lag-offsets"].data for x in t.x)
    frames = charts.load_frames(reader_for(root), C1, [1, 3], pd.Timestamp("2025-03-01T00:00:10Z"),
                                pd.Timestamp("2025-03-01T00:00:19Z"))
    assert sorted(frames.consistency_summary["target_broker"].unique()) == [1, 3]
    assert frames.broker_states["from_time"].min() == pd.Timestamp("2025-03-01 00:00:10")
    assert frames.broker_states["to_time"].max() == pd.Timestamp("2025-03-01 00:00:19")


def test_refresh_bad_time_filter_keeps_the_charts(full_lake):
    result = refresh(0, C1, None, "yesterday-ish", None, str(full_lake), shown="key")
    assert "bad time 'yesterday-ish'" in result["status"]
    assert result["lag-offsets"] is dash.no_update and result["shown"] == "key"


@pytest.mark.parametrize("case", ["missing lake", "empty dir", "empty tables"])
def test_refresh_no_data_yet(tmp_path, case):
    root = tmp_path / "lake"
    if case != "missing lake":
        root.mkdir()
    if case == "empty tables":
        for name, schema in (("cache_lag", CACHE_LAG), ("broker_states", BROKER_STATES)):
            write(root, name, schema.empty_table())
    result = refresh(0, None, None, None, None, str(root))
    assert result["status"].startswith(NO_DATA)
    assert result["cluster"] is None and result["cluster_options"] == [] and result["broker_options"] == []
    for chart_id in charts.CHARTS:
        assert charts.NO_DATA in annotation_texts(result[chart_id]), chart_id


def test_refresh_with_missing_tables_shows_what_exists(tmp_path):
    root = make_lake(tmp_path / "lake", tables=("cache_lag", "broker_states"))
    result = refresh(0, None, None, None, None, str(root))
    assert not result["status"].startswith(NO_DATA)
    assert "not written yet: consistency_summary, fencing_summary, features, feature_transitions" in result["status"]
    assert charts.NO_DATA not in annotation_texts(result["lag-offsets"])
    assert charts.NO_DATA not in annotation_texts(result["broker-states"])
    for chart_id in ("consistency-rates", "fencing-rates", "feature-levels"):
        assert charts.NO_DATA in annotation_texts(result[chart_id]), chart_id


def test_refresh_reads_only_new_table_versions(tmp_path, full_lake):
    root = tmp_path / "lake"
    shutil.copytree(full_lake, root)
    reader = reader_for(str(root))
    first = refresh(0, C1, None, None, None, str(root))
    reads = reader.reads
    assert reads == len(charts.TABLE_COLUMNS)
    again = refresh(1, C1, None, None, None, str(root), shown=first["shown"])
    assert reader.reads == reads and again["shown"] == first["shown"]
    assert all(again[chart_id] is dash.no_update for chart_id in charts.CHARTS)  # nothing new: nothing redrawn
    write(root, "cache_lag", cache_lag_rows(C1, BROKERS[C1], BUCKETS, 5))
    newer = refresh(2, C1, None, None, None, str(root), shown=again["shown"])
    assert reader.reads == reads + 1  # only cache_lag, at its new version
    assert lag_points(newer)["broker 1"] == BUCKETS + 5 and "cache_lag v2" in newer["status"]


def test_create_app_registers_the_refresh_callback(full_lake):
    app = create_app(str(full_lake), refresh_ms=1500)
    ids = {c.id for c in app.layout._traverse() if getattr(c, "id", None)}  # noqa: SLF001 - dash's own walk
    assert set(charts.CHARTS) | {"cluster", "brokers", "start", "end", "status", "now", "tick"} <= ids
    assert next(c for c in app.layout._traverse() if getattr(c, "id", None) == "tick").interval == 1500  # noqa: SLF001
    (outputs,) = app.callback_map
    assert all(f"{chart_id}.figure" in outputs for chart_id in charts.CHARTS) and "status.children" in outputs


def test_serving_starts_no_jvm(full_lake):
    """The dashboard's import chain and a refresh never start a Spark JVM (checked in a fresh interpreter)."""
    code = ("import pyspark\nfrom kraft_replay.serve.dashboard import create_app, refresh\n"
            f"create_app({str(full_lake)!r})\nr = refresh(0, None, None, None, None, {str(full_lake)!r})\n"
            "assert r['cluster'], r['status']\n"
            "print(pyspark.SparkContext._gateway is None and pyspark.SparkContext._active_spark_context is None)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "lib")})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True"


# --- the CLI ------------------------------------------------------------------------------------------

def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kraft_replay.serve.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT / "lib")})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_cli_help_shows_an_example():
    proc = cli("dashboard", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "examples:" in proc.stdout and "kraft-replay dashboard --lake ./lake" in proc.stdout
    for option in ("--port", "--host", "--refresh"):
        assert option in proc.stdout


def test_cli_busy_port_is_a_one_line_error(full_lake):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = cli("dashboard", "--lake", str(full_lake), "--port", str(port))
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"kraft-replay dashboard: error: port {port} on 127.0.0.1 is already in use: "
                                   "stop what serves it or pass --port N")
    assert proc.stdout == ""


# --- the page in a real headless Chromium (one server, one browser, one page for the file) --------------

LAG_POINTS_JS = """() => {
  const g = document.querySelector('#lag-offsets .js-plotly-plot');
  if (!g || !g.data) return -1;
  return g.data.reduce((n, t) => n + (t.x ? t.x.length : 0), 0);
}"""


PLOTS_JS = "() => Array.from(document.querySelectorAll('.js-plotly-plot')).filter(g => (g.data || []).length)"

#: how long the browser tests wait for the page to show something: a ceiling, not a speed claim (a
#: wait ends as soon as its condition holds; in the suite the other worker's Spark runs may hold both
#: cores while the page polls and draws, and a 20 s wait once ran out there)
WAIT_MS = 120_000


def wait_for(page, condition: str, what: str) -> None:  # noqa: ANN001 - a playwright Page
    """Wait until the JavaScript ``condition`` holds on ``page``; if it never does, fail naming
    ``what`` with the page's status line and how many charts it has drawn."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(condition, timeout=WAIT_MS)
    except PlaywrightTimeout:
        shown = page.evaluate(f"() => [(document.getElementById('status') || {{}}).innerText, ({PLOTS_JS})().length]")
        pytest.fail(f"{what}: not shown after {WAIT_MS / 1000:.0f} s (status line {shown[0]!r}, charts drawn {shown[1]})")

#: per drawn chart: its title, the boxes of the chart, its title and its mode bar, and its y tick labels
CHART_BOXES_JS = """() => Array.from(document.querySelectorAll('.js-plotly-plot')).map(g => {
  const box = e => { if (!e) return null; const r = e.getBoundingClientRect();
                     return {left: r.left, top: r.top, right: r.right, bottom: r.bottom}; };
  const title = g.querySelector('.gtitle');
  return {title: title ? title.textContent : null, graph: box(g), title_box: box(title),
          modebar: box(g.querySelector('.modebar')),
          yticks: Array.from(g.querySelectorAll('.ytick text')).map(t => t.textContent)};
})"""


def overlap(a: dict, b: dict) -> bool:
    return a["left"] < b["right"] and b["left"] < a["right"] and a["top"] < b["bottom"] and b["top"] < a["bottom"]


def charts_read_right(page, shot: Path) -> None:
    """Issue 45 in the browser: on every chart of the page, hovered so its mode bar shows, the title is
    whole inside the chart and clear of the mode bar; the fencing chart's percent ticks (rates of
    0.4 %..1.2 %) all read differently. Saves a screenshot of the fencing chart, hovered, to ``shot``."""
    graphs = page.locator(".js-plotly-plot")
    fencing = None
    for i in range(graphs.count()):
        graphs.nth(i).hover(position={"x": 40, "y": 150})  # over the plot's left edge: the mode bar shows
        page.wait_for_timeout(150)
        chart = page.evaluate(CHART_BOXES_JS)[i]
        assert chart["title"] and chart["title_box"] and chart["modebar"], chart
        assert not overlap(chart["title_box"], chart["modebar"]), chart
        assert chart["title_box"]["bottom"] < chart["modebar"]["bottom"] + 40, chart  # and not far below it
        graph, title = chart["graph"], chart["title_box"]
        assert graph["left"] <= title["left"] and title["right"] <= graph["right"], chart  # not cut off
        if chart["title"].startswith("Fencing outcomes"):
            fencing = chart
            graphs.nth(i).screenshot(path=str(shot))  # still hovered: with its mode bar
    assert fencing is not None, "no fencing chart on the page"
    ticks = fencing["yticks"]
    assert len(ticks) >= 4 and all(t.endswith("%") for t in ticks), ticks
    assert len(set(ticks)) == len(ticks), f"percent ticks that read the same: {ticks}"
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def browser_lake(tmp_path_factory) -> Path:
    return make_lake(tmp_path_factory.mktemp("dash-browser") / "lake")


@pytest.fixture(scope="module")
def server(browser_lake):
    """``kraft-replay dashboard`` on a free port, started through the real CLI; its URL. It polls every
    0.2 s, less than one draw of the charts takes (~0.7 s here): the page must draw all the same."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "kraft_replay.serve.cli", "dashboard", "--lake", str(browser_lake),
                             "--port", str(port), "--refresh", "0.2"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "lib")})
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 45
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the dashboard exited with {proc.returncode}: {proc.stderr.read()}")
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the dashboard did not answer on {url} within 45 s")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


@pytest.fixture(scope="module")
def page(browser, server):
    """The dashboard loaded once; the tests share it and never reload it. 1120 px wide: about the narrowest
    window that still shows two charts a row (each about 515 px wide, where long titles reach the mode bar)."""
    pg = browser.new_page(viewport={"width": 1120, "height": 1000})
    pg.goto(server)
    yield pg
    pg.close()


def test_browser_renders_the_lag_chart(page, artifacts, tmp_path):
    expected = 2 * BUCKETS * len(BROKERS[C1])  # p99 and max traces of the first cluster's brokers
    wait_for(page, f"() => ({LAG_POINTS_JS})() === {expected}", f"{expected} lag points")
    wait_for(page, "() => document.getElementById('status').innerText.includes('cache_lag v1')", "cache_lag v1")
    wait_for(page, "() => document.getElementById('now').innerText.includes('worst first')", "the now strip")
    assert page.locator("#now tbody tr").count() == len(BROKERS[C1])  # the "now" strip: a row per broker, above the charts
    assert page.locator("#now").bounding_box()["y"] < page.locator("#lag-offsets").bounding_box()["y"]
    assert page.locator("#broker-states .js-plotly-plot").count() == 1
    assert "no data yet" not in page.inner_text("#lag-offsets")
    wait_for(page, f"() => ({PLOTS_JS})().length === {len(charts.CHARTS)}", "every chart")
    charts_read_right(page, tmp_path / "dashboard-fencing.png")
    shot = artifacts / "dashboard.png"
    page.screenshot(path=str(shot), full_page=True)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 30_000


def test_browser_shows_appended_rows_without_reload(page, browser_lake):
    wait_for(page, f"() => ({LAG_POINTS_JS})() > 0", "the lag chart")
    before = page.evaluate(LAG_POINTS_JS)
    page.evaluate("() => { window.__not_reloaded = true; }")
    write(browser_lake, "cache_lag", cache_lag_rows(C1, BROKERS[C1], BUCKETS, 5))
    grown = before + 2 * 5 * len(BROKERS[C1])
    wait_for(page, f"() => ({LAG_POINTS_JS})() === {grown}", f"the appended rows ({grown} lag points)")
    assert page.evaluate("() => window.__not_reloaded === true")
    assert DeltaTable(str(browser_lake / "cache_lag")).version() == 2
    assert "cache_lag v2" in page.inner_text("#status")


def test_browser_report_charts_read_right(browser, tmp_path):
    """The report draws the same charts: in Chromium, every title clear of the mode bar and the fencing
    chart's percent ticks distinct (screenshot of the fencing chart under tmp_path). In a window 600 px
    wide (half a laptop screen): the charts, as wide as the page, bring the mode bar over long titles."""
    report = write_report(str(make_lake(tmp_path / "lake")), tmp_path / "report.html", C1)
    pg = browser.new_page(viewport={"width": 600, "height": 900})
    try:
        pg.goto(report.path.as_uri())
        wait_for(pg, f"() => ({PLOTS_JS})().length === {len(charts.CHARTS)}", "every chart of the report")
        charts_read_right(pg, tmp_path / "report-fencing.png")
    finally:
        pg.close()


def test_a_port_out_of_range_is_one_line(capsys, tmp_path):
    from kraft_replay.serve.cli import main

    assert main(["dashboard", "--lake", str(tmp_path), "--port", "99999"]) == 2
    assert capsys.readouterr().err.strip() == "kraft-replay dashboard: error: --port must be a TCP port (1-65535), not 99999"
