"""Scenario files (``conf/scenarios/<name>.yaml``): the validated description of a cluster to generate.

Every section forbids unknown keys; rates and sizes are non-negative; broker ids named by events
must exist; the replication factor must not exceed the broker count; event times must fall inside
the scenario's duration. :func:`load_scenario` turns any violation into a one-line
:class:`~kraft_replay.generate.errors.ScenarioError` naming the file and the key.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from kraft_replay.config import CONF_DIR
from kraft_replay.generate.errors import ScenarioError
from kraft_replay.generate.mv import MIN_BOOTSTRAP_LEVEL, SOFTWARE_MAX_LEVEL, parse_level

SCENARIO_DIR = CONF_DIR / "scenarios"

UpgradeType = Literal["UPGRADE", "SAFE_DOWNGRADE", "UNSAFE_DOWNGRADE"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Brokers(_Strict):
    count: int = Field(ge=1, le=1000)
    first_id: int = Field(1, ge=0)
    racks: int = Field(1, ge=1)
    software_version: str = "3.9"

    @field_validator("software_version")
    @classmethod
    def _known_software(cls, v: str) -> str:
        if v not in SOFTWARE_MAX_LEVEL:
            raise ValueError(f"unknown software version {v!r}; known: {', '.join(SOFTWARE_MAX_LEVEL)}")
        return v


class Controllers(_Strict):
    count: int = Field(3, ge=1, le=9)
    first_id: int = Field(3000, ge=0)


class Sizes(_Strict):
    min: int = Field(ge=1)
    max: int = Field(ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> Sizes:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) is below min ({self.min})")
        return self


class Log(_Strict):
    target_records: int = Field(ge=1)
    batch_records: Sizes = Sizes(min=1, max=8)
    noop_fraction: float = Field(0.3, ge=0.0, le=1.0)
    max_structural_batch: int = Field(500, ge=1)
    snapshots: int = Field(1, ge=0, le=20)
    segment_bytes: int = Field(8 * 1024 * 1024, ge=4096)


class TemporaryTopics(_Strict):
    count: int = Field(0, ge=0)
    partitions: int = Field(3, ge=1)
    lifetime_s: float = Field(60.0, gt=0)
    reassign: bool = True


class Topics(_Strict):
    stable: int = Field(ge=1)
    partitions: int = Field(ge=1)
    replication_factor: int = Field(3, ge=1)
    min_insync_replicas: int = Field(1, ge=1)   # cluster default written as a BROKER config when not 1
    temporary: TemporaryTopics = TemporaryTopics()


class BrokerRestart(_Strict):
    broker: int
    at_s: float = Field(ge=0)
    downtime_s: float = Field(10.0, gt=0)
    controlled: bool = True


class NetworkPartition(_Strict):
    broker: int
    at_s: float = Field(ge=0)
    duration_s: float = Field(gt=0)


class ControllerFailover(_Strict):
    at_s: float = Field(ge=0)


class RollingUpgrade(_Strict):
    at_s: float = Field(ge=0)
    to_software: str
    interval_s: float = Field(10.0, gt=0)
    final_metadata_version: int | str

    @field_validator("to_software")
    @classmethod
    def _known_software(cls, v: str) -> str:
        if v not in SOFTWARE_MAX_LEVEL:
            raise ValueError(f"unknown software version {v!r}; known: {', '.join(SOFTWARE_MAX_LEVEL)}")
        return v

    @field_validator("final_metadata_version")
    @classmethod
    def _known_level(cls, v: int | str) -> int:
        return parse_level(v)


class FeatureUpdate(_Strict):
    at_s: float = Field(ge=0)
    feature: str = "metadata.version"
    level: int | str
    upgrade_type: UpgradeType = "UPGRADE"

    @model_validator(mode="after")
    def _level(self) -> FeatureUpdate:
        if self.feature == "metadata.version":
            object.__setattr__(self, "level", parse_level(self.level))
        elif not isinstance(self.level, int) or self.level < 0:
            raise ValueError(f"level of {self.feature} must be an integer >= 0")
        return self


class Events(_Strict):
    broker_restarts: list[BrokerRestart] = []
    network_partitions: list[NetworkPartition] = []
    controller_failovers: list[ControllerFailover] = []
    rolling_upgrade: RollingUpgrade | None = None
    feature_updates: list[FeatureUpdate] = []


class Misc(_Strict):
    """Counts of the rarer record kinds spread over the run (each gated by metadata.version)."""

    config_changes: int = Field(0, ge=0)
    client_quota_changes: int = Field(0, ge=0)
    acl_changes: int = Field(0, ge=0)
    scram_changes: int = Field(0, ge=0)
    delegation_token_changes: int = Field(0, ge=0)
    producer_id_blocks: int = Field(0, ge=0)


class Lag(_Strict):
    median_ms: float = Field(50.0, ge=0)
    tail_alpha: float = Field(1.5, gt=0)      # Pareto tail index: smaller = heavier tail
    stall_probability: float = Field(0.001, ge=0, le=1)
    stall_ms: float = Field(5000.0, ge=0)


class BrokerProgress(_Strict):
    sample_interval_ms: int = Field(1000, ge=1)
    lag: Lag = Lag()
    catchup_ms: int = Field(2000, ge=0)


class MetadataRequests(_Strict):
    count: int = Field(0, ge=0)
    clients: int = Field(10, ge=1)
    context_groups: int = Field(3, ge=1)
    non_cache_fraction: float = Field(0.1, ge=0, le=1)
    least_loaded_fraction: float = Field(0.7, ge=0, le=1)
    wrong_cluster_id_fraction: float = Field(0.01, ge=0, le=1)
    consistency_token_fraction: float = Field(0.5, ge=0, le=1)
    timeout_ms: Sizes = Sizes(min=1000, max=30000)


class ProduceRequests(_Strict):
    count: int = Field(0, ge=0)
    producers: int = Field(10, ge=1)
    metadata_max_age_ms: int = Field(300_000, ge=1)
    epoch_field_fraction: float = Field(0.5, ge=0, le=1)
    acks_weights: dict[Literal["0", "1", "all"], float] = {"0": 0.1, "1": 0.4, "all": 0.5}

    @field_validator("acks_weights")
    @classmethod
    def _weights(cls, v: dict[str, float]) -> dict[str, float]:
        if any(w < 0 for w in v.values()) or sum(v.values()) <= 0:
            raise ValueError("weights must be >= 0 with a positive sum")
        return v


class FeatureUpdateRequests(_Strict):
    extra_rejected: int = Field(0, ge=0)


class Scenario(_Strict):
    name: str
    description: str = ""
    seed: int = 0
    cluster_id: str = Field(min_length=1)
    start_time: datetime
    duration_s: float = Field(gt=0)
    session_timeout_ms: int = Field(9000, ge=1)
    bootstrap_metadata_version: int | str
    brokers: Brokers
    controllers: Controllers = Controllers()
    log: Log
    topics: Topics
    events: Events = Events()
    misc: Misc = Misc()
    broker_progress: BrokerProgress = BrokerProgress()
    metadata_requests: MetadataRequests = MetadataRequests()
    produce_requests: ProduceRequests = ProduceRequests()
    feature_update_requests: FeatureUpdateRequests = FeatureUpdateRequests()

    @field_validator("bootstrap_metadata_version")
    @classmethod
    def _bootstrap_level(cls, v: int | str) -> int:
        level = parse_level(v)
        if level < MIN_BOOTSTRAP_LEVEL:
            raise ValueError(f"a cluster cannot be formatted below 3.3-IV0 (level {MIN_BOOTSTRAP_LEVEL}); got {level}")
        return level

    @field_validator("start_time")
    @classmethod
    def _utc(cls, v: datetime) -> datetime:
        return v if v.tzinfo else v.replace(tzinfo=timezone.utc)

    @model_validator(mode="after")
    def _consistent(self) -> Scenario:
        if self.topics.replication_factor > self.brokers.count:
            raise _KeyError("topics.replication_factor",
                            f"replication factor {self.topics.replication_factor} exceeds brokers.count {self.brokers.count}")
        if self.topics.min_insync_replicas > self.topics.replication_factor:
            raise _KeyError("topics.min_insync_replicas",
                            f"min.insync.replicas {self.topics.min_insync_replicas} exceeds the replication factor "
                            f"{self.topics.replication_factor}")
        level = int(self.bootstrap_metadata_version)
        if level > SOFTWARE_MAX_LEVEL[self.brokers.software_version]:
            raise _KeyError("bootstrap_metadata_version",
                            f"level {level} is above what software {self.brokers.software_version} supports "
                            f"({SOFTWARE_MAX_LEVEL[self.brokers.software_version]})")
        ids = set(self.broker_ids)
        for kind in ("broker_restarts", "network_partitions"):
            for i, ev in enumerate(getattr(self.events, kind)):
                if ev.broker not in ids:
                    raise _KeyError(f"events.{kind}.{i}.broker", f"broker {ev.broker} does not exist (ids {min(ids)}-{max(ids)})")
        for kind in ("broker_restarts", "network_partitions", "controller_failovers", "feature_updates"):
            for i, ev in enumerate(getattr(self.events, kind)):
                if ev.at_s >= self.duration_s:
                    raise _KeyError(f"events.{kind}.{i}.at_s", f"{ev.at_s} is not inside duration_s {self.duration_s}")
        ru = self.events.rolling_upgrade
        if ru is not None:
            if ru.at_s + ru.interval_s * (self.brokers.count + 1) >= self.duration_s:
                raise _KeyError("events.rolling_upgrade.at_s", "the upgrade does not finish inside duration_s")
            if int(ru.final_metadata_version) > SOFTWARE_MAX_LEVEL[ru.to_software]:
                raise _KeyError("events.rolling_upgrade.final_metadata_version",
                                f"above what software {ru.to_software} supports ({SOFTWARE_MAX_LEVEL[ru.to_software]})")
        if self.controllers.first_id in ids or (ids & set(self.controller_ids)):
            raise _KeyError("controllers.first_id", "controller ids overlap broker ids")
        return self

    @property
    def broker_ids(self) -> list[int]:
        return list(range(self.brokers.first_id, self.brokers.first_id + self.brokers.count))

    @property
    def controller_ids(self) -> list[int]:
        return list(range(self.controllers.first_id, self.controllers.first_id + self.controllers.count))

    @property
    def start_ms(self) -> int:
        return int(self.start_time.timestamp() * 1000)

    @property
    def duration_ms(self) -> int:
        return int(self.duration_s * 1000)


class _KeyError(ValueError):
    """A cross-field check failed; carries the dotted key to name in the error."""

    def __init__(self, key: str, msg: str) -> None:
        super().__init__(msg)
        self.key = key


def scenario_path(name_or_path: str) -> Path:
    """``conf/scenarios/<name>.yaml`` for a bare name, else the given file path."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.parent != Path("."):
        return path
    return SCENARIO_DIR / f"{name_or_path}.yaml"


def load_scenario(name_or_path: str, seed: int | None = None) -> Scenario:
    """Load and validate a scenario (rule: unknown keys, bad values and inconsistent keys are one-line errors)."""
    path = scenario_path(name_or_path)
    if not path.is_file():
        known = sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))
        raise ScenarioError(f"scenario {name_or_path!r} not found ({path}); known scenarios: {', '.join(known)}")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: not valid YAML: {' '.join(str(exc).split())}") from None
    if not isinstance(raw, dict):
        raise ScenarioError(f"{path}: expected a mapping of scenario keys at the top level")
    if seed is not None:
        raw["seed"] = seed
    return parse_scenario(raw, source=str(path))


def parse_scenario(raw: dict, source: str = "<scenario>") -> Scenario:
    """Validate a scenario given as a dict (same errors as :func:`load_scenario`)."""
    try:
        return Scenario(**raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        ctx_err = (first.get("ctx") or {}).get("error")
        if isinstance(ctx_err, _KeyError):
            raise ScenarioError(f"{source}: key '{ctx_err.key}': {ctx_err}") from None
        key = ".".join(str(p) for p in first["loc"]) or "<top>"
        msg = first["msg"]
        if first["type"] == "extra_forbidden":
            msg = "unknown key (not part of the scenario schema)"
        raise ScenarioError(f"{source}: key '{key}': {msg}") from None
    except _KeyError as exc:
        raise ScenarioError(f"{source}: key '{exc.key}': {exc}") from None
