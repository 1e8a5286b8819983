"""The live replay (:mod:`kraft_replay.replay.live`) equals the sequential replay after every step:
bronze rows arrive as a node writes them (batch by batch, snapshots after the batch that reaches their
end offset) in steps of one batch and in random groups; after each step the tables the steps built
(:func:`~kraft_replay.replay.live.apply_step`) equal a whole sequential replay of every row so far.
On every hand-built scenario, every real log in ../shared/reference/real-kraft and the project's
sample node; plus the cases a step cannot absorb (each named), the state surviving a pickle (the
stream's state store), a transaction spanning steps, a snapshot mid-stream and a tail rewritten by
a later leader."""

from __future__ import annotations

import pickle
import random
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "oracle"))

from bronze_builder import BronzeLog, change, mv, rec  # noqa: E402
from replay_oracle import first_difference, replay  # noqa: E402
from replay_scenarios import SCENARIOS, T1, base_cluster  # noqa: E402

from kraft_replay.codec.files import classify  # noqa: E402
from kraft_replay.ingest.bronze import decode_to_arrow  # noqa: E402
from kraft_replay.ingest.schemas import CONTROL_SCHEMA, LOG_SCHEMA, QUARANTINE_SCHEMA, SNAPSHOT_SCHEMA  # noqa: E402
from kraft_replay.replay.image_rows import image_rows, mv_changes  # noqa: E402
from kraft_replay.replay.live import LiveCluster, Step, Unabsorbable, apply_step  # noqa: E402
from kraft_replay.replay.schemas import IMAGE_SNAPSHOTS, IMAGE_SNAPSHOTS_SCHEMA, SILVER_TABLES, VERSIONED_TABLES  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
Unit = tuple[pa.Table, pa.Table, pa.Table]


def _units(log: pa.Table, control: pa.Table, snaps: pa.Table) -> list[Unit]:
    """The bronze rows of one cluster in the order a node writes them: each log batch (data and
    control rows of one batch key, by base offset, then epoch), each snapshot file (its records and
    control rows) after the batch that reaches its end offset - 1, bootstrap first."""
    is_log = pc.equal(pc.fill_null(control.column("source_kind"), "log"), "log")
    ctl_log, ctl_snap = control.filter(is_log), control.filter(pc.invert(is_log))
    order = [("batch_base_offset", "ascending"), ("batch_leader_epoch", "ascending"), ("offset", "ascending")]
    log, ctl_log = log.sort_by(order).combine_chunks(), ctl_log.sort_by(order).combine_chunks()

    def key(t: pa.Table) -> np.ndarray:
        return (t.column("batch_base_offset").to_numpy() * 65_536 + t.column("batch_leader_epoch").to_numpy()).astype(np.int64)

    lk, ck = key(log), key(ctl_log)
    empty_snap = SNAPSHOT_SCHEMA.empty_table()
    units: list[tuple[float, Unit]] = []
    for k in np.unique(np.concatenate([lk, ck])):
        parts = []
        for t, tk in ((log, lk), (ctl_log, ck)):
            lo, hi = np.searchsorted(tk, k, "left"), np.searchsorted(tk, k, "right")
            parts.append(t.slice(lo, hi - lo))
        last = max(pc.max(t.column("batch_last_offset")).as_py() or -1 for t in parts)
        units.append((last, (parts[0], parts[1], empty_snap)))
    ids = sorted({(x, y) for t in (snaps, ctl_snap) for x, y in zip(t.column("snapshot_end_offset").to_pylist(),
                                                                    t.column("snapshot_epoch").to_pylist(), strict=True)})
    for end, epoch in ids:
        def mine(t: pa.Table) -> pa.Array:
            return pc.and_(pc.equal(t.column("snapshot_end_offset"), end), pc.equal(t.column("snapshot_epoch"), epoch))
        kinds = set(snaps.filter(mine(snaps)).column("snapshot_kind").to_pylist()) | set(ctl_snap.filter(mine(ctl_snap)).column("source_kind").to_pylist())
        at = -2.0 if "bootstrap" in kinds else end - 1 + 0.5
        units.append((at, (log.slice(0, 0), ctl_snap.filter(mine(ctl_snap)), snaps.filter(mine(snaps)))))
    units.sort(key=lambda u: u[0])
    return [u for _, u in units]


def _steps(units: list[Unit], sizes: list[int]) -> list[Unit]:
    out, i = [], 0
    for n in sizes:
        group = units[i:i + n]
        i += n
        if group:
            out.append(tuple(pa.concat_tables([g[k] for g in group]).combine_chunks() for k in range(3)))
    return out


def _run(cluster_id: str, steps: list[Unit], *, pickled: bool = False,
         resume_at: int | None = None) -> tuple[list[str], list[int]]:
    """Feed ``steps`` to a live replay, checking after each that its tables equal a whole sequential
    replay of the rows so far; returns the reasons of the whole replays it fell back to and the
    records each absorbed step replayed. ``resume_at``: after that step the live replay is taken up
    anew from the tables built so far (:meth:`LiveCluster.resume`), as a stream seeded from a stored
    replay."""
    live: LiveCluster | None = None
    tables: dict[str, pa.Table] = {}
    quarantine = QUARANTINE_SCHEMA.empty_table()
    so_far = [LOG_SCHEMA.empty_table(), CONTROL_SCHEMA.empty_table(), SNAPSHOT_SCHEMA.empty_table()]
    fallbacks: list[str] = []
    absorbed: list[int] = []
    for n, unit in enumerate(steps):
        so_far = [pa.concat_tables([a, b.cast(a.schema)]).combine_chunks() for a, b in zip(so_far, unit, strict=True)]
        step: Step | None = None
        if live is not None:
            try:
                step = live.step(*unit)
                absorbed.append(step.records)
            except Unabsorbable as exc:
                fallbacks.append(str(exc))
        if step is None:
            live, step = LiveCluster.replay(cluster_id, *so_far, reason=fallbacks[-1] if fallbacks else None)
            quarantine = step.quarantine
        tables = apply_step(tables, step)
        if pickled:
            live = pickle.loads(pickle.dumps(live))
        if n == resume_at:
            live = LiveCluster.resume(cluster_id, *so_far, stored=tables)
        want = replay(*so_far)
        assert want.quarantine.num_rows == quarantine.num_rows, f"step {n}: quarantine"
        for t in SILVER_TABLES:
            got = tables.get(t, SILVER_TABLES[t].schema.empty_table())
            if not _sorted(want[t]).equals(_sorted(got)):
                diff = first_difference(t, want[t], got)
                assert diff is None, f"{cluster_id}, step {n} of {len(steps)}: {diff}"
        # the images at the metadata.version changes, step by step: those of the whole replay so far
        versions = {t: want[t] for t in VERSIONED_TABLES}
        images = image_rows(cluster_id, versions, mv_changes(versions["features"]))
        got = tables.get(IMAGE_SNAPSHOTS, IMAGE_SNAPSHOTS_SCHEMA.empty_table())
        assert _sorted(got).equals(_sorted(images)), f"{cluster_id}, step {n}: image_snapshots {got.num_rows} rows, " \
            f"{images.num_rows} in the whole replay's images"
    return fallbacks, absorbed


def _sorted(t: pa.Table) -> pa.Table:
    """A table's rows in one order (by every column that sorts); a mismatch is then explained by
    ``first_difference``, which also orders rows tied on those."""
    keys = [(f.name, "ascending") for f in t.schema if not pa.types.is_nested(f.type)]
    return t.sort_by(keys).combine_chunks()


def _random_sizes(n: int, seed: int) -> list[int]:
    rnd = random.Random(seed)
    sizes = []
    while sum(sizes) < n:
        sizes.append(rnd.choice([1, 1, 2, 3, 5, 8]))
    return sizes


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_live_equals_sequential_on_every_scenario(name: str) -> None:
    """Every hand-built rule, fed batch by batch and in random groups (the state pickled between steps
    as a state store keeps it)."""
    units = _units(*SCENARIOS[name]().tables())
    _run(name, _steps(units, [1] * len(units)))
    _run(name, _steps(units, _random_sizes(len(units), seed=len(name))), pickled=True)


def _decode(files: list[Path], cluster_id: str) -> tuple[pa.Table, pa.Table, pa.Table]:
    logs, ctls, snaps = [], [], []
    for p in files:
        info = classify(p.name)
        if info.kind.value not in ("segment", "snapshot", "bootstrap"):
            continue
        chunk = decode_to_arrow(p.read_bytes(), cluster_id=cluster_id, source_file=p.name, file_kind=info.kind.value,
                                snapshot_end_offset=info.end_offset, snapshot_epoch=info.epoch)
        logs.append(chunk.log)
        ctls.append(chunk.control)
        snaps.append(chunk.snapshot)
    return (pa.Table.from_batches(logs).cast(LOG_SCHEMA), pa.Table.from_batches(ctls).cast(CONTROL_SCHEMA),
            pa.Table.from_batches(snaps).cast(SNAPSHOT_SCHEMA))


def _real_prefixes(real_kraft_dir: Path) -> list[str]:
    """The real nodes: the file-name prefixes of the segment files."""
    return sorted({p.name.split("__")[0] for p in real_kraft_dir.iterdir() if "__" in p.name and p.name.endswith(".log")})


def _cut(bronze: tuple[pa.Table, pa.Table, pa.Table], cuts: list[int]) -> list[Unit]:
    """Steps of a node's rows cut at offsets: step i holds the log batches whose base offset is in
    ``[cuts[i-1], cuts[i])`` and the snapshots whose end offset - 1 is (bootstrap files in the first),
    as :func:`_units` grouped, without a table per batch."""
    log, control, snaps = bronze
    is_log = pc.equal(pc.fill_null(control.column("source_kind"), "log"), "log")
    ctl_log, ctl_snap = control.filter(is_log), control.filter(pc.invert(is_log))
    bounds = [-(2 ** 62), *cuts[1:], 2 ** 62]
    out = []
    for lo, hi in zip(bounds, bounds[1:]):
        def batch_in(t: pa.Table) -> pa.Table:
            base = t.column("batch_base_offset")
            return t.filter(pc.and_(pc.greater_equal(base, lo), pc.less(base, hi)))

        def snap_in(t: pa.Table) -> pa.Table:
            at = pc.subtract(t.column("snapshot_end_offset"), 1)
            boot = pc.equal(t.column("snapshot_kind" if "snapshot_kind" in t.schema.names else "source_kind"), "bootstrap")
            return t.filter(pc.or_(pc.and_(pc.greater_equal(at, lo), pc.less(at, hi)), pc.and_(boot, pa.scalar(lo < 0))))

        out.append((batch_in(log), pa.concat_tables([batch_in(ctl_log), snap_in(ctl_snap)]), snap_in(snaps)))
    return out


@pytest.mark.reference
def test_live_equals_sequential_on_every_real_log(real_kraft_dir: Path) -> None:
    """Every real Kafka node in ../shared/reference/real-kraft: its first half replayed whole, the rest
    fed in five random steps (snapshots among them), all absorbed, each step checked against a whole
    replay."""
    prefixes = _real_prefixes(real_kraft_dir)
    assert len(prefixes) >= 5, prefixes
    absorbed = 0
    for prefix in prefixes:
        files = sorted(p for p in real_kraft_dir.iterdir() if p.name.startswith(prefix + "__"))
        bronze = _decode(files, prefix)
        top = pc.max(bronze[0].column("offset")).as_py()
        rnd = random.Random(prefix)
        cuts = [0, top // 2, *sorted(rnd.sample(range(top // 2 + 1, top + 1), min(4, top - top // 2)))]
        fallbacks, steps = _run(prefix, _cut(bronze, cuts))
        assert fallbacks == [], (prefix, fallbacks)
        absorbed += sum(steps)
    assert absorbed > 10_000


def test_live_equals_sequential_on_the_sample_node() -> None:
    """The project's own sample node (data/samples/node1), batch by batch."""
    files = sorted(p for p in (ROOT / "data" / "samples" / "node1").rglob("*") if p.is_file())
    units = _units(*_decode(files, "node1"))
    assert len(units) > 5
    fallbacks, absorbed = _run("node1", _steps(units, [1] * len(units)))
    assert sum(absorbed) > 0 and not fallbacks


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_live_replay_taken_up_from_stored_tables_goes_on_as_one_replayed_whole(name: str) -> None:
    """A stream seeded from a stored replay (``LiveCluster.resume``: the stored open versions, the
    ``log_commit`` row and the bronze rows' positions, no record replayed again), at a random step and
    at the last but one, then fed the rest batch by batch: equal to a whole replay after every step,
    falling back to a whole replay only where a stream that never stopped does."""
    b = SCENARIOS[name]()
    units = _units(*b.tables())
    steps = _steps(units, [1] * len(units))
    plain, _ = _run(b.cluster_id, steps)
    for at in sorted({random.Random(name).randrange(len(steps)), max(0, len(steps) - 2)}):
        fallbacks, _ = _run(b.cluster_id, steps, resume_at=at)
        assert fallbacks == plain, at  # the same whole replays (a rewritten tail) as without the resume


def test_resume_inside_an_open_transaction_holds_its_records_back() -> None:
    """Taken up while a metadata transaction is open: its records are held back again and become
    visible at its End, as in a replay that never stopped."""
    b = BronzeLog("txn-resume")
    base_cluster(b)
    b.batch(rec("BEGIN_TRANSACTION_RECORD", name="reassign"))
    b.batch(change(T1, 0, isr=[1]))
    b.batch(change(T1, 1, isr=[2]))
    b.batch(rec("END_TRANSACTION_RECORD"))
    units = _units(*b.tables())
    steps = _steps(units, [1] * len(units))
    for at in (len(steps) - 3, len(steps) - 2):  # after the first and the second held-back record
        fallbacks, absorbed = _run(b.cluster_id, steps, resume_at=at)
        assert not fallbacks and absorbed[-1] == 1


def _one_step_at_a_time(b: BronzeLog) -> tuple[list[str], list[int]]:
    units = _units(*b.tables())
    return _run(b.cluster_id, _steps(units, [1] * len(units)))


def test_a_transaction_spanning_steps_is_held_until_its_end() -> None:
    """BeginTransaction in one step, its records in the next ones, EndTransaction later: nothing is
    visible until the end, then every record at the End's offset; no whole replay."""
    b = BronzeLog("txn")
    base_cluster(b)
    b.batch(rec("BEGIN_TRANSACTION_RECORD", name="reassign"))
    b.batch(change(T1, 0, isr=[1]))
    b.batch(change(T1, 1, isr=[2]))
    b.noop()
    b.batch(rec("END_TRANSACTION_RECORD"))
    fallbacks, absorbed = _one_step_at_a_time(b)
    assert fallbacks == [] and sum(absorbed) > 5


def test_a_step_emits_only_the_entities_it_touched() -> None:
    """A step changing one partition emits that partition's closed and new open version only: the
    other partition's, the brokers' and the topic's open versions stay where they are (a sink keeps
    them), and the tables built from the steps equal a whole replay."""
    b = BronzeLog("touch")
    base_cluster(b)
    b.batch(change(T1, 0, isr=[1]))
    units = _units(*b.tables())
    live, first = LiveCluster.replay("touch", *_steps(units[:-1], [len(units) - 1])[0])
    step = live.step(*units[-1])
    assert first.tables["partitions"].num_rows == 2 and first.tables["brokers"].num_rows > 3
    versions = step.tables["partitions"].select(["partition_id", "valid_to_offset"]).to_pylist()
    assert sorted(v["partition_id"] for v in versions) == [0, 0]
    assert sorted(v["valid_to_offset"] is None for v in versions) == [False, True]
    assert not {"brokers", "topics"} & set(step.tables)
    built = apply_step(apply_step({}, first), step)
    want = replay(*b.tables())
    assert _sorted(built["partitions"]).equals(_sorted(want["partitions"]))


def test_a_snapshot_mid_stream_commits_the_batches_it_covers() -> None:
    """A snapshot written while the log goes on: absorbed; the batches it covers become certainly
    committed (their log_batches rows change in that step)."""
    b = BronzeLog("snap")
    base_cluster(b)
    b.noop(3)
    end = b.offset
    b.snapshot(end, 1, [mv(11)])
    b.noop(2)
    units = _units(*b.tables())
    live, _ = LiveCluster.replay("snap", *units[0])
    for u in units[1:-3]:
        live.step(*u)
    snap_step = live.step(*units[-3])
    below = pc.less(replay(*b.tables())["log_batches"].column("batch_last_offset"), end)
    assert snap_step.tables["log_batches"].num_rows == pc.sum(below).as_py() > 5  # every batch below the end
    assert all(snap_step.tables["log_batches"].column("certainly_committed").to_pylist())
    assert _one_step_at_a_time(b)[0] == []


def test_a_tail_rewritten_by_a_later_leader_is_replayed_whole() -> None:
    """A later leader's batch at offsets already replayed (the old leader's uncommitted tail): the step
    is not absorbed, the cluster is replayed whole, the old tail quarantined as divergent."""
    b = BronzeLog("tail")
    base_cluster(b)
    fork = b.offset
    b.batch(change(T1, 0, isr=[1, 2]), change(T1, 1, isr=[2]))
    b.offset = fork
    b.leader_change()
    b.batch(change(T1, 0, isr=[1, 3]))
    fallbacks, _ = _one_step_at_a_time(b)
    assert len(fallbacks) == 1 and fallbacks[0].startswith(f"log rows at offset {fork}, at or below the last offset"), fallbacks


@pytest.mark.parametrize("case, reason", [
    ("again", "more rows of snapshot"),
    ("gap", "falls in the offset gap"),
    ("start", "a snapshot changes where replay starts"),
])
def test_what_a_step_cannot_absorb_leaves_the_state_unchanged(case: str, reason: str) -> None:
    """Each unabsorbable case raises before changing anything: the same state then takes the next
    rows as if the refused ones had never come."""
    b = BronzeLog(case)
    base_cluster(b)
    if case == "gap":
        b.skip(4)
    b.noop()
    log, ctl, snaps = b.tables()
    live, _ = LiveCluster.replay(case, log, ctl, snaps) if case != "start" else LiveCluster.replay(
        case, log.filter(pc.greater_equal(log.column("offset"), 3)), ctl, snaps)
    s = BronzeLog(case)
    s.snapshot({"again": 2, "gap": b.offset - 2, "start": 4}[case], 1, [mv(11)])
    _, sctl, ssnaps = s.tables()
    if case == "again":
        live.step(None, sctl, ssnaps)
    before = pickle.dumps(live)
    with pytest.raises(Unabsorbable, match=reason):
        live.step(None, sctl, ssnaps)
    assert pickle.dumps(live) == before


def test_the_sink_writes_each_step_so_the_lake_equals_a_whole_replay(tmp_path: Path) -> None:
    """The stream's sink (``live_stream.write_steps``) on a driver-only lake (delta-rs, no Spark): a
    cluster fed step by step — a whole replay first, absorbed steps, a rewritten tail replayed whole —
    leaves the published tables equal to a whole sequential replay after every step; the versioned
    tables' closed versions stay in files of their own; a micro-batch written again changes nothing;
    ``image_snapshots`` holds the images at each metadata.version change so far."""
    from kraft_replay.lake import Lake
    from kraft_replay.replay.live_stream import QUARANTINE, ensure_silver_tables, write_steps
    from kraft_replay.replay.schemas import VERSIONED_TABLES

    lake = Lake(str(tmp_path / "lake"), None, backend="deltars")
    ensure_silver_tables(lake)
    b = BronzeLog("sink")
    base_cluster(b)
    b.batch(mv(14))  # an image at a metadata.version change in an absorbed step
    b.batch(rec("BEGIN_TRANSACTION_RECORD", name="t"))
    b.batch(change(T1, 0, isr=[1]))
    b.batch(rec("END_TRANSACTION_RECORD"))
    fork = b.offset
    b.batch(change(T1, 0, isr=[1, 2]), change(T1, 1, isr=[2]))
    b.offset = fork
    b.leader_change()
    b.batch(change(T1, 0, isr=[1, 3]))
    units = _units(*b.tables())
    so_far = [LOG_SCHEMA.empty_table(), CONTROL_SCHEMA.empty_table(), SNAPSHOT_SCHEMA.empty_table()]
    live: LiveCluster | None = None
    kinds = []
    for n, unit in enumerate(units):
        so_far = [pa.concat_tables([a, u.cast(a.schema)]) for a, u in zip(so_far, unit, strict=True)]
        try:
            step = live.step(*unit) if live is not None else None
        except Unabsorbable:
            step = None
        if step is None:
            live, step = LiveCluster.replay("sink", *so_far, reason="test")
        kinds.append(step.whole)
        assert write_steps(lake, [step], f"live-test-{n}") is not None
        if n == 3:  # Spark runs a micro-batch again after a crash: nothing is written twice
            before = lake.published_versions()
            assert write_steps(lake, [step], f"live-test-{n}") is None and lake.published_versions() == before
        want = replay(*so_far)
        for t in SILVER_TABLES:
            got = lake.read_arrow(t, SILVER_TABLES[t].schema.names)
            if not _sorted(want[t]).equals(_sorted(got.cast(SILVER_TABLES[t].schema))):
                diff = first_difference(t, want[t], got)
                assert diff is None, f"step {n}: {diff}"
        q = lake.read_arrow(QUARANTINE, ["reason_code"])
        assert q.num_rows == want.quarantine.num_rows, f"step {n}: quarantine"
        versions = {t: want[t] for t in VERSIONED_TABLES}
        images = lake.read_arrow(IMAGE_SNAPSHOTS, IMAGE_SNAPSHOTS_SCHEMA.names).cast(IMAGE_SNAPSHOTS_SCHEMA)
        assert _sorted(images).equals(_sorted(image_rows("sink", versions, mv_changes(versions["features"])))), n
    assert sorted(set(images.column("image_offset").to_pylist())) == [0, 10], images.num_rows  # 3.5-IV2, then 3.6-IV2
    assert kinds[0] and kinds[-2:] == [True, False] and not any(kinds[1:-2]), kinds  # the fork: one whole replay
    progress = lake.read_arrow("replay_progress", ["mode", "reason"]).to_pylist()
    assert progress == [{"mode": "LIVE", "reason": None}]
    # closed versions are never in a file that also holds open ones
    for t in VERSIONED_TABLES:
        snap = lake._impl.snapshot(t)
        for stats in lake._impl.file_stats(snap, ["valid_to_offset"]).values():
            nulls, rows = stats.null_count.get("valid_to_offset"), stats.num_records
            assert nulls in (0, rows), (t, nulls, rows)


def test_the_rows_a_stored_replay_read_are_told_from_later_ones_a_snapshot_ahead_of_its_log_included() -> None:
    """``stored_and_after`` (the stream's take-up of a stored batch replay): log rows past the stored
    replay's last offset came after it; a snapshot ending past that offset came after it only when the
    stored replay counted fewer snapshot rows — one it read already (a snapshot file ahead of the log,
    say) is the stored replay's; a row added at or below its last offset gives None."""
    from kraft_replay.ingest.schemas import CONTROL_SCHEMA, LOG_SCHEMA, SNAPSHOT_SCHEMA
    from kraft_replay.replay.live_stream import stored_and_after

    def rows(schema: pa.Schema, **cols: list) -> pa.Table:
        n = len(next(iter(cols.values())))
        return pa.table({f.name: pa.array(cols.get(f.name, [None] * n), f.type) for f in schema}, schema=schema)

    log = rows(LOG_SCHEMA, offset=[0, 1, 2, 3, 4])
    control = rows(CONTROL_SCHEMA, offset=[0, 0, 5], source_kind=["snapshot", "snapshot", "log"],
                   snapshot_end_offset=[50, 50, None])
    snaps = rows(SNAPSHOT_SCHEMA, snapshot_end_offset=[50, 50, 50])
    read = {"through_offset": 2, "log_rows": 3, "control_log_rows": 0, "control_snapshot_rows": 2, "snapshot_rows": 3}
    (log_old, ctl_old, snap_old), (log_new, ctl_new, snap_new) = stored_and_after([log, control, snaps], read)
    assert log_old.column("offset").to_pylist() == [0, 1, 2] and log_new.column("offset").to_pylist() == [3, 4]
    assert (ctl_old.num_rows, snap_old.num_rows, snap_new.num_rows) == (2, 3, 0)  # the snapshot ahead: read
    assert ctl_new.column("offset").to_pylist() == [5]
    later = {**read, "control_snapshot_rows": 0, "snapshot_rows": 0}  # the snapshot came after the replay
    (_, ctl_old, snap_old), (_, ctl_new, snap_new) = stored_and_after([log, control, snaps], later)
    assert (ctl_old.num_rows, snap_old.num_rows, ctl_new.num_rows, snap_new.num_rows) == (0, 0, 3, 3)
    assert stored_and_after([log, control, snaps], {**read, "log_rows": 2}) is None  # a row added at or below 2
    assert stored_and_after([log, control, snaps], {**later, "snapshot_rows": 1}) is None
