"""An entrant's environments on a benchmark: list and create, status, rebuild, remove."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from portal.contests import uploads
from portal.contests.kinds import timed_path_page
from portal.contests.models import Benchmark
from portal.contests.selectors import schedule_at
from portal.contests.templatetags.podium import (
    binary_size,
    minutes,
    span,
    zoned_seconds,
)
from portal.core import storage
from portal.core.errors import PodiumError
from portal.environments import services
from portal.environments.models import Environment
from portal.web.environment_forms import (
    EnvironmentForm,
    ListingLine,
    policy_listing,
    policy_problems,
)

NO_OUTPUT = "(no output yet)"
UNFINISHED = (Environment.QUEUED, Environment.BUILDING)


def _owned(request: HttpRequest, pk: int) -> Environment:
    """The caller's environment; another entrant's id is a 404, so ids reveal nothing."""
    return get_object_or_404(
        Environment.objects.select_related("benchmark").prefetch_related("events"),
        pk=pk,
        owner_id=request.user.pk,
    )


def build_clock(environment: Environment, now: dt.datetime) -> tuple[str, int | None, int | None]:
    """The build's time as the page tells it: a sentence, seconds elapsed, the cap in seconds.

    Waiting counts from the latest queued event; building from the claim, against the
    benchmark's build cap; a finished build says how long it took.
    """
    cap_s = environment.benchmark.build_timeout_s
    if environment.status == Environment.BUILDING and environment.build_started_at:
        elapsed = int((now - environment.build_started_at).total_seconds())
        return f"Building for {span(elapsed)} of the {minutes(cap_s)} allowed.", elapsed, cap_s
    if environment.status == Environment.QUEUED:
        queued = [event.at for event in environment.events.all() if event.status == "queued"]
        since = queued[-1] if queued else environment.created_at
        return f"Waiting for a build slot for {span((now - since).total_seconds())}.", None, None
    started, finished = environment.build_started_at, environment.build_finished_at
    if started and finished and environment.status != Environment.REMOVED:
        took = span((finished - started).total_seconds())
        return f"The last build took {took} (the cap is {minutes(cap_s)}).", None, None
    return "", None, None


def environment_state(environment: Environment, now: dt.datetime | None = None) -> dict[str, Any]:
    """What the page and its status.json show: status, timeline, image, log tail, build time."""
    now = now or timezone.now()
    zone = environment.benchmark.attempt_timezone
    build_log = storage.read_tail(
        storage.environment_build_log(environment.pk), storage.LOG_TAIL_LINES
    )
    clock_text, elapsed_s, cap_s = build_clock(environment, now)
    return {
        "id": environment.pk,
        "name": environment.name,
        "status": environment.status,
        "finished": environment.status not in UNFINISHED,
        "timeline": [
            {
                "status": event.status,
                "at": event.at.isoformat(),
                "at_display": zoned_seconds(event.at, zone),
                "note": event.note,
            }
            for event in environment.events.all()
        ],
        "image_digest": environment.image_digest,
        "image_bytes": environment.image_bytes,
        "failure_reason": environment.failure_reason,
        "elapsed_s": elapsed_s,
        "cap_s": cap_s,
        "build_log": build_log,
        # Ready-made text for each [data-field] the page's script updates in place.
        "display": {
            "status": environment.status,
            "image_digest": environment.image_digest or "-",
            "image_size": binary_size(environment.image_bytes),
            "failure_reason": environment.failure_reason,
            "elapsed": clock_text,
            "build_log": build_log or NO_OUTPUT,
        },
    }


@uploads.upload_route(archive="context", dockerfile="dockerfile_file")
@login_required
@require_http_methods(["GET", "POST"])
def environment_list(request: HttpRequest, slug: str) -> HttpResponse:
    benchmark = get_object_or_404(Benchmark, slug=slug)
    refused = timed_path_page(request, benchmark, "environment")
    if refused is not None:  # a metered-estimation benchmark has no environments
        return refused
    status = 200
    listing: list[ListingLine] = []
    refusal = uploads.web_upload_refusal(request) if request.method == "POST" else None
    if refusal is not None:  # throttled or over the bounds: the form reads nothing
        form = EnvironmentForm(
            initial={key: request.POST.get(key) for key in ("name", "dockerfile_text")}
        )
        uploads.show_refusal(form, refusal.detail)
        status = refusal.http_status
    elif request.method == "POST":
        form = EnvironmentForm(request.POST, request.FILES)
        if form.is_valid():
            try:
                environment = services.environment_create(
                    owner=request.user,
                    benchmark=benchmark,
                    name=form.cleaned_data["name"],
                    dockerfile_text=form.cleaned_data["dockerfile"],
                    context_path=form.cleaned_data["context"],
                )
            except PodiumError as exc:
                if exc.code == "dockerfile_policy":
                    problems = policy_problems(exc.detail)
                    listing = policy_listing(form.cleaned_data["dockerfile"], problems)
                    for problem in problems:
                        form.add_error(form.dockerfile_field(), problem)
                else:
                    form.add_error(None, exc.detail)
            else:
                messages.success(request, f"Environment '{environment.name}' is queued to build.")
                return redirect("environments:detail", pk=environment.pk)
        status = 400
    else:
        form = EnvironmentForm()
    environments = list(
        Environment.objects.filter(owner_id=request.user.pk, benchmark=benchmark)
        .exclude(status=Environment.REMOVED)
        .order_by("-created_at")
    )
    context = {
        "benchmark": benchmark,
        "environments": environments,
        "kept": len(environments),
        "listing": listing,
        "form": form,
        "closed": schedule_at(benchmark, timezone.now()).status == "closed",
    }
    return render(request, "environments/environment_list.html", context, status=status)


@login_required
@require_GET
def environment_detail(request: HttpRequest, pk: int) -> HttpResponse:
    environment = _owned(request, pk)
    context = {
        "environment": environment,
        "benchmark": environment.benchmark,
        "state": environment_state(environment),
        "can_rebuild": environment.status in Environment.RETRYABLE,
        "can_remove": environment.status not in (*UNFINISHED, Environment.REMOVED),
    }
    return render(request, "environments/environment_detail.html", context)


@login_required
@require_GET
def environment_status(request: HttpRequest, pk: int) -> JsonResponse:
    response = JsonResponse(environment_state(_owned(request, pk)))
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_POST
def environment_rebuild(request: HttpRequest, pk: int) -> HttpResponse:
    environment = _owned(request, pk)
    try:
        services.environment_rebuild(environment=environment)
    except PodiumError as exc:
        messages.error(request, exc.detail)
    else:
        messages.success(request, "A new build is queued.")
    return redirect("environments:detail", pk=environment.pk)


@login_required
@require_http_methods(["GET", "POST"])
def environment_remove(request: HttpRequest, pk: int) -> HttpResponse:
    """GET asks for confirmation; POST removes."""
    environment = _owned(request, pk)
    if request.method == "GET":
        context = {"environment": environment, "benchmark": environment.benchmark}
        return render(request, "environments/environment_confirm_remove.html", context)
    try:
        services.environment_remove(environment=environment)
    except PodiumError as exc:
        messages.error(request, exc.detail)
        return redirect("environments:detail", pk=environment.pk)
    messages.success(request, f"Environment '{environment.name}' was removed.")
    return redirect("environments:list", slug=environment.benchmark.slug)
