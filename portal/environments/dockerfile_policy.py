"""The Dockerfile policy, checked before any environment build (pure: no Django, no Docker).

:func:`check_dockerfile` reads a Dockerfile the way Docker's own parser does (line
continuations and the ``# escape=`` directive, comments, heredoc bodies, case-insensitive
instructions) and returns every :class:`Violation` of the policy, in line order:

* every ``FROM`` names an image whose reference starts with an allowed prefix, an earlier
  stage (``FROM builder``) or ``scratch``; variables in it (``$NAME``, ``${NAME}``,
  ``${NAME:-default}``) are resolved from the ``ARG``\\ s before the first ``FROM`` and the
  build arguments, and a variable without a value is itself a violation;
* ``COPY --from=`` and ``RUN --mount=...,from=`` name a stage or an allowed image (they
  pull images just as ``FROM`` does);
* ``ADD`` never fetches from the network: no URL or git source, no ``--checksum``;
* a ``# syntax=`` directive may name only Docker's official Dockerfile frontend or an
  allowed image (a custom frontend would decide what every other line means);
* the file is not empty and has a ``FROM``.

The function never raises for any text: whatever Docker itself would reject is either
reported or left for the build to fail on, which costs the entrant nothing but time.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["Violation", "check_dockerfile", "format_violations", "normalize_image"]

DOCKER_HUB = "docker.io"
_OFFICIAL_FRONTEND = "docker.io/docker/dockerfile"
_MAX_NESTING = 32  # deepest ${A:-${B:-...}} nesting we follow before giving up


@dataclass(frozen=True)
class Violation:
    """One breach of the policy: ``line`` is the 1-based line where the offending
    instruction starts; ``message`` is one sentence telling the entrant what to fix."""

    line: int
    message: str


# Image references ---------------------------------------------------------------------


def _has_registry_host(ref: str) -> bool:
    """Whether the first path component of ``ref`` names a registry host (Docker's rule:
    it contains '.' or ':', is 'localhost', or has upper-case letters)."""
    first, slash, _ = ref.partition("/")
    if not slash:
        return False
    return "." in first or ":" in first or first == "localhost" or first != first.lower()


def normalize_image(ref: str) -> str:
    """The fully qualified form of an image reference, as Docker resolves it.

    ``python:3.11`` -> ``docker.io/library/python:3.11``; ``user/x`` -> ``docker.io/user/x``;
    ``ghcr.io/a/b@sha256:...`` is unchanged. A reference whose first component has no
    '.' or ':' and is not 'localhost' is on Docker Hub (``docker.io``; the legacy
    ``index.docker.io`` is folded into it). Tags and digests are kept as written; no
    ``:latest`` is added. Also used on policy prefixes: ``podium/`` -> ``docker.io/podium/``,
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


def _image_allowed(image: str, prefixes: Sequence[str]) -> bool:
    normalized = normalize_image(image)
    for prefix in prefixes:
        prefix = prefix.strip()
        if not prefix:
            continue  # an empty prefix would allow everything: never meant
        if normalized.startswith(normalize_image(prefix)):
            return True
        # A local image written without a registry (``podium/python``) also matches a
        # prefix written the same way; a reference naming a host never matches this way.
        if (
            not _has_registry_host(prefix)
            and not _has_registry_host(image)
            and image.startswith(prefix)
        ):
            return True
    return False


def _allowed_list(prefixes: Sequence[str]) -> str:
    shown = [p.strip() for p in prefixes if p.strip()]
    return ", ".join(shown) if shown else "none are configured"


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
    if instruction.keyword == "ONBUILD":
        inner = _make_instruction(instruction.line, instruction.rest)
        return inner is not None and _can_hold_heredoc(inner)
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
        logical, complete = _trim_continuation(token, directives.escape)
        if complete and logical == "":
            continue
        while not complete and index < len(lines):
            raw = lines[index]
            index += 1
            piece = _trim_newline(raw)
            directives.consider(piece)
            if _is_comment(raw) or _lstrip_go(piece) == "":
                continue
            piece, complete = _trim_continuation(piece, directives.escape)
            logical += piece
        instruction = _make_instruction(start_line, logical)
        if instruction is None:
            continue
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


class _Unresolved(Exception):
    """A variable without a value (or, with ``unsupported``, a substitution form the
    policy does not follow, like ``${NAME#prefix}``)."""

    def __init__(self, name: str, *, unsupported: bool = False) -> None:
        super().__init__(name)
        self.name = name
        self.unsupported = unsupported

    def why(self) -> str:
        if self.unsupported:
            return f"the variable `{self.name}` in a form this check cannot follow"
        return f"the variable `{self.name}`, which has no value"


Lookup = Callable[[str], str | None]


class _Expander:
    """Docker's word expansion: quotes removed, ``$NAME`` / ``${NAME}`` / ``${NAME:-x}``
    / ``${NAME-x}`` / ``${NAME:+x}`` / ``${NAME+x}`` / ``${NAME:?x}`` substituted.

    A variable without a value (or a substitution form this policy cannot check) raises
    :class:`_Unresolved`, so nothing unknown ever passes the policy."""

    def __init__(self, text: str, lookup: Lookup, escape: str) -> None:
        self.text = text
        self.pos = 0
        self.lookup = lookup
        self.escape = escape

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
        return value

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
            return value if value else alternative
        if operator == "-":
            return alternative if value is None else value
        if operator == ":+":
            return alternative if value else ""
        if operator == "+":
            return alternative if value is not None else ""
        if value is None or (operator == ":?" and not value):
            raise _Unresolved(name)
        return value


def _expand(text: str, lookup: Lookup, escape: str) -> str:
    return _Expander(text, lookup, escape).expand()


# The policy -------------------------------------------------------------------------------

_URL_SCHEME = re.compile(r"[a-z][a-z0-9+.\-]*://")
_SCP_LIKE = re.compile(r"[a-z0-9_.\-]+@[a-z0-9_.\-]+:")


def _is_remote(source: str) -> bool:
    """Whether an ADD source would be fetched (HTTP, git or ssh) rather than copied."""
    lowered = _strip_go(source).lower()
    return bool(
        _URL_SCHEME.match(lowered)
        or lowered.startswith(("git@", "github.com/"))
        or _SCP_LIKE.match(lowered)
    )


def _parse_assignments(rest: str) -> list[tuple[str, str | None]]:
    """``NAME=value`` words of ARG (or ENV): the value still unexpanded, ``None`` when absent."""
    pairs: list[tuple[str, str | None]] = []
    for word in _shell_words(rest, raw=True) or []:
        name, equals, value = word.partition("=")
        pairs.append((name, value if equals else None))
    return pairs


def _flag_value(flags: Sequence[str], name: str) -> str | None:
    for flag in flags:
        key, _, value = flag.partition("=")
        if key.lower() == name:
            return value
    return None


@dataclass
class _Checker:
    allowed_prefixes: Sequence[str]
    build_args: Mapping[str, str]
    escape: str
    violations: list[Violation] = field(default_factory=list)
    global_vars: dict[str, str | None] = field(default_factory=dict)
    stage_vars: dict[str, str | None] = field(default_factory=dict)
    stage_env_by_alias: dict[str, dict[str, str | None]] = field(default_factory=dict)
    earlier_aliases: set[str] = field(default_factory=set)
    all_aliases: set[str] = field(default_factory=set)
    stage_count: int = 0

    def refuse(self, line: int, message: str) -> None:
        self.violations.append(Violation(line, message))

    def _global_lookup(self, name: str) -> str | None:
        return self.global_vars.get(name)

    def _stage_lookup(self, name: str) -> str | None:
        if name in self.stage_vars:
            return self.stage_vars[name]
        return self.global_vars.get(name)

    def _declare(self, rest: str, target: dict[str, str | None], lookup: Lookup) -> None:
        for name, default in _parse_assignments(rest):
            if name in self.build_args:
                target[name] = self.build_args[name]
            elif default is not None:
                try:
                    target[name] = _expand(default, lookup, self.escape)
                except _Unresolved:
                    target[name] = None
            elif target is self.stage_vars and name in self.global_vars:
                target[name] = self.global_vars[name]  # re-declared global ARG
            else:
                target[name] = None

    def _set_env(self, rest: str) -> None:
        pairs = _parse_assignments(rest)
        if pairs and pairs[0][1] is None:  # legacy "ENV NAME value with spaces"
            legacy = _INSTRUCTION_SPACE.split(rest, maxsplit=1)
            pairs = [(legacy[0], legacy[1] if len(legacy) > 1 else "")]
        for name, value in pairs:
            try:
                expanded = _expand(value or "", self._stage_lookup, self.escape)
            except _Unresolved:
                self.stage_vars[name] = None
            else:
                self.stage_vars[name] = expanded

    def _image_or_stage(self, line: int, what: str, written: str) -> None:
        """Check a ``--from`` reference: a stage (any, by name or index) or an allowed image."""
        try:
            ref = _expand(written, self._stage_lookup, self.escape)
        except _Unresolved as exc:
            self.refuse(
                line,
                f"{what} uses {exc.why()}; name the stage or image directly.",
            )
            return
        if ref.isdigit() or ref.lower() in self.all_aliases:
            return
        if not _image_allowed(ref, self.allowed_prefixes):
            self.refuse(
                line,
                f"{what} names the image `{ref}`, which is not from an allowed registry "
                f"({_allowed_list(self.allowed_prefixes)}).",
            )

    def check_from(self, instruction: _Instruction) -> None:
        words = _INSTRUCTION_SPACE.split(instruction.rest) if instruction.rest else []
        alias = words[2].lower() if len(words) >= 3 and words[1].lower() == "as" else ""
        inherited: dict[str, str | None] = {}
        if not words:
            self.refuse(instruction.line, "FROM needs an image name.")
        else:
            inherited = self._check_base(instruction.line, words[0])
        self.stage_count += 1
        self.stage_vars = dict(inherited)
        if alias:
            self.earlier_aliases.add(alias)
            self.stage_env_by_alias[alias] = self.stage_vars

    def _check_base(self, line: int, written: str) -> dict[str, str | None]:
        try:
            image = _expand(written, self._global_lookup, self.escape)
        except _Unresolved as exc:
            self.refuse(
                line,
                f"FROM uses {exc.why()}; declare it with a default (ARG NAME=value) "
                "before the first FROM.",
            )
            return {}
        if not image:
            self.refuse(line, f"FROM `{written}` names no image.")
            return {}
        if image.lower() == "scratch":
            return {}
        if image.lower() in self.earlier_aliases:
            return dict(self.stage_env_by_alias.get(image.lower(), {}))
        if not _image_allowed(image, self.allowed_prefixes):
            shown = f"`{image}`" if image == written else f"`{written}` (that is, `{image}`)"
            self.refuse(
                line,
                f"FROM names {shown}, which is not from an allowed registry "
                f"({_allowed_list(self.allowed_prefixes)}).",
            )
        return {}

    def check_add(self, instruction: _Instruction, what: str = "ADD") -> None:
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
        for source in sources:
            try:
                expanded = _expand(source, self._stage_lookup, self.escape)
            except _Unresolved as exc:
                self.refuse(
                    instruction.line,
                    f"{what} source `{source}` uses {exc.why()}; write the local path directly.",
                )
                continue
            if _is_remote(source) or _is_remote(expanded):
                self.refuse(
                    instruction.line,
                    f"{what} cannot fetch `{expanded}` from the network; COPY a local file "
                    "or download it in a RUN step instead.",
                )

    def check_instruction(self, instruction: _Instruction, *, inner: bool = False) -> None:
        keyword = instruction.keyword
        label = f"ONBUILD {keyword}" if inner else keyword
        if keyword == "ADD":
            self.check_add(instruction, label)
        elif keyword == "COPY":
            source_stage = _flag_value(instruction.flags, "from")
            if source_stage is not None:
                self._image_or_stage(instruction.line, f"{label} --from", source_stage)
        elif keyword == "RUN":
            for flag in instruction.flags:
                key, _, value = flag.partition("=")
                if key.lower() != "mount":
                    continue
                for option in value.split(","):
                    option_key, _, option_value = option.partition("=")
                    if option_key.strip().lower() == "from":
                        self._image_or_stage(instruction.line, f"{label} --mount", option_value)
        elif keyword == "ARG" and not inner:
            self._declare(instruction.rest, self.stage_vars, self._stage_lookup)
        elif keyword == "ENV" and not inner:
            self._set_env(instruction.rest)
        elif keyword == "ONBUILD" and not inner:
            nested = _make_instruction(instruction.line, instruction.rest)
            if nested is not None:
                self.check_instruction(nested, inner=True)


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


def _check_syntax_directive(text: str, checker: _Checker) -> None:
    found = _syntax_directive(text)
    if found is None:
        return
    line, frontend = found
    normalized = normalize_image(frontend)
    official = normalized == _OFFICIAL_FRONTEND or normalized.startswith(
        (_OFFICIAL_FRONTEND + ":", _OFFICIAL_FRONTEND + "@")
    )
    if not official and not _image_allowed(frontend, checker.allowed_prefixes):
        checker.refuse(
            line,
            f"The syntax directive names the frontend `{frontend}`; only "
            "docker/dockerfile or an allowed image may be used, so remove that line.",
        )


def check_dockerfile(
    text: str, allowed_prefixes: Sequence[str], build_args: Mapping[str, str] | None = None
) -> list[Violation]:
    """Every violation of the Dockerfile policy in ``text``, sorted by line; ``[]`` when
    the file may be built.

    ``allowed_prefixes`` are image-name prefixes (``podium/``, ``docker.io/library/``,
    ``ghcr.io/org/``): an image is allowed when its normalized reference starts with a
    normalized prefix, or, for a prefix and a reference both written without a registry
    host, when the reference starts with the prefix as written. Write prefixes ending in
    ``/`` or ``:`` (``docker.io/library/python`` would also allow ``python-evil``).
    ``build_args`` override the defaults of declared ``ARG``\\ s, as ``--build-arg`` does.
    Never raises.
    """
    instructions, directives = _parse(text)
    checker = _Checker(
        allowed_prefixes=list(allowed_prefixes),
        build_args=dict(build_args or {}),
        escape=directives.escape,
    )
    _check_syntax_directive(text, checker)
    if not instructions:
        checker.refuse(1, "The Dockerfile is empty; it needs at least a FROM line.")
        return sorted(checker.violations, key=lambda v: v.line)

    for instruction in instructions:
        if instruction.keyword == "FROM":
            words = _INSTRUCTION_SPACE.split(instruction.rest)
            if len(words) >= 3 and words[1].lower() == "as":
                checker.all_aliases.add(words[2].lower())

    seen_from = False
    for instruction in instructions:
        if instruction.keyword == "FROM":
            seen_from = True
            checker.check_from(instruction)
        elif not seen_from:
            if instruction.keyword == "ARG":
                checker._declare(instruction.rest, checker.global_vars, checker._global_lookup)
        else:
            checker.check_instruction(instruction)
    if not seen_from:
        checker.refuse(instructions[0].line, "The Dockerfile has no FROM instruction.")
    return sorted(checker.violations, key=lambda v: v.line)


def format_violations(violations: Sequence[Violation]) -> str:
    """One sentence listing every violation: ``"line 3: ...; line 7: ..."``."""
    parts = [f"line {v.line}: {v.message.rstrip().rstrip('.')}" for v in violations]
    return "; ".join(parts) + "." if parts else ""
