"""Spark session factory (knows nothing of Kafka)."""

from kraft_replay.spark.session import (
    JavaNotFoundError, SessionError, find_java_home, get_spark, session_conf, stop_spark,
)

__all__ = ["JavaNotFoundError", "SessionError", "find_java_home", "get_spark", "session_conf", "stop_spark"]
