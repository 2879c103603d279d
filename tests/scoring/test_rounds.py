"""A campaign round on its scoring host: slicing, checking, the passes' order, and one real
round through real containers."""

from __future__ import annotations

import datetime as dt
import hashlib
import struct
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from portal.campaigns import creation as campaign_creation
from portal.campaigns import rounds as campaign_rounds
from portal.campaigns import rules as campaign_rules
from portal.campaigns.models import Crown, Round, RoundEntry
from portal.campaigns.outcomes import (
    BASELINE_CLOSE,
    BASELINE_OPEN,
    ENTRY,
    WARMUP,
    ImageRun,
    RoundOutcome,
    SliceRun,
)
from portal.contests.models import Benchmark
from portal.core import jobs
from portal.submissions.models import Submission
from scoring import engine
from scoring.campaign import rounds
from scoring.cohort import staging
from scoring.cohort.staging import StagedRun
from scoring.images import registry
from scoring.run import runner
from tests.scoring import images as images_module
from tests.scoring.test_runner import b64, supervisor_line
from tests.scoring.test_staging import make_cohort, make_submission

REPO = Path(__file__).resolve().parents[2]


def classes(*values: int) -> bytes:
    return struct.pack(f"<{len(values)}i", *values)


# Checking one slice's output --------------------------------------------------------------


def test_a_well_formed_output_counts_its_matches():
    assert rounds.check_output(classes(7, 8, 9), "", [7, 8, 1]) == (True, 2)
    assert rounds.check_output(classes(0, 0, 0), "", [7, 8, 1]) == (True, 0)


@pytest.mark.parametrize(
    ("output", "error"),
    [
        (classes(7, 8), ""),  # a row short
        (classes(7, 8, 9, 9), ""),  # a row too many
        (classes(7, 1000, 9), ""),  # a class out of range
        (classes(7, -1, 9), ""),
        (None, "missing"),
        (classes(7, 8, 1), "not a regular file"),  # the supervisor refused it
    ],
)
def test_an_output_of_the_wrong_shape_is_not_ok_and_matches_nothing(output, error):
    assert rounds.check_output(output, error, [7, 8, 1]) == (False, 0)


def parsed(**overrides: Any) -> runner.SupervisorResult:
    return runner.parse_supervisor_line(supervisor_line(**overrides))


def test_a_slice_carries_the_trusted_time_and_its_matches():
    result = parsed(output_bytes=12, output_b64=b64(classes(7, 7, 3)))

    run = rounds.slice_run(2, result, [7, 7, 7])

    assert run == SliceRun(
        slice=2,
        wall_ns=4_000,
        exit_code=0,
        signal=None,
        killed=False,
        oom_killed=False,
        output_ok=True,
        matches=2,
        total=3,
    )
    assert not campaign_rules.slice_fatal(run)  # a wrong answer is counted, not fatal


def test_an_output_longer_than_the_slice_is_not_ok():
    # The supervisor carries at most expect_bytes + 1 bytes; the size says the rest.
    result = parsed(output_bytes=400, output_b64=b64(classes(7) + b"\0"))

    run = rounds.slice_run(0, result, [7])

    assert (run.output_ok, run.matches) == (False, 0)


def test_an_oom_kill_inside_the_container_is_seen_by_the_meter():
    events = b64(b"low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    result = parsed(cgroup={"memory.events": events, "cgroup.controllers": b64(b"cpu memory\n")})

    run = rounds.slice_run(0, result, [7, 7])

    assert run.oom_killed is True
    assert campaign_rules.slice_fatal(run)


def test_a_slice_stopped_from_outside_has_no_time():
    run = rounds.stopped_slice(1, 5, oom_killed=True)

    assert (run.wall_ns, run.killed, run.oom_killed, run.output_ok) == (None, True, True, False)
    assert (run.slice, run.total, run.matches) == (1, 5, 0)


@pytest.mark.parametrize(
    ("changes", "fatal"),
    [
        ({}, False),
        ({"matches": 0}, False),
        ({"exit_code": 1}, True),
        ({"exit_code": None, "signal": 9}, True),
        ({"killed": True}, True),
        ({"oom_killed": True}, True),
        ({"wall_ns": None}, True),
        # A malformed output is failed correctness, judged over every slice: not fatal.
        ({"output_ok": False, "matches": 0}, False),
    ],
)
def test_a_slice_is_fatal_when_stopped_crashed_or_malformed(changes, fatal):
    clean = SliceRun(0, 10, 0, None, False, False, True, 5, 5)

    assert campaign_rules.slice_fatal(SliceRun(**{**clean.__dict__, **changes})) is fatal


def test_a_pass_is_clean_only_with_slices_and_no_fault():
    good = SliceRun(0, 10, 0, None, False, False, True, 5, 5)
    crashed = SliceRun(1, 10, 1, None, False, False, False, 0, 5)
    malformed = SliceRun(1, 10, 0, None, False, False, False, 0, 5)

    assert rounds.pass_clean(ImageRun(BASELINE_OPEN, None, "sha256:b", [good, good]))
    assert not rounds.pass_clean(ImageRun(BASELINE_OPEN, None, "sha256:b", [good, crashed]))
    assert not rounds.pass_clean(ImageRun(BASELINE_OPEN, None, "sha256:b", [good, malformed]))
    assert not rounds.pass_clean(ImageRun(BASELINE_OPEN, None, "sha256:b", []))
    assert not rounds.pass_clean(
        ImageRun(BASELINE_OPEN, None, "sha256:b", [good], infra_error="platform error: x")
    )
    assert not rounds.pass_clean(None)


# The environment block ----------------------------------------------------------------------


def test_the_cpu_quota_is_read_from_the_container_spec():
    assert rounds.cpu_quota({}) == {"cpus": None, "cpuset": ""}
    assert rounds.cpu_quota({"nano_cpus": 2_500_000_000}) == {"cpus": 2.5, "cpuset": ""}
    assert rounds.cpu_quota({"cpu_quota": 50_000, "cpu_period": 100_000, "cpuset_cpus": "0-3"}) == {
        "cpus": 0.5,
        "cpuset": "0-3",
    }


def test_the_environment_block_says_what_the_host_is_and_what_a_container_got():
    block = rounds.environment_block(
        host="gpu-7",
        facts={
            "cpu_model": "AMD EPYC 9654",
            "cpu_cores": 192,
            "gpus": [{"index": 0, "name": "NVIDIA H200", "uuid": "GPU-1"}],
            "architecture": "x86_64",
        },
        engine_info={"NCPU": 16, "CgroupDriver": "systemd", "ServerVersion": "27.1.1"},
        spec={"nano_cpus": 8_000_000_000, "mem_limit": 1 << 30, "pids_limit": 64},
        gpu_devices=["0"],
        readings={"cpu_busy": {"ok": True}},
        host_calibration={"median_ns": 1_000_000_000, "ok": True},
        cgroup_version=2,
    )

    assert block["host"] == "gpu-7"
    assert block["cpu_model"] == "AMD EPYC 9654"
    assert block["cores"] == 16  # what the engine's containers see, over the registered count
    assert block["cgroup"] == {
        "version": 2,
        "driver": "systemd",
        "cpus": 8.0,
        "cpuset": "",
        "memory_bytes": 1 << 30,
        "pids": 64,
    }
    assert block["gpus"][0]["name"] == "NVIDIA H200" and block["gpu_devices"] == ["0"]
    assert block["calibration"] == {"median_ns": 1_000_000_000, "ok": True}
    assert block["readings"] == {"cpu_busy": {"ok": True}}


# The passes' order, with a fake slice runner ---------------------------------------------------


def fake_staged(tmp_path: Path, count: int) -> list[StagedRun]:
    return [
        StagedRun(
            run_id=0,
            root=tmp_path / f"slice{index}",
            input_dir=tmp_path / f"slice{index}" / "input",
            manifest=tmp_path / f"slice{index}" / "input" / "manifest.tsv",
            rows=2,
            references=[7, 7],
            request_ids=["a", "b"],
            staged_names=["a.jpg", "b.jpg"],
        )
        for index in range(count)
    ]


class Passes:
    """Stands in for the engine's image lookup and ``rounds.run_slice``: every image's ID is
    ``id:<name>``; records (image ID, slice) and answers as told per image."""

    def __init__(self, answers: dict[str, Any] | None = None) -> None:
        self.calls: list[tuple[str, int]] = []
        self.answers = answers or {}

    def install(self, monkeypatch: pytest.MonkeyPatch) -> Passes:
        monkeypatch.setattr(rounds, "run_slice", self.run_slice)
        monkeypatch.setattr(engine, "image_info", lambda ref: engine.ImageInfo(f"id:{ref}", 1))
        return self

    def run_slice(
        self, slot: Any, image_id: str, index: int, staged: StagedRun, label: str
    ) -> tuple[SliceRun, None]:
        self.calls.append((image_id, index))
        answer = self.answers.get(image_id, "ok")
        if isinstance(answer, Exception):
            raise answer
        crashed = answer == "crash" and index == 1
        return (
            SliceRun(index, 1_000, 1 if crashed else 0, None, False, False, not crashed, 2, 2),
            None,
        )


def a_plan(tmp_path: Path, entries: int = 2) -> tuple[rounds.Plan, rounds.Slot]:
    source = rounds.ImageSource
    plan = rounds.Plan(
        round_id=5,
        benchmark=Benchmark(score_timeout_s=30),
        items=[],
        slices=[(0, 2), (2, 4), (4, 6)],
        baseline=source(tag="base", ref="", digest="id:base"),
        entries=[(10 + n, source(f"e{n}", "", f"id:e{n}")) for n in range(entries)],
    )
    slot = rounds.Slot(
        round_id=5,
        host="h",
        benchmark=plan.benchmark,
        supervisor=tmp_path / "supervise",
        supervisor_sha256="0" * 64,
        gpu_devices=[],
        spare=lambda _id: None,
        evidence_dir=tmp_path / "private",
    )
    return plan, slot


def passes_of(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    answers: dict[str, Any],
    *,
    lost: bool = False,
    plan: rounds.Plan | None = None,
) -> tuple[RoundOutcome, rounds.Seen, Passes]:
    default_plan, slot = a_plan(tmp_path)
    fake = Passes(answers).install(monkeypatch)
    seen = rounds.Seen()
    outcome = rounds.run_passes(
        plan or default_plan,
        slot,
        fake_staged(tmp_path, 3),
        RoundOutcome(5, "h", "d", None, None),
        seen,
        lambda: lost,
    )
    return outcome, seen, fake


@pytest.fixture
def no_registry(settings):
    settings.PODIUM_REGISTRY = ""


@pytest.mark.usefixtures("no_registry")
def test_a_round_runs_warmup_opening_entries_in_order_then_closing(tmp_path, monkeypatch):
    outcome, seen, fake = passes_of(tmp_path, monkeypatch, {})

    images = [image for image, _slice in fake.calls]
    assert images == ["id:base"] * 3 * 2 + ["id:e0"] * 3 + ["id:e1"] * 3 + ["id:base"] * 3
    assert [index for _image, index in fake.calls] == [0, 1, 2] * 5
    assert seen.warmup is not None and seen.warmup.role == WARMUP
    assert outcome.baseline_open is not None and outcome.baseline_open.role == BASELINE_OPEN
    assert outcome.baseline_close is not None and outcome.baseline_close.role == BASELINE_CLOSE
    assert [(run.role, run.entry_id, run.image_digest) for run in outcome.entries] == [
        (ENTRY, 10, "id:e0"),
        (ENTRY, 11, "id:e1"),
    ]
    assert all(len(run.slices) == 3 for run in outcome.entries)


@pytest.mark.usefixtures("no_registry")
def test_the_digest_reported_is_the_image_that_ran(tmp_path, monkeypatch):
    # The entry's tag now names another image than the one recorded for it.
    plan, _slot = a_plan(tmp_path, entries=1)
    plan = replace(plan, entries=[(10, rounds.ImageSource("moved", "", "id:e0"))])

    outcome, _seen, _fake = passes_of(tmp_path, monkeypatch, {}, plan=plan)

    assert outcome.entries[0].image_digest == "id:moved"  # the domain refuses it


@pytest.mark.usefixtures("no_registry")
def test_an_entry_stops_at_its_first_fatal_slice_and_the_round_goes_on(tmp_path, monkeypatch):
    outcome, _seen, fake = passes_of(tmp_path, monkeypatch, {"id:e0": "crash"})

    crashed = outcome.entries[0]
    assert [one.slice for one in crashed.slices] == [0, 1]  # slice 2 never ran
    assert crashed.slices[-1].exit_code == 1
    assert ("id:e0", 2) not in fake.calls
    assert len(outcome.entries[1].slices) == 3 and outcome.baseline_close is not None


class Repeated(Passes):
    """Each call of a slice gets the next wall time of its image from ``walls``; an entry
    told "crash" crashes on its first try of slice 1."""

    def __init__(self, walls: dict[str, list[int]], answers: dict[str, Any] | None = None):
        super().__init__(answers)
        self.walls = walls
        self.labels: list[str] = []

    def run_slice(
        self, slot: Any, image_id: str, index: int, staged: StagedRun, label: str
    ) -> tuple[SliceRun, None]:
        self.calls.append((image_id, index))
        self.labels.append(label)
        crashed = self.answers.get(image_id) == "crash" and index == 1
        wall = self.walls[image_id].pop(0) if self.walls.get(image_id) else 1_000
        return SliceRun(index, wall, 1 if crashed else 0, None, False, False, True, 2, 2), None


@pytest.mark.usefixtures("no_registry")
def test_with_repeats_every_slice_runs_that_often_and_its_fastest_try_stands(tmp_path, monkeypatch):
    plan, slot = a_plan(tmp_path, entries=2)
    plan = replace(plan, repeats=3)
    fake = Repeated(
        {"id:e0": [900, 700, 800, 500, 600, 550, 1_000, 1_000, 400]}, {"id:e1": "crash"}
    )
    fake.install(monkeypatch)
    outcome = rounds.run_passes(
        plan,
        slot,
        fake_staged(tmp_path, 3),
        RoundOutcome(5, "h", "d", None, None),
        rounds.Seen(),
        lambda: False,
    )

    fast = outcome.entries[0]
    assert [one.wall_ns for one in fast.slices] == [700, 500, 400]
    assert [call for call in fake.calls if call[0] == "id:e0"] == [
        ("id:e0", index) for index in (0, 0, 0, 1, 1, 1, 2, 2, 2)
    ]
    assert {label for label in fake.labels if label.startswith("entry10")} == {
        "entry10.try0",
        "entry10.try1",
        "entry10.try2",
    }
    # A crash is never noise: its try stands, and neither a repeat nor a later slice runs.
    crashed = outcome.entries[1]
    assert [(one.slice, one.exit_code) for one in crashed.slices] == [(0, 0), (1, 1)]
    assert [call for call in fake.calls if call[0] == "id:e1"] == [("id:e1", 0)] * 3 + [
        ("id:e1", 1)
    ]
    assert outcome.baseline_close is not None and len(outcome.baseline_close.slices) == 3


@pytest.mark.usefixtures("no_registry")
def test_an_engine_fault_on_an_entry_is_that_entrys_infra_error(tmp_path, monkeypatch):
    outcome, _seen, _fake = passes_of(
        tmp_path, monkeypatch, {"id:e1": engine.EngineError("no space left on device")}
    )

    assert outcome.entries[1].infra_error == "platform error: the container engine failed"
    assert outcome.entries[1].slices == []
    assert not outcome.entries[0].infra_error and outcome.baseline_close is not None


@pytest.mark.usefixtures("no_registry")
def test_a_baseline_that_fails_its_warmup_ends_the_round_before_any_entry(tmp_path, monkeypatch):
    outcome, seen, fake = passes_of(tmp_path, monkeypatch, {"id:base": "crash"})

    assert {image for image, _slice in fake.calls} == {"id:base"}
    assert seen.warmup is not None and len(seen.warmup.slices) == 2
    assert outcome.baseline_open is not None and "warm-up" in outcome.baseline_open.infra_error
    assert outcome.entries == [] and outcome.baseline_close is None


@pytest.mark.usefixtures("no_registry")
def test_a_lost_machine_lock_voids_the_round_at_once(tmp_path, monkeypatch):
    outcome, _seen, fake = passes_of(tmp_path, monkeypatch, {}, lost=True)

    assert outcome.void_reason == rounds.LOCK_LOST
    assert fake.calls == [("id:base", 0)]  # nothing more ran once the lock was gone


def test_with_a_registry_images_are_pulled_by_digest_and_a_refused_one_never_runs(
    tmp_path, monkeypatch, settings
):
    settings.PODIUM_REGISTRY = "registry.test:5000"
    pulled: list[str] = []
    discarded: list[str] = []

    def pull_verified(ref: str, image_id: str) -> None:
        pulled.append(ref)
        if image_id != "id:base":
            raise registry.ImageRefused("the submission image from the registry is not the one")

    monkeypatch.setattr(registry, "pull_verified", pull_verified)
    monkeypatch.setattr(registry, "discard", discarded.append)
    base_ref = "registry.test:5000/podium/base@sha256:" + "1" * 64
    entry_ref = "registry.test:5000/podium-entrant/sub-3@sha256:" + "2" * 64
    plan, _slot = a_plan(tmp_path, entries=1)
    plan = replace(
        plan,
        baseline=rounds.ImageSource("base", base_ref, "id:base"),
        entries=[(10, rounds.ImageSource("e0", entry_ref, "id:e0"))],
    )

    outcome, _seen, fake = passes_of(tmp_path, monkeypatch, {}, plan=plan)

    assert pulled == [base_ref, entry_ref]
    assert outcome.entries[0].infra_error.startswith("platform error: the submission image")
    assert outcome.entries[0].image_digest == "id:e0" and outcome.entries[0].slices == []
    assert {image for image, _slice in fake.calls} == {f"id:{base_ref}"}  # by its image ID
    assert discarded == [base_ref]  # the pulled baseline leaves this engine afterwards


# Staging the round's slices ------------------------------------------------------------------


def staged_plan(benchmark: Benchmark, positions: list[int]) -> rounds.Plan:
    cohort = make_cohort(benchmark, list(range(10)))  # position p holds class 9 - p
    items = {item.position: item for item in cohort.items.all()}
    source = rounds.ImageSource("b", "", "id:b")
    return rounds.Plan(
        round_id=3,
        benchmark=benchmark,
        items=[items[position] for position in positions],
        slices=campaign_rules.slice_bounds(len(positions), 3),
        baseline=source,
        entries=[],
    )


def test_each_slice_is_its_own_input_folder_in_the_rounds_order(benchmark, tmp_path):
    plan = staged_plan(benchmark, [8, 2, 5, 0, 9, 4, 7])

    staged = rounds.stage_slices(plan, tmp_path / "round")

    assert [one.positions for one in staged] == [[8, 2, 5], [0, 9], [4, 7]]
    assert [one.references for one in staged] == [[1, 7, 4], [9, 0], [5, 2]]
    for one in staged:
        lines = one.manifest.read_text().splitlines()
        pairs = zip(one.request_ids, one.staged_names, strict=True)
        assert [line.split("\t") for line in lines] == [list(pair) for pair in pairs]
        # A slice's folder holds its own images and nothing else.
        assert sorted(path.name for path in one.images_dir.iterdir()) == sorted(one.staged_names)
    names = [name for one in staged for name in one.staged_names]
    assert len(set(names)) == 7 and not any("val_" in name for name in names)
    mapping = (tmp_path / "round" / "private" / "mapping.tsv").read_text().splitlines()
    assert [int(line.split("\t")[1]) for line in mapping] == [8, 2, 5, 0, 9, 4, 7]


def test_the_staged_requests_are_written_back_before_any_pass(benchmark, tmp_path, monkeypatch):
    # Left to the kernel, thousands of staged files are written back some 30 s later:
    # during the opening baseline's pass, which then drifts from the closing one.
    on_disk_at_sync: list[set[str]] = []

    def sync() -> None:
        found = (tmp_path / "round").rglob("*")
        on_disk_at_sync.append({path.name for path in found if path.is_file()})

    monkeypatch.setattr(rounds.os, "sync", sync)
    plan = staged_plan(benchmark, [8, 2, 5, 0, 9, 4, 7])

    staged = rounds.stage_slices(plan, tmp_path / "round")

    assert len(on_disk_at_sync) == 1
    names = {name for one in staged for name in one.staged_names}
    assert names | {"mapping.tsv"} <= on_disk_at_sync[0]


def test_a_tampered_request_stages_nothing(benchmark, tmp_path):
    from portal.core import storage

    plan = staged_plan(benchmark, [1, 2, 3, 4])
    member = plan.items[3]
    (storage.cohort_dir(member.cohort_id) / member.canonical_name).write_bytes(b"changed")

    with pytest.raises(staging.StagingError, match="frozen sha256"):
        rounds.stage_slices(plan, tmp_path / "round")

    assert not list((tmp_path / "round").glob("slice*/input"))


# Rounds in the database: capacity, the task -----------------------------------------------


def make_round(
    benchmark: Benchmark, images: dict[str, str], entrants: list[Any]
) -> tuple[Round, dict[str, Submission]]:
    """A campaign on ``benchmark`` (20-image pool, 4 slices) whose baseline is
    ``images["baseline"]``, one queued submission per other image (in that order), and its
    round, created pending by the domain."""
    benchmark.kind = Benchmark.CAMPAIGN
    benchmark.score_timeout_s = 30
    benchmark.run_memory_bytes = 256 << 20
    benchmark.run_pids_limit = 64
    benchmark.run_tmpfs_bytes = 16 << 20
    benchmark.run_output_tmpfs_bytes = 1 << 20
    benchmark.save()
    make_cohort(benchmark, [7] * POOL)
    # The ceilings are the rules' (tests/campaigns); a busy shared test machine is no
    # quiet scoring host, so they are wide here: this is about the host's side.
    campaign = campaign_creation.campaign_create(
        benchmark=benchmark,
        round_size=POOL,
        slice_count=SLICES,
        reproducibility_ceiling=5.0,
        drift_ceiling=1.0,
    )
    campaign_creation.campaign_baseline_record(
        campaign=campaign, image_tag=images["baseline"], image_digest=image_id(images["baseline"])
    )
    submissions: dict[str, Submission] = {}
    start = timezone.now() - dt.timedelta(hours=1)
    for index, name in enumerate(name for name in images if name != "baseline"):
        submission = make_submission(
            entrants[index % len(entrants)],
            benchmark,
            image_tag=images[name],
            status=Submission.BENCH_QUEUED,
        )
        Submission.objects.filter(pk=submission.pk).update(
            image_digest=image_id(images[name]), queued_at=start + dt.timedelta(minutes=index)
        )
        submissions[name] = submission
    round_ = campaign_rounds.round_maybe_start(campaign, force=True)
    assert round_ is not None
    return round_, submissions


def image_id(tag: str) -> str:
    try:
        return engine.image_info(tag).id
    except engine.EngineError:
        return "sha256:" + hashlib.sha256(tag.encode()).hexdigest()  # no engine: a stand-in


def test_a_round_whose_host_is_busy_waits_for_capacity_and_claims_nothing(
    alice, benchmark, settings, monkeypatch, sent, django_capture_on_commit_callbacks
):
    from portal.hosts.leases import machine_lease_acquire
    from scoring.host import hosts

    monkeypatch.setattr(hosts, "machine_facts", lambda: {})
    round_, _submissions = make_round(benchmark, {"baseline": "b:1", "fast": "f:1"}, [alice])
    sent.clear()
    settings.PODIUM_LOCK_WAIT_S = 0
    from scoring.host import machine

    # Another holder has this engine's machine lock (keyed by the engine, not the host).
    assert machine_lease_acquire(host=machine.machine_key(), holder="another", lease_s=60)

    with django_capture_on_commit_callbacks(execute=True):
        rounds.run_round(round_.pk)

    round_.refresh_from_db()
    assert round_.status == Round.PENDING and round_.tries == 1 and round_.host == ""
    assert round_.next_try_at is not None and round_.started_at is None
    assert sent == [(jobs.RUN_ROUND, (round_.pk,))]  # sent again, after its backoff
    assert not RoundEntry.objects.filter(round=round_).exclude(verdict=RoundEntry.NONE).exists()


def test_a_round_claimed_elsewhere_is_left_alone(alice, benchmark, monkeypatch, sent):
    from scoring.host import hosts

    monkeypatch.setattr(hosts, "machine_facts", lambda: {})
    round_, _submissions = make_round(benchmark, {"baseline": "b:1", "fast": "f:1"}, [alice])
    assert campaign_rounds.round_claim(round_.pk, "another-host") is not None
    ran: list[Any] = []
    monkeypatch.setattr(rounds, "run_claimed", lambda *args: ran.append(args))

    rounds.run_round(round_.pk)  # a redelivered message

    round_.refresh_from_db()
    assert (round_.status, round_.host) == (Round.RUNNING, "another-host")
    assert ran == []


def test_the_celery_task_runs_the_round(monkeypatch):
    from scoring import tasks

    called: list[int] = []
    monkeypatch.setattr(rounds, "run_round", called.append)

    tasks.run_round(41)

    assert tasks.run_round.name == jobs.RUN_ROUND
    assert called == [41]


# A real round in Docker ------------------------------------------------------------------------

POOL = 20
SLICES = 4


def answering(class_byte: str, seconds: float) -> str:
    """An entrypoint that answers one class for every request after ``seconds`` of sleep."""
    return (
        "#!/bin/sh\n"
        f"sleep {seconds}\n"
        "while read -r request_id path; do\n"
        '  [ -r "$2/$path" ] || { echo "cannot read $path" >&2; exit 3; }\n'
        f"  printf '\\{class_byte}\\000\\000\\000'\n"
        'done < "$1" > "$3"\n'
    )


ROUND_SCRIPTS = {
    "baseline": answering("007", 0.5),
    "fast": answering("007", 0.1),  # five times the baseline's speed: takes the crown
    "slow": answering("007", 0.9),  # correct but slower: passes with a negative score
    "crash": "#!/bin/sh\necho 'cannot load the model' >&2\nexit 1\n",  # before any output
    "wrong": answering("010", 0.1),  # fast, well formed, every class wrong
}


@pytest.fixture(scope="module")
def round_supervisor() -> Path:
    return images_module.supervisor()


@pytest.fixture(scope="module")
def round_images() -> Iterator[dict[str, str]]:
    """One image per script: localhost/podium/busybox:1 plus /submission/run."""
    with images_module.script_images("rounds", ROUND_SCRIPTS) as built:
        yield built


@pytest.mark.docker
# Committed rows: the machine lock's and the round's heartbeats beat from their own
# threads and database connections, as on a scoring host.
@pytest.mark.django_db(transaction=True)
def test_a_real_round_judges_times_and_crowns_through_real_containers(
    alice, bob, benchmark, round_supervisor, round_images, settings, sent
):
    from portal.hosts.models import HostCalibration
    from scoring.host import hosts

    settings.PODIUM_SUPERVISOR = round_supervisor
    settings.PODIUM_REGISTRY = ""
    settings.PODIUM_CALIBRATION = False  # calibrations are tests/scoring/test_calibration.py's
    host = hosts.register()
    now = timezone.now()
    HostCalibration.objects.create(
        host=host,
        hardware_class=host.hardware_class_id,
        trigger=HostCalibration.MANUAL,
        started_at=now,
        finished_at=now,
        wall_ns=[1_000_000_000] * 3,
        median_ns=1_000_000_000,
        noise_pct=0.1,
        ok=True,
    )
    round_, submissions = make_round(benchmark, round_images, [alice, bob])

    rounds.run_round(round_.pk)

    round_.refresh_from_db()
    assert round_.status == Round.SCORED, round_.void_reason
    entries = {
        name: RoundEntry.objects.get(round=round_, submission=submission)
        for name, submission in submissions.items()
    }
    verdicts = {name: entry.verdict for name, entry in entries.items()}
    assert verdicts == {
        "fast": RoundEntry.PASSED,
        "slow": RoundEntry.PASSED,
        "crash": RoundEntry.DISQUALIFIED,
        "wrong": RoundEntry.FAILED_CORRECTNESS,
    }
    assert entries["fast"].score is not None and entries["fast"].score > 0
    assert entries["slow"].score is not None and entries["slow"].score < 0
    assert entries["crash"].score is None and "before producing output" in entries["crash"].reason
    assert entries["wrong"].agreement == 0.0
    crown = Crown.objects.get(campaign=round_.campaign)
    assert (crown.submission_id, crown.round_id) == (submissions["fast"].pk, round_.pk)
    for name, submission in submissions.items():
        submission.refresh_from_db()
        expected = {"crash": Submission.ERRORED, "wrong": Submission.FAILED}
        assert submission.status == expected.get(name, Submission.PASSED), name

    # Per-slice times: every slice of every image that ran them all, timed by the supervisor.
    outcome = round_.evidence["outcome"]
    assert outcome["host"] == settings.PODIUM_HOST_NAME
    assert outcome["request_digest"] == round_.request_digest
    timed = [outcome["baseline_open"], outcome["baseline_close"], *outcome["entries"]]
    timed = [
        run for run in timed if run["role"] != "entry" or run["entry_id"] != entries["crash"].pk
    ]
    for run in timed:
        assert [one["slice"] for one in run["slices"]] == list(range(SLICES))
        assert all(one["wall_ns"] and one["wall_ns"] > 0 for one in run["slices"]), run
        assert sum(one["total"] for one in run["slices"]) == POOL
    crashed = next(run for run in outcome["entries"] if run["entry_id"] == entries["crash"].pk)
    assert len(crashed["slices"]) == 1 and crashed["slices"][0]["exit_code"] == 1
    assert all(one["wall_ns"] >= 500_000_000 for one in outcome["baseline_open"]["slices"])
    rows = entries["fast"].slices
    assert len(rows) == SLICES and all(row["speedup"] > 0 for row in rows)
    assert all(row["baseline_s"] > row["candidate_s"] > 0 for row in rows)

    # The environment block: the host, its CPU and quota, and its latest calibration.
    environment = round_.evidence["environment"]
    assert environment["host"] == settings.PODIUM_HOST_NAME
    assert environment["cores"] > 0 and environment["cpu_model"] == host.cpu_model
    assert environment["cgroup"]["version"] in (1, 2)
    assert environment["cgroup"]["cpus"] is None  # no CPU quota on a scored container
    assert environment["cgroup"]["memory_bytes"] == 256 << 20
    assert environment["calibration"]["median_ns"] == 1_000_000_000
    assert len(environment["warmup"]["slices"]) == SLICES  # thrown away, kept as evidence
    assert round_.evidence_digest

    # Nothing left behind: no container of the round, no staged input; the evidence stays.
    assert not engine.list_containers(label=f"{rounds.ROUND_LABEL}={round_.pk}")
    folder = rounds.round_dir(round_.pk)
    assert not any(folder.glob("slice*/input"))
    # A supervisor line per slice run: three baseline passes and three entries of four
    # slices, and the crashed entry's one; and the mapping of the staged names.
    assert len(list((folder / "private").glob("*.json"))) == (3 + 3) * SLICES + 1
    mapping = (folder / "private" / "mapping.tsv").read_text().splitlines()
    assert [int(line.split("\t")[1]) for line in mapping] == round_.request_positions
    # The round is recorded once: a redelivered message does nothing.
    rounds.run_round(round_.pk)
    round_.refresh_from_db()
    assert round_.status == Round.SCORED
