"""Shared fixtures: one SparkSession for the whole test session, tmp lakes, the reference dir, and the
``tiny`` scenario generated once, end to end through the CLI's entry point (``kraft-replay --profile test
generate --scenario tiny --lake DIR --segments-out DIR --json``, run in the worker on its session: the
command as a process is what the README's quick start runs), into a temporary lake the tests open."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("KRAFT_REPLAY_SHARED", ROOT.parent / "shared"))
REFERENCE = SHARED / "reference"

#: Every JVM the suite starts (its sessions, and the CLI, Airflow and cluster processes it runs, which
#: inherit the variable) compiles with C1 only: on the suite's small runs the optimising compiler's
#: threads took more CPU than the work (a hand-built cluster's outcomes: 49 s of C2 in 110 s of JVM
#: CPU), and the suite's two workers share two cores (docs/benchmarks.md, "Test suite"). Nor does it
#: flush cold compiled code (a larger code cache instead): in a worker's long-lived JVM the sweeper and
#: the recompiling of what it flushed took 25 of 278 s of CPU in one module (test_replay_generated).
#: And it collects with the serial collector: G1's concurrent threads cost most while a JVM warms up, and
#: most of the suite's JVMs are young (a cold tiny replay 59.5 s against 67.4 s with G1, in pairs).
JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:-UseCodeCacheFlushing -XX:ReservedCodeCacheSize=512m -XX:+UseSerialGC"
os.environ.setdefault("KRAFT_REPLAY_JAVA_OPTIONS", JAVA_OPTIONS)


@pytest.fixture(scope="session")
def spark():
    from kraft_replay.spark import get_spark

    # with the delta-spark jars fetched at set-up (tests/lake runs its tests on both backends); the
    # test profile's backend stays the embedded one, so every other test writes through delta-rs
    session = get_spark("test", delta=True)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def reference_dir() -> Path:
    """../shared/reference (third-party data; never copied into the project)."""
    if not (REFERENCE / "kafka-kraft-facts.md").is_file():
        pytest.skip(f"reference data not found at {REFERENCE}: clone the project with ../shared beside it")
    return REFERENCE


@pytest.fixture(scope="session")
def schemas_dir(reference_dir: Path) -> Path:
    return reference_dir / "kafka-metadata-schemas"


@pytest.fixture(scope="session")
def real_kraft_dir(reference_dir: Path) -> Path:
    return reference_dir / "real-kraft"

@dataclass
class CliResult:
    """What the tests need of a generate run: the plan (rebuilt: planning is deterministic) and the row
    counts the CLI printed."""

    plan: object
    rows: dict[str, int] = field(default_factory=dict)


@dataclass
class Generated:
    lake: object
    result: CliResult
    segments_dir: Path
    cluster_id: str
    lake_dir: Path
    process: subprocess.CompletedProcess  # the command's argv, exit code, stdout and stderr


def run_cli_here(argv: list[str]) -> subprocess.CompletedProcess:
    """``kraft-replay ARGV`` through the CLI's ``main`` in this process (its SparkSession: no JVM to start),
    with what it printed on stdout and stderr."""
    import contextlib
    import io

    from kraft_replay.serve.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return subprocess.CompletedProcess(["kraft-replay", *argv], code, out.getvalue(), err.getvalue())


def shared_once(tmp_path_factory, name: str, build) -> tuple[Path, dict]:  # noqa: ANN001
    """What ``build(directory) -> dict`` makes, made once for the test run: under ``pytest -n N`` (xdist)
    the first worker to ask builds it in the run's shared temp directory while the others wait on a
    file lock, then all read it (``(directory, the dict)``). A build that failed is tried again by the
    next asker (and fails the same way there). Readers treat the directory as read only: a test that
    writes works on a copy (:func:`private_copy`)."""
    import fcntl

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    target, done = shared / f"shared-{name}", shared / f"shared-{name}.json"
    with open(shared / f"shared-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.is_file():
            import shutil

            shutil.rmtree(target, ignore_errors=True)
            target.mkdir()
            doc = build(target)
            tmp = done.with_suffix(".tmp")
            tmp.write_text(json.dumps(doc))
            os.replace(tmp, done)
    return target, json.loads(done.read_text())


def private_copy(tmp_path_factory, source: Path, name: str) -> Path:  # noqa: ANN001
    """A copy of a shared lake (:func:`shared_once`) for this worker's tests to write in."""
    import shutil

    root = tmp_path_factory.mktemp(name) / "lake"
    shutil.copytree(source, root)
    return root


@pytest.fixture(scope="session")
def tiny_generated(spark, tmp_path_factory) -> Generated:
    """The ``tiny`` scenario generated once for the test run by ``kraft-replay generate`` (the CLI's
    entry point, in the worker that builds it first): its lake (read only) and its segment files."""
    from kraft_replay.generate.plan import build_plan
    from kraft_replay.generate.scenario import load_scenario
    from kraft_replay.lake import Lake

    def build(root: Path) -> dict:
        proc = run_cli_here(["--profile", "test", "generate", "--scenario", "tiny", "--lake", str(root / "lake"),
                             "--segments-out", str(root / "segments"), "--json"])
        assert proc.returncode == 0, f"kraft-replay generate failed ({proc.returncode}): {proc.stderr[-3000:]}"
        doc = json.loads(proc.stdout)  # --json: the summary is the only thing on stdout
        assert (doc["scenario"], doc["lake"], len(doc["segment_files"])) == ("tiny", str(root / "lake"), 9), doc
        return {"doc": doc, "args": proc.args, "stdout": proc.stdout, "stderr": proc.stderr}

    root, made = shared_once(tmp_path_factory, "tiny-generated", build)
    proc = subprocess.CompletedProcess(made["args"], 0, made["stdout"], made["stderr"])
    lake = Lake(str(root / "lake"), spark, backend="deltars")
    sc = load_scenario("tiny")
    return Generated(lake, CliResult(build_plan(sc), made["doc"]["rows"]), root / "segments", sc.cluster_id,
                     root / "lake", proc)


# --- the tiny cluster replayed (outcome, SQL and report tests) ---------------------------------------

def _replayed_tiny_master(spark, tiny_generated, tmp_path_factory) -> Path:  # noqa: ANN001
    """The tiny cluster replayed, once for the test run (read only)."""
    import shutil

    from kraft_replay.lake import Lake
    from kraft_replay.replay import run_replay

    def build(root: Path) -> dict:
        import pyarrow.parquet as pq

        shutil.copytree(tiny_generated.lake_dir, root / "lake")
        summary = run_replay(spark, Lake(str(root / "lake"), spark, backend="deltars"), say=lambda _: None)
        pq.write_table(summary.leader_changes, root / LEADER_CHANGES)  # what `kraft-replay replay` hands cache_lag
        return {}

    return shared_once(tmp_path_factory, "replayed-tiny", build)[0] / "lake"


#: beside the replayed tiny lake: the leader changes its replay found (``ReplaySummary.leader_changes``)
LEADER_CHANGES = "leader_changes.parquet"


@pytest.fixture(scope="session")
def tiny_leader_changes(spark, tiny_generated, tmp_path_factory):  # noqa: ANN201 - a pyarrow Table
    """The leader changes the tiny cluster's replay found (``ReplaySummary.leader_changes``)."""
    import pyarrow.parquet as pq

    return pq.read_table(_replayed_tiny_master(spark, tiny_generated, tmp_path_factory).parent / LEADER_CHANGES)


@pytest.fixture(scope="session")
def replayed_tiny(spark, tiny_generated, tmp_path_factory) -> "Lake":  # noqa: F821 - kraft_replay.lake.Lake
    """The ``tiny`` scenario (the run's CLI-generated lake) replayed, once for the test run; this
    worker's copy, which its tests may rewrite."""
    from kraft_replay.lake import Lake

    master = _replayed_tiny_master(spark, tiny_generated, tmp_path_factory)
    return Lake(str(private_copy(tmp_path_factory, master, "replayed-tiny")), spark, backend="deltars")


@dataclass
class GoldRun:
    lake: object
    outcomes_stdout: str  # what ``kraft-replay outcomes`` printed


@pytest.fixture(scope="session")
def gold_tiny_run(spark, tiny_generated, tmp_path_factory) -> GoldRun:
    """The replayed tiny cluster with every gold table written with the defaults, once for the test
    run: the outcomes by ``kraft-replay outcomes`` (default policy; its stdout kept) and ``cache_lag``
    (1 s buckets). Read only (tests that rewrite gold tables with other settings use
    ``replayed_tiny``)."""
    import shutil

    import pyarrow.parquet as pq

    from kraft_replay.lake import Lake
    from kraft_replay.outcomes.cache_lag import write_cache_lag

    master = _replayed_tiny_master(spark, tiny_generated, tmp_path_factory)

    def build(root: Path) -> dict:
        shutil.copytree(master, root / "lake")
        lake = Lake(str(root / "lake"), spark, backend="deltars")
        proc = run_cli_here(["--profile", "test", "outcomes", "--lake", lake.root])
        assert proc.returncode == 0, proc.stderr[-3000:]
        clusters = [r.cluster_id for r in lake.read("log_commit").select("cluster_id").distinct().collect()]
        # as `kraft-replay replay` writes it: with the leader changes its replay found
        write_cache_lag(lake, clusters, say=lambda _: None, changes=pq.read_table(master.parent / LEADER_CHANGES))
        return {"outcomes_stdout": proc.stdout}

    root, made = shared_once(tmp_path_factory, "gold-tiny", build)
    return GoldRun(Lake(str(root / "lake"), spark, backend="deltars"), made["outcomes_stdout"])


@pytest.fixture(scope="session")
def gold_tiny(gold_tiny_run) -> "Lake":  # noqa: F821 - kraft_replay.lake.Lake
    """The lake of :func:`gold_tiny_run`: replayed tiny cluster with every gold table (read only)."""
    return gold_tiny_run.lake


# --- the browser tests: Debian's chromium driven by playwright, one browser for the test run --------

CHROMIUM = os.environ.get("KRAFT_REPLAY_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="session")
def browser():
    """Headless Chromium (``make test`` installs Debian's chromium when missing; never skipped)."""
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: the browser tests need Debian's chromium (tools/ensure_chromium.sh)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    """Where tests leave screenshots for people to look at (``$KRAFT_REPLAY_ARTIFACTS``, else .artifacts/)."""
    path = Path(os.environ.get("KRAFT_REPLAY_ARTIFACTS", ROOT / ".artifacts"))
    path.mkdir(parents=True, exist_ok=True)
    return path


# --- the order of the run, and the workers' share of it ----------------------------------------------

#: the slowest test modules first, as measured on a fresh clone (``--durations``): ``make test`` runs the
#: suite on two workers (``pytest -n 2 --no-loadscope-reorder``: xdist would otherwise order the modules
#: by their number of tests), each module whole on one worker (its module-scoped fixtures built once),
#: and a worker that finishes takes the next module in this order, so the long ones start first and the
#: two workers end together
SLOWEST_FIRST: tuple[str, ...] = (
    "tests/replay/test_replay_differential.py",  # these three share a worker: WORKER_GROUPS
    "tests/replay/test_replay_rules.py",
    "tests/replay/test_replay_stream.py",
    "tests/test_wheel.py",
    "tests/lake/test_pipeline_backends.py",
    "tests/replay/test_replay_run.py",
    "tests/replay/test_replay_incremental.py",
    "tests/airflow/test_dags.py",
    "tests/test_spark_cluster.py",
    "tests/ingest/test_ingest_atomic.py",
    "tests/replay/test_replay_generated.py",
    "tests/ingest/test_ingest_cli.py",
    "tests/ingest/test_ingest_divergent.py",
    "tests/generate/test_generate_events.py",
    "tests/generate/test_generate_log.py",
    "tests/ingest/test_secrets_lake.py",
    "tests/serve/test_console.py",
    "tests/lake/test_stream.py",
    "tests/lake/test_publish.py",
    "tests/lake/test_tables.py",
    "tests/outcomes/test_feature_check.py",
    "tests/outcomes/test_cache_lag.py",
    "tests/replay/test_image_cli.py",
    "tests/outcomes/test_outcomes_cli.py",
    "tests/fuzz/test_fuzz_hostile.py",
    "tests/lake/test_faults.py",
    "tests/outcomes/test_discovery.py",
    "tests/generate/test_generate_segments.py",
    "tests/outcomes/test_broker_states.py",
    "tests/outcomes/test_outcomes_differential.py",
)

#: modules that run on one worker with another because they read the same in-process session fixture
#: (``replay_runs``: Spark DataFrames, built once per worker)
WORKER_GROUPS: dict[str, str] = {
    "tests/replay/test_replay_rules.py": "tests/replay/test_replay_differential.py",
    "tests/replay/test_replay_stream.py": "tests/replay/test_replay_differential.py",
}


def _module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The modules of :data:`SLOWEST_FIRST` first, the others after them in the order collected."""
    rank = {module: i for i, module in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(_module_of(item.nodeid), len(rank)))


def pytest_xdist_make_scheduler(config: pytest.Config, log):  # noqa: ANN001, ANN201 - xdist's log, a scheduler
    """Under ``pytest -n N``: a module runs whole on one worker, with the modules of
    :data:`WORKER_GROUPS`; work units go out in the collected order (:data:`SLOWEST_FIRST`)."""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = _module_of(nodeid)
            return WORKER_GROUPS.get(module, module)

    return ModuleScheduling(config, log)
