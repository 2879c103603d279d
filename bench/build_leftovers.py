"""Benchmark: the bytes failed environment builds leave on the host.

Target (issue "Hosts that stay clean"): after 10 failed environment builds of 1 GiB
each, under 10 MiB left on the host.

Each build is a real environment build (``scoring.build.builds.build_environment``, in the
build sandbox, on the build network) of::

    FROM localhost/podium/busybox:1
    RUN dd if=/dev/zero of=/f bs=1M count=<1024 x GiB> && echo <marker><n>
    RUN false

so the classic builder commits the ``dd`` step's image and then fails; each Dockerfile
differs from the others by its marker, so no build finds another's step in the cache.
Two figures are printed:

- **left by the builds**: every image on the engine (named or not) one of whose steps
  ran the marker, and the bytes of the layers only they hold (exact, whatever else
  runs on this engine);
- **engine layers before/after**: the engine's own ``LayersSize`` (``docker system
  df``), which other work on a shared engine moves too.

``--keep-leftovers`` turns the clean-up off (``BuildLeftovers.remove`` does nothing), to
show what the builds would leave without it; the images it leaves are removed at the
end. Uses a fresh SQLite database in a temp folder. Needs root and Docker, and about
twice ``--gib`` of free space on the engine's data root while one build runs.

    .venv/bin/python bench/build_leftovers.py [--builds 10] [--gib 1] [--keep-leftovers]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BASE = "localhost/podium/busybox:1"
MIB = 1 << 20
TARGET_BYTES = 10 * MIB


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--builds", type=int, default=10, help="failed builds (default 10)")
    parser.add_argument("--gib", type=float, default=1.0, help="GiB each build writes (default 1)")
    parser.add_argument(
        "--keep-leftovers", action="store_true", help="turn the clean-up off, to compare"
    )
    parser.add_argument("--dir", default=None, help="parent of the temp folder (default: TMPDIR)")
    return parser.parse_args()


def setup_django(data_dir: Path) -> None:
    """Point Podium at the temp folder (before settings load) and migrate a fresh DB."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "portal.settings"
    os.environ["PODIUM_DATA_DIR"] = str(data_dir)
    os.environ["DATABASE_URL"] = f"sqlite:///{data_dir / 'bench.sqlite3'}"
    if "PODIUM_BUILD_EGRESS_ALLOW" not in os.environ:
        # The build network's rules are one per host: ask for the allow-list the test
        # sessions on this host ask for, so that neither undoes the other's.
        os.environ["PODIUM_BUILD_EGRESS_ALLOW"] = subprocess.run(
            [str(REPO / "scripts" / "mirror-allowlist")],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    sys.path.insert(0, str(REPO))
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def images_with(marker: str) -> dict[str, int]:
    """Every image whose history ran ``marker``, with the bytes of its own top layer."""
    import docker.errors

    from scoring import engine

    api = engine.client().api
    found: dict[str, int] = {}
    for image in api.images(all=True):
        try:
            history = api.history(image["Id"])
        except docker.errors.NotFound:  # removed meanwhile by other work on the engine
            continue
        if any(marker in str(step.get("CreatedBy") or "") for step in history):
            found[str(image["Id"])] = int(history[0].get("Size") or 0) if history else 0
    return found


def layers_size() -> int:
    from scoring import engine

    return int(engine.client().api.df().get("LayersSize") or 0)


def remove_images(ids: list[str]) -> None:
    from scoring import engine

    for image_id in ids:
        engine.remove_image(image_id)


def main() -> int:
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="podium-bench-leftovers-", dir=args.dir) as temp:
        setup_django(Path(temp))
        from django.contrib.auth import get_user_model
        from django.utils import timezone

        from portal.contests.hardware import hardware_class_row
        from portal.contests.models import Benchmark
        from portal.core.celery import app as celery_app
        from portal.environments.models import Environment
        from scoring.build import buildnet, builds

        celery_app.send_task = lambda *a, **k: None  # type: ignore[method-assign,assignment]
        problems = buildnet.apply().problems
        if problems:
            print(f"the build network's rules could not be put in place: {problems}")
            return 1
        if args.keep_leftovers:
            builds.BuildLeftovers.remove = lambda self: None  # type: ignore[method-assign]
        now = timezone.now()
        user = get_user_model().objects.create_user("bench")
        benchmark = Benchmark.objects.create(
            hardware_class=hardware_class_row(Benchmark.DEFAULT_HARDWARE_CLASS),
            slug="bench-leftovers",
            title="Leftovers",
            opens_at=now - dt.timedelta(days=1),
            closes_at=now + dt.timedelta(days=10),
            allowed_registries="localhost/podium/\n",
        )
        marker = f"benchleft-{uuid.uuid4().hex}"
        first_pk = 900_000 + int(marker[-4:], 16) * 100
        count = max(1, int(args.gib * 1024))
        before = layers_size()
        statuses: list[str] = []
        started = time.monotonic()
        for number in range(args.builds):
            environment = Environment.objects.create(  # as an upload queues it
                # Far from the ids of test databases on this engine: the build's cgroup
                # is named after it.
                pk=first_pk + number,
                owner=user,
                benchmark=benchmark,
                name=f"bench-{number}",
                status=Environment.QUEUED,
                dockerfile=(
                    f"FROM {BASE}\n"
                    f"RUN dd if=/dev/zero of=/f bs=1M count={count} && echo {marker}{number}\n"
                    "RUN false\n"
                ),
            )
            builds.build_environment(environment.pk)
            environment.refresh_from_db()
            statuses.append(environment.status)
            print(f"build {number + 1}/{args.builds}: {environment.status}", flush=True)
        elapsed = time.monotonic() - started
        left = images_with(marker)
        after = layers_size()
        left_bytes = sum(left.values())
        print(f"builds: {args.builds} x {count} MiB written, statuses {sorted(set(statuses))}")
        print(f"time: {elapsed:.1f} s ({elapsed / args.builds:.1f} s a build)")
        print(f"clean-up: {'OFF (--keep-leftovers)' if args.keep_leftovers else 'on'}")
        print(f"left by the builds: {len(left)} image(s), {left_bytes:,} bytes")
        print(
            f"engine layers before/after: {before:,} / {after:,} bytes "
            f"(delta {after - before:+,}; other work on this engine moves it too)"
        )
        ok = left_bytes < TARGET_BYTES and all(s == Environment.FAILED for s in statuses)
        print(f"target (< {TARGET_BYTES:,} bytes left): {'met' if ok else 'NOT met'}")
        remove_images(list(left))
    return 0 if ok or args.keep_leftovers else 1


if __name__ == "__main__":
    sys.exit(main())
