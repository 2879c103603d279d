"""An official run's log cannot carry its answers out: entrants read a capped tail.

The cohort order is fixed, so an honest run printing its predictions (8,000 hex characters
for 1,000 images on one line) would let a later archive replay them. Entrants read at most
``runtime_tail_bytes`` of an official run's log, each line cut at 1,000 characters; staff
and practice runs read the plain tail.
"""

from __future__ import annotations

import secrets

from portal.contests.models import Cohort
from portal.core import storage
from portal.submissions.models import Run, Submission
from tests import factories

ANSWERS = secrets.token_hex(4000)  # one line: 1,000 int32 predictions as hex


def run_with_log(submission: Submission, text: str) -> Run:
    kind = Cohort.OFFICIAL if submission.kind == Submission.OFFICIAL else Cohort.PRACTICE
    (cohort,) = factories.cohorts(submission.benchmark, kind)
    run = Run.objects.create(submission=submission, cohort=cohort, try_number=1)
    storage.ensure_dir(storage.run_dir(run.pk)).joinpath("run.log").write_text(text)
    return run


def test_an_official_runs_answers_cannot_be_read_back(
    benchmark, alice, client_for, ready_environment, accepted
):
    submission = accepted(alice, ready_environment(alice, benchmark))
    filler = "".join(f"step {n}: {'x' * 90}\n" for n in range(400))  # about 40 KB
    run_with_log(submission, f"loading model\n{ANSWERS}\n{filler}{ANSWERS}\ndone\n")

    tail = (
        client_for(alice)
        .get(f"/api/v1/submissions/{submission.pk}/run-log", {"tail": 2000})
        .content.decode()
    )

    assert ANSWERS not in tail
    assert f"{ANSWERS[:1000]} [line cut: 8,000 characters]\n" in tail
    assert tail.endswith("done\n")
    assert "loading model" not in tail  # past the 16 KiB read from the end
    assert len(tail.encode()) <= benchmark.runtime_tail_bytes + 100


def test_the_submission_page_shows_the_same_capped_tail(
    benchmark, alice, client, ready_environment, accepted
):
    submission = accepted(alice, ready_environment(alice, benchmark))
    run_with_log(submission, f"{ANSWERS}\n")
    client.force_login(alice)

    state = client.get(f"/submissions/{submission.pk}/status.json").json()

    assert ANSWERS not in str(state)
    assert ANSWERS[:1000] in str(state)


def test_staff_read_the_whole_line(
    benchmark, alice, staff, client_for, ready_environment, accepted
):
    submission = accepted(alice, ready_environment(alice, benchmark))
    run_with_log(submission, f"{ANSWERS}\n")

    tail = client_for(staff).get(f"/api/v1/submissions/{submission.pk}/run-log").content

    assert tail == f"{ANSWERS}\n".encode()


def test_a_practice_run_keeps_its_plain_tail(
    benchmark, alice, client_for, ready_environment, accepted
):
    submission = accepted(alice, ready_environment(alice, benchmark), kind=Submission.PRACTICE)
    run_with_log(submission, f"{ANSWERS}\n")

    tail = client_for(alice).get(f"/api/v1/submissions/{submission.pk}/run-log").content

    assert tail == f"{ANSWERS}\n".encode()


def test_lines_are_cut_and_marked_and_short_ones_kept():
    text = "short\r\n" + "y" * 1001 + "\nlast"

    assert storage.cut_lines(text, 1000) == (
        "short\r\n" + "y" * 1000 + " [line cut: 1,001 characters]\nlast"
    )
