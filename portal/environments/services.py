"""Environment lifecycle: create, rebuild, remove (web side) and build claims (worker side).

Every transition is a conditional update plus a timeline event, so a redelivered task
or a double click does nothing twice.
"""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from allauth.account.models import EmailAddress
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from podium_policy import archives, dockerfile_policy
from portal.audit.services import audit_record
from portal.contests import rules
from portal.contests.kinds import timed_path_check
from portal.contests.models import Benchmark
from portal.contests.uploads import MAX_DOCKERFILE_BYTES
from portal.core import errors, jobs, storage
from portal.environments import hooks
from portal.environments.models import BuildNetworkCheck, Environment, EnvironmentEvent


def allowed_prefixes(benchmark: Benchmark) -> list[str]:
    return [line.strip() for line in benchmark.allowed_registries.splitlines() if line.strip()]


DOCKERFILE_TOO_LARGE = "The Dockerfile is larger than 256 KiB."


@dataclass(frozen=True)
class DockerfileVerdict:
    """How an upload judges a Dockerfile: ``detail`` is the ``dockerfile_policy`` refusal's
    sentence ("" when it may be built), ``violations`` its line-numbered parts (none for
    a Dockerfile refused for its size)."""

    detail: str
    violations: list[dockerfile_policy.Violation]

    @property
    def ok(self) -> bool:
        return not self.detail


def dockerfile_judge(*, benchmark: Benchmark, text: str) -> DockerfileVerdict:
    """The benchmark's Dockerfile policy on ``text``, as an environment upload applies it
    (the upload and the dry-run check both call this); reads and writes nothing."""
    if len(text.encode()) > MAX_DOCKERFILE_BYTES:
        return DockerfileVerdict(DOCKERFILE_TOO_LARGE, [])
    violations = dockerfile_policy.check_dockerfile(text, allowed_prefixes(benchmark))
    return DockerfileVerdict(dockerfile_policy.format_violations(violations), violations)


def dockerfile_check(*, benchmark: Benchmark, text: str) -> None:
    """Raise DockerfilePolicy with line numbers when the Dockerfile breaks the policy."""
    verdict = dockerfile_judge(benchmark=benchmark, text=text)
    if not verdict.ok:
        raise errors.DockerfilePolicy(verdict.detail)


def context_check(*, benchmark: Benchmark, path: Path) -> None:
    """Raise InvalidArchive / ArchiveTooLarge for a build-context archive that is unsafe."""
    size = path.stat().st_size
    if size > benchmark.max_upload_bytes:
        raise errors.ArchiveTooLarge(
            f"The context archive is {size:,} bytes; at most "
            f"{benchmark.max_upload_bytes:,} bytes are accepted."
        )
    try:
        archives.inspect_archive(path, archives.detect_format(path), require_entrypoint=False)
    except archives.ArchiveError as exc:
        raise errors.InvalidArchive(f"The build context: {exc}") from exc


def _event(environment: Environment, status: str, note: str = "") -> None:
    EnvironmentEvent.objects.create(
        environment=environment, status=status, at=timezone.now(), note=note
    )


def entrant_check_verified(*, entrant: Any) -> None:
    """Refuse an upload from an account with no verified email address (``EmailNotVerified``).

    One person, one account's attempts: every upload that starts a build (an environment,
    its rebuild, a submission) needs one of allauth's ``EmailAddress`` rows marked
    verified. Read-only; the services call it before they store or charge anything.
    """
    if not EmailAddress.objects.filter(user_id=entrant.pk, verified=True).exists():
        raise errors.EmailNotVerified(
            "Verify your email address before your first upload: follow the link in the "
            "message we sent you, or send a new one from your account's email page "
            "(/accounts/email/). Nothing was charged."
        )


def builds_in_flight(*, entrant_id: int, benchmark_id: int) -> int:
    """How many of the entrant's builds on the benchmark are waiting for or holding a slot.

    A build is an environment ``queued`` or ``building`` (its Dockerfile) or a submission
    ``accepted`` or ``building`` (its ``build.sh``); one that has ended, either way, no
    longer counts.
    """
    environments = Environment.objects.filter(
        owner_id=entrant_id,
        benchmark_id=benchmark_id,
        status__in=[Environment.QUEUED, Environment.BUILDING],
    ).count()
    others = hooks.other_builds_in_flight(entrant_id=entrant_id, benchmark_id=benchmark_id)
    return environments + others


def entrant_check_build_slots(*, entrant_id: int, benchmark: Benchmark) -> None:
    """Refuse one more build while the entrant already has ``max_concurrent_builds`` in flight.

    Call it inside the transaction that holds the entrant's row lock and then stores the
    new build, so two concurrent requests cannot both take the last slot. Raises
    ``TooManyBuilds``; nothing is stored or charged then.
    """
    in_flight = builds_in_flight(entrant_id=entrant_id, benchmark_id=benchmark.pk)
    if in_flight >= benchmark.max_concurrent_builds:
        limit = benchmark.max_concurrent_builds
        raise errors.TooManyBuilds(
            f"You already have {in_flight} build{'s' if in_flight != 1 else ''} queued or "
            f"building on this benchmark, and it runs at most {limit} per entrant at once; "
            "try again when one of them finishes. Nothing was charged."
        )


def environment_create(
    *,
    owner: Any,
    benchmark: Benchmark,
    name: str,
    dockerfile_text: str,
    context_path: Path | None = None,
    now: dt.datetime | None = None,
) -> Environment:
    """Accept a new environment and queue its build (attempt-free).

    Refuses a metered-estimation benchmark (it has no environments: checked first), an
    owner without a verified email address, after the window closes, past
    ``max_environments`` or ``max_concurrent_builds`` (its build would be one more), or
    when the Dockerfile breaks the policy; nothing is stored then. The owner's row is
    locked so two concurrent creations cannot both take the last place.
    """
    timed_path_check(benchmark, "environment")
    now = now or timezone.now()
    entrant_check_verified(entrant=owner)
    if rules.window_state(now, benchmark.opens_at, benchmark.closes_at) == "closed":
        raise errors.WindowClosed("This benchmark has closed; no new environments are accepted.")
    name = name.strip()
    if not name or len(name) > 100:
        raise errors.InvalidParameter("Give the environment a name of 1 to 100 characters.")
    dockerfile_check(benchmark=benchmark, text=dockerfile_text)
    if context_path is not None:
        context_check(benchmark=benchmark, path=context_path)
    with transaction.atomic():
        get_user_model().objects.select_for_update().filter(pk=owner.pk).first()
        kept = (
            Environment.objects.filter(owner=owner, benchmark=benchmark)
            .exclude(status=Environment.REMOVED)
            .count()
        )
        if kept >= benchmark.max_environments:
            raise errors.EnvironmentLimit(
                f"You already keep {kept} environments, the most this benchmark allows; "
                "remove an unused one first."
            )
        entrant_check_build_slots(entrant_id=owner.pk, benchmark=benchmark)
        environment = Environment.objects.create(
            owner=owner,
            benchmark=benchmark,
            name=name,
            dockerfile=dockerfile_text,
            has_context=context_path is not None,
        )
        folder = storage.ensure_dir(storage.environment_dir(environment.pk))
        (folder / "Dockerfile").write_text(dockerfile_text)
        if context_path is not None:
            shutil.copyfile(context_path, folder / "context.archive")
        _event(environment, Environment.QUEUED)
        jobs.enqueue(jobs.BUILD_ENVIRONMENT, environment.pk)
    return environment


def environment_rebuild(*, environment: Environment) -> Environment:
    """Queue a new build of a failed, timed-out or too-large environment.

    Like a creation it needs the owner's verified email address and a free build slot
    (``max_concurrent_builds``), checked holding the owner's row lock; a refusal leaves
    the environment as it was. An environment of a metered-estimation benchmark (made
    before such benchmarks refused them) is never built.
    """
    timed_path_check(environment.benchmark, "environment")
    entrant_check_verified(entrant=environment.owner)
    with transaction.atomic():
        get_user_model().objects.select_for_update().filter(pk=environment.owner_id).first()
        retryable = Environment.objects.filter(
            pk=environment.pk, status__in=Environment.RETRYABLE
        ).exists()
        if retryable:
            entrant_check_build_slots(
                entrant_id=environment.owner_id, benchmark=environment.benchmark
            )
        claimed = Environment.objects.filter(
            pk=environment.pk, status__in=Environment.RETRYABLE
        ).update(status=Environment.QUEUED, failure_reason="", image_digest="", image_bytes=None)
        if not claimed:
            raise errors.InvalidParameter(
                f"Only a failed, timed-out or too-large environment can be rebuilt; "
                f"this one is {environment.status}."
            )
        environment.refresh_from_db()
        _event(environment, Environment.QUEUED, "rebuild requested")
        jobs.enqueue(jobs.BUILD_ENVIRONMENT, environment.pk)
    return environment


def environment_remove(*, environment: Environment) -> Environment:
    """Remove an environment no unfinished submission uses; frees a place; drops its image."""
    with transaction.atomic():
        get_user_model().objects.select_for_update().filter(pk=environment.owner_id).first()
        if hooks.in_use(environment):
            raise errors.EnvironmentInUse(
                "An unfinished submission uses this environment; remove it once that is done."
            )
        if environment.status in (Environment.QUEUED, Environment.BUILDING):
            raise errors.EnvironmentInUse(
                "This environment is still building; remove it once the build ends."
            )
        claimed = (
            Environment.objects.filter(pk=environment.pk)
            .exclude(status=Environment.REMOVED)
            .update(status=Environment.REMOVED)
        )
        environment.refresh_from_db()
        if claimed:
            _event(environment, Environment.REMOVED)
            if environment.image_tag:
                jobs.enqueue(jobs.REMOVE_IMAGE, environment.image_tag)
    return environment


# Worker side ----------------------------------------------------------------------


def environment_claim_build(environment_id: int) -> Environment | None:
    """queued -> building, once. None when another delivery already claimed it."""
    with transaction.atomic():
        now = timezone.now()
        claimed = Environment.objects.filter(pk=environment_id, status=Environment.QUEUED).update(
            status=Environment.BUILDING, build_started_at=now, build_finished_at=None
        )
        if not claimed:
            return None
        environment = Environment.objects.get(pk=environment_id)
        _event(environment, Environment.BUILDING)
        return environment


def environment_finish_build(
    *,
    environment_id: int,
    status: str,
    image_tag: str = "",
    image_digest: str = "",
    image_bytes: int | None = None,
    reason: str = "",
) -> bool:
    """building -> ready | failed | timed_out | too_large, once."""
    if status not in (Environment.READY, *Environment.RETRYABLE):
        raise ValueError(f"not a build outcome: {status}")
    with transaction.atomic():
        done = Environment.objects.filter(pk=environment_id, status=Environment.BUILDING).update(
            status=status,
            image_tag=image_tag,
            image_digest=image_digest,
            image_bytes=image_bytes,
            failure_reason=reason,
            build_finished_at=timezone.now(),
        )
        if done:
            _event(Environment.objects.get(pk=environment_id), status, reason)
        return bool(done)


def environments_building() -> Iterable[Environment]:
    return Environment.objects.filter(status=Environment.BUILDING)


BUILD_NETWORK_WAIT_NOTE = (
    "waiting: the build network's firewall is not verified, so no build starts "
    "(a platform check; nothing is charged)"
)
ENGINE_FAULT_REASON = (
    "The build could not run because of a platform fault, not because of your files"
)


def environment_wait_for_build_network(*, environment_id: int, retry_in_s: float) -> bool:
    """The build network's rules are not in place: the build waits, uncharged and unclaimed.

    Only while the environment is still ``queued``: notes the wait on its timeline (once
    per wait, not once per retry) and enqueues the build again after ``retry_in_s``.
    What is missing is kept for staff (``BuildNetworkCheck`` and the audit trail), not
    shown to the entrant.
    """
    with transaction.atomic():
        environment = (
            Environment.objects.select_for_update()
            .filter(pk=environment_id, status=Environment.QUEUED)
            .first()
        )
        if environment is None:
            return False
        last = environment.events.order_by("-at", "-id").first()
        if last is None or last.note != BUILD_NETWORK_WAIT_NOTE:
            _event(environment, Environment.QUEUED, BUILD_NETWORK_WAIT_NOTE)
        jobs.enqueue(jobs.BUILD_ENVIRONMENT, environment_id, countdown=retry_in_s)
    return True


def build_platform_fault_record(*, target: str, detail: str) -> None:
    """Keep an engine failure's details for staff (the entrant is told only
    :data:`ENGINE_FAULT_REASON`): an audit event ``build.platform_fault``."""
    audit_record(
        actor=None, action="build.platform_fault", target=target, details={"detail": detail}
    )


# The build network's live checks (worker side) -----------------------------------

BUILD_NETWORK_POLICY_TEXT = ("network", "subnet", "bridge")
BUILD_NETWORK_POLICY_LISTS = ("blocked", "dns", "allowed")


def _build_network_policy_check(policy: dict[str, Any]) -> None:
    expected = {*BUILD_NETWORK_POLICY_TEXT, *BUILD_NETWORK_POLICY_LISTS}
    if set(policy) != expected:
        raise ValueError(f"a build network policy has exactly the keys {sorted(expected)}")
    for key in BUILD_NETWORK_POLICY_TEXT:
        if not isinstance(policy[key], str):
            raise ValueError(f"build network policy: {key} must be a string")
    for key in BUILD_NETWORK_POLICY_LISTS:
        entries = policy[key]
        if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
            raise ValueError(f"build network policy: {key} must be a list of strings")


def build_network_record(
    *,
    host: str,
    enforced: bool,
    problems: list[str],
    policy: dict[str, Any],
    now: dt.datetime | None = None,
) -> BuildNetworkCheck:
    """Store what one live check of ``host``'s build firewall found; returns the host's row.

    Called by the build worker each time it checks, before a build, that every rule of
    the build network's policy is in place. One row per host, overwritten by each check
    (``update_or_create``), so recording the same result twice is harmless. ``problems``
    are one sentence each (stored one per line, newlines inside a sentence folded);
    ``policy`` must hold exactly ``network``, ``subnet``, ``bridge`` (strings) and
    ``blocked``, ``dns``, ``allowed`` (lists of strings), or ValueError is raised and
    nothing is stored.

    When ``enforced`` differs from the host's stored value, or a host's first check is
    not enforced, an audit event ``build_network.enforced`` / ``build_network.not_enforced``
    (no actor, the problems as details) is recorded in the same transaction, so staff see
    when and why builds stopped or resumed. The host's row is locked while it is compared.
    """
    _build_network_policy_check(policy)
    lines = [" ".join(problem.split()) for problem in problems]
    lines = [line for line in lines if line]
    with transaction.atomic():
        previous = (
            BuildNetworkCheck.objects.select_for_update()
            .filter(host=host)
            .values_list("enforced", flat=True)
            .first()
        )
        check, _ = BuildNetworkCheck.objects.update_or_create(
            host=host,
            defaults={
                "checked_at": now or timezone.now(),
                "enforced": enforced,
                "problems": "\n".join(lines),
                "policy": policy,
            },
        )
        flipped = (previous is None and not enforced) or (
            previous is not None and previous != enforced
        )
        if flipped:
            audit_record(
                actor=None,
                action="build_network.enforced" if enforced else "build_network.not_enforced",
                target=f"build_host:{host}",
                details={"problems": lines},
            )
    return check
