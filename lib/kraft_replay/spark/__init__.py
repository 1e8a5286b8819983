"""Spark session factory (knows nothing of Kafka)."""

from kraft_replay.spark.session import (
    SMALL_RUN_CONF, SMALL_RUN_ROWS, JavaNotFoundError, SessionError, find_java_home, get_spark, lineage_cut, session_conf,
    sized_by, sized_run, small_run_conf, stop_spark, tasks_for, tasks_holding,
)

__all__ = ["JavaNotFoundError", "SessionError", "find_java_home", "get_spark", "lineage_cut", "session_conf", "sized_by", "sized_run", "small_run_conf",
           "stop_spark", "tasks_for", "tasks_holding", "SMALL_RUN_CONF", "SMALL_RUN_ROWS"]
