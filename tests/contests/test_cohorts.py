"""Importing cohorts (service and commands) and seeding the demo and flagship benchmarks."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import stat
from io import StringIO
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from portal.contests import democohort
from portal.contests.cohorts import cohort_import, cohort_path, read_answers_file
from portal.contests.models import Benchmark, Cohort, CohortItem
from portal.core import storage
from portal.standings.rerun import final_cohort
from portal.submissions.models import Run, Submission
from tests import factories


@pytest.fixture
def bench(db: None) -> Benchmark:
    return factories.BenchmarkFactory.create(slug="cats")


@pytest.fixture
def images(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[tuple[str, int]]]:
    """A generated cohort of 30 images (in two subfolders) outside the data folder."""
    monkeypatch.setattr(democohort, "FOLDER_SIZE", 20)
    folder = tmp_path / "incoming"
    return folder, democohort.generate(folder, 30, seed=11)


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_answers(path: Path, answers: list[tuple[str, int]]) -> Path:
    path.write_text("".join(f"{name}\t{class_id}\n" for name, class_id in answers))
    return path


def test_it_copies_hashes_and_orders_the_images(bench, images, data_dir) -> None:
    folder, answers = images

    cohort = cohort_import(benchmark=bench, kind="official", images_dir=folder, answers=answers)

    items = list(cohort.items.order_by("position"))
    assert [item.position for item in items] == list(range(30))
    assert {(item.canonical_name, item.reference_class) for item in items} == set(answers)
    for item in items:
        stored = cohort_path(item)
        assert stored == data_dir / "cohorts" / str(cohort.pk) / item.canonical_name
        assert item.sha256 == sha256_of(stored) == sha256_of(folder / item.canonical_name)
        assert stat.S_IMODE(stored.stat().st_mode) == 0o644
        assert stat.S_IMODE(stored.parent.stat().st_mode) == 0o755
    assert stat.S_IMODE(storage.cohort_dir(cohort.pk).stat().st_mode) == 0o755
    # The scoring order is shuffled, not the answers' (name) order ...
    assert [item.canonical_name for item in items] != [name for name, _ in answers]
    # ... and nothing is left in the staging area.
    assert sorted(p.name for p in (data_dir / "cohorts").iterdir()) == [str(cohort.pk)]


def test_the_order_follows_the_content_not_the_names_or_listing(bench, images, tmp_path) -> None:
    folder, answers = images
    first = cohort_import(benchmark=bench, kind="official", images_dir=folder, answers=answers)
    first_order = list(first.items.order_by("position").values_list("sha256", flat=True))

    renamed = tmp_path / "renamed"
    renamed.mkdir()
    renamed_answers = []
    for index, (name, class_id) in enumerate(answers):
        os.link(folder / name, renamed / f"img{index:03d}.jpg")
        renamed_answers.append((f"img{index:03d}.jpg", class_id))
    renamed_answers.reverse()
    other = factories.BenchmarkFactory.create(slug="dogs")
    second = cohort_import(
        benchmark=other, kind="practice", images_dir=renamed, answers=renamed_answers
    )

    assert list(second.items.order_by("position").values_list("sha256", flat=True)) == (first_order)


def test_only_the_listed_images_are_imported(bench, images) -> None:
    folder, answers = images

    cohort = cohort_import(
        benchmark=bench, kind="practice", images_dir=folder, answers=answers[:10]
    )

    assert cohort.items.count() == 10
    stored = sorted(
        str(path.relative_to(storage.cohort_dir(cohort.pk)))
        for path in storage.cohort_dir(cohort.pk).rglob("*.jpg")
    )
    assert stored == sorted(name for name, _ in answers[:10])


def test_importing_again_replaces_the_cohort_and_its_files(
    bench, images, django_capture_on_commit_callbacks
) -> None:
    folder, answers = images
    old = cohort_import(benchmark=bench, kind="official", images_dir=folder, answers=answers)
    old_dir = storage.cohort_dir(old.pk)

    with django_capture_on_commit_callbacks(execute=True):
        new = cohort_import(
            benchmark=bench, kind="official", images_dir=folder, answers=answers[:5]
        )

    assert new.pk != old.pk
    assert list(Cohort.objects.filter(benchmark=bench)) == [new]
    assert not CohortItem.objects.filter(cohort_id=old.pk).exists()
    assert new.items.count() == 5
    assert not old_dir.exists()
    assert storage.cohort_dir(new.pk).is_dir()


def test_the_two_kinds_live_side_by_side(bench, images) -> None:
    folder, answers = images
    official = cohort_import(benchmark=bench, kind="official", images_dir=folder, answers=answers)
    practice = cohort_import(benchmark=bench, kind="practice", images_dir=folder, answers=answers)

    assert set(bench.cohorts.all()) == {official, practice}


def test_a_cohort_used_by_a_run_cannot_be_replaced(bench, images, alice) -> None:
    folder, answers = images
    cohort = cohort_import(benchmark=bench, kind="official", images_dir=folder, answers=answers)
    environment = factories.EnvironmentFactory.create(owner=alice, benchmark=bench)
    submission = Submission.objects.create(
        entrant=alice,
        benchmark=bench,
        environment=environment,
        submitted_at=timezone.now(),
        source_name="entry.tar.gz",
        source_format="tar.gz",
        source_sha256="0" * 64,
        source_bytes=1,
    )
    Run.objects.create(submission=submission, cohort=cohort)

    with pytest.raises(ValueError, match="used by a run"):
        cohort_import(benchmark=bench, kind="official", images_dir=folder, answers=answers[:3])

    assert list(Cohort.objects.filter(benchmark=bench)) == [cohort]
    assert cohort.items.count() == 30
    assert all(cohort_path(item).is_file() for item in cohort.items.all())


@pytest.mark.parametrize(
    ("bad_answer", "message"),
    [
        (("missing.jpg", 1), "not a file"),
        (("../outside.jpg", 1), r"'\.\.'"),
        (("/etc/passwd", 1), "absolute"),
        (("escape.jpg", 1), "leads outside"),
        (("part00", 1), "not a file"),
        (("extra.jpg", 1000), r"class 1000 is outside \[0, 999\]"),
    ],
)
def test_bad_input_imports_nothing(bench, images, tmp_path, data_dir, bad_answer, message):
    folder, answers = images
    (tmp_path / "outside.jpg").write_bytes(b"secret")
    (folder / "extra.jpg").write_bytes((folder / answers[0][0]).read_bytes())
    (folder / "escape.jpg").symlink_to(tmp_path / "outside.jpg")

    with pytest.raises(ValueError, match=message):
        cohort_import(
            benchmark=bench, kind="official", images_dir=folder, answers=[*answers, bad_answer]
        )

    assert not Cohort.objects.exists()
    cohorts_root = data_dir / "cohorts"
    assert not cohorts_root.exists() or not any(cohorts_root.iterdir())


def test_a_duplicate_path_or_an_unknown_kind_is_refused(bench, images) -> None:
    folder, answers = images
    with pytest.raises(ValueError, match="listed twice"):
        cohort_import(
            benchmark=bench, kind="official", images_dir=folder, answers=[*answers, answers[0]]
        )
    with pytest.raises(ValueError, match="kind"):
        cohort_import(benchmark=bench, kind="secret", images_dir=folder, answers=answers)
    with pytest.raises(ValueError, match="at least one"):
        cohort_import(benchmark=bench, kind="official", images_dir=folder, answers=[])
    assert not Cohort.objects.exists()


def test_read_answers_file(tmp_path) -> None:
    path = tmp_path / "answers.tsv"
    path.write_text("a/1.jpg\t7\n\nb.jpg\t999\r\nc d.jpg\t 0\n")

    assert read_answers_file(path) == [("a/1.jpg", 7), ("b.jpg", 999), ("c d.jpg", 0)]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("b.jpg 5", "line 3: expected 'relative_path<TAB>class'"),
        ("b.jpg\t5\textra", "line 3: expected"),
        ("b.jpg\tfive", "line 3: class 'five' is not an integer"),
        ("b.jpg\t1000", r"line 3: class 1000 is outside \[0, 999\]"),
        ("b.jpg\t-1", "line 3: class -1 is outside"),
        ("a.jpg\t5", "line 3: 'a.jpg' is already listed on line 1"),
        ("../b.jpg\t5", "line 3: the path has an empty, '.' or '..' component"),
        ("/b.jpg\t5", "line 3: the path is absolute"),
        ("\t5", "line 3: the path is empty"),
    ],
)
def test_read_answers_file_names_the_bad_line(tmp_path, line: str, message: str) -> None:
    path = tmp_path / "answers.tsv"
    path.write_text(f"a.jpg\t1\n\n{line}\nz.jpg\t2\n")

    with pytest.raises(ValueError, match=f"answers.tsv {message}"):
        read_answers_file(path)


def test_import_cohort_command(bench, images, tmp_path) -> None:
    folder, answers = images
    answers_file = write_answers(tmp_path / "answers.tsv", answers)
    out = StringIO()

    call_command(
        "import_cohort",
        "--benchmark=cats",
        "--kind=practice",
        f"--images={folder}",
        f"--answers={answers_file}",
        stdout=out,
    )

    cohort = Cohort.objects.get(benchmark=bench, kind="practice")
    assert cohort.items.count() == 30
    assert "30 images" in out.getvalue()


def test_staff_import_a_final_cohort_which_stays_private(bench, images, tmp_path) -> None:
    folder, answers = images
    answers_file = write_answers(tmp_path / "answers.tsv", answers)

    call_command(
        "import_cohort",
        "--benchmark=cats",
        "--kind=final",
        f"--images={folder}",
        f"--answers={answers_file}",
        stdout=StringIO(),
    )

    final = Cohort.objects.get(benchmark=bench, kind=Cohort.FINAL)
    assert final.items.count() == 30
    assert final_cohort(bench) == final  # the final rerun runs on it, not the official one
    entrant = Client()
    entrant.force_login(factories.UserFactory())
    # Not handed out as practice material: the benchmark still has no practice cohort.
    assert entrant.get(f"/api/v1/benchmarks/{bench.slug}/practice/").status_code == 404
    with pytest.raises(CommandError, match="invalid choice"):
        call_command("import_cohort", "--benchmark=cats", "--kind=secret", f"--images={folder}")


def test_import_cohort_command_reports_errors(bench, images, tmp_path) -> None:
    folder, _answers = images
    answers_file = tmp_path / "answers.tsv"
    answers_file.write_text("part00/val_00000000.jpg\t1\npart00/val_00000001.jpg\n")
    arguments = [f"--images={folder}", f"--answers={answers_file}", "--kind=official"]

    with pytest.raises(CommandError, match="line 2"):
        call_command("import_cohort", "--benchmark=cats", *arguments)
    with pytest.raises(CommandError, match="no benchmark 'nope'"):
        call_command("import_cohort", "--benchmark=nope", *arguments)


def test_seed_demo_creates_both_benchmarks_and_is_idempotent(db, data_dir) -> None:
    call_command(
        "seed_demo",
        "--official-count=40",
        "--practice-count=12",
        "--campaign-count=6",
        stdout=StringIO(),
    )

    demo = Benchmark.objects.get(slug="demo")
    assert demo.title == "Demo: read the digits"
    assert demo.status_at(timezone.now()) == "open"
    assert demo.closes_at - demo.opens_at == dt.timedelta(days=30, minutes=1)
    assert (demo.cohort_size, demo.pass_min_matches) == (40, 40)
    assert demo.allowed_registries == "localhost/podium/\n"
    assert demo.attempts_per_day == 2
    official = demo.cohorts.get(kind="official")
    practice = demo.cohorts.get(kind="practice")
    canaries = demo.cohorts.get(kind="canary")
    assert official.items.count() == 40
    assert practice.items.count() == 12
    assert canaries.items.count() == 20  # as many as a verification of 40 carries
    for item in [*official.items.all(), *canaries.items.all()]:
        data = cohort_path(item).read_bytes()
        assert democohort.decode_class_image(data) == item.reference_class
    # Canaries are images apart from the cohort's.
    assert not set(official.items.values_list("sha256", flat=True)) & set(
        canaries.items.values_list("sha256", flat=True)
    )

    flagship = Benchmark.objects.get(slug="eva02-imagenet1k-v3")
    seoul = ZoneInfo("Asia/Seoul")
    assert flagship.title == "EVA-02 ImageNet-1k inference"
    assert flagship.opens_at == dt.datetime(2026, 8, 10, tzinfo=seoul)
    assert flagship.closes_at == dt.datetime(2026, 8, 31, 18, tzinfo=seoul)
    assert (flagship.cohort_size, flagship.pass_min_matches) == (10000, 9900)
    assert (flagship.attempts_per_day, flagship.attempt_timezone) == (2, "Asia/Seoul")
    assert "9,900" in flagship.description
    assert not flagship.cohorts.exists()

    out = StringIO()
    call_command(
        "seed_demo", "--official-count=40", "--practice-count=12", "--campaign-count=6", stdout=out
    )

    assert set(demo.cohorts.all()) == {official, practice, canaries}
    assert Benchmark.objects.count() == 4  # demo, demo-campaign, demo-whest, the flagship
    assert "in place" in out.getvalue()
    # The estimation demo's suites are asked for once; the second run leaves them be.
    whest = Benchmark.objects.get(slug="demo-whest")
    assert whest.kind == Benchmark.ESTIMATION
    assert (whest.attempts_per_day, whest.attempt_timezone) == (10, "UTC")
    assert whest.estimation_rules.width == 32
    assert sorted(whest.suites.values_list("role", "status")) == [
        ("phase", "generating"),
        ("public", "generating"),
    ]
    assert "generate demo-whest" not in out.getvalue()


def test_seed_demo_leaves_the_flagship_alone_and_resizes_the_demo(db) -> None:
    call_command(
        "seed_demo",
        "--official-count=10",
        "--practice-count=5",
        "--campaign-count=6",
        stdout=StringIO(),
    )
    Benchmark.objects.filter(slug="eva02-imagenet1k-v3").update(attempts_per_day=3)
    official = Cohort.objects.get(benchmark__slug="demo", kind="official")

    call_command(
        "seed_demo",
        "--official-count=20",
        "--practice-count=5",
        "--campaign-count=6",
        stdout=StringIO(),
    )

    assert Benchmark.objects.get(slug="eva02-imagenet1k-v3").attempts_per_day == 3
    demo = Benchmark.objects.get(slug="demo")
    assert (demo.cohort_size, demo.pass_min_matches) == (20, 20)
    resized = demo.cohorts.get(kind="official")
    assert resized.pk != official.pk
    assert resized.items.count() == 20
