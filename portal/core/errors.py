"""Errors a service raises when it refuses a request; the API and the pages show them.

Each carries its machine code and HTTP status (listed in docs/api.md, "Errors") and one
sentence telling the entrant what to fix.
"""

from __future__ import annotations

from typing import Any


class PodiumError(Exception):
    code = "invalid_parameter"
    http_status = 400

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class NotFound(PodiumError):
    code = "not_found"
    http_status = 404


class WindowNotOpen(PodiumError):
    code = "window_not_open"
    http_status = 409


class WindowClosed(PodiumError):
    code = "window_closed"
    http_status = 409


class QuotaExhausted(PodiumError):
    code = "quota_exhausted"
    http_status = 429


class EnvironmentLimit(PodiumError):
    code = "environment_limit"
    http_status = 409


class EnvironmentNotReady(PodiumError):
    code = "environment_not_ready"
    http_status = 409


class EnvironmentInUse(PodiumError):
    code = "environment_in_use"
    http_status = 409


class DockerfilePolicy(PodiumError):
    code = "dockerfile_policy"
    http_status = 400


class InvalidArchive(PodiumError):
    code = "invalid_archive"
    http_status = 400


class ArchiveTooLarge(PodiumError):
    code = "archive_too_large"
    http_status = 413


class InvalidParameter(PodiumError):
    code = "invalid_parameter"
    http_status = 400


class PermissionDenied(PodiumError):
    """A signed-in user without the permission an action needs: a staff member without
    the model permission, or a team member doing what only the captain does."""

    code = "permission_denied"
    http_status = 403


def staff_permission_check(user: Any, permission: str) -> None:
    """Refuse ``user`` unless they hold ``permission`` (``app_label.codename``).

    Raises :class:`PermissionDenied`; call it before anything is read or written.
    """
    if not user.has_perm(permission):
        raise PermissionDenied(
            f"Your staff account lacks the {permission} permission; "
            "ask an administrator to add you to the contest staff group."
        )


class EmailNotVerified(PodiumError):
    """The account has no verified address yet; uploads wait for one (one person, one account)."""

    code = "email_not_verified"
    http_status = 403


class TooManyBuilds(PodiumError):
    """The entrant already has ``max_concurrent_builds`` builds queued or building."""

    code = "too_many_builds"
    http_status = 409


class NoCohort(PodiumError):
    """The benchmark has no cohort of the upload's kind (official or practice) to score it on."""

    code = "no_cohort"
    http_status = 409
