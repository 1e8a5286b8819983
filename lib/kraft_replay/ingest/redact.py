"""``kraft-replay redact``: fingerprint the credential material a lake holds in the clear, for good.

A lake ingested with ``--keep-secrets``, or made before ingest fingerprinted at decode time, holds
SCRAM salts / keys and sensitive config values in the clear (kafka-kraft-facts §12). Rules:

* Rewritten: the record tables ``metadata_log`` and ``snapshot_records`` (payload columns and
  ``payload_json``: :func:`kraft_replay.codec.secrets.redact_records`), silver ``configs`` (``value``
  of a sensitive config) and ``image_snapshots`` (the ``value`` of a ``configs`` entity, and the
  ``credential_fingerprint`` of a ``scram_credentials`` one, in the ``entity`` JSON). A table with
  nothing left in the clear is not touched, so a second run changes nothing (fingerprints are
  recognised: :func:`kraft_replay.codec.secrets.is_fingerprint`).
* Moved, not fingerprinted: the bytes of quarantined ranges in the ``raw`` column of an
  ``ingest_quarantine`` made before ``ingest_quarantine_raw`` (:func:`kraft_replay.ingest.tables.has_legacy_raw`).
  They did not decode, so no field in them can be told apart and fingerprinted; fingerprinting or
  dropping them whole would lose what the table is for (diagnosing the bad ranges). They go where
  ingest now writes them, ``ingest_quarantine_raw`` (one row per row with bytes, keyed by
  :data:`~kraft_replay.ingest.schemas.QUARANTINE_KEY`), shown by ``sql`` only with
  ``--include-raw``; ``ingest_quarantine`` is rewritten without the column. Done once: the table
  then has no ``raw`` column.
* All or nothing to readers: every rewrite is a commit of ONE lake run published at once
  (:meth:`kraft_replay.lake.Lake.publish`); killed before the publish, the next run of any writer
  rolls the commits back (the old state); killed after it, the new state is what readers see and
  running ``redact`` again finishes the clean-up below.
* Old versions are removed for good: Delta time travel would still read the replaced files, so each
  rewritten table is vacuumed at once (no retention) and its transaction log before the rewrite is
  dropped behind a checkpoint (the log's file statistics can hold short values). Versions before the
  rewrite can no longer be read; the summary says so. The tables to clean up are recorded in
  ``<lake>/_redact_pending.json`` before the publish and the record removed after the clean-up, so a
  run killed between the two is finished by the next.
* ``scram_credentials.credential_fingerprint`` stays null for versions replayed from clear bronze
  rows (a lake made before the column lacks it); ``kraft-replay replay`` after ``redact`` fills it
  (adding the column first: :meth:`kraft_replay.lake.Lake.create_table` with ``evolve``).
* The lake records that it holds fingerprints only again (:func:`kraft_replay.lake.keys.record_secrets`).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.fs as pafs
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kraft_replay.codec.secrets import CONFIG, SCRAM, config_is_sensitive, fingerprint_text, is_fingerprint, redact_records
from kraft_replay.ingest.schemas import QUARANTINE_RAW_SCHEMA
from kraft_replay.ingest.tables import (
    BRONZE_TABLES, INGEST_QUARANTINE, INGEST_QUARANTINE_RAW, LEGACY_RAW_COLUMN, has_legacy_raw,
)
from kraft_replay.lake.files import Location
from kraft_replay.lake.keys import FINGERPRINTED, lake_key, record_secrets, secrets_state

__all__ = ["RedactSummary", "redact_lake", "RECORD_TABLES", "SILVER_TABLES", "PENDING_FILE"]

RECORD_TABLES = ("metadata_log", "snapshot_records")
SILVER_TABLES = ("configs", "image_snapshots")
#: tables a redact run rewrote and has not cleaned up yet (written before its publish, removed after)
PENDING_FILE = "_redact_pending.json"


@dataclass
class RedactSummary:
    """What :func:`redact_lake` rewrote: rows changed per table, the versions published, files removed."""

    run_id: str
    changed: dict[str, int] = field(default_factory=dict)
    published: dict[str, int] = field(default_factory=dict)
    removed_files: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    moved_raw: int | None = None    # ingest_quarantine rows whose bytes went to ingest_quarantine_raw (None: none to move)

    def lines(self) -> list[str]:
        if not self.changed:
            return ["redact: nothing in the clear; no table rewritten"
                    + (f" (old files removed: {sum(self.removed_files.values())})" if any(self.removed_files.values()) else "")]
        done = [f"fingerprinted {t} {n:,} row(s)" for t, n in self.changed.items() if t != INGEST_QUARANTINE]
        if self.moved_raw is not None:
            done.append(f"moved the bytes of {self.moved_raw:,} {INGEST_QUARANTINE} row(s) to {INGEST_QUARANTINE_RAW} "
                        f"(undecodable, so not fingerprinted; shown by `sql --include-raw` only) and dropped its "
                        f"{LEGACY_RAW_COLUMN} column")
        out = [f"redact {self.run_id}: " + "; ".join(done)
               + f" in {self.seconds:.1f}s; published " + ", ".join(f"{t} v{v}" for t, v in self.published.items())]
        out.append("replaced files and the tables' history before the rewrite removed "
                   f"({sum(self.removed_files.values())} file(s)): versions before the rewrite can no longer be read")
        if {"configs", *RECORD_TABLES} & set(self.changed):
            out.append("run `kraft-replay replay` to fill scram_credentials.credential_fingerprint of the rewritten records")
        return out


def redact_configs_batch(batch: pa.RecordBatch, key: bytes) -> pa.RecordBatch:
    """Silver ``configs`` rows: the ``value`` of a sensitive config as its fingerprint (facts §12)."""
    if not batch.num_rows:
        return batch
    rt, name, value = (batch.column(c).to_pylist() for c in ("resource_type", "name", "value"))
    new = [fingerprint_text(key, v) if v is not None and config_is_sensitive(t, n) else v
           for t, n, v in zip(rt, name, value)]
    if new == value:
        return batch
    i = batch.schema.get_field_index("value")
    return batch.set_column(i, batch.schema.field(i), pa.array(new, pa.string()))


def _redact_entity(domain: str | None, text: str | None, key: bytes) -> str | None:
    if text is None or domain not in ("configs", "scram_credentials"):
        return text
    doc = json.loads(text)
    if domain == "configs":
        v = doc.get("value")
        if v is None or not config_is_sensitive(doc.get("resource_type"), doc.get("name")) or is_fingerprint(v):
            return text
        doc["value"] = fingerprint_text(key, v)
    else:
        fp = doc.get("credential_fingerprint")
        if fp is None or is_fingerprint(fp):
            return text
        doc["credential_fingerprint"] = None       # not a fingerprint: key material, dropped
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


def redact_image_batch(batch: pa.RecordBatch, key: bytes) -> pa.RecordBatch:
    """``image_snapshots`` rows: the ``entity`` JSON of ``configs`` and ``scram_credentials`` entities
    with what is in the clear fingerprinted (configs) or dropped (a stored key in the clear)."""
    if not batch.num_rows:
        return batch
    domains, entities = batch.column("domain").to_pylist(), batch.column("entity").to_pylist()
    new = [_redact_entity(d, e, key) for d, e in zip(domains, entities)]
    if new == entities:
        return batch
    i = batch.schema.get_field_index("entity")
    return batch.set_column(i, batch.schema.field(i), pa.array(new, pa.string()))


_BATCH_FNS: dict[str, Callable[[pa.RecordBatch, bytes], pa.RecordBatch]] = {
    "metadata_log": redact_records, "snapshot_records": redact_records,
    "configs": redact_configs_batch, "image_snapshots": redact_image_batch,
}


def _candidates(name: str, df: DataFrame) -> DataFrame:
    """The rows of ``name`` that can hold credential material (a cheap filter before the count)."""
    if name in RECORD_TABLES:
        return df.where(F.col("api_key").isin(CONFIG, SCRAM))
    if name == "image_snapshots":
        return df.where(F.col("domain").isin("configs", "scram_credentials"))
    return df


def _mapper(name: str, key: bytes, count: bool):  # noqa: ANN202
    fn = _BATCH_FNS[name]

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            out = fn(b, key)
            if count:
                n = 0 if out is b else sum(1 for x, y in zip(b.to_pylist(), out.to_pylist()) if x != y)
                yield pa.RecordBatch.from_pydict({"n": [n]}, schema=pa.schema([("n", pa.int64())]))
            else:
                yield out

    return run


def _drop_history(lake, name: str) -> int:  # noqa: ANN001 - a Lake
    """Checkpoint the table at its head and delete its commit files and checkpoints before it (their
    file statistics may hold values of the replaced files); returns how many went. Local lakes and
    object stores alike (through the table's pyarrow filesystem)."""
    from deltalake import DeltaTable

    loc = Location.of(lake.root).child(name)
    dt = DeltaTable(loc.uri)
    dt.create_checkpoint()
    head = dt.version()
    log_dir = f"{loc.fs_path}/_delta_log"
    removed = 0
    for info in loc.fs.get_file_info(pafs.FileSelector(log_dir)):
        base = info.base_name
        stem = base.split(".", 1)[0]
        if info.type != pafs.FileType.File or not stem.isdigit() or int(stem) >= head:
            continue
        if base.endswith(".json") or ".checkpoint" in base or base.endswith(".crc"):
            loc.fs.delete_file(info.path)
            removed += 1
    return removed


def _pending(root: str, tables: list[str] | None = None) -> list[str]:
    """The tables ``<lake>/_redact_pending.json`` names; with ``tables``, record those (an empty list:
    remove the record) and return them."""
    loc = Location.of(root)
    path = f"{loc.fs_path}/{PENDING_FILE}"
    if tables is None:
        try:
            with loc.fs.open_input_stream(path) as fh:
                return list(json.loads(fh.read().decode("utf-8")).get("tables", []))
        except (FileNotFoundError, OSError, ValueError):
            return []
    if not tables:
        try:
            loc.fs.delete_file(path)
        except (FileNotFoundError, OSError):
            pass
        return []
    tmp = f"{path}.tmp"
    with loc.fs.open_output_stream(tmp) as fh:
        fh.write(json.dumps({"tables": tables}).encode("utf-8"))
    loc.fs.move(tmp, path)
    return tables


def _move_raw(lake) -> int:  # noqa: ANN001 - a Lake
    """Inside the run: ``ingest_quarantine``'s bytes into ``ingest_quarantine_raw`` (created if missing),
    then ``ingest_quarantine`` rewritten without its ``raw`` column; returns the rows whose bytes moved."""
    from pyspark.sql.types import StructType

    q = lake.read(INGEST_QUARANTINE, latest=True)
    raw_table = BRONZE_TABLES[INGEST_QUARANTINE_RAW]
    lake.create_table(raw_table.name, raw_table.schema, partition_by=list(raw_table.partition_by))
    moved = lake.append(INGEST_QUARANTINE_RAW, q.where(F.col(LEGACY_RAW_COLUMN).isNotNull())
                        .select(*QUARANTINE_RAW_SCHEMA.names)).rows
    lake.overwrite(INGEST_QUARANTINE, q.drop(LEGACY_RAW_COLUMN),
                   schema=StructType([f for f in q.schema.fields if f.name != LEGACY_RAW_COLUMN]))
    return int(moved)


def redact_lake(spark, lake, say: Callable[[str], None] = print) -> RedactSummary:  # noqa: ANN001
    """Fingerprint what ``lake`` holds in the clear, and move the bytes of an old ``ingest_quarantine``
    to ``ingest_quarantine_raw`` (the rules of the module docstring)."""
    t0 = time.time()
    run_id = uuid.uuid4().hex[:12]
    key = lake_key(lake.root)
    summary = RedactSummary(run_id)
    tables = [t for t in (*RECORD_TABLES, *SILVER_TABLES) if lake.exists(t)]
    todo: dict[str, int] = {}
    for name in tables:
        df = _candidates(name, lake.read(name))
        n = df.mapInArrow(_mapper(name, key, True), "n long").agg(F.sum("n")).first()[0] or 0
        say(f"redact: {name}: {n:,} row(s) in the clear")
        if n:
            todo[name] = int(n)
    move = has_legacy_raw(lake)
    if move:
        todo[INGEST_QUARANTINE] = lake.read(INGEST_QUARANTINE).where(F.col(LEGACY_RAW_COLUMN).isNotNull()).count()
        say(f"redact: {INGEST_QUARANTINE}: {todo[INGEST_QUARANTINE]:,} row(s) with bytes in its {LEGACY_RAW_COLUMN} column")
    pending = _pending(lake.root)
    if todo:
        from kraft_replay.lake.publish import rollback_line

        written = [*todo, *([INGEST_QUARANTINE_RAW] if move else [])]
        rolled = lake.start_run(run_id, written)
        if rolled:
            say(f"redact: {rollback_line(rolled)}")
        try:
            for name in todo:
                if name == INGEST_QUARANTINE:
                    summary.moved_raw = _move_raw(lake)
                    say(f"redact: {INGEST_QUARANTINE} rewritten without {LEGACY_RAW_COLUMN}; its bytes are in {INGEST_QUARANTINE_RAW}")
                    continue
                df = lake.read(name, latest=True)
                lake.overwrite(name, df.mapInArrow(_mapper(name, key, False), df.schema))
                say(f"redact: {name} rewritten")
            pending = _pending(lake.root, sorted({*pending, *todo}))   # cleaned up below, or by the next run
            summary.published = lake.publish(written, run_id)   # the visibility point: all tables at once
        finally:
            lake.end_run()
        summary.changed = todo
    # vacuum and history clean-up: on the tables rewritten now or by a run killed before its clean-up,
    # and on every table of the list while the lake is not yet recorded as fingerprinted (a lake a
    # run before the pending record rewrote and was killed after its publish is finished here)
    finished = (secrets_state(lake.root) or {}).get("secrets") == FINGERPRINTED
    for name in sorted({*pending, *(() if finished else tables)}):
        if not lake.exists(name):
            continue
        removed = len(lake.vacuum(name, retain_hours=0))
        removed += _drop_history(lake, name)
        summary.removed_files[name] = removed
    _pending(lake.root, [])
    record_secrets(lake.root, run_id, False, "redact")
    summary.seconds = time.time() - t0
    return summary
