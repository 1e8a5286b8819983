"""DAG ``kraft_replay_maintenance`` (daily): keep each cluster's full image at its committed offset
(``replay --cluster-id C --image-at O`` into ``image_snapshots``), then compact and vacuum every table
(``jobs/maintain.py``; vacuum keeps the files of the last ``retain_hours``). airflow_dags/README.md."""

from __future__ import annotations

import kraft_replay_common as common
from airflow.sdk import DAG

with DAG(
    dag_id="kraft_replay_maintenance",
    schedule=common.schedule("kraft_replay_maintenance"),
    params=common.params("lake_root", "profile", "cluster", "retain_hours", "image_snapshots"),
    tags=["kraft-replay", "maintenance"],
    doc_md=__doc__,
    **common.DAG_ARGS,
):
    plan = common.plan_maintenance()
    image_snapshot = common.job("image_snapshot", "replay", common.image_offsets(plan), mapped=True)
    compact = common.job("compact", "maintain", plan["compact"], trigger_rule="none_failed")  # no image: skipped
    vacuum = common.job("vacuum", "maintain", plan["vacuum"])
    image_snapshot >> compact >> vacuum
