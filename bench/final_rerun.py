"""Benchmark: the final rerun of N nominated starter-kit submissions on the demo cohort:
the host time it takes, and how many ranks the noise-band rule leaves tied.

Set-up as ``bench/score_overhead.py`` (whose helpers it uses): a throw-away data folder
and SQLite database, a generated demo cohort imported as the official cohort, the
starter kit built as an environment and a submission image. Then ``--entrants``
entrants, one starter-kit submission each, marked ``passed`` with a (synthetic) passing
official run, nominated by default (their best counts). The benchmark is closed, a staff
account starts the final rerun (``portal.standings.rerun.final_rerun_start``: 3 runs
each by default) and every final run is claimed in the fair order and scored as a
scoring host does (the machine hold, ``run_claim_next``, ``runner.execute``); after each
run's verdict the extra runs that close neighbours need are queued by the hook, until
none is left. Printed: the final runs and their host time (each call, and all of them),
the medians, and the ranks left tied.

The noise band is the class's published one (from the calibrations of its active hosts;
none on a fresh database, so nothing ties) or, with ``--band PCT``, that percentage.

    .venv/bin/python bench/final_rerun.py [--entrants 20] [--images 10000] [--runs 3]
        [--extra 2] [--band 1.0]

Exit status: 0 when the rerun completed with every submission ranked, 1 otherwise, 2
when a prerequisite (Docker, the base image, the starter kit) is missing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import shlex
import statistics
import sys
import time
from typing import Any
from unittest import mock

import score_overhead as kit


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entrants", type=int, default=20, help="nominated submissions")
    parser.add_argument("--images", type=int, default=10_000, help="cohort size")
    parser.add_argument("--seed", type=int, default=20260810, help="demo cohort seed")
    parser.add_argument("--runs", type=int, default=3, help="final runs per submission")
    parser.add_argument("--extra", type=int, default=2, help="extra runs for close pairs")
    parser.add_argument("--band", type=float, default=None, help="noise band in percent")
    parser.add_argument("--keep", action="store_true", help="keep the temp data folder")
    return parser.parse_args()


def rerun(benchmark: Any) -> list[float]:
    """Claim and score every final run (extra runs included) as a host would; the host
    time of each call, in seconds."""
    from django.conf import settings

    from portal.submissions.runs import run_claim_next
    from scoring.host import machine as machine_lock
    from scoring.run import runner

    calls: list[float] = []
    lease_s = int(settings.PODIUM_LEASE_S)
    while True:
        started = time.perf_counter()
        try:
            with machine_lock.hold(reschedule=print) as session:
                run = run_claim_next(
                    hardware_class=benchmark.hardware_class_id, lease_s=lease_s, host=session.host
                )
                if run is None:
                    return calls
                session.attach(int(run.pk))
                runner.execute(
                    run,
                    run.submission,
                    lease_s=lease_s,
                    readings=session.readings,
                    host=session.host,
                    spare=session.spare,
                )
        except machine_lock.MachineWaiting as waiting:  # a busy machine: as a host, wait
            print(f"  the machine is not ready ({waiting}); trying again in 10 s")
            time.sleep(10)
            continue
        calls.append(time.perf_counter() - started)
        print(f"  final run {len(calls)}: {calls[-1]:.1f} s", flush=True)


def main() -> int:
    args = parse_args()
    print(
        f"reproduce: cd {shlex.quote(str(kit.REPO))} && .venv/bin/python bench/final_rerun.py "
        f"--entrants {args.entrants} --images {args.images} --runs {args.runs} "
        f"--extra {args.extra}" + (f" --band {args.band}" if args.band is not None else "") + "\n"
    )
    with kit.workspace("final", keep=args.keep) as (work, tag_root, made):
        kit.setup_django(work / "data")
        logging.getLogger().setLevel(logging.WARNING)
        from django.contrib.auth import get_user_model
        from django.utils import timezone

        from portal.contests.models import Benchmark, Cohort
        from portal.core.celery import app
        from portal.standings import rerun as final
        from portal.standings.models import FinalSettings
        from portal.submissions.models import Run, Submission

        env_image, sub_image = kit.starter_kit_images(tag_root, made)
        ids = kit.make_rows(args.images, sub_image, env_image, args.entrants)
        kit.import_cohort(args.images, args.seed, work)
        benchmark = Benchmark.objects.get(slug="bench-overhead")
        cohort = Cohort.objects.get(benchmark=benchmark, kind=Cohort.OFFICIAL)
        for number, submission_id in enumerate(ids, start=1):
            entrant = get_user_model().objects.create(username=f"entrant-{number:02d}")
            Submission.objects.filter(pk=submission_id).update(
                entrant=entrant, status=Submission.PASSED, kind=Submission.OFFICIAL
            )
            Run.objects.create(  # its official run, as the contest left it
                submission_id=submission_id,
                cohort=cohort,
                status=Run.FINISHED,
                verdict="passed",
                passed=True,
                wall_time_ns=1_000_000_000 + number,
                matches=args.images,
                total=args.images,
            )
        FinalSettings.objects.create(
            benchmark=benchmark, final_runs=args.runs, extra_runs=args.extra
        )
        Benchmark.objects.filter(pk=benchmark.pk).update(
            closes_at=timezone.now() - dt.timedelta(minutes=1)
        )
        benchmark.refresh_from_db()
        if args.band is not None:
            band_pct = args.band
            setattr(final, "noise_band_percent", lambda _cls: band_pct)  # noqa: B010
        staff = get_user_model().objects.create(username="staff", is_staff=True, is_superuser=True)
        with mock.patch.object(app, "send_task"):  # no broker: this process claims
            final.final_rerun_start(
                benchmark=benchmark,
                actor=staff,
                reason="bench",
                confirm_official_cohort=final.OFFICIAL_COHORT_CONFIRMATION,  # the demo cohort
            )
            started = time.perf_counter()
            calls = rerun(benchmark)
            total_s = time.perf_counter() - started
        decision = final.final_rerun_decision(benchmark)
        band = getattr(final, "noise_band_percent")(benchmark.hardware_class_id)  # noqa: B009
        if decision is None:
            raise SystemExit("the final rerun did not start")
        tied = [row for row in decision.rows if row.tied]
        groups = len({row.rank for row in tied})
        print()
        print(f"noise band: {band if band is not None else 'none published'} %")
        print(f"final runs: {len(calls)} ({args.entrants} x {args.runs} + extra)")
        if calls:
            print(
                f"host time: {total_s:.1f} s in all; per run median "
                f"{statistics.median(calls):.1f} s, max {max(calls):.1f} s"
            )
        print(f"ranked: {len(decision.rows)}; dropped: {decision.dropped or 'none'}")
        print(f"tied: {len(tied)} rows in {groups} group(s); complete: {decision.complete}")
        for row in decision.rows:
            mark = " (tied)" if row.tied else ""
            print(
                f"  {row.rank:>3}. {row.entrant}: {row.wall_time_ns / 1e9:.3f} s "
                f"median of {row.runs}{mark}"
            )
        ok = decision.complete and len(decision.rows) == args.entrants
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
