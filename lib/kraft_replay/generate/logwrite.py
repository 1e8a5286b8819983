"""Write the generated ``metadata_log`` through staged pyarrow files instead of Spark's Parquet writer.

Rule: the bulk of the log (NoOp and churn PartitionChangeRecords, :func:`kraft_replay.generate.log.bulk_log`)
is still computed by Spark column expressions, ``payload_json`` included, but leaves Spark as a
NARROW frame (:func:`kraft_replay.generate.log.bulk_log_flat`): the scalar columns, ``payload_json``
and the filled fields of ``partition_change`` as flat columns ``partition_change__<field>``. In
``mapInArrow`` every task rebuilds the exact bronze row (:data:`kraft_replay.ingest.schemas.LOG_SCHEMA`)
with Arrow: the payload struct from its flat fields (null where the row is another record type),
every other payload column all-null, the constant and derived columns (``cluster_id``,
``offset_bucket``, ``record_type``, ``source_file``, ``source_position``); then writes it with
:func:`kraft_replay.lake.staged.write_staged_arrow`. The few structural rows are built on the driver
as Arrow (payload columns by the codec's builder, ``payload_json`` by the codec's dump-tool
renderer) and staged from there. One commit then replaces the cluster's rows
(``commit_staged(..., replace_where=...)``); on any failure before it the staging directory is
dropped, so nothing is partially committed.

Why: Spark's Parquet writer is slow on the wide nested bronze schema (~150 leaf columns, nearly all
null in a bulk row), its partitioned write sorts every task's rows, and converting nested structs
with null list fields to Arrow is slow too. Flat columns cross the JVM/Python boundary cheaply;
bulk chunks stay inside one ``offset_bucket`` (:func:`kraft_replay.generate.log.segments_frame`), so
a task writes one or two partitions and never sorts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession

from kraft_replay.codec.arrow_json import record_json_arrow
from kraft_replay.codec.jsonfmt import to_dump_json
from kraft_replay.codec.schema import RECORD_TYPES
from kraft_replay.generate import log as L
from kraft_replay.generate.plan import Plan
from kraft_replay.ingest.schemas import LOG_SCHEMA, OFFSET_BUCKET_SIZE
from kraft_replay.lake.staged import StagedWrite, write_staged_arrow
from kraft_replay.spark import session_conf

FLAT_SEP = "__"
_STATS = pa.schema([("rows", pa.int64()), ("files", pa.int64())])
# Column name -> api key of the record type whose payload it holds.
_COLUMN_KEY = {rt.column: k for k, rt in RECORD_TYPES.items() if rt.has_body}
# record_type by api key, as an Arrow array to ``take`` from (null for keys without a record type).
_MAX_KEY = max(RECORD_TYPES)
_TYPE_NAMES = pa.array([RECORD_TYPES[k].tool_name if k in RECORD_TYPES else None for k in range(_MAX_KEY + 1)],
                       pa.string())


def widen_flat_batch(batch: pa.RecordBatch, cluster_id: str, source_file: str,
                     schema: pa.Schema = LOG_SCHEMA) -> pa.RecordBatch:
    """One narrow bulk batch as rows of ``schema`` (the rule in the module docstring).

    Columns named ``<payload>__<field>`` become the fields of struct column ``<payload>``, null in
    rows whose ``api_key`` is not that payload's record type; fields not given are null. Raises
    ``ValueError`` for a column that is neither a bronze column nor a flat payload field."""
    n = batch.num_rows
    given = {name: batch.column(i) for i, name in enumerate(batch.schema.names)}
    flat: dict[str, dict[str, pa.Array]] = {}
    for name in list(given):
        if FLAT_SEP in name:
            struct_col, field = name.split(FLAT_SEP, 1)
            flat.setdefault(struct_col, {})[field] = given.pop(name)
    api_key = given["api_key"]
    offset = given["offset"]
    derived = {
        "cluster_id": pa.array(np.full(n, cluster_id, dtype=object), pa.string()) if n else pa.array([], pa.string()),
        "offset_bucket": pc.divide(offset, pa.scalar(OFFSET_BUCKET_SIZE, pa.int64())),
        "record_type": _TYPE_NAMES.take(api_key),
        "source_file": pa.array(np.full(n, source_file, dtype=object), pa.string()) if n else pa.array([], pa.string()),
        "source_position": given["batch_base_offset"],
    }
    structs = {name: _struct_from_flat(schema.field(name), parts, api_key, n)
               for name, parts in flat.items() if name in schema.names}
    if "payload_json" not in given:
        derived["payload_json"] = payload_json_arrow(api_key, given["record_version"], structs, n)
    cols = []
    for f in schema:
        if f.name in given:
            col = given[f.name]
        elif f.name in structs:
            col = structs[f.name]
        elif f.name in derived:
            col = derived[f.name]
        else:
            col = pa.nulls(n, f.type)
        if not col.type.equals(f.type):
            col = col.cast(f.type)
        cols.append(col)
    unknown = sorted(set(given) - set(schema.names)) + sorted(set(flat) - set(structs))
    if unknown:
        raise ValueError(f"metadata_log: generated column {unknown[0]!r} is not in the bronze schema")
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def payload_json_arrow(api_key: pa.Array, version: pa.Array, structs: dict[str, pa.Array], n: int) -> pa.Array:
    """``payload_json`` of every row from its payload struct column (:mod:`kraft_replay.codec.arrow_json`)."""
    combo = pc.add(pc.multiply(api_key.cast(pa.int64()), 1 << 16), version.cast(pa.int64()))
    out = pa.nulls(n, pa.string())
    for c in pc.unique(combo).to_pylist():
        if c is None:
            continue
        k, v = c >> 16, c & 0xFFFF
        column = RECORD_TYPES[k].column if k in RECORD_TYPES and RECORD_TYPES[k].has_body else None
        text = record_json_arrow(k, v, structs.get(column) if column else None, length=n)
        out = pc.if_else(pc.equal(combo, c), text, out)
    return out


def _struct_from_flat(field: pa.Field, parts: dict[str, pa.Array], api_key: pa.Array, n: int) -> pa.StructArray:
    stype: pa.StructType = field.type
    unknown = set(parts) - {stype.field(i).name for i in range(stype.num_fields)}
    if unknown:
        raise ValueError(f"metadata_log: {field.name} has no field {sorted(unknown)[0]!r}")
    children = []
    for i in range(stype.num_fields):
        sub = stype.field(i)
        child = parts.get(sub.name)
        if child is None:
            child = pa.nulls(n, sub.type)
        elif not child.type.equals(sub.type):
            child = child.cast(sub.type)
        children.append(child)
    mask = pc.fill_null(pc.not_equal(api_key, pa.scalar(_COLUMN_KEY[field.name], api_key.type)), True)
    return pa.StructArray.from_arrays(children, fields=list(stype), mask=mask)


def _bulk_writer(info: StagedWrite, cluster_id: str, source_file: str
                 ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        pid = ctx.partitionId() if ctx is not None else 0
        schema = info.arrow_schema
        rows = 0

        def wide() -> Iterator[pa.RecordBatch]:
            nonlocal rows
            for b in batches:
                if b.num_rows:
                    rows += b.num_rows
                    yield widen_flat_batch(b, cluster_id, source_file, schema)

        # one name per Spark partition: a retried task overwrites its own files
        paths = write_staged_arrow(info, wide(), f"b{pid:05d}")
        yield pa.RecordBatch.from_pydict({"rows": [rows], "files": [len(paths)]}, schema=_STATS)

    return run


def structural_table(plan: Plan, secrets_key: bytes | None = None) -> pa.Table:
    """The plan's structural data records as ``metadata_log`` rows, built on the driver, credential
    material fingerprinted under ``secrets_key`` (:func:`kraft_replay.generate.log.fingerprinted`)."""
    recs, rows = [], []
    for b in plan.batches:
        if b.control is None:
            for i, r in enumerate(b.records):
                recs.append(r)
                rows.append((b, i))
    from kraft_replay.codec.arrow_payload import PAYLOAD_FIELDS, build_payload_columns

    n = len(recs)
    cols: dict[str, pa.Array] = {
        "cluster_id": pa.array([plan.scenario.cluster_id] * n, pa.string()),
        "offset": pa.array([b.base_offset + i for b, i in rows], pa.int64()),
        "batch_base_offset": pa.array([b.base_offset for b, _ in rows], pa.int64()),
        "batch_last_offset": pa.array([b.last_offset for b, _ in rows], pa.int64()),
        "batch_leader_epoch": pa.array([b.epoch for b, _ in rows], pa.int32()),
        "append_time": pa.array([b.time_ms * 1000 for b, _ in rows], pa.timestamp("us", tz="UTC")),
        "record_type": pa.array([RECORD_TYPES[r.api_key].tool_name for r in recs], pa.string()),
        "api_key": pa.array([r.api_key for r in recs], pa.int32()),
        "record_version": pa.array([r.version for r in recs], pa.int32()),
        "payload_json": pa.array([to_dump_json(r) for r in recs], pa.string()),
        "source_file": pa.array([L.source_file_name(plan)] * n, pa.string()),
        "source_position": pa.array([b.base_offset for b, _ in rows], pa.int64()),
    }
    cols["offset_bucket"] = pc.divide(cols["offset"], pa.scalar(OFFSET_BUCKET_SIZE, pa.int64()))
    for f, arr in zip(PAYLOAD_FIELDS, build_payload_columns(recs), strict=True):
        cols[f.name] = arr
    return L.fingerprinted(pa.Table.from_arrays([cols[f.name] if f.name in cols else pa.nulls(n, f.type)
                                                 for f in LOG_SCHEMA], schema=LOG_SCHEMA), secrets_key)


def write_metadata_log(spark: SparkSession, lake, plan: Plan, replace_where: str,  # noqa: ANN001 - a Lake
                       progress: Callable[[str], None] = print, secrets_key: bytes | None = None) -> int:
    """Generate the plan's ``metadata_log`` rows and replace the rows matching ``replace_where`` with
    them in one commit. Returns the number of rows committed."""
    t0 = time.time()
    staged = lake.new_staging("metadata_log")
    try:
        structural = structural_table(plan, secrets_key)
        write_staged_arrow(staged, structural, "s")
        t1 = time.time()
        with session_conf(spark, _WRITE_CONF):
            stats = (L.bulk_log_flat(spark, plan)
                     .mapInArrow(_bulk_writer(staged, plan.scenario.cluster_id, L.source_file_name(plan)),
                                 "rows long, files long")
                     .collect())
        bulk_rows = sum(r["rows"] for r in stats)
        t2 = time.time()
        progress(f"metadata_log: staged {structural.num_rows:,} structural rows in {t1 - t0:.1f}s, "
                 f"{bulk_rows:,} bulk rows in {t2 - t1:.1f}s ({bulk_rows / max(t2 - t1, 1e-9):,.0f} rows/s)")
    except BaseException:
        lake.abort_staged(staged)
        raise
    res = lake.commit_staged(staged, replace_where=replace_where)
    progress(f"metadata_log: committed {res.files:,} files in {time.time() - t2:.1f}s")
    return int(res.rows)


# Session settings for the bulk job. Arrow batches of 64k rows keep per-batch overhead low. The bulk
# expressions compile into one large whole-stage-codegen method; above the JVM's own JIT limit
# (8000 bytes of bytecode) it would run interpreted, several times slower, so a stage that large
# falls back to per-operator code instead.
_WRITE_CONF = {"spark.sql.execution.arrow.maxRecordsPerBatch": "65536",
               "spark.sql.codegen.hugeMethodLimit": "8000"}


