"""Errors of the ingest stage: one line naming the input and the fix (the CLI prints them, exit 2)."""

from __future__ import annotations


class IngestError(Exception):
    """Bad input for ``kraft-replay ingest`` (missing path, empty dir, non-Kafka file, permission
    denied, quarantine under ``--strict``); nothing has been committed when it is raised."""
