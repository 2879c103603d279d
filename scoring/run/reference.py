"""The reference kit's spread: a benchmark's starter kit image, unchanged, run over and
over on this host, on the benchmark's official cohort, exactly as a scored run is timed
(docs/rules.md, "Verification before ranking").

How much slower one of those honest runs is than another is the verification tolerance of
the class at that cohort size: a verification run and its official run are two runs of
one image, and a 100-image cohort's runs spread by tens of percent where a 10,000-image
one's spread by a few. The calibration workload's spread says neither.

One measurement (:func:`measure`): one warm-up run, not counted (an image's first run on
a host is cold), then ``PODIUM_REFERENCE_RUNS`` (10) counted runs, each on the cohort
staged afresh (``staging.stage_items``: fresh copies, names and request ids, as a scored
run's), in a scored run's sandbox (``runner.sandbox_spec``: the benchmark's limits, the
host's GPUs) under the trusted supervisor, started under the host's outer timer
(``runner.supervise``). Every run must pass the benchmark's gate, or the measurement
is not ``ok``: a kit that fails measures nothing. What a result does is
``portal.hosts.reference.reference_spread_record``'s.

When (:func:`keep_measured`, called by ``scoring.worker.score_next`` after the
calibration, holding the machine): for the benchmark of the run about to be claimed,
once the latest measurement of its class and cohort size is ``PODIUM_REFERENCE_EVERY_S``
old or there is none, with the image that measurement ran; a campaign's pinned baseline
is its kit when none ran before. Staff measure one at any time with ``manage.py
reference_spread SLUG [--image TAG]``, which names the kit the first time.
"""

from __future__ import annotations

import logging
import secrets
import shutil
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from podium_policy import verdict
from portal.campaigns.models import Campaign
from portal.contests import rules
from portal.contests.models import Benchmark, Cohort, CohortItem
from portal.contests.selectors import official_cohort_size
from portal.hosts.models import ReferenceSpread
from portal.hosts.reference import reference_due, reference_image, reference_spread_record
from portal.submissions.models import Submission
from scoring import engine
from scoring.cohort import staging
from scoring.host import machine
from scoring.run import calibration, runner

log = logging.getLogger(__name__)


class KitNotMeasured(Exception):
    """The kit could not be measured (the message goes on the row)."""


def official_items(benchmark: Benchmark) -> list[CohortItem]:
    """The benchmark's official cohort, in order (empty when it has none)."""
    return list(
        CohortItem.objects.filter(cohort__benchmark=benchmark, cohort__kind=Cohort.OFFICIAL)
        .select_related("cohort")
        .order_by("position")
    )


def kit_image(benchmark: Benchmark, cohort_size: int) -> str:
    """The image a due measurement runs: the one the class and size's latest measurement
    ran, else the benchmark's campaign's pinned baseline; "" when there is neither."""
    image = reference_image(benchmark.hardware_class_id, cohort_size)
    if image:
        return image
    campaign = Campaign.objects.filter(benchmark=benchmark).first()
    if campaign is not None and campaign.has_baseline:
        return campaign.baseline_image_tag or campaign.baseline_image_digest
    return ""


def one_run(
    session: machine.Session, benchmark: Benchmark, image: str, items: list[CohortItem]
) -> int:
    """One run of the kit over ``items``, staged afresh: its trusted wall time (ns).
    Raises :class:`KitNotMeasured` (or ``engine.EngineError``, ``runner.SupervisorError``,
    ``staging.StagingError``) when it cannot be trusted or did not pass."""
    root = Path(settings.PODIUM_DATA_DIR) / "reference" / secrets.token_hex(8)
    try:
        staged = staging.stage_items(items, root)
        try:
            spec, supervisor_sha256 = runner.sandbox_spec(image, staged, benchmark)
            # Removed by the reaper as a calibration's are: unless the machine is held.
            spec["labels"] = {calibration.LABEL: session.host, machine.HOST_LABEL: session.host}
            container_id = engine.create_container(**spec)
            try:
                session.spare(container_id)  # before it starts, as a scored run's
                container = runner.Container(id=container_id, supervisor_sha256=supervisor_sha256)
                return _checked(container, benchmark, staged)
            finally:
                try:
                    engine.remove_container(container_id)
                except engine.EngineError:
                    log.exception("could not remove reference container %s", container_id[:12])
        finally:
            staging.unstage(staged)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _checked(container: runner.Container, benchmark: Benchmark, staged: staging.StagedRun) -> int:
    """Start the kit's container under the outer timer: its trusted wall time, checked as
    a scored run's is (the host's interval contains it) and passing the gate."""
    supervised = runner.supervise(container, benchmark, runner.Measured())
    if supervised.status_code is None:
        raise KitNotMeasured(f"a run of the kit ran past {benchmark.score_timeout_s} s")
    if supervised.status_code != 0:
        raise KitNotMeasured(f"the supervisor exited with status {supervised.status_code}")
    result = runner.parse_supervisor_line(engine.logs(container.id, stdout=True, stderr=False))
    if not supervised.host_start_ns <= result.start_ns <= result.end_ns <= supervised.host_end_ns:
        raise KitNotMeasured("the host clock did not contain the trusted interval")
    if result.killed or result.exit_code != 0 or result.output is None:
        raise KitNotMeasured(f"the kit ended with exit code {result.exit_code}")
    try:
        predictions = verdict.parse_predictions(result.output, staged.rows)
    except verdict.InvalidOutput as exc:
        raise KitNotMeasured(f"the kit's output is invalid: {exc}") from exc
    matches = verdict.count_matches(predictions, staged.references)
    if not rules.passes(matches, staged.rows, benchmark.pass_min_matches, benchmark.cohort_size):
        raise KitNotMeasured(f"the kit did not pass: {matches} of {staged.rows} matched")
    return int(result.wall_ns)


def measure(
    session: machine.Session, benchmark: Benchmark, image: str, runs: int
) -> ReferenceSpread:
    """Measure ``benchmark``'s kit (``image``) on the held machine now and record it.
    Never raises for a kit that could not be measured: that is a row that is not ``ok``."""
    items = official_items(benchmark)
    started_at = timezone.now()
    walls: list[int] = []
    error = ""
    try:
        if not items:
            raise KitNotMeasured("the benchmark has no official cohort")
        for number in range(max(1, runs) + 1):
            wall = one_run(session, benchmark, image, items)
            if number:  # the first, cold run is not counted
                walls.append(wall)
            if session.heartbeat.lost.is_set():
                raise KitNotMeasured("the machine lock was lost during the measurement")
    except (
        KitNotMeasured,
        runner.SupervisorError,
        engine.EngineError,
        staging.StagingError,
    ) as exc:
        error = f"not measured: {exc}"[:500]
        walls = []
    return reference_spread_record(
        benchmark=benchmark,
        host=session.host,
        image=image,
        cohort_size=len(items),
        started_at=started_at,
        finished_at=timezone.now(),
        wall_ns=walls,
        error=error,
    )


def keep_measured(session: machine.Session, submission_id: int) -> ReferenceSpread | None:
    """Before the claim of ``submission_id`` (the next waiting one), holding the machine:
    measure its benchmark's kit when a measurement of the class and cohort size is due
    and its image is known; the row, or None when none was made."""
    every_s = float(settings.PODIUM_REFERENCE_EVERY_S)
    if every_s <= 0:
        return None  # only when staff ask
    submission = Submission.objects.select_related("benchmark").filter(pk=submission_id).first()
    if submission is None:
        return None
    benchmark = submission.benchmark
    size = official_cohort_size(benchmark)
    if not size:
        return None
    last = (
        ReferenceSpread.objects.filter(hardware_class=benchmark.hardware_class_id, cohort_size=size)
        .values_list("finished_at", flat=True)
        .first()
    )
    if not reference_due(last_finished_at=last, now=timezone.now(), every_s=every_s):
        return None
    image = kit_image(benchmark, size)
    if not image:
        return None
    return measure(session, benchmark, image, int(settings.PODIUM_REFERENCE_RUNS))
