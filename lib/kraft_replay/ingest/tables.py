"""The six bronze tables: Spark schemas (from the Arrow contracts in ``ingest.schemas``) and partitioning.

``metadata_log`` is partitioned by ``cluster_id`` and ``offset_bucket`` (offset div 1,000,000) so
replay scans of an offset range prune files; the others by ``cluster_id`` (``ingest_files`` is not
partitioned: it is small and read whole).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from kraft_replay.ingest.errors import IngestError
from kraft_replay.ingest.schemas import (
    METRICS_TABLES,
    CONTROL_SCHEMA,
    FILES_SCHEMA,
    LOG_SCHEMA,
    QUARANTINE_RAW_SCHEMA,
    QUARANTINE_SCHEMA,
    SNAPSHOT_SCHEMA,
)

__all__ = ["BronzeTable", "BRONZE_TABLES", "METADATA_LOG", "METADATA_CONTROL", "SNAPSHOT_RECORDS",
           "INGEST_QUARANTINE", "INGEST_QUARANTINE_RAW", "INGEST_FILES", "METRICS_BRONZE_TABLES", "spark_schema", "arrow_df",
           "ensure_bronze_tables", "LEGACY_RAW_COLUMN", "has_legacy_raw"]

METADATA_LOG = "metadata_log"
METADATA_CONTROL = "metadata_control"
SNAPSHOT_RECORDS = "snapshot_records"
INGEST_QUARANTINE = "ingest_quarantine"
#: the bytes of the quarantined ranges (docs/design.md "Secrets": shown by ``sql`` only when asked)
INGEST_QUARANTINE_RAW = "ingest_quarantine_raw"
#: the column of ``ingest_quarantine`` that held those bytes in lakes made before ``ingest_quarantine_raw``
LEGACY_RAW_COLUMN = "raw"
INGEST_FILES = "ingest_files"


def spark_schema(schema: pa.Schema) -> StructType:
    """The Spark ``StructType`` of a bronze Arrow schema (timestamps become ``TimestampType``)."""
    return from_arrow_schema(schema)


def arrow_df(spark, table: pa.Table, schema: pa.Schema | None = None) -> DataFrame:  # noqa: ANN001 - a SparkSession
    """A small Arrow table built on the driver as a Spark DataFrame of the Spark type of ``schema``
    (default: the table's own)."""
    return spark.createDataFrame(table.to_pandas(), schema=spark_schema(schema or table.schema))


@dataclass(frozen=True)
class BronzeTable:
    name: str
    arrow_schema: pa.Schema
    partition_by: tuple[str, ...]

    @property
    def schema(self) -> StructType:
        return spark_schema(self.arrow_schema)


BRONZE_TABLES: dict[str, BronzeTable] = {
    t.name: t
    for t in (
        BronzeTable(METADATA_LOG, LOG_SCHEMA, ("cluster_id", "offset_bucket")),
        BronzeTable(METADATA_CONTROL, CONTROL_SCHEMA, ("cluster_id",)),
        BronzeTable(SNAPSHOT_RECORDS, SNAPSHOT_SCHEMA, ("cluster_id",)),
        BronzeTable(INGEST_QUARANTINE, QUARANTINE_SCHEMA, ("cluster_id",)),
        BronzeTable(INGEST_QUARANTINE_RAW, QUARANTINE_RAW_SCHEMA, ("cluster_id",)),
        BronzeTable(INGEST_FILES, FILES_SCHEMA, ()),
    )
}


#: The tables ``kraft-replay ingest-metrics`` writes (partitioned by ``cluster_id``).
METRICS_BRONZE_TABLES: dict[str, BronzeTable] = {
    name: BronzeTable(name, schema, ("cluster_id",)) for name, (schema, _keys) in METRICS_TABLES.items()}


def has_legacy_raw(lake) -> bool:  # noqa: ANN001 - a Lake
    """Whether ``ingest_quarantine`` as readers see it (its published version) still holds the quarantined
    bytes in its :data:`LEGACY_RAW_COLUMN` (a lake made before ``ingest_quarantine_raw``; ``kraft-replay
    redact`` moves them)."""
    return lake.exists(INGEST_QUARANTINE) and LEGACY_RAW_COLUMN in lake.columns(INGEST_QUARANTINE)


def ensure_bronze_tables(lake, tables: Iterable[BronzeTable] | None = None) -> None:  # noqa: ANN001 - a Lake
    """Create any missing bronze table of ``tables`` (default: the six of :data:`BRONZE_TABLES`)
    with its contract schema and partitioning.

    A table made by an older version that lacks a column of the contract (e.g. ``ingest_quarantine``
    before ``records``) is refused with a one-line :class:`~kraft_replay.ingest.errors.IngestError`
    naming the table, the columns and the fix (the lake layer cannot add columns yet); so is an
    ``ingest_quarantine`` that still holds the quarantined bytes in its ``raw`` column (the fix:
    ``kraft-replay redact``, which moves them to ``ingest_quarantine_raw``)."""
    tables = list(BRONZE_TABLES.values() if tables is None else tables)
    if any(t.name == INGEST_QUARANTINE for t in tables) and has_legacy_raw(lake):
        raise IngestError(
            f"table {INGEST_QUARANTINE} in lake {lake.root} was made by an older kraft-replay and keeps the quarantined "
            f"bytes in its column {LEGACY_RAW_COLUMN}; run `kraft-replay redact --lake {lake.root}` first (it moves them "
            f"to {INGEST_QUARANTINE_RAW}), then ingest again")
    for t in tables:                      # every table checked before any is created
        if lake.exists(t.name):
            have = set(lake.schema(t.name).fieldNames())
            missing = [f for f in t.schema.fields if f.name not in have]
            if missing:
                cols = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in missing)
                raise IngestError(
                    f"table {t.name} in lake {lake.root} was made by an older kraft-replay and lacks column(s) {cols}; "
                    f"add them as nullable columns (Delta: ALTER TABLE {t.name} ADD COLUMNS ({cols})) or move the "
                    f"table's directory aside and ingest again")
    for t in tables:
        lake.create_table(t.name, t.schema, partition_by=list(t.partition_by))
