"""Errors of the ingest stage: one line naming the input and the fix (the CLI prints them, exit 2)."""

from __future__ import annotations


class IngestError(Exception):
    """Bad input for ``kraft-replay ingest`` (missing path, empty dir, non-Kafka file, permission
    denied, quarantine under ``--strict``), or a run that failed. The message says what was
    committed: nothing, or the run's commits, which stay unpublished (invisible to readers) until the
    next run rolls them back (see ``kraft_replay.ingest.pipeline``)."""
