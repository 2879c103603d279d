"""CPUs of their own for scored runs (``portal.core.cpus``): the split by core count, the scored
container's cpuset (on a real engine too), the build bounds, and processes pinning
themselves off the scoring CPUs."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import tarfile
import textwrap
import uuid
from pathlib import Path

import pytest

from portal.contests.models import Benchmark
from portal.core import cpus
from scoring import engine
from scoring.cohort.staging import StagedRun
from scoring.host import health
from scoring.run import runner
from tests.scoring import images as images_module

REPO = Path(__file__).resolve().parents[2]


# The decision (pure) ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1", {1}), ("2-3", {2, 3}), ("0,4-6", {0, 4, 5, 6}), (" 7 \n", {7})],
)
def test_a_cpu_list_reads_as_the_kernel_writes_it(text, expected):
    assert cpus.parse_cpu_list(text) == expected
    assert cpus.parse_cpu_list(cpus.format_cpu_list(expected)) == expected


@pytest.mark.parametrize("text", ["", "a", "1-", "3-1", "1;2", "-1"])
def test_a_malformed_cpu_list_is_refused(text):
    with pytest.raises(cpus.CpuListError):
        cpus.parse_cpu_list(text)


def test_lists_are_written_with_ranges_folded():
    assert cpus.format_cpu_list({0, 1, 3, 5, 6, 7}) == "0-1,3,5-7"
    assert cpus.format_cpu_list(set()) == ""


@pytest.mark.parametrize(
    ("cores", "scoring"),
    [
        (1, set()),
        (2, set()),  # too small: one CPU each would halve a run's CPUs
        (3, set()),
        (4, {2, 3}),
        (6, {3, 4, 5}),
        (8, {4, 5, 6, 7}),
        (16, set(range(8, 16))),
    ],
)
def test_auto_gives_runs_the_last_half_from_four_cpus_on(cores, scoring):
    assert cpus.default_scoring_cpus(range(cores)) == scoring
    isolation = cpus.decide("auto", range(cores))
    assert isolation.scoring == scoring
    assert isolation.other == (set(range(cores)) - scoring if scoring else set())


def test_a_machine_too_small_to_split_says_so():
    isolation = cpus.decide("auto", {0, 1})

    assert not isolation.split and isolation.scoring_cpus == isolation.other_cpus == ""
    assert isolation.as_fact() == {
        "shared": True,
        "scoring_cpus": None,
        "other_cpus": None,
        "reason": "2 CPUs: too few to split (it takes 4); scored runs share them with the web "
        "server, the workers and the engine",
    }


def test_a_list_or_shared_overrides_the_core_count():
    assert cpus.decide("1", {0, 1}).as_fact() == {
        "shared": False,
        "scoring_cpus": "1",
        "other_cpus": "0",
        "reason": "",
    }
    assert cpus.decide("5,7", range(8)).other_cpus == "0-4,6"
    shared = cpus.decide("shared", range(16))
    assert not shared.split and "PODIUM_SCORING_CPUS=shared" in shared.reason


@pytest.mark.parametrize(
    ("setting", "why"),
    [
        ("2", "CPU 2, which is not online here (online: 0-1)"),
        ("0-1", "leaves no CPU for the web server"),
        ("one", "not a CPU list"),
    ],
)
def test_a_setting_that_cannot_be_used_says_why(setting, why):
    with pytest.raises(cpus.CpuListError, match=re.escape(why)):
        cpus.decide(setting, {0, 1})


# The scored container -----------------------------------------------------------------


def staged_at(root: Path) -> StagedRun:
    input_dir = root / "runs" / "7" / "input"
    (input_dir / "images").mkdir(parents=True)
    (input_dir / "manifest.tsv").write_text("")
    for path in (root, root / "runs", input_dir.parent, input_dir, input_dir / "images"):
        path.chmod(0o755)
    (input_dir / "manifest.tsv").chmod(0o644)
    return StagedRun(
        run_id=7,
        root=input_dir.parent,
        input_dir=input_dir,
        manifest=input_dir / "manifest.tsv",
        rows=0,
        references=[],
        request_ids=[],
        staged_names=[],
    )


def spec(staged: StagedRun, **kwargs: object) -> dict[str, object]:
    return runner.container_spec(
        image="podium/sub:1",
        staged=staged,
        benchmark=Benchmark(),
        supervisor=Path("/opt/podium/supervise"),
        expect_bytes=0,
        **kwargs,
    )


def test_the_scored_container_is_pinned_to_the_given_cpus_without_a_quota(tmp_path):
    pinned = spec(staged_at(tmp_path), scoring_cpus="2-3")

    assert pinned["cpuset_cpus"] == "2-3"
    for quota in ("nano_cpus", "cpu_quota", "cpu_period", "cpu_shares"):
        assert quota not in pinned  # no period throttling on the clock


def test_the_scored_container_follows_the_setting(tmp_path, settings, monkeypatch):
    monkeypatch.setattr(cpus, "online_cpus", lambda: frozenset(range(8)))
    staged = staged_at(tmp_path)

    settings.PODIUM_SCORING_CPUS = "auto"
    assert spec(staged)["cpuset_cpus"] == "4-7"
    settings.PODIUM_SCORING_CPUS = "shared"
    assert "cpuset_cpus" not in spec(staged)  # every CPU
    monkeypatch.setattr(cpus, "online_cpus", lambda: frozenset({0, 1}))
    settings.PODIUM_SCORING_CPUS = "auto"
    assert "cpuset_cpus" not in spec(staged)  # too small to split


def test_build_containers_go_to_the_other_cpus():
    bounds = engine.BuildBounds("podium-build", "/podium-build/b-1", 1 << 30, 64, 1.0, "0-1")

    assert bounds.build_params()["cpusetcpus"] == "0-1"  # every RUN step
    assert bounds.host_config()["cpuset_cpus"] == "0-1"  # build.sh's container
    shared = engine.BuildBounds("podium-build", "/podium-build/b-1", 1 << 30, 64, 1.0)
    assert "cpusetcpus" not in shared.build_params()
    assert "cpuset_cpus" not in shared.host_config()


@pytest.mark.docker
@pytest.mark.skipif(len(cpus.online_cpus()) < 2, reason="one CPU: nothing to pin to")
def test_a_build_step_runs_on_the_other_cpus():
    other = min(cpus.online_cpus())
    bounds = engine.BuildBounds("none", "", 1 << 30, 256, 1.0, str(other))
    context = io.BytesIO()
    dockerfile = b"FROM localhost/podium/busybox:1\nRUN grep Cpus_allowed_list /proc/self/status\n"
    with tarfile.open(fileobj=context, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile))
    context.seek(0)
    log: list[str] = []
    tag = f"podium-test/cpus-{uuid.uuid4().hex[:12]}:build"

    outcome = engine.build_image(
        context=context, tag=tag, on_log=log.append, timeout_s=120, bounds=bounds
    )

    try:
        assert outcome.ok, outcome.error
        assert f"Cpus_allowed_list:\t{other}" in "".join(log).splitlines()
    finally:
        engine.remove_image(tag)


@pytest.mark.docker
@pytest.mark.skipif(len(cpus.online_cpus()) < 2, reason="one CPU: nothing to pin to")
def test_a_scored_container_sees_only_the_scoring_cpus(tmp_path, settings):
    scoring = max(cpus.online_cpus())
    settings.PODIUM_SCORING_CPUS = str(scoring)
    script = textwrap.dedent(
        """\
        #!/bin/sh
        grep Cpus_allowed_list /proc/self/status
        cat /sys/fs/cgroup/cpuset.cpus.effective /sys/fs/cgroup/cpuset/cpuset.effective_cpus \\
            2>/dev/null | sed 's/^/cgroup: /'
        """
    )
    with images_module.script_images("cpus", {"where": script}) as built:
        created = runner.container_spec(
            image=built["where"],
            staged=staged_at(tmp_path),
            benchmark=Benchmark(),
            supervisor=images_module.supervisor(),
            expect_bytes=0,
        )
        container_id = engine.create_container(**created)
        try:
            engine.start(container_id)
            assert engine.wait(container_id, timeout_s=60) == 0
            result = runner.parse_supervisor_line(engine.logs(container_id, stdout=True))
        finally:
            engine.remove_container(container_id)

    lines = result.stdout_tail.decode().splitlines()
    assert f"Cpus_allowed_list:\t{scoring}" in lines  # the entrant's own affinity
    assert f"cgroup: {scoring}" in lines  # and its cgroup's, which it cannot widen


# Processes off the scoring CPUs -------------------------------------------------------

PIN_AND_REPORT = """
import io
import os
import re
import django

django.setup()
from portal.core.cpus import pin_off_scoring

pinned = pin_off_scoring()
print(sorted(os.sched_getaffinity(0)), None if pinned is None else sorted(pinned))
"""


def _run_pinned(setting: str, tmp_path: Path) -> str:
    env = {
        **os.environ,
        "PODIUM_SCORING_CPUS": setting,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "PODIUM_DATA_DIR": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, "-c", PIN_AND_REPORT],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: nothing to pin to")
def test_a_process_pins_itself_off_the_scoring_cpus(tmp_path):
    allowed = sorted(os.sched_getaffinity(0))
    scoring, others = allowed[-1], allowed[:-1]

    assert _run_pinned(str(scoring), tmp_path) == f"{others} {others}"
    assert _run_pinned("shared", tmp_path) == f"{allowed} None"  # left where it was


def test_a_bad_setting_stops_the_process_with_the_reason(tmp_path):
    env = {
        **os.environ,
        "PODIUM_SCORING_CPUS": "0-4096",
        "PODIUM_DATA_DIR": str(tmp_path),
        "PODIUM_LOCAL": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", "import portal.wsgi"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode != 0
    assert "PODIUM_SCORING_CPUS names CPU" in done.stderr


@pytest.mark.serial  # another test process would load the scoring CPU too
def test_the_cpu_gate_of_a_split_host_ignores_work_on_the_other_cpus():
    """A loop spinning on a non-scoring CPU holds no run of a host that splits its CPUs;
    on a host that shares them, it counts."""
    online = sorted(os.sched_getaffinity(0))
    if len(online) < 2:
        pytest.skip("one CPU: nothing to split")
    other, scoring = online[0], online[-1]
    spinner = subprocess.Popen(
        ["taskset", "-c", str(other), sys.executable, "-c", "while True: pass"]
    )
    try:
        busy_all = min(health.busy_cpu_samples(0.0, 0.3, tries=3))
        busy_scoring = min(health.busy_cpu_samples(0.0, 0.3, tries=3, only=frozenset({scoring})))
    finally:
        spinner.kill()
        spinner.wait()
    assert busy_all >= 0.8  # the loop's CPU, seen from the whole machine
    assert busy_scoring < busy_all - 0.5  # not seen from the scoring CPU
