"""Backend selection: the embedded delta-rs backend or native delta-spark."""

from __future__ import annotations

from typing import Any, Protocol

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from kraft_replay.lake.deltars import CommitResult
from kraft_replay.lake.files import Location

from kraft_replay.lake.errors import BackendUnavailableError, InvalidArgumentError

DELTA_SPARK_CLASS = "io.delta.tables.DeltaTable"


class LakeBackend(Protocol):
    """What :class:`kraft_replay.lake.Lake` needs from a backend (both backends implement it)."""

    name: str
    root: Location

    def table_names(self) -> list[str]: ...
    def exists(self, name: str) -> bool: ...
    def schema(self, name: str) -> StructType: ...
    def version(self, name: str) -> int: ...
    def partition_columns(self, name: str) -> list[str]: ...
    def create_table(self, name: str, schema: StructType, partition_by: list[str]) -> bool: ...
    def add_columns(self, name: str, fields: StructType) -> None: ...
    def write(self, name: str, df: DataFrame, *, mode: str, replace_where: str | None = None,
              txn: tuple[str, int] | None = None, schema: StructType | None = None) -> CommitResult: ...
    def read(self, name: str, version: int | None = None, timestamp: Any = None,
             where: str | None = None) -> DataFrame: ...
    def read_arrow(self, name: str, columns: list[str], version: int | None = None,
                   partitions: list[tuple[str, str, Any]] | None = None) -> Any: ...
    def merge(self, name: str, df: DataFrame, keys: list[str],
              txn: tuple[str, int] | None = None) -> CommitResult: ...
    def rewrite(self, name: str, fn: Any, replace_where: str, touched: Any, columns: list[str],
                together_below: int = 0) -> CommitResult: ...
    def compact(self, name: str) -> CommitResult: ...
    def vacuum(self, name: str, retain_hours: float = 168.0) -> list[str]: ...
    def history(self, name: str, limit: int | None = None) -> list[dict[str, Any]]: ...
    def table_info(self, name: str, version: int | None = None) -> tuple[int, int, StructType, list[str], int]: ...
    def read_stream(self, name: str, *, max_files_per_trigger: int | None = None,
                    max_rows_per_trigger: int | None = None, starting_version: int | None = None,
                    skip_change_commits: bool = False, published: bool = False) -> DataFrame: ...
    # published versions (kraft_replay.lake.publish)
    def read_published(self) -> dict[str, dict[str, Any]]: ...
    def write_published(self, rows: list[dict[str, Any]], run_id: str) -> int: ...
    def restore(self, name: str, version: int, txns: dict[str, int] | None = None) -> int: ...
    def txn_versions(self, name: str, version: int, app_ids: set[str]) -> dict[str, int]: ...
    def file_paths(self, name: str, version: int) -> set[str]: ...
    def write_stream(self, df: DataFrame, name: str, checkpoint: str, *, trigger: dict[str, Any] | None = None,
                     query_name: str | None = None) -> Any: ...


def delta_spark_available(spark: SparkSession, class_name: str | None = None) -> bool:
    """True when ``class_name`` (default: delta-spark's ``DeltaTable``) loads in the session's JVM."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:  # Spark Connect: no local JVM to ask
        return False
    try:
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName(class_name or DELTA_SPARK_CLASS, False, loader)
        return True
    except Exception:  # py4j.protocol.Py4JJavaError: ClassNotFoundException
        return False


def resolve_backend(requested: str, spark: SparkSession | None) -> str:
    """``auto`` -> ``delta-spark`` when its classes load, else ``deltars``; explicit names are checked.
    Without a session (a driver-only lake) there is no JVM to hold delta-spark: ``auto`` is ``deltars``."""
    if requested == "auto":
        return "delta-spark" if spark is not None and delta_spark_available(spark) else "deltars"
    if requested == "deltars":
        return requested
    if requested == "delta-spark":
        if spark is None:
            raise BackendUnavailableError("backend 'delta-spark' needs a Spark session; this command opens the lake "
                                          "without one: use --backend deltars (or auto)")
        if not delta_spark_available(spark):
            raise BackendUnavailableError(
                f"backend 'delta-spark' requested but class {DELTA_SPARK_CLASS} is not on the Spark classpath; "
                "start the session with the delta-spark jars (kraft-replay --backend delta-spark adds those "
                "`python -m kraft_replay.spark.delta_jars` fetched; spark.jars.packages=io.delta:delta-spark_2.13:4.4.0 "
                "on a cluster) or use --backend deltars"
            )
        return requested
    raise InvalidArgumentError(f"unknown lake backend {requested!r}; use auto, deltars or delta-spark")


def make_backend(requested: str, root: str, spark: SparkSession | None, target_file_rows: int,
                 storage_options: dict[str, str] | None) -> LakeBackend:
    kind = resolve_backend(requested, spark)
    if kind == "delta-spark":
        from kraft_replay.lake.delta_spark import DeltaSparkBackend

        return DeltaSparkBackend(root, spark, target_file_rows, storage_options)
    from kraft_replay.lake.deltars import DeltaRsBackend

    return DeltaRsBackend(root, spark, target_file_rows, storage_options)
