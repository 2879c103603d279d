"""Benchmark: the host time verification adds to a top-20 leaderboard, on the demo cohort.

Every passing official run that becomes its entrant's best in the top ``verify_top``
(20) is run once more, off the board: the cohort staged shuffled, every JPEG rewritten
losslessly, then the same stages as a score. This measures, on the full demo cohort
and the starter kit (the same set-up as ``bench/score_overhead.py``, whose helpers it
uses), for ``--runs`` submissions:

- the official score: the whole ``score_submission`` call (gates, staging, container,
  run, verdict), its staging and its trusted wall time;
- its verification: the same, with the rewrite inside staging.

A top-20 board whose 20 rows were each verified once costs 20 official runs plus 20
verifications; the share verification adds is the sum of verification calls over the
sum of official calls (entrants' runs that did not reach the top 20 add host time with
no verification, so on a real contest the share is lower). Also printed: the rewrite's
share of a verification, and whether each verification confirmed its run.

    .venv/bin/python bench/verification.py [--runs 3] [--images 10000]
"""

from __future__ import annotations

import argparse
import logging
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from unittest import mock

import score_overhead as kit

TOP = 20


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="submissions (default 3)")
    parser.add_argument("--images", type=int, default=10_000, help="cohort size (default 10000)")
    parser.add_argument("--seed", type=int, default=20260810, help="demo cohort seed")
    return parser.parse_args()


def timed_score(submission_id: int) -> float:
    from scoring import runner

    started = time.perf_counter_ns()
    runner.score_submission(submission_id)
    return (time.perf_counter_ns() - started) / 1e6


def measure(submission_ids: list[int]) -> list[dict[str, Any]]:
    from portal.submissions.models import Run, Submission

    rows = []
    for submission_id in submission_ids:
        official_ms = timed_score(submission_id)
        status = Submission.objects.values_list("status", flat=True).get(pk=submission_id)
        if status != Submission.VERIFYING:
            raise SystemExit(f"submission {submission_id} is {status}, not verifying")
        verify_ms = timed_score(submission_id)
        official = Run.objects.get(submission_id=submission_id, purpose=Run.SCORE)
        verify = Run.objects.get(submission_id=submission_id, purpose=Run.VERIFY)
        rows.append(
            {
                "official_ms": official_ms,
                "verify_ms": verify_ms,
                "official_staging_ms": float(official.overhead_ms.get("staging", 0.0)),
                "verify_staging_ms": float(verify.overhead_ms.get("staging", 0.0)),
                "official_wall_ms": (official.wall_time_ns or 0) / 1e6,
                "verify_wall_ms": (verify.wall_time_ns or 0) / 1e6,
                "status": Submission.objects.values_list("status", flat=True).get(pk=submission_id),
            }
        )
    return rows


def report(rows: list[dict[str, Any]]) -> None:
    header = (
        f"{'run':>4}{'official_s':>12}{'verify_s':>10}{'staging_s':>11}"
        f"{'v.staging_s':>13}{'wall_s':>9}{'v.wall_s':>10}  verdict"
    )
    print(header)
    for index, row in enumerate(rows, start=1):
        print(
            f"{index:>4}{row['official_ms'] / 1e3:>12.2f}{row['verify_ms'] / 1e3:>10.2f}"
            f"{row['official_staging_ms'] / 1e3:>11.2f}{row['verify_staging_ms'] / 1e3:>13.2f}"
            f"{row['official_wall_ms'] / 1e3:>9.3f}{row['verify_wall_ms'] / 1e3:>10.3f}"
            f"  {row['status']}"
        )
    official = statistics.median(row["official_ms"] for row in rows)
    verify = statistics.median(row["verify_ms"] for row in rows)
    rewrite = statistics.median(row["verify_staging_ms"] for row in rows)
    print(
        f"\nmedian per run: official {official / 1e3:.2f} s, verification {verify / 1e3:.2f} s "
        f"(of which staging with the rewrite {rewrite / 1e3:.2f} s, {rewrite / verify:.0%})"
    )
    print(
        f"a top-{TOP} board of {TOP} verified bests: {TOP} x {official / 1e3:.2f} s official "
        f"+ {TOP} x {verify / 1e3:.2f} s verification; verification adds "
        f"{verify / official:.0%} to the host time of the runs it verifies "
        f"({verify / (official + verify):.0%} of the total)"
    )


def main() -> int:
    args = parse_args()
    repo = Path(__file__).resolve().parents[1]
    print(
        "reproduce: cd "
        + shlex.quote(str(repo))
        + f" && .venv/bin/python bench/verification.py --runs {args.runs} --images {args.images}\n"
    )
    work = Path(tempfile.mkdtemp(prefix="podium-bench-verify-"))
    work.chmod(0o755)
    made: list[str] = []
    try:
        kit.setup_django(work / "data")
        logging.getLogger().setLevel(logging.WARNING)
        from django.conf import settings
        from django.contrib.auth import get_user_model

        from portal.celery import app
        from portal.submissions.models import Submission

        subprocess.run(["make", "-s", "scoring/supervisor/supervise"], cwd=repo, check=True)
        env_image, sub_image = kit.build_images(
            settings.PODIUM_STARTER_BASE_IMAGE,
            f"podium-bench/verify-{uuid.uuid4().hex[:8]}",
            made,
        )
        ids = kit.make_rows(args.images, sub_image, env_image, args.runs)
        # One entrant each: every run is a new best in the top 20, so each is verified.
        for number, submission_id in enumerate(ids, start=1):
            entrant = get_user_model().objects.create(username=f"entrant-{number}")
            Submission.objects.filter(pk=submission_id).update(entrant=entrant)
        kit.import_cohort(args.images, args.seed, work)
        print(f"scoring and verifying {args.runs} submission(s) of {args.images} images...\n")
        # Nothing may reach a broker from here: the verification is run by hand below.
        with mock.patch.object(app, "send_task"):
            rows = measure(ids)
        report(rows)
        return 0 if all(row["status"] == "passed" for row in rows) else 1
    finally:
        if made:
            from scoring import engine

            for tag in reversed(made):
                engine.remove_image(tag)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
