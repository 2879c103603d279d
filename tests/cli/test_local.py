"""``podium validate`` and ``podium run --local`` against the live server, Docker faked.

The run's Docker side is a fake that plays the engine: it answers ``docker create`` with
an id, keeps what it was given, and for the scored container plays the supervisor,
reading the staged images (whose bytes name their class here) and writing one result
line. So these tests see what the client sends to Docker and what it prints of the line;
the real engine's run is tests/cli/test_local_docker.py.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from django.conf import settings

from podium_cli import config, local
from portal.contests import sandbox
from portal.contests.models import Cohort, CohortItem
from portal.core import storage
from portal.environments.models import Environment
from tests import factories
from tests.cli.conftest import Podium

GOOD = "FROM localhost/podium/python:bookworm\nRUN true\n"
BAD = "FROM localhost/podium/python:bookworm\nRUN true\nFROM docker.io/library/python:3.11\n"
CLASSES = [3, 1, 4, 1, 5]


def entry(tmp_path: Path, dockerfile: str = GOOD, run_mode: int = 0o755) -> Path:
    folder = tmp_path / "entry"
    folder.mkdir()
    (folder / "Dockerfile").write_text(dockerfile)
    (folder / "run").write_text("#!/bin/sh\nexit 0\n")
    (folder / "build.sh").write_text("#!/bin/sh\ntrue\n")
    (folder / "run").chmod(run_mode)
    return folder


def practice(benchmark: Any) -> None:
    (cohort,) = factories.cohorts(benchmark, Cohort.PRACTICE)
    folder = storage.ensure_dir(storage.cohort_dir(cohort.pk))
    for position, klass in enumerate(CLASSES):
        name = f"{position:04}.png"
        CohortItem.objects.create(
            cohort=cohort, position=position, canonical_name=name, sha256="0" * 64,
            reference_class=klass,
        )  # fmt: skip
        (folder / name).write_text(str(klass))


# validate ----------------------------------------------------------------------------------


def test_validate_passes_a_good_entry(
    server: str, benchmark: Any, alice: Any, podium: Podium, sign_in: Callable[[Any], str],
    tmp_path: Path,
) -> None:  # fmt: skip
    sign_in(alice)

    result = podium("validate", benchmark.slug, str(entry(tmp_path)))

    assert result.code == 0, result.out + result.err
    assert "FAIL" not in result.out
    assert "meets the benchmark's policy" in result.out
    assert not Environment.objects.exists()


def test_validate_prints_the_dockerfiles_refused_lines(
    server: str, benchmark: Any, alice: Any, podium: Podium, sign_in: Callable[[Any], str],
    tmp_path: Path,
) -> None:  # fmt: skip
    sign_in(alice)

    result = podium("validate", benchmark.slug, str(entry(tmp_path, BAD)))

    assert result.code == 1
    assert "FAIL  Dockerfile" in result.out
    assert "Dockerfile:3: line 3:" in result.out
    assert "docker.io/library/python:3.11" in result.out
    assert not Environment.objects.exists()


def test_validate_names_a_run_the_scored_user_cannot_execute(
    server: str, benchmark: Any, alice: Any, podium: Podium, sign_in: Callable[[Any], str],
    tmp_path: Path,
) -> None:  # fmt: skip
    sign_in(alice)
    folder = entry(tmp_path, run_mode=0o744)

    result = podium("validate", benchmark.slug, str(folder))

    assert result.code == 1
    assert "FAIL  entry: `run` is not executable by others" in result.out


def test_validate_takes_a_build_sh_that_makes_run_as_the_portal_does(
    server: str, benchmark: Any, alice: Any, podium: Podium, sign_in: Callable[[Any], str],
    tmp_path: Path,
) -> None:  # fmt: skip
    sign_in(alice)
    folder = entry(tmp_path)
    (folder / "run").unlink()

    result = podium("validate", benchmark.slug, str(folder))

    assert result.code == 0, result.out
    assert "note  entry: no `run` yet" in result.out


def test_validate_takes_another_dockerfile_and_an_archive_limit(
    server: str, benchmark: Any, alice: Any, podium: Podium, sign_in: Callable[[Any], str],
    tmp_path: Path,
) -> None:  # fmt: skip
    sign_in(alice)
    benchmark.max_upload_bytes = 64
    benchmark.save(update_fields=["max_upload_bytes"])
    other = tmp_path / "Other.dockerfile"
    other.write_text(BAD)

    result = podium("validate", benchmark.slug, str(entry(tmp_path)), "--dockerfile", str(other))

    assert result.code == 1
    assert "FAIL  archive" in result.out
    assert f"{other}:3:" in result.out


def test_validate_of_an_unknown_benchmark_is_refused(
    server: str, alice: Any, podium: Podium, sign_in: Callable[[Any], str], tmp_path: Path
) -> None:
    sign_in(alice)

    result = podium("validate", "no-such", str(entry(tmp_path)))

    assert result.code == 2
    assert "Not found" in result.err


# run --local, Docker faked -----------------------------------------------------------------


class FakeDocker(local.Docker):
    """Plays the engine (see the module doc): ``answers`` maps an image name to its class."""

    def __init__(self, platform: str = "", wrong: int = 0) -> None:
        super().__init__("docker")
        self.platform = platform
        self.wrong = wrong  # how many answers to get wrong
        self.calls: list[tuple[str, ...]] = []
        self.created: dict[str, list[str]] = {}

    def __call__(
        self, *args: str, stdin: bytes | None = None, timeout_s: float | None = None,
        stream: bool = False,
    ) -> local.Completed:  # fmt: skip
        self.calls.append(args)
        if args[0] == "version":
            return local.Completed(0, self.platform.encode() + b"\n", b"")
        if args[0] == "create":
            name = f"c{len(self.created)}"
            self.created[name] = list(args[1:])
            return local.Completed(0, name.encode() + b"\n", b"")
        if args[0] == "wait":
            return local.Completed(0, b"0\n", b"")
        if args[0] == "logs":
            return local.Completed(0, self.line(self.created[args[1]]), b"")
        if args[0] == "inspect":
            return local.Completed(0, b'{"OOMKilled": false}', b"")
        return local.Completed(0, b"", b"")

    def line(self, created: list[str]) -> bytes:
        mounts = [created[i + 1] for i, arg in enumerate(created) if arg == "--mount"]
        source = next(m for m in mounts if "target=/contest/input" in m)
        folder = Path(source.split("source=")[1].split(",")[0])
        rows = (folder / "manifest.tsv").read_text().splitlines()
        answers = [int((folder / "images" / row.split("\t")[1]).read_text()) for row in rows]
        answers = [(a + 1) % 1000 if i < self.wrong else a for i, a in enumerate(answers)]
        output = b"".join(struct.pack("<i", a) for a in answers)
        data = {
            "podium_supervisor": 1, "start_ns": 1, "end_ns": 2_500_001, "wall_ns": 2_500_000,
            "exit_code": 0, "signal": None, "killed": False,
            "rusage": {"utime_us": 1000, "stime_us": 500, "maxrss_kb": 2048},
            "output_bytes": len(output), "output_error": "",
            "output_b64": base64.b64encode(output).decode(),
            "stdout_tail_b64": base64.b64encode(b"hello from run\n").decode(),
            "stderr_tail_b64": "", "prewarm_ns": 3_000_000,
        }  # fmt: skip
        return b"supervise: noise\n" + json.dumps(data).encode() + b"\n"


@pytest.fixture
def fake_docker(monkeypatch: pytest.MonkeyPatch) -> Callable[..., FakeDocker]:
    def install(**options: Any) -> FakeDocker:
        fake = FakeDocker(**options)
        monkeypatch.setattr(local, "Docker", lambda: fake)
        return fake

    return install


def supervisor_platform() -> str:
    """The platform of the portal's supervisor binary: the fake engine's, to run at all."""
    return str(sandbox.elf_platform(Path(settings.PODIUM_SUPERVISOR).read_bytes()[:20]))


def test_run_local_scores_under_the_published_spec_and_prints_the_verdict(
    server: str, benchmark: Any, alice: Any, podium: Podium, sign_in: Callable[[Any], str],
    tmp_path: Path, fake_docker: Callable[..., FakeDocker],
) -> None:  # fmt: skip
    practice(benchmark)
    sign_in(alice)
    fake = fake_docker(platform=supervisor_platform())

    result = podium("run", "--local", benchmark.slug, str(entry(tmp_path)))

    assert result.code == 0, result.out + result.err
    assert "Verdict: passed, 5/5 matches, wall time 2.500000 ms (2500000 ns)" in result.out
    assert "hello from run" in result.out
    assert "digest checked" in result.out
    assert "Where this machine differs from a scoring host:" in result.out
    scored = fake.created["c1"]
    assert scored[scored.index("--network") + 1] == "none"
    assert "--read-only" in scored
    assert scored[scored.index("--cap-drop") + 1] == "ALL"
    assert scored[scored.index("--memory") + 1] == str(benchmark.run_memory_bytes)
    assert scored[scored.index("--entrypoint") + 1] == "/podium/supervise"
    build = fake.created["c0"]
    assert build[build.index("--user") + 1] == "0"
    assert build[build.index("--workdir") + 1] == "/submission"


def test_run_local_that_misses_the_threshold_fails_with_the_portals_sentence(
    server: str, benchmark: Any, alice: Any, podium: Podium, sign_in: Callable[[Any], str],
    tmp_path: Path, fake_docker: Callable[..., FakeDocker],
) -> None:  # fmt: skip
    practice(benchmark)
    sign_in(alice)
    fake_docker(platform=supervisor_platform(), wrong=5)

    result = podium("run", "--local", benchmark.slug, str(entry(tmp_path)))

    assert result.code == 1
    assert "Verdict: failed, 0/5 matches" in result.out
    assert "Reason: 0 of 5 predictions match the reference; at least" in result.out


def test_run_local_stops_when_the_supervisor_is_for_another_platform(
    server: str, benchmark: Any, alice: Any, podium: Podium, sign_in: Callable[[Any], str],
    tmp_path: Path, fake_docker: Callable[..., FakeDocker],
) -> None:  # fmt: skip
    practice(benchmark)
    sign_in(alice)
    fake = fake_docker(platform="linux/s390x")

    result = podium("run", "--local", benchmark.slug, str(entry(tmp_path)))

    assert result.code == 2
    assert "this Docker Engine runs linux/s390x" in result.err
    assert not any(call[0] in ("build", "create") for call in fake.calls)


def test_run_local_needs_a_practice_cohort(
    server: str, benchmark: Any, alice: Any, podium: Podium, sign_in: Callable[[Any], str],
    tmp_path: Path, fake_docker: Callable[..., FakeDocker],
) -> None:  # fmt: skip
    sign_in(alice)
    fake = fake_docker(platform="linux/amd64")

    result = podium("run", "--local", benchmark.slug, str(entry(tmp_path)))

    assert result.code == 2
    assert "no practice cohort yet" in result.err
    assert fake.calls == []


# The container's arguments are the client's template; the portal gives limits only ---------


LIMITS = SimpleNamespace(
    score_timeout_s=60, run_memory_bytes=2**31, run_pids_limit=256, run_tmpfs_bytes=2**28,
    run_shm_bytes=2**26, run_output_tmpfs_bytes=2**20,
)  # fmt: skip


def published_spec() -> dict[str, Any]:
    """The scored container's spec exactly as the portal publishes it (placeholders in)."""
    return sandbox.container_spec(
        image="{image}", limits=LIMITS, supervisor="{supervisor}",
        input_dir="{input}", expect_bytes=20, run_uid=65534, supervisor_uid=65533,
        warm=sandbox.prewarm_bounds(run_memory_bytes=2**30, budget_bytes=2**28),
        oom_score_adj=500,
    )  # fmt: skip


BINDS = [
    local.Bind("/tmp/run/supervise", local.SUPERVISOR_TARGET, "{supervisor}"),
    local.Bind("/tmp/run/input", local.INPUT_TARGET, "{input}"),
]


def run_args(spec: dict[str, Any]) -> list[str]:
    return local.create_args(
        spec, image="sub", template=local.RUN_TEMPLATE, label="podium.local=run", binds=BINDS
    )


def flag_values(args: list[str], flag: str) -> list[str]:
    return [args[i + 1] for i, arg in enumerate(args) if arg == flag]


def test_the_published_spec_runs_under_the_template_with_its_limits() -> None:
    spec = published_spec()

    args = run_args(spec)

    assert flag_values(args, "--user") == ["0:0"]
    assert flag_values(args, "--network") == ["none"]
    assert flag_values(args, "--cap-drop") == ["ALL"]
    assert flag_values(args, "--cap-add") == ["SETUID", "SETGID", "SETPCAP"]
    assert flag_values(args, "--security-opt") == ["no-new-privileges"]
    assert "--read-only" in args and "--no-healthcheck" in args and "--privileged" not in args
    assert flag_values(args, "--mount") == [
        "type=bind,source=/tmp/run/supervise,target=/podium/supervise,readonly",
        "type=bind,source=/tmp/run/input,target=/contest/input,readonly",
    ]
    assert flag_values(args, "--memory") == [str(spec["mem_limit"])]
    assert flag_values(args, "--pids-limit") == [str(spec["pids_limit"])]
    assert flag_values(args, "--oom-score-adj") == ["500"]
    assert len(flag_values(args, "--tmpfs")) == len(spec["tmpfs"])
    assert flag_values(args, "--entrypoint") == ["/podium/supervise"]
    assert args[args.index("sub") + 1 :] == spec["entrypoint"][1:]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("mounts", [{"Type": "bind", "Source": "/", "Target": "/host", "ReadOnly": False}]),
        ("binds", ["/:/host:rw"]),
        ("volumes", {"/var/run/docker.sock": {"bind": "/docker.sock"}}),
        ("privileged", True),
        ("cap_add", ["SETUID", "SETGID", "SETPCAP", "SYS_ADMIN"]),
        ("cap_drop", []),
        ("security_opt", ["no-new-privileges", "seccomp=unconfined"]),
        ("user", "0"),
        ("network_mode", "host"),
        ("devices", ["/dev/sda:/dev/sda"]),
        ("device_requests", [{"Driver": "nvidia", "Count": -1}]),
        ("environment", ["NVIDIA_VISIBLE_DEVICES=all"]),
        ("read_only", False),
        ("pid_mode", "host"),
        ("oom_score_adj", -1000),
        ("mem_limit", "1g; rm -rf /"),
        ("tmpfs", {"/tmp": "rw,size=1g,X-mount.mkdir=/host"}),
        ("log_config", {"type": "syslog", "config": {"syslog-address": "tcp://x:514"}}),
        ("cpuset_cpus", "0;rm -rf /"),
        ("oom_score_adj", 1001),
        ("pids_limit", True),
        ("tmpfs", {"/a/../etc": "size=1"}),
        ("tmpfs", {"relative": "size=1"}),
        ("working_dir", "relative/dir"),
        ("entrypoint", "sh -c 'curl evil'"),
        ("command", ["ok", 1]),
    ],
)
def test_a_portal_cannot_widen_the_local_sandbox(key: str, value: Any) -> None:
    # A portal that is not what it should be (or a man in the middle) asks for more.
    spec = {**published_spec(), key: value}

    with pytest.raises(local.CliError) as refused:
        run_args(spec)

    assert f"sets `{key}` to" in str(refused.value)
    assert "Nothing was run" in str(refused.value)


@pytest.mark.parametrize(
    ("key", "value"), [("privileged", True), ("binds", ["/:/host:rw"]), ("network_mode", "host")]
)
def test_a_portal_cannot_widen_the_local_build_container(key: str, value: Any) -> None:
    build = {"mem_limit": 2**31, key: value}

    with pytest.raises(local.CliError) as refused:
        local.builder_args({"build": build}, image="env", network="bridge")

    assert f"sets `{key}` to" in str(refused.value)


def test_run_local_refuses_a_portal_spec_that_binds_the_host_and_creates_nothing(
    server: str, benchmark: Any, alice: Any, podium: Podium, sign_in: Callable[[Any], str],
    tmp_path: Path, fake_docker: Callable[..., FakeDocker], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    practice(benchmark)
    sign_in(alice)
    fake = fake_docker(platform=supervisor_platform())
    honest = sandbox.container_spec

    def hostile(**kwargs: Any) -> dict[str, Any]:
        spec = honest(**kwargs)
        spec["mounts"].append({"Type": "bind", "Source": "/", "Target": "/host"})
        return spec

    monkeypatch.setattr(sandbox, "container_spec", hostile)

    result = podium("run", "--local", benchmark.slug, str(entry(tmp_path)))

    assert result.code == 2
    assert "sets `mounts` to" in result.err
    assert "never takes the user, network, capabilities, security options, mounts" in result.err
    assert not any(call[0] == "create" for call in fake.calls)


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://podium.example", True),
        ("http://localhost:8000", True),
        ("http://127.0.0.1:8000", True),
        ("http://[::1]:8000", True),
        ("http://podium.example", False),
        ("http://10.0.0.5:8000", False),
        ("http://localhost.podium.example", False),
    ],
)
def test_only_https_or_this_machine_unless_told(url: str, allowed: bool) -> None:
    if allowed:
        local.check_transport(url, insecure_http=False)
    else:
        with pytest.raises(local.CliError, match="plain HTTP"):
            local.check_transport(url, insecure_http=False)
    local.check_transport(url, insecure_http=True)


def test_run_local_refuses_a_plain_http_portal_before_any_request(
    podium: Podium, tmp_path: Path, fake_docker: Callable[..., FakeDocker]
) -> None:
    config.save(config.Settings(url="http://podium.example", token="t" * 40))
    fake = fake_docker(platform="linux/amd64")

    result = podium("run", "--local", "demo", str(entry(tmp_path)))

    assert result.code == 2
    assert "http://podium.example is plain HTTP" in result.err
    assert "--insecure-http" in result.err
    assert fake.calls == []
