"""The shared cache on Redis (``PODIUM_CACHE_URL``): Django's own backend, with one client
object per server instead of one per operation.

Django's client builds a ``redis.Redis`` around its connection pool for every get and
set, and building one fills a table of about 170 response callbacks: about 0.2 ms of
CPU each time, ten times on a signed-in board page, more than Redis takes to answer. A
``redis.Redis`` holds no connection of its own (each command borrows one from the pool
and returns it), so one per server serves every thread, as redis-py documents.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.cache.backends.redis import RedisCache as DjangoRedisCache
from django.core.cache.backends.redis import RedisCacheClient
from redis import ConnectionPool, Redis


class ReusedClient(RedisCacheClient):
    """Django's client, keeping the ``redis.Redis`` it makes around each server's pool."""

    def __init__(self, servers: list[str], **options: Any) -> None:
        super().__init__(servers, **options)
        # Django's own choice of pool (the first server for writes, a replica for reads);
        # not in django-stubs.
        self._pool_for: Callable[[bool], ConnectionPool] = self._get_connection_pool  # type: ignore[attr-defined]
        self._clients: dict[int, Redis] = {}

    def get_client(self, key: Any = None, *, write: bool = False) -> Redis:
        pool = self._pool_for(write)
        client = self._clients.get(id(pool))
        if client is None:
            client = self._clients.setdefault(id(pool), Redis(connection_pool=pool))
        return client


class RedisCache(DjangoRedisCache):
    """``django.core.cache.backends.redis.RedisCache`` with :class:`ReusedClient`."""

    def __init__(self, server: str | list[str], params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = ReusedClient
