"""A metered-estimation benchmark refuses every timed-only path (portal/contests/kinds.py):
creating or rebuilding an environment, a timed upload (official or practice), the
Dockerfile check, the timed sandbox and its supervisor, and the timed nominations; through
the services, the API, the pages and the client. Each refusal is ``invalid_parameter``
with the rule's own words, and nothing is created, queued or charged; the same paths still
serve a timed benchmark."""

from __future__ import annotations

import html
import io
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from portal.accounts.models import ApiToken
from portal.contests.kinds import TimedPath, timed_path_check
from portal.contests.models import Benchmark
from portal.core import errors, storage
from portal.environments import services as environments
from portal.environments.models import Environment, EnvironmentEvent
from portal.standings.models import Nomination
from portal.standings.nominations import nominations_of, nominations_set
from portal.submissions.intake import submission_accept
from portal.submissions.models import AttemptLedger, Submission
from tests import factories
from tests.cli.conftest import Podium, config_dir, podium, server, sign_in  # noqa: F401
from tests.web.boards import official_run

SLUG = "demo-whest"
HEAD = f"{SLUG} is a metered-estimation benchmark: "
DOCKERFILE = "FROM localhost/podium/busybox:1\nRUN true\n"
ENTER = f"POST /api/v1/benchmarks/{SLUG}/estimation/entries/"
PATHS: tuple[TimedPath, ...] = (
    "environment",
    "submission",
    "dockerfile_check",
    "sandbox",
    "nomination",
)

Client = Callable[[Any], APIClient]


def _words(path: TimedPath, benchmark: Benchmark) -> str:
    """The rule's refusal of ``path`` on ``benchmark``, word for word."""
    with pytest.raises(errors.InvalidParameter) as refused:
        timed_path_check(benchmark, path)
    return refused.value.detail


@pytest.fixture
def contest() -> Any:
    return factories.ContestFactory()


@pytest.fixture
def timed(db: None, contest: Any) -> Benchmark:
    """The contest's first phase: a timed leaderboard, with both cohorts."""
    benchmark = factories.BenchmarkFactory(contest=contest, phase_order=1)
    factories.cohorts(benchmark)
    return benchmark


@pytest.fixture
def whest(db: None, contest: Any, timed: Benchmark) -> Benchmark:
    """The contest's second phase, ``demo-whest``: metered estimation, open, with its rules
    and (so that no ``no_cohort`` hides the refusal) both timed cohorts as rows."""
    benchmark = factories.PhaseRulesFactory(
        benchmark__slug=SLUG, benchmark__contest=contest, benchmark__phase_order=2
    ).benchmark
    factories.cohorts(benchmark)
    return benchmark


@pytest.fixture
def carried(alice: Any, timed: Benchmark) -> Environment:
    """Alice's ready environment on the timed first phase, which carries over to the
    second (same hardware): the one way a timed upload could name an environment there."""
    return factories.EnvironmentFactory(
        owner=alice, benchmark=timed, image_digest="sha256:" + "e" * 64
    )


@pytest.fixture
def client_for(db: None) -> Client:
    def make(user: Any) -> APIClient:
        token = ApiToken.objects.create(user=user, label="tests")
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
        return client

    return make


def _source(tmp_path: Path) -> Path:
    """A valid timed source archive (executable ``run``, ``build.sh``)."""
    path = tmp_path / "source.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for name, data, mode in (("run", b"#!/bin/sh\nexit 0\n", 0o755), ("build.sh", b"", 0o644)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            archive.addfile(info, io.BytesIO(data))
    return path


def _nothing_done(sent: list[tuple[str, tuple[Any, ...]]]) -> None:
    """No environment, submission, charge or nomination, nothing stored, nothing queued."""
    assert not Environment.objects.exclude(status=Environment.READY).exists()
    assert not Submission.objects.exists()
    assert not AttemptLedger.objects.exists()
    assert not Nomination.objects.exists()
    assert not any(storage.data_dir().glob("environments/*/Dockerfile"))
    assert not any(storage.data_dir().glob("submissions/*"))
    assert sent == []


def _refused(response: Any, words: str, status: int = 400) -> None:
    assert response.status_code == status, response.content
    assert response.json() == {"code": "invalid_parameter", "detail": words}


# The rule -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", PATHS)
def test_the_rule_refuses_each_timed_path_on_an_estimation_benchmark_only(
    whest: Benchmark, timed: Benchmark, path: TimedPath
) -> None:
    words = _words(path, whest)

    assert words.startswith(HEAD)
    assert "/estimation/" in words  # says where to go instead
    assert errors.InvalidParameter.code == "invalid_parameter"
    timed_path_check(timed, path)  # a leaderboard passes
    timed_path_check(factories.BenchmarkFactory(kind=Benchmark.CAMPAIGN), path)


def test_the_words_say_why_and_what_to_do_instead(whest: Benchmark) -> None:
    environment = _words("environment", whest)
    assert environment.startswith(f"{HEAD}it has no environments")
    assert ENTER in environment and f"`podium submit {SLUG} submission.tar.gz`" in environment
    assert f"/b/{SLUG}/" in environment and environment.endswith("Nothing was charged.")
    submission = _words("submission", whest)
    assert "no timed submissions, official or practice" in submission and ENTER in submission
    check = _words("dockerfile_check", whest)
    assert "no Dockerfile to check" in check and "`podium validate submission.tar.gz`" in check
    sandbox = _words("sandbox", whest)
    assert f"GET /api/v1/benchmarks/{SLUG}/estimation/" in sandbox
    assert f"`podium suite {SLUG} -o DIR`" in sandbox
    nomination = _words("nomination", whest)
    assert "POST /api/v1/estimation/entries/ENTRY_ID/nomination/" in nomination
    assert "`podium nominate ENTRY_ID`" in nomination


# The services ---------------------------------------------------------------------------


def test_no_environment_is_created(whest: Benchmark, alice: Any, sent: list[Any]) -> None:
    with pytest.raises(errors.InvalidParameter) as refused:
        environments.environment_create(
            owner=alice, benchmark=whest, name="cuda", dockerfile_text=DOCKERFILE
        )

    assert refused.value.detail == _words("environment", whest)
    _nothing_done(sent)


def test_an_environment_made_before_the_rule_is_never_rebuilt(
    whest: Benchmark, alice: Any, sent: list[Any]
) -> None:
    failed = factories.EnvironmentFactory(
        owner=alice, benchmark=whest, status=Environment.FAILED, failure_reason="no"
    )

    with pytest.raises(errors.InvalidParameter) as refused:
        environments.environment_rebuild(environment=failed)

    assert refused.value.detail == _words("environment", whest)
    failed.refresh_from_db()
    assert (failed.status, failed.failure_reason) == (Environment.FAILED, "no")
    assert not EnvironmentEvent.objects.filter(environment=failed).exists()
    assert sent == []


@pytest.mark.parametrize("kind", [Submission.OFFICIAL, Submission.PRACTICE])
def test_no_timed_upload_is_accepted_even_with_a_carried_over_environment(
    whest: Benchmark,
    alice: Any,
    carried: Environment,
    kind: str,
    tmp_path: Path,
    sent: list[Any],
) -> None:
    with pytest.raises(errors.InvalidParameter) as refused:
        submission_accept(
            entrant=alice,
            benchmark=whest,
            environment=carried,
            source_file=_source(tmp_path),
            source_name="source.tar.gz",
            kind=kind,
        )

    assert refused.value.detail == _words("submission", whest)
    _nothing_done(sent)


def test_the_carried_over_environment_still_serves_its_own_timed_phase(
    timed: Benchmark, alice: Any, carried: Environment, tmp_path: Path
) -> None:
    submission = submission_accept(
        entrant=alice,
        benchmark=timed,
        environment=carried,
        source_file=_source(tmp_path),
        source_name="source.tar.gz",
    )

    assert submission.status == Submission.ACCEPTED
    assert AttemptLedger.objects.filter(submission=submission).count() == 1


def test_there_are_no_timed_nominations(whest: Benchmark, alice: Any, sent: list[Any]) -> None:
    for call in (
        lambda: nominations_of(whest, alice),
        lambda: nominations_set(entrant=alice, benchmark=whest, submission_ids=[]),
    ):
        with pytest.raises(errors.InvalidParameter) as refused:
            call()
        assert refused.value.detail == _words("nomination", whest)
    _nothing_done(sent)


# The API --------------------------------------------------------------------------------


def _create_environment(client: APIClient, benchmark: Benchmark) -> Any:
    payload = {"name": "cuda", "dockerfile": SimpleUploadedFile("Dockerfile", DOCKERFILE.encode())}
    url = f"/api/v1/benchmarks/{benchmark.slug}/environments/"
    return client.post(url, payload, format="multipart")


def test_the_api_creates_no_environment(
    whest: Benchmark,
    timed: Benchmark,
    alice: Any,
    client_for: Client,
    sent: list[Any],
    django_capture_on_commit_callbacks: Any,
) -> None:
    client = client_for(alice)

    _refused(_create_environment(client, whest), _words("environment", whest))
    _nothing_done(sent)
    with django_capture_on_commit_callbacks(execute=True):
        assert _create_environment(client, timed).status_code == 201
    assert len(sent) == 1


@pytest.mark.parametrize("kind", [Submission.OFFICIAL, Submission.PRACTICE])
def test_the_api_accepts_no_timed_upload(
    whest: Benchmark,
    alice: Any,
    carried: Environment,
    client_for: Client,
    kind: str,
    tmp_path: Path,
    sent: list[Any],
) -> None:
    with _source(tmp_path).open("rb") as source:
        response = client_for(alice).post(
            f"/api/v1/benchmarks/{SLUG}/submissions/",
            {"environment": carried.pk, "source": source, "kind": kind},
            format="multipart",
        )

    _refused(response, _words("submission", whest))
    _nothing_done(sent)


def test_the_api_upload_is_refused_before_its_environment_is_looked_up(
    whest: Benchmark, alice: Any, client_for: Client, tmp_path: Path, sent: list[Any]
) -> None:
    """Not a 404 for the environment an estimation benchmark cannot have: the reason."""
    with _source(tmp_path).open("rb") as source:
        response = client_for(alice).post(
            f"/api/v1/benchmarks/{SLUG}/submissions/",
            {"environment": 999_999, "source": source},
            format="multipart",
        )

    _refused(response, _words("submission", whest))
    _nothing_done(sent)


def test_the_api_checks_no_dockerfile(
    whest: Benchmark, timed: Benchmark, alice: Any, client_for: Client
) -> None:
    client = client_for(alice)

    def check(benchmark: Benchmark) -> Any:
        url = f"/api/v1/benchmarks/{benchmark.slug}/dockerfile-check/"
        return client.post(url, {"dockerfile": DOCKERFILE}, format="json")

    _refused(check(whest), _words("dockerfile_check", whest))
    assert check(timed).json()["ok"] is True


def test_the_api_hands_out_no_timed_sandbox(
    whest: Benchmark, timed: Benchmark, alice: Any, client_for: Client
) -> None:
    client = client_for(alice)

    for rest in ("sandbox/", "sandbox/supervisor"):
        _refused(client.get(f"/api/v1/benchmarks/{SLUG}/{rest}"), _words("sandbox", whest))
    assert client.get(f"/api/v1/benchmarks/{timed.slug}/sandbox/").status_code == 200


def test_the_api_has_no_timed_nominations(
    whest: Benchmark, timed: Benchmark, alice: Any, client_for: Client, sent: list[Any]
) -> None:
    client = client_for(alice)
    url = f"/api/v1/benchmarks/{SLUG}/nominations/"
    words = _words("nomination", whest)

    _refused(client.get(url), words)
    _refused(client.put(url, {"submission_ids": []}, format="json"), words)
    _nothing_done(sent)
    passed = official_run(timed, alice, 100).submission
    answer = client.put(
        f"/api/v1/benchmarks/{timed.slug}/nominations/",
        {"submission_ids": [passed.pk]},
        format="json",
    )
    assert answer.status_code == 200 and answer.json()["nominated"] == [passed.pk]


# The pages ------------------------------------------------------------------------------


def _shows(page: Any, words: str) -> None:
    assert page.status_code == 400
    assert html.escape(words) in page.content.decode()
    assert "<form" not in page.content.decode().split("<main", 1)[1]


def test_the_estimation_page_offers_no_timed_forms(
    whest: Benchmark, client: Any, alice: Any
) -> None:
    client.force_login(alice)

    page = client.get(f"/b/{SLUG}/").content.decode()

    for timed_only in ("environments/", "submissions/", "nominations/"):
        assert f"/b/{SLUG}/{timed_only}" not in page
    assert f"/b/{SLUG}/estimation/entries/" in page  # its own upload form


def test_the_environments_page_shows_the_refusal_and_creates_nothing(
    whest: Benchmark, client: Any, alice: Any, sent: list[Any]
) -> None:
    client.force_login(alice)
    words = _words("environment", whest)

    _shows(client.get(f"/b/{SLUG}/environments/"), words)
    _shows(
        client.post(f"/b/{SLUG}/environments/", {"name": "cuda", "dockerfile_text": DOCKERFILE}),
        words,
    )
    _nothing_done(sent)


def test_the_submissions_page_shows_the_refusal_and_charges_nothing(
    whest: Benchmark,
    client: Any,
    alice: Any,
    carried: Environment,
    tmp_path: Path,
    sent: list[Any],
) -> None:
    client.force_login(alice)
    words = _words("submission", whest)

    _shows(client.get(f"/b/{SLUG}/submissions/"), words)
    with _source(tmp_path).open("rb") as source:
        posted = client.post(
            f"/b/{SLUG}/submissions/",
            {"environment": carried.pk, "kind": "official", "source": source},
        )
    _shows(posted, words)
    _nothing_done(sent)


def test_the_nominations_page_shows_the_refusal(
    whest: Benchmark, client: Any, alice: Any, sent: list[Any]
) -> None:
    client.force_login(alice)
    words = _words("nomination", whest)

    _shows(client.get(f"/b/{SLUG}/nominations/"), words)
    _shows(client.post(f"/b/{SLUG}/nominations/", {"submission": ["1"]}), words)
    _nothing_done(sent)


def test_the_timed_pages_still_offer_their_forms_on_a_timed_benchmark(
    timed: Benchmark, client: Any, alice: Any
) -> None:
    client.force_login(alice)

    for rest in ("environments/", "submissions/", "nominations/"):
        assert client.get(f"/b/{timed.slug}/{rest}").status_code == 200


# The client -----------------------------------------------------------------------------


def test_the_timed_commands_print_the_refusal(
    whest: Benchmark,
    server: str,  # noqa: F811
    alice: Any,
    podium: Podium,  # noqa: F811
    sign_in: Callable[[Any], str],  # noqa: F811
    tmp_path: Path,
    sent: list[Any],
) -> None:
    sign_in(alice)
    folder = tmp_path / "kit"
    folder.mkdir()
    (folder / "Dockerfile").write_text(DOCKERFILE)
    (folder / "run").write_text("#!/bin/sh\nexit 0\n")
    (folder / "run").chmod(0o755)
    kit = str(folder)

    for argv, path in (
        (("env", "create", SLUG, str(folder / "Dockerfile")), "environment"),
        (("nominations", SLUG), "nomination"),
        (("nominate", SLUG, "1"), "nomination"),
    ):
        result = podium(*argv)
        assert result.code == 2, (argv, result.out, result.err)
        assert result.err.strip() == f"podium: Refused: {_words(path, whest)}", argv
    # `run --local` grades an estimator's tarball here instead (tests/cli/
    # test_estimation_local.py); a timed entry's folder is refused before anything runs.
    # `validate BENCHMARK FOLDER` says so before packing, with a Dockerfile or without one
    # (where the server's Dockerfile check would never be asked).
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "run").write_text("#!/bin/sh\nexit 0\n")
    for entry in (kit, str(bare)):
        checked = podium("validate", SLUG, entry)
        assert checked.code == 2
        assert "takes no entry folder" in checked.err and "validate ARCHIVE" in checked.err
    local = podium("run", "--local", SLUG, kit)
    assert local.code == 2
    assert "a metered-estimation phase grades the tarball `whest package" in local.err
    _nothing_done(sent)
