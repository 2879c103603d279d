"""Every rule setting of a benchmark is on its Django admin form, and nonsense is refused.

Staff edit the benchmark the way they would in a browser: the change form is posted
with every field, one of them changed.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.contrib import admin
from django.test import Client
from django.urls import reverse

from portal.contests.models import Benchmark
from tests import factories

KST = dt.timezone(dt.timedelta(hours=9))

# Every field of the model a member of staff may set (created_at is read-only).
RULE_SETTINGS = {
    "opens_at",
    "closes_at",
    "pass_min_matches",
    "cohort_size",
    "attempts_per_day",
    "attempt_timezone",
    "practice_per_day",
    "max_environments",
    "build_timeout_s",
    "score_timeout_s",
    "max_image_bytes",
    "max_concurrent_builds",
    "max_upload_bytes",
    "allowed_registries",
    "run_memory_bytes",
    "run_pids_limit",
    "run_tmpfs_bytes",
    "run_shm_bytes",
    "run_output_tmpfs_bytes",
    "runtime_tail_bytes",
    "hardware_class",
    "reference_energy_per_image_j",
    "energy_floor_pct",
    "verify_top",
    "verify_tolerance_pct",
    "retention_days",
    "team_size_max",
}
# A retention of 0 days is allowed: the artifacts may go as soon as the benchmark closes;
# verify_top 0 verifies none; an energy floor of 0 flags none, and no reference is none.
NOT_LIMITS = {
    "opens_at",
    "closes_at",
    "attempt_timezone",
    "allowed_registries",
    "hardware_class",
    "reference_energy_per_image_j",
    "energy_floor_pct",
    "verify_top",
    "retention_days",
}
LIMITS = sorted(RULE_SETTINGS - NOT_LIMITS)


@pytest.fixture(autouse=True)
def _fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def flagship(db: Any) -> Benchmark:
    return factories.BenchmarkFactory(
        slug="eva02-imagenet1k-v3",
        title="EVA-02 on ImageNet-1k",
        opens_at=dt.datetime(2026, 8, 10, tzinfo=KST),
        closes_at=dt.datetime(2026, 8, 31, 18, tzinfo=KST),
    )


@pytest.fixture
def admin_client(client: Client, staff: Any) -> Client:
    client.force_login(staff)
    return client


def change_url(benchmark: Benchmark) -> str:
    return reverse("admin:contests_benchmark_change", args=[benchmark.pk])


def form_data(benchmark: Benchmark, **changes: Any) -> dict[str, Any]:
    """The change form as the browser posts it (datetimes split into date and time, UTC)."""
    data: dict[str, Any] = {
        "slug": benchmark.slug,
        "kind": benchmark.kind,
        "title": benchmark.title,
        "description": "",
        "contest": benchmark.contest_id or "",
        "phase_order": benchmark.phase_order,
        "phase_name": benchmark.phase_name,
    }
    for name in RULE_SETTINGS:
        value = changes.get(name, getattr(benchmark, name))
        if isinstance(value, dt.datetime):
            value = value.astimezone(dt.UTC)
            data[f"{name}_0"] = value.strftime("%Y-%m-%d")
            data[f"{name}_1"] = value.strftime("%H:%M:%S")
        else:
            data[name] = "" if value is None else value
    return data


def post(admin_client: Client, benchmark: Benchmark, **changes: Any) -> Any:
    return admin_client.post(change_url(benchmark), form_data(benchmark, **changes))


def errors_of(response: Any) -> dict[str, list[str]]:
    """The form's errors by field (the page is shown again when there are any)."""
    assert response.status_code == 200, response.status_code
    form = response.context["adminform"].form
    return {name: list(messages) for name, messages in form.errors.items()}


def test_every_rule_setting_is_on_the_form(admin_client, flagship):
    page = admin_client.get(change_url(flagship))

    form = page.context["adminform"].form
    assert set(form.fields) >= RULE_SETTINGS
    html = page.content.decode()
    for name in RULE_SETTINGS:
        assert f'name="{name}' in html, name  # opens_at_0 / opens_at_1 for the datetimes


def test_a_valid_edit_is_saved(admin_client, flagship):
    new_close = dt.datetime(2026, 9, 1, 18, tzinfo=KST)

    response = post(
        admin_client,
        flagship,
        closes_at=new_close,
        attempts_per_day=3,
        attempt_timezone="America/New_York",
        practice_per_day=20,
        max_environments=4,
        build_timeout_s=600,
        max_image_bytes=8 * 1024**3,
        max_upload_bytes=1024**3,
        allowed_registries="localhost/podium/\nghcr.io/acme/\n",
    )

    assert response.status_code == 302, errors_of(response)
    flagship.refresh_from_db()
    assert flagship.closes_at == new_close
    assert flagship.attempts_per_day == 3
    assert flagship.attempt_timezone == "America/New_York"
    assert (flagship.practice_per_day, flagship.max_environments) == (20, 4)
    assert flagship.build_timeout_s == 600
    assert (flagship.max_image_bytes, flagship.max_upload_bytes) == (8 * 1024**3, 1024**3)
    assert flagship.allowed_registries.split() == ["localhost/podium/", "ghcr.io/acme/"]


@pytest.mark.parametrize(
    "gap", [dt.timedelta(0), -dt.timedelta(seconds=1)], ids=["equal", "before"]
)
def test_the_window_must_close_after_it_opens(admin_client, flagship, gap):
    response = post(admin_client, flagship, closes_at=flagship.opens_at + gap)

    assert errors_of(response) == {"closes_at": ["The window must close after it opens."]}
    flagship.refresh_from_db()
    assert flagship.closes_at == dt.datetime(2026, 8, 31, 18, tzinfo=KST)


@pytest.mark.parametrize("name", LIMITS)
@pytest.mark.parametrize("value", [0, -1])
def test_every_limit_must_be_positive(admin_client, flagship, name, value):
    before = getattr(flagship, name)

    response = post(admin_client, flagship, **{name: value})

    assert list(errors_of(response)) == [name]
    flagship.refresh_from_db()
    assert getattr(flagship, name) == before


@pytest.mark.parametrize(
    "name", ["Asia/Sel", "KST", "Mars/Olympus_Mons", "../../etc/passwd", "Asia/Seoul/", ""]
)
def test_the_attempt_timezone_must_be_a_real_zone_name(admin_client, flagship, name):
    response = post(admin_client, flagship, attempt_timezone=name)

    assert list(errors_of(response)) == ["attempt_timezone"]
    flagship.refresh_from_db()
    assert flagship.attempt_timezone == "Asia/Seoul"


@pytest.mark.parametrize("name", ["UTC", "Europe/London", "America/New_York", "Asia/Kolkata"])
def test_real_zone_names_are_accepted(admin_client, flagship, name):
    response = post(admin_client, flagship, attempt_timezone=name)

    assert response.status_code == 302, errors_of(response)
    flagship.refresh_from_db()
    assert flagship.attempt_timezone == name


def test_the_pass_gate_cannot_exceed_the_cohort(admin_client, flagship):
    response = post(admin_client, flagship, pass_min_matches=10_001)

    assert list(errors_of(response)) == ["pass_min_matches"]


def test_shared_memory_cannot_exceed_the_runs_memory(admin_client, flagship):
    response = post(admin_client, flagship, run_memory_bytes=1 << 30, run_shm_bytes=2 << 30)

    assert errors_of(response) == {
        "run_shm_bytes": ["Shared memory cannot exceed the run's memory."]
    }
    saved = post(admin_client, flagship, run_memory_bytes=4 << 30, run_shm_bytes=2 << 30)
    assert saved.status_code == 302
    flagship.refresh_from_db()
    assert flagship.run_shm_bytes == 2 << 30


def test_the_energy_floor_is_a_percentage_of_a_non_negative_reference(admin_client, flagship):
    refused = post(admin_client, flagship, energy_floor_pct=101, reference_energy_per_image_j=-1)
    saved = post(admin_client, flagship, energy_floor_pct=0, reference_energy_per_image_j=0.05)

    assert sorted(errors_of(refused)) == ["energy_floor_pct", "reference_energy_per_image_j"]
    assert saved.status_code == 302, errors_of(saved)
    flagship.refresh_from_db()
    assert (flagship.energy_floor_pct, flagship.reference_energy_per_image_j) == (0, 0.05)


def test_the_allowed_registries_cannot_be_left_empty(admin_client, flagship):
    response = post(admin_client, flagship, allowed_registries="  \n ")

    assert list(errors_of(response)) == ["allowed_registries"]


def test_a_registry_prefix_must_name_its_registry(admin_client, flagship):
    response = post(
        admin_client,
        flagship,
        allowed_registries="localhost/podium/\npodium/\ndocker.io/library/\n",
    )

    assert errors_of(response) == {
        "allowed_registries": [
            "Line 2: `podium/` does not start with a registry host; write it with its "
            "registry, like localhost/podium/ or docker.io/library/."
        ]
    }
    flagship.refresh_from_db()
    assert flagship.allowed_registries == "localhost/podium/\n"


@pytest.mark.parametrize(
    "prefix",
    [
        "localhost/podium-entrant/",
        "localhost/podium-entrant/sub-",
        "docker.io/podium-entrant/",
        "index.docker.io/podium-entrant/env-",
        "localhost/podium",
    ],
)
def test_a_registry_prefix_cannot_cover_the_entrant_namespace(admin_client, flagship, prefix):
    response = post(admin_client, flagship, allowed_registries=f"docker.io/library/\n{prefix}\n")

    errors = errors_of(response)
    assert list(errors) == ["allowed_registries"]
    assert len(errors["allowed_registries"]) == 1
    assert errors["allowed_registries"][0].startswith(f"Line 2: `{prefix}` ")
    assert "the entrant namespace (podium-entrant/)" in errors["allowed_registries"][0]
    flagship.refresh_from_db()
    assert flagship.allowed_registries == "localhost/podium/\n"


def test_every_bad_registry_line_is_named(admin_client, flagship):
    response = post(
        admin_client, flagship, allowed_registries="ghcr.io\nlocalhost/podium/\npodium-entrant/\n"
    )

    errors = errors_of(response)["allowed_registries"]
    assert [error.split(":")[0] for error in errors] == ["Line 1", "Line 3"]


def test_whole_registries_may_be_allowed(admin_client, flagship):
    # Entrant images are refused by name whatever the prefixes allow.
    response = post(admin_client, flagship, allowed_registries="docker.io/\nlocalhost/\n")

    assert response.status_code == 302, errors_of(response)
    flagship.refresh_from_db()
    assert flagship.allowed_registries == "docker.io/\nlocalhost/\n"


def test_a_new_benchmark_gets_the_defaults_of_the_rules(admin_client):
    page = admin_client.get(reverse("admin:contests_benchmark_add"))

    initial = {name: field.initial for name, field in page.context["adminform"].form.fields.items()}
    assert initial["attempts_per_day"] == 2
    assert initial["attempt_timezone"] == "Asia/Seoul"
    assert initial["practice_per_day"] == 10
    assert initial["max_environments"] == 2
    assert initial["pass_min_matches"] == 9_900
    assert initial["cohort_size"] == 10_000
    assert initial["build_timeout_s"] == 30 * 60
    assert initial["score_timeout_s"] == 16 * 60
    assert initial["max_image_bytes"] == 16 * 1024**3
    assert initial["max_upload_bytes"] == 2 * 1024**3
    assert initial["max_concurrent_builds"] == 2


def test_the_benchmark_admin_is_registered():
    assert Benchmark in admin.site._registry
