"""The live cache-lag dashboard (``kraft-replay dashboard``): a Dash page over the gold tables of a lake.

The page polls (``dcc.Interval``); each tick runs :func:`refresh`, which reads the tables at the
versions readers see through one :class:`~kraft_replay.lake.reader.LakeReader` per lake (a table is
read again only when that version changes) and redraws the charts of :mod:`kraft_replay.serve.charts`
only when a version or a filter changed. No Spark: delta-rs, pyarrow and pandas only.
"""

from __future__ import annotations

import functools
import json
from datetime import datetime, timezone
from typing import Any

import dash
import pandas as pd
from dash import Input, Output, State, dcc, html
from deltalake.exceptions import DeltaError

from kraft_replay.lake.reader import LakeReader
from kraft_replay.serve.charts import CHARTS, TABLE_COLUMNS, Frames, chart_figures, load_frames, naive_utc
from kraft_replay.serve.now import newest_buckets, worst_first

NO_DATA = "no data yet — run kraft-replay replay/outcomes on this lake"
_TIME_HINT = "use ISO-8601 UTC, e.g. 2025-03-01T00:05:00Z"


@functools.cache
def reader_for(lake_root: str) -> LakeReader:
    """The one reader of ``lake_root`` shared by every refresh (its cache spans refreshes)."""
    return LakeReader(lake_root)


def parse_time(text: str | None) -> pd.Timestamp | None:
    """A time filter typed on the page as a naive UTC timestamp (None when blank); ValueError when it
    is not a time."""
    if text is None or not text.strip():
        return None
    try:
        ts = pd.Timestamp(text.strip())
    except ValueError as exc:
        raise ValueError(f"bad time {text.strip()!r}: {_TIME_HINT}") from exc
    return ts.tz_convert("UTC").tz_localize(None) if ts.tzinfo is not None else ts


def status_line(frames: Frames, now: datetime) -> str:
    """What the page shows: the cluster, each table's version (or that it is missing), the data's span
    and the refresh time; :data:`NO_DATA` when no table has rows."""
    refreshed = f"refreshed {now:%H:%M:%S} UTC"
    if frames.empty:
        return f"{NO_DATA} · {refreshed}"
    shown = ", ".join(f"{name} v{v}" for name, v in frames.versions.items() if v is not None)
    missing = [name for name, v in frames.versions.items() if v is None]
    parts = [f"cluster {frames.cluster}", f"tables {shown}"]
    if missing:
        parts.append(f"not written yet: {', '.join(missing)}")
    if frames.first_time is not None and frames.last_time is not None:
        parts.append(f"data {frames.first_time:%Y-%m-%d %H:%M:%S} – {frames.last_time:%Y-%m-%d %H:%M:%S} UTC")
        age = (naive_utc(now) - pd.Timestamp(frames.last_time)).total_seconds()
        parts.append(f"newest data {_age(age)} old")
    parts.append(refreshed)
    return " · ".join(parts)


def _age(seconds: float) -> str:
    """``seconds`` as the page says an age: 4 s, 12 min 5 s, 3 h 20 min, 2 d 4 h."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


#: the "now" strip's column headers
NOW_HEADERS = ("broker", "offset lag", "time lag", "image divergence", "stalled", "newest bucket (UTC)")


def now_strip(reader: LakeReader, cluster: str | None) -> html.Div:
    """The "now" strip: each broker of ``cluster`` as of its newest ``cache_lag`` bucket (offset lag,
    time lag, image divergence, stalled), the brokers to look at first on top (:func:`worst_first`)."""
    newest = newest_buckets(reader, TABLE_COLUMNS["cache_lag"])  # the charts' read of the table, from the reader's cache
    if newest is None or cluster is None or newest.empty:
        return html.Div("now: no cache_lag yet", style={"color": "#666"})
    rows = worst_first(newest[newest["cluster_id"] == cluster])

    def cell(v: Any, fmt: str = "{:,}") -> str:
        return "–" if v is None or pd.isna(v) else fmt.format(int(v))

    pad = {"padding": "2px 16px 2px 4px"}
    body = []
    for _, r in rows.iterrows():
        stalled = bool(r["stalled"])
        bad = stalled or (not pd.isna(r["offset_lag"]) and r["offset_lag"] > 0)
        cells = [f"broker {int(r['broker_id'])}", cell(r["offset_lag"]), cell(r["time_lag_ms_max"], "{:,} ms"),
                 cell(r["image_divergence"]), "STALLED" if stalled else "no", f"{r['bucket_start']:%Y-%m-%d %H:%M:%S}"]
        body.append(html.Tr([html.Td(c, style=pad) for c in cells], style={"background": "#fde8e8" if bad else "white"}))
    head = html.Tr([html.Th(h, style={**pad, "textAlign": "left"}) for h in NOW_HEADERS])
    return html.Div([html.Span("now, worst first", style={"fontWeight": 600, "marginRight": "8px"}),
                     html.Table([html.Thead(head), html.Tbody(body)], style={"borderCollapse": "collapse", "fontSize": "13px"})])


def refresh(n_intervals: int | None, cluster: str | None, brokers: list[int] | None, start: str | None,
            end: str | None, lake_root: str, shown: str | None = None) -> dict[str, Any]:
    """One tick of the page: read the lake at the versions readers see, filtered by ``cluster``,
    ``brokers`` and the time range ``[start, end]`` (ISO-8601 text, blank = open). Returns every output
    by name: one figure per chart id (``dash.no_update`` when ``shown``, the key of what the page
    already shows, equals this tick's), ``status``, the filter choices (``cluster_options``,
    ``cluster``, ``broker_options``, time placeholders) and ``shown`` (this tick's key).
    ``n_intervals`` only triggers the tick."""
    now = datetime.now(timezone.utc)
    try:
        start_ts, end_ts = parse_time(start), parse_time(end)
    except ValueError as exc:
        return _unchanged(f"{exc} · {now:%H:%M:%S} UTC", shown)
    try:
        frames = load_frames(reader_for(lake_root), cluster, brokers or None, start_ts, end_ts)
    except (DeltaError, OSError) as exc:
        return _unchanged(f"error reading the lake at {lake_root}: {exc} · {now:%H:%M:%S} UTC", shown)
    key = json.dumps([frames.versions, frames.cluster, sorted(brokers or []), str(start_ts), str(end_ts)])
    figures: dict[str, Any] = dict.fromkeys(CHARTS, dash.no_update)
    if key != shown:
        figures = chart_figures(frames)
        for fig in figures.values():
            fig.update_layout(uirevision=frames.cluster or "none")  # keep zoom and legend clicks across refreshes
    return {
        **figures,
        "status": status_line(frames, now),
        "now": now_strip(reader_for(lake_root), frames.cluster),
        "cluster_options": [{"label": c, "value": c} for c in frames.clusters],
        "cluster": frames.cluster,
        "broker_options": [{"label": f"broker {b}", "value": b} for b in frames.brokers],
        "start_placeholder": f"{frames.first_time:%Y-%m-%dT%H:%M:%SZ}" if frames.first_time is not None else "from",
        "end_placeholder": f"{frames.last_time:%Y-%m-%dT%H:%M:%SZ}" if frames.last_time is not None else "to",
        "shown": key,
    }


def _unchanged(status: str, shown: str | None) -> dict[str, Any]:
    """Every output left as it is but the status line."""
    return {**dict.fromkeys(OUTPUTS, dash.no_update), "status": status, "shown": shown}


def _graph(chart_id: str) -> dcc.Graph:
    return dcc.Graph(id=chart_id, config={"displaylogo": False}, style={"minWidth": 0})


def _filters() -> html.Div:
    """The filter bar: cluster, brokers, time range."""
    label = {"fontSize": "12px", "color": "#555", "display": "block", "marginBottom": "2px"}
    box = {"display": "flex", "flexDirection": "column"}
    return html.Div([
        html.Div([html.Label("cluster", htmlFor="cluster", style=label),
                  dcc.Dropdown(id="cluster", clearable=False, placeholder="(no cluster yet)",
                               style={"width": "260px"})], style=box),
        html.Div([html.Label("brokers (empty: all)", htmlFor="brokers", style=label),
                  dcc.Dropdown(id="brokers", multi=True, placeholder="all brokers", style={"width": "320px"})],
                 style=box),
        html.Div([html.Label("time range (UTC, blank: all)", htmlFor="start", style=label),
                  html.Div([dcc.Input(id="start", type="text", debounce=True, placeholder="from",
                                      style={"width": "215px"}),
                            html.Span("–", style={"margin": "0 6px"}),
                            dcc.Input(id="end", type="text", debounce=True, placeholder="to",
                                      style={"width": "215px"})])], style=box),
    ], style={"display": "flex", "gap": "24px", "alignItems": "flex-end", "flexWrap": "wrap", "margin": "8px 0 12px"})


def layout(lake_root: str, refresh_ms: int) -> html.Div:
    """The page: title, status line, the "now" strip (:func:`now_strip`), filters, the charts (two per
    row; feature levels full width) and the refresh timer."""
    grid = {"display": "grid", "gridTemplateColumns": "repeat(auto-fit, minmax(520px, 1fr))", "gap": "12px"}
    card = {"border": "1px solid #e3e3e3", "borderRadius": "6px", "padding": "4px", "background": "white"}
    cards = [html.Div(_graph(c), style={**card, **({"gridColumn": "1 / -1"} if c == "feature-levels" else {})})
             for c in CHARTS]
    return html.Div([
        html.H2("kraft-replay · live cache lag", style={"margin": "4px 0"}),
        html.Div(f"lake {lake_root} · tables {', '.join(TABLE_COLUMNS)}", style={"color": "#666", "fontSize": "13px"}),
        html.Div(id="status", children="loading…",
                 style={"margin": "8px 0", "padding": "6px 10px", "background": "#f4f6fa", "borderRadius": "4px",
                        "fontSize": "13px"}),
        html.Div(id="now", children="", style={"margin": "4px 0 8px"}),
        _filters(),
        html.Div(cards, style=grid),
        dcc.Store(id="shown"),
        dcc.Interval(id="tick", interval=refresh_ms),
    ], style={"fontFamily": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "padding": "12px 20px",
              "background": "#fafafa"})


#: the outputs of :func:`refresh`, by the names it returns
OUTPUTS: dict[str, Output] = {
    **{chart_id: Output(chart_id, "figure") for chart_id in CHARTS},
    "status": Output("status", "children"),
    "now": Output("now", "children"),
    "cluster_options": Output("cluster", "options"),
    "cluster": Output("cluster", "value"),
    "broker_options": Output("brokers", "options"),
    "start_placeholder": Output("start", "placeholder"),
    "end_placeholder": Output("end", "placeholder"),
    "shown": Output("shown", "data"),
}


def create_app(lake_root: str, refresh_ms: int = 1000) -> dash.Dash:
    """The dashboard of the lake at ``lake_root``, polling every ``refresh_ms`` milliseconds (the timer
    waits while a tick runs, so ticks never overlap), and ``/metrics`` for Prometheus
    (:mod:`kraft_replay.serve.prometheus`). The lake root stays on the server: the registered callback
    passes it to :func:`refresh`."""
    from kraft_replay.serve.prometheus import install_metrics

    app = dash.Dash(__name__, title="kraft-replay dashboard", update_title=None)
    app.layout = layout(lake_root, refresh_ms)
    install_metrics(app.server, reader_for(lake_root))  # /metrics: the newest cache lag per broker, for Prometheus

    def refresh_page(n_intervals: int | None, cluster: str | None, brokers: list[int] | None, start: str | None,
                     end: str | None, shown: str | None) -> dict[str, Any]:
        return refresh(n_intervals, cluster, brokers, start, end, lake_root, shown)

    app.callback(
        output=OUTPUTS,
        inputs={"n_intervals": Input("tick", "n_intervals"), "cluster": Input("cluster", "value"),
                "brokers": Input("brokers", "value"), "start": Input("start", "value"), "end": Input("end", "value")},
        state={"shown": State("shown", "data")},
        # the timer stops while a tick runs: a tick slower than the interval would otherwise be overtaken by
        # the next one, whose request makes the page drop the earlier answer, and the charts would never draw
        running=[(Output("tick", "disabled"), True, False)],
    )(refresh_page)
    return app
