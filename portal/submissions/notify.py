"""Mail to contest staff about a submission that needs their eyes (verification).

Sent after the deciding transaction commits, to every active account holding the
evidence permission (the "contest staff" group, superusers) that has an address. Links
are the admin's run pages and evidence bundles, absolute when ``PODIUM_SITE_URL`` is set.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.urls import reverse

from portal.submissions.models import Run, Submission

log = logging.getLogger(__name__)

REVIEWERS_PERMISSION = "submissions.download_evidence"


def staff_addresses() -> list[str]:
    """Who reviews verification failures: active holders of the evidence permission."""
    users = get_user_model().objects.with_perm(
        REVIEWERS_PERMISSION,
        is_active=True,
        include_superusers=True,
        backend="django.contrib.auth.backends.ModelBackend",
    )
    return sorted({user.email for user in users if user.email})


def _link(name: str, run_id: int) -> str:
    site_url: str = settings.PODIUM_SITE_URL
    return site_url.rstrip("/") + reverse(name, args=[run_id])


def _run_lines(title: str, run_id: int | None) -> list[str]:
    run = Run.objects.filter(pk=run_id).first() if run_id is not None else None
    if run is None:
        return [f"{title}: none recorded"]
    wall = f"{run.wall_time_ns / 1e9:.3f} s" if run.wall_time_ns is not None else "none"
    return [
        f"{title}: run {run.pk} (try {run.try_number}), {run.verdict or run.status}, "
        f"wall time {wall}, matches {run.matches}/{run.total}, "
        f"output sha256 {run.output_sha256 or 'none'}",
        *([f"  decision: {run.verification_note}"] if run.verification_note else []),
        f"  run page: {_link('admin:submissions_run_change', int(run.pk))}",
        f"  evidence bundle: {_link('admin:submissions_run_evidence', int(run.pk))}",
    ]


def _send(subject: str, lines: list[str]) -> None:
    recipients = staff_addresses()
    if not recipients:
        log.warning("nobody to tell (no active staff with an address): %s", subject)
        return
    send_mail(subject, "\n".join(lines) + "\n", None, recipients)


def verification_rejected(
    *,
    submission_id: int,
    official_run_id: int | None,
    verification_run_ids: list[int],
    problem: str,
) -> None:
    """A passing official run failed its verification: the evidence of the official run
    and of every verification run judged (a timing miss is measured up to
    ``PODIUM_VERIFY_MAX_RUNS`` times), for review."""
    submission = Submission.objects.select_related("entrant", "benchmark").get(pk=submission_id)
    _send(
        f"[Podium] {submission.benchmark.slug}: submission {submission_id} failed its verification",
        [
            f"Submission {submission_id} by {submission.entrant} on "
            f"{submission.benchmark.slug} passed its official run but not its verification, "
            "so it stays off the leaderboard (status rejected_verification; the attempt "
            "counts).",
            f"Why: {problem}",
            "",
            *_run_lines("Official run", official_run_id),
            *(
                line
                for number, run_id in enumerate(verification_run_ids, start=1)
                for line in _run_lines(f"Verification run {number}", run_id)
            ),
            "",
            "It is also listed under Anomalies in the admin.",
        ],
    )


def verification_stuck(*, submission_id: int, verification_run_id: int, reason: str) -> None:
    """The platform failed twice in a row while verifying: staff requeue it."""
    submission = Submission.objects.select_related("entrant", "benchmark").get(pk=submission_id)
    _send(
        f"[Podium] {submission.benchmark.slug}: submission {submission_id} could not be verified",
        [
            f"The platform failed twice in a row while verifying submission {submission_id} "
            f"by {submission.entrant} ({reason}). It waits as 'verifying'; requeue it from "
            "the admin once the scoring host is healthy.",
            "",
            *_run_lines("Last verification run", verification_run_id),
        ],
    )
