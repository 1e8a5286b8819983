"""Outcomes benchmark (issues 12, 13): the gold tables of seeds 000, 003, 004/001 and 002 computed by Spark
from a replayed scenario, and the sequential reference implementations (tests/oracle/) on the same rows,
in one run; and the latency of the what-if checker (``kraft-replay features check``) on that lake.

    flock /tmp/kraft-heavy.lock .venv/bin/python bench/outcomes.py [--scenario medium] [--requests N]
        [--only consistency,fencing,features,broker_states,discovery] [--no-oracle] [--oracle-only]
        [--oracle-slices N] [--driver-memory 8g] [--data-dir DIR]

The scenario is generated (``--requests N`` sets both request tables' counts) and replayed once into a
lake cached in ``--data-dir``. A child process then runs ``kraft-replay outcomes`` one proposal at a
time (compute + write + publish of ``<proposal>_outcomes`` and ``<proposal>_summary``), printing wall
time, requests/s and the peak RSS of its process tree; its JVM is gone before the oracles run on the
same rows (read with delta-rs; at 10M requests ``--oracle-slices 20`` hands the consistency and fencing
references their requests in slices of whole scopes, each cluster's lookups built once, the times
summed). Prints the ratio per proposal. Target: ≥ 5× the sequential reference
(10M metadata + 10M produce requests over a 10M-record log). Speed is measured here, never asserted in
tests.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from replay import PeakRss, child_result  # noqa: E402

#: proposal -> the table whose rows it judges (requests/s are counted on it)
PROPOSALS = {"consistency": "metadata_requests", "fencing": "produce_requests", "features": "feature_update_requests",
             "broker_states": "brokers", "discovery": "metadata_requests"}


def replayed_lake(args: argparse.Namespace) -> Path:
    """The scenario (request counts overridden) generated and replayed once, cached in ``--data-dir``."""
    tag = args.scenario + (f"-r{args.requests}" if args.requests else "")
    lake = args.data_dir / f"replayed-{tag}"
    if (lake / "_replayed").exists():
        return lake
    scen = yaml.safe_load((ROOT / "conf" / "scenarios" / f"{args.scenario}.yaml").read_text())
    if args.requests:
        scen["metadata_requests"]["count"] = scen["produce_requests"]["count"] = args.requests
    path = args.data_dir / f"{tag}.yaml"
    path.write_text(yaml.safe_dump(scen))
    # the local profile with --driver-memory (a 10M-record replay needs more than its 4g)
    prof = yaml.safe_load((ROOT / "conf" / "local.yaml").read_text())
    prof["spark"]["driver_memory"] = args.driver_memory
    prof_path = args.data_dir / "bench-profile.yaml"
    prof_path.write_text(yaml.safe_dump(prof))
    cli = [sys.executable, "-m", "kraft_replay.serve.cli", "--lake", str(lake), "--profile", str(prof_path)]
    for step, marker in ((["generate", "--scenario", str(path)], "_generated"), (["replay"], "_replayed")):
        if (lake / marker).exists():
            continue
        if step[0] == "generate":
            shutil.rmtree(lake, ignore_errors=True)
            lake.mkdir(parents=True)
        t = time.perf_counter()
        subprocess.run([*cli, *step], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        print(f"{step[0]}: {time.perf_counter() - t:.1f}s", flush=True)
        (lake / marker).touch()
    return lake


def spark_phase(args: argparse.Namespace, lake_root: Path) -> dict:
    from kraft_replay.lake import Lake
    from kraft_replay.outcomes.consistency import load_retry_policy
    from kraft_replay.outcomes.run import run_outcomes
    from kraft_replay.spark import get_spark

    spark = get_spark(args.profile, **{"spark.driver.memory": args.driver_memory})
    lake = Lake(str(lake_root), spark, backend="deltars")
    out = {}
    for p, req in PROPOSALS.items():
        if p not in args.only:
            continue
        n = (lake.read(req).where("api_key = 18") if p == "discovery" else lake.read(req)).count()
        with PeakRss() as rss:
            t = time.perf_counter()
            s = run_outcomes(spark, lake, only=p, policy=load_retry_policy(), say=lambda line: print(line, flush=True))
            secs = time.perf_counter() - t
        out[p] = {"requests": n, "s": secs, "rss": rss.peak, "rows": s.rows}
        print(f"spark {p}: {n:,} requests in {secs:.1f}s ({n / secs:,.0f}/s), peak RSS {rss.peak / 2**30:.2f} GiB, "
              f"rows {s.rows}", flush=True)
    spark.stop()
    return out


def what_if_latency(lake: Path) -> dict:
    """``kraft-replay features check`` on the lake's first cluster at its log end: an upgrade and a lossy
    metadata.version downgrade, each run in this process (the lake read afresh every time; the first run
    is a warm-up of the imports), and each as the CLI from a cold start (a new Python process: imports,
    the offset, the reads, the check, the report)."""
    from kraft_replay.lake.reader import LakeReader
    from kraft_replay.serve.cmd_features import _as_of, check

    reader = LakeReader(str(lake))
    cluster = reader.scan("log_commit", columns=["cluster_id"]).column(0)[0].as_py()
    specs = {"upgrade": ("metadata.version", 22, "UPGRADE"), "downgrade": ("metadata.version", 15, "UNSAFE_DOWNGRADE")}
    check(reader, cluster, [specs["downgrade"]], _as_of(reader, cluster, None))  # warm-up
    out = {}
    for name, spec in specs.items():
        t = time.perf_counter()
        res = check(reader, cluster, [spec], _as_of(reader, cluster, None))
        out[name] = time.perf_counter() - t
        t = time.perf_counter()
        cli = subprocess.run([sys.executable, "-m", "kraft_replay.serve.cli", "features", "check", "--lake", str(lake),
                              "--cluster-id", cluster, "--json", f"{spec[0]}={spec[1]}:{spec[2]}"],
                             capture_output=True, text=True)
        out[f"{name}_cli"] = time.perf_counter() - t
        if cli.returncode not in (0, 1) or json.loads(cli.stdout)["kafka"] != res["kafka"]:
            raise SystemExit(f"what-if CLI failed (exit {cli.returncode}): {cli.stderr.strip()[-300:]}")
        print(f"what-if {name} {spec}: {out[name]:.2f}s in process, {out[f'{name}_cli']:.2f}s as a cold CLI "
              f"({res['kafka']['outcome']}, {len(res['losses'])} losses)", flush=True)
    return out


def _rows(lake: Path, table: str, where_cols: list[str] | None = None) -> list[dict]:
    from deltalake import DeltaTable

    return DeltaTable(str(lake / table)).to_pyarrow_table(columns=where_cols).to_pylist()


def _partitions_at_requests(lake: Path, requests: list[dict], log_batches: list[dict]) -> list[dict]:
    """The ``partitions`` versions (the columns the lossy check reads) in force at the offset each feature
    update request is validated at (the last offset appended strictly before it): the only ones the
    reference's loss check can read. All 9.5M versions of ``medium`` as Python dicts do not fit in
    24 GiB; Spark is given the whole table, so this pre-filter favours the reference."""
    import bisect

    import pyarrow.compute as pc
    from deltalake import DeltaTable

    ends: dict[str, tuple[list, list]] = {}
    for cid in {b["cluster_id"] for b in log_batches}:
        bs = sorted((b["append_time"], b["batch_last_offset"]) for b in log_batches if b["cluster_id"] == cid)
        best, run = [], -1
        for _, o in bs:
            run = max(run, o)
            best.append(run)
        ends[cid] = ([t for t, _ in bs], best)
    cond = None
    for r in requests:
        times, best = ends.get(r["cluster_id"], ([], []))
        i = bisect.bisect_left(times, r["request_time"])  # batches appended strictly before the request
        if i == 0:
            continue
        o = best[i - 1]
        c = ((pc.field("cluster_id") == r["cluster_id"]) & (pc.field("valid_from_offset") <= o)
             & (pc.field("valid_to_offset").is_null() | (pc.field("valid_to_offset") > o)))
        cond = c if cond is None else cond | c
    if cond is None:
        return []
    cols = _VERSION + ["valid_to_offset", "topic_id", "partition_id", "directories", "eligible_leader_replicas",
                       "last_known_elr"]
    return DeltaTable(str(lake / "partitions")).to_pyarrow_dataset().to_table(
        columns=list(dict.fromkeys(cols)), filter=cond).to_pylist()


_VERSION = ["cluster_id", "deleted", "valid_from_offset", "valid_to_offset", "valid_from_time", "record_offset"]
_KEYS = {"partitions": ["topic_id", "partition_id", "leader", "leader_epoch"], "acls": ["id"],
         "configs": ["resource_type", "resource_name", "name"], "delegation_tokens": ["token_id"],
         "client_quotas": ["entity_key", "key"], "scram_credentials": ["name", "mechanism"], "brokers": ["broker_id"]}


def oracle_phase(lake: Path, only: list[str], slices: int = 1) -> dict:
    sys.path.insert(0, str(ROOT / "tests" / "oracle"))
    import consistency_oracle
    import fencing_oracle

    from kraft_replay.outcomes.consistency import STALE_DOMAINS, load_retry_policy

    pol = load_retry_policy()
    out = {}
    # only the columns the references read: at 10M log records the tables as Python dicts are large
    if {"consistency", "fencing"} & set(only):
        common = {"broker_applied": _rows(lake, "broker_applied", ["cluster_id", "broker_id", "from_time", "to_time",
                                                                    "state", "applied_offset"]),
                  "brokers": _rows(lake, "brokers", _VERSION + _KEYS["brokers"]),
                  "log_batches": _rows(lake, "log_batches", ["cluster_id", "batch_base_offset", "batch_last_offset",
                                                             "append_time"])}
    if "consistency" in only:
        with PeakRss() as rss:
            domains = {d: _rows(lake, d, _VERSION + _KEYS[d]) for d in STALE_DOMAINS}
            cache: dict = {}  # each cluster's lookups, built once (in the first slice's time)
            secs = 0.0
            for reqs in _slices(lake, "metadata_requests", slices, by_scope=True):
                t = time.perf_counter()
                rows = consistency_oracle.consistency_outcomes(reqs, common["broker_applied"], common["brokers"],
                                                               common["log_batches"], domains, pol.max_attempts,
                                                               pol.retry_backoff_ms, pol.retry_target, clusters=cache)
                consistency_oracle.consistency_summary(rows, reqs)
                secs += time.perf_counter() - t
                del reqs, rows
            out["consistency"] = {"s": secs, "rss": rss.peak}
        del domains, cache
    if "features" in only:
        import features_oracle

        with PeakRss() as rss:
            t_read = {n: _rows(lake, n) for n in ("feature_update_requests", "features", "brokers", "controllers",
                                                    "zk_migration_state", "metadata_control", "scram_credentials",
                                                    "delegation_tokens", "scenario_events")}
            lb = _rows(lake, "log_batches", ["cluster_id", "batch_base_offset", "batch_last_offset", "append_time"])
            parts = _partitions_at_requests(lake, t_read["feature_update_requests"], lb)
            t = time.perf_counter()
            features_oracle.feature_transitions(t_read["features"], t_read["brokers"], t_read["controllers"])
            features_oracle.feature_protection_violations(t_read["features"], t_read["brokers"])
            features_oracle.feature_update_outcomes(
                t_read["feature_update_requests"], t_read["features"], t_read["brokers"], t_read["controllers"],
                t_read["zk_migration_state"], lb, t_read["metadata_control"], parts, t_read["scram_credentials"],
                t_read["delegation_tokens"], t_read["scenario_events"])
            out["features"] = {"s": time.perf_counter() - t, "rss": rss.peak}
        del t_read, lb, parts
    if "broker_states" in only:
        import broker_states_oracle

        with PeakRss() as rss:  # the columns the reference reads (7M broker_applied rows at 10M records)
            args_ = [_rows(lake, n, cols) if (lake / n).exists() else None for n, cols in (
                ("brokers", _VERSION + ["valid_to_time", "broker_id", "fenced", "in_controlled_shutdown", "broker_epoch",
                                        "incarnation_id"]),
                ("broker_applied", ["cluster_id", "broker_id", "from_time", "to_time", "state"]),
                ("metadata_requests", ["cluster_id", "target_broker", "request_time"]),
                ("produce_requests", ["cluster_id", "target_broker", "request_time"]))]
            t = time.perf_counter()
            broker_states_oracle.broker_states(*args_)
            out["broker_states"] = {"s": time.perf_counter() - t, "rss": rss.peak}
        del args_
    if "discovery" in only:
        import discovery_oracle

        with PeakRss() as rss:
            reqs = [r for r in _rows(lake, "metadata_requests") if r["api_key"] == 18]
            d_read = {n: _rows(lake, n) for n in ("broker_applied", "brokers", "log_batches", "features", "metadata_control")}
            t = time.perf_counter()
            rows = discovery_oracle.feature_discovery(reqs, d_read["broker_applied"], d_read["brokers"],
                                                      d_read["log_batches"], d_read["features"], d_read["metadata_control"])
            discovery_oracle.feature_discovery_summary(
                rows, discovery_oracle.feature_timeline(d_read["features"], d_read["metadata_control"]))
            out["discovery"] = {"s": time.perf_counter() - t, "rss": rss.peak}
        del reqs, d_read, rows
    if "fencing" not in only:
        return out
    with PeakRss() as rss:
        parts = _rows(lake, "partitions", _VERSION + _KEYS["partitions"] + ["replicas", "isr", "leader_recovery_state"])
        index: dict = {}
        secs = 0.0
        for reqs in _slices(lake, "produce_requests", slices):
            t = time.perf_counter()
            rows = fencing_oracle.fencing_outcomes(reqs, common["broker_applied"], common["brokers"],
                                                   common["log_batches"], parts, index=index)
            fencing_oracle.fencing_summary(rows)
            secs += time.perf_counter() - t
            del reqs, rows
        out["fencing"] = {"s": secs, "rss": rss.peak}
    return out


def _slices(lake: Path, table: str, n: int, by_scope: bool = False):  # noqa: ANN202 - a generator of row lists
    """The request table's rows in ``n`` slices (each read as Python dicts when its turn comes): 10M
    requests and their outcome rows as dicts do not fit in 24 GiB at once. Fencing rows depend on their
    own request only; consistency rows on their scope's answers only, so ``by_scope`` keeps every scope
    (the context group of a client using tokens, else the client) in one slice."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    if n <= 1:
        yield _rows(lake, table)
        return
    tab = DeltaTable(str(lake / table)).to_pyarrow_table()
    if by_scope:
        uses = pc.fill_null(tab["uses_consistency_token"], False)
        scope = pc.if_else(pc.and_(uses, pc.is_valid(tab["context_group"])), tab["context_group"], tab["client_id"])
        key = pc.dictionary_encode(scope).combine_chunks().indices
    else:
        import pyarrow as pa
        key = pa.array(range(tab.num_rows))
    which = pc.remainder(key, n)
    for k in range(n):
        yield tab.filter(pc.equal(which, k)).to_pylist()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default="medium")
    ap.add_argument("--requests", type=int, default=None, help="metadata and produce requests each (default: the scenario's)")
    ap.add_argument("--no-oracle", action="store_true")
    ap.add_argument("--only", default=",".join(PROPOSALS), type=lambda v: [x for x in v.split(",") if x],
                    help=f"comma-separated proposals (default: all of {', '.join(PROPOSALS)})")
    ap.add_argument("--profile", default="local")
    ap.add_argument("--driver-memory", default="8g")
    ap.add_argument("--data-dir", type=Path, default=Path(tempfile.gettempdir()) / "kraft-replay-bench-outcomes")
    ap.add_argument("--oracle-only", action="store_true", help="run the sequential references only")
    ap.add_argument("--oracle-slices", type=int, default=1,
                    help="give the consistency and fencing references their requests in N slices (whole scopes), "
                         "each cluster's lookups built once: 10M requests as Python dicts do not fit in memory at once")
    ap.add_argument("--spark-phase", action="store_true", help=argparse.SUPPRESS)  # internal: the child
    args = ap.parse_args()
    args.data_dir.mkdir(parents=True, exist_ok=True)
    lake = replayed_lake(args)
    if args.oracle_only:  # the references alone (e.g. after a Spark run whose figures are known)
        for p, o in oracle_phase(lake, args.only, args.oracle_slices).items():
            print(f"{p}: sequential reference {o['s']:.1f}s, peak RSS {o['rss'] / 2**30:.2f} GiB")
        return 0
    if args.spark_phase:
        print("RESULT " + json.dumps(spark_phase(args, lake)), flush=True)
        return 0
    result = child_result([sys.executable, __file__, *sys.argv[1:], "--spark-phase"])
    if result is None:
        return 1
    w = what_if_latency(lake) if "features" in args.only else None
    if w is not None:
        print(f"what-if checker: upgrade {w['upgrade']:.2f}s, lossy downgrade {w['downgrade']:.2f}s in process; "
              f"{w['upgrade_cli']:.2f}s / {w['downgrade_cli']:.2f}s as a cold CLI (target: a few s)")
    if args.no_oracle:
        return 0
    oracle = oracle_phase(lake, args.only, args.oracle_slices)
    for p, r in result.items():
        o = oracle[p]
        print(f"{p}: spark {r['s']:.1f}s ({r['requests'] / r['s']:,.0f} requests/s, peak RSS {r['rss'] / 2**30:.2f} GiB); "
              f"sequential reference {o['s']:.1f}s ({r['requests'] / o['s']:,.0f}/s, peak RSS {o['rss'] / 2**30:.2f} GiB); "
              f"spark is {o['s'] / r['s']:.2f}x the reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
