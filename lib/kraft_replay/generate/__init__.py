"""Scenario generator: realistic KRaft clusters with faults, apply timelines and client workloads.

``generate(spark, lake, load_scenario(name_or_path, seed=None), segments_out=None)`` plans the rare
structural records on the driver (:mod:`.plan`), expands the bulk of the log with Spark column
expressions (:mod:`.log`, :mod:`.bulk`), and writes the bronze tables plus ``broker_progress``,
``metadata_requests``, ``produce_requests``, ``feature_update_requests`` and ``scenario_events``
(schemas in docs/design.md, "Tables written by generate"). ``kraft-replay generate`` and
``jobs/generate.py`` call it.
"""

from kraft_replay.generate.errors import ScenarioError
from kraft_replay.generate.runner import GenerateResult, generate
from kraft_replay.generate.scenario import Scenario, load_scenario

__all__ = ["GenerateResult", "Scenario", "ScenarioError", "generate", "load_scenario"]
