"""Ingest: KRaft segments, snapshots, bootstrap files and dump-log text into the bronze Delta tables.

``run_ingest(spark, lake, paths, cluster_id=None, strict=False)`` is the job; ``kraft-replay ingest``
and ``jobs/ingest.py`` call it. Table contracts: :mod:`kraft_replay.ingest.tables` and docs/design.md.
"""

from kraft_replay.ingest.errors import IngestError
from kraft_replay.ingest.pipeline import FileResult, IngestSummary, run_ingest
from kraft_replay.ingest.tables import BRONZE_TABLES, ensure_bronze_tables

__all__ = ["BRONZE_TABLES", "FileResult", "IngestError", "IngestSummary", "ensure_bronze_tables", "run_ingest"]
