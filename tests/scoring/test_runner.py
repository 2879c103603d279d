"""The scored run: the sandbox spec, the supervisor's line, who is blamed, and real runs."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.utils import timezone

from portal.contests import sandbox
from portal.contests.models import Benchmark, Cohort, LeaderboardEntry
from portal.core import jobs, storage
from portal.submissions import evidence
from portal.submissions.models import AttemptLedger, Run, Submission, VerificationSet
from scoring import engine, worker
from scoring.cohort import verifysets
from scoring.cohort.staging import StagedRun
from scoring.run import runner
from tests.scoring import images as images_module
from tests.scoring.test_staging import make_cohort, make_submission

REPO = Path(__file__).resolve().parents[2]
GIB = 1 << 30


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def supervisor_line(**overrides: Any) -> bytes:
    fields: dict[str, Any] = {
        "podium_supervisor": 1,
        "start_ns": 1_000,
        "end_ns": 5_000,
        "wall_ns": 4_000,
        "exit_code": 0,
        "signal": None,
        "killed": False,
        "rusage": {"utime_us": 10, "stime_us": 20, "maxrss_kb": 1344},
        "output_bytes": 8,
        "output_error": "",
        "output_b64": b64(b"\x07\0\0\0\x07\0\0\0"),
        "stdout_tail_b64": b64(b"hello\n"),
        "stderr_tail_b64": b64(b"oops\n"),
        "cgroup": {},
        "meter_ns": 0,
        "prewarm_ns": 0,
        "prewarm_bytes": 0,
        "prewarm_files": 0,
        "prewarm_truncated": False,
    }
    fields.update(overrides)
    return json.dumps(fields).encode() + b"\n"


# The container spec --------------------------------------------------------------


@pytest.fixture
def staged(tmp_path: Path) -> StagedRun:
    input_dir = tmp_path / "runs" / "41" / "input"
    return StagedRun(
        run_id=41,
        root=input_dir.parent,
        input_dir=input_dir,
        manifest=input_dir / "manifest.tsv",
        rows=10,
        references=[7] * 10,
        request_ids=[f"r{i}" for i in range(10)],
        staged_names=[f"n{i}.jpg" for i in range(10)],
    )


def spec_for(staged: StagedRun, **rules: Any) -> tuple[dict[str, Any], Benchmark]:
    benchmark = Benchmark(
        score_timeout_s=960,
        run_memory_bytes=3 << 30,
        run_pids_limit=77,
        run_tmpfs_bytes=123 << 20,
        run_output_tmpfs_bytes=5 << 20,
        run_shm_bytes=700 << 20,
        **rules,
    )
    spec = runner.container_spec(
        image="podium/sub:1",
        staged=staged,
        benchmark=benchmark,
        supervisor=Path("/opt/podium/supervise"),
        expect_bytes=40,
    )
    return spec, benchmark


def test_the_container_is_sandboxed(staged):
    spec, benchmark = spec_for(staged)

    assert spec["image"] == "podium/sub:1"
    assert spec["network_mode"] == "none"
    assert spec["read_only"] is True
    assert spec["cap_drop"] == ["ALL"]
    assert "no-new-privileges" in spec["security_opt"]
    # Root with three capabilities only for the supervisor's first instructions: it
    # empties the bounding set and becomes its own uid before the entrant starts as
    # the run uid (tests/hostile and tests/supervisor check that it does).
    assert spec["user"] == "0:0"
    assert sorted(spec["cap_add"]) == ["SETGID", "SETPCAP", "SETUID"]
    assert spec["healthcheck"] == {"test": ["NONE"]}  # no image HEALTHCHECK beside PID 1
    assert spec["mem_limit"] == spec["memswap_limit"] == benchmark.run_memory_bytes
    assert spec["pids_limit"] == 77
    assert spec["environment"] == []  # nothing of the worker's environment leaks in
    assert spec["init"] is False  # our supervisor is PID 1, not Docker's init
    assert spec["labels"] == {"podium.run": "41"}
    assert spec["log_config"] == {"type": "json-file", "config": {"max-size": "16m"}}
    for forbidden in (
        "privileged",
        "binds",
        "volumes",
        "volumes_from",
        "devices",
        "device_requests",
        "pid_mode",
        "ipc_mode",
        "userns_mode",
    ):
        assert forbidden not in spec
    assert "docker.sock" not in json.dumps(spec)


def test_dockers_default_seccomp_profile_stays_under_the_supervisors_own_filter(staged):
    spec, _benchmark = spec_for(staged)

    # A seccomp=<profile> option would replace Docker's default profile; the supervisor
    # stacks its own filter on the entrant instead (tests/hostile checks it works).
    assert not any(option.startswith("seccomp") for option in spec["security_opt"])


def test_the_supervisor_settles_off_the_clock_within_its_margin(staged):
    spec, benchmark = spec_for(staged)

    entry = spec["entrypoint"]
    settle_ms = int(entry[entry.index("--settle-ms") + 1])
    deadline_ms = int(entry[entry.index("--deadline-ms") + 1])
    prewarm_ms = int(entry[entry.index("--prewarm-ms") + 1])
    margin_ms = runner.outer_timeout_s(benchmark) * 1000 - prewarm_ms - deadline_ms
    # The supervisor waits for the engine before its clock; that must not eat the margin
    # the host's outer timer leaves it past the limit.
    assert 0 < settle_ms <= sandbox.MIN_MARGIN_MS // 5 and settle_ms < margin_ms


def test_the_supervisors_oom_score_is_asked_for_only_where_configured(staged, settings):
    settings.PODIUM_RUN_OOM_SCORE_ADJ = None
    spec, _benchmark = spec_for(staged)
    assert "oom_score_adj" not in spec  # an engine without CAP_SYS_RESOURCE refuses it

    settings.PODIUM_RUN_OOM_SCORE_ADJ = -1000
    spec, _benchmark = spec_for(staged)
    assert spec["oom_score_adj"] == -1000  # the OOM killer never picks PID 1


def test_the_supervisor_and_the_entrant_get_a_uid_each(staged, settings):
    spec, _benchmark = spec_for(staged)
    entry = spec["entrypoint"]
    options = dict(
        zip(entry[1 : entry.index("--") : 2], entry[2 : entry.index("--") : 2], strict=True)
    )
    entrant, supervisor = settings.PODIUM_RUN_UID, runner.supervisor_uid()

    assert options["--entrant-user"] == f"{entrant}:{entrant}"
    assert options["--supervisor-user"] == f"{supervisor}:{supervisor}"
    assert 0 not in (entrant, supervisor) and entrant != supervisor

    settings.PODIUM_SUPERVISOR_UID = entrant  # one uid for both: refused, not run
    with pytest.raises(ValueError, match="must differ"):
        spec_for(staged)


def test_the_only_writable_places_are_sized_tmpfs_with_inode_caps(staged):
    spec, _benchmark = spec_for(staged)
    uid = settings.PODIUM_RUN_UID
    supervisor = runner.supervisor_uid()

    tmpfs = spec["tmpfs"]
    assert set(tmpfs) == {"/tmp", "/dev/shm", "/contest/output", "/contest/logs"}
    for folder, options in tmpfs.items():
        owner = supervisor if folder == "/contest/logs" else uid  # the logs: not the entrant's
        assert f"uid={owner}" in options.split(",") and f"gid={owner}" in options.split(",")
        assert "mode=0700" in options.split(",")
        assert any(option.startswith("size=") for option in options.split(","))
        # Empty files use no blocks: only an inode cap stops a flood of them.
        assert any(option.startswith("nr_inodes=") for option in options.split(","))
    assert f"nr_inodes={sandbox.OUTPUT_INODES}" in tmpfs["/contest/output"].split(",")
    assert sandbox.OUTPUT_INODES <= 100
    assert f"size={123 << 20}" in tmpfs["/tmp"].split(",")
    assert "exec" in tmpfs["/tmp"].split(",")  # JIT and compiled caches may live here
    assert f"size={5 << 20}" in tmpfs["/contest/output"].split(",")
    assert f"size={700 << 20}" in tmpfs["/dev/shm"].split(",")
    assert "noexec" in tmpfs["/contest/output"].split(",")


def test_inputs_and_the_supervisor_are_mounted_read_only(staged):
    spec, _benchmark = spec_for(staged)

    mounts = {mount["Target"]: mount for mount in spec["mounts"]}
    assert set(mounts) == {"/contest/input", "/podium/supervise"}
    assert mounts["/contest/input"]["Source"] == str(staged.input_dir)
    assert mounts["/podium/supervise"]["Source"] == "/opt/podium/supervise"
    assert all(mount["ReadOnly"] is True and mount["Type"] == "bind" for mount in mounts.values())


def test_the_supervisor_runs_the_entrypoint_with_the_abi_paths_and_the_limit_as_deadline(staged):
    spec, _benchmark = spec_for(staged)

    entry = spec["entrypoint"]
    assert spec["command"] == []
    assert entry[0] == "/podium/supervise"
    options = dict(
        zip(entry[1 : entry.index("--") : 2], entry[2 : entry.index("--") : 2], strict=True)
    )
    assert options["--expect-bytes"] == "40"
    assert options["--output"] == "/contest/output/predictions.i32"
    assert options["--log-dir"] == "/contest/logs"
    # The entrant has the whole 960 s; the host's own timer waits past it for the report.
    assert int(options["--deadline-ms"]) == 960_000
    assert entry[entry.index("--") + 1 :] == [
        "/submission/run",
        "/contest/input/manifest.tsv",
        "/contest/input/images",
        "/contest/output/predictions.i32",
    ]


def test_the_supervisor_kills_at_the_limit_and_the_host_timer_only_after_it(settings):
    settings.PODIUM_PREWARM_BYTES = 0
    # A run of the flagship's 16 minutes may end at 955 s, or 959.9 s, and still pass.
    assert runner.supervisor_deadline_ms(960) == 960_000
    assert runner.supervisor_deadline_ms(10) == 10_000
    # The host's timer gives the supervisor a tenth of the limit, 1 to 10 s, to report.
    assert runner.outer_timeout_s(Benchmark(score_timeout_s=960, run_memory_bytes=GIB)) == 970
    assert runner.outer_timeout_s(Benchmark(score_timeout_s=30, run_memory_bytes=GIB)) == 33
    assert runner.outer_timeout_s(Benchmark(score_timeout_s=2, run_memory_bytes=GIB)) == 3


# The supervisor's line -------------------------------------------------------------


def test_the_supervisor_line_is_decoded():
    result = runner.parse_supervisor_line(supervisor_line())

    assert (result.start_ns, result.end_ns, result.wall_ns) == (1_000, 5_000, 4_000)
    assert result.exit_code == 0 and result.signal is None and result.killed is False
    assert result.rusage == {"utime_us": 10, "stime_us": 20, "maxrss_kb": 1344}
    assert result.output == b"\x07\0\0\0\x07\0\0\0"
    assert (result.stdout_tail, result.stderr_tail) == (b"hello\n", b"oops\n")


def test_a_missing_output_is_reported_as_none():
    result = runner.parse_supervisor_line(
        supervisor_line(output_bytes=-1, output_error="missing", output_b64="")
    )
    assert result.output is None and result.output_error == "missing"


@pytest.mark.parametrize(
    "stdout",
    [
        b"",
        b"\n\n",
        b"Segmentation fault\n",
        b'{"podium_supervisor": 1, "start_ns": 1',  # cut short
        b"[1, 2]\n",
        supervisor_line(podium_supervisor=True),
        supervisor_line(podium_supervisor=2),
        supervisor_line(start_ns="1000"),
        supervisor_line(wall_ns=1),  # not end - start
        supervisor_line(start_ns=6_000, wall_ns=-1_000),
        supervisor_line(killed=0),
        supervisor_line(exit_code=True),
        supervisor_line(output_b64="not base64!"),
        supervisor_line(rusage={"utime_us": 1}),
        supervisor_line() + b"garbage after the line\n",
    ],
)
def test_anything_but_a_valid_last_line_is_a_platform_fault(stdout):
    with pytest.raises(runner.SupervisorError):
        runner.parse_supervisor_line(stdout)


def test_only_the_last_line_counts():
    # The entrant's processes never share the supervisor's stdout (their stdout and
    # stderr are files under /contest/logs, they cannot open a non-dumpable PID 1's
    # /proc/1/fd/1, and the supervisor prints only after every one of them is dead),
    # so nothing of theirs can reach the container's stdout at all. Taking the last
    # line is defence in depth: an earlier forged line could never win over it.
    forged = supervisor_line(start_ns=0, end_ns=1, wall_ns=1, output_b64=b64(b"\0" * 8))
    result = runner.parse_supervisor_line(forged + supervisor_line())

    assert (result.start_ns, result.wall_ns) == (1_000, 4_000)
    assert result.output == b"\x07\0\0\0\x07\0\0\0"


# Who is blamed: the runner's decisions with a fake engine --------------------------


class FakeEngine:
    """Stands in for ``scoring.engine``; writes its own supervisor line on demand."""

    def __init__(self, *, wait_result: int | None = 0, answer: bytes = b"\x07\0\0\0") -> None:
        self.wait_result = wait_result
        self.answer = answer
        self.stdout: bytes | None = None  # fixed container stdout, or None for a good line
        self.create_error: Exception | None = None
        self.calls: list[str] = []
        self.spec: dict[str, Any] = {}
        self.started_ns = 0
        self.ended_ns = 0
        self.rows = 0
        self.oom_killed = False
        # The supervisor's own stderr: by default it got past its warm start.
        self.stderr = runner.PREWARMED + b"supervise: cannot set up the run\n"

    def install(self, monkeypatch) -> FakeEngine:
        names = ("create_container", "start", "wait", "kill", "remove_container", "logs", "state")
        for name in names:
            monkeypatch.setattr(engine, name, getattr(self, name))
        return self

    def create_container(self, **spec: Any) -> str:
        self.calls.append("create")
        if self.create_error:
            raise self.create_error
        self.spec = spec
        self.rows = int(spec["entrypoint"][spec["entrypoint"].index("--expect-bytes") + 1]) // 4
        return "c0ffee"

    def start(self, container_id: str) -> None:
        self.calls.append("start")
        self.started_ns = time.monotonic_ns()

    def wait(self, container_id: str, timeout_s: float) -> int | None:
        self.calls.append("wait")
        self.ended_ns = time.monotonic_ns()
        return self.wait_result

    def kill(self, container_id: str) -> None:
        self.calls.append("kill")

    def state(self, container_id: str) -> dict[str, Any]:
        return {"Status": "exited", "OOMKilled": self.oom_killed}

    def remove_container(self, container_id: str) -> None:
        self.calls.append("remove")

    def logs(self, container_id: str, *, stdout: bool = True, stderr: bool = False) -> bytes:
        if stderr:  # the supervisor's own stderr, read only for the staff log
            assert not stdout
            self.calls.append("stderr")
            return self.stderr
        self.calls.append("logs")
        if self.stdout is not None:
            return self.stdout
        output = self.answer * self.rows
        start, end = self.started_ns + 1, self.ended_ns
        return supervisor_line(
            start_ns=start,
            end_ns=end,
            wall_ns=end - start,
            output_bytes=len(output),
            output_b64=b64(output),
        )


@pytest.fixture
def queued(alice, benchmark) -> Submission:
    """Alice's submission, queued for scoring on a 10-image cohort of class 7."""
    benchmark.cohort_size = 10
    benchmark.pass_min_matches = 10
    benchmark.save()
    make_cohort(benchmark, [7] * 10)
    return make_submission(alice, benchmark)


def the_run(submission: Submission) -> Run:
    return Run.objects.filter(submission=submission, purpose=Run.SCORE).latest("try_number")


def clock_readings(run: Run) -> list[int]:
    """host start, trusted start, trusted end, host end: all recorded."""
    readings = [run.host_start_ns, run.trusted_start_ns, run.trusted_end_ns, run.host_end_ns]
    recorded = [reading for reading in readings if reading is not None]
    assert len(recorded) == 4, readings
    return recorded


def refunded(submission: Submission) -> bool:
    return AttemptLedger.objects.filter(submission=submission, delta=AttemptLedger.REFUND).exists()


def test_a_correct_run_passes_with_its_trusted_time(queued, monkeypatch, sent):
    fake = FakeEngine().install(monkeypatch)

    runner.score_submission(queued.pk)

    run = the_run(queued)
    queued.refresh_from_db()
    assert queued.status == Submission.PASSED
    assert (run.verdict, run.matches, run.total, run.passed) == ("passed", 10, 10, True)
    host_start, trusted_start, trusted_end, host_end = clock_readings(run)
    assert host_start <= trusted_start <= trusted_end <= host_end
    assert run.wall_time_ns == trusted_end - trusted_start
    assert run.container_id == "c0ffee"
    assert len(run.supervisor_sha256) == 64
    assert len(run.output_sha256) == 64
    assert {"staging", "create", "compare"} <= set(run.overhead_ms)
    assert fake.calls == ["create", "start", "wait", "logs", "remove"]
    log_text = (storage.run_dir(run.pk) / "run.log").read_text()
    assert "hello" in log_text and "oops" in log_text
    assert not (storage.run_dir(run.pk) / "input").exists()
    assert LeaderboardEntry.objects.filter(run=run).exists()


@pytest.mark.parametrize(("canary_class", "verdict"), [(8, "failed"), (7, "passed")])
def test_a_verification_judges_its_canaries_against_the_reference_answers(
    queued, monkeypatch, sent, canary_class, verdict
):
    """Hostile (8): an entry that answers every image as it answered the official cohort
    (class 7, a table of it) misses the canaries, whose reference answer is 8. Honest (7):
    the same answers are right on canaries of class 7, and it ranks."""
    benchmark = queued.benchmark
    benchmark.verify_top = 20
    benchmark.save()
    make_cohort(benchmark, [canary_class] * 8, kind=Cohort.CANARY, seed=3)
    FakeEngine().install(monkeypatch)
    runner.score_submission(queued.pk)
    queued.refresh_from_db()
    assert queued.status == Submission.VERIFYING
    assert verifysets.prepare(the_run(queued).cohort_id) is not None

    runner.score_submission(queued.pk)

    verification = Run.objects.get(submission=queued, purpose=Run.VERIFY)
    assert (verification.verdict, verification.total) == (verdict, 10)
    canaries_right = 5 if canary_class == 7 else 0
    assert verification.verdict_reason.startswith(
        f"5 of 5 predictions match its official answers and {canaries_right} of 5 on images"
        " no public set holds match the reference"
    )
    canary_rows = [line for line in mapping(verification) if line.startswith("canary:")]
    assert len(canary_rows) == 5
    queued.refresh_from_db()
    if verdict == "failed":
        assert queued.status == Submission.REJECTED_VERIFICATION
        assert not LeaderboardEntry.objects.filter(benchmark=benchmark).exists()
    else:
        assert queued.status == Submission.PASSED, queued.failure_reason
        assert LeaderboardEntry.objects.filter(benchmark=benchmark).exists()


def test_a_final_run_is_staged_with_canaries_that_keep_their_reference_answers(queued):
    benchmark = queued.benchmark
    make_cohort(benchmark, [8] * 8, kind=Cohort.CANARY, seed=3)
    Submission.objects.filter(pk=queued.pk).update(status=Submission.PASSED)
    final = Run.objects.create(
        submission=queued,
        cohort=Cohort.objects.get(benchmark=benchmark, kind=Cohort.OFFICIAL),
        try_number=2,
        purpose=Run.FINAL,
        status=Run.STAGING,
    )

    staged = runner.stage(final, runner.Measured())

    assert staged.rows == 10 and sum(staged.canaries) == 5
    assert [
        reference for reference, canary in zip(staged.references, staged.canaries, strict=True)
    ] == [8 if canary else 7 for canary in staged.canaries]


def test_a_redelivered_task_does_nothing(queued, monkeypatch, sent):
    fake = FakeEngine().install(monkeypatch)
    runner.score_submission(queued.pk)
    fake.calls.clear()

    runner.score_submission(queued.pk)

    assert fake.calls == []
    assert queued.runs.count() == 1


def test_a_run_the_host_timer_stops_is_errored_and_counts(queued, monkeypatch, sent):
    fake = FakeEngine(wait_result=None).install(monkeypatch)

    runner.score_submission(queued.pk)

    run = the_run(queued)
    queued.refresh_from_db()
    assert queued.status == Submission.ERRORED
    assert run.verdict == "errored" and run.killed is True
    assert run.verdict_reason == "The run did not finish within the 960-second limit."
    assert "kill" in fake.calls and fake.calls[-1] == "remove"
    assert not refunded(queued)
    assert not (storage.run_dir(run.pk) / "input").exists()


def test_a_trusted_interval_outside_the_host_interval_is_a_platform_fault(
    queued, monkeypatch, sent, django_capture_on_commit_callbacks
):
    fake = FakeEngine().install(monkeypatch)
    fake.stdout = supervisor_line(start_ns=0, end_ns=10, wall_ns=10)  # before the host start

    with django_capture_on_commit_callbacks(execute=True):
        runner.score_submission(queued.pk)

    first = the_run(queued)
    queued.refresh_from_db()
    assert first.status == Run.INFRA_FAILED
    assert "host clock" in first.verdict_reason
    assert queued.status == Submission.QUEUED  # requeued for try 2
    assert sent == [(jobs.SCORE_NEXT, (queued.benchmark.hardware_class_id, 0))]
    assert not refunded(queued)
    assert fake.calls[-1] == "remove"

    # Try 2 fails the same way: the platform gives up and refunds the attempt.
    with django_capture_on_commit_callbacks(execute=True):
        runner.score_submission(queued.pk)

    second = the_run(queued)
    queued.refresh_from_db()
    assert second.try_number == 2 and second.status == Run.INFRA_FAILED
    assert queued.status == Submission.INFRA_FAILED
    assert refunded(queued)
    # No third try: only the entrant's mail about the refund is queued.
    assert sent[1:] == [(jobs.SEND_VERDICT_MAIL, (queued.pk, Submission.INFRA_FAILED))]
    assert not LeaderboardEntry.objects.filter(submission=queued).exists()


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        (lambda fake: setattr(fake, "stdout", b"nothing useful\n"), "not JSON"),
        (lambda fake: setattr(fake, "wait_result", 1), "exited with status 1"),
        (
            lambda fake: setattr(fake, "create_error", engine.EngineError("no space left")),
            "container engine failed while creating the container",
        ),
    ],
)
def test_engine_and_supervisor_failures_are_the_platforms(queued, monkeypatch, sent, setup, reason):
    fake = FakeEngine().install(monkeypatch)
    setup(fake)

    runner.score_submission(queued.pk)

    run = the_run(queued)
    queued.refresh_from_db()
    assert run.status == Run.INFRA_FAILED and reason in run.verdict_reason
    assert queued.status == Submission.QUEUED
    assert not (storage.run_dir(run.pk) / "input").exists()


def test_a_supervisor_taken_by_the_oom_killer_is_the_entrants_error(queued, monkeypatch, sent):
    fake = FakeEngine().install(monkeypatch)
    fake.wait_result, fake.oom_killed = 137, True

    runner.score_submission(queued.pk)

    run = the_run(queued)
    queued.refresh_from_db()
    assert run.status == Run.FINISHED and queued.status == Submission.ERRORED
    assert "memory limit" in run.verdict_reason
    assert not refunded(queued)
    assert sent == []  # no free retry


def test_a_tampered_cohort_is_the_platforms_fault_and_nothing_starts(queued, monkeypatch, sent):
    fake = FakeEngine().install(monkeypatch)
    item = queued.benchmark.cohorts.get().items.get(position=4)
    (storage.cohort_dir(item.cohort_id) / item.canonical_name).write_bytes(b"changed")

    runner.score_submission(queued.pk)

    run = the_run(queued)
    assert run.status == Run.INFRA_FAILED
    assert "frozen sha256" in run.verdict_reason
    assert item.canonical_name not in run.verdict_reason
    assert fake.calls == []


# Real runs in Docker -----------------------------------------------------------------

RIGHT = r"""#!/bin/sh
while read -r request_id path; do
  [ -r "$2/$path" ] || { echo "cannot read $path" >&2; exit 3; }
  printf '\007\000\000\000'
done < "$1" > "$3"
echo "scored $(wc -l < "$1") rows"
"""

FORGED_LINE = json.dumps(
    {
        "podium_supervisor": 1,
        "start_ns": 0,
        "end_ns": 1,
        "wall_ns": 1,
        "exit_code": 0,
        "signal": None,
        "killed": False,
        "rusage": {"utime_us": 0, "stime_us": 0, "maxrss_kb": 0},
        "output_bytes": 40,
        "output_error": "",
        "output_b64": b64(b"\x07\0\0\0" * 10),
        "stdout_tail_b64": "",
        "stderr_tail_b64": "",
        "cgroup": {},
        "meter_ns": 0,
        "prewarm_ns": 0,
        "prewarm_bytes": 0,
        "prewarm_files": 0,
        "prewarm_truncated": False,
    }
)

# Writes 3 rows where 10 are due.
SHORT = r"""#!/bin/sh
printf '\007\000\000\000\007\000\000\000\007\000\000\000' > "$3"
"""

# Forges a result line on every stream it has, probes the sandbox, answers right.
FORGER_PROBES = r"""
echo "$line"; echo "$line" >&2
echo "$line" > /proc/1/fd/1 2>/dev/null && echo "pid1 stdout writable"
touch /contest/input/planted 2>/dev/null && echo "input writable" || echo "input read-only"
touch /planted 2>/dev/null && echo "root writable" || echo "root read-only"
echo "uid=$(id -u)"
"""

# Answers class 8 for the images whose file starts "image 0 " or "image 1 " and 7 for
# the rest: wrong on two of the ten, the same two whichever run it is.
TWO_WRONG = r"""#!/bin/sh
while read -r request_id path; do
  case "$(head -c 8 "$2/$path")" in
    "image 0 "|"image 1 ") printf '\010\000\000\000' ;;
    *) printf '\007\000\000\000' ;;
  esac
done < "$1" > "$3"
"""

SCRIPTS = {
    "right": RIGHT,
    "two_wrong": TWO_WRONG,
    "short": SHORT,
    "wrong": RIGHT.replace(r"\007", r"\010"),
    # The entrypoint exits at once; its double-forked grandchild works on for 2 s.
    "daemon": RIGHT + "( (sleep 2; echo grandchild done) & )\nexit 0\n",
    "forger": RIGHT + f"line='{FORGED_LINE}'\n" + FORGER_PROBES,
}


@pytest.fixture(scope="module")
def supervisor_binary() -> Path:
    return images_module.supervisor()


@pytest.fixture(scope="module")
def images() -> Iterator[dict[str, str]]:
    """One submission image per script: localhost/podium/busybox:1 plus /submission/run."""
    with images_module.script_images("runner", SCRIPTS) as built:
        yield built


@pytest.fixture
def score(queued, supervisor_binary, images, settings, sent):
    """Score Alice's queued submission with one of the scripts; return its run."""
    settings.PODIUM_SUPERVISOR = supervisor_binary
    benchmark = queued.benchmark
    benchmark.score_timeout_s = 30
    benchmark.run_memory_bytes = 256 << 20
    benchmark.run_pids_limit = 64
    benchmark.run_tmpfs_bytes = 16 << 20
    benchmark.run_output_tmpfs_bytes = 1 << 20
    benchmark.save()

    def run_script(name: str) -> Run:
        Submission.objects.filter(pk=queued.pk).update(image_tag=images[name])
        runner.score_submission(queued.pk)
        run = the_run(queued)
        assert run.status == Run.FINISHED, run.verdict_reason
        assert not engine.list_containers(label=f"podium.run={run.pk}")
        assert not (storage.run_dir(run.pk) / "input").exists()
        return run

    return run_script


def run_log(run: Run) -> str:
    return (storage.run_dir(run.pk) / "run.log").read_text()


@pytest.mark.docker
def test_a_right_answer_passes_and_reaches_the_leaderboard(score, queued):
    run = score("right")

    assert (run.verdict, run.matches, run.total) == ("passed", 10, 10)
    assert run.wall_time_ns > 0
    host_start, trusted_start, trusted_end, host_end = clock_readings(run)
    assert host_start <= trusted_start <= trusted_end <= host_end
    assert run.exit_code == 0 and run.killed is False
    assert "scored 10 rows" in run_log(run)
    entry = LeaderboardEntry.objects.get(benchmark=queued.benchmark, entrant=queued.entrant)
    assert (entry.run_id, entry.wall_time_ns, entry.matches) == (run.pk, run.wall_time_ns, 10)
    # The meter: the container's cgroup, read once the tree was reaped.
    resources = run.resources
    assert resources["cgroup_version"] in (1, 2), resources
    assert resources["cpu_user_s"] is not None and resources["cpu_system_s"] is not None
    assert resources["memory_peak_bytes"] > 0 and resources["oom_events"] == 0, resources
    assert resources["cpu_per_wall"] == pytest.approx(
        (resources["cpu_user_s"] + resources["cpu_system_s"]) / (run.wall_time_ns / 1e9)
    )
    assert 0 <= resources["meter_ms"] < 1000


@pytest.mark.docker
def test_a_verification_reruns_the_image_through_the_same_stages(score, queued):
    benchmark = queued.benchmark
    benchmark.verify_top = 20
    # A few-millisecond run on a busy test machine is noisy: only a 10x slower verification
    # is refused here (the rule's boundaries: tests/submissions/test_verification.py).
    benchmark.verify_tolerance_pct = 1000
    benchmark.save()
    official = score("right")
    queued.refresh_from_db()
    assert queued.status == Submission.VERIFYING
    assert not LeaderboardEntry.objects.filter(benchmark=benchmark).exists()

    # No prepared set is ready yet: the verification is not claimed, and waits.
    runner.score_submission(queued.pk)
    verification = Run.objects.get(submission=queued, purpose=Run.VERIFY)
    assert verification.status == Run.QUEUED
    assert verifysets.prepare(official.cohort_id) is not None
    runner.score_submission(queued.pk)  # the verification message

    verification.refresh_from_db()
    assert (verification.status, verification.verdict) == (Run.FINISHED, "passed")
    assert verification.matches == 10 and (verification.wall_time_ns or 0) > 0
    assert verification.resources["cpu_user_s"] is not None
    # Staged shuffled under fresh names, off the board; the official run is what ranks.
    official_names = {line.split("\t")[2] for line in mapping(official)}
    verify_names = {line.split("\t")[2] for line in mapping(verification)}
    assert len(verify_names) == 10 and not official_names & verify_names
    queued.refresh_from_db()
    assert queued.status == Submission.PASSED, queued.failure_reason
    entry = LeaderboardEntry.objects.get(benchmark=benchmark)
    assert (entry.run_id, entry.wall_time_ns) == (official.pk, official.wall_time_ns)
    assert not engine.list_containers(label=f"podium.run={verification.pk}")
    assert not (storage.run_dir(verification.pk) / "input").exists()
    # The set it copied served this run only: gone, files and row.
    assert not VerificationSet.objects.exists()
    [spent] = storage.verification_sets_dir().iterdir()  # put aside for the sweep
    assert spent.name.startswith(storage.SPENT_SET_PREFIX)
    verifysets.sweep()
    assert not any(storage.verification_sets_dir().iterdir())


@pytest.mark.docker
def test_a_verification_is_judged_against_the_entrants_own_official_answers(score, queued):
    benchmark = queued.benchmark
    benchmark.verify_top = 20
    benchmark.verify_tolerance_pct = 1000
    benchmark.pass_min_matches = 8  # 8 of 10 pass officially
    benchmark.verify_self_agreement_pct = 100
    benchmark.save()
    official = score("two_wrong")
    assert (official.verdict, official.matches) == ("passed", 8)
    assert verifysets.prepare(official.cohort_id) is not None

    runner.score_submission(queued.pk)

    # The same two wrong answers, on the same two images: it agrees with itself on all
    # ten, where against the references (8 of 10) it would miss the 100% asked of it.
    verification = Run.objects.get(submission=queued, purpose=Run.VERIFY)
    assert (verification.verdict, verification.matches, verification.total) == ("passed", 10, 10)
    assert "10 of 10 predictions match its official answers" in verification.verdict_reason
    queued.refresh_from_db()
    assert queued.status == Submission.PASSED, queued.failure_reason


@pytest.mark.docker
def test_a_verification_whose_answers_change_is_rejected(score, queued, images):
    benchmark = queued.benchmark
    benchmark.verify_top = 20
    benchmark.verify_tolerance_pct = 1000
    benchmark.pass_min_matches = 8
    benchmark.save()
    official = score("two_wrong")
    assert verifysets.prepare(official.cohort_id) is not None
    # The same image, but it answers everything right this time: it disagrees with its
    # own official answers on two of ten (80%, under the 98% asked).
    Submission.objects.filter(pk=queued.pk).update(image_tag=images["right"])

    runner.score_submission(queued.pk)

    verification = Run.objects.get(submission=queued, purpose=Run.VERIFY)
    assert (verification.verdict, verification.matches) == ("failed", 8)
    queued.refresh_from_db()
    assert queued.status == Submission.REJECTED_VERIFICATION
    assert "8 of 10 predictions match its official answers" in queued.failure_reason


def mapping(run: Run) -> list[str]:
    return (storage.run_private_dir(run.pk) / storage.RUN_MAPPING).read_text().splitlines()


@pytest.mark.docker
def test_too_few_rows_is_invalid_output(score):
    run = score("short")

    assert run.verdict == "errored" and run.matches is None
    assert not LeaderboardEntry.objects.filter(run=run).exists()


@pytest.mark.docker
def test_wrong_classes_fail(score):
    run = score("wrong")

    assert (run.verdict, run.matches, run.total) == ("failed", 0, 10)


@pytest.mark.docker
def test_a_daemonized_grandchild_stays_on_the_clock(score):
    run = score("daemon")

    assert run.verdict == "passed"
    assert run.wall_time_ns >= 2_000_000_000
    assert "grandchild done" in run_log(run)


@pytest.mark.docker
def test_a_forged_result_line_changes_nothing(score):
    run = score("forger")

    assert run.verdict == "passed"
    assert run.trusted_start_ns >= run.host_start_ns > 0
    assert run.trusted_end_ns - run.trusted_start_ns == run.wall_time_ns > 1
    log_text = run_log(run)
    assert '"start_ns": 0' in log_text  # the forgery ended up in the entrant's own log
    assert "pid1 stdout writable" not in log_text
    assert "input read-only" in log_text and "root read-only" in log_text
    assert f"uid={settings.PODIUM_RUN_UID}" in log_text


@pytest.mark.docker
def test_a_real_runs_evidence_bundle_holds_what_was_staged_and_read(score):
    run = score("right")

    with evidence.run_evidence_open(run) as handle, tarfile.open(fileobj=handle) as bundle:
        files = {
            member.name.split("/", 1)[1]: bundle.extractfile(member).read()
            for member in bundle.getmembers()
        }
    record = json.loads(files["run.json"])
    manifest = files["manifest.tsv"].decode().splitlines()
    mapping = [line.split("\t") for line in files["mapping.tsv"].decode().splitlines()]
    supervisor = json.loads(files["supervisor.json"])
    kept = {"manifest.tsv", "mapping.tsv", "output.bin", "supervisor.json", "run.log"}
    assert kept <= set(files) and not kept & set(record["missing"])
    assert len(manifest) == 10
    assert [f"{request_id}\t{staged}" for _, request_id, staged, _ in mapping] == manifest
    # Every cohort member once, in the run's own shuffled order.
    assert sorted((position for position, *_ in mapping), key=int) == [str(n) for n in range(10)]
    assert hashlib.sha256(files["output.bin"]).hexdigest() == run.output_sha256
    assert record["digests"]["output"] == run.output_sha256
    assert supervisor["wall_ns"] == run.wall_time_ns == record["run"]["wall_time_ns"]
    assert "scored 10 rows" in files["run.log"].decode()


# A scoring host's wake-up: the fair order, drained hosts --------------------------------


def test_a_wake_up_claims_the_fair_next_run_on_this_host(
    queued, alice, bob, benchmark, monkeypatch, sent, settings
):
    FakeEngine().install(monkeypatch)
    # Alice already had a run started today; Bob's first attempt, though queued later,
    # goes first.
    Run.objects.create(
        submission=make_submission(alice, benchmark, status=Submission.FAILED),
        cohort=Cohort.objects.get(benchmark=benchmark, kind=Cohort.OFFICIAL),
        status=Run.FINISHED,
        started_at=timezone.now() - dt.timedelta(hours=1),
    )
    bobs = make_submission(bob, benchmark)

    worker.score_next(benchmark.hardware_class_id)

    run = the_run(bobs)
    assert run.status == Run.FINISHED and run.host == settings.PODIUM_HOST_NAME
    assert not Run.objects.filter(submission=queued).exists()  # alice waits her turn
    worker.score_next(benchmark.hardware_class_id)
    assert the_run(queued).host == settings.PODIUM_HOST_NAME
    worker.score_next(benchmark.hardware_class_id)  # a duplicate wake-up finds nothing
    assert Run.objects.filter(status=Run.FINISHED, purpose=Run.SCORE).count() == 3


def test_a_draining_host_takes_nothing_and_wakes_another(
    queued, benchmark, monkeypatch, sent, settings, django_capture_on_commit_callbacks
):
    from portal.hosts.services import host_drain
    from scoring.host import hosts

    FakeEngine().install(monkeypatch)
    monkeypatch.setattr(hosts, "machine_facts", lambda: {})
    hosts.register()
    host_drain(name=settings.PODIUM_HOST_NAME, actor=None, reason="maintenance")

    with django_capture_on_commit_callbacks(execute=True):
        worker.score_next(benchmark.hardware_class_id)

    queued.refresh_from_db()
    assert queued.status == Submission.QUEUED and not queued.runs.exists()
    assert sent == [(jobs.SCORE_NEXT, (benchmark.hardware_class_id, 0))]
