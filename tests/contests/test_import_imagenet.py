"""``import_cohort --imagenet-val``: both cohorts drawn from the validation JPEGs.

The folder here has the real set's shape at a small size: 60 JPEGs named like the
50,000 (``ILSVRC2012_val_00000001.JPEG`` ...), 20 official members and 5 practice ones.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import shutil
import tarfile
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from PIL import Image
from rest_framework.test import APIClient

from portal.accounts.models import ApiToken
from portal.audit.models import AuditEvent
from portal.contests.cohorts import cohort_change, cohort_path
from portal.contests.models import Benchmark, Cohort
from portal.submissions.models import Run, Submission
from tests import factories

VAL_COUNT = 60
SEED = "4f1c9a0e7b2d5c8e1f3a6b9d0c2e4f7a8b1d3e5f7a9c0b2d4e6f8a1c3e5b7d9f"
OTHER_SEED = "b7e2d9c4a1f6e3b8d5c2a9f4e1b6d3c8a5f2e9b4d1c6a3f8e5b2d7c4a9f6e3b1"
PRACTICE_SEED = "demo-practice-seed"


def val_name(number: int) -> str:
    return f"ILSVRC2012_val_{number:08d}.JPEG"


def reference_class(number: int) -> int:
    return (number * 37) % 1000


@pytest.fixture
def val_dir(tmp_path: Path) -> Path:
    """60 distinct tiny JPEGs with the validation set's names."""
    folder = tmp_path / "val"
    folder.mkdir()
    for number in range(1, VAL_COUNT + 1):
        color = (number * 4 % 256, number * 9 % 256, number * 13 % 256)
        Image.new("RGB", (8, 8), color).save(folder / val_name(number), "JPEG")
    (folder / "README.txt").write_text("not an image: ignored\n")
    return folder


@pytest.fixture
def reference(tmp_path: Path) -> Path:
    """The bare format: one class per line, in file-name order."""
    path = tmp_path / "reference.txt"
    path.write_text("".join(f"{reference_class(n)}\n" for n in range(1, VAL_COUNT + 1)))
    return path


@pytest.fixture
def seed_file(tmp_path: Path) -> Path:
    path = tmp_path / "seed.txt"
    path.write_text(SEED + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture
def bench(db: None) -> Benchmark:
    return factories.BenchmarkFactory.create(slug="eva", cohort_size=20, pass_min_matches=20)


def run_import(*arguments: str, **paths: Path) -> tuple[str, str]:
    """Run the command with the small sizes; keyword paths override the default options."""
    options = {
        "benchmark": "eva",
        "official-count": "20",
        "practice-count": "5",
        "practice-seed": PRACTICE_SEED,
        "val-count": str(VAL_COUNT),
    }
    options.update({name.replace("_", "-"): str(value) for name, value in paths.items()})
    out, err = StringIO(), StringIO()
    call_command(
        "import_cohort",
        *[f"--{name}={value}" for name, value in options.items()],
        *arguments,
        stdout=out,
        stderr=err,
    )
    return out.getvalue(), err.getvalue()


def import_default(val_dir: Path, reference: Path, seed_file: Path) -> tuple[str, str]:
    return run_import(imagenet_val=val_dir, reference=reference, seed_file=seed_file)


def members(kind: str) -> dict[str, int]:
    cohort = Cohort.objects.get(benchmark__slug="eva", kind=kind)
    return dict(cohort.items.values_list("canonical_name", "reference_class"))


def expected_draw(seed: str, count: int) -> list[str]:
    """The documented draw, recomputed here: the smallest HMAC-SHA256(seed, name)."""
    names = [val_name(n) for n in range(1, VAL_COUNT + 1)]
    ranked = sorted(names, key=lambda n: hmac.new(seed.encode(), n.encode(), "sha256").digest())
    return sorted(ranked[:count])


def test_it_draws_both_cohorts_with_their_reference_classes(
    bench, val_dir, reference, seed_file
) -> None:
    out, _ = import_default(val_dir, reference, seed_file)

    official, practice = members("official"), members("practice")
    assert sorted(official) == expected_draw(SEED, 20)
    assert sorted(practice) == expected_draw(PRACTICE_SEED, 5)
    for name, class_id in {**official, **practice}.items():
        assert class_id == reference_class(int(name[15:23]))
    assert "official: 20 images" in out
    assert f"practice: 5 images, drawn with the public seed {PRACTICE_SEED!r}" in out


def test_it_records_each_members_content_hash(bench, val_dir, reference, seed_file) -> None:
    import_default(val_dir, reference, seed_file)

    for cohort in Cohort.objects.filter(benchmark=bench):
        for item in cohort.items.all():
            source = (val_dir / item.canonical_name).read_bytes()
            assert item.sha256 == hashlib.sha256(source).hexdigest()
            assert cohort_path(item).read_bytes() == source


def test_the_same_seed_draws_the_same_cohort(bench, val_dir, reference, seed_file) -> None:
    import_default(val_dir, reference, seed_file)
    first = {kind: members(kind) for kind in ("official", "practice")}
    first_ids = set(Cohort.objects.values_list("pk", flat=True))

    import_default(val_dir, reference, seed_file)

    assert {kind: members(kind) for kind in ("official", "practice")} == first
    assert set(Cohort.objects.values_list("pk", flat=True)).isdisjoint(first_ids)


def test_another_private_seed_draws_another_official_cohort_only(
    bench, val_dir, reference, seed_file, tmp_path
) -> None:
    import_default(val_dir, reference, seed_file)
    official, practice = members("official"), members("practice")
    other_seed = tmp_path / "other-seed.txt"
    other_seed.write_text(OTHER_SEED)

    run_import(imagenet_val=val_dir, reference=reference, seed_file=other_seed)

    assert members("official") != official
    assert sorted(members("official")) == expected_draw(OTHER_SEED, 20)
    # The practice draw depends on its public seed alone: it says nothing about the
    # private one, so an overlap between the two cohorts is incidental.
    assert members("practice") == practice


def test_the_practice_draw_is_independent_of_the_official_one(
    bench, val_dir, reference, seed_file
) -> None:
    import_default(val_dir, reference, seed_file)
    official = members("official")

    run_import(
        imagenet_val=val_dir, reference=reference, seed_file=seed_file, practice_seed="another"
    )

    assert members("official") == official
    assert sorted(members("practice")) == expected_draw("another", 5)


def test_both_reference_formats_give_the_same_cohorts(
    bench, val_dir, reference, seed_file, tmp_path
) -> None:
    import_default(val_dir, reference, seed_file)
    bare = {kind: members(kind) for kind in ("official", "practice")}
    named = tmp_path / "named.txt"
    lines = [f"{val_name(n)}\t{reference_class(n)}\n" for n in range(VAL_COUNT, 0, -1)]
    lines[3] = lines[3].replace("\t", "  ")  # spaces work as well as a tab
    named.write_text("".join(lines))

    run_import(imagenet_val=val_dir, reference=named, seed_file=seed_file)

    assert {kind: members(kind) for kind in ("official", "practice")} == bare


def test_files_in_class_subfolders_keep_their_bare_names(
    bench, val_dir, reference, seed_file
) -> None:
    for number in range(1, VAL_COUNT + 1):
        synset = val_dir / f"n{reference_class(number):08d}"
        synset.mkdir(exist_ok=True)
        (val_dir / val_name(number)).rename(synset / val_name(number))

    import_default(val_dir, reference, seed_file)

    assert sorted(members("official")) == expected_draw(SEED, 20)


def api_client(user: Any) -> APIClient:
    client = APIClient()
    token = ApiToken.objects.create(user=user, label="tests")
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


def test_no_entrant_can_fetch_the_seed_or_the_official_members(
    bench, val_dir, reference, seed_file, alice
) -> None:
    out, err = import_default(val_dir, reference, seed_file)
    official, practice = members("official"), members("practice")
    official_only = set(official) - set(practice)
    assert official_only

    api = api_client(alice)
    fetched = {
        "list": api.get("/api/v1/benchmarks/").content,
        "detail": api.get("/api/v1/benchmarks/eva/").content,
        "practice": api.get("/api/v1/benchmarks/eva/practice/").content,
        "leaderboard": api.get("/api/v1/benchmarks/eva/leaderboard/").content,
    }
    download = api.get("/api/v1/benchmarks/eva/practice/download")
    assert download.status_code == 200
    with tarfile.open(fileobj=io.BytesIO(b"".join(download.streaming_content))) as archive:
        answers = archive.extractfile("answers.tsv").read().decode()
        archived = {name: archive.extractfile(name).read() for name in archive.getnames()}
    web = Client()
    web.force_login(alice)
    fetched["page"] = web.get("/b/eva/").content
    fetched["archive"] = b"".join(archived.values())

    # The practice download holds the practice members and nothing else.
    assert dict(line.split("\t") for line in answers.splitlines()) == {
        name: str(class_id) for name, class_id in practice.items()
    }
    assert sorted(archived) == sorted(["answers.tsv", *(f"images/{name}" for name in practice)])
    # No seed and no official-only member anywhere: API, web page, archive, output.
    seed_sha256 = hashlib.sha256(SEED.encode()).hexdigest()
    for where, body in {**fetched, "stdout": out.encode(), "stderr": err.encode()}.items():
        assert SEED.encode() not in body, where
        assert seed_sha256.encode() not in body, where
        for name in official_only:
            assert name.encode() not in body, (where, name)
    # Staff keep a commitment to the seed in the audit trail, never the seed.
    event = AuditEvent.objects.get(action="cohort.import", details__kind="official")
    assert event.details["seed_sha256"] == seed_sha256
    assert SEED not in str(event.details)
    assert AuditEvent.objects.get(details__kind="practice").details["seed"] == PRACTICE_SEED


def test_the_practice_seed_is_published_so_anyone_can_redo_the_draw(
    bench, val_dir, reference, seed_file, alice
) -> None:
    import_default(val_dir, reference, seed_file)

    practice = api_client(alice).get("/api/v1/benchmarks/eva/practice/").json()
    assert practice["seed"] == PRACTICE_SEED
    assert sorted(item["path"] for item in practice["answers"]) == expected_draw(
        practice["seed"], practice["count"]
    )
    page = Client().get("/b/eva/").content.decode()
    assert f"public seed <code>{PRACTICE_SEED}</code>" in page
    assert Cohort.objects.get(benchmark=bench, kind=Cohort.OFFICIAL).public_seed == ""


def test_a_practice_cohort_moved_to_official_loses_its_public_seed(
    bench, val_dir, reference, seed_file, staff
) -> None:
    import_default(val_dir, reference, seed_file)
    Cohort.objects.filter(benchmark=bench, kind=Cohort.OFFICIAL).delete()
    practice = Cohort.objects.get(benchmark=bench, kind=Cohort.PRACTICE)

    moved = cohort_change(cohort=practice, benchmark=bench, kind=Cohort.OFFICIAL, actor=staff)

    assert (moved.kind, moved.public_seed) == (Cohort.OFFICIAL, "")
    assert PRACTICE_SEED not in Client().get("/b/eva/").content.decode()


def one_line_refusal(match: str, **paths: Path) -> None:
    with pytest.raises(CommandError, match=match) as caught:
        run_import(**paths)
    message = str(caught.value)
    assert "\n" not in message
    assert SEED not in message


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("missing_image", "lacks 1 of the 60 validation images, first ILSVRC2012_val_00000017"),
        ("extra_image", "ILSVRC2012_val_00000061.JPEG is not one of the 60 validation images"),
        ("duplicate_image", "ILSVRC2012_val_00000005.JPEG is in the folder twice"),
        ("short_reference", "reference.txt gives 59 classes; the folder has 60"),
        ("long_reference", "reference.txt gives 61 classes"),
        ("class_1000", r"reference.txt line 7: class 1000 is outside \[0, 999\]"),
        ("class_negative", "reference.txt line 7: class -1 is outside"),
        ("class_text", "reference.txt line 7: class 'cat' is not an integer"),
        ("duplicate_name", "line 2: ILSVRC2012_val_00000001.JPEG is already listed on line 1"),
        ("unknown_name", "line 1: 'ILSVRC2012_val_00000099.JPEG' is not a validation image"),
        ("mixed_formats", "line 2: mixes '<class>' and '<file name> <class>' lines"),
    ],
)
def test_bad_input_is_refused_and_imports_nothing(
    bench, val_dir, reference, seed_file, data_dir, damage, message
) -> None:
    lines = reference.read_text().splitlines(keepends=True)
    named = [f"{val_name(n)} {reference_class(n)}\n" for n in range(1, VAL_COUNT + 1)]
    if damage == "missing_image":
        (val_dir / val_name(17)).unlink()
    elif damage == "extra_image":
        shutil.copy(val_dir / val_name(1), val_dir / val_name(61))
    elif damage == "duplicate_image":
        (val_dir / "again").mkdir()
        shutil.copy(val_dir / val_name(5), val_dir / "again" / val_name(5))
    elif damage == "short_reference":
        reference.write_text("".join(lines[:-1]))
    elif damage == "long_reference":
        reference.write_text("".join([*lines, "5\n"]))
    elif damage.startswith("class_"):
        lines[6] = {"class_1000": "1000\n", "class_negative": "-1\n", "class_text": "cat\n"}[damage]
        reference.write_text("".join(lines))
    elif damage == "duplicate_name":
        reference.write_text("".join([named[0], named[0], *named[2:]]))
    elif damage == "unknown_name":
        reference.write_text("".join([named[0].replace("0001", "0099"), *named[1:]]))
    elif damage == "mixed_formats":
        reference.write_text("".join([named[0], *lines[1:]]))

    one_line_refusal(message, imagenet_val=val_dir, reference=reference, seed_file=seed_file)

    assert not Cohort.objects.exists()
    cohorts_root = data_dir / "cohorts"
    assert not cohorts_root.exists() or not any(cohorts_root.iterdir())


def test_missing_inputs_are_refused(bench, val_dir, reference, seed_file, tmp_path) -> None:
    nowhere = tmp_path / "nowhere"
    one_line_refusal(
        "nowhere is not a folder", imagenet_val=nowhere, reference=reference, seed_file=seed_file
    )
    one_line_refusal(
        "the reference file .*nowhere does not exist",
        imagenet_val=val_dir,
        reference=nowhere,
        seed_file=seed_file,
    )
    one_line_refusal(
        "cannot read the seed file", imagenet_val=val_dir, reference=reference, seed_file=nowhere
    )
    with pytest.raises(CommandError, match="--imagenet-val needs --reference"):
        call_command(
            "import_cohort",
            "--benchmark=eva",
            f"--imagenet-val={val_dir}",
            f"--seed-file={nowhere}",
        )
    assert not Cohort.objects.exists()


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("official_count", "61", "the official cohort cannot have 61 images: the validation set"),
        ("practice_count", "61", "the practice cohort cannot have 61 images"),
        ("official_count", "0", "the official cohort needs at least one image"),
        ("practice_seed", SEED, "the practice seed is published: it must differ"),
        ("val_count", "50", r"ILSVRC2012_val_000000[56]\d\.JPEG is not one of the 50 "),
    ],
)
def test_impossible_counts_and_seeds_are_refused(
    bench, val_dir, reference, seed_file, option, value, message
) -> None:
    with pytest.raises(CommandError, match=message) as caught:
        run_import(
            f"--{option.replace('_', '-')}={value}",
            imagenet_val=val_dir,
            reference=reference,
            seed_file=seed_file,
        )
    assert "\n" not in str(caught.value)
    assert not Cohort.objects.exists()


@pytest.mark.parametrize(
    ("seed", "message"),
    [("short", "the seed has 5 characters; a private seed needs at least 32"), ("ab" * 20, "")],
)
def test_a_weak_seed_is_refused_without_quoting_it(
    bench, val_dir, reference, tmp_path, seed, message
) -> None:
    weak = tmp_path / "weak.txt"
    weak.write_text(seed)

    with pytest.raises(CommandError, match=message or "too few characters") as caught:
        run_import(imagenet_val=val_dir, reference=reference, seed_file=weak)

    assert seed not in str(caught.value)
    assert not Cohort.objects.exists()


def test_the_two_modes_do_not_mix(bench, val_dir, reference, seed_file) -> None:
    with pytest.raises(CommandError, match="--kind cannot go with --imagenet-val"):
        run_import(
            "--kind=official", imagenet_val=val_dir, reference=reference, seed_file=seed_file
        )
    with pytest.raises(CommandError, match="--reference, --official-count"):
        call_command(
            "import_cohort",
            "--benchmark=eva",
            "--kind=official",
            f"--images={val_dir}",
            f"--answers={reference}",
            f"--reference={reference}",
            "--official-count=3",
        )


def test_a_cohort_used_by_a_run_keeps_both_as_they_are(
    bench, val_dir, reference, seed_file, alice, tmp_path
) -> None:
    import_default(val_dir, reference, seed_file)
    official = Cohort.objects.get(benchmark=bench, kind="official")
    practice = Cohort.objects.get(benchmark=bench, kind="practice")
    environment = factories.EnvironmentFactory.create(owner=alice, benchmark=bench)
    submission = Submission.objects.create(
        entrant=alice,
        benchmark=bench,
        environment=environment,
        submitted_at=official.created_at,
        source_name="entry.tar.gz",
        source_format="tar.gz",
        source_sha256="0" * 64,
        source_bytes=1,
    )
    Run.objects.create(submission=submission, cohort=practice)
    other_seed = tmp_path / "other-seed.txt"
    other_seed.write_text(OTHER_SEED)

    one_line_refusal(
        "the practice cohort of eva has been used by a run",
        imagenet_val=val_dir,
        reference=reference,
        seed_file=other_seed,
    )

    assert set(Cohort.objects.filter(benchmark=bench)) == {official, practice}
    assert official.items.count() == 20
    assert all(cohort_path(item).is_file() for item in official.items.all())
