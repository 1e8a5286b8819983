"""Backend selection: auto-detection through the JVM, and a clear error when delta-spark is forced."""

from __future__ import annotations

import pytest

from kraft_replay.lake import BackendUnavailableError, Lake
from kraft_replay.lake.backend import DELTA_SPARK_CLASS, delta_spark_available, resolve_backend


def test_auto_picks_deltars_when_delta_spark_classes_are_absent(spark, tmp_path):
    assert not delta_spark_available(spark)
    assert resolve_backend("auto", spark) == "deltars"
    assert Lake(str(tmp_path), spark).backend == "deltars"


def test_detection_finds_a_class_that_is_on_the_classpath(spark):
    # The same JVM lookup returns True for a class that is loaded (Spark's own session class).
    assert delta_spark_available(spark, "org.apache.spark.sql.SparkSession")
    assert not delta_spark_available(spark, DELTA_SPARK_CLASS)


def test_auto_picks_delta_spark_when_its_classes_load(spark, monkeypatch):
    import kraft_replay.lake.backend as backend

    monkeypatch.setattr(backend, "DELTA_SPARK_CLASS", "org.apache.spark.sql.SparkSession")
    assert backend.resolve_backend("auto", spark) == "delta-spark"


def test_forcing_delta_spark_without_the_jar_is_a_one_line_error(spark, tmp_path):
    with pytest.raises(BackendUnavailableError) as exc:
        Lake(str(tmp_path), spark, backend="delta-spark")
    msg = str(exc.value)
    assert "\n" not in msg and DELTA_SPARK_CLASS in msg and "--backend deltars" in msg
