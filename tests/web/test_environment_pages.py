"""An entrant's environments through the pages: create, inline policy errors, status, remove."""

from __future__ import annotations

import datetime as dt
import io
import json
import re
import tarfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from django.utils import timezone

from portal.core import jobs
from portal.environments.models import Environment, EnvironmentEvent
from tests import factories

GOOD_DOCKERFILE = "FROM localhost/podium/busybox:1\nRUN true\n"


def context_tar() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("weights.bin")
        info.size = 4
        tar.addfile(info, io.BytesIO(b"w8ts"))
    return buffer.getvalue()


def test_creating_from_pasted_text_queues_a_build(
    client, alice, benchmark, sent, django_capture_on_commit_callbacks
):
    client.force_login(alice)

    with django_capture_on_commit_callbacks(execute=True):
        page = client.post(
            f"/b/{benchmark.slug}/environments/",
            {"name": "cuda-base", "dockerfile_text": GOOD_DOCKERFILE.replace("\n", "\r\n")},
        )

    environment = Environment.objects.get(owner=alice, benchmark=benchmark)
    assert page.status_code == 302
    assert page["Location"] == reverse("environments:detail", kwargs={"pk": environment.pk})
    assert environment.name == "cuda-base"
    assert environment.status == Environment.QUEUED
    assert environment.dockerfile == GOOD_DOCKERFILE
    assert sent == [(jobs.BUILD_ENVIRONMENT, (environment.pk,))]


def test_creating_from_an_uploaded_dockerfile_with_a_context(
    client, alice, benchmark, sent, django_capture_on_commit_callbacks, data_dir
):
    client.force_login(alice)
    dockerfile = SimpleUploadedFile("Dockerfile", GOOD_DOCKERFILE.encode())
    context = SimpleUploadedFile("context.tar", context_tar())

    with django_capture_on_commit_callbacks(execute=True):
        page = client.post(
            f"/b/{benchmark.slug}/environments/",
            {"name": "with-context", "dockerfile_file": dockerfile, "context": context},
        )

    assert page.status_code == 302
    environment = Environment.objects.get(owner=alice)
    assert environment.has_context
    stored = data_dir / "environments" / str(environment.pk) / "context.archive"
    assert stored.read_bytes() == context_tar()
    assert len(sent) == 1


def test_an_unsafe_context_archive_is_refused_and_nothing_is_created(
    client, alice, benchmark, sent
):
    client.force_login(alice)
    context = SimpleUploadedFile("context.tar", b"not an archive at all")

    page = client.post(
        f"/b/{benchmark.slug}/environments/",
        {"name": "bad-context", "dockerfile_text": GOOD_DOCKERFILE, "context": context},
    )

    assert page.status_code == 400
    assert "context" in page.content.decode()
    assert not Environment.objects.exists()
    assert sent == []


def test_a_disallowed_from_is_shown_inline_with_its_line_and_nothing_is_created(
    client, alice, benchmark, sent, django_capture_on_commit_callbacks
):
    client.force_login(alice)

    with django_capture_on_commit_callbacks(execute=True):
        page = client.post(
            f"/b/{benchmark.slug}/environments/",
            {"name": "sneaky", "dockerfile_text": "# base\nFROM evil.example.com/miner:1\n"},
        )

    assert page.status_code == 400
    errors = page.context["form"].errors["dockerfile_text"]
    assert any("line 2" in error.lower() for error in errors)
    assert "line 2" in page.content.decode().lower()
    assert "sneaky" in page.content.decode()  # the form keeps what was typed
    assert not Environment.objects.exists()
    assert sent == []


def test_the_form_needs_exactly_one_dockerfile(client, alice, benchmark):
    client.force_login(alice)

    page = client.post(f"/b/{benchmark.slug}/environments/", {"name": "empty"})

    assert page.status_code == 400
    assert "Upload a Dockerfile or paste its text." in page.content.decode()
    assert not Environment.objects.exists()


def test_a_refusal_from_the_service_is_shown_in_the_form(client, alice, benchmark):
    factories.EnvironmentFactory.create_batch(2, owner=alice, benchmark=benchmark)
    client.force_login(alice)

    page = client.post(
        f"/b/{benchmark.slug}/environments/", {"name": "third", "dockerfile_text": GOOD_DOCKERFILE}
    )

    assert page.status_code == 400
    assert "remove an unused one first" in page.content.decode()
    assert Environment.objects.filter(owner=alice).count() == 2


def test_list_shows_only_my_environments_that_are_not_removed(client, alice, bob, benchmark):
    factories.EnvironmentFactory(owner=alice, benchmark=benchmark, name="mine-ready")
    factories.EnvironmentFactory(
        owner=alice, benchmark=benchmark, name="mine-gone", status=Environment.REMOVED
    )
    factories.EnvironmentFactory(owner=bob, benchmark=benchmark, name="bobs")
    client.force_login(alice)

    html = client.get(f"/b/{benchmark.slug}/environments/").content.decode()

    assert "mine-ready" in html
    assert "mine-gone" not in html
    assert "bobs" not in html


def test_detail_shows_status_image_failure_and_build_log_tail(client, alice, benchmark, data_dir):
    environment = factories.EnvironmentFactory(
        owner=alice,
        benchmark=benchmark,
        status=Environment.FAILED,
        failure_reason="The build failed: RUN exited with 1 (line 2).",
    )
    log = data_dir / "environments" / str(environment.pk) / "build.log"
    log.parent.mkdir(parents=True)
    log.write_text("".join(f"step {n}\n" for n in range(500)))
    client.force_login(alice)

    html = client.get(f"/environments/{environment.pk}/").content.decode()

    assert "The build failed: RUN exited with 1 (line 2)." in html
    assert "step 499" in html
    assert "step 299\n" not in html  # only the last 200 lines
    assert reverse("environments:rebuild", kwargs={"pk": environment.pk}) in html


def test_rebuild_button_only_for_a_retryable_environment(client, alice, benchmark):
    environment = factories.EnvironmentFactory(owner=alice, benchmark=benchmark)
    client.force_login(alice)

    html = client.get(f"/environments/{environment.pk}/").content.decode()

    assert reverse("environments:rebuild", kwargs={"pk": environment.pk}) not in html


def test_rebuild_queues_a_new_build(
    client, alice, benchmark, sent, django_capture_on_commit_callbacks
):
    environment = factories.EnvironmentFactory(
        owner=alice, benchmark=benchmark, status=Environment.TIMED_OUT
    )
    client.force_login(alice)

    with django_capture_on_commit_callbacks(execute=True):
        page = client.post(f"/environments/{environment.pk}/rebuild/")

    assert page.status_code == 302
    environment.refresh_from_db()
    assert environment.status == Environment.QUEUED
    assert sent == [(jobs.BUILD_ENVIRONMENT, (environment.pk,))]


def test_rebuild_is_post_only(client, alice, benchmark):
    environment = factories.EnvironmentFactory(
        owner=alice, benchmark=benchmark, status=Environment.FAILED
    )
    client.force_login(alice)

    assert client.get(f"/environments/{environment.pk}/rebuild/").status_code == 405


def test_remove_asks_first_then_removes_on_post(client, alice, benchmark):
    environment = factories.EnvironmentFactory(owner=alice, benchmark=benchmark)
    client.force_login(alice)

    confirm = client.get(f"/environments/{environment.pk}/remove/")
    environment.refresh_from_db()
    assert confirm.status_code == 200
    assert "Yes, remove it" in confirm.content.decode()
    assert environment.status == Environment.READY

    done = client.post(f"/environments/{environment.pk}/remove/")
    environment.refresh_from_db()
    assert done.status_code == 302
    assert environment.status == Environment.REMOVED


def test_remove_refused_while_building_says_why(client, alice, benchmark):
    environment = factories.EnvironmentFactory(
        owner=alice, benchmark=benchmark, status=Environment.BUILDING
    )
    client.force_login(alice)

    page = client.post(f"/environments/{environment.pk}/remove/", follow=True)

    environment.refresh_from_db()
    assert environment.status == Environment.BUILDING
    assert "still building" in page.content.decode()


def test_status_json_carries_status_timeline_and_log(client, alice, benchmark, data_dir):
    environment = factories.EnvironmentFactory(
        owner=alice, benchmark=benchmark, status=Environment.BUILDING
    )
    for status in (Environment.QUEUED, Environment.BUILDING):
        EnvironmentEvent.objects.create(
            environment=environment, status=status, at=environment.created_at
        )
    log = data_dir / "environments" / str(environment.pk) / "build.log"
    log.parent.mkdir(parents=True)
    log.write_text("#1 FROM localhost/podium/busybox:1\n")
    client.force_login(alice)

    response = client.get(f"/environments/{environment.pk}/status.json")

    assert response.status_code == 200
    data = json.loads(response.content)
    assert data["status"] == "building"
    assert data["finished"] is False
    assert [event["status"] for event in data["timeline"]] == ["queued", "building"]
    assert "KST" in data["timeline"][0]["at_display"]
    assert data["build_log"] == "#1 FROM localhost/podium/busybox:1\n"
    assert data["display"]["status"] == "building"


def test_unfinished_environment_page_polls_its_status(client, alice, benchmark):
    environment = factories.EnvironmentFactory(
        owner=alice, benchmark=benchmark, status=Environment.QUEUED
    )
    client.force_login(alice)

    html = client.get(f"/environments/{environment.pk}/").content.decode()

    assert f'data-live="/environments/{environment.pk}/status.json"' in html
    assert "data-finished" not in html
    assert 'http-equiv="refresh"' not in html


@pytest.mark.parametrize("suffix", ["", "status.json", "remove/"])
def test_another_entrants_environment_is_404(client, alice, bob, benchmark, suffix):
    environment = factories.EnvironmentFactory(owner=alice, benchmark=benchmark)
    client.force_login(bob)

    assert client.get(f"/environments/{environment.pk}/{suffix}").status_code == 404
    assert client.post(f"/environments/{environment.pk}/remove/").status_code == 404
    assert client.post(f"/environments/{environment.pk}/rebuild/").status_code == 404
    environment.refresh_from_db()
    assert environment.status == Environment.READY


def test_dockerfile_upload_must_be_text(client, alice, benchmark):
    client.force_login(alice)
    binary = SimpleUploadedFile("Dockerfile", b"\xff\xfe\x00FROM")

    page = client.post(
        f"/b/{benchmark.slug}/environments/", {"name": "bin", "dockerfile_file": binary}
    )

    assert page.status_code == 400
    assert "not UTF-8 text" in page.content.decode()


def test_a_building_environment_shows_its_time_against_the_build_cap(
    client, alice, benchmark, time_machine
):
    time_machine.move_to(timezone.now(), tick=False)
    environment = factories.EnvironmentFactory(
        owner=alice,
        benchmark=benchmark,
        status=Environment.BUILDING,
        build_started_at=timezone.now() - dt.timedelta(minutes=3, seconds=12),
    )
    client.force_login(alice)

    html = client.get(f"/environments/{environment.pk}/").content.decode()
    data = client.get(f"/environments/{environment.pk}/status.json").json()

    assert "Building for 3 min 12 s of the 30 minutes allowed." in html
    assert '<progress class="cap" data-progress max="1800" value="192"' in html
    assert data["display"]["elapsed"] == "Building for 3 min 12 s of the 30 minutes allowed."
    assert (data["elapsed_s"], data["cap_s"]) == (192, 1800)


def test_a_finished_build_says_how_long_it_took(client, alice, benchmark):
    started = timezone.now() - dt.timedelta(hours=1)
    environment = factories.EnvironmentFactory(
        owner=alice,
        benchmark=benchmark,
        build_started_at=started,
        build_finished_at=started + dt.timedelta(minutes=4, seconds=5),
    )
    client.force_login(alice)

    html = client.get(f"/environments/{environment.pk}/").content.decode()

    assert "The last build took 4 min 5 s (the cap is 30 minutes)." in html
    assert "data-finished" in html


def test_policy_errors_are_listed_next_to_the_lines_they_are_about(client, alice, benchmark):
    client.force_login(alice)
    dockerfile = "# base\nFROM evil.example.com/miner:1\nRUN true\nADD https://example.com/x /x\n"

    page = client.post(
        f"/b/{benchmark.slug}/environments/", {"name": "sneaky", "dockerfile_text": dockerfile}
    )

    html = page.content.decode()
    errors = page.context["form"].errors["dockerfile_text"]
    assert [error.split(":")[0] for error in errors] == ["line 2", "line 4"]
    assert "nothing was built" in html
    flagged = re.findall(r'<li value="(\d+)" class="flagged"><code>([^<]*)</code>', html)
    assert flagged == [
        ("2", "FROM evil.example.com/miner:1"),
        ("4", "ADD https://example.com/x /x"),
    ]
    assert '<li value="3"><code>RUN true</code></li>' in html
    assert not Environment.objects.exists()


def test_the_page_counts_the_places_kept(client, alice, benchmark):
    factories.EnvironmentFactory(owner=alice, benchmark=benchmark)
    client.force_login(alice)

    html = client.get(f"/b/{benchmark.slug}/environments/").content.decode()

    assert "You keep 1 of 2 places" in re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", html))


def test_no_new_environment_once_the_benchmark_has_closed(client, alice, db):
    closed = factories.BenchmarkFactory(
        opens_at=timezone.now() - dt.timedelta(days=9),
        closes_at=timezone.now() - dt.timedelta(days=1),
    )
    client.force_login(alice)

    html = client.get(f"/b/{closed.slug}/environments/").content.decode()

    assert "no new environments are accepted" in html
    assert 'name="dockerfile_text"' not in html
