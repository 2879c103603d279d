"""Grading one estimator on one suite (docs/architecture.md, "Metered estimation: the
grader"), and making the suites.

:func:`grade` loads a suite with whestbench, starts the meter and the runner, and scores
with whestbench's own ``evaluate_estimator``, which applies the wall cap, the residual
cap or price, the combined budget and the zero-prediction fallback; the per-MLP score is
whestbench's ``s_m = MSE_final * max(0.1, C_m / B_m)`` (1.0 on failure). The result is
``evaluate_estimator``'s dictionary plus Podium's ``"grader"`` entry, and each per-MLP
entry's ``suite_index``.

:func:`make_suite` bakes a suite with whestbench's ``create_dataset`` from explicit
per-MLP seeds (``portal.estimation.rules.derive_seeds`` derives a suite's seeds from one
private seed, keyed by role, so that staff keep one secret per contest).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import math
import shutil
import tarfile
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whestbench import create_dataset, load_dataset, metadata
from whestbench.dataset import resolve_seed_context
from whestbench.runner import EstimatorEntrypoint, ResourceLimits
from whestbench.scoring import (
    ContestSpec,
    ScoringExhaustionWarning,
    evaluate_estimator,
    make_contest_from_dataset,
)
from whestbench.sdk import SetupContext

from scoring import engine
from scoring.estimation import harness
from scoring.estimation.meter import Meter, parse_cpuset
from scoring.estimation.runner import (
    API_VERSION,
    PREDICT_GRACE_S,
    SUBMISSION_DIR,
    GraderRunner,
    Sandbox,
)

# The grader image is named after the flopscope it meters with: the client in it must be
# the trusted server's version (pyproject.toml pins both; scripts/base-images builds it).
FLOPSCOPE_VERSION = importlib.metadata.version("flopscope")
WHESTBENCH_VERSION = importlib.metadata.version("whestbench")
GRADER_IMAGE = f"localhost/podium/whest-grader:{FLOPSCOPE_VERSION}"
# The image's labels that say what it was made from.
HARNESS_LABEL = "podium.harness"
# The least memory a grader container may have: Python and the client alone take ~30 MiB.
MIN_MEMORY_BYTES = 64 << 20
MIN_PIDS = 8
# How long past the wall cap the meter keeps an idle session before reaping it.
SESSION_SLACK_S = 60.0


class StaleImage(Exception):
    """The grader image is missing or was made from another harness or pin."""


@dataclass(frozen=True)
class Limits:
    """One grading's limits.

    ``flop_budget``: each MLP's budget B_m. ``wall_cap_s``: predict's wall-clock cap.
    The residual rule is one of two: a cap (``residual_cap_s``, with
    ``lambda_flops_per_second`` 0), or a price (``residual_cap_s`` None and
    ``lambda_flops_per_second`` above 0: C_m = FLOPs + lambda * residual seconds).
    ``memory_bytes`` and ``pids_limit`` bound the container; ``cpuset`` names the
    entrant's CPUs (the container's and the meter's), None for any. ``setup_timeout_s``:
    whestbench's setup cap.
    """

    flop_budget: int
    wall_cap_s: float
    residual_cap_s: float | None
    lambda_flops_per_second: float
    memory_bytes: int
    pids_limit: int
    cpuset: str | None = None
    setup_timeout_s: float = 5.0

    def __post_init__(self) -> None:
        if isinstance(self.flop_budget, bool) or not isinstance(self.flop_budget, int):
            raise ValueError("flop_budget must be an integer")
        if self.flop_budget <= 0:
            raise ValueError("flop_budget must be positive")
        for name in ("wall_cap_s", "setup_timeout_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise ValueError(f"{name} must be a positive number of seconds")
        if not math.isfinite(self.lambda_flops_per_second) or self.lambda_flops_per_second < 0:
            raise ValueError("lambda_flops_per_second must not be negative")
        if self.residual_cap_s is None:
            if self.lambda_flops_per_second <= 0:
                raise ValueError(
                    "without a residual cap the residual is priced: lambda_flops_per_second "
                    "must be above 0"
                )
        else:
            if not math.isfinite(self.residual_cap_s) or self.residual_cap_s <= 0:
                raise ValueError("residual_cap_s must be a positive number of seconds")
            if self.lambda_flops_per_second != 0:
                raise ValueError("under a residual cap lambda_flops_per_second must be 0")
        if self.memory_bytes < MIN_MEMORY_BYTES:
            raise ValueError(f"memory_bytes must be at least {MIN_MEMORY_BYTES}")
        if self.pids_limit < MIN_PIDS:
            raise ValueError(f"pids_limit must be at least {MIN_PIDS}")
        if self.cpuset is not None:
            parse_cpuset(self.cpuset)


def phase_limits(
    *,
    flop_budget: int,
    wall_cap_s: float,
    residual_cap_ms: int | None,
    lambda_flops_per_second: float,
    memory_bytes: int,
    pids_limit: int,
    cpuset: str | None,
) -> Limits:
    """A phase's limits from its rules: a residual cap (``residual_cap_ms``, the
    residual then not priced) or, with None, the price ``lambda_flops_per_second``."""
    return Limits(
        flop_budget=flop_budget,
        wall_cap_s=wall_cap_s,
        residual_cap_s=None if residual_cap_ms is None else residual_cap_ms / 1000,
        lambda_flops_per_second=lambda_flops_per_second if residual_cap_ms is None else 0.0,
        memory_bytes=memory_bytes,
        pids_limit=pids_limit,
        cpuset=cpuset,
    )


def unpack(archive: Path, into: Path) -> Path:
    """Unpack an estimator archive (``whest package``'s tarball, checked at intake) with
    the standard library's data filter: no links out, no special files, no owners."""
    into.mkdir(parents=True)
    with tarfile.open(archive, "r:gz") as tar:
        tar.extractall(into, filter="data")
    return into


def harness_digest() -> str:
    """The SHA-256 of the harness the grader image must carry."""
    return hashlib.sha256(Path(harness.__file__).read_bytes()).hexdigest()


def check_image(image: str = GRADER_IMAGE) -> None:
    """Raise :class:`StaleImage` unless ``image`` exists and carries this harness."""
    try:
        labels = engine.image_labels(image)
    except engine.NoSuchObject as exc:
        raise StaleImage(f"{image} is missing: run scripts/base-images whest-grader") from exc
    if labels.get(HARNESS_LABEL) != harness_digest():
        raise StaleImage(f"{image} carries another harness: run scripts/base-images whest-grader")


def read_entrypoint(submission_dir: Path) -> tuple[str, str]:
    """The module and class of ``manifest.json``'s entrypoint (``whest package``'s)."""
    try:
        manifest = json.loads((submission_dir / "manifest.json").read_text())
        module = manifest["entrypoint"]["module"]
        class_name = manifest["entrypoint"]["class"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"the submission's manifest.json names no entrypoint: {exc}") from exc
    if not isinstance(module, str) or not all(p.isidentifier() for p in module.split(".")):
        raise ValueError(f"the manifest's entrypoint module is not a module name: {module!r}")
    if not isinstance(class_name, str) or not class_name.isidentifier():
        raise ValueError(f"the manifest's entrypoint class is not a name: {class_name!r}")
    return module, class_name


def stage_submission(source: Path, target: Path) -> None:
    """Copy the unpacked submission to ``target``, readable by everyone and writable by
    no one but this user (links are copied as links: in the container they point
    inside the container)."""
    shutil.copytree(source, target, symlinks=True)
    for path in [target, *target.rglob("*")]:
        if path.is_symlink():
            continue
        path.chmod(0o755 if path.is_dir() else 0o644)


@contextmanager
def running(
    submission_dir: Path,
    limits: Limits,
    *,
    width: int,
    depth: int,
    image: str = GRADER_IMAGE,
    on_container: Callable[[str], None] | None = None,
) -> Iterator[GraderRunner]:
    """A started runner of the submission in ``submission_dir`` for MLPs of
    ``width`` x ``depth`` (its copy staged, the meter started, the container set up),
    stopped and cleaned up on leaving. ``on_container``: see :class:`Sandbox`."""
    module, class_name = read_entrypoint(submission_dir)
    with tempfile.TemporaryDirectory(prefix="podium-grade-") as work:
        staged = Path(work) / "submission"
        stage_submission(submission_dir, staged)
        Path(work).chmod(0o755)
        meter = Meter.start(
            session_timeout_s=limits.wall_cap_s + PREDICT_GRACE_S + SESSION_SLACK_S,
            memory_bytes=limits.memory_bytes,
            cpuset=limits.cpuset,
        )
        runner = GraderRunner(
            sandbox=Sandbox(
                image=image,
                memory_bytes=limits.memory_bytes,
                pids_limit=limits.pids_limit,
                cpuset=limits.cpuset,
                on_container=on_container,
            ),
            meter=meter,
            submission_dir=staged,
        )
        try:
            runner.start(
                EstimatorEntrypoint(
                    file_path=staged.joinpath(*module.split(".")).with_suffix(".py"),
                    class_name=class_name,
                ),
                SetupContext(
                    width=width,
                    depth=depth,
                    flop_budget=limits.flop_budget,
                    api_version=API_VERSION,
                    submission_dir=SUBMISSION_DIR,
                    seed=0,
                ),
                ResourceLimits(
                    setup_timeout_s=limits.setup_timeout_s,
                    predict_timeout_s=limits.wall_cap_s + PREDICT_GRACE_S,
                    memory_limit_mb=max(1, limits.memory_bytes >> 20),
                    flop_budget=limits.flop_budget,
                    wall_time_limit_s=limits.wall_cap_s,
                    residual_wall_time_limit_s=limits.residual_cap_s,
                ),
            )
            yield runner
        finally:
            try:
                runner.close()
            finally:
                meter.stop()


def grade(
    submission_dir: Path,
    suite_dir: Path,
    limits: Limits,
    *,
    indices: Sequence[int] | None = None,
    on_mlp: Callable[[int, int], None] | None = None,
    image: str = GRADER_IMAGE,
    on_container: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Grade the unpacked submission in ``submission_dir`` on the suite in ``suite_dir``
    (a whestbench dataset folder), on its MLPs ``indices`` (all by default), in suite
    order; ``on_mlp(done, total)`` after each MLP. Raises ValueError for a submission
    without a usable manifest or bad indices, :class:`StaleImage`, and the platform
    faults of the runner."""
    started = time.monotonic()
    check_image(image)
    read_entrypoint(Path(submission_dir))
    dataset = load_dataset(Path(suite_dir))
    suite = metadata(dataset)
    chosen = list(range(len(dataset))) if indices is None else [int(i) for i in indices]
    if not chosen or any(i < 0 or i >= len(dataset) for i in chosen):
        raise ValueError(f"indices must name MLPs of the suite (0 to {len(dataset) - 1})")
    spec = ContestSpec(
        width=int(suite["width"]),
        depth=int(suite["depth"]),
        n_mlps=len(chosen),
        flop_budget=limits.flop_budget,
        ground_truth_samples=int(suite["n_samples"]),
        setup_timeout_s=limits.setup_timeout_s,
        predict_timeout_s=limits.wall_cap_s + PREDICT_GRACE_S,
        memory_limit_mb=limits.memory_bytes >> 20,
        wall_time_limit_s=limits.wall_cap_s,
        residual_wall_time_limit_s=limits.residual_cap_s,
        lambda_flops_per_second=limits.lambda_flops_per_second,
    )
    version, salt = resolve_seed_context(dataset)
    data = make_contest_from_dataset(
        spec,
        dataset.select(chosen),
        len(chosen),
        seed_protocol_version=version,
        seed_salt=salt,
    )
    total = len(chosen)
    with (
        running(
            Path(submission_dir),
            limits,
            width=spec.width,
            depth=spec.depth,
            image=image,
            on_container=on_container,
        ) as runner,
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore", ScoringExhaustionWarning)
        results: dict[str, Any] = evaluate_estimator(
            runner,
            data,
            on_mlp_scored=(lambda done: on_mlp(done, total)) if on_mlp else None,
        )
    for entry, index in zip(results["per_mlp"], chosen, strict=True):
        entry["suite_index"] = index
    results["grader"] = {
        "image": image,
        "flopscope": FLOPSCOPE_VERSION,
        "whestbench": WHESTBENCH_VERSION,
        "seconds": time.monotonic() - started,
        "restarts": runner.restarts,
    }
    return results


def make_suite(
    out_dir: Path,
    *,
    n_mlps: int,
    width: int,
    depth: int,
    n_samples: int,
    mlp_seeds: list[int],
    on_progress: Callable[[dict[str, Any]], None] | None = None,
) -> Path:
    """Bake a suite into ``out_dir`` (which must not exist) with whestbench's
    ``create_dataset``, as ``whest dataset bake --mlp-seeds`` does: MLP ``i`` from
    ``mlp_seeds[i]``. ``on_progress`` gets whestbench's progress events."""
    if len(mlp_seeds) != n_mlps:
        raise ValueError(f"{len(mlp_seeds)} seeds for {n_mlps} MLPs")
    with warnings.catch_warnings():
        # whestbench's bake stacks its own arrays with NumPy and says so each time.
        warnings.filterwarnings("ignore", message=r"np\.stack\(FlopscopeArray\)")
        baked = create_dataset(
            n_mlps=n_mlps,
            n_samples=n_samples,
            width=width,
            depth=depth,
            mlp_seeds=list(mlp_seeds),
            output_path=Path(out_dir),
            progress=on_progress,
        )
    return Path(baked)
