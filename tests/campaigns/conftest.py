"""Campaign fixtures: a campaign benchmark on a 40-image official cohort (rows only: rounds
are recorded from outcomes here, never run), its campaign with a baseline image, and
helpers that enter built submissions and report rounds the way a scoring host does."""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
from collections.abc import Callable
from typing import Any

import pytest
import time_machine
from django.utils import timezone

from portal.campaigns import creation, rounds
from portal.campaigns.models import Campaign
from portal.campaigns.outcomes import (
    BASELINE_CLOSE,
    BASELINE_OPEN,
    ENTRY,
    ImageRun,
    RoundOutcome,
    SliceRun,
)
from portal.contests.models import Benchmark, Cohort, CohortItem
from portal.core import jobs
from portal.submissions.builds import submission_build_finished
from portal.submissions.models import AttemptLedger, Submission
from tests import factories

BASELINE_DIGEST = "sha256:" + "b" * 64
HOST = "gpu-host-1"
_digests = itertools.count(1)


@pytest.fixture
def tasks(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every task sent once its transaction committed: name, args, queue and countdown."""
    calls: list[dict[str, Any]] = []

    def send_task(name: str, args: Any = (), **options: Any) -> None:
        calls.append({"name": name, "args": tuple(args or ()), **options})

    monkeypatch.setattr(jobs.app, "send_task", send_task)
    return calls


@pytest.fixture
def campaign_benchmark(db: Any) -> Benchmark:
    benchmark = factories.BenchmarkFactory(kind=Benchmark.CAMPAIGN, hardware_class="gpu-h200")
    for kind in (Cohort.OFFICIAL, Cohort.PRACTICE):
        cohort = Cohort.objects.create(benchmark=benchmark, kind=kind)
        CohortItem.objects.bulk_create(
            CohortItem(
                cohort=cohort,
                position=position,
                canonical_name=f"{kind}-{position}.jpg",
                sha256=f"{position:064x}",
                reference_class=position % 1000,
            )
            for position in range(40)
        )
    return benchmark


@pytest.fixture
def campaign(campaign_benchmark: Benchmark) -> Campaign:
    """Round size 20 in 4 slices; the rules' defaults otherwise; the baseline recorded."""
    campaign = creation.campaign_create(benchmark=campaign_benchmark, round_size=20, slice_count=4)
    return creation.campaign_baseline_record(
        campaign=campaign, image_tag="podium/starter-kit:1", image_digest=BASELINE_DIGEST
    )


Enter = Callable[..., Submission]


@pytest.fixture
def enter(campaign_benchmark: Benchmark) -> Enter:
    """A built official submission of a new entrant (its attempt charged), moved out of
    ``building`` by ``submission_build_finished`` at ``at`` (now by default)."""

    def enter_one(
        *,
        digest: str | None = None,
        at: dt.datetime | None = None,
        submitted_at: dt.datetime | None = None,
        kind: str = Submission.OFFICIAL,
        entrant: Any = None,
        source: str | None = None,
        environment_digest: str = "sha256:env",
    ) -> Submission:
        """``source``: the archive's content (the same text gives the same source digest;
        unique by default); ``digest``: the image ID its build committed."""
        at = at or timezone.now()
        entrant = entrant or factories.UserFactory()
        environment = factories.EnvironmentFactory(owner=entrant, benchmark=campaign_benchmark)
        submission = Submission.objects.create(
            entrant=entrant,
            benchmark=campaign_benchmark,
            environment=environment,
            kind=kind,
            status=Submission.BUILDING,
            submitted_at=submitted_at or at - dt.timedelta(minutes=10),
            source_name="source.tar.gz",
            source_format="tar.gz",
            source_sha256=hashlib.sha256(
                (source if source is not None else f"unique {next(_digests)}").encode()
            ).hexdigest(),
            source_bytes=1,
            environment_image_digest=environment_digest,
        )
        AttemptLedger.objects.create(
            entrant=entrant,
            benchmark=campaign_benchmark,
            submission=submission,
            kind=kind,
            attempt_day=at.date(),
            delta=AttemptLedger.CHARGE,
            reason="upload accepted",
            at=at,
        )
        digest = digest or f"sha256:{next(_digests):064x}"
        with time_machine.travel(at, tick=False):
            submission_build_finished(
                submission_id=submission.pk,
                ok=True,
                image_tag=f"podium/sub-{submission.pk}:1",
                image_digest=digest,
            )
        submission.refresh_from_db()
        return submission

    return enter_one


def image_run(
    role: str,
    entry_id: int | None,
    digest: str,
    seconds: list[float],
    *,
    totals: list[int],
    wrong: int = 0,
    exit_code: int | None = 0,
    killed: bool = False,
) -> ImageRun:
    """A pass over every slice; ``wrong`` mismatches in the first; ``exit_code`` and
    ``killed`` apply to the first slice, where the pass then stops."""
    if exit_code != 0 or killed:
        first = SliceRun(
            0, int(seconds[0] * 1e9), exit_code, None, killed, False, False, 0, totals[0]
        )
        return ImageRun(role, entry_id, digest, [first])
    slices = [
        SliceRun(
            index,
            int(wall_s * 1e9),
            0,
            None,
            False,
            False,
            True,
            total - (wrong if index == 0 else 0),
            total,
        )
        for index, (total, wall_s) in enumerate(zip(totals, seconds, strict=True))
    ]
    return ImageRun(role, entry_id, digest, slices)


Report = Callable[..., RoundOutcome]


def report(
    claim: rounds.RoundClaim,
    entries: dict[int, dict[str, Any]] | None = None,
    *,
    baseline_s: float = 10.0,
    closing_s: float | None = None,
    void_reason: str = "",
    host: str = HOST,
) -> RoundOutcome:
    """The outcome of a claimed round. ``entries``: per submission id, ``seconds`` (every
    slice; 8.0 by default: a 0.2 speedup) and image_run's keywords."""
    entries = entries or {}
    totals = [end - start for start, end in claim.slices]
    count = len(totals)
    runs = []
    for image in claim.entries:
        spec = dict(entries.get(image.submission_id or 0, {}))
        seconds = [spec.pop("seconds", 8.0)] * count
        runs.append(
            image_run(ENTRY, image.entry_id, image.image_digest, seconds, totals=totals, **spec)
        )
    return RoundOutcome(
        round_id=claim.round_id,
        host=host,
        request_digest=claim.request_digest,
        baseline_open=image_run(
            BASELINE_OPEN, None, claim.baseline.image_digest, [baseline_s] * count, totals=totals
        ),
        baseline_close=image_run(
            BASELINE_CLOSE,
            None,
            claim.baseline.image_digest,
            [closing_s or baseline_s] * count,
            totals=totals,
        ),
        entries=runs,
        environment={"cpu_model": "test CPU", "cpu_cores": 16, "cgroup_cpu_quota": "max"},
        void_reason=void_reason,
    )
