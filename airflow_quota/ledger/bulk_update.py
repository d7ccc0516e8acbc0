"""Many rows of one table written in one statement: the values their ORM objects hold, by primary key.

A cycle turning over its capacity changes hundreds of rows (job rows, resumed task instances) with the
same few columns; the unit of work writes each row with its own UPDATE (on PostgreSQL, one round trip
each) after its own bookkeeping. ``update_in_bulk`` sends one ``UPDATE ... FROM unnest(arrays)`` per set
of columns on PostgreSQL (each array cast to its column's type, the values through the columns' own bind
processors, as the unit of work would send them) and a Core executemany on SQLite (in-process, row by
row). The caller keeps the objects' own state right (job rows: ``set_committed_value``; resumed task
instances: expunged): this writes, nothing more.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

from sqlalchemy import Connection, Table, bindparam, text, update
from sqlalchemy.engine import Dialect


def update_in_bulk(
    connection: Connection, table: Table, names: tuple[str, ...], objects: Sequence[object]
) -> None:
    """Write the columns ``names`` of the rows of ``objects`` (mapped to ``table``, whose attributes are
    named as its columns), each row found by its one-column primary key, with the values the objects
    hold now."""
    if not objects:
        return
    dialect = connection.dialect
    (key,) = (column.name for column in table.primary_key.columns)
    columns: dict[str, list[Any]] = {}
    for name, process in zip((key, *names), _bind_processors(table, (key, *names), dialect), strict=True):
        values = [getattr(each, name) for each in objects]
        columns[name] = values if process is None else list(map(process, values))
    if dialect.name == "postgresql":
        connection.execute(_update_postgres(table, key, names, dialect), columns)
    else:
        connection.execute(
            _update_by_key(table, key, names),
            [{f"b_{name}": values[at] for name, values in columns.items()} for at in range(len(objects))],
        )


@cache
def _bind_processors(
    table: Table, names: tuple[str, ...], dialect: Dialect
) -> list[Callable[[Any], Any] | None]:
    """What the unit of work does to each column's value before the driver sees it (JSON serialized, a
    timestamp in UTC, a UUID as text); SQLite's Core executemany applies them itself."""
    if dialect.name != "postgresql":
        return [None] * len(names)
    return [table.c[name].type.dialect_impl(dialect).bind_processor(dialect) for name in names]


@cache
def _update_postgres(table: Table, key: str, names: tuple[str, ...], dialect: Dialect) -> Any:
    """``UPDATE table ... FROM unnest(arrays)``: one statement, one array per column (cast to the
    column's type; the driver sends each as an array literal)."""
    every = (key, *names)
    quote = dialect.identifier_preparer.quote
    types = {name: table.c[name].type.compile(dialect=dialect) for name in every}
    arrays = ", ".join(f"CAST(:{name} AS {types[name]}[])" for name in every)
    name_of_table, key_name = quote(table.name), quote(key)
    return text(
        f"UPDATE {name_of_table} SET {', '.join(f'{quote(name)} = new.{quote(name)}' for name in names)} "
        f"FROM unnest({arrays}) AS new({', '.join(map(quote, every))}) "
        f"WHERE {name_of_table}.{key_name} = new.{key_name}"
    )


@cache
def _update_by_key(table: Table, key: str, names: tuple[str, ...]) -> Any:
    return (
        update(table)
        .where(table.c[key] == bindparam(f"b_{key}"))
        .values({name: bindparam(f"b_{name}", type_=table.c[name].type) for name in names})
    )
