"""``kraft-replay report``: one self-contained HTML page a person reads after a run.

Per cluster: cache lag per broker over time (offsets, ms) and image divergence; what consistency tokens
avoided (monotonic-read violations) against what they cost (waits, STALE_METADATA answers, retries);
stale-leader writes with and without the leader-epoch check and the writes lost; the feature-level
timeline with every transition; the broker state timeline. The charts are the dashboard's
(:mod:`kraft_replay.serve.charts`), drawn by plotly.js embedded once in the page, so the file opens
offline. Reads the tables at their published versions through :class:`~kraft_replay.lake.reader.LakeReader`
(no JVM).
"""

from __future__ import annotations

import datetime as dt
import html
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

from kraft_replay.lake.reader import LakeReader
from kraft_replay.serve import charts

CSS = """
body { font-family: system-ui, sans-serif; margin: 24px auto; max-width: 1280px; color: #222; }
h1 { margin-bottom: 0; } h2 { border-bottom: 1px solid #ddd; padding-bottom: 4px; margin-top: 36px; }
.meta { color: #666; margin-top: 4px; }
.facts { display: flex; flex-wrap: wrap; gap: 12px; margin: 12px 0; }
.fact { background: #f5f7fa; border-radius: 6px; padding: 8px 14px; min-width: 150px; }
.fact b { display: block; font-size: 1.4em; }
table { border-collapse: collapse; margin: 8px 0; font-size: 0.92em; }
td, th { border: 1px solid #ddd; padding: 3px 8px; text-align: right; } th { background: #f5f7fa; }
td:first-child, th:first-child { text-align: left; }
.empty { color: #888; font-style: italic; }
"""


@dataclass
class Report:
    """What was written: the file, its clusters and each cluster's headline figures."""

    path: Path
    clusters: list[str]
    facts: dict[str, dict[str, int]]


def _sum(df: pd.DataFrame, col: str, where: pd.Series | None = None) -> int:
    if df.empty or col not in df:
        return 0
    values = df.loc[where, col] if where is not None else df[col]
    return int(values.fillna(0).sum())


def headline(frames: charts.Frames) -> dict[str, int]:
    """The cluster's figures: worst lag, what tokens avoided and cost, stale-leader writes, transitions."""
    lag, cons, fen = frames.cache_lag, frames.consistency_summary, frames.fencing_summary
    pol = cons["policy"] if "policy" in cons else pd.Series(dtype=str)
    return {
        "brokers": len(frames.brokers),
        "max_offset_lag": int(lag["offset_lag_max"].max()) if not lag.empty else 0,
        "max_time_lag_ms": int(lag["time_lag_ms_max"].max()) if not lag.empty else 0,
        "violations_without_tokens": _sum(cons, "violations", pol == "none"),
        "violations_avoided": _sum(cons, "violations_avoided", pol == "fail"),
        "stale_metadata_fail_fast": _sum(cons, "stale_metadata", pol == "fail"),
        "admitted_after_wait": _sum(cons, "admitted_after_wait", pol == "wait"),
        "wait_ms_p99": int(cons.loc[pol == "wait", "wait_ms_p99"].max()) if "wait_ms_p99" in cons and (pol == "wait").any()
        and cons.loc[pol == "wait", "wait_ms_p99"].notna().any() else 0,
        "stale_leader_accepts": _sum(fen, "stale_leader_accepts"),
        "fenced_by_check": _sum(fen, "fenced_by_check"),
        "lost_writes": _sum(fen, "lost_acks_0_1") + _sum(fen, "lost_acks_all"),
        "feature_transitions": len(frames.feature_transitions),
    }


def facts_line(facts: dict[str, int]) -> str:
    """The headline figures of :func:`headline` as one line of text (the CLI's summaries)."""
    return (f"worst cache lag {facts['max_offset_lag']:,} offsets / {facts['max_time_lag_ms']:,} ms; "
            f"violations avoided by tokens {facts['violations_avoided']:,} (p99 wait {facts['wait_ms_p99']:,} ms); "
            f"stale-leader writes {facts['stale_leader_accepts']:,}, lost {facts['lost_writes']:,}; "
            f"feature transitions {facts['feature_transitions']}")


FACT_LABELS = {
    "brokers": "brokers", "max_offset_lag": "worst cache lag (offsets)", "max_time_lag_ms": "worst cache lag (ms)",
    "violations_without_tokens": "monotonic-read violations without tokens",
    "violations_avoided": "violations avoided by tokens (fail fast)",
    "stale_metadata_fail_fast": "STALE_METADATA answers (fail fast)",
    "admitted_after_wait": "admitted after a wait (wait policy)", "wait_ms_p99": "p99 wait (ms)",
    "stale_leader_accepts": "stale-leader writes accepted without the epoch check",
    "fenced_by_check": "fenced by the epoch check", "lost_writes": "writes lost without the check",
    "feature_transitions": "feature-level transitions",
}


def _table(df: pd.DataFrame, columns: list[str]) -> str:
    if df.empty:
        return f'<p class="empty">{charts.NO_DATA}</p>'
    shown = df[[c for c in columns if c in df]].copy()
    return shown.to_html(index=False, border=0, na_rep="", escape=True)


def _lag_table(lag: pd.DataFrame) -> pd.DataFrame:
    if lag.empty:
        return lag
    return (lag.groupby("broker_id").agg(buckets=("bucket_start", "size"), offset_lag_p99=("offset_lag_p99", "max"),
                                         offset_lag_max=("offset_lag_max", "max"), time_lag_ms_p99=("time_lag_ms_p99", "max"),
                                         time_lag_ms_max=("time_lag_ms_max", "max"), stalled_buckets=("stalled", "sum"),
                                         max_image_divergence=("image_divergence", "max"))
            .reset_index())


def _level(version: object, level: object) -> str:
    """A level as its release name (metadata.version) or number; "—" when there was none."""
    if isinstance(version, str) and version:
        return version
    return "—" if level is None or pd.isna(level) else str(int(level))


def _transitions(tr: pd.DataFrame) -> pd.DataFrame:
    if tr.empty:
        return tr
    out = tr.sort_values("time").copy()
    out["change"] = [f"{_level(fv, fl)} → {_level(tv, tl)}" for fv, fl, tv, tl in
                     zip(out["from_version"], out["from_level"], out["to_version"], out["to_level"])]
    if "unsupported_nodes" in out:
        out["unsupported_nodes"] = [", ".join(v) if v is not None and len(v) else "" for v in out["unsupported_nodes"]]
    return out


def _figure(fig: go.Figure, first: bool) -> str:
    return fig.to_html(full_html=False, include_plotlyjs="inline" if first else False,
                       config={"displaylogo": False, "responsive": True})


def _section(frames: charts.Frames, facts: dict[str, int], first: bool) -> str:
    figs = charts.chart_figures(frames)
    span = (f"{frames.first_time:%Y-%m-%d %H:%M:%S} – {frames.last_time:%Y-%m-%d %H:%M:%S} UTC"
            if frames.first_time is not None and frames.last_time is not None else "no data yet")
    parts = [f"<h2>cluster {html.escape(str(frames.cluster))}</h2><p class='meta'>{span}</p>",
             '<div class="facts">' + "".join(f'<div class="fact"><b>{v:,}</b>{html.escape(FACT_LABELS[k])}</div>'
                                              for k, v in facts.items()) + "</div>"]
    order = [("Cache lag per broker", ["lag-offsets", "lag-ms", "image-divergence"]),
             ("Consistency tokens: anomalies avoided and their cost", ["consistency-rates"]),
             ("Leader-epoch fencing: stale-leader writes", ["fencing-rates"]),
             ("Feature levels", ["feature-levels"]),
             ("Broker states", ["broker-states"])]
    for title, ids in order:
        parts.append(f"<h3>{title}</h3>")
        for i in ids:
            parts.append(_figure(figs[i], first))
            first = False
        if ids[0] == "lag-offsets":
            parts.append(_table(_lag_table(frames.cache_lag), ["broker_id", "buckets", "offset_lag_p99", "offset_lag_max",
                                                               "time_lag_ms_p99", "time_lag_ms_max", "stalled_buckets",
                                                               "max_image_divergence"]))
        if ids[0] == "feature-levels":
            parts.append(_table(_transitions(frames.feature_transitions),
                                ["time", "feature", "change", "kind", "offset", "unsupported_nodes"]))
    return "\n".join(parts)


def write_report(lake_root: str, out: str | Path, cluster: str | None = None) -> Report:
    """Write the report of ``cluster`` (default: every cluster with charted tables) to ``out``."""
    reader = LakeReader(lake_root)
    clusters = charts.load_frames(reader).clusters
    chosen = [cluster] if cluster else clusters
    body: list[str] = []
    facts: dict[str, dict[str, int]] = {}
    for c in chosen:
        frames = charts.load_frames(reader, c)
        facts[c] = headline(frames)
        body.append(_section(frames, facts[c], first=not body))
    if not body:
        body.append(f'<p class="empty">{charts.NO_DATA}</p>')
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>kraft-replay report</title>"
            f"<style>{CSS}</style></head><body><h1>kraft-replay report</h1>"
            f"<p class='meta'>lake {html.escape(str(lake_root))} · {len(chosen)} cluster(s) · written {stamp}</p>"
            + "\n".join(body) + "</body></html>")
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(path)
    return Report(path=path, clusters=chosen, facts=facts)
