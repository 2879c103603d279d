"""The audit tests reuse the API tests' archive builder and accepted uploads."""

from tests.api.conftest import accepted, make_archive

__all__ = ["accepted", "make_archive"]
