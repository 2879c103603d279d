"""An entrant's environments on a benchmark: list and create, status, rebuild, remove."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from portal import storage
from portal.contests.models import Benchmark
from portal.contests.templatetags.podium import binary_size, zoned
from portal.environments import services
from portal.environments.forms import EnvironmentForm
from portal.environments.models import Environment
from portal.errors import PodiumError

LOG_TAIL_LINES = 200
NO_OUTPUT = "(no output yet)"
UNFINISHED = (Environment.QUEUED, Environment.BUILDING)


def _owned(request: HttpRequest, pk: int) -> Environment:
    """The caller's environment; another entrant's id is a 404, so ids reveal nothing."""
    return get_object_or_404(
        Environment.objects.select_related("benchmark"), pk=pk, owner_id=request.user.pk
    )


def environment_state(environment: Environment) -> dict[str, Any]:
    """What the page and its status.json show: status, timeline, image, log tail."""
    zone = environment.benchmark.attempt_timezone
    build_log = storage.read_tail(
        storage.environment_dir(environment.pk) / "build.log", LOG_TAIL_LINES
    )
    return {
        "id": environment.pk,
        "name": environment.name,
        "status": environment.status,
        "finished": environment.status not in UNFINISHED,
        "timeline": [
            {
                "status": event.status,
                "at": event.at.isoformat(),
                "at_display": zoned(event.at, zone),
                "note": event.note,
            }
            for event in environment.events.all()
        ],
        "image_digest": environment.image_digest,
        "image_bytes": environment.image_bytes,
        "failure_reason": environment.failure_reason,
        "build_log": build_log,
        # Ready-made text for each [data-field] the page's script updates in place.
        "display": {
            "status": environment.status,
            "image_digest": environment.image_digest or "-",
            "image_size": binary_size(environment.image_bytes),
            "failure_reason": environment.failure_reason,
            "build_log": build_log or NO_OUTPUT,
        },
    }


@login_required
@require_http_methods(["GET", "POST"])
def environment_list(request: HttpRequest, slug: str) -> HttpResponse:
    benchmark = get_object_or_404(Benchmark, slug=slug)
    status = 200
    if request.method == "POST":
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
                field = form.dockerfile_field() if exc.code == "dockerfile_policy" else None
                form.add_error(field, exc.detail)
            else:
                messages.success(request, f"Environment '{environment.name}' is queued to build.")
                return redirect("environments:detail", pk=environment.pk)
        status = 400
    else:
        form = EnvironmentForm()
    environments = (
        Environment.objects.filter(owner_id=request.user.pk, benchmark=benchmark)
        .exclude(status=Environment.REMOVED)
        .order_by("-created_at")
    )
    context = {"benchmark": benchmark, "environments": environments, "form": form}
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
    return JsonResponse(environment_state(_owned(request, pk)))


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
