"""kraft-replay: Spark-native replay of Kafka's KRaft metadata log.

Data flows one way: ``codec`` (bytes <-> records) -> ``ingest`` (bronze tables) ->
``replay`` (silver) -> ``outcomes`` (gold) -> ``serve`` (CLI, DAGs, dashboard).
``lake`` (Delta tables) and ``spark`` (session) sit underneath and know nothing of Kafka.
"""

__version__ = "0.1.0"
