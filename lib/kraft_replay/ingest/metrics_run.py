"""``kraft-replay ingest-metrics``: metric files and live endpoints into ``broker_progress``,
``quorum_replication``, ``quorum_status`` and ``metrics_quarantine`` (parsing in
:mod:`kraft_replay.ingest.metrics`).

No Spark job: the lake is read and written on the driver (delta-rs, pyarrow). Every poll is one run
of the lake (``Lake.start_run`` … ``Lake.publish``): its rows become visible together or not at
all, and a killed run is rolled back by the next. Rows are merged on their keys
(``Lake.merge_arrow``; ``broker_progress``: cluster, broker, observed time; ``quorum_replication``:
cluster, observed time, node; ``quorum_status``: cluster, observed time; ``metrics_quarantine``:
cluster, source, line, reason), so ingesting a file twice adds nothing; a live scrape's new samples
touch no file already written (an append). Sample times come from the samples (Prometheus timestamps, query_range points, the CSV/JSON
columns, a capture-time line before a quorum table), else from the scrape: a file's modification
time, an endpoint's fetch time.
"""

from __future__ import annotations

import glob
import os
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from kraft_replay.codec.schema import RECORD_TYPES_BY_NAME
from kraft_replay.ingest import metrics as M
from kraft_replay.ingest.errors import IngestError
from kraft_replay.ingest.schemas import METRICS_TABLES
from kraft_replay.ingest.tables import METRICS_BRONZE_TABLES, ensure_bronze_tables

__all__ = ["MetricsSummary", "resolve_sources", "known_brokers", "ingest_metrics", "read_source"]

REGISTER_BROKER = RECORD_TYPES_BY_NAME["RegisterBrokerRecord"].api_key


@dataclass
class MetricsSummary:
    cluster_id: str
    polls: int = 0
    samples: int = 0
    quorum_rows: int = 0
    status_rows: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    brokers_checked: bool = True
    published: dict[str, int] = field(default_factory=dict)

    def lines(self) -> list[str]:
        rej = sum(self.rejected.values())
        out = [f"ingest-metrics {self.cluster_id}: {self.polls} poll(s), {self.samples} broker_progress sample(s), "
               f"{self.quorum_rows} quorum_replication row(s), {self.status_rows} quorum_status row(s), {rej} quarantined"
               + (" (" + ", ".join(f"{k} {v}" for k, v in sorted(self.rejected.items())) + ")" if rej else "")]
        if not self.brokers_checked:
            out.append("  broker ids not checked: the lake holds no broker registration of this cluster (ingest its log first)")
        if rej:
            out.append("  quarantined lines: SELECT * FROM metrics_quarantine (source, line, reason_code, reason)")
        return out


def resolve_sources(items: list[str]) -> list[str]:
    """URLs as given; files, directories (their files, sorted) and globs expanded. A missing path or
    a glob matching nothing is an :class:`IngestError`."""
    out: list[str] = []
    for it in items:
        if it.startswith(("http://", "https://")):
            out.append(it)
            continue
        matches = sorted(glob.glob(it)) if any(c in it for c in "*?[") else [it]
        if not matches:
            raise IngestError(f"ingest-metrics: {it!r} matches no file")
        for m in matches:
            p = Path(m)
            if p.is_dir():
                files = sorted(str(f) for f in p.iterdir() if f.is_file() and not f.name.startswith("."))
                if not files:
                    raise IngestError(f"ingest-metrics: directory {m} holds no file")
                out.extend(files)
            elif p.is_file():
                out.append(str(p))
            else:
                raise IngestError(f"ingest-metrics: no such file or directory: {m}")
    return out


def read_source(src: str, timeout: float = 10.0) -> tuple[str, int]:
    """(text, scrape time in ms) of a file (its modification time) or a URL (now)."""
    if src.startswith(("http://", "https://")):
        t = int(time.time() * 1000)
        try:
            with urllib.request.urlopen(src, timeout=timeout) as r:  # noqa: S310 - user-given metrics endpoint
                return r.read().decode("utf-8", errors="replace"), t
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise IngestError(f"ingest-metrics: cannot scrape {src}: {getattr(e, 'reason', e)}") from e
    try:
        data = Path(src).read_bytes()
        return data.decode("utf-8", errors="replace"), int(os.stat(src).st_mtime * 1000)
    except OSError as e:
        raise IngestError(f"ingest-metrics: cannot read {src}: {e.strerror or e}") from e


def known_brokers(lake, cluster_id: str) -> set[int] | None:  # noqa: ANN001 - kraft_replay.lake.Lake
    """Broker ids registered in the cluster's bronze log or snapshots; None if it has none (read on the
    driver: the cluster's partition, the registration rows)."""
    import pyarrow.compute as pc

    ids: set[int] = set()
    for t in ("metadata_log", "snapshot_records"):
        if not lake.exists(t) or "register_broker" not in lake.schema(t).fieldNames():
            continue
        rows = lake.read_arrow(t, ["register_broker"], partitions=[("cluster_id", "=", cluster_id)],
                               filter=pc.field("api_key") == REGISTER_BROKER)
        ids.update(b for b in pc.struct_field(rows.column("register_broker"), "broker_id").to_pylist() if b is not None)
    return ids or None


def lake_clusters(lake) -> list[str]:  # noqa: ANN001 - kraft_replay.lake.Lake
    """The cluster ids of the lake's ``metadata_log`` (none when it has none): its partitions."""
    if not lake.exists("metadata_log"):
        return []
    return sorted({p["cluster_id"] for p in lake.partitions("metadata_log") if p.get("cluster_id") is not None})


def _write(lake, tables: dict[str, pa.Table], run_id: str) -> dict[str, int]:  # noqa: ANN001
    """One run: merge each non-empty table on its keys (on the driver), then publish them all together."""
    names = list(METRICS_TABLES)
    lake.start_run(run_id, names)
    try:
        for name, tab in tables.items():
            if tab.num_rows == 0:
                continue
            _schema, keys = METRICS_TABLES[name]
            lake.merge_arrow(name, tab, keys)
        return lake.publish(names, run_id)
    except BaseException:
        lake.end_run()
        raise


def _series(source: str) -> str:
    """The endpoint of one scrape's source label (``URL@time``); a file's path as it is."""
    return source.rsplit("@", 1)[0] if source.startswith(("http://", "https://")) else source


def ingest_metrics(lake, sources: list[str], cluster_id: str, *, fmt: str | None = None,  # noqa: ANN001
                   names: M.MetricNames = M.MetricNames(), broker_id: int | None = None, follow: bool = False,
                   interval: float = 1.0, polls: int | None = None, say: Callable[[str], None] = lambda s: None,
                   ) -> MetricsSummary:
    """Read ``sources`` (files, directories, globs, ``http(s)://`` endpoints) once, or with
    ``follow`` every ``interval`` seconds (endpoints scraped again, files re-read when their
    modification time changes) until interrupted or ``polls`` polls. Returns the summary. ``lake``
    may be opened driver only (``Lake(root, None)``): no Spark is used."""
    if fmt is not None and fmt not in M.FORMATS:
        raise IngestError(f"ingest-metrics: unknown --format {fmt!r}: one of {', '.join(M.FORMATS)}")
    if interval <= 0:
        raise IngestError(f"ingest-metrics: --interval must be > 0, got {interval}")
    srcs = resolve_sources(sources)
    ensure_bronze_tables(lake, METRICS_BRONZE_TABLES.values())
    known = known_brokers(lake, cluster_id)
    summary = MetricsSummary(cluster_id, brokers_checked=known is not None)
    last_seen: dict[tuple[str, int], int] = {}
    mtimes: dict[str, int] = {}
    sent: set[tuple] = set()  # what earlier polls took: a re-read file's old lines are not new
    n = 0
    while True:
        started = time.monotonic()
        parsed = M.Parsed()
        for src in srcs:
            try:
                text, scraped = read_source(src)
            except IngestError as e:
                if not follow:
                    raise
                say(f"  {e} (retrying next poll)")
                continue
            if not src.startswith(("http://", "https://")):
                if mtimes.get(src) == scraped:
                    continue  # unchanged since the last poll
                mtimes[src] = scraped
                # a modified file is read whole again: its order is checked afresh (the merge keeps
                # the samples already ingested once)
                for key in [k for k in last_seen if k[0] == src]:
                    del last_seen[key]
            # a scrape of an endpoint is its own source (lines of different scrapes are different lines)
            label = f"{src}@{M.iso(scraped)}" if src.startswith(("http://", "https://")) else src
            kind = fmt or M.detect_format(text, src)
            parsed.extend(M.parse(text, label, kind, cluster_id=cluster_id, observed_ms=scraped, names=names,
                                  broker_id=broker_id))
        kept, rejects = M.check_samples(parsed.samples, known, last_seen, series=_series)
        kept = [k for k in kept if (k.source, k.broker_id, k.observed_ms) not in sent]  # a re-read file's old lines
        sent.update((k.source, k.broker_id, k.observed_ms) for k in kept)
        rejects = [r for r in parsed.rejects + rejects if ("r", r.source, r.line, r.reason_code) not in sent]
        sent.update(("r", r.source, r.line, r.reason_code) for r in rejects)
        parsed.quorum = [q for q in parsed.quorum if ("q", q.source, q.observed_ms, q.node_id) not in sent]
        sent.update(("q", q.source, q.observed_ms, q.node_id) for q in parsed.quorum)
        parsed.status = [q for q in parsed.status if ("s", q.source, q.observed_ms) not in sent]
        sent.update(("s", q.source, q.observed_ms) for q in parsed.status)
        n += 1
        if kept or parsed.quorum or parsed.status or rejects:
            now = int(time.time() * 1000)
            tables = {"broker_progress": M.samples_table(cluster_id, kept),
                      "quorum_replication": M.quorum_table(cluster_id, parsed.quorum),
                      "quorum_status": M.status_table(cluster_id, parsed.status),
                      "metrics_quarantine": M.rejects_table(cluster_id, rejects, now)}
            summary.published = _write(lake, tables, f"metrics-{uuid.uuid4().hex[:12]}")
        summary.polls = n
        summary.samples += len(kept)
        summary.quorum_rows += len(parsed.quorum)
        summary.status_rows += len(parsed.status)
        for r in rejects:
            summary.rejected[r.reason_code] = summary.rejected.get(r.reason_code, 0) + 1
        if follow:
            say(f"  poll {n}: {len(kept)} sample(s), {len(parsed.quorum) + len(parsed.status)} quorum row(s), "
                f"{len(rejects)} quarantined")
        if not follow or (polls is not None and n >= polls):
            return summary
        time.sleep(max(0.0, interval - (time.monotonic() - started)))
