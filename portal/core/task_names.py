"""Every Celery task's name, stated once: the web sends tasks by these names
(``portal.core.jobs``), the workers register their tasks under them (``scoring/tasks.py``,
``portal/campaigns/tasks.py``, ``portal/notifications/tasks.py``), and the settings
route them to their queues and schedule the minute sweeps (:data:`ROUTES`,
:data:`BEAT`). No imports: the settings read it while they load.
"""

from __future__ import annotations

from typing import Any

BUILDS_QUEUE = "builds"

# The worker side (scoring/tasks.py).
BUILD_ENVIRONMENT = "scoring.build_environment"
BUILD_SUBMISSION = "scoring.build_submission"
SCORE_NEXT = "scoring.score_next"  # to its class's queue, scoring.<hardware class>
SCORE_SWEEP = "scoring.score_sweep"
VERIFICATION_POOL_FILL = "scoring.verification_pool_fill"
VERIFICATION_POOL_SWEEP = "scoring.verification_pool_sweep"
RUN_ROUND = "scoring.run_round"  # a campaign round, to its class's queue
REMOVE_IMAGE = "scoring.remove_image"
REAP = "scoring.reap"
REVIEW_ARTIFACTS = "scoring.review_artifacts"  # list a reviewed image's artifacts
# Metered estimation, to the benchmark's class queue: grade an entry (on the phase suite,
# or a final score on the final suite), generate a suite's reference.
ESTIMATION_GRADE = "scoring.estimation_grade"
ESTIMATION_FINAL = "scoring.estimation_final"
ESTIMATION_SUITE = "scoring.estimation_suite"
# The portal's own.
CAMPAIGNS_SWEEP = "portal.campaigns.sweep"
REVIEW_SWEEP = "portal.submissions.review_sweep"
SEND_VERDICT_MAIL = "portal.notifications.send_verdict_mail"
SEND_ANNOUNCEMENT_MAIL = "portal.notifications.send_announcement_mail"

ROUTES: dict[str, dict[str, str]] = {
    name: {"queue": BUILDS_QUEUE}
    for name in (
        BUILD_ENVIRONMENT,
        BUILD_SUBMISSION,
        REMOVE_IMAGE,
        REAP,
        SCORE_SWEEP,
        # Verification cohorts are prepared on the builds side, never on a scoring host.
        VERIFICATION_POOL_FILL,
        VERIFICATION_POOL_SWEEP,
        CAMPAIGNS_SWEEP,
        REVIEW_SWEEP,
        # An image's artifacts are listed on the builds side, never on a scoring host.
        REVIEW_ARTIFACTS,
        # Verdict mail: never sent by a scoring host, which holds its machine while it
        # records.
        SEND_VERDICT_MAIL,
        # A contest's announcement, to its participants (SMTP only).
        SEND_ANNOUNCEMENT_MAIL,
    )
}

BEAT: dict[str, dict[str, Any]] = {
    "reap": {"task": REAP, "schedule": 60.0},
    # Classes whose runs wait with no wake-up in flight (a lost message) are woken again.
    "score-sweep": {"task": SCORE_SWEEP, "schedule": 60.0},
    # Campaign rounds: stale ones void, unclaimed ones wait for capacity, triggers fire.
    "campaigns": {"task": CAMPAIGNS_SWEEP, "schedule": 60.0},
    # Each cohort verification may need keeps its pool of prepared sets full.
    "verification-pool": {"task": VERIFICATION_POOL_SWEEP, "schedule": 60.0},
    # Apparent winners of a benchmark with a validation boundary enter provenance review.
    "provenance-review": {"task": REVIEW_SWEEP, "schedule": 60.0},
}
