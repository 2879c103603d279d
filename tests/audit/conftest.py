"""The audit tests reuse the API tests' archive builder, accepted uploads and broker recorder."""

from tests.api.conftest import accepted, make_archive, sent

__all__ = ["accepted", "make_archive", "sent"]
