"""``podium env create`` and ``podium env list``."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.utils import timezone

from portal.core import jobs, storage
from portal.environments.models import Environment
from tests import factories
from tests.cli.conftest import Podium, tar_members


def dockerfile(tmp_path: Path, text: str = "FROM localhost/podium/busybox:1\n") -> Path:
    folder = tmp_path / "my-env"
    folder.mkdir(exist_ok=True)
    path = folder / "Dockerfile"
    path.write_text(text)
    return path


def test_create_uploads_the_dockerfile_and_queues_its_build(
    server: str,
    benchmark: Any,
    alice: Any,
    podium: Podium,
    sign_in: Callable[[Any], str],
    sent: list[tuple[str, tuple[Any, ...]]],
    tmp_path: Path,
) -> None:
    sign_in(alice)

    result = podium("env", "create", benchmark.slug, str(dockerfile(tmp_path)))

    assert result.code == 0, result.err
    environment = Environment.objects.get(owner=alice)
    assert environment.name == "my-env"  # the Dockerfile's folder
    assert environment.status == Environment.QUEUED
    assert environment.dockerfile == "FROM localhost/podium/busybox:1\n"
    assert result.out.splitlines() == [
        f"Environment {environment.pk} (my-env): queued",
        f"Its build is queued; `podium env list {benchmark.slug}` shows when it is ready.",
    ]
    assert sent == [(jobs.BUILD_ENVIRONMENT, (environment.pk,))]


def test_create_packs_a_context_folder(
    server: str,
    benchmark: Any,
    alice: Any,
    podium: Podium,
    sign_in: Callable[[Any], str],
    tmp_path: Path,
) -> None:
    sign_in(alice)
    context = tmp_path / "context"
    (context / "wheels").mkdir(parents=True)
    (context / "wheels" / "model.bin").write_bytes(b"\x00\x01")

    result = podium(
        "env", "create", benchmark.slug, str(dockerfile(tmp_path)), "--name", "with context",
        "--context", str(context),
    )  # fmt: skip

    assert result.code == 0, result.err
    environment = Environment.objects.get(owner=alice, name="with context")
    assert environment.has_context
    stored = storage.environment_dir(environment.pk) / "context.archive"
    assert set(tar_members(stored.read_bytes())) == {"wheels", "wheels/model.bin"}


def test_list_shows_id_name_status_and_digest(
    server: str,
    benchmark: Any,
    alice: Any,
    bob: Any,
    podium: Podium,
    sign_in: Callable[[Any], str],
) -> None:
    sign_in(alice)
    ready = factories.EnvironmentFactory(
        owner=alice, benchmark=benchmark, name="fast", image_digest="sha256:" + "d" * 64
    )
    broken = factories.EnvironmentFactory(
        owner=alice,
        benchmark=benchmark,
        name="broken",
        status=Environment.FAILED,
        failure_reason="RUN exited with status 7",
    )
    factories.EnvironmentFactory(owner=bob, benchmark=benchmark, name="bobs")

    result = podium("env", "list", benchmark.slug)

    assert result.code == 0, result.err
    header, *rows, reason = result.out.splitlines()
    assert header.split() == ["ID", "NAME", "STATUS", "DIGEST"]
    assert sorted(row.split() for row in rows) == sorted(
        [
            [str(ready.pk), "fast", "ready", "sha256:" + "d" * 64],
            [str(broken.pk), "broken", "failed", "-"],
        ]
    )
    assert reason == f"Environment {broken.pk}: RUN exited with status 7"


def test_list_without_a_benchmark_covers_every_benchmark(
    server: str, benchmark: Any, alice: Any, podium: Podium, sign_in: Callable[[Any], str]
) -> None:
    sign_in(alice)
    other = factories.BenchmarkFactory(slug="other")
    factories.EnvironmentFactory(owner=alice, benchmark=benchmark, name="here")
    factories.EnvironmentFactory(owner=alice, benchmark=other, name="there")

    result = podium("env", "list")

    assert result.code == 0, result.err
    header, *rows = result.out.splitlines()
    assert header.split() == ["BENCHMARK", "ID", "NAME", "STATUS", "DIGEST"]
    assert sorted((row.split()[0], row.split()[2]) for row in rows) == [
        (benchmark.slug, "here"),
        ("other", "there"),
    ]


def test_list_with_none_says_how_to_make_one(
    server: str, benchmark: Any, alice: Any, podium: Podium, sign_in: Callable[[Any], str]
) -> None:
    sign_in(alice)

    result = podium("env", "list", benchmark.slug)

    assert result.code == 0, result.err
    assert "`podium env create` makes one" in result.out


def test_a_dockerfile_against_the_policy_is_refused_with_its_line(
    server: str,
    benchmark: Any,
    alice: Any,
    podium: Podium,
    sign_in: Callable[[Any], str],
    tmp_path: Path,
) -> None:
    sign_in(alice)
    path = dockerfile(tmp_path, "FROM localhost/podium/busybox:1\nFROM elsewhere/tools:2\n")

    result = podium("env", "create", benchmark.slug, str(path))

    assert result.code == 2
    assert result.err.startswith("podium: Dockerfile refused: line 2: ")
    assert result.err.endswith("Fix those lines and run `podium env create` again.\n")
    assert len(result.err.splitlines()) == 1
    assert not Environment.objects.exists()


def test_a_closed_benchmark_takes_no_new_environment(
    server: str, alice: Any, podium: Podium, sign_in: Callable[[Any], str], tmp_path: Path
) -> None:
    sign_in(alice)
    now = timezone.now()
    closed = factories.BenchmarkFactory(
        opens_at=now - dt.timedelta(days=3), closes_at=now - dt.timedelta(days=1)
    )

    result = podium("env", "create", closed.slug, str(dockerfile(tmp_path)))

    assert result.code == 2
    assert result.err == (
        "podium: Closed: This benchmark has closed; no new environments are accepted.\n"
    )


def test_past_the_environment_limit_it_says_what_to_do(
    server: str,
    benchmark: Any,
    alice: Any,
    podium: Podium,
    sign_in: Callable[[Any], str],
    tmp_path: Path,
) -> None:
    sign_in(alice)
    benchmark.max_environments = 1
    benchmark.save(update_fields=["max_environments"])
    factories.EnvironmentFactory(owner=alice, benchmark=benchmark)

    result = podium("env", "create", benchmark.slug, str(dockerfile(tmp_path)))

    assert result.code == 2
    assert result.err.startswith("podium: Too many environments: You already keep 1 ")


def test_an_unknown_benchmark_is_not_found(
    server: str, alice: Any, podium: Podium, sign_in: Callable[[Any], str], tmp_path: Path
) -> None:
    sign_in(alice)

    result = podium("env", "create", "no-such", str(dockerfile(tmp_path)))

    assert result.code == 2
    assert result.err == "podium: Not found: No such benchmark.\n"


def test_a_missing_dockerfile_is_named(
    server: str, benchmark: Any, alice: Any, podium: Podium, sign_in: Callable[[Any], str]
) -> None:
    sign_in(alice)

    result = podium("env", "create", benchmark.slug, "nowhere/Dockerfile")

    assert result.code == 2
    assert result.err == "podium: nowhere/Dockerfile: no such Dockerfile.\n"


def test_an_unverified_address_is_named_with_what_to_do(
    server: str,
    benchmark: Any,
    podium: Podium,
    sign_in: Callable[[Any], str],
    tmp_path: Path,
) -> None:
    sign_in(factories.UserFactory(username="newcomer", email_verified=False))

    result = podium("env", "create", benchmark.slug, str(dockerfile(tmp_path)))

    assert result.code == 2
    assert result.err.startswith("podium: Email address not verified: ")
    assert result.err.rstrip().endswith(
        "Follow the link in the email sent at sign-up, then try again."
    )
