"""Where the project's shipped files are: ``conf/`` (profiles, scenarios, policies) and
``data/samples/``.

A source checkout (an editable install, or ``PYTHONPATH=lib``) reads them from the project root. A
wheel carries copies inside the package (``kraft_replay/_bundled/conf``, ``.../samples``; see
``setup.py``), so an installed ``kraft-replay`` works from any directory. ``KRAFT_REPLAY_CONF``
points at another conf directory.
"""

from __future__ import annotations

import os
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
#: the project root of a source checkout (lib/kraft_replay/ -> ../..)
SOURCE_ROOT = _PACKAGE.parents[1]
BUNDLED = _PACKAGE / "_bundled"


def _first_dir(*candidates: Path) -> Path:
    for path in candidates:
        if path.is_dir():
            return path
    return candidates[0]


def conf_dir() -> Path:
    """``$KRAFT_REPLAY_CONF``, else the checkout's ``conf/``, else the copy inside the package."""
    if os.environ.get("KRAFT_REPLAY_CONF"):
        return Path(os.environ["KRAFT_REPLAY_CONF"])
    return _first_dir(SOURCE_ROOT / "conf", BUNDLED / "conf")


def samples_dir() -> Path:
    """The checkout's ``data/samples/``, else the copy inside the package."""
    return _first_dir(SOURCE_ROOT / "data" / "samples", BUNDLED / "samples")
