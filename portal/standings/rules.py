"""The final standings' arithmetic, on plain values (no Django).

- **Nominations** (:func:`counted_submissions`): a team's nominated submissions count
  (an entrant on their own is a team of one), at most :data:`MAX_NOMINATIONS`; without a
  nomination its two best passing official submissions, whoever uploaded them (by best
  wall time, then the earlier upload, then the lower id).
- **The final rerun** (:func:`decide`): each counted submission's median over its
  passing final runs; a submission with a failed final run drops out with its reason;
  each entrant (a team under one key) ranks with their better submission. Neighbours
  (in median order) whose medians differ by less than the class's noise band are
  *close*: while either still has extra runs to get, both are asked for them
  (:attr:`Decision.extra_runs`); once both had theirs, close neighbours share a rank (a
  chain of close neighbours is one tied group, ranked as its first: 1, 2, 2, 4).
- **The canonical export** (:func:`canonical_csv`, :func:`digest_of`): the rows as CSV
  with fixed columns and ``\\n`` line ends, every cell a spreadsheet would read as a
  formula neutralised; its SHA-256 is the standings' digest, so ``sha256sum`` of the CSV
  export verifies it. Standings published before cells were neutralised keep the plain
  form their digest is of (:func:`published_csv`).
"""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import io
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from portal.hosts.noise import median_ns

MAX_NOMINATIONS = 2
CSV_COLUMNS = ("rank", "entrant", "submission_id", "wall_time_ns", "runs", "tied")


@dataclass(frozen=True)
class Passing:
    """One passing official submission, as the nomination rule sees it: ``entrant_id`` is
    the key of whom it counts for (its uploader, or their team's negated id)."""

    submission_id: int
    entrant_id: int
    best_wall_time_ns: int
    submitted_at: dt.datetime


def counted_submissions(
    passing: Iterable[Passing], nominated: Mapping[int, Sequence[int]]
) -> dict[int, list[int]]:
    """Per key (an entrant, or a team), the submissions that count: its nomination (only
    those of them still passing and still its own), else its :data:`MAX_NOMINATIONS`
    best passing ones."""
    by_entrant: dict[int, list[Passing]] = {}
    for row in passing:
        by_entrant.setdefault(row.entrant_id, []).append(row)
    counted: dict[int, list[int]] = {}
    for entrant_id, rows in by_entrant.items():
        ids = {row.submission_id for row in rows}
        chosen = [sid for sid in nominated.get(entrant_id, ()) if sid in ids]
        if not nominated.get(entrant_id):
            best = sorted(
                rows, key=lambda r: (r.best_wall_time_ns, r.submitted_at, r.submission_id)
            )
            chosen = [row.submission_id for row in best[:MAX_NOMINATIONS]]
        if chosen:
            counted[entrant_id] = chosen[:MAX_NOMINATIONS]
    return counted


def close(a_ns: int, b_ns: int, band_pct: float | None) -> bool:
    """Whether two medians differ by less than ``band_pct`` percent of the faster one
    (never with no band, nor with a band of 0)."""
    if not band_pct or band_pct <= 0:
        return False
    return abs(a_ns - b_ns) * 100 < band_pct * min(a_ns, b_ns)


@dataclass(frozen=True)
class Scored:
    """One counted submission's final runs so far.

    ``walls_ns``: the passing runs' wall times; ``failure``: the reason of a final run
    that did not pass (it drops out), "" when none; ``pending``: runs queued or under
    way; ``extra_done``: whether its extra runs were asked for already.
    """

    submission_id: int
    entrant_id: int
    entrant: str
    submitted_at: dt.datetime
    walls_ns: tuple[int, ...]
    failure: str = ""
    pending: int = 0
    extra_done: bool = False


@dataclass(frozen=True)
class Row:
    rank: int
    entrant_id: int
    entrant: str
    submission_id: int
    wall_time_ns: int
    runs: int
    tied: bool


@dataclass(frozen=True)
class Decision:
    """What the runs so far decide: ``complete`` once nothing is pending nor asked for;
    ``rows`` the standings (final only when complete); ``extra_runs`` the submissions
    that need their extra runs now; ``dropped`` the submissions out, with why."""

    rows: list[Row]
    extra_runs: list[int] = field(default_factory=list)
    dropped: dict[int, str] = field(default_factory=dict)
    complete: bool = True


def _key(item: Scored) -> tuple[int, dt.datetime, int]:
    return (median_ns(item.walls_ns), item.submitted_at, item.submission_id)


def decide(scored: Iterable[Scored], *, band_pct: float | None) -> Decision:
    """The standings from the final runs (see the module doc)."""
    items = list(scored)
    pending = any(item.pending for item in items)
    dropped = {item.submission_id: item.failure for item in items if item.failure}
    dropped.update(
        {
            item.submission_id: "no passing final run"
            for item in items
            if not item.failure and not item.walls_ns and not item.pending
        }
    )
    best: dict[int, Scored] = {}
    for item in items:
        if item.submission_id in dropped or not item.walls_ns:
            continue
        current = best.get(item.entrant_id)
        if current is None or _key(item) < _key(current):
            best[item.entrant_id] = item
    order = sorted(best.values(), key=_key)
    medians = [median_ns(item.walls_ns) for item in order]
    extra: list[int] = []
    tied_with_previous = [False] * len(order)
    for index in range(1, len(order)):
        if not close(medians[index - 1], medians[index], band_pct):
            continue
        pair = (order[index - 1], order[index])
        wanting = [item.submission_id for item in pair if not item.extra_done]
        if wanting:
            extra.extend(sid for sid in wanting if sid not in extra)
        else:
            tied_with_previous[index] = True
    rows: list[Row] = []
    for index, item in enumerate(order):
        tied = tied_with_previous[index] or (
            index + 1 < len(order) and tied_with_previous[index + 1]
        )
        rank = rows[-1].rank if tied_with_previous[index] else index + 1
        rows.append(
            Row(
                rank=rank,
                entrant_id=item.entrant_id,
                entrant=item.entrant,
                submission_id=item.submission_id,
                wall_time_ns=medians[index],
                runs=len(item.walls_ns),
                tied=tied,
            )
        )
    return Decision(
        rows=rows, extra_runs=extra, dropped=dropped, complete=not pending and not extra
    )


# What a spreadsheet reads as the start of a formula (OWASP's list for CSV injection).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def neutral_cell(cell: str) -> str:
    """``cell`` as the canonical CSV writes it: one that starts like a formula
    (:data:`FORMULA_STARTS`: ``=HYPERLINK(...)``, ``-2+3``, ``@SUM(...)``) gets a leading
    apostrophe, which a spreadsheet shows as text; any other is unchanged."""
    return "'" + cell if cell.startswith(FORMULA_STARTS) else cell


def canonical_csv(rows: Iterable[Row], *, neutral: bool = True) -> str:
    """The rows as the canonical CSV: :data:`CSV_COLUMNS`, ``\\n`` line ends, ``tied`` as
    ``true``/``false``, every cell through :func:`neutral_cell`; the standings' digest is
    its SHA-256. ``neutral=False``: the plain form, as standings were published before
    cells were neutralised (:func:`published_csv`)."""
    cells = (
        [
            str(row.rank),
            row.entrant,
            str(row.submission_id),
            str(row.wall_time_ns),
            str(row.runs),
            "true" if row.tied else "false",
        ]
        for row in rows
    )
    return table_csv(CSV_COLUMNS, cells, neutral=neutral)


def table_csv(
    columns: Sequence[str], rows: Iterable[Sequence[str]], *, neutral: bool = True
) -> str:
    """A canonical CSV of any published standings: a header of ``columns``, then each
    row's cells, ``\n`` line ends, every cell through :func:`neutral_cell` (unless
    ``neutral=False``). The timed standings' form is :func:`canonical_csv`; other kinds
    of standings (metered estimation's) give their own columns."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for cells in rows:
        writer.writerow([neutral_cell(cell) for cell in cells] if neutral else list(cells))
    return out.getvalue()


def sha256_of(text: str) -> str:
    """``sha256:<hex>`` of ``text`` (UTF-8): the form of every standings digest."""
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def digest_of(rows: Iterable[Row]) -> str:
    """``sha256:<hex>`` of :func:`canonical_csv`."""
    return sha256_of(canonical_csv(rows))


def published_csv(rows: Sequence[Row], digest: str) -> str:
    """The CSV whose SHA-256 is the published ``digest``: the canonical form, or, for
    standings published before cells were neutralised whose rows have a cell that
    starts like a formula, the plain form their digest is of (a published digest never
    changes). The two forms differ only where such a cell is."""
    text = canonical_csv(rows)
    if sha256_of(text) != digest:
        plain = canonical_csv(rows, neutral=False)
        if sha256_of(plain) == digest:
            return plain
    return text


def is_digest_of(rows: Sequence[Row], digest: str) -> bool:
    """Whether ``digest`` is of these rows, in either form :func:`published_csv` serves:
    rows that match the published digest would change nothing."""
    return sha256_of(published_csv(rows, digest)) == digest
