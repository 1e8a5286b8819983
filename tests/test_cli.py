"""The ``kraft-replay`` CLI: ``tables``, errors as one line, exit 2, global options anywhere (the demo runs from
the installed wheel in tests/test_wheel.py)."""

from __future__ import annotations

import re
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _cli(*args: str, timeout: int = 400) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "lib")
    return subprocess.run([sys.executable, "-m", "kraft_replay.serve.cli", *args], env=env, cwd=str(ROOT),
                          capture_output=True, text=True, timeout=timeout)


def _main(capsys, *args: str) -> tuple[int, str, str]:
    from kraft_replay.serve.cli import main

    code = main(["--profile", "test", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_tables_text_output_and_empty_lake(spark, tmp_path, capsys, monkeypatch):
    """``tables`` on the embedded backend reads the tables' logs on the driver: no Spark session is asked for."""
    from pyspark.sql.types import LongType, StructField, StructType

    import kraft_replay.spark as ks
    from kraft_replay.lake import Lake

    lake = Lake(str(tmp_path / "l"), spark, backend="deltars")
    lake.create_table("nums", StructType([StructField("n", LongType(), False)]))
    lake.append("nums", spark.range(7).withColumnRenamed("id", "n"))

    def no_spark(*_a, **_k):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("tables asked for a Spark session")

    monkeypatch.setattr(ks, "get_spark", no_spark)
    code, out, _ = _main(capsys, "--lake", str(tmp_path / "empty"), "tables")
    assert code == 0 and "no tables" in out
    code, out, _ = _main(capsys, "--lake", str(tmp_path / "l"), "tables")
    assert code == 0
    assert "nums  version 1  rows 7  files" in out and "n: bigint not null" in out


def test_lake_errors_are_one_line_with_exit_2(spark, tmp_path, capsys):
    from pyspark.sql.types import LongType, StructField, StructType

    from kraft_replay.lake import Lake

    lake = Lake(str(tmp_path / "l"), spark, backend="deltars")
    lake.create_table("broken", StructType([StructField("n", LongType())]))
    (tmp_path / "l" / "broken" / "_delta_log" / "00000000000000000000.json").write_text("garbage\n")
    code, _, err = _main(capsys, "--lake", str(tmp_path / "l"), "tables")
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "'broken'" in err and "_delta_log" in err

    # the native backend (the suite's session carries Delta's jars) says the same in one line
    code, _, err = _main(capsys, "--lake", str(tmp_path / "l"), "--backend", "delta-spark", "tables")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "'broken'" in err and "_delta_log" in err, err


@pytest.mark.parametrize("argv", [
    ["--lake", "L", "--profile", "test", "--backend", "deltars", "tables"],
    ["tables", "--lake", "L", "--profile", "test", "--backend", "deltars"],
    ["--lake", "other", "tables", "--lake", "L", "--profile", "test", "--backend", "deltars"],
    ["--profile", "test", "ingest", "x.log", "--lake", "L", "--backend", "deltars"],
    ["ingest-metrics", "x.prom", "--lake", "L", "--profile", "test", "--backend", "deltars"],
    ["--backend", "deltars", "demo", "--lake", "L", "--profile", "test"],
])
def test_global_options_before_or_after_the_subcommand(argv):
    from kraft_replay.serve.cli import build_parser

    args = build_parser().parse_args(argv)
    assert (args.lake, args.profile, args.backend) == ("L", "test", "deltars")


def test_global_option_defaults_and_version(capsys):
    from kraft_replay.serve.cli import build_parser

    args = build_parser().parse_args(["tables"])
    assert (args.lake, args.profile, args.backend) == (None, "local", None)
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["--version"])
    assert exit_info.value.code == 0
    assert re.fullmatch(r"kraft-replay \S+\n", capsys.readouterr().out)


def test_every_subcommand_help_shows_an_example(capsys):
    from kraft_replay.serve.cli import build_parser

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # noqa: SLF001 - the subcommand parsers
    assert {"demo", "tables", "ingest", "replay", "outcomes", "sql", "dashboard", "report"} <= set(commands)
    for name, sub in commands.items():
        text = sub.format_help()
        assert re.search(rf"^examples?:\n\s+kraft-replay {name}\b", text, re.M), f"{name} --help has no example"


def test_demo_with_an_unknown_scenario_is_one_line_before_spark(capsys, tmp_path):
    from kraft_replay.serve.cli import main

    assert main(["demo", "--lake", str(tmp_path / "lake"), "--scenario", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kraft-replay demo: error: scenario 'nosuch' not found") and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "lake").exists()


@pytest.mark.parametrize("args, says", [
    (["--mode", "stream", "--incremental"], "--incremental is --mode batch's"),
    (["--available-now", "--incremental"], "--incremental is --mode batch's"),
    (["--derive-every", "-1"], "--derive-every must be >= 0 seconds"),
    (["--trigger", "1", "--available-now"], "--trigger and --available-now exclude each other"),
    (["--mode", "batch", "--available-now"], "--available-now is an option of --mode stream"),
    (["--mode", "batch", "--catch-up-records", "1000"], "--catch-up-records is an option of --mode stream"),
    (["--available-now", "--catch-up-records", "-5"], "--catch-up-records must be >= 0 (0: never), got -5"),
])
def test_replay_mode_options_that_do_not_fit_are_one_line_before_spark(capsys, tmp_path, args, says):
    """``replay``'s batch-only and stream-only options (``--incremental``, ``--derive-every``, ``--trigger`` ...):
    a combination that does not fit is one line and exit 2, before any lake or Spark session."""
    from kraft_replay.serve.cli import main

    assert main(["replay", "--lake", str(tmp_path / "lake"), *args]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "lake").exists()


@pytest.mark.parametrize("lake, says", [
    (None, "redact rewrites a lake for good: name it with --lake DIR"),
    ("missing", "no such directory"),
    ("notes.txt", "no such directory"),
    ("empty", "is not a kraft-replay lake (it holds no Delta table)"),
])
def test_redact_refuses_what_is_not_a_lake_in_one_line_and_writes_nothing(capsys, tmp_path, monkeypatch, lake, says):
    """``redact`` rewrites a lake for good: no default lake, and a path that is no lake is one line, exit 2,
    before Spark starts or anything (a key, ``_secrets.json``, a log) is written."""
    from kraft_replay.serve.cli import main

    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("not a lake\n")
    monkeypatch.chdir(tmp_path)                  # where the profile's default ./lake would be
    before = sorted(tmp_path.rglob("*"))
    assert main(["redact", *([] if lake is None else ["--lake", str(tmp_path / lake)])]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kraft-replay redact: error: ") and says in err and len(err.strip().splitlines()) == 1, err
    assert sorted(tmp_path.rglob("*")) == before
