"""Scenario files: the shipped ones validate; bad ones fail with one line naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kraft_replay.generate.errors import ScenarioError
from kraft_replay.generate.scenario import SCENARIO_DIR, load_scenario


@pytest.mark.parametrize("name", ["tiny", "demo", "large"])
def test_shipped_scenarios_validate(name: str) -> None:
    sc = load_scenario(name)
    assert sc.name == name
    assert sc.topics.replication_factor <= sc.brokers.count


def _write(tmp_path: Path, mutate) -> Path:
    raw = yaml.safe_load((SCENARIO_DIR / "tiny.yaml").read_text())
    mutate(raw)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _set(path: list[str], value):
    def mutate(raw):
        node = raw
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value
    return mutate


@pytest.mark.parametrize(
    ("mutate", "key", "words"),
    [
        (_set(["log", "batch_sizes"], 3), "log.batch_sizes", "unknown key"),
        (_set(["bogus"], 1), "bogus", "unknown key"),
        (_set(["metadata_requests", "count"], -5), "metadata_requests.count", "greater than or equal to 0"),
        (_set(["log", "noop_fraction"], 1.5), "log.noop_fraction", "less than or equal to 1"),
        (_set(["topics", "replication_factor"], 9), "topics.replication_factor", "exceeds brokers.count"),
        (_set(["topics", "min_insync_replicas"], 4), "topics.min_insync_replicas", "exceeds the replication factor"),
        (_set(["events", "network_partitions"], [{"broker": 42, "at_s": 10, "duration_s": 5}]),
         "events.network_partitions.0.broker", "does not exist"),
        (_set(["events", "controller_failovers"], [{"at_s": 9999}]), "events.controller_failovers.0.at_s",
         "not inside duration_s"),
        (_set(["bootstrap_metadata_version"], "3.2-IV0"), "bootstrap_metadata_version", "below 3.3-IV0"),
        (_set(["bootstrap_metadata_version"], "9.9-IV9"), "bootstrap_metadata_version", "unknown metadata.version"),
        (_set(["brokers", "software_version"], "1.0"), "brokers.software_version", "unknown software version"),
        (_set(["log", "batch_records"], {"min": 5, "max": 2}), "log.batch_records", "below min"),
    ],
)
def test_bad_scenarios_name_the_key(tmp_path: Path, mutate, key: str, words: str) -> None:
    path = _write(tmp_path, mutate)
    with pytest.raises(ScenarioError) as exc:
        load_scenario(str(path))
    msg = str(exc.value)
    assert "\n" not in msg
    assert str(path) in msg
    assert f"key '{key}'" in msg
    assert words in msg


def test_missing_and_unparsable_files(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="not found.*known scenarios: .*tiny"):
        load_scenario("no-such-scenario")
    bad = tmp_path / "broken.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ScenarioError, match="not valid YAML"):
        load_scenario(str(bad))


def test_overlapping_events_on_one_broker_are_refused(tmp_path: Path) -> None:
    from kraft_replay.generate.plan import build_plan

    path = _write(tmp_path, _set(["events", "network_partitions"], [{"broker": 2, "at_s": 62, "duration_s": 20}]))
    with pytest.raises(ScenarioError, match=r"key 'events.network_partitions.0': broker 2 is already busy"):
        build_plan(load_scenario(str(path)))


def test_cli_reports_a_bad_scenario_in_one_line(tmp_path: Path, capsys) -> None:
    from kraft_replay.serve.cli import main

    path = _write(tmp_path, _set(["topics", "partitions"], -1))
    rc = main(["--lake", str(tmp_path / "lake"), "generate", "--scenario", str(path)])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert err.count("\n") == 0
    assert err.startswith("kraft-replay generate: error:") and "key 'topics.partitions'" in err
    assert not (tmp_path / "lake").exists(), "nothing may be written for a bad scenario"


def test_kafka_41_feature_ranges_match_a_real_41_registration(real_kraft_dir):
    """Ground truth no one here wrote: a real Kafka 4.1 node's RegisterBrokerRecord / RegisterControllerRecord
    advertise exactly the ranges the generator gives 4.1 software."""
    from kraft_replay.ingest.bronze import decode_to_arrow
    from kraft_replay.generate import mv

    seen = {}
    for name, kind in (("dkoh12__Systems__00000000000000000000.log", "segment"),
                       ("dkoh12__Systems__00000000000000007209-0000000001.checkpoint", "snapshot")):
        chunk = decode_to_arrow((real_kraft_dir / name).read_bytes(), cluster_id="c", source_file=name, file_kind=kind)
        rows = (chunk.log if kind == "segment" else chunk.snapshot).to_pylist()
        for row in rows:
            reg = row.get("register_broker") or row.get("register_controller")
            if reg is not None:
                seen[row["record_type"]] = {f["name"]: (f["min_supported_version"], f["max_supported_version"])
                                            for f in reg["features"]}
    assert set(seen) == {"REGISTER_BROKER_RECORD", "REGISTER_CONTROLLER_RECORD"}
    for ranges in seen.values():
        assert ranges == mv.software_feature_ranges("4.1")
        assert ranges == mv.registered_broker_features("4.1", "4.1")
