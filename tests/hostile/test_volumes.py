"""A submission image that declares a volume gets nothing writable there.

A ``VOLUME`` in an image's config makes the engine give every container made from it an
anonymous volume: writable despite the read-only root, and counted by no size. Builds
refuse base images that declare one (tests/scoring/test_build_leftovers.py), but an image
built before that rule, or a config changed some other way, must still find nothing
writable: each declared volume of a scored run gets an empty read-only tmpfs instead.
"""

from __future__ import annotations

from typing import Any

import pytest

from scoring import engine
from tests.hostile.conftest import Hostile, script

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

SCRIPTS = {
    "volume_writer": {
        # The folder is writable by anyone, so an anonymous volume made from it would be
        # writable by the entrant: only the read-only tmpfs stops the write.
        "data/": (b"", 0o1777),
        "submission/run": (
            script(
                """
        if dd if=/dev/zero of=/data/fill bs=1M count=4 2>/dev/null; then
          echo "volume: writable"
        else
          echo "volume: refused"
        fi
        ls -A /data | wc -l | sed 's/^ */volume entries: /'
        exec answer
        """
            ).encode(),
            0o755,
        ),
    },
}
IMAGE_CONFIG: dict[str, dict[str, Any]] = {"volume_writer": {"Volumes": {"/data": {}}}}


def test_a_declared_volume_is_an_empty_read_only_tmpfs_in_a_scored_run(hostile: Hostile) -> None:
    volumes_before = {volume.name for volume in engine.client().volumes.list()}

    outcome = hostile.score("volume_writer")

    assert outcome.run.verdict == "passed", outcome.why
    outcome.saw("volume: refused", "volume entries: 0")
    # And the engine made no anonymous volume for it.
    assert {volume.name for volume in engine.client().volumes.list()} <= volumes_before
