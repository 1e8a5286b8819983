"""Profiles from ``conf/*.yaml``: Spark settings and lake defaults, validated with pydantic."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kraft_replay.resources import conf_dir

# conf/ of the checkout, the copy a wheel carries, or $KRAFT_REPLAY_CONF (kraft_replay.resources).
CONF_DIR = conf_dir()


class ConfigError(ValueError):
    """A profile or scenario file is missing or invalid (message names the file and key)."""


class SparkProfile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    master: str | None = "local[*]"
    app_name: str = "kraft-replay"
    driver_memory: str | None = "4g"
    shuffle_partitions: int = Field(4, ge=1)
    ui: bool = False
    #: apply Delta's SQL extension and catalog (``spark.sql.extensions``, ``spark.sql.catalog.spark_catalog``)
    #: when the delta-spark jar is configured (spark.jars.packages, spark.jars, $SPARK_HOME/jars)
    delta_sql: bool = False
    #: extra options for the driver's and the executors' JVMs (e.g. ``-XX:TieredStopAtLevel=1``: the
    #: test profile's, where every run is small and compiling hot code costs more than it saves)
    java_options: str = ""
    #: extra options for the JVM of a live replay (``replay --mode stream``), after ``java_options``
    #: (:func:`stream_profile`)
    stream_java_options: str = ""
    #: the JVMs' garbage collector unless their options pick one (``-XX:+Use<collector>``): the throughput
    #: collector for batch work (a 10M replay on two cores: 5 % sooner, 6 % less CPU than G1); G1 in a
    #: live replay's process (:func:`stream_profile`: its freshness and memory were measured on G1)
    collector: Literal["ParallelGC", "G1GC", "SerialGC"] = "ParallelGC"
    conf: dict[str, str] = Field(default_factory=dict)

    @field_validator("conf", mode="before")
    @classmethod
    def _stringify(cls, value: object) -> object:
        """Spark settings are strings; YAML numbers and booleans are accepted and written as Spark spells them."""
        if isinstance(value, dict):
            return {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in value.items()}
        return value


class LakeProfile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    root: str | None = "./lake"
    backend: Literal["auto", "deltars", "delta-spark"] = "auto"
    target_file_rows: int = Field(2_000_000, ge=1)


class Profile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = "local"
    spark: SparkProfile = Field(default_factory=SparkProfile)
    lake: LakeProfile = Field(default_factory=LakeProfile)


#: the Spark settings of a live replay's session, unless its profile sets them: the process runs the
#: stream's micro-batches and the derived tables' batch jobs side by side (a thread of their own), and
#: under FIFO scheduling a micro-batch's one task waited behind every task a derive job had queued;
#: under FAIR scheduling each pool (the stream's ``default``, the derive's :data:`DERIVE_POOL`) takes
#: the next free core in turn
STREAM_CONF = {"spark.scheduler.mode": "FAIR"}
#: the scheduler pool of the live replay's derive jobs (``spark.scheduler.pool``)
DERIVE_POOL = "derive"


def stream_profile(profile: Profile) -> Profile:
    """``profile`` as a live replay's process uses it: its ``stream_java_options`` after its
    ``java_options``, :data:`STREAM_CONF` where its ``conf`` says nothing else, and G1 unless the
    options pick a collector."""
    sp = profile.spark
    options = f"{sp.java_options} {sp.stream_java_options}".strip()
    conf = {**STREAM_CONF, **sp.conf}
    return profile.model_copy(update={"spark": sp.model_copy(update={"java_options": options, "conf": conf,
                                                                     "collector": "G1GC"})})


def load_profile(name_or_path: str = "local") -> Profile:
    """Load ``conf/<name>.yaml`` (or a YAML file path) into a validated :class:`Profile`."""
    path = Path(name_or_path)
    if not path.suffix:
        path = CONF_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in CONF_DIR.glob("*.yaml"))
        raise ConfigError(f"profile {name_or_path!r} not found ({path}); known profiles: {', '.join(known)}")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    try:
        return Profile(name=path.stem, **raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"{path}: key '{key}': {first['msg']}") from None
