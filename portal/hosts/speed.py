"""A scored run during which the host changed its own speed: its free rescore.

The scoring worker probes the host's speed off the clock before and after every run
(``scoring.host.speed``) and records the result with the verdict (``Run.host_speed``,
``Run.host_speed_changed``). A marked run's time was not the entry's alone, so the
worker then asks :func:`run_host_speed_rescore` for the submission's free rescore: an
honest entrant loses nothing for the host's fault, and the leaderboard keeps the
entrant's best passing run whatever the new one measures, as after any rescore.
"""

from __future__ import annotations

import logging

from django.db import transaction

from portal.core import errors
from portal.submissions.models import Run, Submission
from portal.submissions.staff import submission_rescore

log = logging.getLogger(__name__)


def run_host_speed_rescore(*, run_id: int) -> bool:
    """Queue the free rescore of a marked run's submission; whether one was queued.

    At most one per submission, for its first marked run: a second one is left to staff
    (``Run.host_speed_changed`` in the admin), so no entry can draw run after run on a
    host it slows itself. Nothing is queued, and the run stays marked for staff, for a
    run that is not a score (a verification, a final run), whose verdict its time did
    not decide (failed, or errored for anything but the time limit), or whose submission
    cannot be rescored now (``submission_rescore`` refuses it: it is verifying, say).
    Audited as ``submission.rescore`` with no actor (the platform's own).
    """
    run = Run.objects.select_related("submission").filter(pk=run_id).first()
    if run is None or not run.host_speed_changed or run.purpose != Run.SCORE:
        return False
    if not (run.verdict == Submission.PASSED or run.killed):  # its time decided it
        return False
    earlier = Run.objects.filter(
        submission_id=run.submission_id, host_speed_changed=True, try_number__lt=run.try_number
    )
    if earlier.exists():
        log.warning("run %s: the host's speed changed again; left to staff", run_id)
        return False
    change = run.host_speed.get("change_pct")
    band = run.host_speed.get("band_pct")
    reason = (
        f"the scoring host's own speed changed by {change:+.1f} % during run {run_id} "
        f"(its class's band ±{band:g} %)"
    )
    try:
        with transaction.atomic():
            submission_rescore(
                submission=run.submission,
                actor=None,
                reason=reason,
                note=f"free rescore: {reason}",
            )
    except errors.PodiumError as exc:
        log.warning("run %s: marked for the host's speed, not rescored now: %s", run_id, exc)
        return False
    return True
