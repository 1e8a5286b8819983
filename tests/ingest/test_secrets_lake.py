"""No credential in the clear anywhere under a lake (kafka-kraft-facts §12): a SCRAM credential, its
change and sensitive configs written into a real segment, snapshot, bootstrap.checkpoint and dump-log
text by the project's encoder, ingested by each path (batch, --follow, text), replayed; then every file
under the lake is scanned for the raw values and their base64 / hex forms. The same after ``redact`` on
a lake made before this change (ingested with ``--keep-secrets``, its quarantined bytes in
``ingest_quarantine.raw``, ``scram_credentials`` without ``credential_fingerprint``), which then
replays. One small lake per case, the session's Spark."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/secrets_fixtures.py
from secrets_fixtures import KEYSTORE_PW, SALT_1, STORED_1, scan, write_node  # noqa: E402

CID = "SeCrEtSCluster000000000A"
#: the bytes of a range ingest could not decode, as a lake made before ingest_quarantine_raw keeps them
RAW = b"undecodable-range-\x00\x01-0001"


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
    follow(lake, [str(live)], cluster_id=CID, polls=1, say=lambda _: None)                 # segment + snapshot + bootstrap
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
    report = write_report(lake.root, root / "report.html")
    assert report.path == root / "report.html" and report.path.stat().st_size > 0   # scanned with the rest below
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


def _legacy_quarantine(spark, lake, rows: list[dict]) -> None:  # noqa: ANN001
    """``ingest_quarantine`` as a lake made before ``ingest_quarantine_raw`` holds it: the bytes in a
    ``raw`` column (the decoders' row schema), ``rows`` its rows."""
    import pyarrow as pa

    from kraft_replay.ingest.schemas import DECODED_QUARANTINE_SCHEMA
    from kraft_replay.ingest.tables import arrow_df, spark_schema

    df = arrow_df(spark, pa.Table.from_pylist(rows, schema=DECODED_QUARANTINE_SCHEMA))
    if lake.exists("ingest_quarantine"):
        lake.overwrite("ingest_quarantine", df, schema=spark_schema(DECODED_QUARANTINE_SCHEMA))
    else:
        lake.create_table("ingest_quarantine", df.schema, partition_by=["cluster_id"])
        lake.append("ingest_quarantine", df)


def _quarantine_row(cid: str, raw: bytes | None, code: str = "CRC_MISMATCH") -> dict:
    from datetime import datetime, timezone

    return {"cluster_id": cid, "source_file": "00000000000000000000.log", "source_position": 7,
            "length": None if raw is None else len(raw), "offset": 3, "records": 1, "reason_code": code,
            "reason": "a test range", "raw": raw, "ingested_at": None if raw is None else datetime(2026, 1, 2, tzinfo=timezone.utc)}


@pytest.fixture(scope="module")
def old_lake(spark, files, tmp_path_factory):
    """A lake made before this change: ingested with ``--keep-secrets`` and replayed, its quarantined
    bytes in ``ingest_quarantine.raw`` and ``scram_credentials`` without ``credential_fingerprint``;
    then redacted. Returns the lake, what was seen before ``redact``, and its summary."""
    from pyspark.sql.types import StructType

    from kraft_replay.ingest.errors import IngestError
    from kraft_replay.ingest.pipeline import run_ingest
    from kraft_replay.ingest.redact import redact_lake
    from kraft_replay.ingest.tables import ensure_bronze_tables
    from kraft_replay.lake import Lake
    from kraft_replay.lake.keys import clear_secrets_warning
    from kraft_replay.replay import run_replay
    from kraft_replay.serve.cmd_sql import Session

    root = tmp_path_factory.mktemp("forensic") / "lake"
    lake = Lake(str(root), spark, backend="deltars")
    run_ingest(spark, lake, [str(files["node"])], cluster_id=CID, say=lambda _: None, keep_secrets=True)
    run_replay(spark, lake, say=lambda _: None)
    _legacy_quarantine(spark, lake, [_quarantine_row(CID, RAW), _quarantine_row(CID, None, "DIVERGENT_UNCOMMITTED")])
    scram = lake.read("scram_credentials")
    lake.overwrite("scram_credentials", scram.drop("credential_fingerprint"),
                   schema=StructType([f for f in scram.schema.fields if f.name != "credential_fingerprint"]))
    with pytest.raises(IngestError) as refused:
        ensure_bronze_tables(lake)
    before = {"found": {form for _, form in scan(root)}, "warning": clear_secrets_warning(str(root)),
              "configs": lake.read("configs").where("name = 'ssl.keystore.password'").collect()[0]["value"],
              "version": lake.version("metadata_log"), "refused": str(refused.value),
              "sql": Session(spark, lake).run("SELECT * FROM ingest_quarantine")[0],
              "sql_raw": Session(spark, lake, include_raw=True).run("SELECT * FROM ingest_quarantine")[0]}
    return lake, before, redact_lake(spark, lake, say=lambda _: None)


def test_keep_secrets_is_recorded_warned_and_undone_by_redact(spark, old_lake, quarantined):
    from kraft_replay.ingest.redact import redact_lake
    from kraft_replay.ingest.tables import ensure_bronze_tables
    from kraft_replay.lake.keys import clear_secrets_warning

    lake, before, summary = old_lake
    root = Path(lake.root)
    assert SALT_1 in before["found"] and STORED_1 in before["found"] and KEYSTORE_PW.encode() in before["found"]
    assert before["warning"].startswith(f"warning: lake {root} holds SCRAM credentials")
    assert before["configs"] == KEYSTORE_PW
    # before redact: ingest refuses the old quarantine table in one line naming the fix; SQL hides its bytes
    assert "\n" not in before["refused"] and f"kraft-replay redact --lake {root}" in before["refused"]
    assert "raw" not in before["sql"] and "raw" in before["sql_raw"]

    assert {"metadata_log", "snapshot_records", "configs", "ingest_quarantine"} <= set(summary.changed)
    assert summary.moved_raw == 1
    assert any("moved the bytes of 1 ingest_quarantine row(s) to ingest_quarantine_raw" in line for line in summary.lines())
    assert any("can no longer be read" in line for line in summary.lines())
    assert scan(root) == []
    assert clear_secrets_warning(str(root)) is None
    assert lake.read("configs").where("name = 'ssl.keystore.password'").first()["value"].startswith("hmac-sha256:")
    with pytest.raises(Exception):  # noqa: B017, PT011 - Delta's error for a version whose log is gone
        lake.read("metadata_log", version=before["version"]).count()
    # the bytes moved to their own table, joined to their row; no file of ingest_quarantine holds them any more
    assert "raw" not in lake.read("ingest_quarantine").columns
    assert [(r["reason_code"], r["raw"]) for r in quarantined(lake)] == [("CRC_MISMATCH", RAW),
                                                                         ("DIVERGENT_UNCOMMITTED", None)]
    assert scan(root / "ingest_quarantine", [RAW]) == [] and scan(root / "ingest_quarantine_raw", [RAW]) != []
    ensure_bronze_tables(lake)                     # ingest takes the lake again
    again = redact_lake(spark, lake, say=lambda _: None)
    assert again.changed == {} and scan(root) == [] and lake.read("ingest_quarantine_raw").count() == 1


def test_replay_after_redact_on_an_old_lake_fills_credential_fingerprint(spark, old_lake):
    """``scram_credentials`` made before ``credential_fingerprint``: an incremental replay does not resume
    it (the table lacks a column) but replays whole, which adds the column and fills it."""
    from kraft_replay.replay import run_replay

    lake, _, _ = old_lake
    assert "credential_fingerprint" not in lake.read("scram_credentials").columns
    summary = run_replay(spark, lake, say=lambda _: None, incremental=True)
    assert summary.modes[CID].startswith("FULL (table scram_credentials was written by an older kraft-replay")
    rows = lake.read("scram_credentials").where("NOT deleted").orderBy("valid_from_offset").collect()
    fps = [r["credential_fingerprint"] for r in rows]
    assert len(fps) == 2 and all(f and f.startswith("hmac-sha256:") for f in fps) and fps[0] != fps[1]
    assert scan(Path(lake.root)) == []


def test_redact_killed_after_its_publish_is_finished_by_the_next_run(spark, tmp_path, monkeypatch, quarantined):
    """A lake whose only table is an old ``ingest_quarantine``: ``redact`` killed after its publish (in its
    vacuum) leaves the new state to readers and the replaced files on disk; the next run removes them.
    SQL shows ``ingest_quarantine_raw`` only with ``--include-raw``."""
    from kraft_replay.ingest.redact import PENDING_FILE, redact_lake
    from kraft_replay.lake import Lake
    from kraft_replay.serve.cmd_sql import Session, SqlError

    root = tmp_path / "lake"
    lake = Lake(str(root), spark, backend="deltars")
    _legacy_quarantine(spark, lake, [_quarantine_row("c1", RAW)])

    def killed(*_a, **_k):  # noqa: ANN002, ANN003, ANN202
        raise KeyboardInterrupt

    monkeypatch.setattr(Lake, "vacuum", killed)
    said: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        redact_lake(spark, lake, say=said.append)
    monkeypatch.undo()
    assert any("ingest_quarantine rewritten without raw" in line for line in said)
    assert "raw" not in lake.read("ingest_quarantine").columns and (root / PENDING_FILE).is_file()
    assert scan(root / "ingest_quarantine", [RAW]) != []           # the replaced file, not yet vacuumed

    done = redact_lake(spark, lake, say=lambda _: None)
    assert done.changed == {} and done.removed_files["ingest_quarantine"] >= 1 and not (root / PENDING_FILE).exists()
    assert scan(root / "ingest_quarantine", [RAW]) == []
    assert [r["raw"] for r in quarantined(lake)] == [RAW]

    hidden = Session(spark, lake)
    assert "ingest_quarantine_raw" not in hidden.tables
    for statement in ("SELECT * FROM ingest_quarantine_raw", "SELECT count(*) FROM ingest_quarantine_raw@v1"):
        with pytest.raises(SqlError, match="--include-raw") as err:
            hidden.run(statement)
        assert "\n" not in str(err.value)
    columns, rows = Session(spark, lake, include_raw=True).run("SELECT raw FROM ingest_quarantine_raw")
    assert columns == ["raw"] and [bytes(r["raw"]) for r in rows] == [RAW]


def test_generated_lake_and_its_segments_hold_no_planned_secret(tiny_generated):
    """The generator fingerprints what its plan holds before writing the lake and the segment files."""
    plan = tiny_generated.result.plan
    planned = [r.data[f] for b in plan.batches for r in b.records if r.api_key == 11
               for f in ("salt", "stored_key", "server_key")]
    assert planned, "the tiny scenario plans SCRAM credentials"
    assert scan(tiny_generated.lake_dir, planned) == [] and scan(tiny_generated.segments_dir, planned) == []
