"""No credential in the clear anywhere under a lake (kafka-kraft-facts §12): a SCRAM credential, its
change and sensitive configs written into a real segment, snapshot, bootstrap.checkpoint and dump-log
text by the project's encoder, ingested by each path (batch, --follow, text), replayed; then every file
under the lake is scanned for the raw values and their base64 / hex forms. The same after ``redact`` on
a lake ingested with ``--keep-secrets``. One small lake per case, the session's Spark."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/secrets_fixtures.py
from secrets_fixtures import KEYSTORE_PW, SALT_1, STORED_1, scan, write_node  # noqa: E402

CID = "SeCrEtSCluster000000000A"


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    return write_node(tmp_path_factory.mktemp("secret-files"))


@pytest.fixture(scope="module")
def fingerprinted_lake(spark, files, tmp_path_factory):
    """Every ingest path into one lake, then the replay (and the report over it)."""
    from kraft_replay.ingest.follow import follow
    from kraft_replay.ingest.pipeline import run_ingest
    from kraft_replay.lake import Lake
    from kraft_replay.replay import run_replay

    root = tmp_path_factory.mktemp("fingerprinted") / "lake"
    lake = Lake(str(root), spark, backend="deltars")
    live = root.parent / "live"
    shutil.copytree(files["node"], live)
    follow(spark, lake, [str(live)], cluster_id=CID, polls=1, say=lambda _: None)          # segment + snapshot + bootstrap
    run_ingest(spark, lake, [str(files["dump"])], cluster_id=CID + "T", say=lambda _: None)  # dump-log text
    run_replay(spark, lake, say=lambda _: None)
    return lake


def test_every_path_leaves_no_secret_in_any_file(fingerprinted_lake, files, spark):
    from kraft_replay.serve.report import write_report

    lake = fingerprinted_lake
    root = Path(lake.root)
    log = lake.read("metadata_log").toArrow()
    assert sorted(set(log.column("cluster_id").to_pylist())) == [CID, CID + "T"]
    assert lake.read("snapshot_records").where("api_key = 11").count() >= 2   # the snapshot and bootstrap copies
    try:
        write_report(lake.root, root / "report.html")
    except Exception:  # noqa: BLE001 - a lake without gold tables may have no report; the scan covers what exists
        pass
    assert scan(root) == []
    assert (root / "_keys" / "fingerprint.key").stat().st_mode & 0o777 == 0o600
    assert (root / "_keys").stat().st_mode & 0o777 == 0o700
    assert '"secrets": "fingerprinted"' in (root / "_secrets.json").read_text()


def test_a_credential_change_is_a_new_version_with_another_fingerprint(fingerprinted_lake):
    rows = (fingerprinted_lake.read("scram_credentials").where(f"cluster_id = '{CID}' AND NOT deleted")
            .orderBy("valid_from_offset").collect())
    assert [(r["name"], r["iterations"]) for r in rows] == [("alice", 4096), ("alice", 4096)]
    assert [r["record_offset"] for r in rows] == [1, 5]                     # the credential, then its change
    fps = [r["credential_fingerprint"] for r in rows]
    assert all(f and f.startswith("hmac-sha256:") for f in fps) and fps[0] != fps[1]
    configs = {r["name"]: r["value"] for r in fingerprinted_lake.read("configs").where(f"cluster_id = '{CID}'").collect()}
    assert configs["retention.ms"] == "3600000" and configs["ssl.keystore.password"].startswith("hmac-sha256:")


def test_fingerprints_are_equal_within_a_lake_and_differ_across_lakes(spark, fingerprinted_lake, files, tmp_path):
    from kraft_replay.ingest.pipeline import run_ingest
    from kraft_replay.lake import Lake

    def salts(lake) -> dict[str, set]:  # noqa: ANN001
        out: dict[str, set] = {}
        for r in lake.read("metadata_log").where("api_key = 11").collect():
            out.setdefault(r["cluster_id"], set()).add(bytes(r["user_scram_credential"]["salt"]))
        return out

    same = salts(fingerprinted_lake)
    assert same[CID] == same[CID + "T"]          # the segment and its dump text: one value, one fingerprint
    other = Lake(str(tmp_path / "other"), spark, backend="deltars")
    run_ingest(spark, other, [str(files["segment"])], cluster_id=CID, say=lambda _: None)
    assert salts(other)[CID].isdisjoint(same[CID])


def test_keep_secrets_is_recorded_warned_and_undone_by_redact(spark, files, tmp_path, capsys):
    from kraft_replay.ingest.pipeline import run_ingest
    from kraft_replay.ingest.redact import redact_lake
    from kraft_replay.lake import Lake
    from kraft_replay.lake.keys import clear_secrets_warning
    from kraft_replay.replay import run_replay

    root = tmp_path / "forensic"
    lake = Lake(str(root), spark, backend="deltars")
    run_ingest(spark, lake, [str(files["node"])], cluster_id=CID, say=lambda _: None, keep_secrets=True)
    run_replay(spark, lake, say=lambda _: None)
    found = {form for _, form in scan(root)}
    assert SALT_1 in found and STORED_1 in found and KEYSTORE_PW.encode() in found   # the scan sees them
    assert clear_secrets_warning(str(root)).startswith(f"warning: lake {root} holds SCRAM credentials")
    configs = lake.read("configs").where("name = 'ssl.keystore.password'").collect()
    assert configs[0]["value"] == KEYSTORE_PW
    old = lake.version("metadata_log")

    summary = redact_lake(spark, lake, say=lambda _: None)
    assert {"metadata_log", "snapshot_records", "configs"} <= set(summary.changed)
    assert any("can no longer be read" in line for line in summary.lines())
    assert scan(root) == []
    assert clear_secrets_warning(str(root)) is None
    assert lake.read("configs").where("name = 'ssl.keystore.password'").first()["value"].startswith("hmac-sha256:")
    with pytest.raises(Exception):  # noqa: B017, PT011 - Delta's error for a version whose log is gone
        lake.read("metadata_log", version=old).count()
    again = redact_lake(spark, lake, say=lambda _: None)
    assert again.changed == {} and scan(root) == []
    # the SQL shell warns on a clear lake only, and hides quarantined raw bytes unless asked
    from kraft_replay.serve.cmd_sql import Session

    assert "raw" not in Session(spark, lake).run("SELECT * FROM ingest_quarantine")[0]
    assert "raw" in Session(spark, lake, include_raw=True).run("SELECT * FROM ingest_quarantine")[0]


def test_generated_lake_and_its_segments_hold_no_planned_secret(tiny_generated):
    """The generator fingerprints what its plan holds before writing the lake and the segment files."""
    plan = tiny_generated.result.plan
    planned = [r.data[f] for b in plan.batches for r in b.records if r.api_key == 11
               for f in ("salt", "stored_key", "server_key")]
    assert planned, "the tiny scenario plans SCRAM credentials"
    assert scan(tiny_generated.lake_dir, planned) == [] and scan(tiny_generated.segments_dir, planned) == []
