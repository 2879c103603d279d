"""The shared cache on Redis (``portal.core.redis_cache``): one client object per server, shared
by every operation and thread, and still every value where it was put."""

from __future__ import annotations

import threading

import pytest
from django.conf import settings
from django.core.cache import cache

from portal.core.redis_cache import RedisCache

pytestmark = pytest.mark.skipif(
    not settings.CACHES["default"]["BACKEND"].endswith("redis_cache.RedisCache"),
    reason="the shared cache is not Redis here (no PODIUM_CACHE_URL nor Redis broker)",
)


def test_operations_share_one_client():
    backend = RedisCache(settings.CACHES["default"]["LOCATION"], {})

    backend.set("podium:test:one", 1)
    first = backend._cache.get_client()
    backend.get("podium:test:one")

    assert backend._cache.get_client(write=True) is first
    assert backend._cache.get_client() is first


def test_threads_sharing_the_client_each_read_their_own_values():
    errors: list[str] = []

    def worker(index: int) -> None:
        for round_ in range(50):
            key = f"podium:test:thread:{index}"
            cache.set(key, (index, round_))
            got = cache.get_many([key, "podium:test:absent"])
            if got != {key: (index, round_)}:
                errors.append(f"thread {index} round {round_}: {got}")

    threads = [threading.Thread(target=worker, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
