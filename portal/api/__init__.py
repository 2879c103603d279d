"""The REST API (docs/api.md), routed from ``urls.py`` at ``/api/``: one module per
resource, each holding that resource's views and serializers.

- ``tokens``: ``v1/tokens/`` (sign in for a token, list, revoke).
- ``benchmarks``: ``v1/benchmarks/``, ``v1/benchmarks/<slug>/`` and its ``leaderboard/``,
  ``attempts/``, ``quota/``, ``practice/`` and ``practice/download``.
- ``sandbox``: ``v1/benchmarks/<slug>/dockerfile-check/`` and ``sandbox/`` (local runs).
- ``environments``: ``v1/environments/<id>/`` (and ``rebuild/``, ``build-log``) and
  ``v1/benchmarks/<slug>/environments/``.
- ``submissions``: ``v1/submissions/<id>/`` (and ``build-log``, ``run-log``, ``source``)
  and ``v1/benchmarks/<slug>/submissions/``.
- ``writeups``: ``v1/submissions/<id>/writeup/`` and its ``download``.
- ``review``: ``v1/submissions/<id>/review/`` and ``review/decide/``.
- ``staff``: ``v1/submissions/<id>/cancel/``, ``disqualify/``, ``rescore/`` and ``v1/audit/``.
- ``teams``: ``v1/benchmarks/<slug>/team/...`` and ``v1/invitations/...``.
- ``standings``: ``v1/benchmarks/<slug>/nominations/``, ``standings/...``,
  ``standings.csv``, ``standings.json`` and ``final-rerun/``.
- ``estimation``: ``v1/benchmarks/<slug>/estimation/...`` and ``v1/estimation/entries/...``.
- ``hosts``: ``v1/hosts/``.
- ``contests``: ``v1/contests/...``.
- ``campaigns``: ``v1/campaigns/...`` and ``v1/rounds/<id>/entries/<id>/report``.
- ``views``: the site-level bits: the 404 handler (``handler404``) and ``docs/``.

Shared by several of them: ``common`` (shared serializers and fields, lookups that answer
``not_found``, pagination, log tails, uploads), ``auth`` (token and session
authentication), ``errors`` (the ``{"code", "detail"}`` error format), ``downloads``
(practice and suite archives).
"""
