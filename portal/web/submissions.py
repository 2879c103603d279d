"""An entrant's submissions on a benchmark: upload, list, status with timeline and logs."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from portal.contests import uploads
from portal.contests.kinds import timed_path_page
from portal.contests.models import Benchmark
from portal.contests.selectors import schedule_at
from portal.core.errors import PodiumError
from portal.environments.selectors import usable_environments
from portal.submissions import intake, review
from portal.submissions.attempts import quotas_for
from portal.submissions.models import ProvenanceReview, Submission
from portal.submissions.selectors import submission_state, submissions_with_latest_run
from portal.teams.selectors import teammate_ids
from portal.web.submission_forms import SubmissionForm


def _owned(request: HttpRequest, pk: int, *, team: bool = False) -> Submission:
    """The caller's submission (with ``team``, a teammate's too: its feedback is the
    team's); anyone else's id is a 404, so ids reveal nothing."""
    submission = get_object_or_404(
        Submission.objects.select_related("benchmark", "environment", "entrant"), pk=pk
    )
    caller = int(request.user.pk or 0)
    if submission.entrant_id != caller and not (
        team and submission.entrant_id in teammate_ids(submission.benchmark_id, caller)
    ):
        raise Http404("No such submission.")
    return submission


@uploads.upload_route(archive="source")
@login_required
@require_http_methods(["GET", "POST"])
def submission_list(request: HttpRequest, slug: str) -> HttpResponse:
    benchmark = get_object_or_404(Benchmark, slug=slug)
    refused = timed_path_page(request, benchmark, "submission")
    if refused is not None:  # a metered-estimation benchmark takes entries, not these
        return refused
    # Teammates' and carried-over phases' too.
    ready = usable_environments(request.user, benchmark).select_related("owner")
    status = 200
    if request.method == "POST":
        refusal = uploads.web_upload_refusal(request)
        if refusal is not None:  # throttled or over the bounds: the form reads nothing
            form = SubmissionForm(
                environments=ready,
                viewer_id=request.user.pk,
                initial={key: request.POST.get(key) for key in ("environment", "kind")},
            )
            uploads.show_refusal(form, refusal.detail)
            status = refusal.http_status
        else:
            form = SubmissionForm(
                request.POST, request.FILES, environments=ready, viewer_id=request.user.pk
            )
            if form.is_valid():
                source_file, source_name = form.cleaned_data["source"]
                try:
                    submission = intake.submission_accept(
                        entrant=request.user,
                        benchmark=benchmark,
                        environment=form.cleaned_data["environment"],
                        source_file=source_file,
                        source_name=source_name,
                        kind=form.cleaned_data["kind"],
                        boundary_confirmed=form.cleaned_data["confirm_boundary"],
                    )
                except PodiumError as exc:
                    form.add_error(None, exc.detail)
                else:
                    messages.success(request, f"Submission #{submission.pk} was accepted.")
                    return redirect("submissions:detail", pk=submission.pk)
            status = 400
    else:
        # "?environment=<id>" preselects one (the environment page links here that way).
        form = SubmissionForm(
            environments=ready,
            viewer_id=request.user.pk,
            initial={"environment": request.GET.get("environment")},
        )
    now = timezone.now()
    context = {
        "benchmark": benchmark,
        "schedule": schedule_at(benchmark, now),
        "quotas": quotas_for(request.user, benchmark, now),
        "submissions": submissions_with_latest_run(request.user, benchmark),
        "form": form,
        "has_ready_environment": ready.exists(),
    }
    return render(request, "submissions/submission_list.html", context, status=status)


@login_required
@require_GET
def submission_detail(request: HttpRequest, pk: int) -> HttpResponse:
    submission = _owned(request, pk, team=True)
    context = {
        "submission": submission,
        "benchmark": submission.benchmark,
        "state": submission_state(submission),
        "review": ProvenanceReview.objects.filter(submission=submission).first(),
        "writeup_max_bytes": settings.PODIUM_WRITEUP_MAX_BYTES,
    }
    return render(request, "submissions/submission_detail.html", context)


@login_required
@require_POST
def submission_review(request: HttpRequest, pk: int) -> HttpResponse:
    """The entrant's provenance statement for their submission under review."""
    submission = _owned(request, pk)
    try:
        review.review_statement(
            submission=submission, entrant=request.user, text=request.POST.get("statement", "")
        )
    except PodiumError as exc:
        messages.error(request, exc.detail)
    else:
        messages.success(request, "Your provenance statement was recorded.")
    return redirect(reverse("submissions:detail", kwargs={"pk": pk}) + "#review")


@login_required
@require_GET
def submission_status(request: HttpRequest, pk: int) -> JsonResponse:
    response = JsonResponse(submission_state(_owned(request, pk, team=True)))
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_GET
def submission_source(request: HttpRequest, pk: int) -> FileResponse:
    """The entrant's own source archive, as uploaded (staff use the audited API or admin)."""
    submission = _owned(request, pk)
    path = intake.source_path(submission)
    if not path.is_file():
        raise Http404("The source archive is no longer kept.")
    return FileResponse(path.open("rb"), as_attachment=True, filename=submission.source_name)
