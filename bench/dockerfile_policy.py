"""Benchmark: the Dockerfile policy's worst cases (``podium_policy.dockerfile_policy``).

Any signed-in entrant with a verified address can hand the policy a Dockerfile of up to
the upload limit (256 KiB) through an environment upload or the dry-run check
(``POST /benchmarks/{slug}/dockerfile-check/``); the web server checks it in the
request. This prints, for each shape below built to ``--kib`` KiB (default 64, and the
upload limit), the wall time of ``check_dockerfile`` (the best of three runs), the peak
memory it allocated (``tracemalloc``, in a fourth run), the number of violations, the
length of their joined message, and the first violation; the starter kit's Dockerfile is
the first row, for scale.

Shapes (each built to expand, or to reach a path of the parser that a naive reading
makes quadratic or worse):

* ``doubling``: ``ENV V1=${V0}${V0}``, V2 from V1..., to the size;
* ``wide``: one 60 KB ENV value, then lines that substitute it (``ENV B=$A``,
  ``COPY --from=$A``, ``ADD $A x``);
* ``stages``: many ENVs, then many stages each built FROM the one before (each stage
  carries every variable over);
* ``continuation``: one logical line of a few thousand ``\\``-continued lines;
* ``heredocs``: ``RUN <<a <<b ...`` with every body left open;
* ``args``: one ``ARG`` line declaring thousands of names, and as many ``ARG`` lines;
* ``long-line``: one FROM of a single 64 KB word;
* ``regex``: image names built against the reference grammar's regular expressions;
* ``nesting``: ``${A:-${A:-...}}`` past the nesting the policy follows;
* ``onbuild``: ``ONBUILD ONBUILD ...`` thousands deep;
* ``violations``: a line per violation (``VOLUME``), as many as fit.

Run: ``.venv/bin/python bench/dockerfile_policy.py`` (no Django, no database).
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from podium_policy.dockerfile_policy import check_dockerfile, format_violations  # noqa: E402

PREFIXES = ["localhost/podium/", "docker.io/library/"]
BASE = "FROM localhost/podium/python:bookworm\n"


def fill(head: str, line: Callable[[int], str], size: int, tail: str = "") -> str:
    """``head``, then ``line(i)`` for i = 0, 1... while the text stays within ``size``
    bytes, then ``tail``."""
    parts = [head]
    used = len(head.encode()) + len(tail.encode())
    index = 0
    while True:
        piece = line(index)
        if used + len(piece.encode()) > size:
            break
        parts.append(piece)
        used += len(piece.encode())
        index += 1
    parts.append(tail)
    return "".join(parts)


def shapes(size: int) -> dict[str, str]:
    value = "x" * min(60_000, size // 2)
    return {
        "doubling": fill(
            BASE + "ENV V0=xxxxxxxxxxxxxxxx\n",
            lambda i: f"ENV V{i + 1}=${{V{i}}}${{V{i}}}\n",
            size,
        ),
        "wide": fill(
            BASE + f"ENV A={value}\n",
            lambda i: ("ENV B$i=$A\n", "COPY --from=$A a b\n", "ADD $A x\n")[i % 3].replace(
                "$i", str(i)
            ),
            size,
        ),
        "stages": fill(
            BASE.replace("\n", " AS s0\n") + "".join(f"ENV E{i}={i}\n" for i in range(size // 40)),
            lambda i: f"FROM s{i} AS s{i + 1}\n",
            size,
        ),
        "continuation": fill(BASE + "RUN echo \\\n", lambda i: "  a \\\n", size, "  end\n"),
        "heredocs": fill(BASE + "RUN ", lambda i: f"<<h{i} ", size // 2, "\n")
        + "body\n" * (size // 10),
        "args": fill(BASE + "ARG", lambda i: f" a{i}", size // 2, "\n")
        + fill("", lambda i: f"ARG b{i}=$a{i}\n", size // 2),
        "long-line": "FROM " + "a" * (size - 6) + "\n",
        "regex": fill(
            BASE,
            lambda i: (
                "FROM " + "a." * 2000 + "!\n",
                "FROM localhost/" + "a-" * 2000 + "!\n",
                "FROM localhost/a:" + "b" * 4000 + "\n",
                "ADD " + "a" * 4000 + "@" + "b" * 4000 + " x\n",
            )[i % 4],
            size,
        ),
        "nesting": BASE + "COPY --from=" + "${A:-" * (size // 10) + "}" * (size // 10) + " a b\n",
        "onbuild": BASE + "ONBUILD " * ((size - len(BASE)) // 8 - 1) + "RUN x\n",
        "violations": fill(BASE, lambda i: "VOLUME\n", size),
    }


def measure(name: str, text: str) -> None:
    """One row: the best of three untraced runs' wall time, then one traced run's peak."""
    elapsed = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        violations = check_dockerfile(text, PREFIXES)
        elapsed = min(elapsed, time.perf_counter() - started)
    tracemalloc.start()
    check_dockerfile(text, PREFIXES)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    first = violations[0].message[:70] if violations else "-"
    print(
        f"{name:<13} {len(text.encode()) / 1024:7.1f} KiB {elapsed * 1000:9.1f} ms "
        f"{peak / 2**20:8.2f} MiB {len(violations):7d} {len(format_violations(violations)):9d}  "
        f"{first}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kib", type=int, nargs="*", default=[64, 256])
    args = parser.parse_args()
    header = f"{'shape':<13} {'size':>11} {'time':>12} {'peak':>12} {'refused':>7} {'message':>9}"
    print(header + "  first violation")
    kit = (ROOT / "examples" / "starter-kit" / "Dockerfile").read_text(encoding="utf-8")
    measure("starter-kit", kit)
    for kib in args.kib:
        for name, text in shapes(kib * 1024).items():
            measure(name, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
