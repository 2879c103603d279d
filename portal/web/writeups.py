"""The write-up form on a submission's page (upload or replace, publish, remove) and the
PDF for the pages' links. The same services as the API (portal.standings.writeups)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from portal.contests import uploads
from portal.core import errors
from portal.standings import writeups
from portal.standings.models import WriteUp


def _back(pk: int) -> HttpResponse:
    return redirect(reverse("submissions:detail", kwargs={"pk": pk}) + "#writeup")


@uploads.document_route(field="writeup", label="write-up", setting="PODIUM_WRITEUP_MAX_BYTES")
@login_required
@require_POST
def writeup_upload(request: HttpRequest, pk: int) -> HttpResponse:
    refusal = uploads.web_upload_refusal(request)
    upload = request.FILES.get("writeup") if refusal is None else None
    if upload is None:
        messages.error(request, refusal.detail if refusal else "Choose a PDF to upload.")
        return _back(pk)
    try:
        writeups.writeup_put(
            entrant=request.user,
            submission_id=pk,
            upload=upload,
            file_name=upload.name or "write-up.pdf",
            public=request.POST.get("public") == "on",
        )
    except errors.NotFound as exc:
        raise Http404(exc.detail) from exc
    except errors.PodiumError as exc:
        messages.error(request, exc.detail)
    else:
        messages.success(request, "Your write-up was saved.")
    return _back(pk)


@login_required
@require_POST
def writeup_change(request: HttpRequest, pk: int) -> HttpResponse:
    """Publish, unpublish (``action=public`` / ``private``) or remove (``remove``)."""
    action = request.POST.get("action", "")
    try:
        if action == "remove":
            writeups.writeup_delete(entrant=request.user, submission_id=pk)
            messages.success(request, "Your write-up was removed.")
        elif action in ("public", "private"):
            writeups.writeup_publish(
                entrant=request.user, submission_id=pk, public=action == "public"
            )
            messages.success(request, f"Your write-up is now {action}.")
        else:
            messages.error(request, "Unknown action.")
    except errors.NotFound as exc:
        raise Http404(exc.detail) from exc
    return _back(pk)


@require_GET
def writeup_pdf(request: HttpRequest, pk: int) -> FileResponse:
    """The PDF, as an attachment (``writeups.writeup_response``): to its entrant, and to
    everyone once public (staff read private ones through the API, with a reason)."""
    try:
        writeup = writeups.writeup_for_reader(submission_id=pk, reader=None)
    except errors.NotFound:
        user = request.user
        if not user.is_authenticated:
            raise Http404("No such write-up.") from None
        found = WriteUp.objects.filter(submission_id=pk, entrant_id=user.pk).first()
        if found is None:
            raise Http404("No such write-up.") from None
        writeup = found
    try:
        return writeups.writeup_response(writeup)
    except errors.NotFound as exc:
        raise Http404(exc.detail) from exc
