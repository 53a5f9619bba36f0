"""Parse Apptainer definition files into header entries and sections, keeping line numbers.

The parser follows Apptainer's own rules closely enough to report *where* a recipe is wrong:

- a new stage starts at every line that begins with ``Bootstrap:`` (multi-stage builds);
- the header is every line of a stage before the first line whose first word starts with ``%``;
  header lines are ``Key: value`` (case-insensitive keys, ``#`` comments, ``\\`` continuation);
- every line whose first word starts with ``%`` opens a section; the rest of that line is the
  section's arguments (``%post -c /bin/bash``, ``%files from build``, ``%apprun NAME``);
- ``{{ NAME }}`` placeholders are build arguments with defaults in ``%arguments``
  (``NAME=value`` lines) that ``apptainer build --build-arg NAME=value`` overrides.

Unlike some parsers, nothing is silently dropped: an unknown section such as ``%postt`` is kept
as a section with that name so that :mod:`containers.recipetools.defcheck` can reject it.

Example::

    >>> from containers.recipetools.deffile import parse_text
    >>> d = parse_text("Bootstrap: docker\\nFrom: debian:12.11\\n%post\\n    echo hi\\n")
    >>> d.stages[0].get("from"), d.stages[0].sections[0].name, d.stages[0].sections[0].line
    ('debian:12.11', 'post', 3)
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from hvdcore.errors import HvdcoreError

__all__ = [
    "DefinitionError",
    "HeaderEntry",
    "Section",
    "FileEntry",
    "Stage",
    "Definition",
    "parse",
    "parse_text",
    "substitute",
    "PLACEHOLDER",
]

PLACEHOLDER = re.compile(r"\{\{\s*(\w+)\s*\}\}")
_BOOTSTRAP_LINE = re.compile(r"^bootstrap\s*:", re.IGNORECASE)


class DefinitionError(HvdcoreError):
    """A definition file cannot be parsed or built; the message starts with ``file:line:``."""


def _split(text: str) -> list[str]:
    """Shell-like word split; unbalanced quotes fall back to plain whitespace splitting."""
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


@dataclass(frozen=True)
class HeaderEntry:
    """One ``Key: value`` header line (``key`` is lower-case, ``name`` as written)."""

    key: str
    name: str
    value: str
    line: int


@dataclass
class Section:
    """One ``%name args`` section; ``body[i]`` is file line ``line + 1 + i``."""

    name: str
    args: str
    line: int
    body: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The section body as one string (no trailing blank lines)."""
        return "\n".join(self.body).rstrip() + "\n"

    def lines(self) -> list[tuple[int, str]]:
        """``(file line number, text)`` for each body line."""
        return [(self.line + 1 + i, text) for i, text in enumerate(self.body)]

    def shell(self) -> str | None:
        """The interpreter a shell section runs under (``-c /bin/bash`` -> ``bash``), or None."""
        words = _split(self.args)
        if "-c" in words and words.index("-c") + 1 < len(words):
            return Path(words[words.index("-c") + 1]).name
        return None


@dataclass(frozen=True)
class FileEntry:
    """One ``%files`` line: copy ``src`` (host path or glob) to ``dst`` in the image."""

    src: str
    dst: str
    line: int
    from_stage: str | None


@dataclass
class Stage:
    """One build stage: its header and its sections in file order."""

    header: list[HeaderEntry] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
    line: int = 1

    def get(self, key: str) -> str | None:
        """Value of header ``key`` (case-insensitive), or None."""
        entry = self.entry(key)
        return entry.value if entry else None

    def entry(self, key: str) -> HeaderEntry | None:
        """The header entry for ``key`` (case-insensitive), or None."""
        for item in self.header:
            if item.key == key.lower():
                return item
        return None

    def section(self, name: str) -> Section | None:
        """The first section called ``name``, or None."""
        for sec in self.sections:
            if sec.name == name:
                return sec
        return None

    def files(self) -> list[FileEntry]:
        """All ``%files`` entries of this stage, in order."""
        out: list[FileEntry] = []
        for sec in self.sections:
            if sec.name != "files":
                continue
            args = sec.args.split()
            from_stage = args[1] if len(args) == 2 and args[0].lower() == "from" else None
            for lineno, text in sec.lines():
                stripped = text.strip()
                if not stripped or stripped.startswith("#"):
                    continue
                words = _split(stripped)
                src = words[0]
                dst = words[1] if len(words) > 1 else src
                out.append(FileEntry(src, dst, lineno, from_stage))
        return out

    def arguments(self) -> dict[str, str]:
        """Defaults declared in ``%arguments`` (``NAME=value`` lines)."""
        out: dict[str, str] = {}
        for sec in self.sections:
            if sec.name != "arguments":
                continue
            for _, text in sec.lines():
                stripped = text.strip()
                if stripped and not stripped.startswith("#") and "=" in stripped:
                    name, value = stripped.split("=", 1)
                    out[name.strip()] = value.strip()
        return out


@dataclass
class Definition:
    """A parsed definition file: one or more stages, plus header syntax errors found."""

    path: str
    stages: list[Stage]
    syntax_errors: list[tuple[int, str]] = field(default_factory=list)

    @property
    def final(self) -> Stage:
        """The last stage: the one that becomes the image."""
        return self.stages[-1]

    def arguments(self) -> dict[str, str]:
        """Build-argument defaults from every stage's ``%arguments``."""
        out: dict[str, str] = {}
        for stage in self.stages:
            out.update(stage.arguments())
        return out


def substitute(text: str, values: dict[str, str]) -> tuple[str, list[str]]:
    """Replace ``{{ NAME }}`` placeholders; returns the text and the names that had no value."""
    missing: list[str] = []

    def repl(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in values:
            return values[name]
        missing.append(name)
        return match.group(0)

    return PLACEHOLDER.sub(repl, text), missing


def _parse_header(
    stage: Stage, lines: list[tuple[int, str]], errors: list[tuple[int, str]]
) -> None:
    cont_key: HeaderEntry | None = None
    for lineno, raw in lines:
        line = raw.strip()
        if not line or line.startswith("#"):
            cont_key = None
            continue
        line = line.split("#", 1)[0].rstrip()
        if cont_key is not None:
            value = cont_key.value + line
            entry = HeaderEntry(
                cont_key.key, cont_key.name, value.rstrip("\\").rstrip(), cont_key.line
            )
            stage.header[-1] = entry
            cont_key = entry if line.endswith("\\") else None
            continue
        if ":" not in line:
            errors.append((lineno, f"header line {line!r} is not 'Key: value' (missing ':')"))
            continue
        name, value = line.split(":", 1)
        name = name.strip()
        value = value.strip()
        if not name or len(name.split()) > 1:
            errors.append((lineno, f"header line {line!r} is not 'Key: value' (a key is one word)"))
            continue
        entry = HeaderEntry(name.lower(), name, value.rstrip("\\").rstrip(), lineno)
        stage.header.append(entry)
        cont_key = entry if value.endswith("\\") else None


def parse_text(text: str, path: str = "<string>") -> Definition:
    """Parse definition-file text (``path`` is only used in messages)."""
    stages: list[Stage] = []
    errors: list[tuple[int, str]] = []
    stage: Stage | None = None
    header_lines: list[tuple[int, str]] = []
    section: Section | None = None
    lines = text.splitlines()
    for lineno, raw in enumerate(lines, start=1):
        if _BOOTSTRAP_LINE.match(raw) or stage is None:
            if stage is not None:
                _parse_header(stage, header_lines, errors)
                stages.append(stage)
            stage = Stage(line=lineno)
            header_lines = []
            section = None
        words = raw.split()
        if words and words[0].startswith("%"):
            head, _, args = raw.strip().partition(" ")
            section = Section(name=head[1:].lower(), args=args.strip(), line=lineno)
            stage.sections.append(section)
        elif section is not None:
            section.body.append(raw)
        else:
            header_lines.append((lineno, raw))
    if stage is not None:
        _parse_header(stage, header_lines, errors)
        stages.append(stage)
    for st in stages:
        for sec in st.sections:
            while sec.body and not sec.body[-1].strip():
                sec.body.pop()
    stages = [s for s in stages if s.header or s.sections]
    if not stages:
        errors.append((1, "empty definition file: no header and no sections"))
        stages = [Stage()]
    return Definition(path=path, stages=stages, syntax_errors=errors)


def parse(path: str | Path) -> Definition:
    """Parse the definition file at ``path``."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise DefinitionError(f"{p}: cannot read definition file: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise DefinitionError(f"{p}: not UTF-8 text ({exc.reason})") from exc
    return parse_text(text, str(path))
