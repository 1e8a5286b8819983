"""DAG ``kraft_replay_hourly``: ingest each cluster's new log files and broker metrics, replay what is new
(``replay --available-now``), recompute the outcomes, then check the data (airflow_dags/README.md)."""

from __future__ import annotations

import kraft_replay_common as common
from airflow.sdk import DAG

with DAG(
    dag_id="kraft_replay_hourly",
    schedule=common.schedule("kraft_replay_hourly"),
    params=common.params("lake_root", "profile", "cluster", "source_dir", "metrics_dir", "max_offset_gaps",
                         "max_new_quarantine_rows", "max_offset_lag", "max_stalled_buckets", "lag_window_minutes"),
    tags=["kraft-replay", "hourly"],
    doc_md=__doc__,
    **common.DAG_ARGS,
):
    common.pipeline(common.plan_hourly(), per_cluster=False)
