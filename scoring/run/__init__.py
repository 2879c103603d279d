"""One timed, scored run: its stages (``runner``), its verdict (``verdict``), its meters
(``meter`` for the cgroup, ``gpumeter`` for the GPUs), and the host's calibration, which
is timed exactly as a scored run (``calibration``). Runs on a held host (``scoring.host``)."""
