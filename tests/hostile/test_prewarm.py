"""The warm start through the real runner: the walk reads what the entrant may read and
nothing it may not, and its readings are kept with the run (docs/rules.md, "The warm
start"). Symlinks, FIFOs and the bounds are tested on the supervisor alone
(tests/supervisor/test_prewarm.py)."""

from __future__ import annotations

import os

import pytest

from tests.hostile.conftest import Hostile, script

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

MIB = 1 << 20

SCRIPTS = {
    "secret_keeper": {
        "data/": (b"", 0o755),
        "data/weights.bin": (os.urandom(8 * MIB), 0o644),
        "data/secret.bin": (os.urandom(16 * MIB), 0o600),  # root's alone
        "submission/run": (
            script(
                """
        cat /data/secret.bin > /dev/null 2>&1 && echo "secret: read" || echo "secret: refused"
        exec answer
        """
            ).encode(),
            0o755,
        ),
    },
}


def test_the_walk_reads_the_entrants_files_and_not_roots_and_is_kept(hostile: Hostile) -> None:
    outcome = hostile.score("secret_keeper")

    assert outcome.run.verdict == "passed", outcome.why
    outcome.saw("secret: refused")
    warm = outcome.run.resources["prewarm"]
    assert warm["truncated"] is False and warm["files"] >= 2 and warm["ms"] > 0
    # The 8 MiB the entrant may read, besides busybox and the attack helpers (a few MiB),
    # never the 16 MiB only root may read.
    assert 8 * MIB <= warm["bytes"] < 8 * MIB + 12 * MIB
