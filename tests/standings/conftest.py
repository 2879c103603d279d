"""Fixtures of the final standings' tests: a benchmark about to close, token clients, the
class's noise band set by hand."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from portal.accounts.models import ApiToken
from portal.contests.models import Cohort
from tests import factories


@pytest.fixture
def closing(db):
    """A benchmark whose window closes in an hour (runs and nominations made now)."""
    now = timezone.now()
    benchmark = factories.BenchmarkFactory(
        opens_at=now - dt.timedelta(days=5), closes_at=now + dt.timedelta(hours=1)
    )
    factories.cohorts(benchmark, Cohort.OFFICIAL)
    return benchmark


@pytest.fixture
def after_close(closing):
    """The instant two hours after ``closing`` closed: past the default deadline too."""
    return closing.closes_at + dt.timedelta(hours=2)


@pytest.fixture
def band(monkeypatch: pytest.MonkeyPatch):
    """Set the class's noise band in percent (``band(1.0)``); None: no band."""

    def set_band(percent: float | None) -> None:
        monkeypatch.setattr("portal.standings.rerun.noise_band_percent", lambda _cls: percent)

    set_band(None)
    return set_band


@pytest.fixture
def client_for(db: Any):
    def make(user: Any) -> APIClient:
        token = ApiToken.objects.create(user=user, label="tests")
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
        return client

    return make
