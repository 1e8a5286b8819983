"""The Spark replay equals the oracle on the generator's scenarios (``tiny``, and the test-only
``legacy`` — formatted at 3.3-IV0: Fence/UnfenceBrokerRecord, no NoOps — and ``elr`` — 4.0-IV1
ELR fields) and on the samples in ``data/samples`` (the binary node and the dump-log text):
generated / ingested into one tmp lake, replayed in one Spark run from the lake's bronze tables,
compared table by table with the oracle replaying the same rows; the generator's snapshots are
ground truth too (the image at END − 1 equals the snapshot's own records). The same lake holds
``tiny`` under three seeds drawn at random each run (clusters ``tiny-<seed>``, so a failure names its
seed): a property over seeds, replayed in the same Spark run."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pyarrow.compute as pc
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "oracle"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay_oracle import first_difference, replay  # noqa: E402

from kraft_replay.generate.runner import generate  # noqa: E402
from kraft_replay.generate.scenario import load_scenario  # noqa: E402
from kraft_replay.ingest import run_ingest  # noqa: E402
from kraft_replay.lake import Lake  # noqa: E402
from kraft_replay.replay.engine import cut, replay_tables  # noqa: E402
from kraft_replay.replay.schemas import SILVER_TABLES  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ["tiny", str(ROOT / "tests/generate/scenarios/legacy.yaml"), str(ROOT / "tests/generate/scenarios/elr.yaml")]
SAMPLES = {"sample-node1": ROOT / "data/samples/node1", "sample-dumptext": ROOT / "data/samples/dumplog/cluster-metadata-decoder.txt"}


#: ``tiny`` under other seeds, new ones every run
SEEDS = random.SystemRandom().sample(range(1, 2**31), 3)


def _spark_and_oracle(lake: Lake) -> tuple:
    log, control, snaps = (lake.read(t) for t in ("metadata_log", "metadata_control", "snapshot_records"))
    res = replay_tables(log, control, snaps, checkpoint=cut)
    got = {t: res[t].toArrow().cast(SILVER_TABLES[t].schema) for t in SILVER_TABLES}
    oracle = replay(log.toArrow(), control.toArrow(), snaps.toArrow())
    return oracle, got, snaps.toArrow()


@pytest.fixture(scope="module")
def generated(spark, tiny_generated, tmp_path_factory):
    lake = Lake(str(tmp_path_factory.mktemp("genlake")), spark, backend="deltars")
    for s in SCENARIOS[1:]:  # legacy, elr
        generate(spark, lake, load_scenario(s), progress=lambda _: None)
    for t in ("metadata_log", "metadata_control", "snapshot_records"):  # tiny: the session's generated lake
        lake.append(t, tiny_generated.lake.read(t))
    for cluster, path in SAMPLES.items():
        run_ingest(spark, lake, [str(path)], cluster_id=cluster, say=lambda _: None)
    for seed in SEEDS:
        scenario = load_scenario("tiny", seed=seed).model_copy(update={"cluster_id": f"tiny-{seed}"})
        generate(spark, lake, scenario, progress=lambda _: None)
    return _spark_and_oracle(lake)


@pytest.mark.parametrize("table", list(SILVER_TABLES))
def test_generated_scenarios_equal_the_oracle(generated, table: str) -> None:
    oracle, got, _ = generated
    diff = first_difference(table, oracle[table], got[table])
    assert diff is None, diff


def test_generated_scenarios_replay_cleanly(generated) -> None:
    oracle, got, snaps = generated
    commit = {c["cluster_id"]: c for c in got["log_commit"].to_pylist()}
    assert set(commit) >= {f"tiny-{s}" for s in SEEDS}, SEEDS
    assert len(commit) == len(SCENARIOS) + len(SAMPLES) + len(SEEDS)
    assert all(c["replayed_records"] > 1000 for k, c in commit.items() if k not in SAMPLES)
    assert all(commit[k]["replayed_records"] > 10 for k in SAMPLES)
    assert got["replay_anomalies"].num_rows == 0
    assert got["partitions"].num_rows > 100 and pc.any(pc.is_valid(got["partitions"].column("valid_to_offset"))).as_py()
    # the generator's snapshots: the log's image at END - 1 equals the snapshot's own records (oracle side)
    ends = snaps.filter(pc.equal(snaps.column("snapshot_kind"), "snapshot")).select(["cluster_id", "snapshot_end_offset"])
    pairs = sorted({(c, e) for c, e in zip(ends.column("cluster_id").to_pylist(), ends.column("snapshot_end_offset").to_pylist())
                    if c != "sample-dumptext"})  # that dump's snapshot holds a few records, not its log's image
    for cluster, end in pairs[:3]:
        alone = replay(None, None, snaps.filter(pc.and_(pc.equal(snaps.column("cluster_id"), cluster),
                                                        pc.equal(snaps.column("snapshot_end_offset"), end))))
        assert oracle.image_at(end - 1, cluster) == alone.image_at(end - 1, cluster), (cluster, end)
