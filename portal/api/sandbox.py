"""The entrant's ladder before an upload: the Dockerfile dry-run check, and the scored
run's sandbox published for ``podium run --local`` (docs/api.md, "Local runs")."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.http import FileResponse
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api import downloads
from portal.api import serializers as s
from portal.api.common import RawAPIView, dockerfile_text, get_benchmark
from portal.contests import rules, sandbox
from portal.contests.hardware import class_hardware
from portal.contests.kinds import timed_path_check
from portal.contests.models import Benchmark, Cohort
from portal.contests.uploads import MAX_DOCKERFILE_BYTES, upload_check, upload_route
from portal.core import errors
from portal.core.throttles import PostRateThrottle
from portal.environments.services import dockerfile_judge, entrant_check_verified
from portal.hosts.selectors import noise_band

# Where the published container spec names what only the local machine knows.
IMAGE = "{image}"
SUPERVISOR = "{supervisor}"
INPUT = "{input}"


@upload_route(archive=None, dockerfile="dockerfile")
class DockerfileCheckView(APIView):
    """Judge a Dockerfile as an environment upload would; creates and charges nothing."""

    parser_classes = [MultiPartParser, FormParser, JSONParser]
    throttle_scope = "checks"
    throttle_classes = [PostRateThrottle]

    @extend_schema(
        operation_id="benchmarks_dockerfile_check",
        tags=["benchmarks"],
        request={
            "multipart/form-data": s.DockerfileCheckUploadSerializer,
            "application/json": s.DockerfileCheckTextSerializer,
        },
        responses={
            200: s.DockerfileCheckSerializer,
            **s.error_responses(400, 401, 403, 404, 413, 429),
        },
    )
    def post(self, request: Request, slug: str) -> Response:
        benchmark = get_benchmark(slug)
        timed_path_check(benchmark, "dockerfile_check")
        # As an upload: the check is work for the web server, so only a verified account.
        entrant_check_verified(entrant=request.user)
        upload_check(request)
        # A JSON body may be any value; only an object carries the field.
        given = request.data.get("dockerfile") if isinstance(request.data, dict) else None
        if isinstance(given, UploadedFile):
            text = dockerfile_text(given)
        elif isinstance(given, str):
            # Past the cap it is judged as an oversized upload is (replacement keeps it long).
            text = given.encode("utf-8", "replace")[: MAX_DOCKERFILE_BYTES + 1].decode(
                "utf-8", "replace"
            )
        else:
            raise errors.InvalidParameter(
                "Send the Dockerfile as the `dockerfile` field: a file part, or a string "
                "in a JSON body."
            )
        verdict = dockerfile_judge(benchmark=benchmark, text=text)
        listed = [{"line": v.line, "message": v.message} for v in verdict.violations]
        if not verdict.ok and not listed:
            listed = [{"line": None, "message": verdict.detail}]
        data = {
            "ok": verdict.ok,
            "code": None if verdict.ok else errors.DockerfilePolicy.code,
            "detail": verdict.detail,
            "errors": listed,
        }
        return Response(s.DockerfileCheckSerializer(data).data)


def supervisor_facts() -> dict[str, Any] | None:
    """The portal's copy of the supervisor binary (``PODIUM_SUPERVISOR``): its SHA-256,
    size and platform; None when the portal has none."""
    path = Path(settings.PODIUM_SUPERVISOR)
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return {
        "sha256": hashlib.sha256(data).hexdigest(),
        "size": len(data),
        "platform": sandbox.elf_platform(data[:20]),
    }


def practice_facts(request: Request, benchmark: Benchmark) -> dict[str, Any] | None:
    cohort = Cohort.objects.filter(benchmark=benchmark, kind=Cohort.PRACTICE).first()
    if cohort is None:
        return None
    count = len(downloads.practice_items(cohort))
    kwargs = {"slug": benchmark.slug}
    return {
        "url": request.build_absolute_uri(reverse("api:practice", kwargs=kwargs)),
        "download_url": request.build_absolute_uri(reverse("api:practice-download", kwargs=kwargs)),
        "count": count,
        "needed": rules.pass_threshold(count, benchmark.pass_min_matches, benchmark.cohort_size),
    }


class SandboxView(APIView):
    """What a local run needs to reproduce a scored one: the container spec, limits,
    supervisor and seccomp arrangement, hardware class and practice cohort."""

    @extend_schema(
        operation_id="benchmarks_sandbox",
        tags=["benchmarks"],
        responses={200: s.SandboxSerializer, **s.error_responses(400, 401, 404)},
    )
    def get(self, request: Request, slug: str) -> Response:
        benchmark = get_benchmark(slug)
        timed_path_check(benchmark, "sandbox")
        practice = practice_facts(request, benchmark)
        warm = sandbox.prewarm_bounds(
            run_memory_bytes=benchmark.run_memory_bytes, budget_bytes=settings.PODIUM_PREWARM_BYTES
        )
        oom = settings.PODIUM_RUN_OOM_SCORE_ADJ
        container = sandbox.container_spec(
            image=IMAGE,
            limits=benchmark,
            supervisor=SUPERVISOR,
            input_dir=INPUT,
            expect_bytes=4 * (practice["count"] if practice else benchmark.cohort_size),
            run_uid=int(settings.PODIUM_RUN_UID),
            supervisor_uid=int(settings.PODIUM_SUPERVISOR_UID),
            warm=warm,
            oom_score_adj=None if oom is None else int(oom),
        )
        facts = supervisor_facts()
        hardware = class_hardware(benchmark.hardware_class_id)
        supervisor = {
            "available": facts is not None,
            "sha256": facts["sha256"] if facts else None,
            "size": facts["size"] if facts else None,
            "platform": facts["platform"] if facts else None,
            "pinned_sha256": hardware["supervisor_sha256"],
            "download_url": request.build_absolute_uri(
                reverse("api:sandbox-supervisor", kwargs={"slug": benchmark.slug})
            )
            if facts
            else None,
        }
        band = noise_band(benchmark.hardware_class_id)
        data = {
            "benchmark": benchmark.slug,
            "hardware": hardware,
            "noise_band": None if band is None else dict(s.NoiseBandSerializer(band).data),
            "supervisor": supervisor,
            "seccomp": {
                "engine_profile": "default",
                "supervisor_filter": True,
                "detail": "No seccomp option is passed: the engine's default profile stays, "
                "and the supervisor stacks its own filter (compiled into the binary, so "
                "its SHA-256 covers it) on the entrant's processes.",
            },
            "container": container,
            "placeholders": {"image": IMAGE, "supervisor": SUPERVISOR, "input": INPUT},
            "runtime": {
                "entrypoint": rules.RUN_ENTRYPOINT,
                "manifest": sandbox.MANIFEST_PATH,
                "image_root": sandbox.IMAGE_ROOT,
                "output": sandbox.OUTPUT_PATH,
            },
            "limits": {
                "score_timeout_s": benchmark.score_timeout_s,
                "outer_timeout_s": sandbox.outer_timeout_s(benchmark.score_timeout_s, warm),
                "supervisor_deadline_ms": sandbox.supervisor_deadline_ms(benchmark.score_timeout_s),
                "build_timeout_s": benchmark.build_timeout_s,
                "run_memory_bytes": benchmark.run_memory_bytes,
                "run_pids_limit": benchmark.run_pids_limit,
                "run_tmpfs_bytes": benchmark.run_tmpfs_bytes,
                "run_shm_bytes": benchmark.run_shm_bytes,
                "run_output_tmpfs_bytes": benchmark.run_output_tmpfs_bytes,
                "max_upload_bytes": benchmark.max_upload_bytes,
                "max_image_bytes": benchmark.max_image_bytes,
            },
            "build": sandbox.build_container_spec(image=IMAGE),
            "scoring_host": {
                "dedicated_cpus": True,
                "others_paused": True,
                "gpus": hardware["gpus"],
            },
            "practice": practice,
        }
        return Response(s.SandboxSerializer(data).data)


class SandboxSupervisorView(RawAPIView):
    """The portal's supervisor binary (``application/octet-stream``); its SHA-256 is in
    the sandbox."""

    @extend_schema(
        operation_id="benchmarks_sandbox_supervisor",
        tags=["benchmarks"],
        responses={
            (200, "application/octet-stream"): OpenApiTypes.BINARY,
            **s.error_responses(400, 401, 404),
        },
    )
    def get(self, request: Request, slug: str) -> FileResponse:
        timed_path_check(get_benchmark(slug), "sandbox")
        path = Path(settings.PODIUM_SUPERVISOR)
        try:
            handle = path.open("rb")
        except OSError as exc:
            raise errors.NotFound("This portal has no supervisor binary to hand out.") from exc
        return FileResponse(
            handle,
            as_attachment=True,
            filename="supervise",
            content_type="application/octet-stream",
        )
