"""The two builds: an environment's Dockerfile (attempt-free) and a submission's build.sh.

Both are called by thin Celery tasks (``scoring/tasks.py``) with an id, on the
``builds`` queue. Each claims its row with a conditional update first, so a
redelivered message does nothing the second time.

Who pays for what:
- Environment builds are attempt-free. Every bad outcome, a platform fault included,
  ends the build as ``failed``, ``timed_out`` or ``too_large`` with one sentence, and
  the entrant may rebuild.
- A submission build runs inside the charged attempt: build.sh failing, running past
  the cap, leaving no executable ``/submission/run`` or an oversized image is the
  entrant's ``build_failed`` (the attempt counts). A Docker Engine error is never the
  entrant's fault: the build is requeued once and, if the platform fails again, the
  submission ends ``infra_failed`` with its attempt refunded (see
  :func:`submission_build_platform_failure`).

Neither build ever sees a cohort file: the environment build gets its Dockerfile and
its own context archive, the submission build gets its source archive, nothing else.

Builds run entrant code, so each runs inside ``scoring.build.buildbox.sandbox``: only on the
build network, and only once ``scoring.build.buildnet`` found every firewall rule in place
(otherwise the build waits, unclaimed and uncharged, and looks again later), with
memory, swap, PID, CPU and disk bounds; build.sh also runs with every capability
dropped and ``no-new-privileges``. An engine failure is told to the entrant as one
plain sentence; its details go to staff (the audit trail's ``build.platform_fault``).

A build leaves nothing behind (:class:`BuildLeftovers`): whatever way an environment
build ends, the intermediate images of its steps and its step containers are removed,
unless a ready environment or submission still uses them. A base image that declares
``VOLUME`` is refused before anything runs (:func:`_base_image_volumes`): every step
would get an anonymous volume that no disk cap counts.

The build cache, and its cap: the classic builder's cache is the step images that stay,
and after a build only the steps under a tagged image stay, as that image's layers. So
the cache is the images of ready environments and submissions, no more: at most
``max_environments`` environments of at most ``max_image_bytes`` each per entrant (plus
their submission images), collected when an environment is deleted or replaced (its
image and its untagged parents go, ``scoring.remove_image``) and when the benchmark's
artifacts are purged (``scoring.upkeep.retention``). Each entrant's chain is salted
(``dockerfile_policy.salt_build_cache``), so no entry is ever shared between entrants.

Builds give way to scores (``scoring.host.machine``): a score holding the machine pauses
every other container on the host. A build starts no step while a score holds the
machine, and its cap counts only time when none did.
"""

from __future__ import annotations

import io
import logging
import posixpath
import re
import secrets
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, cast

from django.conf import settings

from podium_policy import archives, dockerfile_policy
from podium_policy.dockerfile_policy import ENTRANT_NAMESPACE
from portal.contests import rules, sandbox
from portal.contests.hardware import class_platform
from portal.core import storage
from portal.environments.models import Environment
from portal.environments.services import (
    ENGINE_FAULT_REASON,
    allowed_prefixes,
    build_platform_fault_record,
    environment_claim_build,
    environment_finish_build,
    environment_wait_for_build_network,
)
from portal.submissions.builds import (
    submission_build_finished,
    submission_build_platform_failure,
    submission_wait_for_build_network,
)
from portal.submissions.intake import source_path
from portal.submissions.models import Submission
from portal.submissions.services import submission_transition
from scoring import engine
from scoring.build import buildbox, buildnet
from scoring.build.logfile import CappedLog
from scoring.host import machine
from scoring.images import platforms, registry

log = logging.getLogger(__name__)

BUILD_LOG = storage.BUILD_LOG
CONTEXT_ARCHIVE = "context.archive"
SHELL = "/bin/sh"
LOG_THREAD_GRACE_S = 10.0
# How often build.sh's cap is re-checked (and the machine lock consulted).
WAIT_SLICE_S = 1.0
# A build.sh container found paused this long while no score holds the machine was
# left paused by a holder that died: the build unpauses it itself.
STRAY_PAUSE_S = 3.0

# build.sh is optional: without one the source is committed as it is.
BUILD_SCRIPT = sandbox.BUILD_SCRIPT

# Go's os.FileMode bits, as the engine reports them in a path stat.
MODE_DIR = 1 << 31
MODE_SYMLINK = 1 << 27
MODE_TYPE = (1 << 31) | (1 << 27) | (1 << 26) | (1 << 25) | (1 << 24) | (1 << 21) | (1 << 19)
EXEC_BITS = 0o111
OTHERS_EXEC = 0o001

_CLIENT_ERROR = re.compile(r"^engine: 4\d\d Client Error.*?\(\"(?P<message>.*)\"\)\s*$", re.S)
_STEP_EXIT = re.compile(r"returned a non-zero code: (\d+)")
# What the classic builder says after each step: the image it committed, and the
# container each RUN step runs in.
_STEP_IMAGE = re.compile(r" ---> ([0-9a-f]{12,64})")
_STEP_CONTAINER = re.compile(r" ---> Running in ([0-9a-f]{12,64})")
# How long the clean-up waits for a step container the engine is still removing.
LEFTOVER_WAIT_S = 10.0
# The longest unfinished line kept while reading the build's output for those ids.
_PARTIAL_LINE_CHARS = 256


def _short_tag() -> str:
    """A fresh tag per build, so a rebuild never reuses (or untags) an earlier image."""
    return secrets.token_hex(6)


def _frozen(host: str) -> bool:
    return machine.builds_frozen(host)


def _discard_image(ref: str) -> None:
    """Remove an image we made; a failure to clean up must not change the verdict."""
    try:
        engine.remove_image(ref)
    except engine.EngineError:
        log.exception("could not remove image %s", ref)


class BuildLeftovers:
    """The images and containers an environment build made, read from its own output,
    so that whatever way the build ends none of them stays on the host.

    The classic builder commits an image after every step that succeeded and says so
    (`` ---> <id>``); when a later step fails or runs past the cap, no tag points at
    those images and nothing else would ever remove them. :meth:`write` passes the
    output on to ``on_log`` and notes the ids; :meth:`remove` takes the containers
    away, then every noted image that carries no name (a base image, and a ready
    environment's tagged image, always carry one), that no Environment or Submission
    records as its digest, and that no container or child image uses (the engine
    refuses those: a successful build's steps are its image's parents and stay).

    The output also holds what the entrant's steps print, so an id there is never
    trusted alone: a container is removed only when it was made under this build's own
    cgroup parent, and an image only on the conditions above.
    """

    def __init__(self, on_log: Callable[[str], None], cgroup_parent: str) -> None:
        self.on_log = on_log
        self.cgroup_parent = cgroup_parent
        self.images: list[str] = []
        self.containers: list[str] = []
        self._partial = ""

    def write(self, text: str) -> None:
        self.on_log(text)
        *lines, partial = (self._partial + text).split("\n")
        self._partial = partial[-_PARTIAL_LINE_CHARS:]
        for line in lines:
            line = line.rstrip("\r")
            if container := _STEP_CONTAINER.fullmatch(line):
                self.containers.append(container.group(1))
            elif (image := _STEP_IMAGE.fullmatch(line)) and image.group(1) not in self.images:
                self.images.append(image.group(1))

    def remove(self) -> None:
        """Remove what the build made and nothing uses (see the class); a failure to
        clean up is logged and never changes the build's verdict."""
        try:
            self._remove_containers()
            self._remove_images()
        except Exception:
            log.exception("could not remove what build %s left", self.cgroup_parent)

    def _remove_containers(self) -> None:
        deadline = time.monotonic() + LEFTOVER_WAIT_S
        for container_id in self.containers:
            try:
                if engine.cgroup_parent(container_id) != self.cgroup_parent:
                    continue  # not one of this build's: an id the entrant printed
                engine.remove_container(container_id)
            except engine.NoSuchObject:
                continue
            except engine.EngineError:
                # The engine is removing it itself (a cancelled build): wait for that.
                while time.monotonic() < deadline and engine.container_exists(container_id):
                    time.sleep(0.2)

    def _remove_images(self) -> None:
        unnamed = [
            full
            for full in (engine.unnamed_image_id(image) for image in reversed(self.images))
            if full is not None
        ]
        recorded = set(
            Environment.objects.filter(image_digest__in=unnamed).values_list(
                "image_digest", flat=True
            )
        ) | set(
            Submission.objects.filter(image_digest__in=unnamed).values_list(
                "image_digest", flat=True
            )
        )
        for image_id in unnamed:  # the newest first: each removal frees its parent
            if image_id not in recorded:
                engine.remove_unnamed_image(image_id)


# Environment builds ----------------------------------------------------------------


@dataclass(frozen=True)
class EnvironmentResult:
    status: str
    reason: str = ""
    image_tag: str = ""
    image_digest: str = ""
    image_bytes: int | None = None


def build_environment(environment_id: int) -> None:
    """Build a queued environment's image and record ready, failed, timed_out or too_large.

    Claims queued -> building first; a second delivery of the same task finds the row
    already claimed and returns. The build log (``environment_dir/build.log``) is
    capped and flushed as it grows. Whatever the outcome, no image is left tagged
    unless the environment ends ``ready``.
    """
    if not _build_network_ready(
        lambda retry_in_s: environment_wait_for_build_network(
            environment_id=environment_id, retry_in_s=retry_in_s
        )
    ):
        return
    environment = environment_claim_build(environment_id)
    if environment is None:
        return
    cap_s = environment.benchmark.build_timeout_s
    folder = storage.ensure_dir(storage.environment_dir(environment.pk))
    tag = f"{ENTRANT_NAMESPACE}/env-{environment.pk}:{_short_tag()}"
    try:
        with CappedLog(folder / BUILD_LOG) as build_log:
            build_log.write(f"Building environment {environment.name} (cap {cap_s} s)\n")
            try:
                result = _build_environment_image(environment, tag, folder, build_log)
            except (engine.EngineError, buildbox.SandboxError, buildnet.NotEnforced) as exc:
                _discard_image(tag)
                result = _environment_platform_fault(environment.pk, str(exc))
            build_log.write(_environment_outcome_line(result))
    except Exception as exc:
        # Our own bug or a broken data folder: still a platform fault, and still free.
        _discard_image(tag)
        environment_finish_build(
            environment_id=environment.pk,
            status=Environment.FAILED,
            reason=f"platform error: {type(exc).__name__}; rebuild it.",
        )
        raise
    recorded = environment_finish_build(
        environment_id=environment.pk,
        status=result.status,
        image_tag=result.image_tag,
        image_digest=result.image_digest,
        image_bytes=result.image_bytes,
        reason=result.reason,
    )
    if not recorded and result.image_tag:
        # Someone (the reaper) settled the build meanwhile: leave nothing behind.
        _discard_image(result.image_tag)


def _build_environment_image(
    environment: Environment, tag: str, folder: Path, build_log: CappedLog
) -> EnvironmentResult:
    benchmark = environment.benchmark
    cap_s = benchmark.build_timeout_s
    with tempfile.TemporaryFile(dir=folder) as context:
        try:
            _write_environment_context(environment, folder, context, build_log)
        except archives.ArchiveError as exc:
            return EnvironmentResult(
                Environment.FAILED, f"The build context archive cannot be used: {exc}"
            )
        context.seek(0)
        host = machine.scoring_host()
        machine.wait_while_frozen(host)
        platform = class_platform(benchmark.hardware_class_id)
        unavailable = _platform_unavailable(environment, platform)
        if unavailable is None:
            unavailable = _base_image_volumes(environment)
        if unavailable is not None:
            build_log.write(unavailable.reason + "\n")
            return unavailable
        with buildbox.sandbox(
            job=buildbox.job_name("env", environment.pk), disk_cap_bytes=benchmark.max_image_bytes
        ) as box:
            made = BuildLeftovers(build_log.write, box.bounds.cgroup_parent)
            try:
                outcome = engine.build_image(
                    context=context,
                    tag=tag,
                    on_log=made.write,
                    timeout_s=cap_s,
                    platform=platform,
                    frozen=lambda: _frozen(host),
                    bounds=box.bounds,
                )
                if box.guard.unfiltered:
                    _discard_image(tag)
                    raise buildnet.NotEnforced(box.guard.unfiltered)
            finally:
                made.remove()
            exit_code = _STEP_EXIT.search(outcome.error)
            bound = box.explain(exit_code=int(exit_code.group(1)) if exit_code else None)
    if outcome.timed_out:
        _discard_image(tag)
        return EnvironmentResult(
            Environment.TIMED_OUT, f"The build ran past the {cap_s}-second cap."
        )
    if not outcome.ok:
        _discard_image(tag)
        if outcome.error.startswith("engine: ") and not _CLIENT_ERROR.match(outcome.error):
            return _environment_platform_fault(environment.pk, outcome.error)
        reason = _build_failure_reason(outcome.error)
        if outcome.error.startswith("engine: "):
            build_log.write(reason + "\n")  # the engine did not stream this one
        return EnvironmentResult(Environment.FAILED, f"{reason} {bound}".strip())
    info = engine.image_info(tag)
    if info.size > benchmark.max_image_bytes:
        _discard_image(tag)
        return EnvironmentResult(
            Environment.TOO_LARGE,
            f"The image is {info.size:,} bytes; the cap is {benchmark.max_image_bytes:,} bytes.",
        )
    if not engine.image_has_path(tag, SHELL):
        _discard_image(tag)
        return EnvironmentResult(
            Environment.FAILED, "The image has no /bin/sh, which build.sh needs."
        )
    return EnvironmentResult(
        Environment.READY, image_tag=tag, image_digest=info.id, image_bytes=info.size
    )


def _platform_unavailable(environment: Environment, platform: str) -> EnvironmentResult | None:
    """The build refused before it starts when a FROM image has no image for the class's
    platform, as far as the engine or the image's registry can tell (the Dockerfile
    policy's platform check; an image neither can tell about passes). Attempt-free, as
    every environment build."""
    violations = dockerfile_policy.check_platforms(
        environment.dockerfile,
        allowed_prefixes(environment.benchmark),
        platform=platform,
        image_platforms=platforms.image_platforms,
    )
    if not violations:
        return None
    return EnvironmentResult(
        Environment.FAILED,
        f"The Dockerfile cannot be built for {platform}: "
        f"{dockerfile_policy.format_violations(violations)}",
    )


def _base_image_volumes(environment: Environment) -> EnvironmentResult | None:
    """The build refused before it starts when an image a ``FROM`` line builds on
    declares ``VOLUME``: every step of that stage (and the scored run, whatever its
    read-only root) would get an anonymous volume that no disk cap counts. The
    Dockerfile's own ``VOLUME`` lines are refused by the policy at upload.

    An image the engine does not have yet is pulled first (the builder would pull it
    anyway); one its registry does not have fails the build. Attempt-free, as every
    environment build; an engine that fails is a platform fault (raised).
    """
    for reference in dockerfile_policy.base_images(
        environment.dockerfile, allowed_prefixes(environment.benchmark)
    ):
        try:
            volumes = engine.image_volumes(reference)
        except engine.NoSuchObject:
            try:
                engine.pull_image(reference)
            except engine.NoSuchObject:
                return EnvironmentResult(
                    Environment.FAILED,
                    f"The base image {reference} was not found in its registry.",
                )
            volumes = engine.image_volumes(reference)
        if volumes:
            return EnvironmentResult(
                Environment.FAILED,
                f"The base image {reference} declares VOLUME ({', '.join(volumes)}): files "
                "written to a volume escape the build's disk cap and the scored run's "
                "read-only root, so it cannot be built on; use a base image without volumes.",
            )
    return None


def _build_failure_reason(error: str) -> str:
    """The entrant's sentence for a failed build: the failing step, or the engine's
    refusal of the Dockerfile itself (a parse error)."""
    client_error = _CLIENT_ERROR.match(error)
    if client_error:
        return f"The Dockerfile build failed: {client_error.group('message')}"
    return f"The Dockerfile build failed: {error.rstrip('.')}."


def _environment_platform_fault(environment_id: int, detail: str) -> EnvironmentResult:
    """Not the entrant's doing: a plain sentence for them, the details for staff."""
    log.error("platform fault building environment %s: %s", environment_id, detail)
    build_platform_fault_record(target=f"environment:{environment_id}", detail=detail)
    return EnvironmentResult(
        Environment.FAILED, f"{ENGINE_FAULT_REASON}; rebuild it, it costs nothing."
    )


def _build_network_ready(wait: Callable[[float], bool]) -> bool:
    """Whether the build network's rules are all in place; if not, ``wait(retry_in_s)``
    puts the build off (it is looked at again later) and False is returned."""
    try:
        buildnet.require()
    except buildnet.NotEnforced as missing:
        log.error("build network not enforced, builds wait: %s", missing)
        wait(float(settings.PODIUM_BUILD_NETWORK_WAIT_S))
        return False
    return True


def _environment_outcome_line(result: EnvironmentResult) -> str:
    if result.status == Environment.READY:
        return (
            f"Environment ready: {result.image_tag} ({result.image_digest}, "
            f"{result.image_bytes or 0:,} bytes)\n"
        )
    return f"Environment {result.status}: {result.reason}\n"


def _write_environment_context(
    environment: Environment, folder: Path, dest: IO[bytes], build_log: CappedLog
) -> None:
    """Write the build context tar: the environment's Dockerfile at the root, then the
    members of its context archive (validated and normalized by ``archives``).

    The Dockerfile is always the policy-checked text stored on the row, with the owner's
    build cache label after every ``FROM`` (``dockerfile_policy.salt_build_cache``: no
    entrant's build reuses a step another entrant built); a ``Dockerfile``
    at the root of the context archive is skipped (and the log says so). Nothing is held
    in memory: the normalized context goes through a temporary file.
    """
    salt = dockerfile_policy.build_cache_salt(settings.SECRET_KEY, environment.owner_id)
    dockerfile = dockerfile_policy.salt_build_cache(environment.dockerfile, salt).encode()
    with tarfile.open(fileobj=dest, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        info.mode = 0o644
        tar.addfile(info, io.BytesIO(dockerfile))
        if not environment.has_context:
            return
        archive = folder / CONTEXT_ARCHIVE
        fmt = archives.detect_format(archive)
        archives.inspect_archive(archive, fmt, require_entrypoint=False)
        with tempfile.TemporaryFile(dir=folder) as normalized:
            archives.write_normalized_tar(archive, fmt, normalized, prefix="context")
            normalized.seek(0)
            with tarfile.open(fileobj=normalized, mode="r|") as members:
                for member in members:
                    name = _strip_prefix(member.name, "context")
                    if not name:
                        continue
                    if name == "Dockerfile":
                        build_log.write(
                            "The context archive's own Dockerfile is ignored; "
                            "the environment's Dockerfile is used.\n"
                        )
                        continue
                    member.name = name  # symlink targets are relative: they stay as they are
                    tar.addfile(member, members.extractfile(member) if member.isfile() else None)


def _strip_prefix(name: str, prefix: str) -> str:
    name = name.rstrip("/")
    if name == prefix:
        return ""
    if not name.startswith(prefix + "/"):
        raise archives.ArchiveError(f"unexpected member {name!r} in the normalized archive")
    return name[len(prefix) + 1 :]


# Submission builds -------------------------------------------------------------------


class _EntrantFailure(Exception):
    """The entrant's own build failure: build_failed, the attempt counts."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def build_submission(submission_id: int) -> None:
    """Run build.sh in the environment image and commit the submission image.

    Claims accepted -> building first (a redelivered task returns at once). On success
    the submission goes to ``queued`` and its score is enqueued. The entrant's own
    failures end in ``build_failed`` (the attempt stays charged). A Docker Engine error
    is handled here, not raised: see :func:`submission_build_platform_failure`. The
    build container is always removed; the build log (``submission_dir/build.log``)
    holds build.sh's stdout and stderr, capped.
    """
    if not _build_network_ready(
        lambda retry_in_s: submission_wait_for_build_network(
            submission_id=submission_id, retry_in_s=retry_in_s
        )
    ):
        return
    if not submission_transition(submission_id, frm=[Submission.ACCEPTED], to=Submission.BUILDING):
        return
    submission = Submission.objects.select_related("environment", "benchmark").get(pk=submission_id)
    folder = storage.ensure_dir(storage.submission_dir(submission_id))
    image: SubmissionImage | None = None
    try:
        with CappedLog(folder / BUILD_LOG) as build_log:
            try:
                image = _build_submission_image(submission, folder, build_log)
            except _EntrantFailure as failure:
                build_log.write(f"Build failed: {failure.reason}\n")
                submission_build_finished(
                    submission_id=submission_id, ok=False, reason=failure.reason
                )
                return
            build_log.write(f"Submission image ready: {image.tag} ({image.digest})\n")
    except Exception as exc:
        # Engine errors, and anything else that is not the entrant's doing: the archive
        # passed validation at upload, so failing to unpack it now is ours too.
        log.exception("platform error while building submission %s", submission_id)
        build_platform_fault_record(target=f"submission:{submission_id}", detail=repr(exc))
        if image is not None:  # committed, then the log failed: leave nothing behind
            _discard_submission_image(image)
        # The entrant's sentence names no engine internals (addresses, ids, host paths).
        submission_build_platform_failure(submission_id, reason=ENGINE_FAULT_REASON.lower())
        return
    if image.ref:
        # Written while the row is still ``building`` (ours): the score that the next call
        # enqueues always finds the reference it must pull.
        Submission.objects.filter(pk=submission_id, status=Submission.BUILDING).update(
            image_ref=image.ref
        )
    if not submission_build_finished(
        submission_id=submission_id,
        ok=True,
        image_tag=image.tag,
        image_digest=image.digest,
        image_bytes=image.size,
    ):
        _discard_submission_image(image)  # settled elsewhere meanwhile (cancelled)


@dataclass(frozen=True)
class SubmissionImage:
    tag: str
    digest: str
    size: int
    ref: str = ""  # the registry reference by digest, when PODIUM_REGISTRY is set


def _discard_pushed(ref: str) -> None:
    """Delete a pushed image's manifest from the registry; a failure is only logged
    (retention tries again for every finished submission)."""
    try:
        registry.delete_manifest(ref)
    except registry.RegistryError:
        log.exception("could not delete %s from the registry", ref)


def _discard_submission_image(image: SubmissionImage) -> None:
    """Leave nothing of a built submission image: its tag here, its manifest there."""
    _discard_image(image.tag)
    if image.ref:
        _discard_pushed(image.ref)


def _build_submission_image(
    submission: Submission, folder: Path, build_log: CappedLog
) -> SubmissionImage:
    benchmark = submission.benchmark
    cap_s = benchmark.build_timeout_s
    environment_tag = submission.environment.image_tag
    build_log.write(f"Building submission #{submission.pk} on {environment_tag} (cap {cap_s} s)\n")
    host = machine.scoring_host()
    with buildbox.sandbox(
        job=buildbox.job_name("sub", submission.pk), disk_cap_bytes=benchmark.max_image_bytes
    ) as box:
        # The spec's one home is portal.contests.sandbox, which the portal also publishes
        # for local runs: root in /submission, no capabilities, no privilege gain, no
        # health check beside build.sh.
        container_id = box.create_container(
            **sandbox.build_container_spec(
                image=environment_tag, labels={"podium.submission": str(submission.pk)}
            )
        )
        build_log.write(box.cap_note())
        try:
            return _run_build_script(submission, container_id, folder, build_log, box, host)
        finally:
            try:
                engine.remove_container(container_id)
            except engine.EngineError:
                log.exception("could not remove build container %s", container_id)


def _run_build_script(
    submission: Submission,
    container_id: str,
    folder: Path,
    build_log: CappedLog,
    box: buildbox.Box,
    host: str,
) -> SubmissionImage:
    benchmark = submission.benchmark
    cap_s = benchmark.build_timeout_s
    with tempfile.TemporaryFile(dir=folder) as source_tar:
        archives.write_normalized_tar(
            source_path(submission),
            cast(archives.ArchiveFormat, submission.source_format),
            source_tar,
            prefix="submission",
        )
        source_tar.seek(0)
        engine.put_archive(container_id, "/", source_tar)
    machine.wait_while_frozen(host)
    engine.start(container_id)
    follower = _LogFollower(container_id, build_log)
    follower.start()
    exit_code = _wait_unfrozen(container_id, cap_s, host)
    if exit_code is None:
        engine.kill(container_id)
        follower.join(LOG_THREAD_GRACE_S)
        raise _EntrantFailure(f"build.sh ran past the {cap_s}-second cap.")
    follower.join(LOG_THREAD_GRACE_S)
    if box.guard.unfiltered:
        raise buildnet.NotEnforced(box.guard.unfiltered)
    if exit_code != 0:
        bound = box.explain(exit_code=exit_code, container_id=container_id)
        raise _EntrantFailure(
            f"build.sh exited with status {exit_code}; see the build log. {bound}".strip()
        )
    _check_run_entrypoint(container_id, build_log)
    repository = f"{ENTRANT_NAMESPACE}/sub-{submission.pk}"
    tag = _short_tag()
    machine.wait_while_frozen(host)  # committing is heavy disk work: not during a score
    info = engine.commit(container_id, repository=repository, tag=tag)
    image_tag = f"{repository}:{tag}"
    if info.size > benchmark.max_image_bytes:
        _discard_image(image_tag)
        raise _EntrantFailure(
            f"The submission image is {info.size:,} bytes; "
            f"the cap is {benchmark.max_image_bytes:,} bytes."
        )
    ref = ""
    if settings.PODIUM_REGISTRY:
        # Scoring hosts pull it from there by digest. A registry that fails is the
        # platform's fault (requeued once, then refunded), like any engine error.
        machine.wait_while_frozen(host)  # pushing is heavy disk work: not during a score
        try:
            ref = registry.publish(image_tag)
        except Exception:
            _discard_image(image_tag)
            raise
        # The entrant reads the build log: the digest, not the registry's address.
        build_log.write(f"Pushed to the registry as {ref.rpartition('@')[2]}\n")
    return SubmissionImage(tag=image_tag, digest=info.id, size=info.size, ref=ref)


def _wait_unfrozen(container_id: str, cap_s: float, host: str) -> int | None:
    """Wait for the build container; its exit code, or None once ``cap_s`` of time
    when no score held the machine has passed (paused time does not count).

    A container still paused after the machine was released for ``STRAY_PAUSE_S``
    (its freezer died with its worker) is unpaused here rather than waiting for the
    reaper.
    """
    counted = 0.0
    stray_since: float | None = None
    last = time.monotonic()
    while True:
        exit_code = engine.wait(
            container_id, timeout_s=max(0.05, min(WAIT_SLICE_S, cap_s - counted))
        )
        now = time.monotonic()
        if exit_code is not None:
            return exit_code
        if _frozen(host):
            stray_since = None
        elif engine.state(container_id).get("Paused"):
            stray_since = stray_since or now
            if now - stray_since >= STRAY_PAUSE_S:
                log.warning("unpausing build container %s left paused", container_id[:12])
                engine.unpause(container_id)
                stray_since = None
        else:
            stray_since = None
            counted += now - last
        last = now
        if counted >= cap_s:
            return None


def _check_run_entrypoint(container_id: str, build_log: CappedLog) -> None:
    """``/submission/run`` must be an executable regular file after build.sh.

    A symlink is accepted when it resolves (inside the image) to an executable regular
    file under ``/submission/``; a link leading elsewhere is refused, because the scored
    run mounts its own folders over parts of the image and only ``/submission`` is the
    entrant's to rely on.
    """
    stat = engine.path_stat(container_id, rules.RUN_ENTRYPOINT)
    if stat is None:
        raise _EntrantFailure("/submission/run is missing after build.sh.")
    mode = int(stat.get("mode", 0))
    shown = rules.RUN_ENTRYPOINT
    if mode & MODE_SYMLINK:
        target = posixpath.normpath(str(stat.get("linkTarget") or ""))
        if not target.startswith("/submission/"):
            raise _EntrantFailure(
                f"/submission/run is a symlink to {target or 'nothing'}, outside /submission; "
                "make it a file, or a link to a file inside /submission."
            )
        stat = engine.path_stat(container_id, target)
        if stat is None:
            raise _EntrantFailure(f"/submission/run is a symlink to {target}, which is missing.")
        mode = int(stat.get("mode", 0))
        shown = f"/submission/run (a link to {target})"
    if mode & MODE_TYPE:
        kind = "a directory" if mode & MODE_DIR else "not a regular file"
        raise _EntrantFailure(f"{shown} is {kind}; it must be an executable file.")
    if not mode & EXEC_BITS:
        raise _EntrantFailure(f"{shown} is not executable (mode {mode & 0o777:o}); chmod +x it.")
    if not mode & OTHERS_EXEC:
        build_log.write(
            f"warning: {shown} has mode {mode & 0o777:o}; the scored run uses a non-root "
            "user, which needs the 'others' execute bit (chmod 755).\n"
        )


class _LogFollower(threading.Thread):
    """Copies a container's stdout and stderr into the build log until it stops."""

    def __init__(self, container_id: str, build_log: CappedLog) -> None:
        super().__init__(daemon=True, name=f"build-log-{container_id[:12]}")
        self.container_id = container_id
        self.build_log = build_log

    def run(self) -> None:
        try:
            for chunk in engine.follow_logs(self.container_id):
                self.build_log.write_bytes(chunk)
        except engine.EngineError:
            log.warning("log stream of %s ended early", self.container_id, exc_info=True)
