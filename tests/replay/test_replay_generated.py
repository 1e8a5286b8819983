"""The Spark replay equals the oracle on the generator's scenarios (``tiny``, and the test-only
``legacy`` — formatted at 3.3-IV0: Fence/UnfenceBrokerRecord, no NoOps — and ``elr`` — 4.0-IV1
ELR fields): generated in-process into one tmp lake, replayed in one Spark run from the lake's
bronze tables, compared table by table with the oracle replaying the same rows; and the generator's
snapshots are ground truth too (the image at END − 1 equals the snapshot's own records)."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow.compute as pc
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "oracle"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay_oracle import first_difference, replay  # noqa: E402

from kraft_replay.generate.runner import generate  # noqa: E402
from kraft_replay.generate.scenario import load_scenario  # noqa: E402
from kraft_replay.lake import Lake  # noqa: E402
from kraft_replay.replay.engine import cut, replay_tables  # noqa: E402
from kraft_replay.replay.schemas import SILVER_TABLES  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ["tiny", str(ROOT / "tests/generate/scenarios/legacy.yaml"), str(ROOT / "tests/generate/scenarios/elr.yaml")]


@pytest.fixture(scope="module")
def generated(spark, tmp_path_factory):
    lake = Lake(str(tmp_path_factory.mktemp("genlake")), spark, backend="deltars")
    for s in SCENARIOS:
        generate(spark, lake, load_scenario(s), progress=lambda _: None)
    log, control, snaps = (lake.read(t) for t in ("metadata_log", "metadata_control", "snapshot_records"))
    res = replay_tables(log, control, snaps, checkpoint=cut)
    got = {t: res[t].toArrow().cast(SILVER_TABLES[t].schema) for t in SILVER_TABLES}
    oracle = replay(log.toArrow(), control.toArrow(), snaps.toArrow())
    return oracle, got, snaps.toArrow()


@pytest.mark.parametrize("table", list(SILVER_TABLES))
def test_generated_scenarios_equal_the_oracle(generated, table: str) -> None:
    oracle, got, _ = generated
    diff = first_difference(table, oracle[table], got[table])
    assert diff is None, diff


def test_generated_scenarios_replay_cleanly(generated) -> None:
    oracle, got, snaps = generated
    commit = got["log_commit"].to_pylist()
    assert len(commit) == len(SCENARIOS) and all(c["replayed_records"] > 1000 for c in commit)
    assert got["replay_anomalies"].num_rows == 0
    assert got["partitions"].num_rows > 100 and pc.any(pc.is_valid(got["partitions"].column("valid_to_offset"))).as_py()
    # the generator's snapshots: the log's image at END - 1 equals the snapshot's own records (oracle side)
    ends = snaps.filter(pc.equal(snaps.column("snapshot_kind"), "snapshot")).select(["cluster_id", "snapshot_end_offset"])
    pairs = sorted(set(zip(ends.column("cluster_id").to_pylist(), ends.column("snapshot_end_offset").to_pylist())))
    for cluster, end in pairs[:3]:
        alone = replay(None, None, snaps.filter(pc.and_(pc.equal(snaps.column("cluster_id"), cluster),
                                                        pc.equal(snaps.column("snapshot_end_offset"), end))))
        assert oracle.image_at(end - 1, cluster) == alone.image_at(end - 1, cluster), (cluster, end)
