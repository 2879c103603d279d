"""The one size bound on every upload route, held before a byte of a body is stored.

Each upload view declares what it takes with :func:`upload_route`: the field of its archive
(``max_upload_bytes`` of the benchmark in the URL) and, for environments, the field of its
Dockerfile (``MAX_DOCKERFILE_BYTES``); or with :func:`document_route`, one document field
capped by a setting (a write-up: ``PODIUM_WRITEUP_MAX_BYTES``). A body may declare at most
the sum of those plus ``MULTIPART_ALLOWANCE`` for the form fields and part headers around
them.

:class:`BoundedUploadHandler` comes first in ``FILE_UPLOAD_HANDLERS``, so it sees every
multipart body before the handler that streams file parts to disk, whoever parses it: the
view, DRF's CSRF check for session callers, or ``CsrfViewMiddleware`` before a web view even
runs. On a declared route it

- refuses a body that declares more than the route's limit: form fields before the first
  file part are still read (a browser sends its CSRF token first), and the first file part
  ends the parse; nothing more is read and nothing is stored;
- passes each file part on only up to its field's cap and stops the parse at the first
  byte over it, or over the body's declared length;
- refuses a file part the route does not take, and a body that ends inside a file part (the
  server reads only the declared length, so a longer body arrives cut short).

On any other route it stores no file part at all.

The views call :func:`upload_check` before they read the body: it refuses a body sent
without a declared length (chunked) or declared over the limit without reading it, then
parses the body through the handler and raises whatever the handler refused. The web forms
call it through :func:`web_upload_refusal`, after :func:`upload_throttle_check`: the
throttle of the API's upload endpoints, so an entrant's web and API uploads share one count.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO, TypeVar, cast

from django import forms
from django.conf import settings
from django.core.exceptions import NON_FIELD_ERRORS, ImproperlyConfigured
from django.core.files.uploadedfile import UploadedFile
from django.core.files.uploadhandler import FileUploadHandler, SkipFile, StopUpload
from django.forms.utils import ErrorList
from django.http import HttpRequest, QueryDict
from django.utils.datastructures import MultiValueDict
from rest_framework.request import Request
from rest_framework.views import APIView

from portal.contests.models import Benchmark
from portal.contests.templatetags.podium import span
from portal.core import errors
from portal.core.throttles import PostRateThrottle

_ROUTE_ATTRIBUTE = "podium_upload_route"

LENGTH_MISMATCH = (
    "The upload's body does not match its declared Content-Length, so nothing was kept; "
    "send it again."
)

MULTIPART_ALLOWANCE = 1024 * 1024  # form fields and part headers around the files
MAX_DOCKERFILE_BYTES = 256 * 1024  # an environment's Dockerfile, on every route that takes one


class UploadThrottled(errors.PodiumError):
    code = "throttled"
    http_status = 429


@dataclass(frozen=True)
class FilePart:
    """One file field a route takes: at most ``max_bytes``, else ``error(too_large)``."""

    max_bytes: int
    too_large: str
    error: type[errors.PodiumError] = errors.ArchiveTooLarge


@dataclass(frozen=True)
class UploadBounds:
    """What one upload route takes on one benchmark.

    ``request_bytes`` is the most a body may declare; ``parts`` the file fields it may carry;
    ``accepts`` ends every refusal ("this benchmark accepts ...").
    """

    request_bytes: int
    parts: Mapping[str, FilePart]
    accepts: str

    def declared_too_large(self, declared: int) -> str:
        return f"The upload is {declared:,} bytes; {self.accepts}."

    def no_length(self) -> str:
        return (
            "The upload must declare its size in a Content-Length header (chunked uploads "
            f"are refused); {self.accepts}."
        )

    def unexpected_part(self, field_name: str) -> str:
        expected = " and ".join(f"`{name}`" for name in self.parts)
        return f"`{field_name}` is not a file this upload takes; send only {expected}."


@dataclass(frozen=True)
class UploadRoute:
    """An upload view's declaration: the field of its archive, and of its Dockerfile if any."""

    archive_field: str | None
    dockerfile_field: str | None = None
    # A cap of the archive's own format (an estimator's: whestbench's), read when a body
    # comes (its package may be slow to import) and held where it is below the
    # benchmark's ``max_upload_bytes``.
    archive_cap: Callable[[], int] | None = None
    archive_label: str = "source archive"

    def bounds(self, benchmark: Benchmark) -> UploadBounds:
        dockerfile_part = FilePart(
            MAX_DOCKERFILE_BYTES, "The Dockerfile is larger than 256 KiB.", errors.DockerfilePolicy
        )
        if self.archive_field is None:  # a Dockerfile alone (the dry-run check)
            if self.dockerfile_field is None:
                raise ImproperlyConfigured("An upload route takes an archive or a Dockerfile.")
            return UploadBounds(
                MAX_DOCKERFILE_BYTES + MULTIPART_ALLOWANCE,
                {self.dockerfile_field: dockerfile_part},
                "this check takes a Dockerfile of at most 256 KiB",
            )
        archive_bytes = benchmark.max_upload_bytes
        if self.archive_cap is not None:
            archive_bytes = min(archive_bytes, self.archive_cap())
        label = self.archive_label if self.dockerfile_field is None else "context archive"
        parts = {
            self.archive_field: FilePart(
                archive_bytes,
                f"The {label} is larger than {archive_bytes:,} bytes, "
                "the most this benchmark accepts.",
            )
        }
        if self.dockerfile_field is None:
            accepts = f"this benchmark accepts archives of at most {archive_bytes:,} bytes"
            return UploadBounds(archive_bytes + MULTIPART_ALLOWANCE, parts, accepts)
        # The refusal the Dockerfile policy gives a too long text (dockerfile_check).
        parts[self.dockerfile_field] = dockerfile_part
        accepts = (
            "this benchmark accepts a Dockerfile of at most 256 KiB and a context archive "
            f"of at most {archive_bytes:,} bytes"
        )
        return UploadBounds(
            archive_bytes + MAX_DOCKERFILE_BYTES + MULTIPART_ALLOWANCE, parts, accepts
        )


@dataclass(frozen=True)
class DocumentRoute:
    """An upload route of one document whose cap is a setting rather than a benchmark's
    (a write-up): the field it comes in, what to call it, and the setting of its cap."""

    field: str
    label: str
    setting: str

    def bounds(self) -> UploadBounds:
        limit = int(getattr(settings, self.setting))
        part = FilePart(
            limit, f"The {self.label} is larger than {limit:,} bytes, the most accepted."
        )
        accepts = f"a {self.label} may be at most {limit:,} bytes"
        return UploadBounds(limit + MULTIPART_ALLOWANCE, {self.field: part}, accepts)


View = TypeVar("View")


def upload_route(
    *,
    archive: str | None,
    dockerfile: str | None = None,
    archive_cap: Callable[[], int] | None = None,
    archive_label: str = "source archive",
) -> Callable[[View], View]:
    """Declare a view (a function, or an API view class) as an upload route of the
    benchmark named by its ``slug``: which file fields it takes, and so its limits
    (``archive=None``: a Dockerfile alone; ``archive_cap``: a cap of the archive's format,
    held where it is below the benchmark's ``max_upload_bytes``; ``archive_label``: what
    the refusals call the archive)."""
    route = UploadRoute(archive, dockerfile, archive_cap, archive_label)

    def declare(view: View) -> View:
        setattr(view, _ROUTE_ATTRIBUTE, route)
        return view

    return declare


def document_route(*, field: str, label: str, setting: str) -> Callable[[View], View]:
    """Declare a view as an upload route of one document capped by ``setting`` (bytes)."""
    route = DocumentRoute(field, label, setting)

    def declare(view: View) -> View:
        setattr(view, _ROUTE_ATTRIBUTE, route)
        return view

    return declare


def _route_bounds(request: HttpRequest) -> UploadBounds | None:
    """The bounds the resolved view declares, or ``None`` for a route that takes no upload
    (or names no benchmark: the view answers ``not_found`` then)."""
    match = request.resolver_match
    if match is None:
        return None
    view = match.func
    route = getattr(view, _ROUTE_ATTRIBUTE, None) or getattr(
        getattr(view, "view_class", None), _ROUTE_ATTRIBUTE, None
    )
    if isinstance(route, DocumentRoute):
        return route.bounds()
    if not isinstance(route, UploadRoute):
        return None
    benchmark = Benchmark.objects.filter(slug=match.kwargs.get("slug")).first()
    return None if benchmark is None else route.bounds(benchmark)


class BoundedUploadHandler(FileUploadHandler):
    """Holds the route's bounds on a multipart body as it is parsed (see the module).

    It must come first in ``FILE_UPLOAD_HANDLERS``: it decides, part by part and chunk by
    chunk, what the later handlers get to store. It never raises out of the parse (a parse
    in ``CsrfViewMiddleware`` would turn that into a server error); it stops the parse and
    keeps the refusal in ``refusal`` for :func:`upload_check` to raise.
    """

    def __init__(self, request: HttpRequest | None = None) -> None:
        super().__init__(request)
        self._bounds: UploadBounds | None = None
        self._looked_up = False
        self.refusal: errors.PodiumError | None = None
        self._declared_bytes = 0
        self._file_bytes = 0
        self._part: FilePart | None = None
        self._part_bytes = 0

    def bounds(self) -> UploadBounds | None:
        if not self._looked_up:
            self._bounds = _route_bounds(self.request) if self.request is not None else None
            self._looked_up = True
        return self._bounds

    def _refuse(self, refusal: errors.PodiumError) -> StopUpload:
        """Keep the first refusal; the exception that ends the parse without reading on."""
        self.refusal = self.refusal or refusal
        return StopUpload(connection_reset=True)

    def handle_raw_input(
        self,
        input_data: IO[bytes],
        META: dict[str, str],
        content_length: int,
        boundary: str,
        encoding: str | None = None,
    ) -> tuple[QueryDict, MultiValueDict[str, UploadedFile]] | None:
        self._declared_bytes = content_length
        bounds = self.bounds()
        if bounds is not None and content_length > bounds.request_bytes:
            self.refusal = errors.ArchiveTooLarge(bounds.declared_too_large(content_length))
        return None  # the parse goes on, to the form fields before the first file part

    def new_file(
        self,
        field_name: str,
        file_name: str,
        content_type: str,
        content_length: int | None,
        charset: str | None = None,
        content_type_extra: dict[str, bytes] | None = None,
    ) -> None:
        super().new_file(
            field_name, file_name, content_type, content_length, charset, content_type_extra
        )
        bounds = self.bounds()
        if bounds is None:
            raise SkipFile  # not an upload route: read past the part, store none of it
        if self.refusal is not None:
            raise StopUpload(connection_reset=True)
        part = bounds.parts.get(field_name)
        if part is None:
            raise self._refuse(errors.InvalidParameter(bounds.unexpected_part(field_name)))
        self._part, self._part_bytes = part, 0

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes | None:
        self._part_bytes += len(raw_data)
        self._file_bytes += len(raw_data)
        if self._part is not None and self._part_bytes > self._part.max_bytes:
            raise self._refuse(self._part.error(self._part.too_large))
        if self._file_bytes > self._declared_bytes:
            raise self._refuse(errors.ArchiveTooLarge(LENGTH_MISMATCH))
        return raw_data

    def file_complete(self, file_size: int) -> UploadedFile | None:
        return None  # the next handler returns the stored file

    def upload_interrupted(self) -> None:
        # The body ended inside a file part: the part is dropped, the upload refused.
        if self.bounds() is not None:
            self.refusal = self.refusal or errors.ArchiveTooLarge(LENGTH_MISMATCH)


def _bounded_handler(request: HttpRequest) -> BoundedUploadHandler:
    handlers = request.upload_handlers
    if not handlers or not isinstance(handlers[0], BoundedUploadHandler):
        raise ImproperlyConfigured(
            "FILE_UPLOAD_HANDLERS must start with portal.contests.uploads.BoundedUploadHandler."
        )
    return handlers[0]


def upload_check(request: HttpRequest | Request) -> None:
    """Refuse an upload that breaks its route's bounds; call it first in an upload view.

    Refused before any of the body is read (``ArchiveTooLarge``): a body sent without a
    declared length (``Transfer-Encoding``, chunked), or declared over the limit. (Neither
    header is an empty body: nothing to bound.) Otherwise the body is parsed now, through
    :class:`BoundedUploadHandler`, and what it refused is raised (``ArchiveTooLarge`` for an
    archive over its cap or a body that does not match its length, ``DockerfilePolicy`` for
    a Dockerfile over 256 KiB, ``InvalidParameter`` for a file field the route does not
    take); the parts already stored are temporary files, removed when the request ends.
    Raises ``ImproperlyConfigured`` on a view not declared with :func:`upload_route`.
    """
    handler = _bounded_handler(request._request if isinstance(request, Request) else request)
    bounds = handler.bounds()
    if bounds is None:
        raise ImproperlyConfigured("upload_check() needs a view declared with @upload_route.")
    declared = str(request.META.get("CONTENT_LENGTH") or "")
    chunked = bool(request.META.get("HTTP_TRANSFER_ENCODING"))
    if chunked or (declared and not (declared.isascii() and declared.isdigit())):
        raise errors.ArchiveTooLarge(bounds.no_length())
    if declared and int(declared) > bounds.request_bytes:
        raise errors.ArchiveTooLarge(bounds.declared_too_large(int(declared)))
    request.FILES  # noqa: B018 - parses the body (Django and DRF parse on first access)
    if handler.refusal is not None:
        raise handler.refusal


class _UploadsScope(APIView):
    throttle_scope = "uploads"


_PERIODS = {1: "second", 60: "minute", 3600: "hour", 86400: "day"}


def upload_throttle_check(request: HttpRequest) -> None:
    """Count a web upload against the entrant's ``uploads`` allowance
    (``PODIUM_THROTTLE_UPLOADS``): the throttle and the counter of the API's upload
    endpoints, so web and API uploads together stay under it. Raises
    :class:`UploadThrottled`, saying when the next upload may come, once it is spent.
    """
    throttle = PostRateThrottle()
    # The throttle reads the method, the user and the client's address, which a Django
    # request carries as DRF's does (a DRF wrapper without authenticators would be anonymous).
    if throttle.allow_request(cast(Request, request), _UploadsScope()):
        return
    wait_s = throttle.wait()
    when = span(math.ceil(wait_s)) if wait_s is not None else "a while"
    allowed, duration_s = throttle.parse_rate(throttle.get_rate())
    period = _PERIODS.get(duration_s or 0, f"{duration_s} seconds")
    raise UploadThrottled(
        f"You have made {allowed} uploads in the last {period}, the most allowed (web and "
        f"API together); you may upload again in {when}."
    )


def web_upload_refusal(request: HttpRequest) -> errors.PodiumError | None:
    """For a web upload form: the refusal of :func:`upload_throttle_check` or of
    :func:`upload_check` (in that order, as the API checks them), or ``None``."""
    try:
        upload_throttle_check(request)
        upload_check(request)
    except errors.PodiumError as refusal:
        return refusal
    return None


def show_refusal(form: forms.Form, detail: str) -> None:
    """Show a refused upload's sentence above an unbound form, with no field errors (the
    refused body fills in nothing)."""
    form.errors[NON_FIELD_ERRORS] = ErrorList(
        [detail], error_class="nonfield", renderer=form.renderer
    )
