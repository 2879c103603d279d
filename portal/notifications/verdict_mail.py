"""The text of the mail an entrant gets when a submission reaches a verdict.

What the submission page shows, in words: benchmark, submission, status, wall time and
agreement of its scored run (aggregates only, never an answer per image), the sentence
that says whether the attempt counted, and an absolute link to the page when
``PODIUM_SITE_URL`` is set.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.urls import reverse

from portal.contests.templatetags.podium import ns
from portal.submissions.models import AttemptLedger, Submission
from portal.submissions.selectors import (
    outcome_sentence,
    scored_run,
    verification_progress,
    verification_text,
)

# The subject's words for each verdict (a submission's final statuses).
VERDICT_WORDS = {
    Submission.PASSED: "passed",
    Submission.FAILED: "did not pass",
    Submission.ERRORED: "gave no valid result",
    Submission.BUILD_FAILED: "failed to build",
    Submission.REJECTED_VERIFICATION: "failed its verification",
    Submission.INFRA_FAILED: "could not be scored (platform failure)",
    Submission.CANCELLED: "was cancelled by staff",
}


@dataclass(frozen=True)
class VerdictMail:
    to: str
    subject: str
    body: str


def site_link(path: str) -> str:
    """``path`` on the site: absolute when ``PODIUM_SITE_URL`` is set (as notify.py's)."""
    return str(settings.PODIUM_SITE_URL).rstrip("/") + path


def verdict_mail(submission: Submission, status: str) -> VerdictMail:
    """The mail for ``submission`` having reached ``status`` (the verdict just written;
    the runs and ledger are read as they are now)."""
    benchmark = submission.benchmark
    run = scored_run(submission)
    verification = verification_progress(submission.runs.all())
    ledger = set(
        AttemptLedger.objects.filter(submission=submission).values_list("delta", flat=True)
    )
    what = "practice run" if submission.kind == Submission.PRACTICE else "official submission"
    facts = [
        f"Benchmark:    {benchmark.title} ({benchmark.slug})",
        f"Submission:   {submission.pk} ({submission.kind})",
        f"Status:       {status}",
    ]
    if run is not None and run.wall_time_ns is not None:
        facts.append(f"Wall time:    {ns(run.wall_time_ns)} ({run.wall_time_ns} ns)")
    if run is not None and run.matches is not None and run.total:
        facts.append(f"Agreement:    {run.matches:,} / {run.total:,} top-1 matches")
    if verification is not None:
        facts.append(f"Verification: {verification_text(verification)}")
    outcome = outcome_sentence(
        status=status,
        kind=submission.kind,
        reason=submission.failure_reason,
        charged=AttemptLedger.CHARGE in ledger,
        refunded=AttemptLedger.REFUND in ledger,
        practice_note=submission.kind == Submission.PRACTICE,
    )
    page = site_link(reverse("submissions:detail", args=[submission.pk]))
    account = site_link(reverse("contests:account"))
    words = VERDICT_WORDS.get(status, status)
    lines = [
        f"Hello {submission.entrant.get_username()},",
        "",
        f"Your {what} {submission.pk} on {benchmark.title} {words}.",
        "",
        *facts,
        "",
        *([outcome, ""] if outcome else []),
        f"Its page: {page}",
        "",
        "-- ",
        f"Podium sends this mail for each verdict; turn it off on your account page: {account}",
    ]
    return VerdictMail(
        to=submission.entrant.email,
        subject=f"[Podium] {benchmark.slug}: submission {submission.pk} {words}",
        body="\n".join(lines) + "\n",
    )
