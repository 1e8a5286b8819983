"""Schema conversion between Spark and the Delta log, and schema enforcement on writes.

Delta stores a table's schema in the same JSON form Spark uses for ``StructType``, so the
conversion is exact in both directions (no detour through Arrow types).
"""

from __future__ import annotations

import json

from deltalake import Schema as DeltaSchema
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import ArrayType, DataType, MapType, StructType

from kraft_replay.lake.errors import InvalidArgumentError, SchemaMismatchError


def to_delta_schema(schema: StructType) -> DeltaSchema:
    """Spark ``StructType`` -> delta-rs ``Schema`` via the shared JSON form."""
    return DeltaSchema.from_json(schema.json())


def sql_ident(name: str) -> str:
    """``name`` as a quoted Spark SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def to_spark_schema(schema: DeltaSchema) -> StructType:
    """delta-rs ``Schema`` -> Spark ``StructType`` via the shared JSON form."""
    return StructType.fromJson(json.loads(schema.to_json()))


def _strip_nullability(dt: DataType) -> DataType:
    """The type with every nullable flag and metadata normalised, for type equality checks."""
    if isinstance(dt, StructType):
        return StructType([type(f)(f.name, _strip_nullability(f.dataType), True) for f in dt.fields])
    if isinstance(dt, ArrayType):
        return ArrayType(_strip_nullability(dt.elementType), True)
    if isinstance(dt, MapType):
        return MapType(_strip_nullability(dt.keyType), _strip_nullability(dt.valueType), True)
    return dt


def same_type(a: DataType, b: DataType) -> bool:
    """True when two Spark types are equal ignoring nullability and field metadata."""
    return _strip_nullability(a) == _strip_nullability(b)


def same_schema(a: StructType, b: StructType) -> bool:
    """True when two schemas have the same column names, order and types (nullability ignored)."""
    return [f.name for f in a.fields] == [f.name for f in b.fields] and all(
        same_type(x.dataType, y.dataType) for x, y in zip(a.fields, b.fields)
    )


def conform(table: str, table_schema: StructType, df: DataFrame) -> DataFrame:
    """Schema enforcement on write: ``df`` must have exactly the table's columns with the same types.

    Columns are matched by name (order may differ; the result is ordered as the table). A missing,
    extra or differently typed column raises :class:`SchemaMismatchError` naming the table and column.
    No implicit casts: a silent cast could drop data (e.g. long -> int overflow).
    """
    df_fields = {f.name: f for f in df.schema.fields}
    table_names = [f.name for f in table_schema.fields]
    for field in table_schema.fields:
        got = df_fields.get(field.name)
        if got is None:
            raise SchemaMismatchError(
                f"table {table!r}: column {field.name!r} ({field.dataType.simpleString()}) is missing "
                "from the DataFrame; select or add it before writing"
            )
        if not same_type(got.dataType, field.dataType):
            raise SchemaMismatchError(
                f"table {table!r}: column {field.name!r} is {got.dataType.simpleString()} in the DataFrame "
                f"but {field.dataType.simpleString()} in the table; cast it to the table's type"
            )
    extra = [n for n in df_fields if n not in set(table_names)]
    if extra:
        raise SchemaMismatchError(
            f"table {table!r}: column {extra[0]!r} is not in the table schema "
            f"(table columns: {', '.join(table_names)}); drop it or recreate the table"
        )
    return df.select(*table_names)


def check_partition_predicate(spark: SparkSession, name: str, schema: StructType, partition_by: list[str],
                              predicate: str) -> None:
    """A ``replace_where`` / ``where`` predicate must resolve against ``name``'s partition columns alone
    (an :class:`InvalidArgumentError` in one line otherwise): it is checked on an empty frame of those
    columns, which Spark analyses on the driver."""
    if not partition_by:
        raise InvalidArgumentError(
            f"table {name!r} is not partitioned; replace_where needs partition columns "
            "(overwrite the whole table instead)")
    empty = spark.sql("SELECT " + ", ".join(
        f"CAST(NULL AS {f.dataType.simpleString()}) AS {sql_ident(f.name)}"
        for f in schema.fields if f.name in partition_by))
    try:
        empty.where(predicate)
    except Exception as exc:  # AnalysisException / ParseException
        msg = str(exc).strip().splitlines()[0][:200]
        raise InvalidArgumentError(
            f"table {name!r}: predicate {predicate!r} must use only partition columns "
            f"{list(partition_by)} ({msg})") from None
