"""The OpenAPI schema and the self-hosted docs page."""

from __future__ import annotations

import yaml
from django.core.management import call_command


def test_the_schema_lists_every_endpoint(db, anon):
    response = anon.get("/api/schema/", {"format": "json"})

    assert response.status_code == 200
    paths = response.json()["paths"]
    for path in [
        "/api/v1/tokens/",
        "/api/v1/benchmarks/{slug}/leaderboard/",
        "/api/v1/benchmarks/{slug}/submissions/",
        "/api/v1/environments/{environment_id}/build-log",
        "/api/v1/submissions/{submission_id}/source",
        "/api/v1/audit/",
    ]:
        assert path in paths


def test_the_schema_generates_without_warnings(db, tmp_path):
    out = tmp_path / "schema.yaml"

    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))

    assert yaml.safe_load(out.read_text())["info"]["title"] == "Podium API"


def test_the_docs_page_needs_nothing_from_outside(db, anon):
    response = anon.get("/api/docs/")

    assert response.status_code == 200
    page = response.content.decode()
    assert "/api/v1/submissions/{submission_id}/source" in page
    assert "<script" not in page
    assert "https://" not in page


def test_the_schema_says_when_no_attempt_comes_next(db, anon):
    schema = anon.get("/api/schema/", {"format": "json"}).json()

    quota = schema["components"]["schemas"]["QuotaKind"]["properties"]
    assert quota["next_available_at"]["nullable"] is True  # null once the window closed


def test_the_schema_gives_the_gpu_meters_figures_as_nullable_numbers(db, anon):
    schemas = anon.get("/api/schema/", {"format": "json"}).json()["components"]["schemas"]

    for component in ("Resources", "LeaderboardRow"):
        properties = schemas[component]["properties"]
        for name in ("energy_per_image_j", "gpu_util_mean_pct"):
            assert properties[name]["type"] == "number", (component, name)
            assert properties[name]["nullable"] is True  # null on a class without GPUs
            assert name in schemas[component]["required"]
