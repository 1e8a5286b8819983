"""``kraft-replay dashboard [--port N] [--host H] [--auth FILE | --no-auth] [--refresh SECONDS]``: serve the
live cache-lag dashboard of a lake (:mod:`kraft_replay.serve.dashboard`) until interrupted. No Spark: the
page reads the tables with delta-rs at the versions readers see, and re-reads a table only when a new
version is published. ``/metrics`` serves each broker's newest cache lag as Prometheus gauges
(:mod:`kraft_replay.serve.prometheus`, docs/alerts.md). On a non-loopback ``--host`` it needs
``--auth FILE`` (HTTP basic auth, /metrics included) or ``--no-auth`` (:mod:`kraft_replay.serve.auth`).
"""

from __future__ import annotations

import argparse
import errno
import socket

EPILOG = """examples:
  kraft-replay dashboard --lake ./lake                        # http://127.0.0.1:8050/
  kraft-replay dashboard --lake ./lake --port 8080 --refresh 10
  kraft-replay dashboard --lake ./lake --host 0.0.0.0 --auth users.txt   # other machines, with a login
  python -m kraft_replay.serve.auth alice >> users.txt                   # a user of users.txt
  (keep `kraft-replay replay --mode stream` running on the same lake for live data)
  curl http://127.0.0.1:8050/metrics                          # per-broker cache lag for Prometheus (docs/alerts.md)
"""


def _check_port_free(host: str, port: int) -> None:
    """Raise UserError when ``host:port`` cannot be bound (in use, or not an address of this machine)."""
    from kraft_replay.serve.cli import UserError

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server does: TIME_WAIT is no conflict
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise UserError(f"port {port} on {host} is already in use: stop what serves it or pass --port N") from None
            raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def _lake_root(args: argparse.Namespace) -> str:
    """The global ``--lake``, else the profile's lake root."""
    if args.lake:
        return args.lake
    from kraft_replay.config import load_profile
    from kraft_replay.serve.cli import UserError

    root = load_profile(args.profile).lake.root
    if not root:
        raise UserError(f"no lake root: pass --lake DIR (profile {args.profile!r} sets none)")
    return root


def _run(args: argparse.Namespace) -> int:
    import logging

    from kraft_replay.serve.cli import UserError
    from kraft_replay.serve.dashboard import create_app

    if args.refresh <= 0:
        raise UserError(f"--refresh must be a positive number of seconds, not {args.refresh}")
    if not 1 <= args.port <= 65535:
        raise UserError(f"--port must be a TCP port (1-65535), not {args.port}")
    from kraft_replay.lake.keys import clear_secrets_warning
    from kraft_replay.serve.auth import AuthError, BasicAuth, check_exposure, load_users

    try:
        check_exposure(args.host, args.auth, args.no_auth)
        auth = BasicAuth(load_users(args.auth)) if args.auth else None
    except AuthError as exc:
        raise UserError(str(exc)) from None
    root = _lake_root(args)
    warning = clear_secrets_warning(root)
    if warning:
        print(warning, flush=True)
    _check_port_free(args.host, args.port)
    app = create_app(root, refresh_ms=int(args.refresh * 1000))
    if auth is not None:
        auth.install(app.server)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per poll of every open page
    shown_host = f"[{args.host}]" if ":" in args.host else args.host
    print(f"kraft-replay dashboard: lake {root} on http://{shown_host}:{args.port}/ "
          f"(refresh every {args.refresh:g} s; Ctrl-C stops)", flush=True)
    app.run(host=args.host, port=args.port, debug=False)
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "dashboard", help="serve the live cache-lag dashboard of a lake (no Spark)",
        description="A web page of the gold tables as readers see them (published versions): cache lag and image "
                    "divergence per broker, broker states, consistency and fencing outcome rates, feature levels. "
                    "It polls the lake and redraws when a table gets a new version.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, default=8050, help="TCP port (default 8050)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 for every interface)")
    p.add_argument("--auth", default=None, metavar="FILE",
                   help="require HTTP basic auth: FILE holds name:scrypt:... lines (python -m kraft_replay.serve.auth NAME)")
    p.add_argument("--no-auth", action="store_true",
                   help="serve a non-loopback --host without authentication (anyone reaching the port sees the tables)")
    p.add_argument("--refresh", type=float, default=1.0, metavar="SECONDS",
                   help="how often the page polls the lake (default 1: on call, seconds matter)")
    p.set_defaults(func=_run)
