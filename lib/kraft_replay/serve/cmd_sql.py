"""``kraft-replay sql --lake DIR ["SELECT ..."]``: Spark SQL over every table of the lake.

* Every table is a view as readers see it (its published version, else its latest): ``metadata_log``,
  ``partitions``, ``cache_lag``, ... (docs/tables.md lists them with their columns).
* Time travel: ``<table>@v<N>`` in a statement reads version N of the table (``metadata_log@v3``).
* The image as of any offset and any broker's cache at any time are table functions
  (:func:`kraft_replay.replay.images.register_image_functions`): ``partitions_as_of('C', 7751)``,
  ``partitions_broker_view('C', 3, TIMESTAMP'2025-06-01 09:00:00')``, ``broker_offset('C', 3, T)``.
* With a statement: runs it and prints the rows as an aligned table, or ``--json`` (a JSON array of
  objects) or ``--csv``. Without one: an interactive shell (statements end with ``;``; ``\\tables``,
  ``\\functions``, ``\\q``); statements piped on stdin run one after another.

* ``ingest_quarantine_raw``, the bytes of the ranges ingest could not decode (they may hold credential
  material no redaction reaches), is a view only with ``--include-raw``; a statement naming it
  without the option is one line saying so. So is the ``raw`` column that held those bytes in the
  ``ingest_quarantine`` of a lake made before that table (until ``kraft-replay redact`` moves them).
* On a lake that holds credentials in the clear (``ingest --keep-secrets``) a one-line warning goes to
  stderr first.

A statement Spark cannot analyse, an unknown table or a version the table does not have is one line,
exit 2 (in the shell: printed, and the shell goes on).
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from typing import Any, TextIO

EPILOG = """examples:
  kraft-replay sql --lake ./lake "SELECT broker_id, max(offset_lag_p99) FROM cache_lag GROUP BY broker_id"
  kraft-replay sql --lake ./lake "SELECT count(*) FROM metadata_log@v1"            # version 1 of a table
  kraft-replay --backend delta-spark sql --lake ./lake "DESCRIBE HISTORY delta.\`$PWD/lake/topics\`"  # Delta's SQL
  kraft-replay sql --lake ./lake "SELECT * FROM partitions_as_of('C', 7751)" --json
  kraft-replay sql --lake ./lake "SELECT * FROM partitions_broker_view('C', 3, TIMESTAMP'2025-06-01 09:00:00')"
  kraft-replay sql --lake ./lake                                               # interactive shell
"""

#: ``table@vN`` (optionally in backquotes) in a statement: version N of the table
TIME_TRAVEL = re.compile(r"`?\b([A-Za-z_][A-Za-z0-9_]*)@v(\d+)\b`?")
#: cells wider than this are cut with "..." in table output
MAX_CELL = 60
#: tables hidden from SQL unless ``--include-raw`` (``kraft_replay.ingest.tables.INGEST_QUARANTINE_RAW``)
RAW_TABLES = ("ingest_quarantine_raw",)
#: table -> columns hidden from SQL unless ``--include-raw`` (``kraft_replay.ingest.tables.LEGACY_RAW_COLUMN``:
#: the bytes in a lake that ``kraft-replay redact`` has not moved yet)
RAW_COLUMNS = {"ingest_quarantine": ("raw",)}


class SqlError(Exception):
    """A statement that cannot run (one line: Spark's reason)."""


def _cell(v: Any) -> str:
    if v is None:
        return "NULL"
    text = json.dumps(v, default=str) if isinstance(v, (list, dict)) else str(v)
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 3] + "..."


def format_table(columns: list[str], rows: list[dict[str, Any]]) -> str:
    """Rows as an aligned text table with a header and a row count."""
    cells = [[_cell(r[c]) for c in columns] for r in rows]
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells]
    lines.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(lines)


class Session:
    """The lake's tables as views and the image functions on one SparkSession; runs statements."""

    def __init__(self, spark, lake, include_raw: bool = False) -> None:  # noqa: ANN001 - SparkSession, Lake
        from kraft_replay.replay.images import register_image_functions

        self.spark = spark
        self.lake = lake
        self.include_raw = include_raw
        views = sorted(lake.register_views())
        self.hidden = [] if include_raw else [t for t in views if t in RAW_TABLES]
        for name in self.hidden:
            spark.catalog.dropTempView(name)
        self.tables = [t for t in views if t not in self.hidden]
        for name in self.tables:
            if name in RAW_COLUMNS and not include_raw:
                self._without_raw(name, spark.table(name)).createOrReplaceTempView(name)
        self.functions = register_image_functions(spark, self.tables)

    def _check_hidden(self, statement: str) -> None:
        """A statement naming a table hidden without ``--include-raw`` is refused in one line."""
        for name in self.hidden:
            if re.search(rf"\b{name}\b", statement, re.IGNORECASE):
                raise SqlError(f"table {name} holds the bytes of ranges ingest could not decode, which may hold credentials "
                               "in the clear: run `kraft-replay sql --include-raw` to query it")

    def _without_raw(self, name: str, df):  # noqa: ANN001, ANN202 - a DataFrame
        """``df`` less the raw columns of ``name`` unless ``--include-raw``."""
        hidden = () if self.include_raw else RAW_COLUMNS.get(name, ())
        return df.drop(*[c for c in hidden if c in df.columns])

    def _travel(self, statement: str) -> str:
        """Register a view for each ``table@vN`` and put its name in the statement."""
        def swap(m: re.Match[str]) -> str:
            name, version = m.group(1), int(m.group(2))
            if name not in self.tables:
                raise SqlError(f"no table {name!r} in the lake (tables: {', '.join(self.tables) or 'none'})")
            head = self.lake.version(name)
            if version > head:
                raise SqlError(f"table {name!r} has versions 0..{head}, not {version}")
            view = f"{name}__v{version}"
            self._without_raw(name, self.lake.read(name, version=version)).createOrReplaceTempView(view)
            return view

        return TIME_TRAVEL.sub(swap, statement)

    def run(self, statement: str) -> tuple[list[str], list[dict[str, Any]]]:
        """Column names and rows of one statement."""
        from pyspark.errors import PySparkException

        self._check_hidden(statement)
        try:
            df = self.spark.sql(self._travel(statement))
            return list(df.columns), [r.asDict(recursive=True) for r in df.collect()]
        except PySparkException as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise SqlError(first) from None


def _print(columns: list[str], rows: list[dict[str, Any]], fmt: str, out: TextIO) -> None:
    if fmt == "json":
        print(json.dumps(rows, default=str, indent=1), file=out)
    elif fmt == "csv":
        w = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({c: json.dumps(v, default=str) if isinstance(v, (list, dict)) else v for c, v in r.items()})
    else:
        print(format_table(columns, rows), file=out)


def split_statements(text: str) -> tuple[list[str], str]:
    """The complete statements of ``text`` (each ended by a ``;`` outside quotes) and the rest."""
    done: list[str] = []
    buf: list[str] = []
    quote = ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"`":
            quote = ch
        elif ch == ";":
            done.append("".join(buf).strip())
            buf = []
            continue
        buf.append(ch)
    return [st for st in done if st], "".join(buf)


def statements(text: str) -> list[str]:
    """Every statement of ``text``: split at ``;`` outside quotes, the last one needing none."""
    done, rest = split_statements(text)
    return done + ([rest.strip()] if rest.strip() else [])


def shell(session: Session, fmt: str, inp: TextIO = sys.stdin, out: TextIO = sys.stdout) -> int:
    """Run the statements read from ``inp`` (each ends with ``;``), printing each result.

    On a terminal: prompts, line editing, ``\\tables`` / ``\\functions`` / ``\\q``; an error is printed
    and the shell goes on. Piped: returns 2 when any statement failed (errors go to stderr), else 0."""
    interactive = inp.isatty()
    err = out if interactive else sys.stderr
    if interactive:
        try:
            import readline  # noqa: F401 - line editing and history for input()
        except ImportError:
            pass
        print(f"kraft-replay sql on {session.lake.root}: {len(session.tables)} tables; statements end with ';'; "
              "\\tables, \\functions, \\q to quit", file=out)
    failed = False

    def run_all(sts: list[str]) -> None:
        nonlocal failed
        for st in sts:
            try:
                _print(*session.run(st), fmt, out)
            except SqlError as exc:
                failed = True
                print(f"error: {exc}", file=err)

    buf = ""
    while True:
        if interactive:
            try:
                line = input("...> " if buf.strip() else "sql> ") + "\n"
            except EOFError:
                print(file=out)
                break
        else:
            line = inp.readline()
            if not line:
                break
        command = line.strip()
        if not buf.strip() and (command.startswith("\\") or command in ("quit", "exit")):
            if command in ("\\q", "quit", "exit"):
                break
            listing = {"\\tables": session.tables, "\\functions": session.functions}.get(command)
            print("\n".join(listing) if listing is not None else f"unknown command {command}: \\tables, \\functions, \\q",
                  file=out if listing is not None else err)
            continue
        done, buf = split_statements(buf + line)
        run_all(done)
    run_all(statements(buf))
    return 2 if failed and not interactive else 0


def _run(args: argparse.Namespace) -> int:
    from kraft_replay.serve.cli import UserError
    from kraft_replay.serve.common import open_lake

    from kraft_replay.lake.keys import clear_secrets_warning

    fmt = "json" if args.json else "csv" if args.csv else "table"
    spark, lake = open_lake(args)
    warning = clear_secrets_warning(lake.root)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    session = Session(spark, lake, include_raw=args.include_raw)
    if args.statement is None:
        return shell(session, fmt)
    for st in statements(args.statement):
        try:
            _print(*session.run(st), fmt, sys.stdout)
        except SqlError as exc:
            raise UserError(str(exc)) from None
    return 0


def register(sub) -> None:
    p = sub.add_parser("sql", help="Spark SQL over every table (time travel, image-as-of functions); a shell without a statement",
                       description="Run Spark SQL over every table of the lake: each table a view at the version readers "
                                   "see, <table>@vN for version N, <table>_as_of(cluster, offset) and "
                                   "<table>_broker_view(cluster, broker, time) table functions. Without a statement, an "
                                   "interactive shell.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("statement", nargs="?", default=None, help="SQL statement(s), separated by ';'")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--json", action="store_true", help="print the rows as a JSON array of objects")
    g.add_argument("--csv", action="store_true", help="print the rows as CSV")
    p.add_argument("--include-raw", action="store_true",
                   help="show table ingest_quarantine_raw, the bytes of the ranges that could not be decoded (they may "
                        "hold credentials the decoder could not fingerprint); hidden by default")
    p.set_defaults(func=_run)
