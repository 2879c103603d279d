"""The worker side: what a builds worker and a scoring host do, in rooms on floors.

Each room is a sub-package and imports only the rooms below it (import-linter's layers
contract "The worker side's rooms" in ``pyproject.toml``; docs/architecture.md, "The
worker side's rooms"). From the top:

- ``tasks`` (thin Celery tasks) and ``management`` (``manage.py`` commands): the entry
  points;
- ``worker``: a worker's start (registering its host, collecting what dead workers
  left, calibrating) and a scoring host's wake-up (``worker.score_next``), which compose
  the rooms below;
- ``upkeep``: the reaper and retention;
- ``campaign``: a campaign round on its host;
- ``run`` (a timed, scored run and the calibration timed like one) and ``build`` (the
  two builds and what confines them), side by side;
- ``host``: holding a scoring host (its machine lock, freezer and health gates), its
  GPUs, its registration and the one heartbeat thread;
- ``cohort`` (staging a run's input, verification sets) and ``images`` (platforms and
  the registry), side by side;
- ``engine``: the one module that talks to the Docker Engine.

``supervisor/`` and ``calibrate/`` hold C sources and the binaries built from them
(``make supervisor``, ``make calibrate``), not Python.
"""
