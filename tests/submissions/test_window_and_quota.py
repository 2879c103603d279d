"""The upload window and the daily allowance, through the REST API, at their exact edges.

The clock is frozen with time_machine at each instant that matters: a microsecond
either side of opening and closing, of Seoul midnight (15:00 UTC), of UTC midnight
(which means nothing here), and of New York midnight on the days daylight saving time
starts and ends. Environments follow the window too: created and built before opening,
refused from the closing instant on.
"""

from __future__ import annotations

import datetime as dt
import io
import uuid
from pathlib import Path
from typing import Any

import pytest
import time_machine
from rest_framework.test import APIClient

from portal.accounts.models import ApiToken
from portal.contests.models import HardwareClass
from portal.core import jobs
from portal.environments.models import Environment
from portal.environments.services import environment_create, environment_rebuild
from portal.submissions.models import AttemptLedger, Submission
from scoring import engine
from scoring.build import builds
from tests import factories
from tests.submissions.test_concurrent_charging import source_archive

UTC = dt.UTC
KST = dt.timezone(dt.timedelta(hours=9))
US = dt.timedelta(microseconds=1)
OPENS_AT = dt.datetime(2026, 8, 10, 0, 0, tzinfo=KST)  # 2026-08-09 15:00 UTC
CLOSES_AT = dt.datetime(2026, 8, 31, 18, 0, tzinfo=KST)  # 2026-08-31 09:00 UTC


@pytest.fixture(autouse=True)
def _no_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobs.app, "send_task", lambda *args, **kwargs: None)


@pytest.fixture
def flagship(db: Any) -> Any:
    """The flagship's window and rules: 2 official and 10 practice attempts a Seoul day."""
    return factories.BenchmarkFactory(opens_at=OPENS_AT, closes_at=CLOSES_AT)


class Entrant:
    """alice's REST client: uploads and reads her quota with a personal token."""

    def __init__(self, user: Any, benchmark: Any, archive: Path) -> None:
        self.client = APIClient()
        token = ApiToken.objects.create(user=user, label="tests")
        self.client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
        self.benchmark = benchmark
        factories.cohorts(benchmark)  # an upload of a kind needs its cohort
        self.environment = factories.EnvironmentFactory(owner=user, benchmark=benchmark)
        self.archive = archive

    def upload_at(self, at: dt.datetime, kind: str = "official") -> Any:
        """POST an upload at ``at``; an accepted one's build ends at once (queued to score),
        as the build worker would end it, so a later upload finds a free build slot."""
        with time_machine.travel(at, tick=False), self.archive.open("rb") as source:
            response = self.client.post(
                f"/api/v1/benchmarks/{self.benchmark.slug}/submissions/",
                {"environment": self.environment.pk, "kind": kind, "source": source},
                format="multipart",
            )
        if response.status_code == 201:
            Submission.objects.filter(pk=response.json()["id"]).update(status=Submission.QUEUED)
        return response

    def quota_at(self, at: dt.datetime) -> dict[str, Any]:
        with time_machine.travel(at, tick=False):
            response = self.client.get(f"/api/v1/benchmarks/{self.benchmark.slug}/quota/")
        assert response.status_code == 200, response.content
        return response.json()


@pytest.fixture
def entrant(alice: Any, tmp_path: Path) -> Any:
    archive = tmp_path / "source.tar.gz"
    archive.write_bytes(source_archive())

    def make(benchmark: Any) -> Entrant:
        return Entrant(alice, benchmark, archive)

    return make


def code(response: Any) -> str | int:
    """201 for an accepted upload, else the machine code (docs/api.md, "Errors")."""
    if response.status_code == 201:
        return 201
    return response.json()["code"]


def instant(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value)


# The window ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("at", "expected", "http_status"),
    [
        (OPENS_AT - US, "window_not_open", 409),
        (OPENS_AT, 201, 201),
        (OPENS_AT + US, 201, 201),
        (CLOSES_AT - US, 201, 201),
        (CLOSES_AT, "window_closed", 409),
        (CLOSES_AT + US, "window_closed", 409),
    ],
    ids=[
        "1us-before-opening",
        "at-opening",
        "1us-after-opening",
        "1us-before-closing",
        "at-closing",
        "1us-after-closing",
    ],
)
def test_uploads_open_inclusive_and_close_exclusive(
    flagship, entrant, data_dir, at, expected, http_status
):
    response = entrant(flagship).upload_at(at)

    assert response.status_code == http_status, response.content
    assert code(response) == expected
    stored = [path for path in (data_dir / "submissions").rglob("*") if path.is_file()]
    if expected == 201:
        assert Submission.objects.get().submitted_at == at
        assert AttemptLedger.objects.count() == len(stored) == 1
    else:
        assert "detail" in response.json()
        assert not Submission.objects.exists()
        assert not AttemptLedger.objects.exists()
        assert stored == []


def test_practice_is_accepted_before_the_opening_and_closes_with_the_window(flagship, entrant):
    alice = entrant(flagship)

    before = OPENS_AT - dt.timedelta(days=3)
    quota = alice.quota_at(before)
    early = alice.upload_at(before, kind="practice")
    official = alice.upload_at(before)
    late = alice.upload_at(CLOSES_AT, kind="practice")

    assert (code(early), code(official), code(late)) == (201, "window_not_open", "window_closed")
    assert Submission.objects.get().kind == Submission.PRACTICE
    ledger = AttemptLedger.objects.get()
    assert (ledger.kind, ledger.delta) == (Submission.PRACTICE, AttemptLedger.CHARGE)
    assert instant(quota["practice"]["next_available_at"]) == before
    assert instant(quota["official"]["next_available_at"]) == OPENS_AT


def test_a_gpu_class_without_every_pin_does_not_open_and_says_which_pins_are_missing(
    flagship, entrant, data_dir
):
    gpu = HardwareClass.objects.create(
        name="gpu-test", gpus=1, gpu_model="NVIDIA H200", pin_gpu_driver="550.90.07"
    )
    flagship.hardware_class = gpu
    flagship.save(update_fields=["hardware_class"])
    alice = entrant(flagship)
    during = OPENS_AT + dt.timedelta(days=1)

    refused = [alice.upload_at(during), alice.upload_at(during, kind="practice")]

    assert [code(response) for response in refused] == ["window_not_open"] * 2
    assert "no pinned CUDA, kernel, engine, supervisor version yet" in refused[0].json()["detail"]
    assert not Submission.objects.exists() and not AttemptLedger.objects.exists()
    assert not [path for path in (data_dir / "submissions").rglob("*") if path.is_file()]
    assert alice.quota_at(during)["remaining_today"] == 2  # nothing was charged

    HardwareClass.objects.filter(pk=gpu.pk).update(
        pin_cuda="12.4",
        pin_kernel="6.8.0",
        pin_engine_version="28.2.2",
        pin_supervisor_sha256="a" * 64,
    )
    assert code(alice.upload_at(during)) == 201


@pytest.mark.parametrize(
    ("at", "expected"),
    [
        (OPENS_AT - dt.timedelta(days=5), 201),
        (OPENS_AT - US, 201),
        (CLOSES_AT - US, 201),
        (CLOSES_AT, "window_closed"),
    ],
    ids=["days-before-opening", "1us-before-opening", "1us-before-closing", "at-closing"],
)
def test_environments_are_accepted_before_opening_but_not_from_closing_on(
    flagship, alice, at, expected
):
    client = APIClient()
    client.force_authenticate(alice)

    with time_machine.travel(at, tick=False):
        response = client.post(
            f"/api/v1/benchmarks/{flagship.slug}/environments/",
            {"name": "kit", "dockerfile": io.BytesIO(b"FROM localhost/podium/busybox:1\n")},
            format="multipart",
        )

    assert code(response) == expected, response.content
    assert Environment.objects.exists() == (expected == 201)


# Attempts per Seoul day -----------------------------------------------------------------


def test_the_third_official_upload_of_a_seoul_day_waits_for_15_utc_not_utc_midnight(
    flagship, entrant
):
    alice = entrant(flagship)
    # 2026-08-12 in Seoul runs from 2026-08-11 15:00 UTC to 2026-08-12 15:00 UTC.
    seoul_day_starts = dt.datetime(2026, 8, 11, 15, 0, tzinfo=UTC)
    seoul_day_ends = dt.datetime(2026, 8, 12, 15, 0, tzinfo=UTC)
    utc_midnight = dt.datetime(2026, 8, 12, 0, 0, tzinfo=UTC)

    assert code(alice.upload_at(seoul_day_starts)) == 201
    assert code(alice.upload_at(utc_midnight - US)) == 201
    refused_at_utc_midnight = alice.upload_at(utc_midnight)
    refused_at_the_last_moment = alice.upload_at(seoul_day_ends - US)
    accepted_at_seoul_midnight = alice.upload_at(seoul_day_ends)

    assert refused_at_utc_midnight.status_code == 429
    assert code(refused_at_utc_midnight) == "quota_exhausted"
    assert "2026-08-12T15:00:00+00:00" in refused_at_utc_midnight.json()["detail"]
    assert code(refused_at_the_last_moment) == "quota_exhausted"
    assert code(accepted_at_seoul_midnight) == 201
    days = AttemptLedger.objects.order_by("id").values_list("attempt_day", flat=True)
    assert list(days) == [dt.date(2026, 8, 12), dt.date(2026, 8, 12), dt.date(2026, 8, 13)]


def test_the_quota_says_what_is_left_and_when_the_next_attempt_comes(flagship, entrant):
    alice = entrant(flagship)
    morning = dt.datetime(2026, 8, 12, 1, 0, tzinfo=UTC)  # 10:00 KST
    alice.upload_at(morning)

    one_left = alice.quota_at(morning)
    alice.upload_at(morning)
    none_left = alice.quota_at(morning)
    next_day = alice.quota_at(dt.datetime(2026, 8, 12, 15, 0, tzinfo=UTC))

    assert one_left["timezone"] == "Asia/Seoul"
    assert (one_left["attempts_per_day"], one_left["used_today"], one_left["remaining_today"]) == (
        2,
        1,
        1,
    )
    assert instant(one_left["next_available_at"]) == morning  # now: one is left
    assert one_left["resets_at"] == "2026-08-12T15:00:00+00:00"  # 00:00 KST on the 13th
    assert (none_left["used_today"], none_left["remaining_today"]) == (2, 0)
    assert none_left["next_available_at"] == "2026-08-12T15:00:00+00:00"
    assert none_left["official"]["remaining_today"] == 0
    assert none_left["practice"]["attempts_per_day"] == 10
    assert none_left["practice"]["remaining_today"] == 10
    assert (next_day["used_today"], next_day["remaining_today"]) == (0, 2)
    assert next_day["resets_at"] == "2026-08-13T15:00:00+00:00"


def test_practice_has_its_own_daily_allowance(db, entrant):
    benchmark = factories.BenchmarkFactory(
        opens_at=OPENS_AT, closes_at=CLOSES_AT, attempts_per_day=1, practice_per_day=3
    )
    alice = entrant(benchmark)
    noon = dt.datetime(2026, 8, 12, 3, 0, tzinfo=UTC)
    next_seoul_day = dt.datetime(2026, 8, 12, 15, 0, tzinfo=UTC)

    official = [code(alice.upload_at(noon)) for _ in range(2)]
    practice = [code(alice.upload_at(noon, kind="practice")) for _ in range(4)]
    quota = alice.quota_at(noon)

    assert official == [201, "quota_exhausted"]
    assert practice == [201, 201, 201, "quota_exhausted"]
    assert (quota["official"]["used_today"], quota["official"]["remaining_today"]) == (1, 0)
    assert (quota["practice"]["used_today"], quota["practice"]["remaining_today"]) == (3, 0)
    assert quota["practice"]["next_available_at"] == next_seoul_day.isoformat()
    assert code(alice.upload_at(next_seoul_day, kind="practice")) == 201
    assert code(alice.upload_at(next_seoul_day)) == 201


# A benchmark in another timezone, across daylight saving time ---------------------------


@pytest.fixture
def new_york(db: Any) -> Any:
    return factories.BenchmarkFactory(
        opens_at=dt.datetime(2026, 1, 1, tzinfo=UTC),
        closes_at=dt.datetime(2026, 12, 31, tzinfo=UTC),
        attempt_timezone="America/New_York",
        attempts_per_day=1,
    )


def test_new_york_days_turn_at_local_midnight_when_clocks_spring_forward(new_york, entrant):
    alice = entrant(new_york)
    # Sat 7 March ends at 05:00 UTC (midnight EST); Sun 8 March (23 hours) ends at
    # 04:00 UTC on the 9th (midnight EDT).
    saturday_ends = dt.datetime(2026, 3, 8, 5, 0, tzinfo=UTC)
    sunday_ends = dt.datetime(2026, 3, 9, 4, 0, tzinfo=UTC)

    assert code(alice.upload_at(saturday_ends - US)) == 201
    assert code(alice.upload_at(saturday_ends)) == 201
    sunday = alice.quota_at(dt.datetime(2026, 3, 8, 12, 0, tzinfo=UTC))
    assert code(alice.upload_at(sunday_ends - US)) == "quota_exhausted"
    assert code(alice.upload_at(sunday_ends)) == 201

    assert sunday["timezone"] == "America/New_York"
    assert sunday["remaining_today"] == 0
    assert sunday["resets_at"] == sunday["next_available_at"] == "2026-03-09T04:00:00+00:00"
    days = AttemptLedger.objects.order_by("id").values_list("attempt_day", flat=True)
    assert list(days) == [dt.date(2026, 3, 7), dt.date(2026, 3, 8), dt.date(2026, 3, 9)]


def test_new_york_days_turn_at_local_midnight_when_clocks_fall_back(new_york, entrant):
    alice = entrant(new_york)
    # Sun 1 November lasts 25 hours: 04:00 UTC (midnight EDT) to 05:00 UTC on the 2nd.
    sunday_starts = dt.datetime(2026, 11, 1, 4, 0, tzinfo=UTC)
    sunday_ends = dt.datetime(2026, 11, 2, 5, 0, tzinfo=UTC)

    assert code(alice.upload_at(sunday_starts)) == 201
    quota = alice.quota_at(sunday_starts)
    # 04:00 UTC on the 2nd is only 23:00 EST on Sunday: still the same day.
    assert code(alice.upload_at(dt.datetime(2026, 11, 2, 4, 0, tzinfo=UTC))) == "quota_exhausted"
    assert code(alice.upload_at(sunday_ends - US)) == "quota_exhausted"
    assert code(alice.upload_at(sunday_ends)) == 201

    assert quota["resets_at"] == "2026-11-02T05:00:00+00:00"
    days = AttemptLedger.objects.order_by("id").values_list("attempt_day", flat=True)
    assert list(days) == [dt.date(2026, 11, 1), dt.date(2026, 11, 2)]


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_an_environment_is_built_before_opening_and_a_timed_out_build_is_retried():
    """Built for real (from the local busybox base) a week before the window opens."""
    alice = factories.UserFactory(username="alice")
    now = dt.datetime.now(UTC)
    upcoming = factories.BenchmarkFactory(
        opens_at=now + dt.timedelta(days=7),
        closes_at=now + dt.timedelta(days=14),
        build_timeout_s=2,
    )
    environment = environment_create(
        owner=alice,
        benchmark=upcoming,
        name="slow",
        dockerfile_text=(
            f"FROM localhost/podium/busybox:1\nRUN echo {uuid.uuid4().hex} && sleep 4\n"
        ),
    )
    try:
        builds.build_environment(environment.pk)
        environment.refresh_from_db()
        assert environment.status == Environment.TIMED_OUT
        assert environment.image_tag == ""

        upcoming.build_timeout_s = 120
        upcoming.save(update_fields=["build_timeout_s"])
        environment_rebuild(environment=environment)
        builds.build_environment(environment.pk)

        environment.refresh_from_db()
        assert environment.status == Environment.READY, environment.failure_reason
        assert engine.image_exists(environment.image_tag)
        assert [event.status for event in environment.events.all()] == [
            "queued",
            "building",
            "timed_out",
            "queued",
            "building",
            "ready",
        ]
    finally:
        environment.refresh_from_db()
        if environment.image_tag:
            engine.remove_image(environment.image_tag)
