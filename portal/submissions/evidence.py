"""A scored run's evidence bundle for staff review: one .tar.gz, audited before it is built.

Members (each present when it was kept; ``run.json`` lists the missing ones):

- ``run.json``: the run's record (verdict, times, rusage, matches, health readings,
  off-clock overhead), the digests (source, environment image, submission image,
  output, supervisor), the cohort and the submission's timeline;
- ``manifest.tsv``: the manifest as staged (request id, staged name), in run order;
- ``mapping.tsv``: position, request id, staged name, canonical member;
- ``output.bin``: the output file as the supervisor read it;
- ``supervisor.json``: the supervisor's result line;
- ``run.log``, ``build.log``, ``environment-build.log``: the logs.

The bundle names the cohort's members, so it is for staff only and every download is
an audit event.
"""

from __future__ import annotations

import io
import json
import tarfile
import tempfile
import time
from pathlib import Path
from typing import IO, Any

from portal.audit.services import NOWHERE, Origin, audit_record
from portal.core import errors, storage
from portal.submissions.models import Run


def _record(run: Run, missing: list[str]) -> dict[str, Any]:
    submission = run.submission
    return {
        "run": {
            "id": run.pk,
            "try_number": run.try_number,
            "status": run.status,
            "verdict": run.verdict,
            "verdict_reason": run.verdict_reason,
            "created_at": run.created_at.isoformat(),
            "started_at": run.started_at.isoformat() if run.started_at else None,
            "finished_at": run.finished_at.isoformat() if run.finished_at else None,
            "container_id": run.container_id,
            "host_start_ns": run.host_start_ns,
            "host_end_ns": run.host_end_ns,
            "trusted_start_ns": run.trusted_start_ns,
            "trusted_end_ns": run.trusted_end_ns,
            "wall_time_ns": run.wall_time_ns,
            "exit_code": run.exit_code,
            "exit_signal": run.exit_signal,
            "killed": run.killed,
            "rusage": run.rusage,
            "matches": run.matches,
            "total": run.total,
            "passed": run.passed,
            "health_readings": run.readings,
            "overhead_ms": run.overhead_ms,
        },
        "submission": {
            "id": submission.pk,
            "entrant": submission.entrant.get_username(),
            "benchmark": submission.benchmark.slug,
            "kind": submission.kind,
            "status": submission.status,
            "submitted_at": submission.submitted_at.isoformat(),
            "source_name": submission.source_name,
            "source_bytes": submission.source_bytes,
            "timeline": [
                {"status": event.status, "at": event.at.isoformat(), "note": event.note}
                for event in submission.events.all()
            ],
        },
        "cohort": {"id": run.cohort_id, "kind": run.cohort.kind},
        "digests": {
            "source": submission.source_sha256,
            "environment_image": submission.environment_image_digest,
            "submission_image": submission.image_digest,
            "output": run.output_sha256,
            "supervisor": run.supervisor_sha256,
        },
        "missing": missing,
    }


def _files(run: Run) -> dict[str, Path]:
    private = storage.run_private_dir(run.pk)
    return {
        "manifest.tsv": private / storage.RUN_MANIFEST,
        "mapping.tsv": private / storage.RUN_MAPPING,
        "output.bin": private / storage.RUN_OUTPUT,
        "supervisor.json": private / storage.RUN_SUPERVISOR,
        "run.log": storage.run_log(run.pk),
        "build.log": storage.submission_build_log(run.submission_id),
        "environment-build.log": storage.environment_build_log(run.submission.environment_id),
    }


def _add(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(f"run-{name}")
    info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
    archive.addfile(info, io.BytesIO(data))


def run_evidence_open(run: Run) -> IO[bytes]:
    """The run's evidence bundle as a readable temporary .tar.gz (closing it deletes it).

    Members are named ``run-<id>/<file>``.
    """
    present: dict[str, bytes] = {}
    missing: list[str] = []
    for name, path in _files(run).items():
        try:
            present[name] = path.read_bytes()
        except FileNotFoundError:
            missing.append(name)
    record = json.dumps(_record(run, missing), indent=2, sort_keys=True).encode() + b"\n"
    handle = tempfile.TemporaryFile(dir=storage.upload_tmp_dir())  # noqa: SIM115 - returned open
    try:
        with tarfile.open(fileobj=handle, mode="w:gz") as archive:
            _add(archive, f"{run.pk}/run.json", record)
            for name, data in present.items():
                _add(archive, f"{run.pk}/{name}", data)
    except BaseException:
        handle.close()
        raise
    handle.seek(0)
    return handle


def run_evidence_review(
    *, run: Run, actor: Any, reason: str, origin: Origin = NOWHERE
) -> IO[bytes]:
    """Staff: the evidence bundle of ``run``, audited (with the reason) before it is built.

    The caller has checked the ``submissions.download_evidence`` permission
    (``staff.DOWNLOAD_EVIDENCE``).
    """
    reason = reason.strip()
    if not reason:
        raise errors.InvalidParameter("Give the reason for downloading this run's evidence.")
    audit_record(
        actor=actor,
        action="run.evidence.download",
        target=f"run:{run.pk}",
        origin=origin,
        reason=reason,
        details={"submission": run.submission_id},
    )
    return run_evidence_open(run)
