"""PostgreSQL behind the bytes-only storage interface (psycopg 3): several stdbmod nodes on one
database. Needs the `postgres` extra (`pip install 'stdbmod[postgres]'`)."""

from .storage import DEFAULT_SCHEMA, PostgresStorage

__all__ = ["PostgresStorage", "DEFAULT_SCHEMA"]
