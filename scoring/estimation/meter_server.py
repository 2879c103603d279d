"""The trusted FLOP meter's process: flopscope-server's own ``main``, unchanged, with the
operations it refused in each budget session counted and added to that session's
closing summary.

flopscope-server refuses an operation that would pass the session's budget (it answers
``BudgetExhaustedError`` and records nothing), so neither the budget nor the summary shows
that the entrant ran into it, and an entrant may catch the error and return a prediction
all the same. Counting the refusals where they happen lets the runner
(``scoring.estimation.runner``) fail that MLP whatever the entrant did with the error:
``budget_close`` returns ``refused``, a mapping of error type to count (an array the
server could not allocate counts as ``MemoryError``).

Run as a script (``python meter_server.py --url ... --timeout ... --token-fd FD``), never
imported by Podium: it takes flopscope-server's own arguments.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import flopscope_server._server as server_module
from flopscope_server.__main__ import main
from flopscope_server._request_handler import RequestHandler
from flopscope_server._session import Session


class CountedSession(Session):  # type: ignore[misc]
    """A budget session that remembers which operations the server refused in it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.refused: Counter[str] = Counter()

    def close(self) -> dict[str, Any]:
        summary: dict[str, Any] = super().close()
        summary["refused"] = dict(self.refused)
        return summary


class CountingHandler(RequestHandler):  # type: ignore[misc]
    """flopscope-server's request handler; every error it answers is counted on the
    session it serves."""

    def __init__(self, session: Session) -> None:
        super().__init__(session)
        self._counted = session

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        response: dict[str, Any] = super().handle(request)
        if response.get("status") == "error" and isinstance(self._counted, CountedSession):
            self._counted.refused[refusal_kind(response)] += 1
        return response


def refusal_kind(response: dict[str, Any]) -> str:
    """The error type of a refusal; an allocation that failed inside an operation (the
    server reports it as an internal error) is a ``MemoryError``."""
    kind = str(response.get("error_type") or "FlopscopeServerError")
    if kind == "FlopscopeServerError" and "MemoryError" in str(response.get("message", "")):
        return "MemoryError"
    return kind


server_module.Session = CountedSession
server_module.RequestHandler = CountingHandler

if __name__ == "__main__":
    main()
