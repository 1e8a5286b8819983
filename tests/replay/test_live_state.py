"""The live replay's state in the state store (``LiveReplay``, no Spark: the operator driven with a
state handle kept in a dict): the kernel is written only by a micro-batch that changed it, the rest at
every micro-batch that brings rows; a worker that kept the store's newest objects reads only the small
value; a new worker, a micro-batch run again after a failure (the store's older values while the
worker kept newer objects) and a checkpoint of the earlier layout (the whole state in one value) give
the same rows as the worker that kept everything."""

from __future__ import annotations

import json
import pickle
import sys
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "oracle"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bronze_builder import BronzeLog, change, config, mv  # noqa: E402
from replay_scenarios import T1, base_cluster  # noqa: E402

import kraft_replay.replay.live_stream as ls  # noqa: E402
from kraft_replay.ingest.schemas import BROKER_PROGRESS_SCHEMA  # noqa: E402
from kraft_replay.ingest.tables import BRONZE_TABLES, METRICS_BRONZE_TABLES, ensure_bronze_tables  # noqa: E402
from kraft_replay.lake import Lake  # noqa: E402
from kraft_replay.replay.schemas import IMAGE_SNAPSHOTS, MV_CHANGE  # noqa: E402

CID = "stateful"


class _Value:
    def __init__(self, store: dict, name: str) -> None:
        self.store, self.name = store, name

    def exists(self) -> bool:
        return self.name in self.store

    def get(self) -> tuple:
        return self.store[self.name]

    def update(self, value: tuple) -> None:
        self.store[self.name] = value
        self.store.setdefault("_writes", []).append(self.name)


class _Handle:
    """What the operator asks of Spark's handle: value states, kept in ``store`` by name."""

    def __init__(self, store: dict) -> None:
        self.store = store

    def getValueState(self, name: str, schema) -> _Value:  # noqa: N802, ANN001 - Spark's name
        return _Value(self.store, name)


def _rows(table: str, t: pa.Table, version: int) -> pd.DataFrame:
    t = t.append_column(ls.SOURCE, pa.array([table] * t.num_rows)).append_column(
        ls.VERSION, pa.array([version] * t.num_rows, pa.int64())).append_column(ls.MARKER, pa.array([False] * t.num_rows))
    return t.to_pandas()


def _samples(broker_offsets: list[tuple[int, int]], at: datetime) -> pa.Table:
    return pa.table({"cluster_id": [CID] * len(broker_offsets), "broker_id": [b for b, _ in broker_offsets],
                     "observed_at": [at] * len(broker_offsets), "applied_offset": [o for _, o in broker_offsets],
                     "applied_record_time": [at] * len(broker_offsets)}, schema=BROKER_PROGRESS_SCHEMA)


@pytest.fixture()
def batches(tmp_path) -> tuple[str, list[list[pd.DataFrame]]]:
    """A lake with the cluster's bronze and the micro-batches that deliver it: the first rows; broker
    samples alone; more log rows (a config, an ISR change); samples alone again; a metadata.version change."""
    b = BronzeLog(CID)
    base_cluster(b)
    cut1 = b.offset
    b.batch(config(2, "orders", "retention.ms", "1000"), change(T1, 0, isr=[1, 2]))
    cut2 = b.offset
    b.batch(mv(14))
    log, ctl, snap = b.tables()
    lake = Lake(str(tmp_path / "lake"), None, backend="deltars")
    ensure_bronze_tables(lake, [*BRONZE_TABLES.values(), METRICS_BRONZE_TABLES["broker_progress"]])
    t0 = datetime(2025, 6, 1, tzinfo=timezone.utc)
    out: list[list[pd.DataFrame]] = []
    for lo, hi in ((0, cut1), (None, None), (cut1, cut2), (None, None), (cut2, b.offset)):
        if lo is None:
            s = _samples([(1, len(out)), (2, len(out))], t0 + timedelta(seconds=len(out)))
            out.append([_rows("broker_progress", s, lake.append_arrow("broker_progress", s).version)])
            continue
        part = log.filter(pa.compute.and_(pa.compute.greater_equal(log.column("offset"), lo),
                                          pa.compute.less(log.column("offset"), hi)))
        out.append([_rows("metadata_log", part, lake.append_arrow("metadata_log", part).version)])
    assert not ctl.num_rows and not snap.num_rows
    return lake.root, out


def _run(root: str, batches: list[list[pd.DataFrame]], store: dict, forget: bool = False) -> list[dict]:
    """Each micro-batch through a new operator on ``store`` (``forget``: as a new Python worker, nothing
    kept); the rows it emitted, decoded."""
    got = []
    for frames in batches:
        if forget:
            ls._KEPT.clear()
        op = ls.LiveReplay(root)
        op.init(_Handle(store))
        for pdf in op.handleInputRows((CID,), iter(frames), None):
            for r in pdf.to_dict("records"):
                got.append({**r, "data": None if r["data"] is None else ls._from_ipc(r["data"]).to_pylist()})
        got.append("|")
    return got


def test_the_kernel_is_written_only_when_a_step_changed_it(batches) -> None:
    root, mbs = batches
    ls._KEPT.clear()
    store: dict = {}
    kernels = []
    for mb in mbs:
        store["_writes"] = []
        _run(root, [mb], store)
        kernels.append(store["live"][0][:len(ls._MAGIC3) + ls._TOKEN])
        wrote = store["_writes"]
        metrics_only = all(set(f[ls.SOURCE]) == {"broker_progress"} for f in mb)
        assert wrote == (["head"] if metrics_only else ["live", "head"]), wrote
    assert kernels[0] == kernels[1] != kernels[2] == kernels[3] != kernels[4]
    head = store["head"][0]
    assert head[:len(ls._MAGIC3)] == ls._MAGIC3 and head[len(ls._MAGIC3) + ls._TOKEN:][:ls._TOKEN] == kernels[-1][-ls._TOKEN:]
    # stored compressed: the kernel's value is smaller than the kernel's pickle
    kernel = ls._unpack(store["live"][0][len(ls._MAGIC3) + ls._TOKEN:])
    assert isinstance(kernel, ls.LiveCluster)
    assert len(store["live"][0]) < len(pickle.dumps(kernel, protocol=pickle.HIGHEST_PROTOCOL)) / 2


def test_a_new_worker_and_a_micro_batch_run_again_give_the_same_rows(batches) -> None:
    root, mbs = batches
    ls._KEPT.clear()
    kept = _run(root, mbs, {})
    assert any(r != "|" and r["kind"] == "whole" for r in kept) and any(r != "|" and r["kind"] == "step" for r in kept)
    assert _run(root, mbs, {}, forget=True) == kept  # every micro-batch from the store alone

    # each micro-batch run twice: the first run's values dropped (its commit failed), the worker
    # keeping the objects that run left (newer than the store's)
    ls._KEPT.clear()
    store: dict = {}
    again = []
    for mb in mbs:
        before = {k: v for k, v in store.items() if k != "_writes"}
        _run(root, [mb], store)
        store.clear()
        store.update(before)
        again += _run(root, [mb], store)
    assert again == kept


def _first_then_the_rest(batches) -> tuple[str, list, list, dict]:
    """The rows of every micro-batch after the first, run from an empty store, and a store as the
    first micro-batch alone left it (nothing kept by the worker)."""
    root, mbs = batches
    ls._KEPT.clear()
    kept = _run(root, mbs, {})
    ls._KEPT.clear()
    store: dict = {}
    _run(root, mbs[:1], store)
    ls._KEPT.clear()
    return root, mbs[1:], kept[kept.index("|") + 1:], store


def test_a_checkpoint_of_the_earlier_layout_is_read_and_rewritten(batches) -> None:
    """The whole state in ``live`` (magic ``KRT1``, no ``head``) and the kernel's batches not yet
    proven committed as Python rows, as the earlier version stored them: read, stepped to the same
    rows, and written in the new layout."""
    root, rest_mbs, rest_rows, store = _first_then_the_rest(batches)
    live = ls._unpack(store["live"][0][len(ls._MAGIC3) + ls._TOKEN:])
    assert live.pending.num_rows  # the batches not yet proven committed, kept by the earlier version as rows
    live.pending = live.pending.to_pylist()
    rest = ls._unpack(store["head"][0][len(ls._MAGIC3) + 2 * ls._TOKEN:])
    old = {"live": (ls._MAGIC + uuid.uuid4().bytes + pickle.dumps((live, *rest)),)}  # one value, no head
    assert _run(root, rest_mbs, old) == rest_rows
    assert old["live"][0][:len(ls._MAGIC3)] == ls._MAGIC3 and "head" in old


def test_a_checkpoint_of_uncompressed_values_is_read_and_rewritten(batches) -> None:
    """The kernel and the head as plain pickles (magic ``KRT2``, the layout before the values were
    compressed): read, stepped to the same rows, and written compressed."""
    root, rest_mbs, rest_rows, store = _first_then_the_rest(batches)
    n = len(ls._MAGIC3)
    live_value, head_value = store["live"][0], store["head"][0]
    old = {"live": (ls._MAGIC2 + live_value[n:n + ls._TOKEN] + pickle.dumps(ls._unpack(live_value[n + ls._TOKEN:])),),
           "head": (ls._MAGIC2 + head_value[n:n + 2 * ls._TOKEN] + pickle.dumps(ls._unpack(head_value[n + 2 * ls._TOKEN:])),)}
    assert _run(root, rest_mbs, old) == rest_rows
    assert old["live"][0][:n] == ls._MAGIC3 and old["head"][0][:n] == ls._MAGIC3


def test_the_operator_writes_an_image_with_each_metadata_version_change(batches) -> None:
    """The micro-batches above — the first rows (replayed whole: the image at the first
    metadata.version, 3.5-IV2), broker samples alone, a config and an ISR change, samples again, a
    change to 3.6-IV2 — give ``image_snapshots`` rows in the first and the last only: the whole image
    at the change's offset, at its level, the config and the ISR change in it."""
    root, mbs = batches
    ls._KEPT.clear()
    store: dict = {}
    images = []
    for mb in mbs:
        op = ls.LiveReplay(root)
        op.init(_Handle(store))
        rows = pa.concat_tables(pa.Table.from_pandas(pdf, preserve_index=False)
                                for pdf in op.handleInputRows((CID,), iter(mb), None))
        steps, _metrics = ls.steps_of(rows)
        images.append([s.tables[IMAGE_SNAPSHOTS].to_pylist() for s in steps if IMAGE_SNAPSHOTS in s.tables])
    assert [len(i) for i in images] == [1, 0, 0, 0, 1], images
    first, last = images[0][0], images[-1][0]
    assert {(r["image_offset"], r["metadata_version_level"], r["trigger"]) for r in first} == {(0, 11, MV_CHANGE)}
    mv_offset = last[0]["image_offset"]
    assert {(r["image_offset"], r["metadata_version_level"], r["trigger"]) for r in last} == {(mv_offset, 14, MV_CHANGE)}
    assert mv_offset > max(r["image_offset"] for r in first)
    by_domain = {d: [json.loads(r["entity"]) for r in last if r["domain"] == d] for d in ("configs", "partitions", "features")}
    assert {"resource_type": 2, "resource_name": "orders", "name": "retention.ms", "value": "1000"} in by_domain["configs"]
    assert [p["isr"] for p in by_domain["partitions"] if p["partition_id"] == 0] == [[1, 2]]
    assert [f["feature_level"] for f in by_domain["features"] if f["name"] == "metadata.version"] == [14]
