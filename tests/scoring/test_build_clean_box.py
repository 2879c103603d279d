"""A build's box holds whatever the entrant tries: a disk cap that an unmeasurable size
cannot switch off, and no GPU for any container a build makes."""

from __future__ import annotations

import io
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from portal.core import storage
from portal.environments.models import Environment
from scoring import engine
from scoring.build import buildbox, builds
from tests.scoring.test_builds import new_environment

BASE = "localhost/podium/busybox:1"
MIB = 1 << 20
OURS = "/podium-build/env-1"


# The walk ---------------------------------------------------------------------------------


def _deep_tree(top: Path, depth: int) -> int:
    """Nest ``depth`` one-letter directories under ``top`` (a path of ``2 * depth``
    characters) with a 1 MiB file at the bottom; a descriptor on the deepest directory."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    data = os.open("payload", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
    os.write(data, os.urandom(MIB))
    os.close(data)
    return fd


def _du(top: Path) -> int:
    """What ``du`` (GNU, which walks with openat too) counts: blocks, hard links once."""
    out = subprocess.run(["du", "-s", "-B1", str(top)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


def test_the_walk_measures_a_path_of_5_kb_counting_links_once_and_following_none(
    tmp_path: Path,
) -> None:
    top = tmp_path / "upper"
    top.mkdir()
    # "d/" * 2600: a 5,200-character path, deeper than Python's recursion limit and the
    # usual 1,024 open files.
    deepest = _deep_tree(top, 2600)
    try:
        outside = tmp_path / "outside"
        outside.write_bytes(os.urandom(8 * MIB))

        before = buildbox.layer_bytes(str(top))
        assert before == _du(top)
        assert before >= MIB

        os.link("payload", "twin", src_dir_fd=deepest, dst_dir_fd=deepest)
        os.link("payload", str(top / "twin-at-top"), src_dir_fd=deepest)
        os.symlink(str(outside), str(top / "to-outside"))
        os.symlink(str(outside.parent), str(top / "to-outside-dir"))

        after = buildbox.layer_bytes(str(top))
        assert after == _du(top)
        assert after - before < 64 << 10  # neither the links' file again nor the 8 MiB
    finally:
        os.close(deepest)
        subprocess.run(["rm", "-rf", str(top)], check=True)  # deeper than shutil.rmtree goes


def test_the_walk_fails_on_what_it_cannot_open(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        buildbox.layer_bytes(str(tmp_path / "missing"))
    assert buildbox.writable_layer_bytes({"GraphDriver": {"Data": {}}}) is None
    assert (
        buildbox.writable_layer_bytes({"GraphDriver": {"Data": {"UpperDir": str(tmp_path / "x")}}})
        is None
    )


# The guard, on a fake engine ---------------------------------------------------------------


class FakeEngine:
    """Containers on the build network: listing with ``SizeRw`` and ``docker inspect``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.listed: list[dict[str, Any]] = []
        self.details: dict[str, dict[str, Any]] = {}
        self.killed: list[str] = []
        monkeypatch.setattr(engine, "containers_on_network", self.containers_on_network)
        monkeypatch.setattr(engine, "inspect_container", lambda cid: self.details[cid])
        monkeypatch.setattr(engine, "kill", self.killed.append)

    def containers_on_network(self, network: str, *, sizes: bool = False) -> list[dict[str, Any]]:
        return self.listed

    def add(
        self,
        container_id: str,
        *,
        size: int | None,
        upper: Path | None = None,
        parent: str = OURS,
        runtime: str = "runc",
        env: tuple[str, ...] = (),
        running: bool = True,
    ) -> None:
        self.listed.append({"Id": container_id, **({} if size is None else {"SizeRw": size})})
        self.details[container_id] = {
            "State": {"Running": running},
            "HostConfig": {"CgroupParent": parent, "Runtime": runtime},
            "Config": {"Env": list(env)},
            "GraphDriver": {"Data": {"UpperDir": str(upper)} if upper else {}},
        }


def box(cap: int) -> buildbox.Box:
    guard = buildbox.Guard("podium-build", OURS, cap)
    bounds = engine.BuildBounds(
        network="podium-build", cgroup_parent=OURS, memory_bytes=MIB, pids_limit=64, cpus=1.0
    )
    return buildbox.Box(
        bounds=bounds, disk_cap_bytes=cap, cgroup=buildbox.Cgroup("env-1", 64), guard=guard
    )


@pytest.mark.parametrize("size", [-1, None])
def test_an_unknown_size_with_no_upper_dir_is_stopped_as_over_the_cap(
    monkeypatch: pytest.MonkeyPatch, size: int | None
) -> None:
    fake = FakeEngine(monkeypatch)
    fake.add("aaa", size=size)
    sandbox = box(32 * MIB)

    sandbox.guard._enforce_disk_cap()

    assert fake.killed == ["aaa"]
    assert sandbox.explain(exit_code=137) == (
        "A build step was stopped: how much it wrote to disk could not be measured, "
        f"so it counts as over the cap of {32 * MIB:,} bytes."
    )


def test_a_step_that_ended_between_the_listing_and_the_walk_is_not_stopped(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A step that exits (its memory bound, or simply done) takes its layer with it: the
    walk then finds no folder, and that is no reason to blame the disk cap."""
    fake = FakeEngine(monkeypatch)
    fake.add("ended", size=-1, upper=tmp_path / "gone", running=False)
    sandbox = box(2 * MIB)

    sandbox.guard._enforce_disk_cap()

    assert fake.killed == []
    assert sandbox.explain(exit_code=137) == (
        f"A build step was killed, most likely for using more than its {MIB:,} bytes of memory."
    )


def test_an_unknown_size_is_measured_in_the_upper_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    small, large = tmp_path / "small", tmp_path / "large"
    small.mkdir()
    large.mkdir()
    (small / "f").write_bytes(os.urandom(MIB // 2))
    (large / "f").write_bytes(os.urandom(3 * MIB))
    fake = FakeEngine(monkeypatch)
    fake.add("under", size=-1, upper=small)
    fake.add("over", size=-1, upper=large)
    fake.add("theirs", size=-1, parent="/podium-build/env-2")  # another build's: not ours
    sandbox = box(2 * MIB)

    sandbox.guard._enforce_disk_cap()

    assert fake.killed == ["over"]
    assert sandbox.explain(exit_code=137) == (
        f"A build step wrote more than {2 * MIB:,} bytes to disk, the cap, and was stopped."
    )


def test_a_known_size_under_the_cap_is_not_walked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = FakeEngine(monkeypatch)
    fake.add("aaa", size=MIB, upper=tmp_path / "nowhere")  # a walk there would fail closed
    sandbox = box(2 * MIB)

    sandbox.guard._enforce_disk_cap()

    assert fake.killed == []
    assert sandbox.explain(exit_code=1) == ""


# The kernel's quota, where the storage driver keeps one ------------------------------------


class QuotaEngine:
    """An engine whose storage driver keeps a size quota per container, or refuses it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, keeps_quota: bool) -> None:
        self.keeps_quota = keeps_quota
        self.created: list[dict[str, Any]] = []
        self.upper: Path | None = None
        monkeypatch.setattr(buildbox, "_NO_SIZE_QUOTA", set())
        monkeypatch.setattr(engine, "info", lambda: {"ID": "engine-1"})
        monkeypatch.setattr(engine, "create_container", self.create_container)
        monkeypatch.setattr(
            engine,
            "inspect_container",
            lambda cid: {"GraphDriver": {"Data": {"UpperDir": str(self.upper)}}},
        )

    def create_container(self, **spec: Any) -> str:
        if "storage_opt" in spec and not self.keeps_quota:
            # What overlay2 off XFS-with-pquota answers.
            raise engine.EngineError(
                '500 Server Error: Internal Server Error ("--storage-opt is supported only '
                "for overlay over xfs with 'pquota' mount option\")"
            )
        self.created.append(spec)
        return f"c{len(self.created)}"


def test_build_sh_gets_the_kernels_size_quota_where_the_driver_keeps_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = QuotaEngine(monkeypatch, keeps_quota=True)
    sandbox = box(32 * MIB)

    container_id = sandbox.create_container(image=BASE, command=["true"])

    assert fake.created[0]["storage_opt"] == {"size": str(32 * MIB)}
    assert fake.created[0]["runtime"] == "runc"  # the bounds come along
    assert sandbox.kernel_quota
    assert "the kernel's quota" in sandbox.cap_note()
    # build.sh failed on a full layer: the entrant is told it was the cap.
    fake.upper = tmp_path
    (tmp_path / "blob").write_bytes(os.urandom(32 * MIB - 4096))
    assert sandbox.explain(exit_code=1, container_id=container_id) == (
        f"The build filled its disk cap of {32 * MIB:,} bytes: writes past it were refused "
        "(No space left on device)."
    )
    (tmp_path / "blob").write_bytes(os.urandom(MIB))
    assert sandbox.explain(exit_code=1, container_id=container_id) == ""  # its own failure


def test_where_the_driver_refuses_a_quota_the_guard_alone_holds_the_cap_and_it_is_asked_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = QuotaEngine(monkeypatch, keeps_quota=False)
    sandbox = box(32 * MIB)

    sandbox.create_container(image=BASE, command=["true"])
    sandbox.create_container(image=BASE, command=["true"])

    assert [("storage_opt" in spec) for spec in fake.created] == [False, False]
    assert not sandbox.kernel_quota
    assert "keeps no quota" in sandbox.cap_note()
    assert sandbox.explain(exit_code=1, container_id="c1") == ""


def test_any_other_create_failure_is_not_taken_for_a_missing_quota(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    QuotaEngine(monkeypatch, keeps_quota=True)

    def broken(**spec: Any) -> str:
        raise engine.EngineError("500 Server Error: no such image")

    monkeypatch.setattr(engine, "create_container", broken)
    with pytest.raises(engine.EngineError, match="no such image"):
        box(MIB).create_container(image=BASE, command=["true"])
    assert not buildbox._NO_SIZE_QUOTA


@pytest.mark.docker
def test_this_engines_answer_to_a_size_quota_is_understood() -> None:
    """The real engine either keeps the quota or refuses it in words Podium recognises."""
    try:
        container_id = engine.create_container(
            image=BASE, command=["true"], storage_opt={"size": str(32 * MIB)}
        )
    except engine.EngineError as exc:
        assert engine.refuses_size_quota(exc), str(exc)
    else:
        engine.remove_container(container_id)


# No GPU ------------------------------------------------------------------------------------


def test_build_containers_get_the_plain_runtime_and_no_visible_gpu() -> None:
    spec = box(MIB).bounds.host_config()

    assert spec["runtime"] == "runc"
    assert spec["environment"] == {"NVIDIA_VISIBLE_DEVICES": "void"}
    assert "device_requests" not in spec


@pytest.mark.parametrize(
    ("runtime", "env", "stopped"),
    [
        ("nvidia", ("NVIDIA_VISIBLE_DEVICES=all",), True),
        ("nvidia", ("NVIDIA_VISIBLE_DEVICES=0,1",), True),
        ("nvidia", ("CUDA_VERSION=12.4.1",), True),  # legacy CUDA image: the hook means all
        ("nvidia", ("NVIDIA_VISIBLE_DEVICES=void", "CUDA_VERSION=12.4.1"), False),
        ("nvidia", (), False),
        ("runc", ("NVIDIA_VISIBLE_DEVICES=all", "CUDA_VERSION=12.4.1"), False),
    ],
)
def test_a_run_step_that_a_gpu_runtime_would_hand_gpus_is_stopped(
    monkeypatch: pytest.MonkeyPatch, runtime: str, env: tuple[str, ...], stopped: bool
) -> None:
    fake = FakeEngine(monkeypatch)
    fake.add("step", size=0, runtime=runtime, env=env)
    sandbox = box(MIB)

    sandbox.guard._enforce_disk_cap()

    assert fake.killed == (["step"] if stopped else [])
    assert ("the host's GPUs" in sandbox.explain(exit_code=137)) is stopped


@pytest.mark.docker
def test_build_sh_container_hides_gpus_even_from_an_image_that_asks_for_all() -> None:
    image, _ = engine.client().images.build(
        fileobj=io.BytesIO(f"FROM {BASE}\nENV NVIDIA_VISIBLE_DEVICES=all\n".encode()),
        labels={engine.LABEL: "1"},
        rm=True,
    )
    bounds = engine.BuildBounds(
        network="none", cgroup_parent="", memory_bytes=64 * MIB, pids_limit=64, cpus=1.0
    )
    container_id = engine.create_container(image=image.id, command=["true"], **bounds.host_config())
    try:
        details = engine.inspect_container(container_id)
        assert details["HostConfig"]["Runtime"] == "runc"
        assert "NVIDIA_VISIBLE_DEVICES=void" in details["Config"]["Env"]
        assert "NVIDIA_VISIBLE_DEVICES=all" not in details["Config"]["Env"]
    finally:
        engine.remove_container(container_id)
        engine.remove_image(image.id)


# The real engine: a writer past the path length the engine can size ------------------------


@pytest.mark.docker
def test_a_deep_path_writer_is_stopped_within_5_percent_of_the_cap(
    alice: Any, benchmark: Any, sent: Any, made: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    cap = 32 * MIB
    benchmark.max_image_bytes = cap
    benchmark.save(update_fields=["max_image_bytes"])
    walked: list[int] = []
    measure = buildbox.layer_bytes

    def counted(top: str) -> int:
        walked.append(size := measure(top))
        return size

    monkeypatch.setattr(buildbox, "layer_bytes", counted)
    name = "d" * 100
    # 40 directories of 101 characters: a 4,040-character path (one more and the storage
    # driver refuses the name). 31 MiB at once, then 128 KiB every quarter second
    # (0.5 MiB/s), each total printed once it is on disk.
    writer = (
        "RUN set -e; "
        f"for i in $(seq 40); do mkdir {name}; cd {name}; done; "
        "dd if=/dev/urandom of=base bs=1M count=31 2>/dev/null; sync; n=0; "
        "while :; do dd if=/dev/urandom of=f$n bs=128k count=1 2>/dev/null; sync; "
        "n=$((n+1)); echo WROTE $((31 * 1024 + n * 128)) KiB; sleep 0.25; done"
    )
    environment = new_environment(alice, benchmark, f"FROM {BASE}\n{writer}\n")

    builds.build_environment(environment.pk)

    environment.refresh_from_db()
    log = (storage.environment_dir(environment.pk) / "build.log").read_text()
    assert environment.status == Environment.FAILED
    assert f"more than {cap:,} bytes to disk" in environment.failure_reason
    written = int(re.findall(r"WROTE (\d+) KiB", log)[-1]) << 10
    assert 0.95 * cap <= written <= 1.05 * cap
    assert walked  # the engine could not size it: the guard's own walk did
