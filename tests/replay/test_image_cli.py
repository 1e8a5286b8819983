"""``kraft-replay image`` (issue 10 §3) on a real Kafka log: one segment of rjmfernandes/flink-on-prem ingested
and replayed once for the module, then the CLI called in-process — JSON and table output as of an offset or
a time, the domain filter, the diff between two offsets, and every user error as one line with exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from kraft_replay.ingest import run_ingest
from kraft_replay.lake import Lake
from kraft_replay.replay.images import DOMAINS
from kraft_replay.replay.run import run_replay
from kraft_replay.serve.cli import main

NAME = "rjmfernandes__flink-on-prem__00000000000000000000.log"
CLUSTER = "flink"
# the file's two snapshots are 00000000000000007752-1 and 00000000000000014926-1: images at END - 1
AT, LATER = 7751, 14925
SECRETS = ("salt", "stored_key", "server_key", "hmac")


def _quiet(_: str) -> None:
    pass


@pytest.fixture(scope="module")
def lake(spark, real_kraft_dir: Path, tmp_path_factory) -> Lake:
    """The segment ingested and replayed (one ingest, one replay for the whole module)."""
    lake = Lake(str(tmp_path_factory.mktemp("image_lake")), spark, backend="deltars")
    run_ingest(spark, lake, [str(real_kraft_dir / NAME)], cluster_id=CLUSTER, say=_quiet)
    run_replay(spark, lake, say=_quiet)
    return lake


def _image(capsys, lake: Lake | str, *args: str) -> tuple[int, str, str]:
    root = lake if isinstance(lake, str) else lake.root
    code = main(["--profile", "test", "image", "--lake", root, *args])
    got = capsys.readouterr()
    return code, got.out, got.err


def _one_line_error(code: int, out: str, err: str) -> str:
    assert code == 2, (code, out, err)
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("kraft-replay image: error: "), err
    assert "Traceback" not in err
    return err


def test_json_as_of_an_offset(lake, capsys) -> None:
    # the global options also work before the subcommand
    code = main(["--profile", "test", "--lake", lake.root, "image", "--cluster-id", CLUSTER, "--offset", str(AT),
                 "--format", "json"])
    out = capsys.readouterr().out
    assert code == 0
    assert out.count("\n") == 1  # exactly one JSON object, on one line
    doc = json.loads(out)
    assert list(doc) == ["cluster_id", "offset", "metadata_version", "metadata_version_level", *DOMAINS]
    assert (doc["cluster_id"], doc["offset"]) == (CLUSTER, AT)
    assert doc["metadata_version"] == "3.6-IV2" and doc["metadata_version_level"] == 14
    assert doc["features"] == {"metadata.version": 14}
    assert doc["topics"] and doc["partitions"] and doc["brokers"]
    topics = {t["topic_id"]: t["name"] for t in doc["topics"]}
    assert "__consumer_offsets" in topics.values()
    # every partition belongs to a live topic and has the snake_case fields of the silver table
    p = doc["partitions"][0]
    assert {"topic_id", "partition_id", "topic_name", "leader", "leader_epoch", "partition_epoch", "replicas", "isr"} <= set(p)
    assert all(q["topic_id"] in topics and q["topic_name"] == topics[q["topic_id"]] for q in doc["partitions"])
    assert doc["brokers"][0]["broker_id"] == 1 and "end_points" in doc["brokers"][0]
    assert not any(s in out.lower() for s in SECRETS)


def test_table_format(lake, capsys) -> None:
    code, out, err = _image(capsys, lake, "--cluster-id", CLUSTER, "--offset", str(AT))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"cluster {CLUSTER} as of offset {AT}: metadata.version 3.6-IV2 (level 14)"
    sections = [ln.split(" (")[0] for ln in lines[1:] if ln and not ln.startswith(" ") and ln.endswith(")")]
    assert sections == [d for d in DOMAINS if d not in ("producer_ids", "zk_migration_state")]
    assert "producer_ids: next_producer_id=" in out and "zk_migration_state: " in out
    # partitions: a header of the table's snake_case columns, then one aligned row per partition
    i = lines.index(next(ln for ln in lines if ln.startswith("partitions (")))
    n = int(lines[i].split("(")[1].rstrip(")"))
    header, rows = lines[i + 1], lines[i + 2:i + 2 + n]
    assert header.split()[:5] == ["topic_id", "partition_id", "topic_name", "replicas", "isr"]
    assert n > 0 and all(r.startswith("  ") and not r.startswith("   ") for r in rows)
    col = header.index("partition_id")
    assert all(r[col - 2:col] == "  " and r[col] != " " for r in rows)  # the column starts at the same place
    assert "features (1)" in out and "metadata.version  14" in out
    assert not any(s in out.lower() for s in SECRETS)


def test_domain_filter(lake, capsys) -> None:
    code, out, err = _image(capsys, lake, "--cluster-id", CLUSTER, "--offset", str(AT), "--domain", "partitions",
                            "--domain", "brokers", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert list(doc) == ["cluster_id", "offset", "metadata_version", "metadata_version_level", "partitions", "brokers"]
    assert doc["partitions"] and doc["metadata_version"] == "3.6-IV2"
    code, out, err = _image(capsys, lake, "--cluster-id", CLUSTER, "--offset", str(AT), "--domain", "brokers")
    assert code == 0, err
    assert "metadata.version 3.6-IV2" in out.splitlines()[0]
    assert "brokers (1)" in out and "topics (" not in out and "features (" not in out and "partitions (" not in out
    with pytest.raises(SystemExit) as exc:  # not a domain: argparse names the choices
        main(["--profile", "test", "image", "--lake", lake.root, "--cluster-id", CLUSTER, "--offset", "1", "--domain", "nope"])
    assert exc.value.code == 2 and "invalid choice: 'nope'" in capsys.readouterr().err


def test_diff_between_two_offsets(lake, capsys) -> None:
    code, out, err = _image(capsys, lake, "--cluster-id", CLUSTER, "--offset", str(AT), "--diff-to", str(LATER),
                            "--format", "json")
    assert code == 0, err
    assert out.count("\n") == 1
    diff = json.loads(out)
    assert (diff["cluster_id"], diff["from_offset"], diff["to_offset"]) == (CLUSTER, AT, LATER)
    assert diff["changes"], "two topics were created between the two snapshots"
    added = {c["fields"]["name"][1] for c in diff["changes"]["topics"] if c["change"] == "added"}
    assert added == {"products_keyed", "customers_keyed"}
    assert {c["key"]["partition_id"] for c in diff["changes"]["partitions"]} == {0}

    code, out, err = _image(capsys, lake, "--cluster-id", CLUSTER, "--offset", str(AT), "--diff-to", str(LATER))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"cluster {CLUSTER}: from offset {AT} to {LATER}"
    assert "topics (2)" in lines and "partitions (2)" in lines
    assert sum(ln.startswith("  + topic_id=") and " name=products_keyed" in ln for ln in lines) == 1

    # the other way round: removed; and an offset to itself: no change
    code, out, _ = _image(capsys, lake, "--cluster-id", CLUSTER, "--offset", str(LATER), "--diff-to", str(AT),
                          "--domain", "topics")
    assert code == 0 and sum(ln.startswith("  - topic_id=") for ln in out.splitlines()) == 2 and "partitions" not in out
    code, out, _ = _image(capsys, lake, "--cluster-id", CLUSTER, "--offset", str(AT), "--diff-to", str(AT))
    assert code == 0 and "  no change" in out


def test_as_of_a_time(lake, capsys) -> None:
    batches = lake.read("log_batches").where(F.col("cluster_id") == CLUSTER)
    # a batch in the middle of the log, its append time as ISO-8601 text in UTC (the session's zone)
    mid = (batches.where(F.col("batch_base_offset") >= 8000).orderBy("batch_base_offset").limit(1)
           .select(F.date_format("append_time", "yyyy-MM-dd'T'HH:mm:ss.SSSXXX").alias("t")).collect()[0]["t"])
    want = batches.where(F.col("append_time") <= F.to_timestamp(F.lit(mid))).agg(F.max("batch_last_offset")).collect()[0][0]
    assert mid.endswith("Z") and want >= 8000
    code, out, err = _image(capsys, lake, "--cluster-id", CLUSTER, "--time", mid, "--domain", "topics", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["offset"] == want and doc["topics"]
    code, out, err = _image(capsys, lake, "--cluster-id", CLUSTER, "--time", mid.removesuffix("Z"), "--domain", "topics")
    assert code == 0 and out.startswith(f"cluster {CLUSTER} as of offset {want}:"), err  # no zone = UTC


@pytest.mark.parametrize("args, says", [
    (["--cluster-id", CLUSTER], "give --offset O or --time T"),
    (["--cluster-id", CLUSTER, "--time", "yesterday"], "--time 'yesterday' is not an ISO-8601 time"),
    (["--cluster-id", CLUSTER, "--time", "2024-13-01T00:00:00Z"], "is not an ISO-8601 time"),
    (["--cluster-id", "nope", "--offset", "3"], "cluster 'nope' has not been replayed"),
    (["--cluster-id", CLUSTER, "--offset", "-5"], "replay starts at offset -1"),
    (["--cluster-id", CLUSTER, "--offset", str(AT), "--diff-to", "-5"], "the image at -5 is unknown"),
    (["--cluster-id", CLUSTER, "--time", "2000-01-01T00:00:00Z"], "no batch was appended at or before"),
])
def test_errors_are_one_line(lake, capsys, args, says) -> None:
    err = _one_line_error(*_image(capsys, lake, *args))
    assert says in err


def test_a_lake_without_silver_tables(spark, tmp_path, capsys) -> None:
    root = str(tmp_path / "bare")
    err = _one_line_error(*_image(capsys, root, "--cluster-id", CLUSTER, "--offset", "3"))
    assert f"run `kraft-replay replay --lake {Lake(root, spark, backend='deltars').root}`" in err


def test_offset_and_time_together_and_help(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["image", "--cluster-id", CLUSTER, "--offset", "1", "--time", "2024-05-01T10:00:00Z"])
    assert exc.value.code == 2 and "not allowed with argument" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["image", "--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0 and "examples:" in out and out.count("  kraft-replay image --lake") == 4
    assert "--broker B" in out and "--broker 3 --time" in out
