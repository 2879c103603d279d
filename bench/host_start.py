"""Benchmark: a scoring host takes no work before its first calibration is done.

A fresh scoring worker (a real Celery worker on this machine's engine) registers and
calibrates; a submission is queued 4 s after it starts, mid-calibration. The bench polls
the class queue in Redis: the wake-up must stay there (for another host of the class to
take) until the calibration ends, and the run is claimed right after it.
``PODIUM_HOST_READY_WAIT_S=0`` shows the old way: the wake-up taken at once and held
while the calibration runs. Needs root, Docker, PostgreSQL and Redis, as bench/fleet.py.

    DATABASE_URL=postgres://... CELERY_BROKER_URL=redis://... \\
        .venv/bin/python bench/host_start.py [--repetitions 40]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fleet  # the fleet bench's set-up: database, image, cohort, worker


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=40, help="calibration runs (40)")
    parser.add_argument("--database", default="podium_bench_host_start")
    args = parser.parse_args()
    print(f"reproduce: .venv/bin/python bench/host_start.py --repetitions {args.repetitions}\n")
    work = Path(tempfile.mkdtemp(prefix="podium-bench-host-start-"))
    work.chmod(0o755)
    server = fleet.setup(argparse.Namespace(database=args.database), work)
    os.environ["PODIUM_SUPERVISOR"] = str(fleet.REPO / "scoring" / "supervisor" / "supervise")
    os.environ["PODIUM_CALIBRATION_REPETITIONS"] = str(args.repetitions)
    import redis

    from portal.core import jobs
    from portal.hosts.models import HostCalibration
    from portal.submissions.models import Run
    from scoring import engine

    image = fleet.sleeper_image(1.0)
    worker = None
    try:
        benchmark = fleet.new_class(work, "start")
        queue = jobs.scoring_queue(benchmark.hardware_class_id)
        broker = redis.Redis.from_url(os.environ["CELERY_BROKER_URL"])
        worker = fleet.start_worker("start-a", queue, benchmark.hardware_class_id, work / "a.log")
        t0 = time.time()
        time.sleep(4)
        (submission_id,) = fleet.queue_submissions(benchmark, image, 1)
        queued = time.time() - t0
        waiting: list[int] = []  # the class queue's length while the host calibrates
        while not HostCalibration.objects.filter(host__name="start-a").exists():
            waiting.append(int(broker.llen(queue)))
            if time.time() - t0 > 600:
                raise SystemExit("no calibration within 600 s")
            time.sleep(0.2)
        fleet.wait_final([submission_id], timeout_s=120)
        calibration = HostCalibration.objects.get(host__name="start-a")
        run = Run.objects.get(submission_id=submission_id)
    finally:
        if worker is not None:
            fleet.stop(worker)
        engine.remove_image(image)
        from django.db import connections

        connections.close_all()
        fleet.admin(server, f'DROP DATABASE IF EXISTS "{args.database}" WITH (FORCE)')
        shutil.rmtree(work, ignore_errors=True)
    ended = calibration.finished_at.timestamp() - t0
    claimed = run.created_at.timestamp() - t0
    left = sum(1 for length in waiting if length) / max(1, len(waiting))
    print(f"calibration at start: {calibration.started_at.timestamp() - t0:.1f} s to {ended:.1f} s")
    print(f"queued at {queued:.1f} s; claimed at {claimed:.1f} s ({claimed - ended:+.2f} s after)")
    print(
        f"the wake-up was left in the queue for other hosts in {left:.0%} of "
        f"{len(waiting)} looks while the host calibrated (target 100%)"
    )
    return 0 if left == 1.0 and claimed >= ended else 1


if __name__ == "__main__":
    sys.exit(main())
