"""Podium's runtime ABI for the EVA-02 kit, with no model in it (imports no torch).

``run MANIFEST IMAGE_ROOT OUTPUT`` (the same paths are in ``CONTEST_MANIFEST``,
``CONTEST_IMAGE_ROOT`` and ``CONTEST_OUTPUT``). The manifest has one line per image,
``<request id>\\t<path relative to IMAGE_ROOT>``; the output is one little-endian int32
in [0, 999] per manifest line, in manifest order, and nothing else.

The model comes in as a :class:`Model`: plain functions to load one image, stack loaded
images into a batch, and classify a batch, plus the loader that turns the images into
batches (here one process, in order; ``eva02_model.py`` passes a torch DataLoader with
worker processes). Every image is answered at the index it came from, whatever order the
loader delivers batches in. An image that cannot be read (missing, not a JPEG, truncated)
is logged and answered with :data:`FALLBACK_CLASS`, so one bad file costs one answer,
not the run; everything else that goes wrong stops the run with a one-line message and a
non-zero exit status, and writes no output.

Exit statuses: 0 done; 1 the model misbehaved (a wrong number of classes, a class outside
[0, 999], an image answered twice or never); 2 bad arguments or a bad manifest; 3 the
environment cannot run the model (no torch, no checkpoint, a bad ``EVA02_*`` variable).
"""

from __future__ import annotations

import os
import struct
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TextIO

CLASS_COUNT = 1000
FALLBACK_CLASS = 0
MAX_LOGGED_FAILURES = 10
DEFAULT_BATCH = 32
MAX_DEFAULT_WORKERS = 8
DEFAULT_MODEL = "eva02_large_patch14_448.mim_m38m_ft_in22k_in1k"
DEFAULT_CHECKPOINT = "/opt/eva02/model.pt"


class UsageError(Exception):
    """Bad arguments (exit status 2)."""


class ManifestError(ValueError):
    """A manifest that cannot be read or breaks the ABI (exit status 2)."""


class SetupError(RuntimeError):
    """The environment cannot run the model (exit status 3)."""


class PredictionError(RuntimeError):
    """The model answered something the ABI cannot carry (exit status 1)."""


# Arguments and settings ----------------------------------------------------------------


@dataclass(frozen=True)
class Paths:
    manifest: str
    image_root: str
    output: str


def paths_from(argv: Sequence[str], environ: Mapping[str, str]) -> Paths:
    """The three paths: from the arguments, or (with none) from the ``CONTEST_*`` variables."""
    if len(argv) == 3:
        return Paths(*argv)
    if argv:
        raise UsageError("usage: run MANIFEST IMAGE_ROOT OUTPUT")
    names = ("CONTEST_MANIFEST", "CONTEST_IMAGE_ROOT", "CONTEST_OUTPUT")
    missing = [name for name in names if not environ.get(name)]
    if missing:
        raise UsageError(f"usage: run MANIFEST IMAGE_ROOT OUTPUT (or set {', '.join(missing)})")
    return Paths(*(environ[name] for name in names))


def default_workers() -> int:
    """Loader processes: one core is left to the main process, at most eight."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(0, min(MAX_DEFAULT_WORKERS, cores - 1))


@dataclass(frozen=True)
class Settings:
    """The kit's ``EVA02_*`` variables (all optional)."""

    model_name: str = DEFAULT_MODEL
    checkpoint: str = DEFAULT_CHECKPOINT
    random_weights: bool = False
    batch_size: int = DEFAULT_BATCH
    workers: int = field(default_factory=default_workers)
    device: str | None = None  # None: cuda when torch sees a GPU, else cpu

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Settings:
        """Read ``EVA02_MODEL``, ``EVA02_CHECKPOINT``, ``EVA02_RANDOM_WEIGHTS`` (1: no
        checkpoint, random weights), ``EVA02_BATCH``, ``EVA02_WORKERS`` and ``EVA02_DEVICE``.
        Raises :class:`SetupError` for a value it cannot use."""

        def number(name: str, default: int, minimum: int) -> int:
            text = environ.get(name, "").strip()
            if not text:
                return default
            try:
                value = int(text)
            except ValueError:
                raise SetupError(f"{name}={text!r} is not a whole number") from None
            if value < minimum:
                raise SetupError(f"{name}={value} must be at least {minimum}")
            return value

        flag = environ.get("EVA02_RANDOM_WEIGHTS", "").strip()
        if flag not in ("", "0", "1"):
            raise SetupError(f"EVA02_RANDOM_WEIGHTS={flag!r}: use 1 (random weights) or 0")
        return cls(
            model_name=environ.get("EVA02_MODEL", "").strip() or DEFAULT_MODEL,
            checkpoint=environ.get("EVA02_CHECKPOINT", "").strip() or DEFAULT_CHECKPOINT,
            random_weights=flag == "1",
            batch_size=number("EVA02_BATCH", DEFAULT_BATCH, 1),
            workers=number("EVA02_WORKERS", default_workers(), 0),
            device=environ.get("EVA02_DEVICE", "").strip() or None,
        )


# The manifest ----------------------------------------------------------------------------


def read_manifest(manifest: str, image_root: str) -> list[str]:
    """The image paths of the manifest (joined to ``image_root``), in its order.

    Blank lines are skipped. A line without a tab, with an empty path, or with a path
    that is absolute or climbs out with ``..`` is a :class:`ManifestError`, as is a file
    that cannot be read or is not UTF-8.
    """
    try:
        with open(manifest, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise ManifestError(f"cannot read the manifest {manifest}: {error}") from None
    paths = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        _request_id, tab, relative_path = line.partition("\t")
        where = f"manifest line {number}"
        if not tab:
            raise ManifestError(f"{where}: expected '<request id><TAB><image path>'")
        if not relative_path:
            raise ManifestError(f"{where}: the image path is empty")
        if relative_path.startswith("/") or ".." in relative_path.split("/"):
            raise ManifestError(f"{where}: the image path must stay inside IMAGE_ROOT")
        paths.append(os.path.join(image_root, relative_path))
    return paths


# Loading and batching --------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One image, loaded (``pixels``) or not (``error`` says why)."""

    index: int
    pixels: Any = None
    error: str | None = None


class Images:
    """The manifest's images as a map-style dataset (``len`` and ``[index]``): a torch
    DataLoader takes it as it is. Loading never raises; a failure is a :class:`Sample`
    with an ``error``."""

    def __init__(self, paths: Sequence[str], load: Callable[[str], Any]) -> None:
        self.paths = list(paths)
        self.load = load

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> Sample:
        path = self.paths[index]
        try:
            return Sample(index, pixels=self.load(path))
        except Exception as error:  # one unreadable image must not stop the run
            return Sample(index, error=f"{path}: {type(error).__name__}: {error}")


@dataclass(frozen=True)
class Batch:
    """Consecutive samples: the loaded ones stacked (``pixels``, in ``loaded`` order) and
    the ones that failed."""

    loaded: list[int]
    pixels: Any
    failed: list[tuple[int, str]]


def collate(samples: Sequence[Sample], stack: Callable[[list[Any]], Any]) -> Batch:
    """One :class:`Batch` of ``samples`` (a module-level function, so worker processes can
    run it)."""
    good = [sample for sample in samples if sample.error is None]
    return Batch(
        loaded=[sample.index for sample in good],
        pixels=stack([sample.pixels for sample in good]) if good else None,
        failed=[(sample.index, sample.error) for sample in samples if sample.error is not None],
    )


Collate = Callable[[Sequence[Sample]], Batch]
Loader = Callable[[Images, int, Collate], Iterable[Batch]]


def sequential_loader(images: Images, batch_size: int, collate_fn: Collate) -> Iterable[Batch]:
    """Batches of ``batch_size`` consecutive images (the last one shorter), in this process."""
    for start in range(0, len(images), batch_size):
        stop = min(start + batch_size, len(images))
        yield collate_fn([images[index] for index in range(start, stop)])


def _nothing() -> None:
    return None


@dataclass(frozen=True)
class Model:
    """What :func:`predict` needs of a model.

    ``load(path)`` reads one image into whatever ``stack`` takes (it runs in the loader's
    processes and may raise for a bad image); ``stack(images)`` makes a batch;
    ``infer(batch)`` answers one class per image of the batch, in order. ``prepare()``
    runs once the loader has started (load the weights while the first images decode).
    """

    load: Callable[[str], Any]
    stack: Callable[[list[Any]], Any]
    infer: Callable[[Any], Sequence[int]]
    loader: Loader = sequential_loader
    prepare: Callable[[], None] = _nothing
    batch_size: int = DEFAULT_BATCH
    description: str = "model"


@dataclass
class Prediction:
    classes: list[int]
    failures: int


def predict(paths: Sequence[str], model: Model, log: TextIO) -> Prediction:
    """The class of every image of ``paths``, in order (see the module doc)."""
    images = Images(paths, model.load)
    batches = iter(model.loader(images, model.batch_size, partial(collate, stack=model.stack)))
    model.prepare()
    answers: list[int | None] = [None] * len(images)
    failures = 0
    for batch in batches:
        if batch.loaded:
            classes = list(model.infer(batch.pixels))
            if len(classes) != len(batch.loaded):
                raise PredictionError(
                    f"the model answered {len(classes)} classes for a batch of "
                    f"{len(batch.loaded)} images"
                )
            for index, class_id in zip(batch.loaded, classes, strict=True):
                _answer(answers, index, class_id)
        for index, error in batch.failed:
            failures += 1
            if failures <= MAX_LOGGED_FAILURES:
                print(f"eva02: unreadable image, answered {FALLBACK_CLASS}: {error}", file=log)
            _answer(answers, index, FALLBACK_CLASS)
    if failures > MAX_LOGGED_FAILURES:
        print(f"eva02: {failures} unreadable images in all", file=log)
    unanswered = [index for index, class_id in enumerate(answers) if class_id is None]
    if unanswered:
        raise PredictionError(
            f"{len(unanswered)} of {len(answers)} images got no class (first: manifest row "
            f"{unanswered[0] + 1})"
        )
    return Prediction(
        classes=[int(class_id) for class_id in answers if class_id is not None], failures=failures
    )


def _answer(answers: list[int | None], index: int, class_id: Any) -> None:
    if not 0 <= index < len(answers):
        raise PredictionError(f"the loader delivered image {index}, not in the manifest")
    if answers[index] is not None:
        raise PredictionError(f"manifest row {index + 1} was answered twice")
    if isinstance(class_id, bool) or not isinstance(class_id, int):
        try:
            class_id = int(class_id)  # numpy and torch integers
        except (TypeError, ValueError):
            raise PredictionError(f"the model answered {class_id!r}, not a class") from None
    if not 0 <= class_id < CLASS_COUNT:
        raise PredictionError(f"the model answered class {class_id}, outside [0, 999]")
    answers[index] = class_id


def write_output(output: str, classes: Sequence[int]) -> None:
    """Exactly ``4 * len(classes)`` bytes: little-endian int32, in order."""
    data = struct.pack(f"<{len(classes)}i", *classes)
    with open(output, "wb") as handle:
        handle.write(data)


# The entrypoint --------------------------------------------------------------------------


def main(
    argv: Sequence[str],
    environ: Mapping[str, str],
    make_model: Callable[[Settings], Model],
    log: TextIO = sys.stderr,
) -> int:
    """Run the ABI with the model ``make_model(settings)`` builds; the exit status."""
    started = time.monotonic()
    try:
        paths = paths_from(argv, environ)
        images = read_manifest(paths.manifest, paths.image_root)
        if not os.path.isdir(paths.image_root):
            raise UsageError(f"IMAGE_ROOT {paths.image_root} is not a folder")
        settings = Settings.from_environ(environ)
        model = make_model(settings)
        result = predict(images, model, log)
        write_output(paths.output, result.classes)
    except (UsageError, ManifestError) as error:
        print(f"eva02: {error}", file=log)
        return 2
    except SetupError as error:
        print(f"eva02: cannot run the model: {error}", file=log)
        return 3
    except PredictionError as error:
        print(f"eva02: {error}; no output written", file=log)
        return 1
    except OSError as error:  # the output cannot be written
        print(f"eva02: {error}", file=log)
        return 1
    elapsed = time.monotonic() - started
    print(
        f"eva02: {len(result.classes)} images in {elapsed:.2f} s with {model.description}; "
        f"{result.failures} unreadable",
        file=log,
    )
    return 0
