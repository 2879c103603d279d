"""A metered-estimation phase in a real browser: an entrant signs in, uploads the tarball
``whest package`` made of their estimator and lands on its entry page; once the grade is
recorded (as the scoring host records it: grading itself does not run here), the page
shows the per-MLP ledger, and the benchmark page the board and the chart."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from portal.core.task_names import ESTIMATION_GRADE
from portal.estimation import services
from portal.estimation.models import Entry
from tests import factories
from tests.browser.conftest import screenshot, sign_in, unlabelled_controls
from tests.web.estimation_entries import grade, mlp, ready_suite
from tests.whest import whest_bake, whest_package


@pytest.fixture(scope="session")
def baked(tmp_path_factory) -> Path:
    """A phase suite's folder, baked once per session by ``whest dataset bake``."""
    return whest_bake(tmp_path_factory.mktemp("suite") / "dataset")


def test_an_entrant_uploads_a_packaged_estimator_and_reads_its_ledger(
    live_server, context, page, alice, tmp_path, baked, sent
):
    phase = factories.PhaseRulesFactory(benchmark__attempts_per_day=10)
    bench = phase.benchmark
    ready_suite(bench, baked)
    tarball = whest_package(tmp_path / "kit")
    sign_in(context, live_server, alice)

    page.goto(f"{live_server.url}/b/{bench.slug}/")
    assert unlabelled_controls(page) == []
    assert page.inner_text("#quota").startswith("10 of 10 entries left today for you")
    page.set_input_files("#id_estimator", str(tarball))
    page.click("#upload button:text('Upload')")
    page.wait_for_url(re.compile(r"/estimation/entries/\d+/$"))
    screenshot(page, "estimation-01-entry-accepted")

    entry = Entry.objects.get()
    assert page.url.endswith(f"/estimation/entries/{entry.pk}/")
    assert f"Entry {entry.pk} was accepted" in page.inner_text(".messages")
    assert "Queued for grading" in page.inner_text("main")
    assert [name for name, _ in sent] == [ESTIMATION_GRADE]

    # The scoring host's record of whestbench's grade: two public MLPs, two withheld.
    services.entry_claim(entry.pk, "test-host")
    services.entry_record(
        entry.pk,
        grade(
            [
                mlp(0, mse=2e-4, flops=300_000),
                mlp(1, mse=4e-4, flops=300_000, failed="time_exhausted"),
                mlp(2, mse=1e-4),
                mlp(3, mse=1e-4),
            ]
        ),
    )
    page.reload()
    screenshot(page, "estimation-02-entry-graded")

    ledger = page.locator("#ledger tbody tr")
    assert ledger.count() == 3  # the public group's heading and its two MLPs
    assert "mlp-01" in ledger.nth(2).inner_text()
    assert "zero prediction over the wall-clock cap" in ledger.nth(2).inner_text()
    assert "withheld MLPs are shown once the phase closes" in page.inner_text("#ledger")
    assert "Nominate for the final rerun" in page.inner_text("#nomination")

    page.goto(f"{live_server.url}/b/{bench.slug}/")
    screenshot(page, "estimation-03-benchmark-page")
    assert "alice" in page.inner_text("#board")
    assert page.locator(f"#estimation-chart circle.own[data-entry='{entry.pk}']").count() == 1
    assert page.locator("#estimation-chart rect.mc-band").count() == 1
