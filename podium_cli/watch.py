"""``podium watch``: follow one submission until its verdict.

Each poll reads the submission; new timeline entries are printed in order, and while
the build (accepted, building) or the scored run (staging, running) is under way its
log tail is read and only lines not shown before are printed. A verification measured
again after a timing miss shows as "re-measuring (2 of 3)". A log's last line is
held back until the next line or the end of its step, since it may still be growing.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from podium_cli import show
from podium_cli.api import Client
from podium_cli.commands import client_for
from podium_cli.errors import EXIT_INTERRUPTED, EXIT_NOT_PASSED, EXIT_OK, Unreachable

FINAL = frozenset(
    {
        "build_failed",
        "passed",
        "rejected_verification",
        "failed",
        "errored",
        "infra_failed",
        "cancelled",
        "duplicate_image",
    }
)
BUILD_STEP = frozenset({"accepted", "building"})
RUN_STEP = frozenset({"staging", "running"})
LOG_TAIL = 1000
MAX_MISSED_POLLS = 5

sleep = time.sleep  # tests replace it to drive a submission forward between polls


class LogFollower:
    """Prints the lines of one growing log that were not printed yet."""

    def __init__(self, client: Client, path: str, label: str) -> None:
        self.client = client
        self.path = path
        self.label = label
        self.active = False
        self.shown: list[str] = []

    def poll(self, *, final: bool = False) -> None:
        text = self.client.get_text(self.path, params={"tail": LOG_TAIL})
        lines = text.splitlines()
        if not final:
            lines = lines[:-1]
        overlap = _overlap(self.shown, lines)
        if self.shown and overlap == 0 and lines:
            print(f"  {self.label} | ...")
        for line in lines[overlap:]:
            print(f"  {self.label} | {line}".rstrip())
        self.shown = (self.shown + lines[overlap:])[-LOG_TAIL:]

    def finish(self) -> None:
        """Print what is left of the log once its step is over."""
        if self.active:
            self.poll(final=True)
            self.active = False


def _overlap(shown: list[str], lines: list[str]) -> int:
    """How many leading ``lines`` were already printed as the last of ``shown``."""
    for count in range(min(len(shown), len(lines)), 0, -1):
        if shown[-count:] == lines[:count]:
            return count
    return 0


def watch(args: argparse.Namespace) -> int:
    client = client_for(args)
    submission_id = args.submission
    try:
        return _follow(client, submission_id, interval_s=args.interval, logs=not args.no_logs)
    except KeyboardInterrupt:
        print(
            f"\nStopped watching; submission {submission_id} carries on "
            f"(`podium watch {submission_id}` to follow it again).",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED


def _follow(client: Client, submission_id: int, *, interval_s: float, logs: bool) -> int:
    base = f"/submissions/{submission_id}"
    build = LogFollower(client, f"{base}/build-log", "build")
    run = LogFollower(client, f"{base}/run-log", "run  ")
    printed = 0
    missed = 0
    first = True
    queue_shown = ""
    remeasure_shown = ""
    while True:
        try:
            submission = client.get_json(f"{base}/")
            if first:
                print(_header(submission))
                first = False
            timeline = submission["timeline"]
            for event in timeline[printed:]:
                status = event["status"]
                if logs and status not in BUILD_STEP:
                    build.finish()
                if logs and status in FINAL:
                    run.finish()
                print(_event_line(event))
                build.active = build.active or status == "building"
                run.active = run.active or status in RUN_STEP
            printed = max(printed, len(timeline))
            queue = _queue_line(submission)
            if queue and queue != queue_shown:
                print(queue)
            queue_shown = queue
            remeasure = _remeasure_line(submission)
            if remeasure and remeasure != remeasure_shown:
                print(remeasure)
            remeasure_shown = remeasure
            if logs and submission["status"] in FINAL:
                build.finish()
                run.finish()
            elif logs:
                for follower in (build, run):
                    if follower.active:
                        follower.poll()
            missed = 0
        except Unreachable as exc:
            missed += 1
            if first or missed >= MAX_MISSED_POLLS:
                raise
            print(f"(no answer: {exc} Retrying.)", file=sys.stderr)
            sleep(interval_s)
            continue
        if submission["status"] in FINAL:
            print(_verdict(submission))
            return EXIT_OK if submission["status"] == "passed" else EXIT_NOT_PASSED
        sleep(interval_s)


def _header(submission: dict[str, Any]) -> str:
    kind = "official attempt" if submission.get("kind") == "official" else "practice run"
    return (
        f"Submission {submission['id']}: {kind} on {submission.get('benchmark')}, "
        f"environment {submission.get('environment')}, submitted "
        f"{show.when(submission.get('submitted_at'), seconds=True)}"
    )


def _event_line(event: dict[str, Any]) -> str:
    note = f"  ({event['note']})" if event.get("note") else ""
    return f"{show.clock(event.get('at'))}  {event['status']}{note}"


def _queue_line(submission: dict[str, Any]) -> str:
    """Its place in line while it waits for a scoring host ("" once it does not wait)."""
    position = submission.get("queue_position")
    if position is None:
        return ""
    eta = submission.get("eta_seconds")
    if eta is None:
        guess = "no estimate: no scoring host of its class is online, or none has timed a run"
    else:
        minutes = max(1, round(eta / 60))
        guess = f"starts in about {show.plural(minutes, 'minute')}"
    return f"  queue | number {position} in line; {guess}"


def _remeasure_line(submission: dict[str, Any]) -> str:
    """While a timing miss of its verification is measured again: which run of how many
    ("" otherwise). The verdict is judged on the fastest of them."""
    verification = submission.get("verification") or {}
    number = verification.get("run") or 1
    if submission.get("status") != "verifying" or number < 2:
        return ""
    if verification.get("status") == "finished":
        return ""
    return (
        f"  verify | re-measuring ({number} of {verification.get('of', number)}): "
        "the verification was slower than allowed; judged on the fastest run"
    )


def _verdict(submission: dict[str, Any]) -> str:
    status = submission["status"]
    parts = [f"Verdict: {status}"]
    if submission.get("total") is not None:
        parts.append(f"{submission.get('matches')}/{submission['total']} matches")
    ns = submission.get("wall_time_ns")
    if ns is not None:
        parts.append(f"wall time {show.wall_time(ns)} ({ns} ns)")
    lines = [", ".join(parts)]
    if submission.get("failure_reason") and status != "passed":
        lines.append(f"Reason: {submission['failure_reason']}")
    if (submission.get("attempt") or {}).get("refunded"):
        lines.append("The attempt was refunded.")
    if submission.get("disqualified"):
        lines.append("This submission was disqualified.")
    return "\n".join(lines)
