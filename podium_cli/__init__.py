"""The ``podium`` command: an entrant's client for the Podium REST API."""

__version__ = "0.1.0"
