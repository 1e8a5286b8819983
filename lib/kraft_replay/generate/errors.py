"""Errors raised by the scenario generator."""

from __future__ import annotations


class ScenarioError(ValueError):
    """A scenario file is missing or invalid; the message names the file and the key to fix."""
