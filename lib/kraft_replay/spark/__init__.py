"""Spark session factory (knows nothing of Kafka)."""

from kraft_replay.spark.session import JavaNotFoundError, find_java_home, get_spark, session_conf, stop_spark

__all__ = ["JavaNotFoundError", "find_java_home", "get_spark", "session_conf", "stop_spark"]
