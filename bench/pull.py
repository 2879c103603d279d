"""Benchmark: the off-clock overhead of a scored run whose image comes from a registry.

With ``PODIUM_REGISTRY`` set, a scoring host pulls the submission image by digest
before each run, checks its ID against the recorded one, and removes it afterwards.
This measures what that adds, on the same set-up as ``bench/score_overhead.py`` (whose
helpers it uses: a throw-away data folder and SQLite database, the generated demo
cohort of ``--images`` images, the starter kit built as environment and submission
images), plus a CNCF Distribution registry (Debian's ``docker-registry``) started on a
free loopback port with its storage in the temp folder:

1. the submission image is pushed to the registry (as the build host does) and every
   submission records its digest reference;
2. ``--runs`` scored runs through ``scoring.run.runner.score_submission``, the image's layers
   already on this engine (the steady state of a scoring host: the environment and the
   base are shared by many submissions): the pull is the registry round trip for the
   manifest and the ID check;
3. one more run after the submission image's own layers were removed from the engine,
   so they come from the registry (shown for information; the base's and environment's
   layers stay cached).

Off-clock per run = pull + staging + create + (host interval - trusted) + collect +
compare; target at most 5 s. Images, containers, the registry and the temp folder are
removed at the end. Exit status: 0 when every cached run passed and met the target, 1
otherwise, 2 when a prerequisite (Docker, the base image, docker-registry) is missing.

    .venv/bin/python bench/pull.py [--runs 3] [--images 10000]
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any
from unittest import mock

import score_overhead as kit

TARGET_MS = kit.TARGET_MS
STAGES = ("pull", "staging", "create", "collect", "compare")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs with cached layers (default 3)")
    parser.add_argument("--images", type=int, default=10_000, help="cohort size (default 10000)")
    parser.add_argument("--seed", type=int, default=20260810, help="demo cohort seed")
    return parser.parse_args()


def start_registry(root: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``docker-registry serve`` on 127.0.0.1 and a free port, storing under ``root``."""
    binary = shutil.which("docker-registry")
    if binary is None:
        raise FileNotFoundError("docker-registry (Debian's docker-registry package)")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = root / "registry.yml"
    config.write_text(
        "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\n"
        f"storage:\n  filesystem:\n    rootdirectory: {root / 'registry'}\n"
        "  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )
    process = subprocess.Popen(
        [binary, "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    address = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://{address}/v2/", timeout=2):
                return process, address
        except OSError:
            time.sleep(0.05)
    process.terminate()
    raise SystemExit("the registry did not start")


def score(submission_ids: list[int]) -> list[dict[str, Any]]:
    """Score each submission once; its official run's figures (a passing official run
    also queues a verification run, which is not scored here)."""
    from portal.submissions.models import Run
    from scoring.run import runner

    rows = []
    for submission_id in submission_ids:
        runner.score_submission(submission_id)
        run = Run.objects.get(submission_id=submission_id, purpose=Run.SCORE)
        gap_ms = ((run.host_end_ns or 0) - (run.host_start_ns or 0) - (run.wall_time_ns or 0)) / 1e6
        rows.append(
            {
                "verdict": run.verdict or run.status,
                "reason": run.verdict_reason,
                "gap_ms": gap_ms,
                **{key: float(value) for key, value in run.overhead_ms.items()},
            }
        )
    return rows


def off_clock(row: dict[str, Any]) -> float:
    return float(row["gap_ms"]) + sum(float(row.get(stage, 0.0)) for stage in STAGES)


def print_table(rows: list[dict[str, Any]], labels: list[str]) -> bool:
    columns = [("run", 8), ("verdict", 9), ("pull_ms", 9), ("staging_ms", 11)]
    columns += [("create_ms", 10), ("host-trusted_ms", 16), ("collect_ms", 11)]
    columns += [("compare_ms", 11), ("off-clock_ms", 13), ("target", 7)]
    print("".join(name.rjust(width) for name, width in columns))
    all_good = True
    for label, row in zip(labels, rows, strict=True):
        total = off_clock(row)
        good = row["verdict"] == "passed" and total <= TARGET_MS
        if label != "uncached":
            all_good &= good
        values = [
            label,
            row["verdict"],
            f"{row.get('pull', 0.0):.1f}",
            f"{row.get('staging', 0.0):.1f}",
            f"{row.get('create', 0.0):.1f}",
            f"{row['gap_ms']:.1f}",
            f"{row.get('collect', 0.0):.1f}",
            f"{row.get('compare', 0.0):.1f}",
            f"{total:.1f}",
            "PASS" if good else "MISS",
        ]
        print("".join(v.rjust(w) for v, (_n, w) in zip(values, columns, strict=True)))
        if row["verdict"] != "passed":
            print(f"     {label}: {row['reason']}")
    cached = [
        off_clock(row) for label, row in zip(labels, rows, strict=True) if label != "uncached"
    ]
    pulls = [float(row.get("pull", 0.0)) for label, row in zip(labels, rows, strict=True)]
    print(
        f"\ncached layers: off-clock per run median {statistics.median(cached):.1f} ms, "
        f"max {max(cached):.1f} ms (pull median {statistics.median(pulls[:-1]):.1f} ms); "
        f"target <= {TARGET_MS:.0f} ms: {'PASS' if all_good else 'MISS'}"
    )
    print(
        "off-clock = pull + staging + create + (host interval - trusted) + collect + compare; "
        "'uncached' pulled the submission's own layers (its base and environment cached)."
    )
    return all_good


def main() -> int:
    args = parse_args()
    print(
        "reproduce: cd "
        + shlex.quote(str(kit.REPO))
        + f" && .venv/bin/python bench/pull.py --runs {args.runs} --images {args.images} "
        + f"--seed {args.seed}\n"
    )
    registry_process: subprocess.Popen[bytes] | None = None
    with kit.workspace("pull") as (work, tag_root, made):
        try:
            # The health gates are not what this measures; a shared machine may be busy.
            os.environ.setdefault("PODIUM_GATE_CPU_BUSY_MAX", "1024")
            kit.setup_django(work / "data")
            logging.getLogger().setLevel(logging.WARNING)
            from django.conf import settings

            from portal.core.celery import app
            from portal.submissions.models import Submission
            from scoring import engine
            from scoring.images import registry

            env_image, submission_image = kit.starter_kit_images(tag_root, made)
            try:
                registry_process, address = start_registry(work)
            except FileNotFoundError as missing:
                print(f"missing: {missing}", file=sys.stderr)
                return 2
            settings.PODIUM_REGISTRY = address
            started = time.monotonic()
            ref = registry.publish(submission_image)
            made.append(ref)
            print(f"pushed the submission image in {time.monotonic() - started:.1f} s")
            image_id = engine.image_info(submission_image).id
            ids = kit.make_rows(args.images, submission_image, env_image, args.runs + 1)
            Submission.objects.filter(pk__in=ids).update(image_digest=image_id, image_ref=ref)
            kit.import_cohort(args.images, args.seed, work)
            print(f"scoring {args.runs} + 1 run(s) of {args.images} images...\n")
            with mock.patch.object(app, "send_task"):
                rows = score(ids[:-1])
                engine.remove_image(submission_image)  # its own layers now only in the registry
                rows += score(ids[-1:])
            labels = [str(n) for n in range(1, args.runs + 1)] + ["uncached"]
            return 0 if print_table(rows, labels) else 1
        finally:
            # The registry stops first; the workspace then removes the images and its folder.
            if registry_process is not None:
                registry_process.terminate()
                registry_process.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
