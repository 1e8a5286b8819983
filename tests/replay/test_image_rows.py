"""``image_snapshots`` rows on Arrow (:mod:`kraft_replay.replay.image_rows`, what the live path's kernel
emits) equal the batch replay's Spark implementation (:func:`kraft_replay.replay.images.image_snapshots`):
the JSON text of values of every type the versioned tables hold, against Spark's ``to_json``; and the
images of every hand-built scenario's sequential replay, row by row, against ``image_snapshots`` of the
same versions (the step-by-step images are held equal to the whole replay's in test_replay_live.py)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "oracle"))

from bronze_builder import BronzeLog, change, mv, partition, topic  # noqa: E402
from replay_oracle import replay  # noqa: E402
from replay_scenarios import SCENARIOS, base_cluster  # noqa: E402

from kraft_replay.ingest.tables import arrow_df  # noqa: E402
from kraft_replay.replay.features import DEFAULT_MV_LEVEL  # noqa: E402
from kraft_replay.replay.image_rows import image_rows, json_text, mv_changes  # noqa: E402
from kraft_replay.replay.images import image_snapshots  # noqa: E402
from kraft_replay.replay.losses import MIGRATING_DIR  # noqa: E402
from kraft_replay.replay.schemas import IMAGE_SNAPSHOTS_SCHEMA, REQUESTED, VERSIONED_TABLES  # noqa: E402

T9 = "T9T9T9T9T9T9T9T9T9T9Tw"


def _doubles() -> list[float]:
    rnd = random.Random(7)
    fixed = [0.0, -0.0, 1.0, -3.0, 0.1, 100.0, 123.456, 1 / 3, 0.001, 0.00099, 1.5e-5, 2.5e-10, 5e-324,
             1048576.0, 9999999.0, 9999999.999, 1e7, 12345678.9, 2.0 ** 53, 1e21, 1e300, 1.7976931348623157e308]
    return fixed + [rnd.uniform(-1, 1) * 10 ** rnd.randint(-12, 12) for _ in range(200)]


def test_json_text_is_sparks_to_json(spark) -> None:
    """Doubles (Java's notation on either side of 10^-3 and 10^7, random ones over 24 decades), strings
    with quotes, backslashes, control characters and non-ASCII, integers of each width, booleans,
    lists with null elements and lists of structs with null fields: each written as Spark's ``to_json``
    of a struct writes it."""
    strings = ["plain", 'quote"', "back\\slash", "\n\t\r\b\f", "\x01\x1f\x7f", "ünïcødé €", "\u2028 \U0001F600",
               "\\u00ab", "", None]
    doubles = _doubles()
    n = max(len(doubles), len(strings))
    rnd = random.Random(11)
    end_point = pa.struct([("name", pa.string()), ("host", pa.string()), ("port", pa.int32())])
    schema = pa.schema([
        ("d", pa.float64()), ("s", pa.string()), ("b", pa.int8()), ("h", pa.int16()), ("i", pa.int32()),
        ("l", pa.int64()), ("t", pa.bool_()), ("li", pa.list_(pa.int32())), ("ls", pa.list_(pa.string())),
        ("le", pa.list_(end_point))])
    rows = []
    for k in range(n):
        rows.append({
            "d": doubles[k % len(doubles)], "s": strings[k % len(strings)], "b": rnd.randint(-128, 127),
            "h": rnd.randint(-32768, 32767), "i": rnd.randint(-2 ** 31, 2 ** 31 - 1), "l": rnd.randint(-2 ** 63, 2 ** 63 - 1),
            "t": rnd.random() < 0.5, "li": [1, None, -2] if k % 3 else [], "ls": None if k % 4 == 0 else ["a", None, strings[k % 9]],
            "le": [{"name": "PLAINTEXT", "host": None if k % 2 else "h", "port": 9092}, None] if k % 5 else None})
    table = pa.Table.from_pylist(rows, schema=schema)
    df = arrow_df(spark, table)
    got = df.select(*[F.to_json(F.struct(F.col(c))).alias(c) for c in schema.names]).toArrow().to_pylist()
    assert len(got) == n
    for want_row, row in zip(got, rows, strict=True):
        for f in schema:
            assert json_text({f.name: row[f.name]}, pa.struct([f])) == want_row[f.name], (f.name, row[f.name])


def _downgraded() -> BronzeLog:
    """A cluster upgraded to 4.0-IV1 (23) with a partition holding a real directory and an ELR, then
    downgraded to 3.7-IV1 (16): the image at the downgrade lists what its snapshot drops."""
    b = BronzeLog("downgraded")
    base_cluster(b)
    b.batch(mv(23))
    b.batch(topic("nine", T9), partition(T9, 0, [1, 2, 3], directories=["b2Z0ZW4tcmVhbC1kaXItMDE", MIGRATING_DIR,
                                                                        MIGRATING_DIR]))
    b.batch(change(T9, 0, isr=[1], eligible_leader_replicas=[2]))
    b.batch(mv(16))
    return b


def test_image_rows_equal_sparks_image_snapshots(spark) -> None:
    """Every hand-built scenario (client quotas with double values, delegation tokens, SCRAM
    credentials, controllers, snapshots, transactions) and a lossy downgrade: the images at every
    metadata.version change, row by row, with ``dropped``."""
    results = {name: replay(*make().tables()) for name, make in sorted(SCENARIOS.items())}
    results["downgraded"] = replay(*_downgraded().tables())
    ours, asked = [], []
    for name, r in results.items():
        versions = {t: r[t] for t in VERSIONED_TABLES}
        ours.append(image_rows(name, versions, mv_changes(versions["features"])))
        # and the image at the log's end, asked for (every entity the scenario leaves)
        end = max(pc.max(r[t].column("valid_from_offset")).as_py() or 0 for t in VERSIONED_TABLES if r[t].num_rows)
        levels = [lv for o, lv in mv_changes(versions["features"]) if o <= end]
        ours.append(image_rows(name, versions, [(end, levels[-1] if levels else DEFAULT_MV_LEVEL)], trigger=REQUESTED))
        asked.append((name, end))
    ours = pa.concat_tables(ours)
    frames = {t: arrow_df(spark, pa.concat_tables([r[t] for r in results.values()])) for t in VERSIONED_TABLES}
    requested = spark.createDataFrame(asked, "cluster_id string, image_offset long")
    theirs = image_snapshots(frames, requested).toArrow().cast(IMAGE_SNAPSHOTS_SCHEMA)
    assert ours.num_rows == theirs.num_rows > 200
    assert {"topics", "partitions", "brokers", "controllers", "features", "configs", "client_quotas", "scram_credentials",
            "delegation_tokens", "producer_ids"} <= set(ours.column("domain").to_pylist())

    def key(r: dict) -> tuple:
        return r["cluster_id"], r["image_offset"], r["trigger"], r["domain"], r["entity_key"]
    mine, spark_rows = sorted(ours.to_pylist(), key=key), sorted(theirs.to_pylist(), key=key)
    for a, b in zip(mine, spark_rows, strict=True):
        assert a == b, (a, b)
    downgrade = [r for r in mine if r["cluster_id"] == "downgraded" and r["metadata_version_level"] == 16
                 and r["domain"] == "partitions"]
    assert [d["field"] for d in downgrade[-1]["dropped"]] == ["directories", "eligible_leader_replicas"], downgrade
