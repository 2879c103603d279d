"""The Dockerfile policy, checked before any environment build (pure: no Django, no Docker).

:func:`check_dockerfile` reads a Dockerfile the way Docker's own parser does (line
continuations and the ``# escape=`` directive, comments, heredoc bodies, case-insensitive
instructions) and returns every :class:`Violation` of the policy, in line order. The
build engine is Docker's classic builder, which resolves a name it cannot find as a
local image id (``FROM 3fa9`` is whatever local image's id starts with ``3fa9``) and
pulls a missing image; every rule below exists because of what that builder would do.

* **Full references only.** Every image a line names (``FROM``, ``COPY --from=``,
  ``RUN --mount=...,from=``, the same inside ``ONBUILD``, after variable substitution)
  is an earlier stage (by alias, or, for ``--from``, by the index of an earlier stage),
  ``scratch`` (``FROM`` only), or a full reference ``registry/repository[:tag][@sha256:
  <64 hex>]`` in Docker's grammar whose first component is a registry host (it contains
  '.' or ':' or is ``localhost``). Names without a registry (``python:3.11``), image
  ids (``3fa9``, ``sha256:...``), malformed references and stages that do not exist yet
  (the current one, a later one) are refused. ``docker.io/python`` means
  ``docker.io/library/python``; ``index.docker.io`` is ``docker.io``.
* **Allowed registries.** The normalized reference starts with a normalized allowed
  prefix; a prefix without a registry host never matches.
* **The entrant namespace** (:data:`ENTRANT_NAMESPACE`, where Podium tags every image
  entrants build) is refused by name on any registry, whatever the prefixes allow: it
  holds other entrants' images.
* ``RUN`` takes no flag but ``--mount`` (no ``--network``, no ``--security``).
* ``LABEL`` keys ``podium``/``podium.*`` (Podium's own labels, which mark build
  containers) and ``com.docker.*`` (the engine's) are refused, keys built from variables
  included.
* ``VOLUME`` is refused: files written to a volume escape the build's disk cap and the
  scored run's read-only root.
* ``ADD`` never fetches from the network: no URL or git source (in any spelling, from
  a variable or in the JSON form), no ``--checksum`` or ``--keep-git-dir``.
* A ``# syntax=`` directive names Docker's official ``docker/dockerfile`` frontend or a
  full reference under an allowed prefix (a custom frontend would decide what every
  other line means).
* ``ONBUILD`` triggers are held to the same rules; because they run in some later build,
  they may not name this file's stages or use variables where a name is checked.
* The file is not empty and has a ``FROM``.
* **The class's platform** (only when the caller gives one and a lookup): every ``FROM``
  image the rules above allow must be available for the platform the build targets
  (``linux/arm64``...), or for the platform its ``--platform=`` flag names. The lookup
  (``image_platforms``) is the caller's: it answers with the platforms an image is
  available for (``os/arch[/variant]``), or ``None`` when it cannot tell (no engine, no
  registry, a registry that does not answer); an image it cannot tell about passes. It is
  asked only about references the policy allows, once each.

Variables (``$NAME``, ``${NAME}``, ``${NAME:-default}``...) are resolved as Docker does:
``FROM`` from the ``ARG``\\ s before the first ``FROM``, other lines from the stage's
``ENV`` and ``ARG``\\ s, build arguments overriding declared defaults; a variable without
a known value where a name is checked is itself a violation. Substitution is bounded
(:data:`MAX_WORD_VARIABLES` per word, :data:`MAX_FILE_VARIABLES` per file): the first
line past a bound is refused and the check stops there, so that its time and memory
stay within a fixed multiple of the text's size, whatever the text.

The function never raises for any text: whatever Docker itself would reject is either
reported or left for the build to fail on, which costs the entrant nothing but time.

:func:`salt_build_cache`, with the same reading of the file, gives the text Podium builds
instead of the entrant's: a per-entrant label after every ``FROM``, so that no entrant's
build can reuse (and so learn of) a cached step another entrant built.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import unicodedata
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

__all__ = [
    "CACHE_LABEL",
    "ENTRANT_NAMESPACE",
    "NO_BUILD_GPU",
    "PlatformLookup",
    "Violation",
    "base_images",
    "build_cache_salt",
    "check_dockerfile",
    "check_platforms",
    "format_violations",
    "normalize_image",
    "prefix_problem",
    "salt_build_cache",
]

ENTRANT_NAMESPACE = "podium-entrant"  # every image an entrant builds: podium-entrant/env-12:...
DOCKER_HUB = "docker.io"
_OFFICIAL_FRONTEND = "docker.io/docker/dockerfile"
_EXAMPLE = "docker.io/library/python:3.11"
_MAX_NESTING = 32  # deepest ${A:-${B:-...}} nesting we follow before giving up


@dataclass(frozen=True)
class Violation:
    """One breach of the policy: ``line`` is the 1-based line where the offending
    instruction starts; ``message`` is one sentence telling the entrant what to fix."""

    line: int
    message: str


# Image references ---------------------------------------------------------------------
# Docker's reference grammar (github.com/distribution/reference), ASCII only.

_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = re.compile(
    rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
)
_PATH_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_IMAGE_ID = re.compile(r"[0-9a-fA-F]+|sha256:.*", re.DOTALL)
_STAGE_INDEX = re.compile(r"[+-]?[0-9]{1,18}")  # strconv.Atoi's form; longer is never a stage
_MAX_NAME_LENGTH = 255


def _has_registry_host(ref: str) -> bool:
    """Whether the first path component of ``ref`` is where Docker looks for a registry
    host (it contains '.' or ':', is 'localhost', or has upper-case letters)."""
    first, slash, _ = ref.partition("/")
    if not slash:
        return False
    return "." in first or ":" in first or first == "localhost" or first != first.lower()


def _names_registry(ref: str) -> bool:
    """Podium's stricter rule: the first component is a well-formed host that contains
    '.' or ':' or is exactly 'localhost', and a path follows it."""
    first, slash, _ = ref.partition("/")
    return bool(
        slash
        and ("." in first or ":" in first or first == "localhost")
        and _DOMAIN.fullmatch(first)
    )


def normalize_image(ref: str) -> str:
    """The fully qualified form of an image reference, as Docker resolves it.

    ``python:3.11`` -> ``docker.io/library/python:3.11``; ``user/x`` -> ``docker.io/user/x``;
    ``ghcr.io/a/b@sha256:...`` is unchanged. A reference whose first component has no
    '.' or ':' and is not 'localhost' is on Docker Hub (``docker.io``; the legacy
    ``index.docker.io`` is folded into it). Tags and digests are kept as written; no
    ``:latest`` is added. Also used on policy prefixes: ``localhost/podium/`` stays,
    ``docker.io/`` stays ``docker.io/``.
    """
    ref = ref.strip()
    name, at, digest = ref.partition("@")
    if _has_registry_host(name):
        domain, _, rest = name.partition("/")
    else:
        domain, rest = DOCKER_HUB, name
    if domain == "index.docker.io":
        domain = DOCKER_HUB
    if domain == DOCKER_HUB and rest and "/" not in rest:
        rest = "library/" + rest
    return f"{domain}/{rest}{at}{digest}"


@dataclass(frozen=True)
class _Reference:
    repository: str  # normalized, without tag or digest: docker.io/library/python
    normalized: str  # normalized, as written otherwise: docker.io/library/python:3.11


def _full_reference(ref: str) -> _Reference | None:
    """``ref`` as a full reference (registry host, repository, optional tag and digest)
    in Docker's grammar, normalized; ``None`` when it is anything else."""
    name, at, digest = ref.partition("@")
    if at and not _DIGEST.fullmatch(digest):
        return None
    slash = name.rfind("/")
    colon = name.rfind(":")
    tag = ""
    if colon > slash:
        name, tag = name[:colon], name[colon + 1 :]
        if not _TAG.fullmatch(tag):
            return None
    if len(name) > _MAX_NAME_LENGTH or not _names_registry(name):
        return None
    _domain, _, path = name.partition("/")
    if not all(_PATH_COMPONENT.fullmatch(part) for part in path.split("/")):
        return None
    repository = normalize_image(name)
    return _Reference(repository=repository, normalized=normalize_image(ref))


def _entrant_image(ref: str) -> bool:
    """Whether ``ref`` names a repository under the entrant namespace on any registry
    (``library/`` on Docker Hub looked through), however it is otherwise spelled."""
    name = _strip_go(ref).partition("@")[0]
    first, slash, rest = name.partition("/")
    on_docker_hub = True
    if slash and _has_registry_host(name):
        on_docker_hub = first.lower() in (DOCKER_HUB, "index.docker.io")
        name = rest
    components = name.split("/")
    if on_docker_hub and len(components) > 1 and components[0].lower() == "library":
        components = components[1:]
    return components[0].partition(":")[0].lower() == ENTRANT_NAMESPACE


def _usable_prefixes(prefixes: Sequence[str]) -> list[str]:
    """The normalized prefixes that can match: an empty prefix would allow everything and
    one without a registry host was never meant as written."""
    stripped = (prefix.strip() for prefix in prefixes)
    return [normalize_image(p) for p in stripped if p and _names_registry(p)]


def _allowed_list(prefixes: Sequence[str]) -> str:
    shown = [p.strip() for p in prefixes if p.strip()]
    return ", ".join(shown) if shown else "none are configured"


def _suggestion(ref: str) -> str:
    """The full reference an entrant most likely meant by a name without a registry."""
    if ref.startswith("podium/"):
        return "localhost/" + ref  # Podium's local base images
    return normalize_image(ref)


def _reference_problem(ref: str, prefixes: Sequence[str]) -> str | None:
    """Why ``ref`` may not be used as an image (the rest of a sentence that starts "...
    names `ref`"), or ``None`` when it may."""
    if _entrant_image(ref):
        return (
            f"another entrant's image ({ENTRANT_NAMESPACE}/), which no Dockerfile may use; "
            "start from an allowed base image instead."
        )
    if _IMAGE_ID.fullmatch(ref):
        return (
            "an image id, which could be any image on the build machine; "
            f"name the image by its full reference instead, like {_EXAMPLE}."
        )
    reference = _full_reference(ref)
    if reference is None:
        if not _names_registry(ref) and _full_reference(f"{DOCKER_HUB}/{ref}") is not None:
            meant = _shown(_suggestion(ref))
            return f"which has no registry; write it with its registry, like {meant}."
        return (
            "which is not a valid image reference; write it as registry/repository:tag, "
            f"like {_EXAMPLE}."
        )
    if not any(reference.normalized.startswith(p) for p in _usable_prefixes(prefixes)):
        return f"which is not from an allowed registry ({_allowed_list(prefixes)})."
    return None


def prefix_problem(prefix: str) -> str | None:
    """Why an allowed-registries line cannot be used, as one sentence, or ``None``.

    A prefix must start with a registry host (``localhost/podium/``, ``docker.io/library/``,
    ``ghcr.io/org/``) and must not reach into the entrant namespace
    (``localhost/podium-entrant/``, or ``localhost/podium``, which would also match it);
    a whole registry (``docker.io/``) is fine, since entrant images are refused by name.
    """
    written = prefix.strip()
    if not _names_registry(written):
        return (
            f"`{written}` does not start with a registry host; write it with its registry, "
            "like localhost/podium/ or docker.io/library/."
        )
    normalized = normalize_image(written)
    if _entrant_image(normalized):
        return (
            f"`{written}` names the entrant namespace ({ENTRANT_NAMESPACE}/), whose images "
            "no Dockerfile may use; remove it."
        )
    path = normalized.partition("/")[2]
    if path and "/" not in path and f"{ENTRANT_NAMESPACE}/".startswith(path):
        return (
            f"`{written}` would also match the entrant namespace ({ENTRANT_NAMESPACE}/); "
            f"end it with a slash, like {written}/."
        )
    return None


# Reading the file the way Docker's parser does -------------------------------------------

_DIRECTIVE = re.compile(r"#[ \t\n\f\r]*([a-zA-Z][a-zA-Z0-9]*)[ \t\n\f\r]*=(.*)", re.DOTALL)
_VALID_DIRECTIVES = frozenset({"escape", "syntax", "check"})
_INSTRUCTION_SPACE = re.compile(r"[\t\v\f\r ]+")
_HEREDOC = re.compile(r"(\d*)<<(-?)([^<]*)", re.DOTALL)
_HEREDOC_INSTRUCTIONS = frozenset({"RUN", "COPY", "ADD"})
_NAME_START = re.compile(r"[A-Za-z_]")


def _is_go_space(ch: str) -> bool:
    """Go's unicode.IsSpace, which Docker's parser uses (Python's isspace differs)."""
    return ch in "\t\n\v\f\r \x85\xa0" or unicodedata.category(ch) in ("Zs", "Zl", "Zp")


def _lstrip_go(text: str) -> str:
    index = 0
    while index < len(text) and _is_go_space(text[index]):
        index += 1
    return text[index:]


def _strip_go(text: str) -> str:
    end = len(text)
    while end > 0 and _is_go_space(text[end - 1]):
        end -= 1
    return _lstrip_go(text[:end])


def _trim_newline(line: str) -> str:
    return line.rstrip("\r\n")


def _is_comment(raw: str) -> bool:
    return _lstrip_go(_trim_newline(raw)).startswith("#")


def _trim_continuation(line: str, escape: str) -> tuple[str, bool]:
    """``(line without its continuation mark, whether the logical line ends here)``."""
    stripped = line.rstrip(" \t")
    if stripped.endswith(escape) and (len(stripped) == 1 or stripped[-2] != escape):
        return stripped[:-1], False
    return line, True


@dataclass
class _Directives:
    escape: str = "\\"
    done: bool = False
    seen: set[str] = field(default_factory=set)

    def consider(self, token: str) -> None:
        """Docker's possibleParserDirective: directives only precede everything else."""
        if self.done:
            return
        match = _DIRECTIVE.fullmatch(token)
        value = _strip_go(match.group(2)) if match else ""
        key = match.group(1).lower() if match else ""
        if not value or key not in _VALID_DIRECTIVES:
            self.done = True
            return
        if key in self.seen:  # Docker refuses the file; nothing for the policy to add
            return
        self.seen.add(key)
        if key == "escape" and value in ("\\", "`"):
            self.escape = value


@dataclass(frozen=True)
class _Instruction:
    line: int
    keyword: str  # upper case
    flags: tuple[str, ...]  # leading --flags, quotes removed, without the dashes
    rest: str  # the arguments after the flags
    json_args: tuple[str, ...] | None  # the exec (JSON array) form, when used
    end: int | None = None  # its last physical line (set by _parse); None: runs to the file's end


def _shell_words(text: str, *, raw: bool) -> list[str] | None:
    """Split like Docker's shell lexer (backslash escapes, quotes); ``None`` on an
    unterminated quote. With ``raw`` the quotes and escapes stay in the words."""
    words: list[str] = []
    word: list[str] = []
    in_word = False
    index = 0
    while index < len(text):
        ch = text[index]
        if _is_go_space(ch):
            if in_word:
                words.append("".join(word))
                word, in_word = [], False
            index += 1
            continue
        in_word = True
        if ch == "\\":
            if index + 1 < len(text):
                word.append(text[index : index + 2] if raw else text[index + 1])
            index += 2
        elif ch == "'":
            end = text.find("'", index + 1)
            if end < 0:
                return None
            word.append(text[index : end + 1] if raw else text[index + 1 : end])
            index = end + 1
        elif ch == '"':
            end = index + 1
            inner: list[str] = []
            while end < len(text) and text[end] != '"':
                if text[end] == "\\" and end + 1 < len(text):
                    inner.append(text[end : end + 2] if raw else text[end + 1])
                    end += 2
                else:
                    inner.append(text[end])
                    end += 1
            if end >= len(text):
                return None
            body = "".join(inner)
            word.append(f'"{body}"' if raw else body)
            index = end + 1
        else:
            word.append(ch)
            index += 1
    if in_word:
        words.append("".join(word))
    return words


def _heredoc_names(line: str) -> list[tuple[str, bool]]:
    """The heredocs (name, chomp) that Docker's parser finds on a logical line."""
    names: list[tuple[str, bool]] = []
    for word in _shell_words(line, raw=True) or []:
        match = _HEREDOC.fullmatch(word)
        if not match or not match.group(3):
            continue
        parsed = _shell_words(match.group(3), raw=False)
        if parsed is None or len(parsed) != 1:
            continue
        names.append((parsed[0], match.group(2) == "-"))
    return names


def _split_flags(args: str) -> tuple[tuple[str, ...], str]:
    """Docker's extractBuilderFlags: leading ``--name[=value]`` words, then the rest."""
    flags: list[str] = []
    index = 0
    while True:
        while index < len(args) and _is_go_space(args[index]):
            index += 1
        if not args.startswith("--", index):
            return tuple(flags), args[index:]
        word: list[str] = []
        quote = ""
        index += 2
        while index < len(args):
            ch = args[index]
            if quote:
                if ch == quote:
                    quote = ""
                elif ch == "\\" and index + 1 < len(args):
                    index += 1
                    word.append(args[index])
                else:
                    word.append(ch)
            elif _is_go_space(ch):
                break
            elif ch in "'\"":
                quote = ch
            elif ch == "\\" and index + 1 < len(args):
                index += 1
                word.append(args[index])
            else:
                word.append(ch)
            index += 1
        if not word:  # a bare "--" ends the flags
            return tuple(flags), args[index:].lstrip()
        flags.append("".join(word))


def _json_form(rest: str) -> tuple[str, ...] | None:
    if not rest.startswith("["):
        return None
    try:
        value = json.loads(rest)
    except (ValueError, RecursionError):
        return None
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return tuple(value)
    return None


def _make_instruction(line_no: int, logical: str) -> _Instruction | None:
    parts = _INSTRUCTION_SPACE.split(_strip_go(logical), maxsplit=1)
    if not parts or not parts[0]:
        return None
    keyword = parts[0].upper()
    flags, rest = _split_flags(parts[1] if len(parts) > 1 else "")
    rest = _strip_go(rest)
    json_args = _json_form(rest) if keyword in ("ADD", "COPY", "RUN") else None
    return _Instruction(line_no, keyword, flags, rest, json_args)


def _can_hold_heredoc(instruction: _Instruction) -> bool:
    """Docker's canContainHeredoc: RUN, COPY or ADD in shell form, or ``ONBUILD`` of one
    (one level only: ``ONBUILD ONBUILD RUN <<EOF`` holds none)."""
    if instruction.keyword == "ONBUILD":
        inner = _make_instruction(instruction.line, instruction.rest)
        if inner is None:
            return False
        instruction = inner
    return instruction.keyword in _HEREDOC_INSTRUCTIONS and instruction.json_args is None


def _parse(text: str) -> tuple[list[_Instruction], _Directives]:
    """Docker's parser loop: logical lines with their first line number; heredoc bodies
    are skipped."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if lines:
        lines[0] = lines[0].removeprefix("\ufeff")
    directives = _Directives()
    instructions: list[_Instruction] = []
    index = 0
    while index < len(lines):
        token = _lstrip_go(_trim_newline(lines[index]))
        index += 1
        start_line = index
        directives.consider(token)
        if token.startswith("#"):
            token = ""
        first, complete = _trim_continuation(token, directives.escape)
        if complete and first == "":
            continue
        pieces = [first]  # joined once: a long continuation costs linear time
        while not complete and index < len(lines):
            raw = lines[index]
            index += 1
            piece = _trim_newline(raw)
            directives.consider(piece)
            if _is_comment(raw) or _lstrip_go(piece) == "":
                continue
            piece, complete = _trim_continuation(piece, directives.escape)
            pieces.append(piece)
        logical = "".join(pieces)
        instruction = _make_instruction(start_line, logical)
        if instruction is None:
            continue
        instruction = replace(instruction, end=index if complete else None)
        instructions.append(instruction)
        if _can_hold_heredoc(instruction):
            for name, chomp in _heredoc_names(logical):
                while index < len(lines):
                    candidate = _trim_newline(lines[index])
                    index += 1
                    if (candidate.lstrip("\t") if chomp else candidate) == name:
                        break
    return instructions, directives


# Variables ----------------------------------------------------------------------------

# Variable substitution is bounded, so that no text (``ENV V1=${V0}${V0}``, then V2 from
# V1... doubles each line) makes the check's time or memory grow past a fixed multiple
# of the file's size. MAX_WORD_VARIABLES: the characters the values of variables may
# bring into one word; MAX_FILE_VARIABLES: into the whole file, counting also each
# variable a stage carries over from the stage it is built on (name and value).
MAX_WORD_VARIABLES = 64 * 1024
MAX_FILE_VARIABLES = 1024 * 1024
_SHOWN_CHARS = 512  # the most of a word or value a message repeats


def _shown(text: str) -> str:
    """``text`` as a message repeats it: its first :data:`_SHOWN_CHARS` characters."""
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS] + "..."


class _TooMuchExpansion(Exception):
    """Variable substitution past :data:`MAX_WORD_VARIABLES` (``whole_file`` False) or
    :data:`MAX_FILE_VARIABLES` (True): the check refuses the line and reads no further."""

    def __init__(self, *, whole_file: bool) -> None:
        super().__init__("whole file" if whole_file else "one word")
        self.whole_file = whole_file

    def message(self, keyword: str) -> str:
        if self.whole_file:
            return (
                f"{keyword} takes the file's variable substitution past "
                f"{MAX_FILE_VARIABLES // 2**20} MiB in all, the most this check follows; "
                "write the values out instead of building them from other variables."
            )
        return (
            f"{keyword} substitutes more than {MAX_WORD_VARIABLES // 1024} KiB of variable "
            "values into one word, the most this check follows; write the value out "
            "instead of building it from other variables."
        )


@dataclass
class _Meter:
    """What is left of the file's :data:`MAX_FILE_VARIABLES`."""

    left: int = MAX_FILE_VARIABLES

    def spend(self, characters: int) -> None:
        self.left -= characters
        if self.left < 0:
            raise _TooMuchExpansion(whole_file=True)


class _Unresolved(Exception):
    """A variable without a value; with ``unsupported``, a substitution form the policy
    does not follow (``${NAME#prefix}``); with ``trigger``, a variable in an ONBUILD
    trigger, whose value only the later build that runs it knows."""

    def __init__(self, name: str, *, unsupported: bool = False, trigger: bool = False) -> None:
        super().__init__(name)
        self.name = name
        self.unsupported = unsupported
        self.trigger = trigger

    def why(self) -> str:
        name = _shown(self.name)
        if self.unsupported:
            return f"the variable `{name}` in a form this check cannot follow"
        if self.trigger:
            return f"the variable `{name}`, whose value in the build that runs it is unknown"
        return f"the variable `{name}`, which has no value"


Lookup = Callable[[str], str | None]


class _Expander:
    """Docker's word expansion: quotes removed, ``$NAME`` / ``${NAME}`` / ``${NAME:-x}``
    / ``${NAME-x}`` / ``${NAME:+x}`` / ``${NAME+x}`` / ``${NAME:?x}`` substituted.

    A variable without a value (or a substitution form this policy cannot check) raises
    :class:`_Unresolved`, so nothing unknown ever passes the policy. Every value
    substituted is counted, against the word's bound and ``meter``
    (:class:`_TooMuchExpansion`): the result is never longer than the word plus
    :data:`MAX_WORD_VARIABLES`."""

    def __init__(self, text: str, lookup: Lookup, escape: str, meter: _Meter) -> None:
        self.text = text
        self.pos = 0
        self.lookup = lookup
        self.escape = escape
        self.meter = meter
        self.substituted = 0

    def _substitute(self, value: str) -> str:
        self.substituted += len(value)
        if self.substituted > MAX_WORD_VARIABLES:
            raise _TooMuchExpansion(whole_file=False)
        self.meter.spend(len(value))
        return value

    def expand(self) -> str:
        return self._word(stop="", depth=0)

    def _peek(self, offset: int = 0) -> str:
        at = self.pos + offset
        return self.text[at] if at < len(self.text) else ""

    def _word(self, *, stop: str, depth: int) -> str:
        if depth > _MAX_NESTING:
            raise _Unresolved("${...}", unsupported=True)
        out: list[str] = []
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if stop and ch == stop:
                return "".join(out)
            if ch == self.escape:
                out.append(self._peek(1))
                self.pos += 2
            elif ch == "'":
                end = self.text.find("'", self.pos + 1)
                end = len(self.text) if end < 0 else end
                out.append(self.text[self.pos + 1 : end])
                self.pos = end + 1
            elif ch == '"':
                self.pos += 1
                out.append(self._double_quoted(depth))
            elif ch == "$":
                out.append(self._dollar(depth))
            else:
                out.append(ch)
                self.pos += 1
        return "".join(out)

    def _double_quoted(self, depth: int) -> str:
        out: list[str] = []
        while self.pos < len(self.text) and self.text[self.pos] != '"':
            ch = self.text[self.pos]
            if ch == self.escape and self._peek(1) in ('"', "$", self.escape):
                out.append(self._peek(1))
                self.pos += 2
            elif ch == "$":
                out.append(self._dollar(depth))
            else:
                out.append(ch)
                self.pos += 1
        self.pos += 1  # the closing quote
        return "".join(out)

    def _name(self) -> str:
        start = self.pos
        while self.pos < len(self.text) and (
            self.text[self.pos].isalnum() or self.text[self.pos] == "_"
        ):
            self.pos += 1
        return self.text[start : self.pos]

    def _value(self, name: str) -> str:
        value = self.lookup(name)
        if value is None:
            raise _Unresolved(name)
        return self._substitute(value)

    def _dollar(self, depth: int) -> str:
        self.pos += 1  # the "$"
        if self._peek() != "{":
            if not _NAME_START.match(self._peek()):
                return "$"
            return self._value(self._name())
        self.pos += 1  # the "{"
        name = self._name()
        if not name:
            raise _Unresolved("${" + self.text[self.pos : self.pos + 20], unsupported=True)
        operator = ""
        for candidate in (":-", ":+", ":?", "-", "+", "?"):
            if self.text.startswith(candidate, self.pos):
                operator = candidate
                break
        if not operator:
            if self._peek() != "}":
                raise _Unresolved(name, unsupported=True)  # ${NAME#...} and friends
            self.pos += 1
            return self._value(name)
        self.pos += len(operator)
        alternative = self._word(stop="}", depth=depth + 1)
        if self._peek() != "}":
            raise _Unresolved(name, unsupported=True)
        self.pos += 1
        value = self.lookup(name)
        if operator == ":-":
            return self._substitute(value) if value else alternative
        if operator == "-":
            return alternative if value is None else self._substitute(value)
        if operator == ":+":
            return alternative if value else ""
        if operator == "+":
            return alternative if value is not None else ""
        if value is None or (operator == ":?" and not value):
            raise _Unresolved(name)
        return self._substitute(value)


# The policy -------------------------------------------------------------------------------

_URL_SCHEME = re.compile(r"[a-z][a-z0-9+.\-]*://")
_SCP_LIKE = re.compile(r"[a-z0-9_.\-]+@[a-z0-9_.\-]+:")
_RESERVED_LABELS = ("podium.", "com.docker.")


def _is_remote(source: str) -> bool:
    """Whether an ADD source would be fetched (HTTP, git or ssh) rather than copied."""
    lowered = _strip_go(source).lower()
    return bool(
        _URL_SCHEME.match(lowered)
        or lowered.startswith(("git@", "github.com/"))
        or _SCP_LIKE.match(lowered)
    )


def _reserved_label(key: str) -> bool:
    lowered = _strip_go(key).lower()
    return lowered == "podium" or lowered.startswith(_RESERVED_LABELS)


def _parse_assignments(rest: str) -> list[tuple[str, str | None]]:
    """``NAME=value`` words of ARG (or ENV): the value still unexpanded, ``None`` when absent."""
    pairs: list[tuple[str, str | None]] = []
    for word in _shell_words(rest, raw=True) or []:
        name, equals, value = word.partition("=")
        pairs.append((name, value if equals else None))
    return pairs


def _parse_words(rest: str, escape: str) -> list[str]:
    """Docker's parseWords (for LABEL): whitespace-separated words, quotes and escapes
    kept in them; an unterminated quote runs to the end."""
    words: list[str] = []
    word: list[str] = []
    in_word = blank_ok = False
    quote = ""
    index = 0
    while index < len(rest):
        ch = rest[index]
        if quote:
            if ch == quote:
                quote = ""
            elif ch == escape and quote != "'":
                if index + 1 == len(rest):
                    break  # an escape at the very end is skipped
                word.append(ch)
                index += 1
                ch = rest[index]
            word.append(ch)
        elif _is_go_space(ch):
            if in_word and (blank_ok or word):
                words.append("".join(word))
            word, in_word, blank_ok = [], False, False
        else:
            in_word = True
            if ch in "'\"":
                quote, blank_ok = ch, True
            elif ch == escape and index + 1 < len(rest):
                word.append(ch)
                index += 1
                ch = rest[index]
            elif ch == escape:
                break  # an escape at the very end is skipped
            word.append(ch)
        index += 1
    if in_word and (blank_ok or word):
        words.append("".join(word))
    return words


def _label_keys(rest: str, escape: str) -> list[str]:
    """The keys of a LABEL, unexpanded, as Docker's parseNameVal finds them: the first
    word of the legacy ``LABEL key value`` form, or each ``key=value`` word's key."""
    words = _parse_words(rest, escape)
    if not words:
        return []
    if "=" not in words[0]:
        return [_INSTRUCTION_SPACE.split(rest, maxsplit=1)[0]]
    return [word.partition("=")[0] for word in words if "=" in word]


def _trigger_lookup(name: str) -> str | None:
    raise _Unresolved(name, trigger=True)


def _flag_values(flags: Sequence[str], name: str) -> list[str]:
    return [value for key, _, value in (f.partition("=") for f in flags) if key.lower() == name]


# The platforms (``os/arch[/variant]``) an image is available for; None: cannot tell.
PlatformLookup = Callable[[str], Collection[str] | None]

# uname -m's and Go's spellings of an architecture -> Docker's (the scoring side folds
# engine and host facts with it too, scoring/images/platforms.py).
ARCH_ALIASES = {"x86_64": "amd64", "x86-64": "amd64", "aarch64": "arm64"}
# Docker's automatic platform build arguments that FROM --platform= may use.
_TARGET_ARGS = ("TARGETPLATFORM", "TARGETOS", "TARGETARCH", "TARGETVARIANT")


def _platform_key(text: str) -> tuple[str, str, str]:
    """``(os, arch, variant)`` of ``linux/arm64/v8``; ``aarch64`` is ``arm64``, arm64's
    default variant v8 is no variant."""
    parts = _strip_go(text).lower().split("/")
    os_name, arch = (parts[0], parts[1]) if len(parts) > 1 else ("linux", parts[0])
    variant = parts[2] if len(parts) > 2 else ""
    arch = ARCH_ALIASES.get(arch, arch)
    if arch == "arm64" and variant == "v8":
        variant = ""
    return os_name, arch, variant


def _platform_offers(offered: str, wanted: str) -> bool:
    """Whether an image of platform ``offered`` serves a build for ``wanted`` (a variant
    only counts where both name one)."""
    have, want = _platform_key(offered), _platform_key(wanted)
    return have[:2] == want[:2] and (not have[2] or not want[2] or have[2] == want[2])


@dataclass(frozen=True)
class _StageImage:
    line: int
    written: str  # as the FROM line writes it
    ref: str  # after variable substitution
    platform: str | None  # its --platform=, expanded; None: the build's own


@dataclass
class _Checker:
    allowed_prefixes: Sequence[str]
    build_args: Mapping[str, str]
    escape: str
    target_platform: str = ""  # the build's platform, for FROM --platform=$TARGET...
    violations: list[Violation] = field(default_factory=list)
    stage_images: list[_StageImage] = field(default_factory=list)  # allowed FROM images
    global_args: dict[str, str | None] = field(default_factory=dict)
    stage_args: dict[str, str | None] = field(default_factory=dict)
    stage_env: dict[str, str | None] = field(default_factory=dict)
    env_by_alias: dict[str, dict[str, str | None]] = field(default_factory=dict)
    earlier_aliases: set[str] = field(default_factory=set)  # stages that are complete
    all_aliases: set[str] = field(default_factory=set)
    current_alias: str = ""
    stage_index: int = -1  # 0-based index of the stage being read
    meter: _Meter = field(default_factory=_Meter)

    def refuse(self, line: int, message: str) -> None:
        self.violations.append(Violation(line, message))

    def _expand(self, text: str, lookup: Lookup) -> str:
        return _Expander(text, lookup, self.escape, self.meter).expand()

    def _global_lookup(self, name: str) -> str | None:
        return self.global_args.get(name)

    def _stage_lookup(self, name: str) -> str | None:
        # As Docker: ENV wins over ARG; a global ARG is visible only when re-declared.
        if name in self.stage_env:
            return self.stage_env[name]
        return self.stage_args.get(name)

    def declare_args(self, rest: str, *, global_scope: bool) -> None:
        target = self.global_args if global_scope else self.stage_args
        lookup = self._global_lookup if global_scope else self._stage_lookup
        for name, default in _parse_assignments(rest):
            if name in self.build_args:
                target[name] = self.build_args[name]
            elif default is not None:
                try:
                    target[name] = self._expand(default, lookup)
                except _Unresolved:
                    target[name] = None
            elif not global_scope and name in self.global_args:
                target[name] = self.global_args[name]  # re-declared global ARG
            else:
                target[name] = None

    def _set_env(self, rest: str) -> None:
        pairs = _parse_assignments(rest)
        if pairs and pairs[0][1] is None:  # legacy "ENV NAME value with spaces"
            legacy = _INSTRUCTION_SPACE.split(rest, maxsplit=1)
            pairs = [(legacy[0], legacy[1] if len(legacy) > 1 else "")]
        for name, value in pairs:
            try:
                self.stage_env[name] = self._expand(value or "", self._stage_lookup)
            except _Unresolved:
                self.stage_env[name] = None

    def _check_image(self, line: int, what: str, written: str, ref: str) -> bool:
        """Refuse ``ref`` if the rules say so; whether it is allowed."""
        problem = _reference_problem(ref, self.allowed_prefixes)
        if problem:
            shown = f"`{_shown(ref)}`"
            if ref != written:
                shown = f"`{_shown(written)}` (that is, {shown})"
            self.refuse(line, f"{what} names {shown}, {problem}")
        return problem is None

    def _from_platform(self, flags: Sequence[str]) -> str | None:
        """A FROM's ``--platform=``, expanded (global ARGs and the TARGET* arguments);
        ``None`` without one; ``""`` when it cannot be known here ($BUILDPLATFORM...)."""
        values = _flag_values(flags, "platform")
        if not values:
            return None
        os_name, arch, variant = _platform_key(self.target_platform or "/")
        target = {
            "TARGETPLATFORM": self.target_platform,
            "TARGETOS": os_name,
            "TARGETARCH": arch,
            "TARGETVARIANT": variant,
        }

        def lookup(name: str) -> str | None:
            if name in _TARGET_ARGS and self.target_platform:
                return target[name]
            return self.global_args.get(name)

        try:
            return self._expand(values[-1], lookup)
        except _Unresolved:
            return ""

    def _from_flag(self, line: int, what: str, written: str, *, trigger: bool) -> None:
        """Check a ``--from`` (COPY, or RUN --mount): an earlier stage or an image."""
        lookup = _trigger_lookup if trigger else self._stage_lookup
        try:
            ref = self._expand(written, lookup)
        except _Unresolved as exc:
            self.refuse(line, f"{what} uses {exc.why()}; name the stage or image directly.")
            return
        stage = ref.lower()
        is_index = bool(_STAGE_INDEX.fullmatch(ref))
        if trigger and (is_index or stage in self.all_aliases):
            self.refuse(
                line,
                f"{what} names the stage `{_shown(ref)}`, but an ONBUILD trigger runs in a later "
                "build without this file's stages; name a full image reference.",
            )
        elif is_index and not 0 <= int(ref) < self.stage_index:
            self.refuse(
                line,
                f"{what} names stage {ref}, which is not an earlier stage; name a stage "
                "defined above this one or a full image reference.",
            )
        elif not is_index and stage in self.all_aliases - self.earlier_aliases:
            self.refuse(
                line,
                f"{what} names the stage `{_shown(ref)}`, which is this stage or a later one; "
                "name a stage defined above this one or a full image reference.",
            )
        elif not is_index and stage not in self.earlier_aliases:
            self._check_image(line, what, written, ref)

    def check_from(self, instruction: _Instruction) -> None:
        if self.current_alias:
            self.earlier_aliases.add(self.current_alias)
        self.stage_index += 1
        words = _INSTRUCTION_SPACE.split(instruction.rest) if instruction.rest else []
        alias = words[2].lower() if len(words) >= 3 and words[1].lower() == "as" else ""
        inherited: dict[str, str | None] = {}
        if not words:
            self.refuse(instruction.line, "FROM needs an image name.")
        else:
            inherited = self._check_base(
                instruction.line, words[0], self._from_platform(instruction.flags)
            )
        self.stage_args = {}
        self.stage_env = inherited
        self.current_alias = alias
        if alias:
            self.env_by_alias[alias] = self.stage_env

    def _check_base(self, line: int, written: str, platform: str | None) -> dict[str, str | None]:
        """Check a FROM image (and note it for the platform check when it is allowed);
        the ENV the new stage starts with, as far as known."""
        try:
            image = self._expand(written, self._global_lookup)
        except _Unresolved as exc:
            self.refuse(
                line,
                f"FROM uses {exc.why()}; declare it with a default (ARG NAME=value) "
                "before the first FROM.",
            )
            return {}
        stage = image.lower()
        if not image:
            self.refuse(line, f"FROM `{_shown(written)}` names no image.")
        elif stage in self.earlier_aliases:
            inherited = dict(self.env_by_alias.get(stage, {}))
            self.meter.spend(sum(len(k) + len(v or "") for k, v in inherited.items()))
            return inherited
        elif stage in self.all_aliases:
            self.refuse(
                line,
                f"FROM names the stage `{_shown(image)}`, which is this stage or a later one; "
                "name a stage defined above this one or a full image reference.",
            )
        elif stage != "scratch" and self._check_image(line, "FROM", written, image):
            self.stage_images.append(_StageImage(line, written, image, platform))
        return {}

    def check_stage_platforms(self, image_platforms: PlatformLookup) -> list[Violation]:
        """The FROM images not available for their stage's platform, as far as
        ``image_platforms`` can tell (each reference asked once; a lookup that raises
        cannot tell)."""
        answers: dict[str, Collection[str] | None] = {}
        refused: list[Violation] = []
        for stage in self.stage_images:
            wanted = self.target_platform if stage.platform is None else stage.platform
            if not wanted or "/" not in wanted:
                continue  # no platform to check against, or one only the builder knows
            reference = normalize_image(stage.ref)
            if reference not in answers:
                try:
                    answers[reference] = image_platforms(reference)
                except Exception:
                    answers[reference] = None
            offered = answers[reference]
            if offered is None or any(_platform_offers(p, wanted) for p in offered):
                continue
            shown = [p for p in sorted(offered) if "unknown" not in p]
            has = f" (it has {', '.join(shown)})" if shown else ""
            name = f"`{_shown(stage.written)}`"
            if stage.ref != stage.written:
                name += f" (that is, `{_shown(stage.ref)}`)"
            refused.append(
                Violation(
                    stage.line,
                    f"FROM names {name}, which has no image for {wanted}{has}; "
                    f"use a base image built for {wanted}.",
                )
            )
        return refused

    def check_add(self, instruction: _Instruction, what: str, *, trigger: bool) -> None:
        for flag in instruction.flags:
            key = flag.partition("=")[0].lower()
            if key in ("checksum", "keep-git-dir"):
                self.refuse(
                    instruction.line,
                    f"{what} --{key} fetches a remote source, which is not allowed; "
                    "download it in a RUN step instead.",
                )
        if instruction.json_args is not None:
            sources = list(instruction.json_args[:-1])
        else:
            words = _INSTRUCTION_SPACE.split(instruction.rest) if instruction.rest else []
            sources = [w for w in words[:-1] if not _HEREDOC.fullmatch(w)]
        lookup = _trigger_lookup if trigger else self._stage_lookup
        for source in sources:
            try:
                expanded = self._expand(source, lookup)
            except _Unresolved as exc:
                self.refuse(
                    instruction.line,
                    f"{what} source `{_shown(source)}` uses {exc.why()}; "
                    "write the local path directly.",
                )
                continue
            if _is_remote(source) or _is_remote(expanded):
                self.refuse(
                    instruction.line,
                    f"{what} cannot fetch `{_shown(expanded)}` from the network; COPY a local file "
                    "or download it in a RUN step instead.",
                )

    def check_run(self, instruction: _Instruction, what: str, *, trigger: bool) -> None:
        for flag in instruction.flags:
            key, _, value = flag.partition("=")
            if key.lower() != "mount":
                self.refuse(
                    instruction.line,
                    f"{what} --{key} is not allowed; the only flag RUN may take is --mount.",
                )
            elif '"' in value:
                # BuildKit reads the options as CSV, where quotes would regroup them.
                self.refuse(
                    instruction.line,
                    f"{what} --mount options may not contain quotes; write them as "
                    "type=bind,from=stage,target=/path.",
                )
            else:
                for option in value.split(","):
                    option_key, _, option_value = option.partition("=")
                    if option_key.strip().lower() == "from":
                        self._from_flag(
                            instruction.line, f"{what} --mount", option_value, trigger=trigger
                        )

    def check_label(self, instruction: _Instruction, what: str, *, trigger: bool) -> None:
        lookup = _trigger_lookup if trigger else self._stage_lookup
        for written in _label_keys(instruction.rest, self.escape):
            try:
                key = self._expand(written, lookup)
            except _Unresolved as exc:
                self.refuse(
                    instruction.line,
                    f"{what} key `{_shown(written)}` uses {exc.why()}; write the key directly.",
                )
                continue
            if _reserved_label(key):
                self.refuse(
                    instruction.line,
                    f"{what} key `{_shown(_strip_go(key))}` is reserved (podium.* is Podium's and "
                    "com.docker.* is Docker's); choose another key.",
                )

    def check_instruction(self, instruction: _Instruction, *, trigger: bool = False) -> None:
        keyword = instruction.keyword
        what = f"ONBUILD {keyword}" if trigger else keyword
        if keyword == "ADD":
            self.check_add(instruction, what, trigger=trigger)
        elif keyword == "COPY":
            for source_stage in _flag_values(instruction.flags, "from"):
                self._from_flag(instruction.line, f"{what} --from", source_stage, trigger=trigger)
        elif keyword == "RUN":
            self.check_run(instruction, what, trigger=trigger)
        elif keyword == "LABEL":
            self.check_label(instruction, what, trigger=trigger)
        elif keyword == "VOLUME":
            self.refuse(
                instruction.line,
                f"{what} is not allowed: files written to a volume escape the build's disk "
                "cap and the scored run's read-only root, so remove it.",
            )
        elif trigger and keyword in ("FROM", "ONBUILD"):
            self.refuse(instruction.line, f"ONBUILD {keyword} is not allowed; remove it.")
        elif keyword == "ARG" and not trigger:
            self.declare_args(instruction.rest, global_scope=False)
        elif keyword == "ENV" and not trigger:
            self._set_env(instruction.rest)
        elif keyword == "ONBUILD":
            nested = _make_instruction(instruction.line, instruction.rest)
            if nested is not None:
                self.check_instruction(nested, trigger=True)


def _syntax_directive(text: str) -> tuple[int, str] | None:
    """The ``syntax`` directive as BuildKit detects it to choose a frontend: after an
    optional BOM and shebang line, ``# syntax=...`` or ``// syntax=...`` among the leading
    directive lines, or a JSON object with a "syntax" key. ``(line, frontend image)``."""
    lines = text.removeprefix("\ufeff").split("\n")
    first = 0
    if lines and lines[0].startswith("#!"):
        first = 1
    for marker in ("#", "//"):
        seen: set[str] = set()
        for number in range(first, len(lines)):
            line = lines[number].removesuffix("\r")
            match = (
                _DIRECTIVE.fullmatch("#" + line[len(marker) :]) if line.startswith(marker) else None
            )
            value = _strip_go(match.group(2)) if match else ""
            key = match.group(1).lower() if match else ""
            if not value or key not in _VALID_DIRECTIVES or key in seen:
                break
            seen.add(key)
            if key == "syntax":
                return number + 1, value.split(" ", 1)[0]
    try:
        document = json.loads(text.removeprefix("\ufeff"))
    except (ValueError, RecursionError):
        return None
    if isinstance(document, dict) and isinstance(document.get("syntax"), str):
        return 1, str(document["syntax"]).split(" ", 1)[0]
    return None


def _official_frontend(frontend: str) -> bool:
    """Whether ``frontend`` is Docker's docker/dockerfile, written with or without
    ``docker.io/`` and with any tag or digest."""
    written = frontend if _names_registry(frontend) else f"{DOCKER_HUB}/{frontend}"
    reference = _full_reference(written)
    return reference is not None and reference.repository == _OFFICIAL_FRONTEND


def _check_syntax_directive(text: str, checker: _Checker) -> None:
    found = _syntax_directive(text)
    if found is None:
        return
    line, frontend = found
    if _official_frontend(frontend):
        return
    if _entrant_image(frontend):
        checker.refuse(
            line,
            f"The syntax directive names `{_shown(frontend)}`, another entrant's image "
            f"({ENTRANT_NAMESPACE}/), which no Dockerfile may use; remove that line.",
        )
    elif _reference_problem(frontend, checker.allowed_prefixes):
        checker.refuse(
            line,
            f"The syntax directive names the frontend `{_shown(frontend)}`; only docker/dockerfile "
            "or a full reference under an allowed prefix may be used, so remove that line.",
        )


def check_dockerfile(
    text: str,
    allowed_prefixes: Sequence[str],
    build_args: Mapping[str, str] | None = None,
    *,
    platform: str = "",
    image_platforms: PlatformLookup | None = None,
) -> list[Violation]:
    """Every violation of the Dockerfile policy in ``text``, sorted by line; ``[]`` when
    the file may be built.

    ``allowed_prefixes`` are image-name prefixes written with their registry
    (``localhost/podium/``, ``docker.io/library/``, ``ghcr.io/org/``): a full reference
    is allowed when its normalized form starts with a normalized prefix. A prefix
    without a registry host matches nothing, and the entrant namespace is refused
    whatever the prefixes say. Write prefixes ending in ``/`` or ``:``
    (``docker.io/library/python`` would also allow ``python-evil``).
    ``build_args`` override the defaults of declared ``ARG``\\ s, as ``--build-arg`` does.
    With ``platform`` (``linux/arm64``) and ``image_platforms`` the FROM images are also
    checked against it (see :func:`check_platforms`). Never raises.
    """
    checker = _check(text, allowed_prefixes, build_args, platform)
    if platform and image_platforms is not None:
        checker.violations += checker.check_stage_platforms(image_platforms)
    return sorted(checker.violations, key=lambda v: v.line)


def check_platforms(
    text: str,
    allowed_prefixes: Sequence[str],
    *,
    platform: str,
    image_platforms: PlatformLookup,
    build_args: Mapping[str, str] | None = None,
) -> list[Violation]:
    """Only the platform violations of ``text``, sorted by line: each ``FROM`` image (one
    the policy allows; others are never looked up) that ``image_platforms`` says is not
    available for ``platform`` (or for the platform of its own ``--platform=`` flag;
    ``$TARGETPLATFORM`` and friends are ``platform``, a flag that needs
    ``$BUILDPLATFORM`` or an unknown variable is not checked). An image whose platforms
    the lookup cannot tell (``None``, or an exception) passes silently, and so does
    everything when ``platform`` is "" (the engine's default). Never raises.
    """
    if not platform:
        return []
    checker = _check(text, allowed_prefixes, build_args, platform)
    return sorted(checker.check_stage_platforms(image_platforms), key=lambda v: v.line)


def base_images(
    text: str,
    allowed_prefixes: Sequence[str],
    build_args: Mapping[str, str] | None = None,
) -> list[str]:
    """The images ``text``'s ``FROM`` lines build on, normalized, each once, in line order:
    only those the policy allows (earlier stages and ``scratch`` are not images).

    Every ``RUN`` of a stage runs in a container made from its ``FROM`` image, with that
    image's declared volumes: the build looks at each one before it starts. Never raises.
    """
    found: list[str] = []
    for stage in _check(text, allowed_prefixes, build_args, "").stage_images:
        reference = normalize_image(stage.ref)
        if reference not in found:
            found.append(reference)
    return found


def _check(
    text: str,
    allowed_prefixes: Sequence[str],
    build_args: Mapping[str, str] | None,
    platform: str,
) -> _Checker:
    """The policy's rules over ``text``: a checker holding the violations (in no order)
    and the allowed FROM images."""
    instructions, directives = _parse(text)
    checker = _Checker(
        allowed_prefixes=list(allowed_prefixes),
        build_args=dict(build_args or {}),
        escape=directives.escape,
        target_platform=platform,
    )
    _check_syntax_directive(text, checker)
    if not instructions:
        checker.refuse(1, "The Dockerfile is empty; it needs at least a FROM line.")
        return checker

    for instruction in instructions:
        if instruction.keyword == "FROM":
            words = _INSTRUCTION_SPACE.split(instruction.rest)
            if len(words) >= 3 and words[1].lower() == "as":
                checker.all_aliases.add(words[2].lower())

    seen_from = False
    for instruction in instructions:
        try:
            if instruction.keyword == "FROM":
                seen_from = True
                checker.check_from(instruction)
            elif not seen_from:
                if instruction.keyword == "ARG":
                    checker.declare_args(instruction.rest, global_scope=True)
            else:
                checker.check_instruction(instruction)
        except _TooMuchExpansion as exc:
            checker.refuse(instruction.line, exc.message(instruction.keyword))
            return checker
    if not seen_from:
        checker.refuse(instructions[0].line, "The Dockerfile has no FROM instruction.")
    return checker


def format_violations(violations: Sequence[Violation]) -> str:
    """One sentence listing every violation: ``"line 3: ...; line 7: ..."``."""
    parts = [f"line {v.line}: {v.message.rstrip().rstrip('.')}" for v in violations]
    return "; ".join(parts) + "." if parts else ""


# The build cache salt -------------------------------------------------------------------

CACHE_LABEL = "podium.cache"  # the label :func:`salt_build_cache` puts after every FROM
# And the line after it: no build step sees a GPU, whatever the engine's default runtime
# and whatever the base image sets (CUDA images set "all"). A scored run names its own
# GPUs in its container's environment (``scoring.host.gpus.container_gpus``), which wins.
NO_BUILD_GPU = "ENV NVIDIA_VISIBLE_DEVICES=void"
_SALT = re.compile(r"[0-9a-f]{1,128}")


def build_cache_salt(secret: str, entrant_id: int) -> str:
    """The entrant's build cache salt: HMAC-SHA256 of their user id under ``secret`` (the
    site's ``SECRET_KEY``), 64 hex digits.

    The same entrant always gets the same salt, so their own rebuilds reuse their own
    cached steps; without the secret nobody can compute another entrant's salt, and the
    salt says nothing about whose it is (no name, no id, no contest). A new ``SECRET_KEY``
    gives every entrant a new salt: every build starts once from a cold cache.
    """
    message = f"podium build cache\0entrant {entrant_id}".encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def salt_build_cache(text: str, salt: str) -> str:
    """``text`` with ``LABEL podium.cache="<salt>"`` and :data:`NO_BUILD_GPU` on lines of
    their own right after every ``FROM`` instruction, and nothing else changed: what
    Podium builds instead of the entrant's Dockerfile, so that no two entrants share a
    build cache entry and no ``RUN`` step is handed a GPU (the engine's build API cannot
    pin a step's runtime; the NVIDIA runtime reads this variable and hands out none).

    Docker's classic builder reuses a step's image ("Using cache") when a step with the
    same instruction ran on the same parent image. Without a salt, one entrant could
    write another's likely lines and learn from "Using cache" which ones the other had
    built. A ``LABEL`` changes the image config, so the image after it, and with it the
    parent of every later step in the stage, is different for each entrant: cache
    chains of two entrants meet at most at a ``FROM`` image (and its ``ONBUILD``
    triggers, which run before the label and are the same public image for everyone),
    never at a step of their own. A stage built ``FROM`` an earlier stage gets the label
    again (the same value; it changes nothing).

    The file is read as :func:`check_dockerfile` reads it (parser directives and
    comments at the top, ``ARG`` before the first ``FROM``, continuation lines, which go
    on through comment and blank lines, heredoc bodies, any letter case, ``# escape=``):
    the label goes after the last physical line of each ``FROM``. A ``FROM`` whose
    continuation runs to the end of the file gets none: nothing is built after it.

    What the entrant sees: two more steps per stage in their build log
    (``Step 2/5 : LABEL podium.cache="..."``, then the ``ENV``) and both in their image's config
    (``docker image inspect``). The salt names no one (see :func:`build_cache_salt`);
    the policy refuses ``podium.*`` labels in the entrant's own file, so they cannot set
    or change it. Raises ``ValueError`` when ``salt`` is not lowercase hex.
    """
    if not _SALT.fullmatch(salt):
        raise ValueError("a build cache salt is 1 to 128 lowercase hex digits")
    instructions, _ = _parse(text)
    lines = text.split("\n")
    for instruction in reversed(instructions):
        if instruction.keyword == "FROM" and instruction.end is not None:
            lines.insert(instruction.end, f'LABEL {CACHE_LABEL}="{salt}"\n{NO_BUILD_GPU}')
    return "\n".join(lines)
