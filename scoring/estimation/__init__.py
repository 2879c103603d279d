"""Metered estimation: the trusted grader of estimators of ReLU MLPs (docs/architecture.md,
"Metered estimation: the grader"). ``grade`` scores one submission on one suite with
whestbench's own scoring; ``runner`` drives the sandboxed grader container through
whestbench's runner protocol; ``meter`` is the trusted flopscope-server (``meter_server``
its process); ``harness`` runs inside the grader image, beside the entrant's code. Uses
the engine only (``scoring.engine``)."""
