"""whestbench's own tools as the metered-estimation tests use them: ``whest package``
(an estimator's tarball, as an entrant makes it) and ``whest dataset bake`` (a suite)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

WHEST = Path(sys.executable).parent / "whest"

MEAN_ESTIMATOR = '''from whestbench.estimators import MeanPropagationEstimator


class Estimator(MeanPropagationEstimator):
    """Mean propagation, as the starter kit ships it."""
'''


def whest_package(folder: Path, source: str = MEAN_ESTIMATOR) -> Path:
    """The tarball ``whest package`` makes of ``estimator.py`` holding ``source`` (mean
    propagation by default), written in ``folder`` as ``sub.tar.gz``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "estimator.py").write_text(source)
    subprocess.run(
        [str(WHEST), "package", "--estimator", "estimator.py", "--output", "sub.tar.gz", "--yes"],
        cwd=folder,
        check=True,
        capture_output=True,
        timeout=120,
    )
    return folder / "sub.tar.gz"


def whest_bake(
    folder: Path, *, n_mlps: int = 4, width: int = 8, depth: int = 2, n_samples: int = 2000
) -> Path:
    """A whestbench dataset baked into ``folder`` (which must not exist): by default 4 MLPs,
    8 wide and 2 deep, the phase factory's shape."""
    subprocess.run(
        [
            str(WHEST), "dataset", "bake", "--n-mlps", str(n_mlps), "--n-samples",
            str(n_samples), "--width", str(width), "--depth", str(depth), "--output", str(folder),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )  # fmt: skip
    return folder
