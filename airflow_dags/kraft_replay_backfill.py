"""DAG ``kraft_replay_backfill`` (triggered, no schedule): ingest the segments, snapshots and metric exports
last modified in ``[start, end)`` (UTC), then a batch replay and the outcomes of each backfilled cluster,
and the data-quality checks over the range (airflow_dags/README.md).

Trigger with ``{"start": "2026-11-01", "end": "2026-11-08"}``; optionally ``cluster``, ``source_dir`` (e.g.
an archive of old segments), ``metrics_dir`` and thresholds."""

from __future__ import annotations

import kraft_replay_common as common
from airflow.sdk import DAG

with DAG(
    dag_id="kraft_replay_backfill",
    schedule=None,
    params=common.params("start", "end", "lake_root", "profile", "cluster", "source_dir", "metrics_dir",
                         "max_offset_gaps", "max_new_quarantine_rows", "max_offset_lag", "max_stalled_buckets"),
    tags=["kraft-replay", "backfill"],
    doc_md=__doc__,
    **common.DAG_ARGS,
):
    common.pipeline(common.plan_backfill(), per_cluster=True)
