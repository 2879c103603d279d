"""Holding a scoring host: its machine lock, build freezer and health gates (``machine``,
``freezer``, ``health`` measures and ``gates`` decides), its GPUs (``gpus``), and its
registration, facts and heartbeat (``hosts``)."""
