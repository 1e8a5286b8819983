"""Errors raised by the lake layer.

Every message is one line naming the table and/or path and saying how to fix the problem;
the CLI prints them as-is with exit code 2.
"""

from __future__ import annotations


class LakeError(Exception):
    """Base class of every error the lake layer raises on purpose."""


class UnknownTableError(LakeError):
    """The named table has no Delta log under the lake root."""

    def __init__(self, name: str, path: str, known: list[str] | None = None) -> None:
        hint = f"; tables in this lake: {', '.join(known)}" if known else "; the lake has no tables yet"
        super().__init__(f"table {name!r} not found at {path} (create it first or check --lake){hint}")
        self.name = name
        self.path = path


class CorruptTableError(LakeError):
    """The table directory exists but its ``_delta_log`` is missing, empty or unreadable."""


class SchemaMismatchError(LakeError):
    """A DataFrame does not match the table's declared schema (message names the column)."""


class LakeNotWritableError(LakeError):
    """The lake root cannot be created or written to."""


class CommitConflictError(LakeError):
    """A commit kept conflicting with concurrent writers after all retries."""


class BackendUnavailableError(LakeError):
    """The requested Delta backend cannot run in this Spark session."""


class InvalidArgumentError(LakeError):
    """A bad table name, predicate, or option was passed to the lake API."""


def check_txn(txn: tuple[str, int] | None) -> None:
    """A write's idempotency token, on every backend: None, or ``(app id: a non-empty str, version: an
    int >= 0)``; anything else is refused in one line."""
    if txn is None:
        return
    if not (isinstance(txn, tuple) and len(txn) == 2 and isinstance(txn[0], str) and txn[0]
            and isinstance(txn[1], int) and txn[1] >= 0):
        raise InvalidArgumentError(f"txn must be (app_id: non-empty str, version: int >= 0), got {txn!r}")


def check_merge_keys(name: str, keys: list[str], columns: list[str] | None = None) -> None:
    """A merge's keys, on every backend: at least one, and (``columns``: the table's) each a column of
    the table; refused in one line naming the table."""
    if not keys:
        raise InvalidArgumentError(f"table {name!r}: merge needs at least one key column")
    missing = [] if columns is None else [k for k in keys if k not in columns]
    if missing:
        raise InvalidArgumentError(f"table {name!r}: merge key {missing[0]!r} is not a column "
                                   f"(columns: {', '.join(columns)})")
