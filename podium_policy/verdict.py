"""Output validation and the verdict of one scored run (pure: no Django, no Docker).

The runner calls :func:`decide` off the clock, after the supervisor has reported and the
output bytes have been read; the portal's services then persist the :class:`Verdict`.

What an entrant may learn from a verdict is fixed by the rules: the aggregate agreement
(matches / total) and one sentence saying what went wrong. Nothing here ever names which
rows disagree with the reference or what the reference holds.
"""

from __future__ import annotations

import signal as signal_module
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

MIN_CLASS = 0
MAX_CLASS = 999
_INT32_LE = struct.Struct("<i")

VerdictStatus = Literal["passed", "failed", "errored"]


class InvalidOutput(ValueError):
    """The output breaks the runtime ABI; ``str(exc)`` is one sentence for the entrant."""


# The supervisor's words for an output it could not take, as the entrant reads them.
OUTPUT_ERRORS = {
    "missing": "The program wrote no output file at /contest/output/predictions.i32.",
    "not a regular file": (
        "The output at /contest/output/predictions.i32 is not a regular file "
        "(a link, a folder or a pipe)."
    ),
}


def parse_predictions(data: bytes, rows: int) -> list[int]:
    """Decode an output file: exactly ``4 * rows`` bytes of little-endian signed int32,
    one per manifest row, each within ``[0, 999]``.

    Raises :class:`InvalidOutput` for a wrong length ("The output has N bytes; 4 x R = M
    were expected.") or the first value out of range ("Row K holds V, outside [0, 999].",
    K counted from 1 as the manifest's lines are). ``rows`` must not be negative
    (``ValueError``).
    """
    if rows < 0:
        raise ValueError(f"rows must not be negative, got {rows}")
    expected = 4 * rows
    if len(data) != expected:
        raise InvalidOutput(
            f"The output has {len(data)} bytes; 4 x {rows} = {expected} were expected."
        )
    predictions = [value for (value,) in _INT32_LE.iter_unpack(data)]
    for row, value in enumerate(predictions, start=1):
        if not MIN_CLASS <= value <= MAX_CLASS:
            raise InvalidOutput(f"Row {row} holds {value}, outside [{MIN_CLASS}, {MAX_CLASS}].")
    return predictions


def count_matches(predictions: Sequence[int], references: Sequence[int]) -> int:
    """How many predictions equal the reference at the same position.

    Both sequences must have the same length (``ValueError`` otherwise).
    """
    if len(predictions) != len(references):
        raise ValueError(
            f"{len(predictions)} predictions cannot be compared with {len(references)} references"
        )
    return sum(
        1
        for predicted, reference in zip(predictions, references, strict=True)
        if predicted == reference
    )


@dataclass(frozen=True)
class Verdict:
    """The outcome of one scored run, as the entrant sees it.

    ``matches`` is ``None`` unless the output was valid and compared; ``total`` is the
    number of reference rows; ``reason`` is one sentence.
    """

    status: VerdictStatus
    matches: int | None
    total: int
    reason: str


def _signal_name(number: int) -> str:
    try:
        return f"signal {number} ({signal_module.Signals(number).name})"
    except ValueError:
        return f"signal {number}"


def decide(
    *,
    output: bytes | None,
    output_error: str,
    exit_code: int | None,
    signal: int | None,
    killed: bool,
    references: Sequence[int],
    needed: int,
    yardstick: str = "the reference",
    canaries: Sequence[bool] = (),
    canaries_needed: int = 0,
) -> Verdict:
    """The verdict of one run, from what the supervisor and the runner observed.

    In order, the first that applies:

    1. ``killed`` (the deadline stopped it): errored, "The run did not finish within the
       time limit."
    2. A crash, i.e. a ``signal`` or a non-zero ``exit_code``: errored, naming the signal
       or the exit code. The output of a crashed run is never trusted, however it looks.
       A run that reports neither an exit code nor a signal also errs.
    3. No output (``output is None``) or an ``output_error`` from reading it: errored,
       with that sentence (or a generic one).
    4. Output breaking the ABI: errored, with the :class:`InvalidOutput` sentence.
    5. Otherwise the matches are counted: passed when ``matches >= needed``, else failed.
       ``yardstick`` names what ``references`` are in the reason: "the reference", or,
       for a verification, "its official answers".

    With ``canaries`` (one flag per row, a verification's or a final run's), the rows
    flagged are judged apart, against the reference answers that ``references`` holds
    for them: passed only when the other rows reach ``needed`` and the canaries
    ``canaries_needed``. The reason gives both counts, never which rows are which.

    ``needed`` must lie within ``[0, rows judged against the yardstick]`` and
    ``canaries_needed`` within ``[0, canaries]`` (``ValueError`` otherwise: that is a
    configuration fault, not the entrant's).
    """
    total = len(references)
    if canaries and len(canaries) != total:
        raise ValueError(f"{len(canaries)} canary flags for {total} rows")
    canary_rows = sum(1 for flag in canaries if flag)
    if not 0 <= needed <= total - canary_rows:
        raise ValueError(f"needed must be within [0, {total - canary_rows}], got {needed}")
    if not 0 <= canaries_needed <= canary_rows:
        raise ValueError(
            f"canaries_needed must be within [0, {canary_rows}], got {canaries_needed}"
        )

    def errored(reason: str) -> Verdict:
        return Verdict(status="errored", matches=None, total=total, reason=reason)

    if killed:
        return errored("The run did not finish within the time limit.")
    if signal is not None:
        return errored(f"The program was stopped by {_signal_name(signal)}.")
    if exit_code is None:
        return errored("The program ended without reporting an exit status.")
    if exit_code != 0:
        return errored(f"The program exited with code {exit_code}.")
    if output_error in OUTPUT_ERRORS:
        return errored(OUTPUT_ERRORS[output_error])
    if output_error:
        reason = output_error.strip()
        if not reason.endswith((".", "!", "?")):
            reason += "."
        return errored(reason[0].upper() + reason[1:])
    if output is None:
        return errored("The program wrote no output file.")
    try:
        predictions = parse_predictions(output, total)
    except InvalidOutput as exc:
        return errored(str(exc))

    if canary_rows:
        return _with_canaries(predictions, references, canaries, needed, canaries_needed, yardstick)
    matches = count_matches(predictions, references)
    summary = f"{matches} of {total} predictions match {yardstick}"
    if matches >= needed:
        return Verdict(
            status="passed",
            matches=matches,
            total=total,
            reason=f"{summary}; at least {needed} were needed.",
        )
    return Verdict(
        status="failed",
        matches=matches,
        total=total,
        reason=f"{summary}; at least {needed} are needed.",
    )


def _with_canaries(
    predictions: Sequence[int],
    references: Sequence[int],
    canaries: Sequence[bool],
    needed: int,
    canaries_needed: int,
    yardstick: str,
) -> Verdict:
    """Rule 5 with canaries (see :func:`decide`)."""
    rows = [
        (p, r) for p, r, flag in zip(predictions, references, canaries, strict=True) if not flag
    ]
    birds = [(p, r) for p, r, flag in zip(predictions, references, canaries, strict=True) if flag]
    matches = count_matches([p for p, _ in rows], [r for _, r in rows])
    canary_matches = count_matches([p for p, _ in birds], [r for _, r in birds])
    summary = (
        f"{matches} of {len(rows)} predictions match {yardstick} and {canary_matches} of "
        f"{len(birds)} on images no public set holds match the reference"
    )
    passed = matches >= needed and canary_matches >= canaries_needed
    return Verdict(
        status="passed" if passed else "failed",
        matches=matches + canary_matches,
        total=len(references),
        reason=f"{summary}; at least {needed} and {canaries_needed} "
        + ("were needed." if passed else "are needed."),
    )
