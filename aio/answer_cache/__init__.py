"""The exact answer cache: a deterministic request asked again (the same key scope) is answered from the cache,
without the engine, billing 0 tokens. `aio.answer_cache.cache` decides which requests use it."""
from aio.answer_cache.cache import CACHE_HEADER, AnswerCache, CacheLookup, hit_body
from aio.answer_cache.key import EXCLUDED_FIELDS, cache_key
from aio.answer_cache.stores import CachedAnswer, MemoryStore, SqlStore

__all__ = ["CACHE_HEADER", "EXCLUDED_FIELDS", "AnswerCache", "CacheLookup", "CachedAnswer", "MemoryStore", "SqlStore",
           "cache_key", "hit_body"]
