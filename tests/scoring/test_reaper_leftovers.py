"""What dead workers leave on a scoring host's engine is collected, by the reaper (every
minute) and when the host next starts: calibration containers while nothing holds the
machine, the slice containers of a round voided as stale, the containers of runs that are
over, and the images pulled from the registry that nothing queued or live needs. A live
run's container and an image a queued run needs stay.

Every container is the test's own (created from the local busybox under a host name of
the test's own), so other work on this shared engine is never touched.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from django.utils import timezone

from portal.campaigns import creation as campaign_creation
from portal.campaigns.models import Round
from portal.contests.models import Benchmark
from portal.submissions.models import Run, Submission
from scoring import engine, worker
from scoring.campaign import rounds
from scoring.host import machine
from scoring.images import registry
from scoring.run import calibration
from scoring.upkeep import reaper
from tests.scoring.test_registry import (  # noqa: F401 (fixtures)
    names,
    only_in_the_registry,
    push_built,
    registry_server,
    supervisor_binary,
    with_registry,
)
from tests.scoring.test_staging import make_cohort, make_submission

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

BASE = "localhost/podium/busybox:1"


@pytest.fixture
def host(settings) -> str:
    settings.PODIUM_HOST_NAME = f"helper-reap-{uuid.uuid4().hex[:10]}"
    settings.PODIUM_CALIBRATION = False
    return machine.scoring_host()


@pytest.fixture
def containers(host) -> Iterator[list[str]]:
    """Containers the test made; whatever is left of them is removed afterwards."""
    made: list[str] = []
    yield made
    for container_id in made:
        engine.remove_container(container_id)


def make_container(made: list[str], labels: dict[str, str], *, run: bool = True) -> str:
    """A busybox container with ``labels``: running (as a dead worker's mid-repetition) or
    exited (as a slice whose round was voided)."""
    container_id = engine.create_container(
        image=BASE,
        command=["sleep", "600"] if run else ["true"],
        labels=labels,
        network_mode="none",
    )
    made.append(container_id)
    engine.start(container_id)
    if not run:
        assert engine.wait(container_id, 30) == 0
    return container_id


def voided_round(benchmark: Benchmark, host: str) -> Round:
    """A campaign's round that ran on ``host`` and was voided as stale."""
    benchmark.kind = Benchmark.CAMPAIGN
    benchmark.save()
    cohort = make_cohort(benchmark, [7] * 4)
    campaign = campaign_creation.campaign_create(benchmark=benchmark, round_size=4, slice_count=2)
    now = timezone.now()
    return Round.objects.create(
        campaign=campaign,
        ordinal=1,
        cohort=cohort,
        status=Round.VOID,
        void_reason="the host stopped answering",
        material="0" * 64,
        request_positions=[0, 1, 2, 3],
        request_digest="d" * 64,
        slice_count=2,
        created_at=now,
        started_at=now,
        finished_at=now,
        host=host,
    )


def run_of(submission: Submission, status: str, try_number: int = 1) -> Run:
    return Run.objects.create(
        submission=submission,
        cohort=submission.benchmark.cohorts.get(),
        status=status,
        try_number=try_number,
    )


def test_the_reaper_collects_what_dead_workers_left_and_spares_a_live_run(
    host, containers, alice, benchmark
):
    mine = {machine.HOST_LABEL: host}
    calibrating = make_container(containers, {calibration.LABEL: host, **mine})
    round_ = voided_round(benchmark, host)
    slice_left = make_container(containers, {rounds.ROUND_LABEL: str(round_.pk), **mine}, run=False)
    submission = make_submission(alice, benchmark)
    over = run_of(submission, Run.INFRA_FAILED)
    live = run_of(submission, Run.RUNNING, try_number=2)
    live_container = make_container(containers, {machine.RUN_LABEL: str(live.pk), **mine})
    over_container = make_container(containers, {machine.RUN_LABEL: str(over.pk), **mine})
    elsewhere = make_container(containers, {calibration.LABEL: "another", machine.HOST_LABEL: "x"})

    reaper.reap()

    assert not engine.container_exists(calibrating)
    assert not engine.container_exists(slice_left)
    assert not engine.container_exists(over_container)
    assert engine.state(live_container)["Running"]
    assert engine.container_exists(elsewhere)  # another host name's containers are its own business


def test_a_host_collects_them_when_it_starts(host, containers, benchmark):
    mine = {machine.HOST_LABEL: host}
    calibrating = make_container(containers, {calibration.LABEL: host, **mine})
    round_ = voided_round(benchmark, host)
    slice_left = make_container(containers, {rounds.ROUND_LABEL: str(round_.pk), **mine}, run=False)

    worker.on_host_registered()

    assert not engine.container_exists(calibrating)
    assert not engine.container_exists(slice_left)


def test_a_running_rounds_slices_and_a_held_machines_calibration_stay(
    host, containers, benchmark, monkeypatch
):
    mine = {machine.HOST_LABEL: host}
    round_ = voided_round(benchmark, host)
    Round.objects.filter(pk=round_.pk).update(status=Round.RUNNING)
    slice_running = make_container(containers, {rounds.ROUND_LABEL: str(round_.pk), **mine})
    calibrating = make_container(containers, {calibration.LABEL: host, **mine})
    monkeypatch.setattr(machine, "builds_frozen", lambda _host: True)  # a calibration holds it

    assert reaper.collect_leftovers().containers == ()
    assert engine.container_exists(slice_running) and engine.container_exists(calibrating)


def test_pulled_images_nothing_needs_are_removed_and_a_queued_runs_stays(
    host,
    with_registry,  # noqa: F811 (the fixture)
    names,  # noqa: F811 (the fixture)
    alice,
    bob,
    benchmark,
):
    left = make_submission(alice, benchmark)
    needed = make_submission(bob, benchmark)
    dead = push_built(left, "#!/bin/sh\nexit 0\n", names)
    queued = push_built(needed, "#!/bin/sh\nexit 0\n", names)
    only_in_the_registry(dead.tag, queued.tag)
    registry.pull_verified(dead.ref, dead.image_id)  # as a worker that died mid-run
    registry.pull_verified(queued.ref, queued.image_id)
    run_of(left, Run.INFRA_FAILED)
    run_of(needed, Run.QUEUED)

    collected = reaper.collect_leftovers()

    assert collected.images == (dead.ref,)
    assert not engine.image_exists(dead.ref)
    assert engine.image_exists(queued.ref)
