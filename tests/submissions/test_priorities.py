"""The scoring queue's order on a real Redis broker: official, verification, practice.

Messages go through the portal's own Celery configuration (``portal.core.jobs`` priorities,
the broker transport options in settings) to a queue of this test's own, sent in the
worst order, and are read back the way a worker reads them.
"""

from __future__ import annotations

import uuid

import pytest
from django.conf import settings

from portal.core import jobs


@pytest.fixture
def redis_broker() -> None:
    if not settings.CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
        pytest.skip("the embedded filesystem broker keeps the order of arrival (no priorities)")


def test_a_worker_takes_official_scores_then_verifications_then_practice(redis_broker):
    queue = f"test-priorities-{uuid.uuid4().hex}"
    sent = [
        ("practice", jobs.score_priority(practice=True)),
        ("verification", jobs.score_priority(practice=False, verification=True)),
        ("official", jobs.score_priority(practice=False)),
        ("practice-2", jobs.score_priority(practice=True)),
        ("official-2", jobs.score_priority(practice=False)),
    ]
    for name, priority in sent:
        jobs.app.send_task("test.noop", args=(name,), queue=queue, priority=priority)

    taken = []
    with jobs.app.connection_for_read() as connection:
        simple = connection.SimpleQueue(queue)
        try:
            for _ in sent:
                message = simple.get(timeout=5)
                args, _kwargs, _embed = message.decode()
                taken.append(args[0])
                message.ack()
        finally:
            simple.queue.delete()
            simple.close()

    assert taken == ["official", "official-2", "verification", "practice", "practice-2"]
