"""``manage.py rounds``, ``manage.py campaign_baseline`` (pinning a given image) and the
demo campaign that ``seed_demo`` creates."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from portal.audit.models import AuditEvent
from portal.campaigns.models import Campaign, Round
from portal.contests.models import Benchmark, Cohort
from portal.submissions.models import Submission
from tests.campaigns.conftest import Enter


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_rounds_start_void_pause_resume_from_the_shell(campaign: Campaign, enter: Enter) -> None:
    submission = enter(at=timezone.now())
    slug = campaign.slug
    assert "Round 1" in run("rounds", "start", slug)
    round_ = Round.objects.get(campaign=campaign)
    with pytest.raises(CommandError, match="--round ID and --reason"):
        run("rounds", "void", slug, "--round", str(round_.pk))
    assert "is void" in run("rounds", "void", slug, "--round", str(round_.pk), "--reason", "test")
    round_.refresh_from_db()
    assert (round_.status, round_.void_reason) == (Round.VOID, "voided by staff: test")
    submission.refresh_from_db()
    assert submission.status == Submission.BENCH_QUEUED  # queued again
    assert "paused" in run("rounds", "pause", slug, "--reason", "maintenance")
    with pytest.raises(CommandError, match="paused"):
        run("rounds", "start", slug)
    run("rounds", "resume", slug)
    campaign.refresh_from_db()
    assert not campaign.paused
    actions = list(
        AuditEvent.objects.filter(target=f"campaign:{slug}")
        .order_by("id")
        .values_list("action", "actor_id")
    )
    assert actions == [
        ("campaign.baseline", None),
        ("campaign.round_start", None),
        ("campaign.round_void", None),
        ("campaign.pause", None),
        ("campaign.resume", None),
    ]
    with pytest.raises(CommandError, match="No campaign"):
        run("rounds", "start", "nope")


def test_campaign_baseline_pins_a_given_image_once(campaign_benchmark: Benchmark) -> None:
    from portal.campaigns.creation import campaign_create

    campaign = campaign_create(benchmark=campaign_benchmark)
    out = run(
        "campaign_baseline",
        campaign.slug,
        "--image-tag=podium/kit:1",
        "--image-digest=sha256:kit",
    )
    assert "pinned" in out
    campaign.refresh_from_db()
    assert (campaign.baseline_image_tag, campaign.baseline_image_digest) == (
        "podium/kit:1",
        "sha256:kit",
    )
    assert "baseline sha256:kit" in run("campaign_baseline", campaign.slug)


def test_seed_demo_creates_the_demo_campaign(db: Any) -> None:
    seed = ("seed_demo", "--official-count=30", "--practice-count=5", "--campaign-count=40")
    run(*seed)
    run(*seed)  # idempotent
    benchmark = Benchmark.objects.get(slug="demo-campaign")
    assert benchmark.kind == Benchmark.CAMPAIGN
    assert Benchmark.objects.get(slug="demo").kind == Benchmark.LEADERBOARD
    # Its own pool, not the demo's 30 images.
    assert benchmark.cohorts.get(kind=Cohort.OFFICIAL).items.count() == 40
    assert (benchmark.cohort_size, benchmark.pass_min_matches) == (40, 40)
    campaign = Campaign.objects.get(benchmark=benchmark)
    assert campaign.hardware_class_id == benchmark.hardware_class_id
    assert not campaign.has_baseline  # campaign_baseline builds and pins it


def test_the_demo_campaign_runs_rounds_of_20000_images_in_slices_of_5000(db: Any) -> None:
    # 20 images in 4 slices timed little but the kit's start: most rounds were void.
    out = run("seed_demo", "--official-count=3", "--practice-count=2", "--campaign-count=8")
    campaign = Campaign.objects.get(benchmark__slug="demo-campaign")
    assert (campaign.round_size, campaign.slice_count, campaign.slice_repeats) == (20_000, 4, 1)
    # The seeds' ceilings are kept.
    assert (campaign.reproducibility_ceiling, campaign.drift_ceiling, campaign.moat) == (
        0.335,
        0.05,
        0.01,
    )
    assert "20,000 images, in 4 slices of 5,000" in campaign.benchmark.description
    assert "Created campaign demo-campaign" in out


def test_seed_demo_brings_an_older_demo_campaign_to_size_and_keeps_its_rounds(db: Any) -> None:
    seed = ("seed_demo", "--official-count=3", "--practice-count=2", "--campaign-count=8")
    run(*seed)
    campaign = Campaign.objects.get(benchmark__slug="demo-campaign")
    Campaign.objects.filter(pk=campaign.pk).update(round_size=20, slice_count=4)
    pool = campaign.benchmark.cohorts.get(kind=Cohort.OFFICIAL)
    old_round = Round.objects.create(
        campaign=campaign,
        ordinal=1,
        cohort=pool,
        status=Round.SCORED,
        material="0" * 64,
        request_positions=list(range(8)),
        request_digest="0" * 64,
        slice_count=4,
        created_at=timezone.now(),
    )
    err = StringIO()
    call_command(
        "seed_demo",
        "--official-count=3",
        "--practice-count=2",
        "--campaign-count=12",
        stdout=StringIO(),
        stderr=err,
    )
    campaign.refresh_from_db()
    assert (campaign.round_size, campaign.slice_count) == (20_000, 4)
    # The pool a round drew from stays (a round's request set names its positions).
    assert campaign.benchmark.cohorts.get(kind=Cohort.OFFICIAL) == pool
    assert "used by a run or a round" in err.getvalue()
    old_round.refresh_from_db()
    assert (old_round.slice_count, len(old_round.request_positions)) == (4, 8)


def test_the_admin_lists_rounds_and_voids_one_with_a_reason(
    campaign: Campaign, enter: Enter, staff: Any, client: Any
) -> None:
    enter(at=timezone.now())
    run("rounds", "start", campaign.slug)
    round_ = Round.objects.get(campaign=campaign)
    client.force_login(staff)
    for url in (
        "/admin/campaigns/campaign/",
        f"/admin/campaigns/campaign/{campaign.pk}/change/",
        "/admin/campaigns/round/",
        f"/admin/campaigns/round/{round_.pk}/change/",
        "/admin/campaigns/crown/",
    ):
        assert client.get(url).status_code == 200, url
    form = {"action": "void", "_selected_action": [round_.pk]}
    asked = client.post("/admin/campaigns/round/", form)
    assert asked.status_code == 200 and b"reason" in asked.content
    round_.refresh_from_db()
    assert round_.status == Round.PENDING  # nothing before the reason
    client.post("/admin/campaigns/round/", {**form, "apply": "1", "reason": "bad host"})
    round_.refresh_from_db()
    assert (round_.status, round_.void_reason) == (Round.VOID, "voided by staff: bad host")
    assert AuditEvent.objects.filter(action="campaign.round_void", actor=staff).exists()


@pytest.mark.docker
@pytest.mark.django_db(transaction=True)
def test_campaign_baseline_builds_the_starter_kit_once(
    campaign_benchmark: Benchmark, tasks: list[dict[str, Any]]
) -> None:
    from portal.campaigns.creation import campaign_create
    from portal.environments.models import Environment
    from scoring import engine

    campaign = campaign_create(benchmark=campaign_benchmark)
    assert "pinned" in run("campaign_baseline", campaign.slug)
    campaign.refresh_from_db()
    kit = Submission.objects.get(benchmark=campaign_benchmark, entrant__username="podium-baseline")
    assert kit.kind == Submission.PRACTICE  # never a challenger
    assert kit.status == Submission.QUEUED  # and it takes a practice run, as a check
    assert "scoring.score_next" in [task["name"] for task in tasks]
    assert campaign.baseline_image_digest == kit.image_digest
    assert engine.image_info(campaign.baseline_image_tag).id == kit.image_digest
    run("campaign_baseline", campaign.slug)  # pinned already: nothing is built again
    assert Submission.objects.filter(entrant__username="podium-baseline").count() == 1
    engine.remove_image(campaign.baseline_image_tag)
    engine.remove_image(Environment.objects.get(owner__username="podium-baseline").image_tag)
