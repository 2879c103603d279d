"""Failures the client expects, each with one line for the entrant and an exit code.

Exit codes (also in ``podium --help``): 0 done (``watch``: the submission passed),
1 the watched submission ended without passing, 2 a usage error, a local problem or
a refusal by the server, 3 the server could not be reached or failed, 130 interrupted.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_NOT_PASSED = 1
EXIT_REFUSED = 2
EXIT_UNREACHABLE = 3
EXIT_INTERRUPTED = 130

# The API's machine codes (docs/api.md, "Errors") and what the entrant should read before
# the server's own sentence; a trailing hint says what to do next where there is one thing
# to do.
PREFIXES = {
    "not_authenticated": "Not signed in",
    "not_found": "Not found",
    "window_not_open": "Not open yet",
    "window_closed": "Closed",
    "quota_exhausted": "No attempts left today",
    "environment_limit": "Too many environments",
    "environment_not_ready": "Environment not ready",
    "environment_in_use": "Environment in use",
    "dockerfile_policy": "Dockerfile refused",
    "invalid_archive": "Archive refused",
    "archive_too_large": "Archive too large",
    "invalid_parameter": "Refused",
    "throttled": "Too many requests",
    "email_not_verified": "Email address not verified",
    "too_many_builds": "Too many builds in flight",
    "no_cohort": "No cohort to score it on",
    "permission_denied": "Not allowed",
}
HINTS = {
    "not_authenticated": "Run `podium login {url}` to sign in again.",
    "quota_exhausted": "Nothing was charged; `podium quota BENCHMARK` shows your allowance.",
    "environment_limit": "Remove an unused environment on the website first.",
    "environment_not_ready": "`podium env list` shows the status of each environment.",
    "dockerfile_policy": "Fix those lines and run `podium env create` again.",
    "invalid_archive": "Nothing was charged.",
    "archive_too_large": "Nothing was charged; leave large files out of the archive.",
    "email_not_verified": "Follow the link in the email sent at sign-up, then try again.",
    "too_many_builds": "Nothing was charged; try again when one of your builds has finished.",
    "no_cohort": "Nothing was charged.",
}


class CliError(Exception):
    """An expected failure: ``str(exc)`` is the line to print, ``exit_code`` the status."""

    exit_code = EXIT_REFUSED


class Refused(CliError):
    """The server answered ``{"code", "detail"}`` with a 4xx status."""

    def __init__(self, code: str, detail: str, *, url: str) -> None:
        self.code = code
        self.detail = detail
        prefix = PREFIXES.get(code, f"The server refused the request ({code})")
        hint = HINTS.get(code, "").format(url=url)
        super().__init__(" ".join(part for part in (f"{prefix}: {detail}", hint) if part))


class Unreachable(CliError):
    """No answer, or an answer that is not the Podium API's (a crash page, a proxy)."""

    exit_code = EXIT_UNREACHABLE
