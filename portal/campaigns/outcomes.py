"""What a scoring host reports of one campaign round (pure: no Django, no Docker).

``scoring/campaign/rounds.py`` runs a round on its host and builds a :class:`RoundOutcome`;
``portal.campaigns.recording`` records it (verdicts, scores, the crown, or a void). This
module is the seam between the two: plain data, JSON-serializable through
``dataclasses.asdict``, so the whole outcome is also the round's evidence.

A round runs, in order: a warm-up pass of the baseline image (thrown away), the opening
baseline, each entry in entry order, the closing baseline. Each pass is one supervised
invocation per slice of the round's request set, so every pass yields per-slice times.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

WARMUP = "warmup"
BASELINE_OPEN = "baseline_open"
ENTRY = "entry"
BASELINE_CLOSE = "baseline_close"


@dataclass(frozen=True)
class SliceRun:
    """One slice: one supervised invocation over the slice's requests."""

    slice: int
    wall_ns: int | None  # the supervisor's trusted time; None when it gave none
    exit_code: int | None
    signal: int | None
    killed: bool  # stopped at the deadline (or from outside: SIGKILL, OOM)
    oom_killed: bool
    output_ok: bool  # exactly 4 bytes per request, every class in range
    matches: int  # predictions equal to the reference, in this slice
    total: int  # requests in this slice


@dataclass(frozen=True)
class ImageRun:
    """One image's pass over every slice (stops early at the first fatal slice)."""

    role: str  # WARMUP, BASELINE_OPEN, ENTRY or BASELINE_CLOSE
    entry_id: int | None  # the RoundEntry's id for ENTRY, else None
    image_digest: str
    slices: list[SliceRun] = field(default_factory=list)
    infra_error: str = ""  # a platform fault (engine, pull, staging): not the image's


@dataclass(frozen=True)
class RoundOutcome:
    """Everything the host saw of one round."""

    round_id: int
    host: str
    request_digest: str  # sha256 of the round's request set, as the host staged it
    baseline_open: ImageRun | None
    baseline_close: ImageRun | None
    entries: list[ImageRun] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)  # CPU, cores, quota, GPU...
    void_reason: str = ""  # a host-side void: the host died, the heartbeat went stale...
