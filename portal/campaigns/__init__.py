"""Campaigns: a benchmark scored in rounds against a pinned baseline, with one leader.

The writes, each module importing only those listed before it:

- ``creation``: a campaign and its baseline image;
- ``crown``: the leader, and when the crown is vacant;
- ``rounds``: a round started, sent, claimed and heartbeated, or waiting for capacity;
- ``recording``: a round's outcome (verdicts, scores, the crown) or a void, and each
  entry's submission settled;
- ``queue``: a submission entering the queue (duplicates, its place) or disqualified;
- ``controls``: staff controls (start a round now, void, pause and resume);
- ``sweep``: the minute's sweep.

Every state change is a conditional update (or runs holding the campaign's row lock), so
a redelivered task or a second caller does nothing twice. Reads: ``selectors`` (pages)
and ``api_selectors`` (the API); the pure rules: ``rules``; what a host reports:
``outcomes``.
"""
