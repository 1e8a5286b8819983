"""The benchmarks' memory figure (``bench/replay.py``: peak RSS of the process tree, which every
benchmark prints): a process being spawned shares its parent's address space until it execs, and
must not be counted a second time."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_replay", ROOT / "bench" / "replay.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

GIB = 2**30


def test_a_child_with_its_parents_memory_counts_once() -> None:
    jvm = (9 * GIB, 9 * GIB - 2**20, 20 * GIB)
    procs = {
        1: (0, (100 * 2**20, 50 * 2**20, 400 * 2**20)),          # the benchmark's own process
        2: (1, jvm),                                               # the driver JVM
        3: (2, (jvm[0] + 2**20, jvm[1], jvm[2])),                 # a command the JVM is starting: its mm
        4: (2, (60 * 2**20, 40 * 2**20, 300 * 2**20)),            # the Python worker daemon
        5: (4, (900 * 2**20, 850 * 2**20, 1200 * 2**20)),         # a worker forked from it, at work
        9: (7, (5 * GIB, 5 * GIB, 6 * GIB)),                      # not in the tree
    }
    total, anon, each = bench.tree_sum(procs, 1)
    assert total == (100 + 60 + 900) * 2**20 + 9 * GIB
    assert anon == (50 + 40 + 850) * 2**20 + jvm[1]
    assert dict((p, r) for p, r, _ in each) == {1: 100 * 2**20, 2: jvm[0], 3: 0, 4: 60 * 2**20, 5: 900 * 2**20}


_SPAWNER = """
import subprocess, sys, time
big = bytearray(512 * 2**20)
for i in range(0, len(big), 4096):
    big[i] = 1
print("ready", flush=True)
end = time.time() + 30
while time.time() < end:  # a fork that sleeps before its exec: long enough for /proc to show it
    subprocess.run(["true"], preexec_fn=lambda: time.sleep(0.05))
"""


def test_a_process_spawning_commands_is_not_counted_twice() -> None:
    """A live process of 512 MiB starting commands in a loop: /proc shows each command, until it execs,
    with the whole 512 MiB (the sum of the tree's RSS doubles); the benchmark's figure does not. (The
    JVM spawns with ``vfork``, whose window before the exec is too short to catch reliably here; a
    ``fork`` shares the pages copy-on-write and shows the same figures for longer.)"""
    p = subprocess.Popen([sys.executable, "-c", _SPAWNER], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        seen_double, worst, deadline = False, 0, time.time() + 20
        while time.time() < deadline and not seen_double:
            procs = bench.processes()
            if p.pid not in procs:
                continue
            own = procs[p.pid][1][0]
            naive = sum(m[0] for pid, (pp, m) in procs.items() if pid == p.pid or pp == p.pid)
            seen_double = naive > 1.8 * own
            worst = max(worst, bench.tree_sum(procs, p.pid)[0] / own)
        assert seen_double, "no sample caught a command before its exec"
        assert worst < 1.05, worst
    finally:
        p.kill()
        p.wait()
