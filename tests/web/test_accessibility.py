"""The basics of accessibility on every page an entrant uses, checked in the HTML and CSS.

(axe-core is not installable from a registry here, so these tests check what it would
check first: a language, one h1 and no skipped heading levels, a name for every form
control, button and link, a title for every chart, unique ids, headers in every
table, a visible focus indicator, and colour contrast from the stylesheet's own
variables. The browser tests add keyboard-only use.)
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest
from django.utils import timezone

from portal.accounts.models import ApiToken
from portal.campaigns.models import Round
from portal.contests.models import Cohort
from portal.environments.models import Environment
from portal.submissions.models import Submission, SubmissionEvent
from tests import factories
from tests.api.test_campaigns import crown, make_campaign, make_round, make_submission, slice_rows
from tests.web.boards import official_run

REPO = Path(__file__).resolve().parents[2]
CONTROLS = {"input", "select", "textarea"}
UNNAMED_INPUTS = {"hidden", "submit", "button", "reset", "image"}


@dataclass
class Audit(HTMLParser):
    """Collects what the checks need in one pass over a page."""

    lang: str = ""
    headings: list[int] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    label_for: set[str] = field(default_factory=set)
    controls: list[dict[str, str]] = field(default_factory=list)
    unnamed: list[str] = field(default_factory=list)
    svgs: list[dict[str, str]] = field(default_factory=list)
    svg_titles: int = 0
    tables: int = 0
    tables_with_headers: int = 0

    def __post_init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self._label_depth = 0
        self._named: list[tuple[str, dict[str, str], list[str]]] = []  # buttons and links
        self._svg_depth = 0
        self._table_has_th: list[bool] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        if "id" in values:
            self.ids.append(values["id"])
        if tag == "html":
            self.lang = values.get("lang", "")
        elif re.fullmatch(r"h[1-6]", tag):
            self.headings.append(int(tag[1]))
        elif tag == "label":
            self._label_depth += 1
            if values.get("for"):
                self.label_for.add(values["for"])
        elif tag in CONTROLS and values.get("type") not in UNNAMED_INPUTS:
            self.controls.append({**values, "_wrapped": "1" if self._label_depth else ""})
        elif tag in ("button", "a") and ("href" in values or tag == "button"):
            self._named.append((tag, values, []))
        elif tag == "svg":
            self._svg_depth += 1
            self.svgs.append(values)
        elif tag == "title" and self._svg_depth:
            self.svg_titles += 1
        elif tag == "table":
            self.tables += 1
            self._table_has_th.append(False)
        elif tag == "th" and self._table_has_th:
            self._table_has_th[-1] = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "label":
            self._label_depth -= 1
        elif tag == "svg":
            self._svg_depth -= 1
        elif tag == "table" and self._table_has_th:
            self.tables_with_headers += self._table_has_th.pop()
        elif tag in ("button", "a") and self._named and self._named[-1][0] == tag:
            name, values, text = self._named.pop()
            if not "".join(text).strip() and not values.get("aria-label"):
                self.unnamed.append(f"<{name} {values}>")

    def handle_data(self, data: str) -> None:
        for _tag, _values, text in self._named:
            text.append(data)


def audit(html: str) -> Audit:
    page = Audit()
    page.feed(html)
    page.close()
    return page


def problems(html: str) -> list[str]:
    page = audit(html)
    found = []
    if page.lang != "en":
        found.append(f"<html lang> is {page.lang!r}")
    if page.headings.count(1) != 1:
        found.append(f"{page.headings.count(1)} h1 elements")
    for before, after in zip(page.headings, page.headings[1:], strict=False):
        if after > before + 1:
            found.append(f"heading level skips from h{before} to h{after}")
    for control in page.controls:
        named = (
            control.get("id") in page.label_for
            or control["_wrapped"]
            or control.get("aria-label")
            or control.get("aria-labelledby")
        )
        if not named:
            found.append(f"a form control without a label: {control}")
    found += [f"a button or link without a name: {item}" for item in page.unnamed]
    for svg in page.svgs:
        if svg.get("role") != "img" and svg.get("aria-hidden") != "true":
            found.append(f"an svg without role=img: {svg}")
    if page.svgs and page.svg_titles < len(page.svgs):
        found.append("an svg without a <title>")
    duplicates = {value for value in page.ids if page.ids.count(value) > 1}
    if duplicates:
        found.append(f"ids used twice: {sorted(duplicates)}")
    if page.tables != page.tables_with_headers:
        found.append("a table without header cells")
    return found


@pytest.fixture
def full_site(alice, benchmark, data_dir):
    """Every kind of page with content: a board and chart, environments, submissions."""
    start = timezone.now() - dt.timedelta(days=1)
    for index in range(3):
        rival = factories.UserFactory(username=f"rival{index}")
        official_run(benchmark, rival, (900 - index * 50) * 1_000_000, at=start)
    official_run(benchmark, alice, 800_000_000, at=start + dt.timedelta(hours=2))
    Cohort.objects.create(benchmark=benchmark, kind=Cohort.PRACTICE)
    ready = Environment.objects.filter(owner=alice).first()
    building = factories.EnvironmentFactory(
        owner=alice,
        benchmark=benchmark,
        name="next",
        status=Environment.BUILDING,
        build_started_at=timezone.now(),
    )
    running = Submission.objects.create(
        entrant=alice,
        benchmark=benchmark,
        environment=ready,
        status=Submission.RUNNING,
        submitted_at=timezone.now(),
        source_name="s.tar.gz",
        source_format="tar.gz",
        source_sha256="1" * 64,
        source_bytes=1,
    )
    SubmissionEvent.objects.create(submission=running, status="running", at=timezone.now())
    token = ApiToken.objects.create(user=alice, label="ci")
    campaign = make_campaign("campaign")  # a crown, a scored round, one waiting for capacity
    leader = make_submission(alice, campaign)
    entries = [{"submission": leader, "score": 0.2, "slices": slice_rows([0.2, 0.2])}]
    scored = make_round(campaign, 1, Round.SCORED, entries)
    crown(campaign, leader, scored, 0.2)
    make_round(campaign, 2, Round.PENDING, [{"submission": leader}], tries=1)
    report = f"/c/campaign/rounds/{scored.pk}/entries/{scored.entries.get().pk}/"
    return {"building": building, "running": running, "token": token, "report": report}


def test_every_entrant_page_passes_the_basic_checks(client, alice, benchmark, full_site):
    slug = benchmark.slug
    anonymous = ["/", f"/b/{slug}/", "/accounts/login/", "/accounts/signup/"]
    anonymous += ["/accounts/password/reset/"]
    signed_in = [
        "/",
        f"/b/{slug}/",
        f"/b/{slug}/leaderboard/",
        f"/b/{slug}/environments/",
        f"/environments/{full_site['building'].pk}/",
        f"/environments/{full_site['building'].pk}/remove/",
        f"/b/{slug}/submissions/",
        f"/submissions/{full_site['running'].pk}/",
        "/account/",
        f"/account/tokens/{full_site['token'].pk}/revoke/",
        "/c/campaign/",
        "/c/campaign/rounds/",
        full_site["report"],
        "/accounts/email/",
        "/accounts/password/change/",
    ]
    found = {}
    for path in anonymous:
        found[f"anonymous {path}"] = problems(client.get(path).content.decode())
    client.force_login(alice)
    for path in signed_in:
        response = client.get(path)
        assert response.status_code == 200, path
        found[path] = problems(response.content.decode())
    refused = client.post(
        f"/b/{slug}/environments/", {"name": "x", "dockerfile_text": "FROM evil.example/x\n"}
    )
    found["a refused Dockerfile"] = problems(refused.content.decode())
    new_token = client.post("/account/tokens/", {"label": "x"})
    found["a new token"] = problems(new_token.content.decode())

    assert {page: issues for page, issues in found.items() if issues} == {}


def test_the_audit_catches_what_it_claims_to():
    bad = (
        '<html><body><h1>a</h1><h3>b</h3><input id="x" name="x"><a href="/"></a>'
        '<svg><g></g></svg><table><tr><td>1</td></tr></table><p id="d"></p><p id="d"></p>'
        "</body></html>"
    )

    found = problems(bad)

    for expected in (
        "<html lang>",
        "skips from h1 to h3",
        "form control without a label",
        "button or link without a name",
        "svg without role=img",
        "svg without a <title>",
        "ids used twice",
        "table without header cells",
    ):
        assert any(expected in problem for problem in found), expected
    assert problems(bad.replace("<html>", '<html lang="en">')) == found[1:]


# Colour contrast, from the stylesheet's own variables ----------------------------------


def css_variables() -> dict[str, str]:
    css = (REPO / "static" / "podium.css").read_text()
    return dict(re.findall(r"--([\w-]+):\s*(#[0-9a-fA-F]{6})\s*;", css))


def luminance(hex_colour: str) -> float:
    channels = [int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(first: str, second: str) -> float:
    high, low = sorted((luminance(first), luminance(second)), reverse=True)
    return (high + 0.05) / (low + 0.05)


WHITE = "#ffffff"


@pytest.mark.parametrize(
    ("foreground", "background"),
    [
        ("ink", WHITE),
        ("ink", "panel"),
        ("ink", "mine"),
        ("muted", WHITE),
        ("muted", "panel"),
        ("accent", WHITE),
        ("accent", "panel"),
        ("accent", "mine"),
        (WHITE, "accent"),  # button text
        ("ok", WHITE),
        ("bad", WHITE),
        ("bad", "panel"),
        ("bad", "bad-bg"),
        ("wait", WHITE),
        ("wait", "panel"),
    ],
)
def test_text_colours_meet_wcag_aa(foreground, background):
    colours = {**css_variables(), WHITE: WHITE}
    ratio = contrast(colours[foreground], colours[background])

    assert ratio >= 4.5, f"{foreground} on {background}: {ratio:.2f}"


def test_the_focus_ring_is_visible_against_the_page():
    colours = css_variables()
    css = (REPO / "static" / "podium.css").read_text()

    assert re.search(r":focus-visible\s*\{[^}]*outline:\s*3px solid var\(--focus\)", css)
    assert contrast(colours["focus"], WHITE) >= 3.0
    assert contrast(colours["focus"], colours["panel"]) >= 3.0


def test_log_text_is_readable_on_its_dark_background():
    css = (REPO / "static" / "podium.css").read_text()
    rule = re.search(r"pre\.log\s*\{([^}]*)\}", css)
    assert rule
    background = re.search(r"background:\s*(#[0-9a-fA-F]{6})", rule.group(1))
    colour = re.search(r"[^-]color:\s*(#[0-9a-fA-F]{6})", rule.group(1))
    assert background and colour

    assert contrast(colour.group(1), background.group(1)) >= 7.0
