"""The data-quality figures of a run (Spark SQL for one ``kraft-replay sql --json`` call) and the rules
that judge them (airflow_dags/README.md, "The DAGs"). Plain Python: no Airflow, no Spark.

Each ``check_*`` returns the problems it found, one line each (empty: the check passed).
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime

#: ranges of missing offsets named in a message before "... and N more"
SHOWN_GAPS = 5


def literal(text: str) -> str:
    """``text`` as a Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _ts(t: datetime) -> str:
    """A UTC datetime as a Spark SQL timestamp literal (the session time zone is UTC)."""
    return f"TIMESTAMP'{t.strftime('%Y-%m-%d %H:%M:%S.%f')}'"


def figures_sql(clusters: list[str], since: datetime, lag_window_minutes: int | None = None,
                lag_range: tuple[datetime, datetime] | None = None) -> str:
    """The statements collecting a run's figures, separated by ``;``: offset gaps between consecutive
    ``log_batches`` and batch counts per cluster; ``ingest_quarantine`` rows ingested since ``since`` per
    cluster and reason code; then, with ``lag_window_minutes`` (the newest minutes of each cluster's
    buckets) or ``lag_range`` (``[start, end)``), each broker's ``cache_lag`` over those buckets."""
    where = f"cluster_id IN ({', '.join(literal(c) for c in clusters)})"
    gaps = (
        "SELECT cluster_id, count(*) AS batches, "
        "sort_array(collect_list(CASE WHEN batch_base_offset > prev_last + 1 "
        "THEN named_struct('first', prev_last + 1, 'last', batch_base_offset - 1) END)) AS gaps "
        "FROM (SELECT cluster_id, batch_base_offset, max(batch_last_offset) OVER (PARTITION BY cluster_id "
        "ORDER BY batch_base_offset ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_last "
        f"FROM log_batches WHERE {where}) GROUP BY cluster_id")
    quarantine = (f"SELECT cluster_id, reason_code, count(*) AS rows FROM ingest_quarantine WHERE {where} "
                  f"AND ingested_at >= {_ts(since)} GROUP BY cluster_id, reason_code")
    statements = [gaps, quarantine]
    if lag_window_minutes is not None or lag_range is not None:
        if lag_range is not None:
            inner = f"SELECT * FROM cache_lag WHERE {where}"
            keep = f"bucket_start >= {_ts(lag_range[0])} AND bucket_start < {_ts(lag_range[1])}"
        else:
            inner = f"SELECT *, max(bucket_start) OVER (PARTITION BY cluster_id) AS newest FROM cache_lag WHERE {where}"
            keep = f"bucket_start > timestampadd(MINUTE, -{int(lag_window_minutes)}, newest)"
        statements.append(
            "SELECT cluster_id, broker_id, count(*) AS buckets, max(offset_lag_max) AS offset_lag_max, "
            "count_if(stalled) AS stalled_buckets, string(min(bucket_start)) AS first_bucket, "
            f"string(max(bucket_start)) AS last_bucket FROM ({inner}) WHERE {keep} GROUP BY cluster_id, broker_id")
    return ";\n".join(statements)


def parse_results(stdout: str) -> list[list[dict]]:
    """The JSON arrays ``kraft-replay sql --json`` printed, one per statement, in order."""
    decoder = json.JSONDecoder()
    out: list[list[dict]] = []
    pos = 0
    text = stdout.strip()
    while pos < len(text):
        value, pos = decoder.raw_decode(text, pos)
        if not isinstance(value, list):
            raise TypeError(f"kraft-replay sql --json printed {type(value).__name__}, not a JSON array of rows")
        out.append(value)
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


def _ranges(gaps: list[dict]) -> str:
    shown = ", ".join(f"{g['first']}..{g['last']}" for g in gaps[:SHOWN_GAPS])
    return shown + (f" and {len(gaps) - SHOWN_GAPS} more" if len(gaps) > SHOWN_GAPS else "")


def check_offsets_contiguous(rows: list[dict], clusters: list[str], max_offset_gaps: int) -> list[str]:
    """Consecutive ``log_batches`` of a cluster leave no offset out: more gaps than ``max_offset_gaps``
    fail, naming the missing ranges; a cluster with no batch at all fails too."""
    by_cluster = {r["cluster_id"]: r for r in rows}
    problems = []
    for c in clusters:
        r = by_cluster.get(c)
        if r is None or not r["batches"]:
            problems.append(f"cluster {c}: no batch in log_batches (nothing ingested and replayed)")
        elif len(r["gaps"]) > max_offset_gaps:
            problems.append(f"cluster {c}: {len(r['gaps'])} offset gap(s) between batches, more than "
                            f"max_offset_gaps {max_offset_gaps}: missing offsets {_ranges(r['gaps'])}")
    return problems


def check_quarantine_growth(rows: list[dict], clusters: list[str], max_new_quarantine_rows: int) -> list[str]:
    """At most ``max_new_quarantine_rows`` ``ingest_quarantine`` rows per cluster since the run started,
    naming the reason codes of a cluster over it."""
    reasons: dict[str, dict[str, int]] = defaultdict(dict)
    for r in rows:
        reasons[r["cluster_id"]][r["reason_code"]] = int(r["rows"])
    problems = []
    for c in clusters:
        total = sum(reasons[c].values())
        if total > max_new_quarantine_rows:
            codes = ", ".join(f"{code} {n}" for code, n in sorted(reasons[c].items(), key=lambda kv: (-kv[1], kv[0])))
            problems.append(f"cluster {c}: {total} new ingest_quarantine row(s), more than max_new_quarantine_rows "
                            f"{max_new_quarantine_rows} ({codes})")
    return problems


def check_cache_lag(rows: list[dict] | None, clusters: list[str], max_offset_lag: int, max_stalled_buckets: int,
                    metrics_clusters: list[str]) -> tuple[list[str], list[str]]:
    """Over the judged ``cache_lag`` buckets, each broker's ``offset_lag_max`` at most ``max_offset_lag`` and
    at most ``max_stalled_buckets`` stalled buckets. A cluster without buckets has nothing to judge (a
    note), unless the run was given its broker metrics (``metrics_clusters``): then it fails. Returns
    ``(problems, notes)``; ``rows`` None: the lake has no ``cache_lag``."""
    by_cluster: dict[str, list[dict]] = defaultdict(list)
    for r in rows or []:
        by_cluster[r["cluster_id"]].append(r)
    problems, notes = [], []
    for c in clusters:
        if not by_cluster[c]:
            if c in metrics_clusters:
                problems.append(f"cluster {c}: no cache_lag bucket to judge although the run was given its broker "
                                "metrics (metrics_dir): check the exports' broker labels and times")
            else:
                notes.append(f"cluster {c}: no cache_lag bucket (no broker metrics): nothing to judge")
            continue
        for r in sorted(by_cluster[c], key=lambda r: r["broker_id"]):
            span = f"buckets {r['first_bucket']} .. {r['last_bucket']}"
            if r["offset_lag_max"] > max_offset_lag:
                problems.append(f"cluster {c} broker {r['broker_id']}: offset_lag_max {r['offset_lag_max']} over "
                                f"max_offset_lag {max_offset_lag} ({span})")
            if r["stalled_buckets"] > max_stalled_buckets:
                problems.append(f"cluster {c} broker {r['broker_id']}: {r['stalled_buckets']} stalled bucket(s), "
                                f"more than max_stalled_buckets {max_stalled_buckets} ({span})")
    return problems, notes
