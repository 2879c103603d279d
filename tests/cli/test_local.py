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
from typing import Any

import pytest
from django.conf import settings
from hypothesis import given
from hypothesis import strategies as st

from podium_cli import judge, local
from portal import storage
from portal.contests import sandbox
from portal.contests.models import Cohort, CohortItem
from portal.environments.models import Environment
from scoring.run import verdict
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


def test_a_setting_the_client_does_not_know_stops_the_run() -> None:
    with pytest.raises(local.CliError, match="does not know"):
        local.create_args({"device_requests": []}, image="x")


# The verdict's words are the portal's --------------------------------------------------------

outputs = st.one_of(st.none(), st.binary(max_size=24))


@given(
    output=outputs,
    output_error=st.sampled_from(["", "missing", "not a regular file", "too large"]),
    exit_code=st.one_of(st.none(), st.integers(-1, 3)),
    signal=st.one_of(st.none(), st.sampled_from([9, 11, 99])),
    killed=st.booleans(),
    references=st.lists(st.integers(0, 3), min_size=1, max_size=6),
    data=st.data(),
)
def test_the_local_verdict_is_the_portals(
    output: bytes | None, output_error: str, exit_code: int | None, signal: int | None,
    killed: bool, references: list[int], data: Any,
) -> None:  # fmt: skip
    needed = data.draw(st.integers(0, len(references)))
    if output is not None and data.draw(st.booleans()):
        output = b"".join(struct.pack("<i", data.draw(st.integers(0, 3))) for _ in references)
    options = {
        "output": output, "output_error": output_error, "exit_code": exit_code,
        "signal": signal, "killed": killed, "references": references, "needed": needed,
    }  # fmt: skip

    ours = judge.decide(**options)
    theirs = verdict.decide(**options)

    assert (ours.status, ours.matches, ours.total, ours.reason) == (
        theirs.status, theirs.matches, theirs.total, theirs.reason,
    )  # fmt: skip
