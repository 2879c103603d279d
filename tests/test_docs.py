"""The repository's documentation: every document the code points to exists, and
``docs/api.md`` covers every route of the API.

A pointer to a document, in a docstring or a comment of the project's Python files, is a
path from the repository root ending in ``.md``, such as ``docs/api.md`` or ``README.md``;
it must name a file of the repository, so a document's name without its ``docs/`` folder
fails. A pointer followed by a quoted section (``docs/api.md, "Errors"``) must name a
heading of that document. A pointer by a document's bare name and a quoted section, the
form the code once used for documents kept outside the repository, names no file and
fails too.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Where the project's Python lives (``.venv`` and other folders are never read).
SCANNED = ("portal", "scoring", "podium_cli", "tests", "bench", "scripts")
API_DOC = ROOT / "docs/api.md"

# A path to a Markdown document: folders and a file name ending in ``.md``, not part of a
# longer path or a URL (nothing word-like, ``/``, ``.`` or ``-`` right before it).
DOCUMENT = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[\w.-]+\.md)\b")
# A quoted section right after a pointer: `, "Section"`, ` ("Section")`, `, section "Section"`.
SECTION = re.compile(r'[,\s]*\(?\s*(?:section\s+)?"([^"\n]+)"')
# The old pointer form: a document's bare name and a quoted section title.
# (A bare name with ``.md`` is a path that resolves to nothing: DOCUMENT finds it.)
BARE_POINTER = re.compile(r'(?<![\w./-])((?i:rules|architecture|api)),?\s+"[A-Z]')


@dataclass(frozen=True)
class Problem:
    path: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.text}"


def python_files() -> Iterator[Path]:
    """Every Python file of the scanned folders: ``*.py`` files, and scripts whose first
    line runs Python."""
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            if path.suffix == ".py":
                yield path
            elif not path.suffix:
                with path.open("rb") as handle:
                    first = handle.readline(200)
                if first.startswith(b"#!") and b"python" in first:
                    yield path


def commentary(source: str) -> list[tuple[int, str]]:
    """The docstrings and comments of a module, each with the line it starts on.

    A docstring here is any statement that is a string alone (module, class and function
    docstrings, and the strings documenting an attribute). Comments on consecutive lines
    are joined into one text, so a pointer may run from one line to the next.
    """
    texts: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            texts.append((node.lineno, node.value.value))
    block: list[str] = []
    start = last = 0
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type != tokenize.COMMENT:
            continue
        line = token.start[0]
        if block and line != last + 1:
            texts.append((start, "\n".join(block)))
            block = []
        if not block:
            start = line
        block.append(token.string.lstrip("#").strip())
        last = line
    if block:
        texts.append((start, "\n".join(block)))
    return texts


@cache
def headings(document: Path) -> frozenset[str]:
    """The headings of a Markdown document, normalized (see :func:`normalized`)."""
    lines = document.read_text(encoding="utf-8").splitlines()
    return frozenset(normalized(line.lstrip("#")) for line in lines if line.startswith("#"))


def normalized(title: str) -> str:
    return " ".join(title.replace("`", "").split()).casefold()


def problems_in(source: str, name: str = "<source>", root: Path = ROOT) -> list[Problem]:
    """What is wrong with the document pointers in ``source``'s docstrings and comments."""
    found: list[Problem] = []
    for first_line, text in commentary(source):
        for match in DOCUMENT.finditer(text):
            line = first_line + text.count("\n", 0, match.start())
            reference = match.group(1)
            document = root / reference
            if not document.is_file():
                found.append(Problem(name, line, f"{reference} is not a file of the repository"))
                continue
            section = SECTION.match(text, match.end())
            if section and normalized(section.group(1)) not in headings(document):
                message = f'{reference} has no heading "{section.group(1)}"'
                found.append(Problem(name, line, message))
        for match in BARE_POINTER.finditer(text):
            line = first_line + text.count("\n", 0, match.start())
            document_name = match.group(1)
            message = f"a pointer to {document_name} names no file: docs/{document_name.lower()}.md"
            found.append(Problem(name, line, message))
    return found


def test_every_document_the_code_points_to_exists() -> None:
    problems = [
        problem
        for path in python_files()
        for problem in problems_in(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    ]
    assert not problems, "\n".join(map(str, problems))


def test_the_scan_reads_the_project() -> None:
    """The scan sees the files that point to the documents (a scan of nothing would pass)."""
    scanned = {str(path.relative_to(ROOT)) for path in python_files()}
    assert {"portal/core/errors.py", "scoring/host/machine.py", "podium_cli/errors.py"} <= scanned
    assert not any(name.startswith(".venv") for name in scanned)


@pytest.mark.parametrize(
    ("source", "problems"),
    [
        ('"""See docs/rules.md."""\n', 0),
        ('"""See docs/rules.md, "Verification before ranking"."""\n', 0),
        ('"""See README.md."""\n', 0),
        ('"""See docs/rules.md, "No such heading"."""\n', 1),
        ('"""See docs/missing.md."""\n', 1),
        ('def f() -> None:\n    """Steps (notes.md, "The scored run")."""\n', 1),
        ('# Contract (rules "The runtime ABI")\nx = 1\n', 1),
        ('# The sandbox of docs/rules.md,\n# "The runtime ABI".\nx = 1\n', 0),
        ('# The sandbox of docs/rules.md,\n# "No runtime ABI".\nx = 1\n', 1),
        ('x = "notes.md"  # a string in code is not a pointer\n', 0),
        ('"""A link: https://example.org/notes.md"""\n', 0),
    ],
)
def test_a_broken_pointer_is_found(source: str, problems: int) -> None:
    assert len(problems_in(source)) == problems


@pytest.mark.parametrize("name", ["rules", "api", "architecture"])
def test_a_document_name_without_its_folder_is_refused(name: str) -> None:
    assert len(problems_in(f'"""See {name}.md."""\n')) == 1
    assert (
        len(problems_in(f'# Verification ({name}.md "Verification before ranking")\nx = 1\n')) == 1
    )
    assert len(problems_in(f'"""See docs/{name}.md."""\n')) == 0


def test_a_problem_names_its_line() -> None:
    source = 'x = 1\n\n\ndef f() -> None:\n    """One.\n\n    Two: see notes.md.\n    """\n'
    assert [problem.line for problem in problems_in(source)] == [7]


# docs/api.md and the API's routes ------------------------------------------------------

CONVERTER = re.compile(r"<(?:\w+:)?(\w+)>")
METHODS = ("get", "post", "put", "patch", "delete")


def api_operations() -> list[tuple[str, str]]:
    """Every (method, path) the API's routes answer, paths as docs/api.md writes them:
    ``/api/v1/submissions/{submission_id}/``, the prefix where ``portal.urls`` includes
    them resolved by Django."""
    from django.urls import reverse

    from portal.api import urls

    prefix = reverse("api:schema").removesuffix("schema/")
    operations = []
    for pattern in urls.urlpatterns:
        path = prefix + CONVERTER.sub(r"{\1}", str(pattern.pattern))
        view = getattr(pattern.callback, "view_class", None)
        methods = [m for m in METHODS if view is not None and hasattr(view, m)] or ["get"]
        operations += [(method.upper(), path) for method in methods]
    return operations


def test_the_api_routes_are_read() -> None:
    operations = api_operations()
    assert ("POST", "/api/v1/tokens/") in operations
    assert ("DELETE", "/api/v1/environments/{environment_id}/") in operations
    assert len(operations) > 30


def test_api_doc_describes_every_route() -> None:
    text = API_DOC.read_text(encoding="utf-8")
    missing = [
        f"{method} {path}"
        for method, path in api_operations()
        if not re.search(rf"{method} {re.escape(path)}(?![\w{{}}/-])", text)
    ]
    assert not missing, f"docs/api.md does not describe: {', '.join(missing)}"
