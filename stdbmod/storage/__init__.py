"""Bytes-only transactional key/value storage: the interface and its two backends."""

from .base import Storage, StorageFull
from .lmdb_storage import LmdbStorage
from .memory import MemoryStorage
from .txn import ReadTxn, WriteTxn

__all__ = ["ReadTxn", "WriteTxn", "Storage", "StorageFull", "LmdbStorage", "MemoryStorage"]
