"""A quiet console: a job prints its own progress and summary lines; Spark's output (log4j, the JVM's own
warnings, the driver's Python warnings) goes to ``<lake>/_logs/<command>-<timestamp>.log``, named on stderr
when anything was written there; ``--verbose`` keeps all of it on stderr."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: a log4j line of lib/kraft_replay/spark/log4j2.properties's layout (``%d{HH:mm:ss} %p %c{1}: %m%n``)
LOG4J_LINE = re.compile(r"\d\d:\d\d:\d\d (WARN|ERROR|INFO) ")
INCUBATOR = "WARNING: Using incubator modules"
#: a deprecated Spark setting: SparkConf logs a WARN for it whenever it reads the configuration, so every
#: run below has a log4j warning to route whatever the Java runtime (the incubator warning is Java's)
DEPRECATED = "spark.cache.class=unused"
LOGGED = "WARN SparkConf: The configuration key 'spark.cache.class' has been deprecated"


def _cli(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "lib"), "KRAFT_REPLAY_SPARK_CONF": DEPRECATED}
    return subprocess.run([sys.executable, "-m", "kraft_replay.serve.cli", "--profile", "test", *args], env=env,
                          cwd=str(ROOT), capture_output=True, text=True, timeout=timeout)


def _spark_noise(text: str) -> list[str]:
    """The lines of ``text`` that are Spark's, not the job's: log4j lines, the JVM's warning, very long lines."""
    return [line for line in text.splitlines() if LOG4J_LINE.search(line) or INCUBATOR in line or len(line) > 300]


def test_a_job_prints_its_own_lines_and_spark_writes_to_a_log_file(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    out = _cli("--lake", str(lake), "ingest", str(ROOT / "data" / "samples" / "node1"))
    assert out.returncode == 0, out.stderr[-3000:]
    assert "rows written: metadata_log=" in out.stdout and "decoding 4 file(s)" in out.stderr  # the job's own lines
    assert _spark_noise(out.stdout + out.stderr) == [], out.stderr[-3000:]

    logs = sorted((lake / "_logs").iterdir())
    assert len(logs) == 1 and re.fullmatch(r"ingest-\d{8}T\d{6}\.log", logs[0].name), logs
    text = logs[0].read_text()
    assert LOGGED in text and LOG4J_LINE.search(text), text[:3000]  # Spark's warnings are there instead
    # the run names the file once, last, on one short line
    named = [line for line in out.stderr.splitlines() if line.startswith("spark warnings:")]
    assert named == [f"spark warnings: {logs[0]}"] == out.stderr.splitlines()[-1:], out.stderr[-3000:]
    assert "spark warnings" not in out.stdout


def test_verbose_keeps_sparks_output_on_stderr(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    out = _cli("--lake", str(lake), "sql", "SELECT 1 AS one", "--verbose")  # a global option after the subcommand too
    assert out.returncode == 0 and "(1 row)" in out.stdout, out.stderr[-3000:]
    assert LOGGED in out.stderr and any(LOG4J_LINE.match(line) for line in out.stderr.splitlines()), out.stderr[-3000:]
    assert "spark warnings:" not in out.stderr + out.stdout
    assert not (lake / "_logs").exists()


def test_verbose_is_a_global_option_before_or_after_the_subcommand() -> None:
    from kraft_replay.serve.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["--verbose", "tables"]).verbose is True
    assert parser.parse_args(["tables", "--verbose"]).verbose is True
    assert parser.parse_args(["tables"]).verbose is False
    replay = parser._subparsers._group_actions[0].choices["replay"]  # noqa: SLF001 - a subcommand's parser
    assert "--verbose" in parser.format_help() and "--verbose" in replay.format_help()


@pytest.mark.parametrize("root, where", [
    ("lake", Path("lake") / "_logs"),
    ("/data/lake/", Path("/data/lake/_logs")),
    ("file:///data/my%20lake", Path("/data/my lake/_logs")),
    (None, None),
    ("s3://bucket/lake", None),
    ("gs://bucket/lake", None),
    ("abfss://fs@account.dfs.core.windows.net/lake", None),
])
def test_the_log_of_an_object_store_lake_is_local(root, where) -> None:
    import tempfile

    from kraft_replay.serve.cli import spark_log_dir

    local = Path(tempfile.gettempdir()) / f"kraft-replay-{os.getuid()}" / "_logs"
    assert spark_log_dir(root) == (where or local)


def test_the_log_file_takes_python_warnings_and_an_empty_one_is_removed(tmp_path: Path) -> None:
    """Without starting a JVM: the file :func:`spark_output_to` opens for a session takes the driver's Python
    warnings until the block ends; a file left empty is removed with the directories made for it."""
    from kraft_replay.spark.session import spark_output_to

    shown = warnings.showwarning
    with spark_output_to(lambda: tmp_path / "lake" / "_logs", "replay") as log:
        os.close(log.open_fd())  # what get_spark does when it launches the JVM
        log.redirect_python()
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn_explicit("pandas says hello", UserWarning, "x.py", 1)
    assert warnings.showwarning is shown
    assert log.path is not None and re.fullmatch(r"replay-\d{8}T\d{6}\.log", log.path.name)
    assert "UserWarning: pandas says hello" in log.path.read_text()

    with spark_output_to(lambda: tmp_path / "empty" / "_logs", "tables") as quiet:
        os.close(quiet.open_fd())
        quiet.redirect_python()
    assert quiet.path is None and not (tmp_path / "empty").exists()
    with spark_output_to(lambda: tmp_path / "notice" / "lake" / "_logs", "sql") as notice:
        fd = notice.open_fd()
        os.write(fd, f"{INCUBATOR}: jdk.incubator.vector\n".encode())  # what Java prints at every start
        os.close(fd)
    assert notice.path is None and not (tmp_path / "notice").exists()  # a query of a lake not there leaves nothing
    with spark_output_to(lambda: tmp_path / "never", "dashboard") as unused:  # no session started: no file
        pass
    assert unused.path is None and not (tmp_path / "never").exists()


def test_a_lake_that_cannot_take_the_log_sends_it_to_the_local_directory(tmp_path: Path, monkeypatch) -> None:
    import tempfile

    from kraft_replay.spark.session import local_log_dir, spark_output_to

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "lake").write_text("a file where the lake's directory should be")
    with spark_output_to(lambda: tmp_path / "lake" / "_logs", "sql") as log:
        fd = log.open_fd()
        os.write(fd, b"WARNING: Using incubator modules: jdk.incubator.vector\n12:00:00 WARN SparkConf: a warning\n")
        os.close(fd)
    assert log.path is not None and log.path.parent == local_log_dir() == tmp_path / "tmp" / f"kraft-replay-{os.getuid()}" / "_logs"
