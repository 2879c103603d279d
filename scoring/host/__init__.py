"""Holding a scoring host: its machine lock, build freezer and health gates (``machine``,
``freezer``, ``health`` measures and ``gates`` decides), its GPUs (``gpus``), its
registration and facts (``hosts``), and the one heartbeat thread that the machine lock,
the host's registration and a running round all beat with (``heartbeat``)."""
