"""No run can tell which kind of run it is from what it can observe of its inputs.

An entry that knew it was being verified could behave honestly only then. A probe entry
records, from inside the real sandbox, everything about its input that ``stat`` and
``/proc`` show (links, modes, owners, timestamps, the folders, the mount's options) and
answers right, so that its official run passes and is verified. Its official run, its
verification run and a practice run must report the same observations. (A campaign
round's slices are staged by the same code, ``staging.stage_items``:
tests/scoring/test_staging.py compares their files.)
"""

from __future__ import annotations

import re

import pytest

from portal.contests.models import Cohort
from portal.core import storage
from portal.submissions.models import Run, Submission
from scoring.cohort import staging, verifysets
from scoring.run import runner
from tests.hostile.conftest import CLASS, ROWS, script
from tests.scoring.test_staging import make_cohort, make_submission

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]

# Prints one "PROBE ..." line of what it observed, then answers right.
PROBE = script(
    r"""
man=$1
root=$2
tab=$(printf '\t')
while IFS="$tab" read -r request_id path; do
  stat -c '%h %a %u:%g %X %Y %Z' "$root/$path"
done < "$man" > /tmp/stat
links=$(cut -d' ' -f1 /tmp/stat | sort -u | tr '\n' ,)
modes=$(cut -d' ' -f2 /tmp/stat | sort -u | tr '\n' ,)
owners=$(cut -d' ' -f3 /tmp/stat | sort -u | tr '\n' ,)
stamps=$( (cut -d' ' -f4,5 /tmp/stat | tr ' ' '\n'; stat -c '%X
%Y' "$man" "$root") | sort -u | wc -l)
mtimes=$(cut -d' ' -f5 /tmp/stat | sort -u | tr '\n' ,)
folders=$(stat -c '%h:%a:%u' "$root" "$(dirname "$man")" | tr '\n' ,)
mount=$(awk '$5 == "/contest/input" { print $6 }' /proc/self/mountinfo)
printf 'PROBE links=%s modes=%s owners=%s stamps=%s mtimes=%s ' \
  "$links" "$modes" "$owners" "$stamps" "$mtimes"
echo "folders=$folders mount=$mount"
exec answer "$3"
"""
)

SCRIPTS = {"probe": PROBE}


def observed(run: Run) -> str:
    text = (storage.run_dir(run.pk) / runner.RUN_LOG).read_text(errors="replace")
    found = re.search(r"^PROBE (.*)$", text, re.MULTILINE)
    assert found, text
    return found.group(1)


def test_official_verification_and_practice_runs_observe_the_same_inputs(hostile, images):
    benchmark = hostile.benchmark
    benchmark.verify_top = 20
    benchmark.verify_tolerance_pct = 1000
    benchmark.save()
    make_cohort(benchmark, [CLASS] * ROWS, kind=Cohort.PRACTICE)
    official = make_submission(hostile.entrant, benchmark, image_tag=images["probe"])

    runner.score_submission(official.pk)
    official.refresh_from_db()
    assert official.status == Submission.VERIFYING
    assert verifysets.prepare(benchmark.cohorts.get(kind=Cohort.OFFICIAL).pk) is not None
    runner.score_submission(official.pk)
    official.refresh_from_db()
    assert official.status == Submission.PASSED, official.failure_reason

    practice = make_submission(hostile.entrant, benchmark, image_tag=images["probe"])
    Submission.objects.filter(pk=practice.pk).update(kind=Submission.PRACTICE)
    runner.score_submission(practice.pk)
    practice.refresh_from_db()
    assert practice.status == Submission.PASSED, practice.failure_reason

    score = official.runs.get(purpose=Run.SCORE)
    verification = official.runs.get(purpose=Run.VERIFY)
    seen = {
        "official": observed(score),
        "verification": observed(verification),
        "practice": observed(practice.runs.get()),
    }
    assert seen["official"] == seen["verification"] == seen["practice"], seen
    # And what they observe: single-link files of one mode, one fixed timestamp for
    # everything (never the time of staging), on a read-only mount.
    line = seen["official"]
    assert "links=1, " in line and "modes=644, " in line, line
    assert "stamps=1 " in line and f"mtimes={staging.STAMP_NS // 10**9}, " in line, line
    assert re.search(r"mount=ro\b", line), line
