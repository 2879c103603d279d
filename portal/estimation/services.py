"""The writes of metered estimation: accepting an entry (the checks before any charge,
then the charge and the grading task in one transaction), what the scoring host records
of a grade, suites (generation requested, progress, ready; import), nominations and the
final rerun.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import shutil
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from podium_policy import archives
from portal.audit.services import audit_record
from portal.contests import rules as contest_rules
from portal.contests.models import Benchmark
from portal.core import errors, jobs, storage
from portal.core.task_names import ESTIMATION_FINAL, ESTIMATION_GRADE, ESTIMATION_SUITE
from portal.environments.services import entrant_check_verified
from portal.estimation import rules
from portal.estimation.models import Entry, FinalScore, PhaseRules, Suite
from portal.teams.locks import lock_identity
from portal.teams.selectors import identity_of

ARCHIVE_FILE = "submission.tar.gz"
_NOT_WHEST_PACKAGE = "An estimator is the .tar.gz that `whest package` makes; this upload is "


def archive_path(entry: Entry) -> Path:
    return storage.entry_dir(entry.pk) / ARCHIVE_FILE


def phase_rules(benchmark: Benchmark) -> PhaseRules:
    """The phase's rules; ``not_found`` for a benchmark that is not an estimation phase."""
    found = PhaseRules.objects.filter(benchmark=benchmark).first()
    if benchmark.kind != Benchmark.ESTIMATION or found is None:
        raise errors.NotFound("This benchmark is not a metered-estimation phase.")
    return found


# The daily allowance --------------------------------------------------------------------


def _charged_today(benchmark: Benchmark, entrant_id: int, now: dt.datetime) -> int:
    """Entries charged today (the benchmark's attempt day: UTC for seed 001's phases) to
    the entrant's team, or to the entrant on their own. A team's count includes what its
    members charged while in it, and what they charged on their own earlier that day. An
    entrant on their own counts what they charged today, or, when more, what a team they
    charged to today did: leaving a team gives no fresh allowance that day."""
    day = contest_rules.attempt_day(now, benchmark.attempt_timezone)
    start, end = contest_rules.day_bounds(day, benchmark.attempt_timezone)
    today = Entry.objects.filter(
        benchmark=benchmark, submitted_at__gte=start, submitted_at__lt=end, refunded=False
    )
    identity = identity_of(benchmark.pk, entrant_id)
    if identity.team_id is None:
        own = today.filter(entrant_id=entrant_id)
        left = own.exclude(team__isnull=True).values_list("team_id", flat=True).distinct()
        return max([own.count(), *(today.filter(team_id=t).count() for t in left)])
    return today.filter(
        Q(team_id=identity.team_id) | Q(team__isnull=True, entrant_id__in=identity.member_ids)
    ).count()


def quota(benchmark: Benchmark, entrant_id: int, now: dt.datetime) -> dict[str, Any]:
    """The day's allowance as the pages and the API show it."""
    used = _charged_today(benchmark, entrant_id, now)
    return {
        "per_day": benchmark.attempts_per_day,
        "used_today": used,
        "remaining_today": contest_rules.remaining_attempts(benchmark.attempts_per_day, used),
        "resets_at": contest_rules.next_reset(now, benchmark.attempt_timezone),
        "timezone": benchmark.attempt_timezone,
    }


def _check_acceptable(*, benchmark: Benchmark, entrant_id: int, now: dt.datetime) -> None:
    window = contest_rules.window_state(now, benchmark.opens_at, benchmark.closes_at)
    if window == "upcoming":
        raise errors.WindowNotOpen(
            f"Uploads open at {benchmark.opens_at.isoformat()}; try again then."
        )
    if window == "closed":
        raise errors.WindowClosed("This benchmark has closed; no uploads are accepted.")
    if not Suite.objects.filter(benchmark=benchmark, role=Suite.PHASE, status=Suite.READY).exists():
        raise errors.NoCohort(
            "This phase has no ready suite of MLPs yet, so entries cannot be graded; nothing "
            "was charged. Try again once the organizers have generated it."
        )
    allowance = quota(benchmark, entrant_id, now)
    if allowance["remaining_today"] <= 0:
        teamed = identity_of(benchmark.pk, entrant_id).team_id is not None
        raise errors.QuotaExhausted(
            f"{'Your team has' if teamed else 'You have'} used all {allowance['per_day']} "
            f"submissions of today ({benchmark.attempt_timezone}); the next one is "
            f"available at {allowance['resets_at'].isoformat()}."
        )


# The archive ----------------------------------------------------------------------------


def check_archive(path: Path) -> str:
    """Check a ``whest package`` tarball before anything is charged; return its
    estimator's ``module.Class``.

    Refused (``invalid_archive``, every problem named): anything but a gzipped tar; an
    archive unsafe to unpack (Podium's own checks: links out, special files, odd names);
    more files or bytes than whestbench's caps (``whestbench.limits``); and whatever
    whestbench's own ``validate_package`` finds (the manifest, its schema and API
    versions, each file's SHA-256, the entrypoint)."""
    from whestbench import limits
    from whestbench.validation import validate_package

    size = path.stat().st_size
    if size > limits.MAX_SUBMISSION_BYTES:
        raise errors.ArchiveTooLarge(
            f"The archive is {size:,} bytes; an estimator may be at most "
            f"{limits.MAX_SUBMISSION_BYTES:,} bytes (whestbench's cap)."
        )
    try:
        fmt = archives.detect_format(path)
    except archives.ArchiveError as exc:
        # A gzip file that holds no tar, or a damaged one, keeps the archive check's words.
        with path.open("rb") as head:
            if head.read(2) == b"\x1f\x8b":
                raise errors.InvalidArchive(str(exc)) from exc
        raise errors.InvalidArchive(_NOT_WHEST_PACKAGE + "not an archive.") from exc
    if fmt != "tar.gz":
        raise errors.InvalidArchive(_NOT_WHEST_PACKAGE + f"a {fmt} archive.")
    try:
        members = archives.inspect_archive(
            path,
            fmt,
            # Folders count as members too; the file cap is whestbench's, checked below.
            max_members=4 * limits.MAX_SUBMISSION_FILES,
            max_unpacked_bytes=limits.MAX_SUBMISSION_BYTES,
            require_entrypoint=False,
        )
    except archives.ArchiveError as exc:
        raise errors.InvalidArchive(str(exc)) from exc
    files = [m for m in members if m.kind == "file" and m.path != "manifest.json"]
    if len(files) > limits.MAX_SUBMISSION_FILES:
        raise errors.InvalidArchive(
            f"The archive has {len(files)} files; whestbench's cap is "
            f"{limits.MAX_SUBMISSION_FILES} (leave files out with .whestignore)."
        )
    checked = validate_package(path)
    if not checked.ok:
        # whestbench names the offending member (``name``; "" or the archive's own path
        # for the whole archive, which is a temporary file of this server: never shown).
        problems = "; ".join(
            (f"{i.name}: {i.message}" if i.name and i.name != str(path) else i.message).replace(
                str(path), "the archive"
            )
            for i in checked.issues
        )
        raise errors.InvalidArchive(f"whest validate-package refused it: {problems}")
    with tarfile.open(path, "r:gz") as tar:
        member = tar.extractfile("manifest.json")
        manifest = json.loads(member.read()) if member is not None else {}
    entry = manifest.get("entrypoint") or {}
    return f"{entry.get('module', '')}.{entry.get('class', '')}"[:200]


def entry_accept(
    *,
    entrant: Any,
    benchmark: Benchmark,
    archive_file: Path,
    archive_name: str,
    now: dt.datetime | None = None,
) -> Entry:
    """Accept an estimator and charge it to the day's allowance of the entrant's team (or
    the entrant's own): the cheap checks (a verified address, the window, a ready suite,
    the allowance), then the archive's, then, holding the entrant's and the team's row
    locks (``lock_identity``), the allowance once more, the entry, its file and its
    grading task. A refusal charges nothing and leaves no file."""
    now = now or timezone.now()
    phase_rules(benchmark)
    entrant_check_verified(entrant=entrant)
    _check_acceptable(benchmark=benchmark, entrant_id=entrant.pk, now=now)
    estimator = check_archive(archive_file)
    sha256 = storage.sha256_file(archive_file)
    dest: Path | None = None
    try:
        with transaction.atomic():
            team = lock_identity(entrant_id=entrant.pk, benchmark=benchmark)
            _check_acceptable(benchmark=benchmark, entrant_id=entrant.pk, now=now)
            entry = Entry.objects.create(
                benchmark=benchmark,
                entrant=entrant,
                team=team,
                submitted_at=now,
                archive_name=Path(archive_name).name[:255] or ARCHIVE_FILE,
                archive_sha256=sha256,
                archive_bytes=archive_file.stat().st_size,
                estimator_class=estimator,
            )
            dest = archive_path(entry)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(archive_file, dest)
            jobs.enqueue(
                ESTIMATION_GRADE,
                entry.pk,
                queue=jobs.scoring_queue(benchmark.hardware_class_id),
            )
    except BaseException:
        if dest is not None:
            dest.unlink(missing_ok=True)
        raise
    return entry


# Grading (called by the scoring host) ---------------------------------------------------


def entry_claim(entry_id: int, host: str) -> Entry | None:
    """Take an accepted entry for grading (once: a second claim gets None)."""
    claimed = Entry.objects.filter(pk=entry_id, status=Entry.ACCEPTED).update(
        status=Entry.GRADING, host=host[:100], started_at=timezone.now()
    )
    return Entry.objects.select_related("benchmark").get(pk=entry_id) if claimed else None


def entry_record(entry_id: int, grade: Mapping[str, Any]) -> Entry:
    """Record whestbench's grade of an entry on the phase suite: its per-MLP rows, the
    public and withheld scores, the compute figures."""
    entry = Entry.objects.select_related("benchmark").get(pk=entry_id)
    phase = phase_rules(entry.benchmark)
    rows = rules.mlp_rows(grade)
    split = rules.split_scores(rows, phase.public_mlps)
    public = rules.grade_figures(rows[: phase.public_mlps], phase.lambda_flops_per_second)
    Entry.objects.filter(pk=entry_id, status=Entry.GRADING).update(
        status=Entry.GRADED,
        graded_at=timezone.now(),
        public_score=split.public_score,
        withheld_score=split.withheld_score,
        public_mse=split.public_mse,
        fallbacks=split.fallbacks,
        mean_flops=public.mean_flops,
        mean_effective_compute=public.mean_effective_compute,
        results={
            "mlps": [r.as_dict() for r in rows],
            "grader": dict(grade.get("grader") or {}),
        },
    )
    entry.refresh_from_db()
    return entry


def entry_fail(entry_id: int, reason: str, *, refund: bool) -> None:
    """The entry could not be graded. ``refund``: the fault was the grader's (a host or
    suite problem), so the day's charge is given back."""
    Entry.objects.filter(pk=entry_id, status__in=[Entry.ACCEPTED, Entry.GRADING]).update(
        status=Entry.FAILED, failure_reason=reason[:2000], refunded=refund
    )


# Suites ---------------------------------------------------------------------------------


def _suite_size(phase: PhaseRules, role: str) -> int:
    sizes = {Suite.PHASE: phase.suite_mlps, Suite.FINAL: phase.final_mlps}
    return sizes.get(role, phase.local_mlps)


def suite_generate(
    *, benchmark: Benchmark, role: str, private_seed: str, user: Any | None
) -> Suite:
    """Ask a scoring host of the benchmark's class to generate the ``role`` suite from the
    private seed (its per-MLP seeds derived by :func:`rules.derive_seeds`; only their
    digests are kept). Refused while the role's suite is in use or generating."""
    phase = phase_rules(benchmark)
    if role not in (Suite.PHASE, Suite.FINAL, Suite.PUBLIC):
        raise errors.InvalidParameter("role must be 'phase', 'final' or 'public'.")
    n = _suite_size(phase, role)
    seeds = rules.derive_seeds(private_seed, role, n)
    with transaction.atomic():
        old = Suite.objects.select_for_update().filter(benchmark=benchmark, role=role).first()
        if old is not None:
            if old.status == Suite.GENERATING:
                raise errors.InvalidParameter(f"The {role} suite is being generated already.")
            if role == Suite.PHASE and Entry.objects.filter(benchmark=benchmark).exists():
                raise errors.InvalidParameter(
                    "Entries were graded on the phase suite; it cannot be replaced."
                )
            if FinalScore.objects.filter(suite=old).exists():
                raise errors.InvalidParameter("The final rerun used this suite already.")
            old.delete()
            shutil.rmtree(storage.suite_dir(old.pk), ignore_errors=True)
        suite = Suite.objects.create(
            benchmark=benchmark,
            role=role,
            origin=Suite.GENERATED,
            n_mlps=n,
            width=phase.width,
            depth=phase.depth,
            n_samples=phase.reference_samples,
            seed_sha256=rules.seed_digest(private_seed),
            seeds_sha256=rules.seeds_digest(seeds),
            progress_total=n,
            requested_by=user,
        )
        audit_record(
            actor=user,
            action="estimation.suite_generate",
            target=f"suite:{suite.pk}",
            details={"benchmark": benchmark.slug, "role": role, "mlps": n},
        )
        jobs.enqueue(
            ESTIMATION_SUITE,
            suite.pk,
            seeds,
            queue=jobs.scoring_queue(benchmark.hardware_class_id),
        )
    return suite


def suite_progress(suite_id: int, done: int) -> None:
    Suite.objects.filter(pk=suite_id, status=Suite.GENERATING).update(progress_done=done)


def suite_ready(suite_id: int, *, dataset_sha256: str, stats: Mapping[str, Any], host: str) -> None:
    Suite.objects.filter(pk=suite_id, status=Suite.GENERATING).update(
        status=Suite.READY,
        dataset_sha256=dataset_sha256,
        stats=dict(stats),
        generated_on=host[:100],
        finished_at=timezone.now(),
        progress_done=F("progress_total"),
    )


def suite_failed(suite_id: int, reason: str) -> None:
    Suite.objects.filter(pk=suite_id, status=Suite.GENERATING).update(
        status=Suite.FAILED, note=reason[:2000], finished_at=timezone.now()
    )


def suite_import(*, benchmark: Benchmark, role: str, folder: Path, user: Any | None) -> Suite:
    """Import a prepared whestbench dataset folder (``whest dataset bake``'s output) as the
    ``role`` suite instead of generating one: it must load in whestbench, with the phase's
    width and depth and at least the role's number of MLPs. Staff only (a command)."""
    from whestbench import load_dataset

    phase = phase_rules(benchmark)
    n = _suite_size(phase, role)
    try:
        dataset = load_dataset(str(folder))
        meta = _dataset_metadata(folder)
    except Exception as exc:  # whestbench's own refusal, in its words
        raise errors.InvalidParameter(f"whestbench cannot load {folder}: {exc}") from exc
    if (meta.get("width"), meta.get("depth")) != (phase.width, phase.depth):
        raise errors.InvalidParameter(
            f"The dataset's MLPs are {meta.get('width')} wide and {meta.get('depth')} deep; "
            f"this phase's are {phase.width} x {phase.depth}."
        )
    if len(dataset) < n:
        raise errors.InvalidParameter(
            f"The dataset has {len(dataset)} MLPs; the {role} suite needs {n}."
        )
    with transaction.atomic():
        if Suite.objects.filter(benchmark=benchmark, role=role).exists():
            raise errors.InvalidParameter(
                f"This phase has a {role} suite already; it is replaced only by generating."
            )
        suite = Suite.objects.create(
            benchmark=benchmark,
            role=role,
            status=Suite.READY,
            origin=Suite.IMPORTED,
            n_mlps=n,
            width=phase.width,
            depth=phase.depth,
            n_samples=int(meta.get("n_samples") or 0),
            progress_done=n,
            progress_total=n,
            requested_by=user,
            finished_at=timezone.now(),
            stats={"avg_variances": _avg_variances(dataset)[:n]},
        )
        dest = storage.suite_dir(suite.pk)
        shutil.copytree(folder, dest)
        Suite.objects.filter(pk=suite.pk).update(dataset_sha256=folder_sha256(dest))
        audit_record(
            actor=user,
            action="estimation.suite_import",
            target=f"suite:{suite.pk}",
            details={"benchmark": benchmark.slug, "role": role, "mlps": n},
        )
    suite.refresh_from_db()
    return suite


def suite_stats(folder: Path) -> dict[str, Any]:
    """What a suite's row keeps of its dataset folder: each MLP's mean final-layer
    variance (the Monte Carlo band)."""
    from whestbench import load_dataset

    return {"avg_variances": _avg_variances(load_dataset(str(folder)))}


def _avg_variances(dataset: Any) -> list[float]:
    """Each MLP's mean final-layer variance, as whestbench's dataset records it (the
    Monte Carlo band's figures; a generated suite's host reports the same)."""
    if "avg_variance" not in getattr(dataset, "column_names", ()):
        return []
    return [float(v) for v in dataset["avg_variance"]]


def _dataset_metadata(folder: Path) -> dict[str, Any]:
    meta = json.loads((folder / "metadata.json").read_text())
    return meta if isinstance(meta, dict) else {}


def folder_sha256(folder: Path) -> str:
    """One digest over a folder's files: each relative path and its content, in order."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode() + b"\0")
        digest.update(storage.sha256_file(path).encode())
    return digest.hexdigest()


# Nominations and the final rerun --------------------------------------------------------


def entry_nominate(
    *, entry: Entry, user: Any, nominated: bool, now: dt.datetime | None = None
) -> Entry:
    """Nominate (or withdraw) an entry for the final rerun: any member of its team may, at
    most ``nominations_max`` per team, until the final rerun starts."""
    now = now or timezone.now()
    phase = phase_rules(entry.benchmark)
    with transaction.atomic():
        team = lock_identity(entrant_id=user.pk, benchmark=entry.benchmark)
        identity = identity_of(entry.benchmark_id, user.pk)
        if entry.entrant_id not in identity.member_ids:
            raise errors.NotFound("No such entry.")
        if FinalScore.objects.filter(entry__benchmark=entry.benchmark).exists():
            raise errors.InvalidParameter("The final rerun has started; nominations are fixed.")
        if nominated and entry.status != Entry.GRADED:
            raise errors.InvalidParameter("Only a graded entry can be nominated.")
        if nominated and not entry.nominated:
            mine = Entry.objects.filter(
                benchmark=entry.benchmark, nominated=True, entrant_id__in=identity.member_ids
            ).count()
            if mine >= phase.nominations_max:
                raise errors.InvalidParameter(
                    f"{'Your team has' if team else 'You have'} nominated "
                    f"{phase.nominations_max} entries already; withdraw one first."
                )
        Entry.objects.filter(pk=entry.pk).update(nominated=nominated)
    entry.refresh_from_db()
    return entry


def final_start(
    *, benchmark: Benchmark, user: Any | None, now: dt.datetime | None = None
) -> list[FinalScore]:
    """Queue the final rerun once the phase has closed and its final suite is ready: each
    team's (or solo entrant's) nominated entries, or its best ``nominations_max`` on the
    public board, graded on the final suite. Once only."""
    from portal.estimation.selectors import graded_candidates

    now = now or timezone.now()
    phase = phase_rules(benchmark)
    if now < benchmark.closes_at:
        raise errors.InvalidParameter("The phase has not closed; the final rerun starts after.")
    suite = Suite.objects.filter(benchmark=benchmark, role=Suite.FINAL, status=Suite.READY).first()
    if suite is None:
        raise errors.NoCohort(
            "This phase has no ready final suite: generate one from held-out seeds "
            "(manage.py estimation_suite --role final) first."
        )
    with transaction.atomic():
        if FinalScore.objects.filter(entry__benchmark=benchmark).exists():
            raise errors.InvalidParameter("The final rerun has started already.")
        nominated = set(
            Entry.objects.filter(benchmark=benchmark, nominated=True).values_list("pk", flat=True)
        )
        picks = rules.final_picks(graded_candidates(benchmark), nominated, phase.nominations_max)
        finals = [
            FinalScore.objects.create(entry_id=c.entry_id, suite=suite, queued_at=now)
            for c in picks
        ]
        audit_record(
            actor=user,
            action="estimation.final_start",
            target=f"benchmark:{benchmark.slug}",
            details={"entries": [c.entry_id for c in picks], "suite": suite.pk},
        )
        for final in finals:
            jobs.enqueue(
                ESTIMATION_FINAL, final.pk, queue=jobs.scoring_queue(benchmark.hardware_class_id)
            )
    return finals


def final_claim(final_id: int) -> FinalScore | None:
    claimed = FinalScore.objects.filter(pk=final_id, status=Entry.ACCEPTED).update(
        status=Entry.GRADING
    )
    if not claimed:
        return None
    return FinalScore.objects.select_related("entry__benchmark", "suite").get(pk=final_id)


def final_record(final_id: int, grade: Mapping[str, Any]) -> None:
    rows = rules.mlp_rows(grade)
    FinalScore.objects.filter(pk=final_id, status=Entry.GRADING).update(
        status=Entry.GRADED,
        graded_at=timezone.now(),
        score=rules.suite_score(rows),
        fallbacks=sum(1 for r in rows if r.fallback),
        results={"mlps": [r.as_dict() for r in rows], "grader": dict(grade.get("grader") or {})},
    )


def final_fail(final_id: int, reason: str) -> None:
    """A final grade that failed for the grader's fault is marked failed with its reason,
    for staff to see; the entry's own faults are per-MLP fallbacks, never this."""
    FinalScore.objects.filter(pk=final_id, status=Entry.GRADING).update(
        status=Entry.FAILED, failure_reason=reason[:2000]
    )
