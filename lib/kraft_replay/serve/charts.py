"""Charts of the gold tables: pure functions from pandas DataFrames to plotly figures, shared by the live
dashboard (``kraft-replay dashboard``) and the HTML report, plus :func:`load_frames`, which reads the
frames from a :class:`~kraft_replay.lake.reader.LakeReader` with the page's filters applied.

Times in the frames are naive UTC timestamps (the loader converts them), so every axis reads in UTC.
Every chart function returns a figure with a "no data yet" annotation when its frame is empty.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go
import pyarrow as pa
import pyarrow.compute as pc

from kraft_replay.lake.reader import LakeReader

NO_DATA = "no data yet"

#: the columns read of each table the charts show
TABLE_COLUMNS: dict[str, list[str]] = {
    "cache_lag": ["cluster_id", "broker_id", "bucket_start", "samples", "applied_offset", "log_end_offset",
                  "offset_lag_p99", "offset_lag_max", "time_lag_ms_p99", "time_lag_ms_max", "fenced", "stalled",
                  "image_divergence"],
    "broker_states": ["cluster_id", "broker_id", "state", "from_time", "to_time", "broker_epoch", "heartbeat_gap",
                      "gap_ms"],
    "consistency_summary": ["cluster_id", "target_broker", "hour", "policy", "requests", "attempts", "admitted",
                            "admitted_after_wait", "stale_metadata", "violations", "violations_avoided", "retries",
                            "wait_ms_p99"],
    "fencing_summary": ["cluster_id", "topic_name", "hour", "requests", "stale_leader_accepts", "fenced_by_check",
                        "lost_acks_0_1", "lost_acks_all"],
    "features": ["cluster_id", "name", "feature_level", "metadata_version", "deleted", "valid_from_time",
                 "valid_to_time"],
    "feature_transitions": ["cluster_id", "feature", "offset", "time", "from_level", "to_level", "from_version", "to_version",
                            "kind", "unsupported_nodes"],
}
#: the broker column of the tables filtered by broker
BROKER_COLUMN = {"cache_lag": "broker_id", "broker_states": "broker_id", "consistency_summary": "target_broker"}
TIME_COLUMNS = ("bucket_start", "from_time", "to_time", "hour", "valid_from_time", "valid_to_time", "time")

STATE_COLORS = {"ONLINE": "#2ca02c", "FENCED": "#ff7f0e", "OFFLINE": "#7f7f7f", "STOPPING": "#1f77b4",
                "UNREGISTERED": "#222222"}
KIND_COLORS = {"INITIAL": "#7f7f7f", "UPGRADE": "#2ca02c", "DOWNGRADE": "#d62728"}
POLICY_ORDER = ["none", "fail", "wait"]
_PALETTE = px.colors.qualitative.Plotly
_HEIGHT = 360
#: the chart's toolbar (plotly's mode bar) is a 22 px row 2 px below the figure's top edge, at its right;
#: titles start under it (``TITLE_TOP`` px down), so a long title or a narrow chart never puts one on the other
MODEBAR_BOTTOM = 24
TITLE_TOP = MODEBAR_BOTTOM + 12
TITLE_SIZE = 15
#: room above the plot area: the title's line, and under it the panel labels of faceted charts
MARGIN_TOP = TITLE_TOP + 2 * TITLE_SIZE + 18


def percent_tick_formats(max_decimals: int = 6) -> list[dict]:
    """The tick label formats of a share axis (values 0..1 shown as percents), by tick step: as many
    decimals as the step needs, so neighbouring ticks never read the same (a 0.2 % step over 0.4 %..1.2 %
    reads 0.4%, 0.6%, ... where ``.0%`` read 0%, 1%, 1%). Plotly picks the step from the data's range and
    the zoom, always 1, 2 or 5 times a power of ten; a step of 10**-(d+2) to under 10**-(d+1) gets d
    decimals (the bounds sit 5 % below those powers, off float noise); the first matching stop is used."""
    stops = []
    for decimals in range(max_decimals + 1):
        low = None if decimals == max_decimals else 0.95 * 10 ** -(decimals + 2)
        high = None if decimals == 0 else 0.95 * 10 ** -(decimals + 1)
        stops.append({"dtickrange": [low, high], "value": f",.{decimals}%"})
    return stops


def _share_axes(fig: go.Figure) -> go.Figure:
    """Every y axis of ``fig`` (each facet's too) as a share in percent: ticks with the decimals their step
    needs (:func:`percent_tick_formats`), hover with three significant digits."""
    fig.update_yaxes(tickformat=",.0%", tickformatstops=percent_tick_formats(), hoverformat=".3~p")
    return fig


@dataclass(frozen=True)
class Frames:
    """What the charts show of one cluster: one frame per table (filtered; empty when the table is
    missing), the versions read (None: table missing), the clusters and brokers to pick from, and the
    time span of the cluster's data (``last_time`` is where open intervals end: the data's last time,
    or the end of the time filter when earlier)."""

    cache_lag: pd.DataFrame
    broker_states: pd.DataFrame
    consistency_summary: pd.DataFrame
    fencing_summary: pd.DataFrame
    features: pd.DataFrame
    feature_transitions: pd.DataFrame
    versions: dict[str, int | None] = field(default_factory=dict)
    clusters: list[str] = field(default_factory=list)
    cluster: str | None = None
    brokers: list[int] = field(default_factory=list)
    first_time: pd.Timestamp | None = None
    last_time: pd.Timestamp | None = None

    @property
    def empty(self) -> bool:
        """True when no table has a row for the cluster (or there is no cluster at all)."""
        return all(getattr(self, name).empty for name in TABLE_COLUMNS)


def naive_utc(ts: pd.Timestamp | None) -> pd.Timestamp | None:
    """``ts`` as a naive UTC timestamp (naive input is taken as UTC)."""
    if ts is None:
        return None
    ts = pd.Timestamp(ts)
    return ts.tz_convert("UTC").tz_localize(None) if ts.tzinfo is not None else ts


def _to_frame(table: pa.Table | None, name: str, cluster: str | None, brokers: list[int] | None) -> pd.DataFrame:
    """The rows of ``table`` for ``cluster`` (and ``brokers`` when the table has a broker column) as pandas,
    time columns as naive UTC; an empty frame with the table's columns when it is missing."""
    columns = TABLE_COLUMNS[name]
    if table is None or cluster is None:
        return pd.DataFrame({c: pd.Series(dtype="datetime64[us]" if c in TIME_COLUMNS else object) for c in columns})
    table = table.filter(pc.equal(table["cluster_id"], cluster))
    if brokers and name in BROKER_COLUMN:
        table = table.filter(pc.is_in(table[BROKER_COLUMN[name]], pa.array(brokers, table[BROKER_COLUMN[name]].type)))
    frame = table.to_pandas()
    for col in TIME_COLUMNS:
        if col in frame.columns:
            frame[col] = pd.to_datetime(frame[col], utc=True).dt.tz_localize(None)
    return frame


def _clusters(tables: dict[str, pa.Table | None]) -> list[str]:
    """Every cluster id found in any of the tables, sorted."""
    found: set[str] = set()
    for table in tables.values():
        if table is not None:
            found.update(v for v in pc.unique(table["cluster_id"]).to_pylist() if v is not None)
    return sorted(found)


def _time_span(frames: dict[str, pd.DataFrame]) -> tuple[pd.Timestamp | None, pd.Timestamp | None]:
    """The earliest and latest time in any time column of the frames."""
    values = [frame[col] for frame in frames.values() for col in TIME_COLUMNS if col in frame.columns]
    times = pd.concat(values).dropna() if values else pd.Series(dtype="datetime64[ns]")
    return (times.min(), times.max()) if not times.empty else (None, None)


def _clip(intervals: pd.DataFrame, begin: str, until: str, lo: pd.Timestamp, hi: pd.Timestamp,
          close_open: bool) -> pd.DataFrame:
    """The intervals ``[begin, until)`` overlapping ``[lo, hi]``, clipped to it; open intervals (``until``
    null) stay open unless ``close_open``, which ends them at ``hi``."""
    kept = intervals[(intervals[begin] <= hi) & (intervals[until].isna() | (intervals[until] >= lo))].copy()
    kept[begin] = kept[begin].clip(lower=lo)
    closed = kept[until].clip(upper=hi)
    kept[until] = closed.fillna(hi) if close_open else closed
    return kept


def _in_range(frames: dict[str, pd.DataFrame], start: pd.Timestamp | None, end: pd.Timestamp | None) -> dict[str, pd.DataFrame]:
    """The frames cut to ``[start, end]``: points inside it, hours and intervals overlapping it (intervals
    clipped to it)."""
    lo = start if start is not None else pd.Timestamp.min
    hi = end if end is not None else pd.Timestamp.max
    out = dict(frames)
    lag = frames["cache_lag"]
    out["cache_lag"] = lag[(lag["bucket_start"] >= lo) & (lag["bucket_start"] <= hi)]
    for name in ("consistency_summary", "fencing_summary"):
        f = frames[name]
        out[name] = f[(f["hour"] + pd.Timedelta(hours=1) > lo) & (f["hour"] <= hi)]
    out["broker_states"] = _clip(frames["broker_states"], "from_time", "to_time", lo, hi, end is not None)
    out["features"] = _clip(frames["features"], "valid_from_time", "valid_to_time", lo, hi, end is not None)
    trans = frames["feature_transitions"]
    out["feature_transitions"] = trans[(trans["time"] >= lo) & (trans["time"] <= hi)]
    return out


def load_frames(reader: LakeReader, cluster: str | None = None, brokers: list[int] | None = None,
                start: pd.Timestamp | None = None, end: pd.Timestamp | None = None) -> Frames:
    """Read the charted tables at the versions readers see and filter them: one cluster (``cluster``, else
    the first one found), ``brokers`` (None or empty: all; tables without a broker column are kept
    whole) and the time range ``[start, end]`` (either may be None; naive means UTC)."""
    tables = {name: reader.read(name, columns) for name, columns in TABLE_COLUMNS.items()}
    versions = {name: reader.version(name) for name in TABLE_COLUMNS}
    clusters = _clusters(tables)
    chosen = cluster if cluster in clusters else (clusters[0] if clusters else None)
    whole = {name: _to_frame(tables[name], name, chosen, None) for name in TABLE_COLUMNS}
    known = sorted({int(b) for name in ("cache_lag", "broker_states") for b in whole[name]["broker_id"].dropna()})
    frames = {name: _to_frame(tables[name], name, chosen, brokers) for name in TABLE_COLUMNS} if brokers else whole
    first, last = _time_span(whole)
    start, end = naive_utc(start), naive_utc(end)
    if end is not None and last is not None:
        last = min(last, end)
    return Frames(**_in_range(frames, start, end), versions=versions, clusters=clusters, cluster=chosen,
                  brokers=known, first_time=first, last_time=last)


def no_data_figure(title: str) -> go.Figure:
    """An empty chart titled ``title`` saying "no data yet"."""
    fig = go.Figure()
    fig.add_annotation(text=NO_DATA, x=0.5, y=0.5, xref="paper", yref="paper", showarrow=False,
                       font={"size": 18, "color": "#888"})
    fig.update_layout(title=title, xaxis={"visible": False}, yaxis={"visible": False})
    return _styled(fig)


def _styled(fig: go.Figure) -> go.Figure:
    """The common look: white template, compact margins, fixed height, legend on the right, the title
    on its own line under the mode bar (:data:`TITLE_TOP`)."""
    fig.update_layout(template="plotly_white", height=_HEIGHT, margin={"l": 60, "r": 20, "t": MARGIN_TOP, "b": 40},
                      title={"yref": "container", "y": 1, "yanchor": "top", "pad": {"t": TITLE_TOP},
                             "font": {"size": TITLE_SIZE}},
                      legend={"font": {"size": 11}})
    return fig


def _broker_color(broker_id: int) -> str:
    """A broker's color, the same in every chart whatever brokers are shown."""
    return _PALETTE[int(broker_id) % len(_PALETTE)]


def _lag_figure(cache_lag: pd.DataFrame, p99: str, worst: str, title: str, unit: str) -> go.Figure:
    """Per broker: column ``p99`` as a solid line, ``worst`` (max) dotted, over ``bucket_start``."""
    if cache_lag.empty:
        return no_data_figure(title)
    fig = go.Figure()
    for broker_id, rows in cache_lag.sort_values(["broker_id", "bucket_start"]).groupby("broker_id", sort=True):
        color, group = _broker_color(broker_id), f"broker {broker_id}"
        fig.add_scatter(x=rows["bucket_start"], y=rows[p99], mode="lines", name=group, legendgroup=group,
                        line={"color": color, "width": 2},
                        hovertemplate=f"broker {broker_id} p99 %{{y}} {unit}<br>%{{x}}<extra></extra>")
        fig.add_scatter(x=rows["bucket_start"], y=rows[worst], mode="lines", name=f"{group} max", legendgroup=group,
                        showlegend=False, line={"color": color, "width": 1, "dash": "dot"},
                        hovertemplate=f"broker {broker_id} max %{{y}} {unit}<br>%{{x}}<extra></extra>")
    fig.update_layout(title=title, xaxis_title="time (UTC)", yaxis_title=unit)
    return _styled(fig)


def lag_offsets_figure(cache_lag: pd.DataFrame) -> go.Figure:
    """Cache lag in offsets over time, one color per broker: ``offset_lag_p99`` per bucket solid,
    ``offset_lag_max`` dotted (``cache_lag``: how far each broker's applied offset is behind the log end)."""
    return _lag_figure(cache_lag, "offset_lag_p99", "offset_lag_max",
                       "Cache lag in offsets (p99 solid, max dotted)", "offsets")


def lag_ms_figure(cache_lag: pd.DataFrame) -> go.Figure:
    """Cache lag in milliseconds over time, one color per broker: ``time_lag_ms_p99`` solid,
    ``time_lag_ms_max`` dotted (``cache_lag``: how long ago the log end was at the broker's applied offset)."""
    return _lag_figure(cache_lag, "time_lag_ms_p99", "time_lag_ms_max",
                       "Cache lag in ms (p99 solid, max dotted)", "ms")


def divergence_figure(cache_lag: pd.DataFrame) -> go.Figure:
    """Image divergence over time per broker: ``image_divergence`` of ``cache_lag`` (partitions whose leader
    or leader epoch in the broker's cache are not the current ones), as a step line."""
    title = "Image divergence (partitions with a stale leader view)"
    if cache_lag.empty:
        return no_data_figure(title)
    fig = go.Figure()
    for broker_id, rows in cache_lag.sort_values(["broker_id", "bucket_start"]).groupby("broker_id", sort=True):
        fig.add_scatter(x=rows["bucket_start"], y=rows["image_divergence"], mode="lines", line_shape="hv",
                        name=f"broker {broker_id}", line={"color": _broker_color(broker_id), "width": 2})
    fig.update_layout(title=title, xaxis_title="time (UTC)", yaxis_title="partitions")
    return _styled(fig)


def broker_states_figure(broker_states: pd.DataFrame, end: pd.Timestamp | None = None) -> go.Figure:
    """Broker state timeline (Gantt): one row per broker, one bar per ``broker_states`` interval colored
    by ``state``; open intervals (``to_time`` null) end at ``end`` (default: the frame's last time)."""
    title = "Broker states"
    if broker_states.empty:
        return no_data_figure(title)
    states = broker_states.sort_values(["broker_id", "from_time"]).copy()
    stop = end if end is not None else pd.concat([states["from_time"], states["to_time"]]).max()
    states["to_time"] = states["to_time"].fillna(stop).clip(lower=states["from_time"])
    states["broker"] = "broker " + states["broker_id"].astype(str)
    states["heartbeat_gap"] = states["heartbeat_gap"].eq(True)
    order = [f"broker {b}" for b in sorted(states["broker_id"].unique(), reverse=True)]
    fig = px.timeline(states, x_start="from_time", x_end="to_time", y="broker", color="state",
                      color_discrete_map=STATE_COLORS, category_orders={"broker": order},
                      hover_data={"broker_epoch": True, "heartbeat_gap": True, "gap_ms": True, "broker": False})
    fig.update_layout(title=title, xaxis_title="time (UTC)", yaxis_title=None, barmode="overlay")
    return _styled(fig)


def _rates_figure(long: pd.DataFrame, title: str, facet: str | None) -> go.Figure:
    """Grouped bars of ``rate`` per ``hour``, one color per ``outcome`` (one panel per ``facet`` value)."""
    fig = px.bar(long, x="hour", y="rate", color="outcome", barmode="group", facet_col=facet,
                 category_orders={"policy": POLICY_ORDER}, hover_data={"count": True, "of": True})
    fig.update_layout(title=title, yaxis_title="share")
    fig.update_xaxes(title=None, tickformat="%b %d %H:00")
    return _styled(_share_axes(fig))


def consistency_rates_figure(summary: pd.DataFrame) -> go.Figure:
    """Consistency outcome rates per hour and policy (``consistency_summary``, seed 000), summed over
    brokers and context groups: admitted, admitted after wait and violations avoided per request;
    stale (``STALE_METADATA`` answers) per attempt."""
    title = "Consistency outcomes per hour, by policy"
    if summary.empty:
        return no_data_figure(title)
    sums = summary.groupby(["hour", "policy"], as_index=False)[
        ["requests", "attempts", "admitted", "admitted_after_wait", "stale_metadata", "violations_avoided"]].sum()
    outcomes = (("admitted", "admitted", "requests"), ("admitted after wait", "admitted_after_wait", "requests"),
                ("stale (per attempt)", "stale_metadata", "attempts"),
                ("violations avoided", "violations_avoided", "requests"))
    long = pd.concat([sums.assign(outcome=label, count=sums[col], of=sums[base], rate=sums[col] / sums[base].where(sums[base] > 0))
                      for label, col, base in outcomes], ignore_index=True)
    return _rates_figure(long[["hour", "policy", "outcome", "count", "of", "rate"]], title, "policy")


def fencing_rates_figure(summary: pd.DataFrame) -> go.Figure:
    """Fencing outcome rates per hour (``fencing_summary``, seed 003), summed over topics, per produce
    request: stale-leader accepts without the epoch check, those the check fences, and writes lost
    (acks 0/1, and acks=all with a sole ISR member)."""
    title = "Fencing outcomes per hour (share of produce requests)"
    if summary.empty:
        return no_data_figure(title)
    sums = summary.groupby("hour", as_index=False)[
        ["requests", "stale_leader_accepts", "fenced_by_check", "lost_acks_0_1", "lost_acks_all"]].sum()
    outcomes = (("stale leader accepts", "stale_leader_accepts"), ("fenced by check", "fenced_by_check"),
                ("lost, acks 0/1", "lost_acks_0_1"), ("lost, acks all", "lost_acks_all"))
    rate_base = sums["requests"].where(sums["requests"] > 0)
    long = pd.concat([sums.assign(outcome=label, count=sums[col], of=sums["requests"], rate=sums[col] / rate_base)
                      for label, col in outcomes], ignore_index=True)
    return _rates_figure(long[["hour", "outcome", "count", "of", "rate"]], title, None)


def feature_levels_figure(features: pd.DataFrame, transitions: pd.DataFrame,
                          end: pd.Timestamp | None = None) -> go.Figure:
    """Feature levels over time: a step line per feature from the versions of ``features`` (a deleted
    feature is level 0; the last version holds until its ``valid_to_time``, else ``end``), and a marker
    per ``feature_transitions`` row at its new level (kind, versions and unsupported nodes on hover)."""
    title = "Finalized feature levels"
    if features.empty and transitions.empty:
        return no_data_figure(title)
    fig = go.Figure()
    for name, rows in features.sort_values(["name", "valid_from_time"]).groupby("name", sort=True):
        levels = rows["feature_level"].where(~rows["deleted"].fillna(False).astype(bool), 0).astype(int).tolist()
        times = rows["valid_from_time"].tolist()
        labels = rows["metadata_version"].fillna("").tolist()
        stop = rows["valid_to_time"].iloc[-1]
        stop = stop if pd.notna(stop) else end
        if stop is not None and stop > times[-1]:
            times, levels, labels = [*times, stop], [*levels, levels[-1]], [*labels, labels[-1]]
        fig.add_scatter(x=times, y=levels, text=labels, mode="lines", line_shape="hv", name=name,
                        hovertemplate=f"{name} level %{{y}} %{{text}}<br>%{{x}}<extra></extra>")
    for kind, rows in transitions.sort_values("time").groupby("kind", sort=True):
        hover = [f"{r.feature}: {r.from_version or r.from_level} → {r.to_version or r.to_level}"
                 + (f"<br>unsupported on: {', '.join(r.unsupported_nodes)}" if len(r.unsupported_nodes) else "")
                 for r in rows.itertuples()]
        fig.add_scatter(x=rows["time"], y=rows["to_level"], text=hover, mode="markers", name=kind,
                        marker={"size": 10, "symbol": "diamond", "color": KIND_COLORS.get(kind, "#9467bd"),
                                "line": {"width": 1, "color": "#333"}},
                        hovertemplate=f"{kind} %{{text}}<br>%{{x}}<extra></extra>")
    fig.update_layout(title=title, xaxis_title="time (UTC)", yaxis_title="level")
    return _styled(fig)


#: the charts in page order, by DOM id
CHARTS = ("lag-offsets", "lag-ms", "image-divergence", "broker-states", "consistency-rates", "fencing-rates",
          "feature-levels")


def chart_figures(frames: Frames) -> dict[str, go.Figure]:
    """Every chart of ``frames``, by DOM id (:data:`CHARTS`)."""
    return {
        "lag-offsets": lag_offsets_figure(frames.cache_lag),
        "lag-ms": lag_ms_figure(frames.cache_lag),
        "image-divergence": divergence_figure(frames.cache_lag),
        "broker-states": broker_states_figure(frames.broker_states, frames.last_time),
        "consistency-rates": consistency_rates_figure(frames.consistency_summary),
        "fencing-rates": fencing_rates_figure(frames.fencing_summary),
        "feature-levels": feature_levels_figure(frames.features, frames.feature_transitions, frames.last_time),
    }
