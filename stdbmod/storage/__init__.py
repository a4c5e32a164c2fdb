"""Bytes-only transactional key/value storage: the interface and its two backends."""

from .base import ReadTxn, Storage, StorageFull, WriteTxn
from .lmdb_storage import LmdbStorage
from .memory import MemoryStorage

__all__ = ["ReadTxn", "WriteTxn", "Storage", "StorageFull", "LmdbStorage", "MemoryStorage"]
