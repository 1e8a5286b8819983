"""Build hook: a wheel carries ``conf/`` and ``data/samples/`` inside the package (as
``kraft_replay/_bundled/``), so a non-editable install finds its profiles, scenarios, policies and
samples wherever it runs (``kraft_replay.resources``). Everything else is in pyproject.toml."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
BUNDLE = {"conf": ROOT / "conf", "samples": ROOT / "data" / "samples"}


class BuildPyWithData(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads them from the checkout
        target = Path(self.build_lib) / "kraft_replay" / "_bundled"
        for name, source in BUNDLE.items():
            if not source.is_dir():
                raise FileNotFoundError(f"{source} is missing: build from a full checkout")
            shutil.rmtree(target / name, ignore_errors=True)
            shutil.copytree(source, target / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildPyWithData})
