"""``/metrics`` on the dashboard's server: each broker's metadata cache as Prometheus gauges, so the
alerting people already run (Prometheus, Alertmanager, Grafana) can page on stale caches.

The figures are those of each (cluster, broker)'s newest ``cache_lag`` bucket, read through the
dashboard's :class:`~kraft_replay.lake.reader.LakeReader` (the published version, read again only
when it changes; no Spark), in Prometheus's text exposition format (``prometheus_client``):

- ``kraft_replay_broker_applied_offset``, ``kraft_replay_broker_log_end_offset`` and
  ``kraft_replay_broker_offset_lag`` (log end − applied, ≥ 0) of the bucket's last sample;
- ``kraft_replay_broker_time_lag_ms``: the bucket's largest time lag (facts §9.1: sample time − append
  time of the oldest record not applied);
- ``kraft_replay_broker_image_divergence``: partitions whose leader or leader epoch in the broker's
  cache are not the log end's; ``kraft_replay_broker_stalled``: 1 when a sample lagged with no progress
  for 2 s or more;
- ``kraft_replay_broker_bucket_timestamp_seconds``: when that bucket starts;
- per cluster, ``kraft_replay_newest_data_timestamp_seconds`` and ``kraft_replay_newest_data_age_seconds``
  (now − the newest bucket's start): the age of what the gauges say.

Labels ``cluster`` and ``broker``. A lake without ``cache_lag`` yet answers with no broker gauges;
``kraft_replay_cache_lag_readable`` is 0 when the table cannot be read (the reason on the server's log).
docs/alerts.md has sample alert rules.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from kraft_replay.lake.reader import LakeReader
from kraft_replay.serve.charts import TABLE_COLUMNS
from kraft_replay.serve.now import CACHE_LAG, newest_buckets

__all__ = ["BROKER_GAUGES", "CacheLagCollector", "install_metrics", "metrics_text"]

log = logging.getLogger(__name__)

#: gauge name -> (help text, the column of a :func:`newest_buckets` row it gives)
BROKER_GAUGES: dict[str, tuple[str, str]] = {
    "kraft_replay_broker_applied_offset": (
        "Offset the broker's metadata cache has applied (its newest cache_lag bucket's last sample)", "applied_offset"),
    "kraft_replay_broker_log_end_offset": (
        "Metadata log end offset at the broker's last sample (the committed end where known)", "log_end_offset"),
    "kraft_replay_broker_offset_lag": (
        "Offsets the broker's metadata cache is behind the log end (last sample, >= 0)", "offset_lag"),
    "kraft_replay_broker_time_lag_ms": (
        "Largest time lag of the broker's newest bucket: sample time minus the append time of the oldest record "
        "not applied", "time_lag_ms_max"),
    "kraft_replay_broker_image_divergence": (
        "Partitions whose leader or leader epoch in the broker's cache are not the log end's", "image_divergence"),
    "kraft_replay_broker_stalled": (
        "1 when a sample of the newest bucket lagged with no progress for 2 s or more", "stalled"),
    "kraft_replay_broker_bucket_timestamp_seconds": (
        "Start of the broker's newest cache_lag bucket (Unix seconds)", "bucket_start"),
}


def _value(v: Any) -> float | None:
    """A cell as a sample value: times as Unix seconds, flags as 1 / 0; None for a null."""
    if v is None or v is pd.NaT or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, pd.Timestamp):
        return v.timestamp()
    return float(v)


class CacheLagCollector(Collector):
    """The gauges of the module docstring, computed at each scrape from the lake's published
    ``cache_lag`` (``now``: the clock, for the data's age)."""

    def __init__(self, reader: LakeReader, now: Callable[[], float] = time.time) -> None:
        self.reader = reader
        self.now = now

    def collect(self) -> Iterator[GaugeMetricFamily]:
        readable = GaugeMetricFamily("kraft_replay_cache_lag_readable",
                                     "1 when the lake's cache_lag table could be read at this scrape (0: see the server's log)")
        try:
            newest = newest_buckets(self.reader, TABLE_COLUMNS["cache_lag"])  # the dashboard's cached read
        except Exception as exc:  # noqa: BLE001 - a scrape answers; the reason goes to the log
            log.warning("/metrics: cannot read %s of %s: %s", CACHE_LAG, self.reader.root, str(exc).splitlines()[0])
            readable.add_metric([], 0.0)
            yield readable
            return
        readable.add_metric([], 1.0)
        yield readable
        if newest is None or newest.empty:
            return
        for name, (help_text, column) in BROKER_GAUGES.items():
            g = GaugeMetricFamily(name, help_text, labels=["cluster", "broker"])
            for _, row in newest.iterrows():
                v = _value(row[column])
                if v is not None:  # a null figure (or a column the table lacks): no sample
                    g.add_metric([str(row["cluster_id"]), str(int(row["broker_id"]))], v)
            yield g
        ts = GaugeMetricFamily("kraft_replay_newest_data_timestamp_seconds",
                               "Start of the cluster's newest cache_lag bucket (Unix seconds)", labels=["cluster"])
        age = GaugeMetricFamily("kraft_replay_newest_data_age_seconds",
                                "Seconds since the start of the cluster's newest cache_lag bucket", labels=["cluster"])
        now = self.now()
        for cluster, rows in newest.groupby("cluster_id", sort=True):
            newest_ts = rows["bucket_start"].max().timestamp()
            ts.add_metric([str(cluster)], newest_ts)
            age.add_metric([str(cluster)], max(0.0, now - newest_ts))
        yield ts
        yield age


def metrics_text(reader: LakeReader, now: Callable[[], float] = time.time) -> bytes:
    """The ``/metrics`` page of the lake ``reader`` reads, in the text exposition format (served as 0.0.4,
    which every Prometheus reads)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(CacheLagCollector(reader, now))
    return generate_latest(registry)


def install_metrics(server, reader: LakeReader) -> None:  # noqa: ANN001 - a Flask app
    """Serve :func:`metrics_text` at ``/metrics`` on ``server`` (behind its basic auth when installed)."""
    from flask import Response

    @server.route("/metrics")
    def _metrics():  # noqa: ANN202
        return Response(metrics_text(reader), 200, {"Content-Type": CONTENT_TYPE_PLAIN_0_0_4})
