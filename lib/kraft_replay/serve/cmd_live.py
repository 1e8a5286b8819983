"""``kraft-replay live NODE_DIR... --lake DIR [--metrics URL...] [--dashboard]``: the live pipeline in
one command, for the on-call person: the log follower (``ingest --follow``), the metrics follower
(``ingest-metrics --follow``, with ``--metrics``), the live replay (``replay --mode stream``) and the
dashboard (with ``--dashboard``), each its own process, supervised together (:class:`Supervisor`):
their lines on this console, each prefixed with its name; one that exits is said and started again
(after 2 s, then longer while it keeps failing); Ctrl-C stops them all (SIGINT, then SIGKILL after a
grace period) and exits 0, with no traceback.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["Child", "Supervisor", "commands", "register", "run"]


@dataclass
class Child:
    """One supervised process: its name, its command, and what happened to it."""

    name: str
    argv: list[str]
    proc: subprocess.Popen | None = None
    starts: int = 0
    started_at: float = 0.0
    restart_at: float | None = None      # set when its exit was seen: when it starts again
    failures: int = 0                    # exits in a row, each within a minute of its start
    exits: list[int] = field(default_factory=list)


class Supervisor:
    """Run ``children`` together until :meth:`stop` (or Ctrl-C in :meth:`run`): each child's output
    lines go to ``say`` prefixed ``[name]``; a child that exits is restarted after ``backoff`` seconds,
    doubled (up to a minute) each time it exits again within a minute of its start."""

    def __init__(self, children: list[Child], say: Callable[[str], None] = print, backoff: float = 2.0,
                 grace: float = 30.0, env: dict[str, str] | None = None) -> None:
        self.children = children
        self.say = say
        self.backoff = backoff
        self.grace = grace
        self.env = env
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def _start(self, c: Child) -> None:
        c.proc = subprocess.Popen(c.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                                  env=self.env, start_new_session=True)  # Ctrl-C reaches the children through us
        c.starts += 1
        c.started_at, c.restart_at = time.monotonic(), None
        threading.Thread(target=self._pump, args=(c, c.proc), daemon=True).start()

    def _pump(self, c: Child, proc: subprocess.Popen) -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            with self._lock:
                self.say(f"[{c.name}] {line.rstrip()}")

    def poll(self) -> None:
        """Start the children not running (one that exited: once its backoff has passed)."""
        now = time.monotonic()
        for c in self.children:
            if c.proc is None:
                self._start(c)
                continue
            code = c.proc.poll()
            if code is None:
                continue
            if c.restart_at is None:  # its exit, seen now
                c.failures = 0 if now - c.started_at > 60 else c.failures + 1
                wait = min(60.0, self.backoff * 2 ** min(5, max(0, c.failures - 1)))
                c.exits.append(code)
                c.restart_at = now + wait
                with self._lock:
                    how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
                    self.say(f"kraft-replay live: {c.name} {how}; starting it again in {wait:g} s")
            if now >= c.restart_at:
                self._start(c)

    def stop(self) -> None:
        """Stop every child: SIGINT (their own clean stop), SIGKILL after the grace period."""
        self._stop.set()
        running = [c for c in self.children if c.proc is not None and c.proc.poll() is None]
        for c in running:
            try:
                os.killpg(c.proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + self.grace
        for c in running:
            try:
                c.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(c.proc.pid, signal.SIGKILL)
                c.proc.wait()

    def run(self, until: Callable[[], bool] = lambda: False, tick: float = 0.5) -> None:
        """Supervise until ``until()`` is true or Ctrl-C; then stop the children."""
        try:
            while not self._stop.is_set() and not until():
                self.poll()
                time.sleep(tick)
        except KeyboardInterrupt:
            self.say("kraft-replay live: interrupted; stopping every process")
        finally:
            self.stop()


def _cli() -> list[str]:
    return [sys.executable, "-m", "kraft_replay.serve.cli"]


def commands(args: argparse.Namespace) -> list[Child]:
    """The processes ``live`` runs for ``args``."""
    common = ["--profile", args.profile, *(["--backend", args.backend] if args.backend else [])]
    out = [Child("ingest", [*_cli(), *common, "ingest", *args.node_dir, "--lake", args.lake, "--follow",
                            "--interval", f"{args.interval:g}",
                            *(["--cluster-id", args.cluster_id] if args.cluster_id else [])])]
    if args.metrics:
        out.append(Child("metrics", [*_cli(), *common, "ingest-metrics", *args.metrics, "--lake", args.lake, "--follow",
                                     "--interval", f"{args.interval:g}",
                                     *(["--cluster-id", args.cluster_id] if args.cluster_id else [])]))
    out.append(Child("replay", [*_cli(), *common, "replay", "--lake", args.lake, "--mode", "stream",
                                "--trigger", f"{args.trigger:g}", "--derive-every", f"{args.derive_every:g}",
                                *(["--catch-up-records", str(args.catch_up_records)]
                                  if args.catch_up_records is not None else [])]))
    if args.dashboard:
        out.append(Child("dashboard", [*_cli(), *common, "dashboard", "--lake", args.lake, "--port", str(args.port)]))
    return out


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "live", help="follow a node's log and metrics, keep the replay current and serve the dashboard: one command",
        description=__doc__.split("\n\n")[0].replace("``", ""),
        epilog="examples:\n"
               "  kraft-replay live /var/lib/kafka/meta --lake ./lake --metrics http://broker1:7071/metrics --dashboard\n"
               "  kraft-replay live ./node --lake ./lake                           # log and replay only\n",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("node_dir", nargs="+", metavar="NODE_DIR", help="a KRaft node's metadata log directory (or files)")
    p.add_argument("--lake", default=argparse.SUPPRESS, help="lake root (same as the global --lake)")
    p.add_argument("--metrics", nargs="+", default=[], metavar="URL",
                   help="the brokers' metrics endpoints or files (ingest-metrics --follow)")
    p.add_argument("--cluster-id", default=None, help="cluster id of the node and of the samples")
    p.add_argument("--interval", type=float, default=1.0, metavar="SECONDS", help="poll interval of the followers (default 1)")
    p.add_argument("--trigger", type=float, default=1.0, metavar="SECONDS", help="the stream's trigger (default 1)")
    p.add_argument("--derive-every", type=float, default=60.0, metavar="SECONDS",
                   help="how often the stream recomputes broker_applied and the outcome tables (default 60; "
                        "cache_lag and the images at metadata.version changes follow every micro-batch)")
    p.add_argument("--catch-up-records", type=int, default=None, metavar="N",
                   help="a cluster with at least N records to replay when the stream starts anew is caught up by the "
                        "batch replay first (replay --catch-up-records; default 500000, 0: never)")
    p.add_argument("--dashboard", action="store_true", help="also serve the dashboard")
    p.add_argument("--port", type=int, default=8050, help="the dashboard's port (default 8050)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kraft_replay.serve.cli import UserError

    if not args.lake:
        raise UserError("no lake: pass --lake DIR")
    for name in ("interval", "trigger"):
        if not getattr(args, name) > 0:
            raise UserError(f"--{name} must be > 0 seconds, got {getattr(args, name):g}")
    if not args.derive_every >= 0:
        raise UserError(f"--derive-every must be >= 0 seconds, got {args.derive_every:g}")
    if args.catch_up_records is not None and args.catch_up_records < 0:
        raise UserError(f"--catch-up-records must be >= 0 (0: never), got {args.catch_up_records}")
    missing = [d for d in args.node_dir if not os.path.exists(d)]
    if missing:
        raise UserError(f"{missing[0]}: no such node directory or file")
    children = commands(args)
    print(f"kraft-replay live: {', '.join(c.name for c in children)} on lake {args.lake}; Ctrl-C stops them all",
          flush=True)
    Supervisor(children, say=lambda line: print(line, flush=True)).run()
    return 0
