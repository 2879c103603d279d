"""Upkeep: the reaper (``reaper``: work whose worker died, and what dead workers left on
an engine) and retention (``retention``: a closed benchmark's bulky artifacts)."""
