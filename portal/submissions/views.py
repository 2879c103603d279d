"""An entrant's submissions on a benchmark: upload, list, status with timeline and logs."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from portal import storage
from portal.contests.models import Benchmark
from portal.contests.templatetags.podium import ns, zoned
from portal.environments.models import Environment
from portal.errors import PodiumError
from portal.submissions import services
from portal.submissions.forms import SubmissionForm
from portal.submissions.models import AttemptLedger, Run, Submission

LOG_TAIL_LINES = 200
NO_OUTPUT = "(no output yet)"


def _owned(request: HttpRequest, pk: int) -> Submission:
    """The caller's submission; another entrant's id is a 404, so ids reveal nothing."""
    return get_object_or_404(
        Submission.objects.select_related("benchmark", "environment"),
        pk=pk,
        entrant_id=request.user.pk,
    )


def _with_latest_run(submissions: QuerySet[Submission]) -> QuerySet[Submission]:
    """Annotate each submission with its latest run's wall time and agreement (one query)."""
    latest = Run.objects.filter(submission=OuterRef("pk")).order_by("-try_number")
    return submissions.annotate(
        wall_time_ns=Subquery(latest.values("wall_time_ns")[:1]),
        matches=Subquery(latest.values("matches")[:1]),
        total=Subquery(latest.values("total")[:1]),
    )


def submission_state(submission: Submission) -> dict[str, Any]:
    """What the page and its status.json show. Never a reference class or a per-image result."""
    zone = submission.benchmark.attempt_timezone
    run = submission.runs.order_by("-try_number").first()
    ledger = [entry.delta for entry in submission.ledger.all()]
    wall_time_ns = run.wall_time_ns if run else None
    charged = AttemptLedger.CHARGE in ledger
    refunded = AttemptLedger.REFUND in ledger
    build_log = storage.read_tail(
        storage.submission_dir(submission.pk) / "build.log", LOG_TAIL_LINES
    )
    run_log = storage.read_tail(storage.run_dir(run.pk) / "run.log", LOG_TAIL_LINES) if run else ""
    return {
        "id": submission.pk,
        "kind": submission.kind,
        "status": submission.status,
        "finished": submission.status in Submission.FINAL,
        "disqualified": submission.disqualified_at is not None,
        "submitted_at": submission.submitted_at.isoformat(),
        "submitted_at_display": zoned(submission.submitted_at, zone),
        "environment": submission.environment.name,
        "timeline": [
            {
                "status": event.status,
                "at": event.at.isoformat(),
                "at_display": zoned(event.at, zone),
                "note": event.note,
            }
            for event in submission.events.all()
        ],
        "wall_time_ns": wall_time_ns,
        "matches": run.matches if run else None,
        "total": run.total if run else None,
        "passed": run.passed if run else None,
        "digests": {
            "source": submission.source_sha256,
            "environment_image": submission.environment_image_digest,
            "submission_image": submission.image_digest,
            "output": run.output_sha256 if run else "",
        },
        "attempt": {"charged": charged, "refunded": refunded},
        "failure_reason": submission.failure_reason,
        "build_log": build_log,
        "run_log": run_log,
        # Ready-made text for each [data-field] the page's script updates in place.
        "display": {
            "status": submission.status,
            "wall_time": (
                f"{ns(wall_time_ns)} ({wall_time_ns} ns)" if wall_time_ns is not None else "-"
            ),
            "agreement": (
                f"{run.matches:,} / {run.total:,} top-1 matches"
                if run and run.matches is not None and run.total
                else "-"
            ),
            "attempt": _attempt_text(submission.kind, charged, refunded),
            "failure_reason": submission.failure_reason,
            "digest_environment_image": submission.environment_image_digest or "-",
            "digest_submission_image": submission.image_digest or "-",
            "digest_output": f"sha256:{run.output_sha256}" if run and run.output_sha256 else "-",
            "build_log": build_log or NO_OUTPUT,
            "run_log": run_log or NO_OUTPUT,
        },
    }


def _attempt_text(kind: str, charged: bool, refunded: bool) -> str:
    text = "practice allowance" if kind == Submission.PRACTICE else "official attempt"
    if refunded:
        return f"{text} charged, then refunded"
    return f"{text} charged" if charged else f"{text} not charged"


@login_required
@require_http_methods(["GET", "POST"])
def submission_list(request: HttpRequest, slug: str) -> HttpResponse:
    benchmark = get_object_or_404(Benchmark, slug=slug)
    ready = Environment.objects.filter(
        owner_id=request.user.pk, benchmark=benchmark, status=Environment.READY
    ).order_by("name")
    status = 200
    if request.method == "POST":
        form = SubmissionForm(request.POST, request.FILES, environments=ready)
        if form.is_valid():
            source_file, source_name = form.cleaned_data["source"]
            try:
                submission = services.submission_accept(
                    entrant=request.user,
                    benchmark=benchmark,
                    environment=form.cleaned_data["environment"],
                    source_file=source_file,
                    source_name=source_name,
                    kind=form.cleaned_data["kind"],
                )
            except PodiumError as exc:
                form.add_error(None, exc.detail)
            else:
                messages.success(request, f"Submission #{submission.pk} was accepted.")
                return redirect("submissions:detail", pk=submission.pk)
        status = 400
    else:
        form = SubmissionForm(environments=ready)
    submissions = _with_latest_run(
        Submission.objects.filter(entrant_id=request.user.pk, benchmark=benchmark)
    ).select_related("environment")
    context = {
        "benchmark": benchmark,
        "submissions": submissions,
        "form": form,
        "has_ready_environment": ready.exists(),
    }
    return render(request, "submissions/submission_list.html", context, status=status)


@login_required
@require_GET
def submission_detail(request: HttpRequest, pk: int) -> HttpResponse:
    submission = _owned(request, pk)
    context = {
        "submission": submission,
        "benchmark": submission.benchmark,
        "state": submission_state(submission),
    }
    return render(request, "submissions/submission_detail.html", context)


@login_required
@require_GET
def submission_status(request: HttpRequest, pk: int) -> JsonResponse:
    return JsonResponse(submission_state(_owned(request, pk)))


@login_required
@require_GET
def submission_source(request: HttpRequest, pk: int) -> FileResponse:
    """The entrant's own source archive, as uploaded (staff use the audited API or admin)."""
    submission = _owned(request, pk)
    path = services.source_path(submission)
    if not path.is_file():
        raise Http404("The source archive is no longer kept.")
    return FileResponse(path.open("rb"), as_attachment=True, filename=submission.source_name)
