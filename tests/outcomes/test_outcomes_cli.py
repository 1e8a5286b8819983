"""``kraft-replay outcomes``: the gold tables published in one run from a replayed lake, a
summary on stdout, one-line errors (exit 2, nothing published) for a lake without replay, an unknown
cluster and a bad policy file; ``--only`` writes one proposal's tables."""

from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from kraft_replay.lake import Lake
from kraft_replay.outcomes.run import OUTCOME_TABLES
from kraft_replay.serve.cli import main


def test_outcomes_publishes_every_gold_table(gold_tiny_run) -> None:
    """The session's ``kraft-replay outcomes`` run (default policy) on the replayed tiny cluster."""
    lake, out = gold_tiny_run.lake, gold_tiny_run.outcomes_stdout
    assert "consistency_outcomes: " in out and "fencing_summary: " in out and "visible to readers" in out
    published = lake.published_versions()
    assert all(t in published for t in OUTCOME_TABLES), published
    requests = lake.read("metadata_requests").count()
    assert lake.read("consistency_outcomes").where("attempt = 0").count() == 3 * requests > 0
    assert lake.read("fencing_outcomes").count() > 0
    # one feature_discovery row per ApiVersions request, and the counts in the summary
    api_versions = lake.read("metadata_requests").where("api_key = 18").count()
    assert lake.read("feature_discovery").count() == api_versions > 0
    line = next(x for x in out.splitlines() if x.startswith("  feature_discovery: answered"))
    assert line.endswith(f"requests {api_versions:,}"), line


def test_policy_file_and_only(spark, replayed_tiny, capsys, tmp_path, monkeypatch) -> None:
    """... and a run on inputs this small computes with interpreted expressions (spark.sized_run),
    the session's setting restored after it."""
    import kraft_replay.outcomes.run as run
    from kraft_replay.spark import SMALL_RUN_CONF

    lake = replayed_tiny
    key = "spark.sql.codegen.factoryMode"
    modes: list[str | None] = []
    for name in ("fencing_outcomes", "write_fencing_outcomes"):  # the Spark write, or the workers' (embedded)
        monkeypatch.setattr(run, name, lambda *a, _f=getattr(run, name), **k: (modes.append(spark.conf.get(key, None)),
                                                                              _f(*a, **k))[1])
    session_mode = spark.conf.get(key, None)
    policy = tmp_path / "p.yaml"
    policy.write_text("max_attempts: 2\nretry_backoff_ms: 250\nretry_target: same\n")
    assert main(["--profile", "test", "outcomes", "--lake", lake.root, "--only", "consistency", "--policy", str(policy)]) == 0
    out = capsys.readouterr().out
    assert "consistency_outcomes: " in out and "visible to readers" in out
    got = lake.read("consistency_outcomes")
    # the policy file was used: at most 2 attempts, retries 250 ms after the answer, to the same broker
    retry = got.alias("r").join(got.alias("p"), ["cluster_id", "request_id", "policy"]).where("r.attempt = p.attempt + 1")
    assert got.agg(F.max("attempt")).first()[0] == 1 and retry.count() > 0
    assert retry.where("r.target_broker != p.target_broker OR "
                       "unix_micros(r.attempt_time) != unix_micros(p.response_time) + 250000").count() == 0
    assert got.where("attempt = 0").count() == 3 * lake.read("metadata_requests").count()
    before = lake.published_versions()
    # --only fencing: the fencing tables get a new version, the consistency ones keep theirs; the
    # lookups' broadcast (built by the job from Arrow reads of its inputs) is destroyed once the tables
    # are written
    made = []
    make = run.broadcast_read_steps
    monkeypatch.setattr(run, "broadcast_read_steps", lambda *a: (made.append(make(*a)), made[-1])[1])
    capsys.readouterr()
    assert main(["--profile", "test", "outcomes", "--lake", lake.root, "--only", "fencing", "--json"]) == 0
    assert len(made) == 1 and not made[0]._jbroadcast.isValid()
    doc = json.loads(capsys.readouterr().out)  # --json: the summary as one object
    assert set(doc["rows"]) == {"fencing_outcomes", "fencing_summary"} and doc["rows"]["fencing_outcomes"] > 0
    assert modes == [SMALL_RUN_CONF[key]] and spark.conf.get(key, None) == session_mode != SMALL_RUN_CONF[key]
    after = lake.published_versions()
    assert after["fencing_outcomes"] > before.get("fencing_outcomes", 0)
    assert after["consistency_outcomes"] == before["consistency_outcomes"]


@pytest.mark.parametrize("args, message", [
    (["--cluster-id", "nOsUcHcLuStEr"], "cluster 'nOsUcHcLuStEr' has not been replayed in lake"),
    (["--policy", "/nonexistent/p.yaml"], "--policy: [Errno 2] No such file or directory"),
    (["--only", "tokens"], "argument --only: invalid choice: 'tokens'"),
])
def test_bad_input_is_one_line(spark, replayed_tiny, capsys, args, message) -> None:
    before = replayed_tiny.published_versions()
    with pytest.raises(SystemExit) if args[0] == "--only" else nullcontext():
        code = main(["--profile", "test", "outcomes", "--lake", replayed_tiny.root, *args])
        assert code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert replayed_tiny.published_versions() == before


def test_a_lake_without_replay_names_the_command_to_run(spark, tmp_path, capsys) -> None:
    Lake(str(tmp_path / "empty"), spark, backend="deltars")
    assert main(["--profile", "test", "outcomes", "--lake", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "table log_batches is missing: run `kraft-replay replay --lake" in err[0]



def test_fencing_written_by_the_workers_equals_the_frame(spark, replayed_tiny, monkeypatch) -> None:
    """On the embedded backend the workers write ``fencing_outcomes`` themselves (a staged write the
    job commits) and hand back their shares of the summary: the tables hold exactly the rows of
    ``fencing_outcomes`` / ``fencing_summary`` computed as frames; the staged files are the table's
    files. A run failing at the commit leaves no staging directory and the published tables as they were."""
    from chispa import assert_df_equality
    from deltalake import DeltaTable

    from kraft_replay.outcomes.fencing import fencing_outcomes, fencing_summary
    from kraft_replay.outcomes.run import run_outcomes

    lake = replayed_tiny
    assert lake.backend == "deltars"
    table_dir = Path(lake.root) / "fencing_outcomes"
    earlier = {p.name for p in table_dir.glob("kr_write=*")}  # other tests' runs (replaced, not vacuumed)
    s = run_outcomes(spark, lake, only="fencing")
    want = fencing_outcomes(*(lake.read(t) for t in ("produce_requests", "broker_applied", "brokers", "log_batches",
                                                      "partitions")))
    got = lake.read("fencing_outcomes")
    assert got.columns == want.columns and s.rows["fencing_outcomes"] == want.count() > 0
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)
    assert_df_equality(lake.read("fencing_summary"), fencing_summary(want), ignore_row_order=True, ignore_nullable=True)
    assert sum(s.counts["fencing_outcomes"].values()) == 2 * want.count()
    staged = {p.name for p in table_dir.glob("kr_write=*")}
    adopted = {u.split("/fencing_outcomes/", 1)[1].split("/")[0] for u in DeltaTable(str(table_dir)).file_uris()}
    assert staged - earlier and staged - earlier == adopted, (staged, earlier, adopted)

    before = lake.published_versions()
    commit = lake.commit_staged

    def failing(sink, **kw):  # noqa: ANN001, ANN003, ANN202
        assert list(Path(sink.path).rglob("*.parquet"))  # the workers wrote their files
        raise RuntimeError("disk full")

    monkeypatch.setattr(lake, "commit_staged", failing)
    with pytest.raises(RuntimeError, match="disk full"):
        run_outcomes(spark, lake, only="fencing")
    monkeypatch.setattr(lake, "commit_staged", commit)
    assert {p.name for p in table_dir.glob("kr_write=*")} == staged  # the failed run's staging directory is gone
    assert lake.published_versions() == before
