"""An entrant's environment carries over from an earlier phase of a contest to a later
one when both phases' hardware classes have the same platform and GPU type; otherwise the
upload is refused, saying why, and nothing is charged."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone

from portal.contests.models import Benchmark, HardwareClass
from portal.core import errors
from portal.environments.selectors import usable_environment, usable_environments
from portal.submissions.intake import submission_accept
from portal.submissions.models import AttemptLedger, Submission
from tests import factories

DAY = dt.timedelta(days=1)


@pytest.fixture
def classes(db):
    return {
        "amd": HardwareClass.objects.create(name="cpu-amd", platform=HardwareClass.AMD64),
        "amd-too": HardwareClass.objects.create(name="cpu-amd-2", platform=HardwareClass.AMD64),
        "arm": HardwareClass.objects.create(name="cpu-arm", platform=HardwareClass.ARM64),
        "h200": HardwareClass.objects.create(
            name="gpu-h200", platform=HardwareClass.AMD64, gpus=1, gpu_model="NVIDIA H200"
        ),
    }


@pytest.fixture
def phases(classes) -> dict[str, Benchmark]:
    """Warm-up (closed, amd), Phase 1 (open, another amd class), Phase 2 (open, arm),
    Phase 3 (open, an amd GPU class)."""
    now = timezone.now()
    contest = factories.ContestFactory(slug="vision")
    made = {}
    for order, (name, hardware, opens, closes) in enumerate(
        [
            ("warm", "amd", now - 9 * DAY, now - 5 * DAY),
            ("one", "amd-too", now - DAY, now + 5 * DAY),
            ("two", "arm", now - DAY, now + 5 * DAY),
            ("three", "h200", now - DAY, now + 5 * DAY),
        ],
        start=1,
    ):
        made[name] = factories.BenchmarkFactory(
            contest=contest,
            phase_order=order,
            slug=f"vision-{name}",
            hardware_class=classes[hardware],
            opens_at=opens,
            closes_at=closes,
        )
        factories.cohorts(made[name])
    return made


def _upload(client: Any, benchmark: Benchmark, environment_id: int, archive: Any) -> Any:
    with archive.open("rb") as source:
        return client.post(
            f"/api/v1/benchmarks/{benchmark.slug}/submissions/",
            {"environment": environment_id, "source": source},
            format="multipart",
        )


def test_a_warm_up_environment_is_used_on_a_later_phase_of_the_same_platform(
    phases, alice, client_for, ready_environment, make_archive
):
    environment = ready_environment(alice, phases["warm"])

    response = _upload(client_for(alice), phases["one"], environment.pk, make_archive())

    assert response.status_code == 201, response.content
    submission = Submission.objects.get(pk=response.json()["id"])
    assert (submission.benchmark, submission.environment) == (phases["one"], environment)
    assert submission.environment_image_digest == environment.image_digest
    assert AttemptLedger.objects.filter(submission=submission).count() == 1


@pytest.mark.parametrize(
    ("phase", "says"),
    [
        ("two", "platform linux/amd64 (cpu-amd), and Phase 3 runs on linux/arm64 (cpu-arm)"),
        ("three", "GPU type (no GPU), and Phase 4 runs on NVIDIA H200"),
    ],
)
def test_an_environment_of_other_hardware_is_refused_with_the_reason(
    phases, alice, client_for, ready_environment, make_archive, phase, says
):
    environment = ready_environment(alice, phases["warm"])

    response = _upload(client_for(alice), phases[phase], environment.pk, make_archive())

    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid_parameter"
    assert f"Environment '{environment.name}' cannot be used here" in body["detail"]
    assert says in body["detail"]
    assert not Submission.objects.exists()
    assert not AttemptLedger.objects.exists()


def test_a_later_phase_environment_does_not_carry_back(
    phases, alice, client_for, ready_environment, make_archive
):
    environment = ready_environment(alice, phases["one"])
    phases["warm"].closes_at = timezone.now() + DAY
    phases["warm"].save(update_fields=["closes_at"])

    response = _upload(client_for(alice), phases["warm"], environment.pk, make_archive())

    assert (response.status_code, response.json()["code"]) == (404, "not_found")
    assert not Submission.objects.exists()


def test_another_contests_environment_is_not_found(
    phases, alice, client_for, ready_environment, make_archive, classes
):
    other = factories.BenchmarkFactory(
        slug="other", hardware_class=classes["amd"], contest=factories.ContestFactory()
    )
    environment = ready_environment(alice, other)

    response = _upload(client_for(alice), phases["one"], environment.pk, make_archive())

    assert (response.status_code, response.json()["code"]) == (404, "not_found")


def test_another_entrants_environment_never_carries_over(
    phases, alice, bob, client_for, ready_environment, make_archive
):
    environment = ready_environment(alice, phases["warm"])

    response = _upload(client_for(bob), phases["one"], environment.pk, make_archive())

    assert (response.status_code, response.json()["code"]) == (404, "not_found")
    assert not Submission.objects.exists()


def test_the_intake_itself_refuses_an_environment_of_other_hardware(
    phases, alice, ready_environment, make_archive
):
    environment = ready_environment(alice, phases["warm"])

    with pytest.raises(errors.InvalidParameter, match="linux/arm64"):
        submission_accept(
            entrant=alice,
            benchmark=phases["two"],
            environment=environment,
            source_file=make_archive(),
            source_name="s.tar.gz",
        )

    assert not Submission.objects.exists()


def test_the_selector_lists_what_an_upload_may_use(phases, alice, ready_environment):
    warm = ready_environment(alice, phases["warm"], name="warm-env")
    own = ready_environment(alice, phases["one"], name="own-env")
    ready_environment(alice, phases["two"], name="arm-env")
    ready_environment(alice, phases["warm"], name="broken", status="failed")

    usable = [environment.name for environment in usable_environments(alice, phases["one"])]

    assert usable == ["own-env", "warm-env"]
    assert [e.name for e in usable_environments(alice, phases["two"])] == ["arm-env"]
    assert usable_environment(alice, phases["one"], warm.pk) == warm
    assert usable_environment(alice, phases["one"], own.pk) == own


def test_the_upload_page_offers_the_carried_over_environment(
    phases, alice, client, ready_environment
):
    environment = ready_environment(alice, phases["warm"], name="warm-env")
    client.force_login(alice)

    same = client.get(f"/b/{phases['one'].slug}/submissions/").content.decode()
    other = client.get(f"/b/{phases['two'].slug}/submissions/").content.decode()

    assert f'value="{environment.pk}"' in same
    assert f'value="{environment.pk}"' not in other
