"""The pages of a metered-estimation phase (docs/rules.md, "Metered estimation"): the
benchmark page of an ``estimation`` benchmark (its rules in words, the viewer's quota,
the upload form and their team's entries, the final standings once they exist, the
board and the every-attempt chart), the upload that form posts, an entry's page (its
per-MLP ledger, to its team; its board figures, to everyone, once it is on the board)
and the nomination for the final rerun. The same services as the API
(``portal.estimation.services``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from portal.contests import uploads
from portal.contests.models import Benchmark
from portal.contests.selectors import schedule_at
from portal.core import errors
from portal.estimation import rules, selectors, services
from portal.estimation.models import Entry, FinalScore, PhaseRules, Suite
from portal.estimation.standings import published_scores
from portal.teams.selectors import identity_of, shown_identity
from portal.web.environment_forms import upload_path
from portal.web.estimation_chart import estimation_chart

ARCHIVE_FIELD = "estimator"


class EstimatorForm(forms.Form):
    estimator = forms.FileField(
        label="Estimator (.tar.gz)",
        help_text="The tarball that <code>whest package</code> makes of your estimator.",
    )

    def clean_estimator(self) -> tuple[Path, str]:
        upload = self.cleaned_data[ARCHIVE_FIELD]
        return upload_path(upload), upload.name or services.ARCHIVE_FILE


@dataclass(frozen=True)
class Composition:
    """An entry's compute, per MLP on average: what flopscope metered, the residual wall
    time, and the effective compute charged against the budget."""

    mean_flops: float | None
    mean_residual_s: float | None
    mean_effective_compute: float | None


def _estimation_benchmark(slug: str) -> Benchmark:
    return get_object_or_404(
        Benchmark.objects.select_related("contest"), slug=slug, kind=Benchmark.ESTIMATION
    )


def benchmark_page(
    request: HttpRequest,
    benchmark: Benchmark,
    *,
    form: EstimatorForm | None = None,
    status: int = 200,
) -> HttpResponse:
    """The benchmark page of an estimation phase (``views.benchmark_detail`` sends it
    here, and the upload renders it again with its refusal on the form)."""
    now = timezone.now()
    phase = PhaseRules.objects.filter(benchmark=benchmark).first()
    context: dict[str, Any] = {
        "benchmark": benchmark,
        "phase": phase,
        "schedule": schedule_at(benchmark, now),
        "closed": now >= benchmark.closes_at,
    }
    if phase is None:
        return render(request, "estimation/benchmark_detail.html", context, status=status)
    own_ids: list[int] = []
    if request.user.is_authenticated:
        identity = shown_identity(benchmark.pk, request.user.pk)
        entries = selectors.visible_entries(benchmark, request.user.pk)
        own_ids = [e.pk for e in entries]
        context.update(
            {
                "quota": services.quota(benchmark, request.user.pk, now),
                "teamed": identity.team_id is not None,
                "form": form or EstimatorForm(),
                "entries": entries,
            }
        )
    band = selectors.monte_carlo_band(benchmark)
    context.update(
        {
            "board": selectors.board(benchmark, now),
            "finals": selectors.final_standings(benchmark),
            "published": published_scores(benchmark),
            "band": band,
            "suite_ready": Suite.objects.filter(
                benchmark=benchmark, role=Suite.PHASE, status=Suite.READY
            ).exists(),
            "chart": estimation_chart(
                selectors.every_entry_points(benchmark),
                budget=float(phase.flop_budget),
                band=band,
                own_ids=own_ids,
                entry_href=reverse("contests:estimation_entry", kwargs={"pk": 0}).replace(
                    "/0/", "/{id}/"
                ),
            ),
            "own_ids": own_ids,
            "outlier_percent": f"{rules.OUTLIER_FRACTION * 100:g}",
            "max_submission_bytes": _max_submission_bytes(),
        }
    )
    return render(request, "estimation/benchmark_detail.html", context, status=status)


def _max_submission_bytes() -> int:
    from whestbench import limits

    return int(limits.MAX_SUBMISSION_BYTES)


@uploads.upload_route(archive=ARCHIVE_FIELD)
@login_required
@require_POST
def entry_upload(request: HttpRequest, slug: str) -> HttpResponse:
    """The upload form's POST: ``services.entry_accept``, then the entry's page; a refusal
    is shown on the form of the benchmark page, with nothing charged."""
    benchmark = _estimation_benchmark(slug)
    refusal = uploads.web_upload_refusal(request)
    if refusal is not None:  # throttled or over the bounds: the form reads nothing
        form = EstimatorForm()
        uploads.show_refusal(form, refusal.detail)
        return benchmark_page(request, benchmark, form=form, status=refusal.http_status)
    form = EstimatorForm(request.POST, request.FILES)
    if not form.is_valid():
        return benchmark_page(request, benchmark, form=form, status=400)
    archive, name = form.cleaned_data[ARCHIVE_FIELD]
    try:
        entry = services.entry_accept(
            entrant=request.user, benchmark=benchmark, archive_file=archive, archive_name=name
        )
    except errors.PodiumError as exc:
        form.add_error(None, exc.detail)
        return benchmark_page(request, benchmark, form=form, status=exc.http_status)
    messages.success(request, f"Entry {entry.pk} was accepted; it is queued for grading.")
    return redirect("contests:estimation_entry", pk=entry.pk)


def _composition(rows: list[rules.MlpRow]) -> Composition:
    def mean(values: list[float]) -> float | None:
        return sum(values) / len(values) if values else None

    return Composition(
        mean_flops=mean([float(r.flops_used) for r in rows]),
        mean_residual_s=mean([r.residual_wall_time_s for r in rows]),
        mean_effective_compute=mean([r.effective_compute for r in rows]),
    )


@require_GET
def entry_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """An entry in full to its team (its entrant's team as it is now, or the entrant);
    to anyone else only its board figures while it is its team's row on the board, else
    a 404 (ids reveal nothing)."""
    entry = get_object_or_404(
        Entry.objects.select_related("benchmark", "entrant", "team"),
        pk=pk,
        benchmark__kind=Benchmark.ESTIMATION,
    )
    benchmark = entry.benchmark
    phase = PhaseRules.objects.filter(benchmark=benchmark).first()
    if phase is None:
        raise Http404("No such entry.")
    now = timezone.now()
    closed = now >= benchmark.closes_at
    viewer = request.user.pk if request.user.is_authenticated else None
    identity = identity_of(benchmark.pk, viewer) if viewer is not None else None
    mine = identity is not None and entry.entrant_id in identity.member_ids
    board_row = next((r for r in selectors.board(benchmark, now) if r.entry_id == entry.pk), None)
    if not mine and board_row is None:
        raise Http404("No such entry.")
    context: dict[str, Any] = {
        "benchmark": benchmark,
        "phase": phase,
        "entry": entry,
        "mine": mine,
        "closed": closed,
        "board_row": board_row,
        "outlier_percent": f"{rules.OUTLIER_FRACTION * 100:g}",
    }
    if identity is not None and mine:
        ledger = selectors.stored_rows(entry)
        public = ledger[: phase.public_mlps]
        context.update(
            {
                "ratio": selectors.entry_ratio(entry, phase) if ledger else None,
                "composition": _composition(public),
                "fallbacks": (
                    entry.fallbacks or 0 if closed else sum(1 for r in public if r.fallback)
                ),
                "public_rows": public,
                "withheld_rows": ledger[phase.public_mlps :] if closed else [],
                "withheld_hidden": not closed and len(ledger) > phase.public_mlps,
                "teamed": identity.team_id is not None,
                "nominations": Entry.objects.filter(
                    benchmark=benchmark, nominated=True, entrant_id__in=identity.member_ids
                ).count(),
                "can_nominate": entry.status == Entry.GRADED and not _final_started(benchmark),
            }
        )
    return render(request, "estimation/entry_detail.html", context)


def _final_started(benchmark: Benchmark) -> bool:
    return FinalScore.objects.filter(entry__benchmark=benchmark).exists()


@login_required
@require_POST
def entry_nominate(request: HttpRequest, pk: int) -> HttpResponse:
    """Nominate (``action=nominate``) or withdraw (``withdraw``) a team's graded entry for
    the final rerun (``services.entry_nominate``); another team's entry is a 404."""
    entry = get_object_or_404(
        Entry.objects.select_related("benchmark"), pk=pk, benchmark__kind=Benchmark.ESTIMATION
    )
    action = request.POST.get("action", "")
    if action not in ("nominate", "withdraw"):
        messages.error(request, "Unknown action.")
        return redirect("contests:estimation_entry", pk=pk)
    try:
        services.entry_nominate(entry=entry, user=request.user, nominated=action == "nominate")
    except errors.NotFound as exc:
        raise Http404(exc.detail) from exc
    except errors.PodiumError as exc:
        messages.error(request, exc.detail)
    else:
        messages.success(
            request,
            f"Entry {pk} is nominated for the final rerun."
            if action == "nominate"
            else f"Entry {pk} is no longer nominated.",
        )
    return redirect(reverse("contests:estimation_entry", kwargs={"pk": pk}) + "#nomination")
