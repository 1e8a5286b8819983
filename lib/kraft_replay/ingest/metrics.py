"""Broker metric samples into bronze ``broker_progress`` and ``quorum_replication`` (facts §9).

A broker's metadata cache position is published as the Kafka metrics ``last-applied-record-offset``
and ``last-applied-record-timestamp`` of the MBean ``kafka.server:type=broker-metadata-metrics``
(facts §9.1): the lastContainedOffset of the newest image the broker published and that image's
log time. This module reads them from what users have:

* **Prometheus text exposition** (a JMX exporter's ``/metrics`` page, saved or scraped live): the
  JMX exporter's default names are ``kafka_server_broker_metadata_metrics_last_applied_record_offset``
  and ``..._timestamp``; exporters whose rules rename them are read with a metric map. A sample's
  time is its own timestamp when the line has one, else the scrape time (a file's modification time);
* a Prometheus **``query_range`` JSON** result (``{"status": "success", "data": {"resultType":
  "matrix", "result": [{"metric": {...}, "values": [[t, "v"], ...]}]}}``);
* **CSV** (header row) or **JSON lines** with the bronze columns ``broker_id``, ``observed_at``,
  ``applied_offset``, ``applied_record_time`` (``cluster_id`` optional);
* the text of ``kafka-metadata-quorum describe --replication`` (``NodeId [DirectoryId] LogEndOffset
  Lag LastFetchTimestamp LastCaughtUpTimestamp Status``) and ``describe --status`` (``ClusterId:``,
  ``LeaderId:``, ``LeaderEpoch:``, ``HighWatermark:``, ``MaxFollowerLag:``, ``MaxFollowerLagTimeMs:``,
  ``CurrentVoters:``, ``CurrentObservers:``; the voter and observer lists are ids before Kafka 3.9,
  ``[1,2,3]``, and JSON objects from 3.9 on, ``[{"id": 1, "directoryId": "...", "endpoints":
  ["CONTROLLER://host:9093"]}, ...]``, which may run over several lines), the two blocks in either
  order, each capture optionally preceded by a line holding its capture time. The replication table
  is the **fetch position** of each replica of the metadata log, not the applied image: it goes to
  ``quorum_replication``, never mixed with ``broker_progress``; the status block goes to
  ``quorum_status`` (its ``HighWatermark`` is the committed end of the log, which ``cache_lag`` uses).

Nothing is dropped silently: a line that does not parse, a sample of a broker the cluster never
registered, a sample whose time is before the previous one of the same broker in the same source,
or a value out of range is a :class:`Reject` (source, line, reason code, reason, text) that the
caller writes to ``metrics_quarantine``.

Pure Python on small inputs (a scrape is a few hundred lines); the rows go to the lake as Arrow.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone

import pyarrow as pa

from kraft_replay.ingest.schemas import (
    BROKER_PROGRESS_SCHEMA, METRICS_QUARANTINE_SCHEMA, QUORUM_REPLICATION_SCHEMA, QUORUM_STATUS_SCHEMA, TIMESTAMP,
)

__all__ = [
    "DEFAULT_METRICS", "BROKER_LABELS", "FORMATS", "MetricNames", "Sample", "QuorumRow", "QuorumStatus", "Reject", "Parsed",
    "detect_format", "parse", "parse_prometheus_text", "parse_query_range", "parse_csv", "parse_jsonl",
    "parse_quorum_text", "check_samples", "parse_time", "metric_names", "iso",
]

#: The JMX exporter's default names of the two broker-metadata-metrics attributes (facts §9.1):
#: domain ``kafka.server``, bean property value ``broker-metadata-metrics``, attribute name, every
#: character outside ``[a-zA-Z0-9:_]`` replaced by ``_``.
DEFAULT_METRICS = {
    "offset": "kafka_server_broker_metadata_metrics_last_applied_record_offset",
    "timestamp": "kafka_server_broker_metadata_metrics_last_applied_record_timestamp",
}
#: Labels tried, in order, for the broker id of a Prometheus sample.
BROKER_LABELS = ("broker_id", "broker", "node_id", "nodeId", "kafka_broker_id")
FORMATS = ("prometheus", "query_range", "csv", "jsonl", "quorum")


@dataclass(frozen=True)
class MetricNames:
    """The metric names of the applied offset and applied-record timestamp, and the labels that
    may carry the broker id."""

    offset: str = DEFAULT_METRICS["offset"]
    timestamp: str = DEFAULT_METRICS["timestamp"]
    broker_labels: tuple[str, ...] = BROKER_LABELS


def metric_names(mapping: Sequence[str] = (), broker_label: str | None = None) -> MetricNames:
    """``--metric-map`` entries (``offset=NAME`` / ``timestamp=NAME``) and ``--broker-label``."""
    names = {"offset": DEFAULT_METRICS["offset"], "timestamp": DEFAULT_METRICS["timestamp"]}
    for m in mapping:
        key, sep, value = m.partition("=")
        key = key.strip().lower()
        if not sep or key not in names or not value.strip():
            raise ValueError(f"bad --metric-map {m!r}: use offset=METRIC_NAME or timestamp=METRIC_NAME")
        names[key] = value.strip()
    labels = (broker_label,) if broker_label else BROKER_LABELS
    return MetricNames(names["offset"], names["timestamp"], labels)


@dataclass(frozen=True)
class Sample:
    """One ``broker_progress`` row (times in ms since the epoch)."""

    broker_id: int
    observed_ms: int
    applied_offset: int
    applied_record_ms: int | None
    source: str
    line: int


@dataclass(frozen=True)
class QuorumRow:
    """One replica of one ``describe --replication`` capture (times in ms; None: -1 / unknown)."""

    observed_ms: int
    node_id: int
    directory_id: str | None
    log_end_offset: int
    lag: int
    last_fetch_ms: int | None
    last_caught_up_ms: int | None
    status: str
    source: str
    line: int


@dataclass(frozen=True)
class QuorumStatus:
    """One ``describe --status`` block (times in ms; None where the tool printed -1 or left a line out).
    Voters and observers: ``(id, directory id, endpoints)`` each (directory id and endpoints from 3.9)."""

    observed_ms: int
    reported_cluster_id: str | None
    leader_id: int
    leader_epoch: int
    high_watermark: int | None
    max_follower_lag: int | None
    max_follower_lag_time_ms: int | None
    voters: tuple[tuple[int, str | None, tuple[str, ...]], ...]
    observers: tuple[tuple[int, str | None, tuple[str, ...]], ...] | None
    source: str
    line: int


@dataclass(frozen=True)
class Reject:
    """A line (or sample) not taken, with why."""

    source: str
    line: int
    reason_code: str
    reason: str
    text: str


@dataclass
class Parsed:
    samples: list[Sample] = field(default_factory=list)
    quorum: list[QuorumRow] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)
    status: list[QuorumStatus] = field(default_factory=list)

    def extend(self, other: "Parsed") -> None:
        self.samples.extend(other.samples)
        self.quorum.extend(other.quorum)
        self.rejects.extend(other.rejects)
        self.status.extend(other.status)


# ---------------------------------------------------------------------------------------- times

_DATE_FORMATS = ("%a %b %d %H:%M:%S %Z %Y", "%a %d %b %Y %H:%M:%S %Z", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M:%S.%f")


def parse_time(text: str) -> int | None:
    """Milliseconds since the epoch from ISO 8601 (``Z`` or an offset; naive = UTC), ``date``'s
    default output, or epoch seconds / milliseconds (a number below 1e11 is seconds). None if
    ``text`` is none of these."""
    s = text.strip()
    if not s:
        return None
    try:
        v = float(s)
    except ValueError:
        pass
    else:
        if not math.isfinite(v) or v < 0:
            return None
        return int(round(v * 1000)) if v < 1e11 else int(round(v))
    iso = s[:-1] + "+00:00" if s.endswith(("Z", "z")) else s
    try:
        d = datetime.fromisoformat(iso)
    except ValueError:
        d = None
        for fmt in _DATE_FORMATS:
            try:
                d = datetime.strptime(s, fmt)
                break
            except ValueError:
                continue
        if d is None:
            return None
    if d.tzinfo is None:
        d = d.replace(tzinfo=timezone.utc)
    return int(round(d.timestamp() * 1000))


# ------------------------------------------------------------------------------- format choice


def detect_format(text: str, name: str = "") -> str:
    """One of :data:`FORMATS`, from the name's extension and the first meaningful line."""
    lower = name.lower()
    if lower.endswith(".csv"):
        return "csv"
    if lower.endswith((".jsonl", ".ndjson")):
        return "jsonl"
    head = text.lstrip()
    if head.startswith("{"):
        first = head.split("\n", 1)[0].strip()
        try:
            obj = json.loads(first)
        except ValueError:
            return "query_range"  # a pretty-printed (multi-line) JSON document
        return "query_range" if isinstance(obj, dict) and "data" in obj and "status" in obj else "jsonl"
    for line in text.splitlines():
        t = line.strip()
        if not t:
            continue
        if re.match(r"NodeId\s+", t) or _STATUS_LINE.match(t):
            return "quorum"  # either block of a kafka-metadata-quorum capture
        if t.startswith("#"):
            return "prometheus"
        if "," in t and "broker_id" in t and "{" not in t:
            return "csv"
        if parse_time(t) is not None:
            continue  # a capture-time line before a quorum table
        return "prometheus"
    return "prometheus"


# ---------------------------------------------------------------------------------- Prometheus

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(rf"^({_NAME})(\{{.*\}})?\s+(\S+)(?:\s+(-?\d+))?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')


def _labels(body: str) -> dict[str, str] | None:
    """The labels of ``{a="x",b="y"}`` (escapes ``\\\\``, ``\\"``, ``\\n`` undone); None if malformed."""
    inner = body[1:-1]
    out: dict[str, str] = {}
    pos = 0
    while pos < len(inner):
        m = _LABEL.match(inner, pos)
        if m is None:
            return None if inner[pos:].strip() else out
        out[m.group(1)] = re.sub(r"\\(.)", lambda x: "\n" if x.group(1) == "n" else x.group(1), m.group(2))
        pos = m.end()
    return out


def _number(text: str) -> float | None:
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def _broker_of(labels: dict[str, str], names: MetricNames, default: int | None) -> tuple[int | None, str | None]:
    for lab in names.broker_labels:
        if lab in labels:
            try:
                return int(labels[lab]), None
            except ValueError:
                return None, f"label {lab}={labels[lab]!r} is not a broker id"
    if default is not None:
        return default, None
    return None, (f"no broker id: none of the labels {', '.join(names.broker_labels)} and no --broker-id")


class _Pairs:
    """Offset and timestamp values gathered per (broker, time), in first-seen order."""

    def __init__(self) -> None:
        self.rows: dict[tuple[int, int], dict[str, object]] = {}

    def put(self, broker: int, t: int, kind: str, value: float, line: int) -> None:
        r = self.rows.setdefault((broker, t), {"line": line})
        r[kind] = value
        r.setdefault(kind + "_line", line)

    def samples(self, source: str, out: Parsed) -> None:
        for (broker, t), r in self.rows.items():
            line = int(r["line"])  # type: ignore[arg-type]
            if "offset" not in r:
                out.rejects.append(Reject(source, line, "MISSING_OFFSET", f"broker {broker}: a timestamp sample "
                                          "without the applied offset at the same time", ""))
                continue
            off = float(r["offset"])  # type: ignore[arg-type]
            if off != int(off) or off < -1:
                out.rejects.append(Reject(source, int(r["offset_line"]), "BAD_VALUE",  # type: ignore[arg-type]
                                          f"applied offset {off!r} is not an integer >= -1", ""))
                continue
            ts = r.get("timestamp")
            rec = None if ts is None or int(off) < 0 or float(ts) < 0 else int(float(ts))  # type: ignore[arg-type]
            out.samples.append(Sample(broker, t, int(off), rec, source, line))


def parse_prometheus_text(text: str, source: str, observed_ms: int, names: MetricNames = MetricNames(),
                          broker_id: int | None = None) -> Parsed:
    """The samples of one scrape in Prometheus text exposition. ``observed_ms``: the scrape time,
    used for samples without their own timestamp; ``broker_id``: the broker of samples with no
    broker label (a scrape of one broker's exporter). Other metrics are ignored; a line that is not
    a comment, blank or a sample is rejected."""
    out = Parsed()
    pairs = _Pairs()
    wanted = {names.offset: "offset", names.timestamp: "timestamp"}
    for i, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        labels = _labels(m.group(2)) if m and m.group(2) else {}
        if m is None or labels is None:
            out.rejects.append(Reject(source, i, "UNPARSEABLE", "not a Prometheus sample line", raw[:500]))
            continue
        try:
            value = float(m.group(3))  # any sample's value is a float (NaN and ±Inf included)
        except ValueError:
            out.rejects.append(Reject(source, i, "UNPARSEABLE", f"not a Prometheus sample line (value {m.group(3)!r})", raw[:500]))
            continue
        kind = wanted.get(m.group(1))
        if kind is None:
            continue
        if not math.isfinite(value):
            out.rejects.append(Reject(source, i, "BAD_VALUE", f"value {m.group(3)!r} is not a finite number", raw[:500]))
            continue
        broker, why = _broker_of(labels, names, broker_id)
        if broker is None:
            out.rejects.append(Reject(source, i, "NO_BROKER_ID", why or "", raw[:500]))
            continue
        t = int(m.group(4)) if m.group(4) else observed_ms
        pairs.put(broker, t, kind, value, i)
    pairs.samples(source, out)
    return out


def parse_query_range(text: str, source: str, names: MetricNames = MetricNames(),
                      broker_id: int | None = None) -> Parsed:
    """The samples of a Prometheus ``query_range`` (or instant ``query``) JSON result holding the
    offset and/or timestamp series; each series' ``__name__`` label (or, for a single-metric
    result without it, the offset) says which."""
    out = Parsed()
    try:
        doc = json.loads(text)
    except ValueError as e:
        out.rejects.append(Reject(source, 1, "UNPARSEABLE", f"not JSON: {e}", text[:500]))
        return out
    data = doc.get("data") if isinstance(doc, dict) else None
    result = data.get("result") if isinstance(data, dict) else None
    if not isinstance(result, list):
        status = doc.get("status") if isinstance(doc, dict) else None
        out.rejects.append(Reject(source, 1, "UNPARSEABLE", f"not a Prometheus query result (status {status!r}, "
                                  "no data.result list)", text[:500]))
        return out
    pairs = _Pairs()
    for k, series in enumerate(result, 1):
        metric = series.get("metric", {}) if isinstance(series, dict) else None
        points = (series.get("values") or ([series["value"]] if "value" in series else None)) if isinstance(series, dict) else None
        if not isinstance(metric, dict) or not isinstance(points, list):
            out.rejects.append(Reject(source, k, "UNPARSEABLE", f"series {k}: no metric labels or values", json.dumps(series)[:500]))
            continue
        name = metric.get("__name__")
        kind = {names.offset: "offset", names.timestamp: "timestamp"}.get(name) if name else "offset"
        if kind is None:
            continue
        broker, why = _broker_of({str(a): str(b) for a, b in metric.items()}, names, broker_id)
        if broker is None:
            out.rejects.append(Reject(source, k, "NO_BROKER_ID", f"series {k}: {why}", json.dumps(metric)[:500]))
            continue
        for p in points:
            ok = isinstance(p, list) and len(p) == 2
            t = _number(str(p[0])) if ok else None
            v = _number(str(p[1])) if ok else None
            if t is None or v is None:
                out.rejects.append(Reject(source, k, "BAD_VALUE", f"series {k}: point {p!r} is not [time, value]", json.dumps(p)[:500]))
                continue
            pairs.put(broker, int(round(t * 1000)), kind, v, k)
    pairs.samples(source, out)
    return out


# --------------------------------------------------------------------------------- CSV / JSONL

_COLUMNS = ("broker_id", "observed_at", "applied_offset", "applied_record_time")


def _row_sample(row: dict[str, object], source: str, line: int, cluster_id: str, out: Parsed, text: str) -> None:
    missing = [c for c in ("broker_id", "observed_at", "applied_offset") if row.get(c) in (None, "")]
    if missing:
        out.rejects.append(Reject(source, line, "UNPARSEABLE", f"missing {', '.join(missing)}", text[:500]))
        return
    cid = row.get("cluster_id")
    if cid not in (None, "") and str(cid) != cluster_id:
        out.rejects.append(Reject(source, line, "OTHER_CLUSTER", f"cluster_id {cid} is not {cluster_id}", text[:500]))
        return
    try:
        broker = int(str(row["broker_id"]))
        off = int(str(row["applied_offset"]))
    except ValueError:
        out.rejects.append(Reject(source, line, "BAD_VALUE", "broker_id and applied_offset must be integers", text[:500]))
        return
    t = parse_time(str(row["observed_at"]))
    rt_text = row.get("applied_record_time")
    rt = None if rt_text in (None, "") else parse_time(str(rt_text))
    if t is None or (rt_text not in (None, "") and rt is None):
        out.rejects.append(Reject(source, line, "BAD_VALUE", "observed_at / applied_record_time is not a time", text[:500]))
        return
    if off < -1:
        out.rejects.append(Reject(source, line, "BAD_VALUE", f"applied offset {off} is below -1", text[:500]))
        return
    out.samples.append(Sample(broker, t, off, None if off < 0 else rt, source, line))


def parse_csv(text: str, source: str, cluster_id: str) -> Parsed:
    """Samples from CSV with a header naming the bronze columns."""
    out = Parsed()
    lines = text.splitlines()
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames is None or "broker_id" not in reader.fieldnames:
        out.rejects.append(Reject(source, 1, "UNPARSEABLE", f"no header with the columns {', '.join(_COLUMNS)}",
                                  lines[0][:500] if lines else ""))
        return out
    for row in reader:
        n = reader.line_num
        if None in row or any(v is None for v in row.values()):
            out.rejects.append(Reject(source, n, "UNPARSEABLE", "wrong number of fields", lines[n - 1][:500] if n <= len(lines) else ""))
            continue
        _row_sample(row, source, n, cluster_id, out, lines[n - 1] if n <= len(lines) else "")
    return out


def parse_jsonl(text: str, source: str, cluster_id: str) -> Parsed:
    """Samples from JSON lines, one object with the bronze columns per line."""
    out = Parsed()
    for i, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError as e:
            out.rejects.append(Reject(source, i, "UNPARSEABLE", f"not JSON: {e}", raw[:500]))
            continue
        if not isinstance(obj, dict):
            out.rejects.append(Reject(source, i, "UNPARSEABLE", "not a JSON object", raw[:500]))
            continue
        _row_sample(obj, source, i, cluster_id, out, raw)
    return out


# --------------------------------------------------------------------------- quorum describe

_AGO = re.compile(r"^(\d+)\s*ms\s+ago$")


def _quorum_time(text: str, observed_ms: int) -> tuple[bool, int | None]:
    """(ok, ms) of a LastFetchTimestamp / LastCaughtUpTimestamp cell: epoch ms, -1 (unknown) or
    ``--human-readable``'s ``N ms ago``."""
    t = text.strip()
    if t in ("-1", "", "N/A"):
        return True, None
    m = _AGO.match(t)
    if m:
        return True, observed_ms - int(m.group(1))
    if re.fullmatch(r"\d+", t):
        return True, int(t)
    return False, None


#: the keys of a ``describe --status`` block, in the order Kafka prints them
STATUS_KEYS = ("ClusterId", "LeaderId", "LeaderEpoch", "HighWatermark", "MaxFollowerLag", "MaxFollowerLagTimeMs",
               "CurrentVoters", "CurrentObservers")
_STATUS_LINE = re.compile(r"^(" + "|".join(STATUS_KEYS) + r"):\s*(.*)$")
_STATUS_NEEDS = ("LeaderId", "LeaderEpoch", "HighWatermark")


def _replicas(value: str) -> tuple[tuple[int, str | None, tuple[str, ...]], ...] | None:
    """``CurrentVoters`` / ``CurrentObservers``: ``[1,2,3]`` (before Kafka 3.9) or a JSON list of
    ``{"id", "directoryId", "endpoints"}`` objects (3.9 on); None when it is neither."""
    try:
        items = json.loads(value)
    except ValueError:
        return None
    if not isinstance(items, list):
        return None
    out = []
    for it in items:
        if isinstance(it, int) and not isinstance(it, bool):
            out.append((it, None, ()))
        elif isinstance(it, dict) and isinstance(it.get("id"), int):
            d = it.get("directoryId")
            eps = it.get("endpoints") or []
            if (d is not None and not isinstance(d, str)) or not isinstance(eps, list) or not all(isinstance(e, str) for e in eps):
                return None
            out.append((it["id"], d, tuple(eps)))
        else:
            return None
    return tuple(out)


class _StatusBlock:
    """The lines of one ``describe --status`` block, gathered until the block ends."""

    def __init__(self, observed: int, line: int) -> None:
        self.observed, self.line = observed, line
        self.values: dict[str, str] = {}
        self.lines: dict[str, int] = {}
        self.open: str | None = None   # a voter / observer list still running over the next lines

    def add(self, key: str, value: str, line: int) -> None:
        self.values[key], self.lines[key] = value, line
        self.open = key if key in ("CurrentVoters", "CurrentObservers") and _replicas(value) is None else None

    def cont(self, text: str) -> bool:
        """Take ``text`` as the next line of an open voter / observer list (Kafka's docs print them
        wrapped, one voter object per line)."""
        if self.open is None or not text.startswith("{"):
            return False
        self.values[self.open] += " " + text
        if _replicas(self.values[self.open]) is not None:
            self.open = None
        return True

    def finish(self, source: str, cluster_id: str | None, out: Parsed) -> None:
        v = self.values
        missing = [k for k in _STATUS_NEEDS if k not in v]
        if missing:
            out.rejects.append(Reject(source, self.line, "UNPARSEABLE", f"a --status block without {', '.join(missing)}",
                                      " ".join(f"{k}: {x}" for k, x in v.items())[:500]))
            return
        reported = v.get("ClusterId") or None
        if cluster_id is not None and reported is not None and reported != cluster_id:
            out.rejects.append(Reject(source, self.lines["ClusterId"], "OTHER_CLUSTER",
                                      f"the capture's ClusterId {reported} is not {cluster_id}", f"ClusterId: {reported}"))
            return
        nums: dict[str, int | None] = {}
        for k in ("LeaderId", "LeaderEpoch", "HighWatermark", "MaxFollowerLag", "MaxFollowerLagTimeMs"):
            if k not in v:
                nums[k] = None
                continue
            try:
                nums[k] = int(v[k])
            except ValueError:
                out.rejects.append(Reject(source, self.lines[k], "BAD_VALUE", f"{k} {v[k]!r} is not an integer", f"{k}: {v[k]}"[:500]))
                return
        lists = {}
        for k in ("CurrentVoters", "CurrentObservers"):
            lists[k] = None if k not in v else _replicas(v[k])
            if k in v and lists[k] is None:
                out.rejects.append(Reject(source, self.lines[k], "BAD_VALUE", f"{k} is neither a list of ids nor of "
                                          "voter objects", f"{k}: {v[k]}"[:500]))
                return
        unknown = lambda x: None if x is None or x < 0 else x  # noqa: E731 - the tool prints -1 for unknown
        out.status.append(QuorumStatus(self.observed, reported, nums["LeaderId"], nums["LeaderEpoch"],
                                       unknown(nums["HighWatermark"]), nums["MaxFollowerLag"],
                                       unknown(nums["MaxFollowerLagTimeMs"]), lists["CurrentVoters"] or (),
                                       lists["CurrentObservers"], source, self.line))


def parse_quorum_text(text: str, source: str, default_ms: int, cluster_id: str | None = None) -> Parsed:
    """The ``kafka-metadata-quorum describe --replication`` tables (replicas: ``quorum_replication``)
    and ``describe --status`` blocks (``quorum_status``) of captures, in any order. A line that is a
    time (ISO 8601, ``date`` output, epoch s/ms) gives the capture time of the blocks after it;
    otherwise ``default_ms`` (the file's modification time). A status block naming another
    ``ClusterId`` than ``cluster_id`` is ``OTHER_CLUSTER``; a second, different row of a replica (or
    status block) at one capture time of the source is ``DUPLICATE_SAMPLE`` (an identical one is the
    same row)."""
    out = Parsed()
    observed = default_ms
    header: list[str] | None = None
    status: _StatusBlock | None = None
    seen: dict[tuple, object] = {}

    def end_status() -> None:
        nonlocal status
        if status is not None:
            status.finish(source, cluster_id, out)
            status = None

    lines = text.splitlines()
    for i, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line:
            continue
        m = _STATUS_LINE.match(line)
        if m:
            header = None
            if status is None or m.group(1) in status.values:  # a new block
                end_status()
                status = _StatusBlock(observed, i)
            status.add(m.group(1), m.group(2).strip(), i)
            continue
        if status is not None and status.cont(line):
            continue
        end_status()
        if re.match(r"NodeId\s", line):
            header = line.split()
            if not {"LogEndOffset", "Lag", "LastFetchTimestamp", "LastCaughtUpTimestamp", "Status"} <= set(header):
                out.rejects.append(Reject(source, i, "UNPARSEABLE", "a NodeId header without the --replication columns", raw[:500]))
                header = None
            continue
        t = parse_time(line)
        if t is not None and not re.fullmatch(r"-?\d+\s+.*", line):
            observed, header = t, None
            continue
        if header is None:
            out.rejects.append(Reject(source, i, "UNPARSEABLE", "not a capture time, header or replica row", raw[:500]))
            continue
        cells = _split_quorum_row(line, header)
        if cells is None:
            out.rejects.append(Reject(source, i, "UNPARSEABLE", f"expected {len(header)} columns ({' '.join(header)})", raw[:500]))
            continue
        try:
            node, leo, lag = int(cells["NodeId"]), int(cells["LogEndOffset"]), int(cells["Lag"])
        except ValueError:
            out.rejects.append(Reject(source, i, "BAD_VALUE", "NodeId, LogEndOffset and Lag must be integers", raw[:500]))
            continue
        ok1, fetch = _quorum_time(cells["LastFetchTimestamp"], observed)
        ok2, caught = _quorum_time(cells["LastCaughtUpTimestamp"], observed)
        if not (ok1 and ok2):
            out.rejects.append(Reject(source, i, "BAD_VALUE", "LastFetchTimestamp / LastCaughtUpTimestamp is not a time", raw[:500]))
            continue
        row = QuorumRow(observed, node, cells.get("DirectoryId"), leo, lag, fetch, caught, cells["Status"], source, i)
        same = seen.get(("r", observed, node))
        if same is not None:
            if same != (row.directory_id, leo, lag, fetch, caught, row.status):
                out.rejects.append(Reject(source, i, "DUPLICATE_SAMPLE", f"node {node}: a second, different replica row "
                                          f"at {iso(observed)}", raw[:500]))
            continue
        seen[("r", observed, node)] = (row.directory_id, leo, lag, fetch, caught, row.status)
        out.quorum.append(row)
    end_status()
    # one status row per capture time (the table's key): a second, different block at one time is a duplicate
    kept: dict[int, QuorumStatus] = {}
    for st in out.status:
        first = kept.get(st.observed_ms)
        if first is None:
            kept[st.observed_ms] = st
        elif _status_values(first) != _status_values(st):
            out.rejects.append(Reject(source, st.line, "DUPLICATE_SAMPLE",
                                      f"a second, different --status block at {iso(st.observed_ms)}", ""))
    out.status = list(kept.values())
    return out


def _status_values(st: QuorumStatus) -> tuple:
    return (st.reported_cluster_id, st.leader_id, st.leader_epoch, st.high_watermark, st.max_follower_lag,
            st.max_follower_lag_time_ms, st.voters, st.observers)


def _split_quorum_row(line: str, header: list[str]) -> dict[str, str] | None:
    """Cells of a replica row: ``N ms ago`` cells are three tokens and the Status (last) may be
    several words (``Observer (Voter)``...)."""
    tokens = line.split()
    cells: dict[str, str] = {}
    k = 0
    for j, col in enumerate(header):
        if k >= len(tokens):
            return None
        if j == len(header) - 1:
            cells[col] = " ".join(tokens[k:])
            return cells
        if col in ("LastFetchTimestamp", "LastCaughtUpTimestamp") and k + 2 < len(tokens) and tokens[k + 1] == "ms" and tokens[k + 2] == "ago":
            cells[col] = " ".join(tokens[k:k + 3])
            k += 3
        else:
            cells[col] = tokens[k]
            k += 1
    return cells


# ------------------------------------------------------------------------------------- checks


def parse(text: str, source: str, fmt: str, *, cluster_id: str, observed_ms: int,
          names: MetricNames = MetricNames(), broker_id: int | None = None) -> Parsed:
    """Dispatch on ``fmt`` (one of :data:`FORMATS`)."""
    if fmt == "prometheus":
        return parse_prometheus_text(text, source, observed_ms, names, broker_id)
    if fmt == "query_range":
        return parse_query_range(text, source, names, broker_id)
    if fmt == "csv":
        return parse_csv(text, source, cluster_id)
    if fmt == "jsonl":
        return parse_jsonl(text, source, cluster_id)
    if fmt == "quorum":
        return parse_quorum_text(text, source, observed_ms, cluster_id)
    raise ValueError(f"unknown format {fmt!r}: one of {', '.join(FORMATS)}")


def check_samples(samples: Iterable[Sample], known_brokers: set[int] | None,
                  last_seen: dict[tuple[str, int], int] | None = None,
                  series: Callable[[str], str] = lambda source: source) -> tuple[list[Sample], list[Reject]]:
    """Samples kept and rejected: a broker the cluster never registered (``known_brokers``; None =
    not checked) is ``UNKNOWN_BROKER``; a sample observed before the previous sample of the same
    broker from the same source (in the source's order; ``last_seen`` carries it across polls of a
    live endpoint) is ``TIME_BACKWARDS``. A second sample of a broker at the same time in one
    source is ``DUPLICATE_SAMPLE`` unless it is identical. Applied offsets may go down (a restart
    loads a snapshot). ``series``: the source a sample's order is checked within (the endpoint of
    one scrape of a live endpoint)."""
    seen = last_seen if last_seen is not None else {}
    kept: list[Sample] = []
    rejects: list[Reject] = []
    at: dict[tuple[str, int, int], Sample] = {}
    for s in samples:
        if known_brokers is not None and s.broker_id not in known_brokers:
            rejects.append(Reject(s.source, s.line, "UNKNOWN_BROKER",
                                  f"broker {s.broker_id} is not registered in this cluster's log", _text(s)))
            continue
        key = (series(s.source), s.broker_id)
        prev = seen.get(key)
        if prev is not None and s.observed_ms < prev:
            rejects.append(Reject(s.source, s.line, "TIME_BACKWARDS",
                                  f"broker {s.broker_id}: sample at {iso(s.observed_ms)} is before the previous one "
                                  f"({iso(prev)})", _text(s)))
            continue
        same = at.get((s.source, s.broker_id, s.observed_ms))
        if same is not None:
            if (same.applied_offset, same.applied_record_ms) != (s.applied_offset, s.applied_record_ms):
                rejects.append(Reject(s.source, s.line, "DUPLICATE_SAMPLE",
                                      f"broker {s.broker_id}: a second, different sample at {iso(s.observed_ms)}", _text(s)))
            continue
        at[(s.source, s.broker_id, s.observed_ms)] = s
        seen[key] = s.observed_ms
        kept.append(s)
    return kept, rejects


def iso(ms: int) -> str:
    """ISO 8601 UTC with milliseconds."""
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _text(s: Sample) -> str:
    return (f"broker_id={s.broker_id} observed_at={iso(s.observed_ms)} applied_offset={s.applied_offset}"
            + (f" applied_record_time={iso(s.applied_record_ms)}" if s.applied_record_ms is not None else ""))


# ---------------------------------------------------------------------------------- to Arrow


def _ts(values: list[int | None]) -> pa.Array:
    """Milliseconds since the epoch as the bronze timestamp type (microseconds, UTC)."""
    return pa.array([None if v is None else v * 1000 for v in values], pa.int64()).cast(TIMESTAMP)


def samples_table(cluster_id: str, samples: Sequence[Sample]) -> pa.Table:
    return pa.Table.from_arrays([
        pa.array([cluster_id] * len(samples), pa.string()),
        pa.array([s.broker_id for s in samples], pa.int32()),
        _ts([s.observed_ms for s in samples]),
        pa.array([s.applied_offset for s in samples], pa.int64()),
        _ts([s.applied_record_ms for s in samples]),
    ], schema=BROKER_PROGRESS_SCHEMA)


def quorum_table(cluster_id: str, rows: Sequence[QuorumRow]) -> pa.Table:
    return pa.Table.from_arrays([
        pa.array([cluster_id] * len(rows), pa.string()),
        _ts([r.observed_ms for r in rows]),
        pa.array([r.node_id for r in rows], pa.int32()),
        pa.array([r.directory_id for r in rows], pa.string()),
        pa.array([r.log_end_offset for r in rows], pa.int64()),
        pa.array([r.lag for r in rows], pa.int64()),
        _ts([r.last_fetch_ms for r in rows]),
        _ts([r.last_caught_up_ms for r in rows]),
        pa.array([r.status for r in rows], pa.string()),
        pa.array([r.source for r in rows], pa.string()),
    ], schema=QUORUM_REPLICATION_SCHEMA)


def _replica_list(items: tuple | None) -> list[dict] | None:
    return None if items is None else [{"id": i, "directory_id": d, "endpoints": list(e)} for i, d, e in items]


def status_table(cluster_id: str, rows: Sequence[QuorumStatus]) -> pa.Table:
    return pa.Table.from_arrays([
        pa.array([cluster_id] * len(rows), pa.string()),
        _ts([r.observed_ms for r in rows]),
        pa.array([r.reported_cluster_id for r in rows], pa.string()),
        pa.array([r.leader_id for r in rows], pa.int32()),
        pa.array([r.leader_epoch for r in rows], pa.int64()),
        pa.array([r.high_watermark for r in rows], pa.int64()),
        pa.array([r.max_follower_lag for r in rows], pa.int64()),
        pa.array([r.max_follower_lag_time_ms for r in rows], pa.int64()),
        pa.array([_replica_list(r.voters) for r in rows], QUORUM_STATUS_SCHEMA.field("current_voters").type),
        pa.array([_replica_list(r.observers) for r in rows], QUORUM_STATUS_SCHEMA.field("current_observers").type),
        pa.array([r.source for r in rows], pa.string()),
    ], schema=QUORUM_STATUS_SCHEMA)


def rejects_table(cluster_id: str, rejects: Sequence[Reject], ingested_ms: int) -> pa.Table:
    return pa.Table.from_arrays([
        pa.array([cluster_id] * len(rejects), pa.string()),
        pa.array([r.source for r in rejects], pa.string()),
        pa.array([r.line for r in rejects], pa.int64()),
        pa.array([r.reason_code for r in rejects], pa.string()),
        pa.array([r.reason for r in rejects], pa.string()),
        pa.array([r.text for r in rejects], pa.string()),
        _ts([ingested_ms] * len(rejects)),
    ], schema=METRICS_QUARANTINE_SCHEMA)
