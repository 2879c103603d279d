"""Benchmark: what the build network policy costs.

Targets (issue "Builds are a sandbox too"):

1. Allowed traffic is not slowed down: downloading the same file from an allow-listed
   mirror inside a build container, with the policy applied and without it, the median
   time with it is at most 1.05x the median without.
2. The check that runs before every build (``scoring.build.buildnet.inspect``: the engine's
   network, then ``iptables-save`` of each family compared rule by rule) is timed too.

Everything stays on this machine: the "mirror" is an HTTP server in a network namespace
made here (``tests/testhosts.py``, 198.18.7.2, a blocked range the allow-list admits),
serving a file of ``--mib`` MiB. Each download runs in a fresh container on the build
network (``localhost/podium/python:bookworm``) and is timed inside it, so container
start-up is not counted; runs alternate between the two modes. Needs root and Docker.
The policy is applied again at the end.

    .venv/bin/python bench/build_egress.py [--runs 9] [--mib 256]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
IMAGE = "localhost/podium/python:bookworm"
DOWNLOAD = (
    "import sys, time, urllib.request\n"
    "started = time.perf_counter()\n"
    "with urllib.request.urlopen(sys.argv[1], timeout=60) as response:\n"
    "    while response.read(1 << 20):\n"
    "        pass\n"
    "print(time.perf_counter() - started)\n"
)


def setup_django(data_dir: Path) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ["PODIUM_DATA_DIR"] = str(data_dir)
    sys.path.insert(0, str(REPO))
    import django

    django.setup()


def download_s(url: str) -> float:
    from django.conf import settings

    from scoring import engine

    container_id = engine.create_container(
        image=IMAGE,
        command=["python3", "-c", DOWNLOAD, url],
        network_mode=settings.PODIUM_BUILD_NETWORK,
    )
    try:
        engine.start(container_id)
        status = engine.wait(container_id, timeout_s=300)
        output = engine.logs(container_id, stdout=True, stderr=True).decode().strip()
        if status != 0:
            raise RuntimeError(f"the download failed ({status}): {output[-300:]}")
        return float(output.splitlines()[-1])
    finally:
        engine.remove_container(container_id)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--mib", type=int, default=256)
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("build_egress: needs root (network namespaces and firewall rules)")
        return 2
    with tempfile.TemporaryDirectory(prefix="podium-bench-egress-") as temp:
        setup_django(Path(temp) / "data")
        from django.conf import settings

        from scoring.build import buildnet
        from tests import testhosts

        folder = Path(temp) / "mirror"
        folder.mkdir()
        with (folder / "blob").open("wb") as blob:
            blob.write(os.urandom(args.mib << 20))
        original = settings.PODIUM_BUILD_EGRESS_ALLOW
        with testhosts.mirror_host(folder) as mirror:
            settings.PODIUM_BUILD_EGRESS_ALLOW = ",".join(filter(None, [original, mirror.allow]))
            try:
                buildnet.apply()
                checks = []
                for _ in range(20):
                    started = time.perf_counter()
                    report = buildnet.inspect()
                    checks.append(time.perf_counter() - started)
                if not report.enforced:
                    raise SystemExit(f"the policy is not in place: {report.problems}")
                timed: dict[str, list[float]] = {"with": [], "without": []}
                download_s(mirror.url("blob"))  # warm the page cache and the image
                for _ in range(args.runs):
                    buildnet.apply()
                    timed["with"].append(download_s(mirror.url("blob")))
                    buildnet.remove()
                    timed["without"].append(download_s(mirror.url("blob")))
            finally:
                settings.PODIUM_BUILD_EGRESS_ALLOW = original
                buildnet.apply()
    with_s, without_s = statistics.median(timed["with"]), statistics.median(timed["without"])
    ratio = with_s / without_s
    check_ms = statistics.median(checks) * 1000
    print(f"download of {args.mib} MiB from the allow-listed mirror, {args.runs} runs each")
    print(f"  with the policy:    median {with_s:.3f} s  ({args.mib / with_s:.0f} MiB/s)")
    print(f"  without the policy: median {without_s:.3f} s  ({args.mib / without_s:.0f} MiB/s)")
    print(f"  ratio: {ratio:.3f}x (target at most 1.05x): {'PASS' if ratio <= 1.05 else 'MISS'}")
    print(
        f"the check before each build (buildnet.inspect): median {check_ms:.1f} ms, "
        f"max {max(checks) * 1000:.1f} ms over {len(checks)}"
    )
    return 0 if ratio <= 1.05 else 1


if __name__ == "__main__":
    sys.exit(main())
