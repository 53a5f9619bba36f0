"""Lint Apptainer definition files: ``python -m containers.recipetools.defcheck containers/*.def``.

Every problem is printed as ``file:line: CODE message`` and makes the exit status 1 (2 for
usage errors such as an unreadable file). Checks:

========  ===========================================================================
DEF001    unknown section name (``%postt``): some parsers silently treat it as a comment
DEF002    unknown header key
DEF003    header syntax error, or a key the bootstrap agent needs is missing
DEF004    base image not pinned (no tag, ``latest``, a codename or a bare major version)
DEF005    ``%files`` source does not exist (relative to ``--context``, default: cwd)
DEF006    ``shellcheck`` finding in a shell section (%setup %post %test %runscript ...)
DEF007    ``{{ NAME }}`` build argument with no default in ``%arguments``
DEF008    duplicate section (Apptainer concatenates them; merge them) or app section w/o app
DEF010    hvdcore policy: required section missing (%labels %help %environment %runscript %test)
DEF011    hvdcore policy: required label missing (version, source)
DEF012    hvdcore policy: %runscript must pass its arguments to ``hvdcorerun``
DEF013    hvdcore policy: %test must run ``hvdcorerun --check-build --require ...`` and a
          2-rank allreduce (``-np 2``)
========  ===========================================================================

The hvdcore policy checks (DEF010-DEF013) apply to the project's own recipes; ``--generic``
turns them off for other definition files.

Example::

    $ python -m containers.recipetools.defcheck containers/*.def
    containers/bad.def:12: DEF001 unknown section '%postt' (did you mean '%post'?)
"""

# Over 400 lines on purpose: one rule per DEF code, each small; they share the parsed definition
# and the report format.

from __future__ import annotations

import argparse
import difflib
import glob
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .deffile import PLACEHOLDER, Definition, DefinitionError, Stage, parse, substitute

__all__ = [
    "Problem",
    "SECTIONS",
    "APP_SECTIONS",
    "HEADER_KEYS",
    "SHELL_SECTIONS",
    "check_definition",
    "check_file",
    "is_pinned",
    "main",
]

SECTIONS = frozenset(
    {"help", "setup", "files", "labels", "environment", "pre", "post", "runscript", "test",
     "startscript", "arguments"}
)  # fmt: skip
APP_SECTIONS = frozenset(
    {"appinstall", "applabels", "appfiles", "appenv", "apptest", "apphelp", "apprun", "appstart"}
)
HEADER_KEYS = frozenset(
    {"bootstrap", "from", "includecmd", "mirrorurl", "updateurl", "osversion", "include",
     "library", "registry", "namespace", "stage", "product", "user", "regcode", "productpgp",
     "registerurl", "modules", "fingerprints", "confurl", "setopt"}
)  # fmt: skip
_NUMBERED_HEADER = re.compile(r"^otherurl\d+$")
#: Bootstrap agent -> header keys it requires.
AGENTS: dict[str, tuple[str, ...]] = {
    "docker": ("from",),
    "docker-daemon": ("from",),
    "docker-archive": ("from",),
    "oci": ("from",),
    "oci-archive": ("from",),
    "library": ("from",),
    "oras": ("from",),
    "shub": ("from",),
    "localimage": ("from",),
    "debootstrap": ("osversion", "mirrorurl"),
    "yum": ("mirrorurl",),
    "dnf": ("mirrorurl",),
    "zypper": ("mirrorurl",),
    "busybox": ("mirrorurl",),
    "arch": (),
    "scratch": (),
}
#: Agents whose ``From`` names an image in a registry (so the reference must be pinned).
REGISTRY_AGENTS = frozenset({"docker", "library", "oras", "shub"})
#: Sections run by a shell: section name -> shell used when the section names none.
SHELL_SECTIONS = {
    "setup": "sh", "post": "sh", "test": "sh", "runscript": "sh", "startscript": "sh",
    "environment": "sh", "appinstall": "sh", "apprun": "sh", "apptest": "sh", "appenv": "sh",
    "appstart": "sh",
}  # fmt: skip
#: shellcheck codes that do not apply to sourced environment files (variables look unused).
_ENV_EXCLUDES = ("SC2034",)
_MOVING_TAGS = frozenset(
    {"latest", "stable", "testing", "unstable", "sid", "edge", "rolling", "nightly", "devel",
     "main", "master", "current", "lts", "slim"}
)  # fmt: skip
_SHELLS = {"sh", "bash", "dash", "ksh"}

REQUIRED_SECTIONS = ("labels", "help", "environment", "runscript", "test")
REQUIRED_LABELS = ("version", "source")


@dataclass(frozen=True, order=True)
class Problem:
    """One finding: ``path:line: code message``."""

    path: str
    line: int
    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.code} {self.message}"


def is_pinned(ref: str) -> tuple[bool, str]:
    """Whether an image reference is pinned, and why not.

    Pinned means a digest (``@sha256:...``) or a tag that names one release: it contains a
    version with a dot (``12.11``, ``24.12-py3``) or a date (``bookworm-20250520``). Unpinned:
    no tag (``:latest``), a moving alias, a bare codename (``bookworm``) or a bare major (``12``).

    >>> is_pinned("debian:bookworm-20250520-slim")[0], is_pinned("debian:bookworm")[0]
    (True, False)
    """
    ref = ref.split("://", 1)[-1]
    if re.search(r"@sha256:[0-9a-f]{64}$", ref):
        return True, ""
    name, tag = ref, ""
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        name, tag = ref.rsplit(":", 1)
    if not tag:
        return False, f"'{ref}' has no tag, so it means ':latest' and changes with every push"
    low = tag.lower()
    if low in _MOVING_TAGS:
        return False, f"tag '{tag}' of '{name}' is a moving alias"
    if re.fullmatch(r"\d+", low):
        return False, f"tag '{tag}' of '{name}' is a bare major version that moves"
    if re.search(r"\d+\.\d+", low) or re.search(r"(?<!\d)(19|20)\d{6}(?!\d)", low):
        return True, ""
    return False, (
        f"tag '{tag}' of '{name}' does not name one release (use a version like 12.11, a dated "
        "tag like bookworm-20250520, or a @sha256 digest)"
    )


def _header_problems(defn: Definition, stage: Stage, index: int) -> list[Problem]:
    path = defn.path
    out: list[Problem] = []
    for entry in stage.header:
        if entry.key not in HEADER_KEYS and not _NUMBERED_HEADER.match(entry.key):
            near = difflib.get_close_matches(entry.key, sorted(HEADER_KEYS), n=1)
            hint = f" (did you mean '{near[0].capitalize()}'?)" if near else ""
            out.append(
                Problem(path, entry.line, "DEF002", f"unknown header key '{entry.name}'{hint}")
            )
    boot = stage.entry("bootstrap")
    if boot is None:
        out.append(
            Problem(
                path,
                stage.line,
                "DEF003",
                f"stage {index + 1} has no 'Bootstrap:' header (e.g. 'Bootstrap: docker')",
            )
        )
        return out
    agent = boot.value.lower()
    if agent not in AGENTS:
        out.append(
            Problem(
                path,
                boot.line,
                "DEF003",
                f"unknown bootstrap agent '{boot.value}' (known: {', '.join(sorted(AGENTS))})",
            )
        )
        return out
    for key in AGENTS[agent]:
        if not stage.get(key):
            out.append(
                Problem(
                    path,
                    boot.line,
                    "DEF003",
                    f"'Bootstrap: {boot.value}' needs a '{key}:' header key",
                )
            )
    frm = stage.entry("from")
    if agent in REGISTRY_AGENTS and frm is not None and frm.value:
        value, _ = substitute(frm.value, defn.arguments())
        ok, why = is_pinned(value)
        if not ok:
            out.append(Problem(path, frm.line, "DEF004", f"unpinned base image: {why}"))
    if agent == "debootstrap":
        osv = stage.entry("osversion")
        if osv is not None and osv.value.lower() in {"stable", "testing", "unstable", "sid"}:
            out.append(
                Problem(
                    path,
                    osv.line,
                    "DEF004",
                    f"unpinned base: OSVersion '{osv.value}' moves; name a release codename",
                )
            )
    return out


def _section_problems(defn: Definition, stage: Stage) -> list[Problem]:
    path = defn.path
    out: list[Problem] = []
    seen: dict[str, int] = {}
    for sec in stage.sections:
        if sec.name in APP_SECTIONS:
            if not sec.args.split():
                out.append(Problem(path, sec.line, "DEF008", f"'%{sec.name}' needs an app name"))
            key = f"{sec.name} {sec.args.split()[0] if sec.args.split() else ''}"
        elif sec.name in SECTIONS:
            key = sec.name
        else:
            known = sorted(SECTIONS | APP_SECTIONS)
            near = difflib.get_close_matches(sec.name, known, n=1)
            hint = f" (did you mean '%{near[0]}'?)" if near else ""
            out.append(
                Problem(
                    path,
                    sec.line,
                    "DEF001",
                    f"unknown section '%{sec.name}'{hint}: it would not run",
                )
            )
            continue
        if sec.name != "files" and key in seen:
            out.append(
                Problem(
                    path,
                    sec.line,
                    "DEF008",
                    f"duplicate section '%{key}' (first at line {seen[key]}): "
                    "Apptainer concatenates them; merge them into one",
                )
            )
        seen.setdefault(key, sec.line)
    return out


def _placeholder_problems(defn: Definition, build_args: dict[str, str]) -> list[Problem]:
    values = {**defn.arguments(), **build_args}
    out: list[Problem] = []
    for stage in defn.stages:
        for entry in stage.header:
            for name in PLACEHOLDER.findall(entry.value):
                if name not in values:
                    out.append(
                        Problem(
                            defn.path,
                            entry.line,
                            "DEF007",
                            f"build argument '{name}' has no default in %arguments",
                        )
                    )
        for sec in stage.sections:
            if sec.name == "arguments":
                continue
            for lineno, text in sec.lines():
                for name in PLACEHOLDER.findall(text):
                    if name not in values:
                        out.append(
                            Problem(
                                defn.path,
                                lineno,
                                "DEF007",
                                f"build argument '{name}' has no default in %arguments",
                            )
                        )
    return out


def _files_problems(defn: Definition, stage: Stage, context: Path) -> list[Problem]:
    out: list[Problem] = []
    values = defn.arguments()
    for entry in stage.files():
        if entry.from_stage is not None:
            continue  # the source lives in another stage's image
        src, _ = substitute(entry.src, values)
        full = src if os.path.isabs(src) else str(context / src)
        if not glob.glob(full):
            out.append(
                Problem(
                    defn.path,
                    entry.line,
                    "DEF005",
                    f"%files source '{src}' not found (looked for {full}; sources are "
                    "relative to the directory 'apptainer build' runs in)",
                )
            )
    return out


def _shellcheck(defn: Definition, stage: Stage, severity: str) -> list[Problem]:
    exe = shutil.which("shellcheck")
    if exe is None:
        return [
            Problem(
                defn.path,
                1,
                "DEF006",
                "shellcheck not found: install it (Debian package 'shellcheck') to lint "
                "shell sections",
            )
        ]
    out: list[Problem] = []
    values = defn.arguments()
    for sec in stage.sections:
        if sec.name not in SHELL_SECTIONS or not sec.body:
            continue
        shell = sec.shell() or SHELL_SECTIONS[sec.name]
        if shell not in _SHELLS:
            continue  # e.g. '%post -c /usr/bin/python3': not a shell script
        text, _ = substitute("\n".join(sec.body) + "\n", values)
        cmd = [exe, "-s", shell, "-f", "json1", "-S", severity]
        if sec.name in {"environment", "appenv"}:
            cmd += ["-e", ",".join(_ENV_EXCLUDES)]
        cmd.append("-")
        try:
            proc = subprocess.run(cmd, input=text, capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            out.append(
                Problem(defn.path, sec.line, "DEF006", f"shellcheck timed out on %{sec.name}")
            )
            continue
        if proc.returncode not in (0, 1):
            out.append(
                Problem(
                    defn.path,
                    sec.line,
                    "DEF006",
                    f"shellcheck failed on %{sec.name}: {proc.stderr.strip()}",
                )
            )
            continue
        for comment in json.loads(proc.stdout or '{"comments": []}')["comments"]:
            line = sec.line + int(comment["line"])
            out.append(
                Problem(
                    defn.path,
                    line,
                    "DEF006",
                    f"%{sec.name}: SC{comment['code']} ({comment['level']}): {comment['message']}",
                )
            )
    return out


def _policy_problems(defn: Definition, stage: Stage) -> list[Problem]:
    path = defn.path
    out: list[Problem] = []
    anchor = stage.line
    for name in REQUIRED_SECTIONS:
        if stage.section(name) is None:
            out.append(Problem(path, anchor, "DEF010", f"hvdcore recipes need a '%{name}' section"))
    labels = stage.section("labels")
    if labels is not None:
        keys = {
            t.split()[0].lower()
            for _, t in labels.lines()
            if t.strip() and not t.strip().startswith("#")
        }
        for name in REQUIRED_LABELS:
            if name not in keys:
                out.append(Problem(path, labels.line, "DEF011", f"%labels needs a '{name}' label"))
    run = stage.section("runscript")
    if run is not None and not re.search(r'hvdcorerun\b.*"\$@"', run.text):
        out.append(
            Problem(
                path,
                run.line,
                "DEF012",
                '%runscript must pass its arguments on: exec hvdcorerun "$@"',
            )
        )
    test = stage.section("test")
    if test is not None:
        body = test.text
        if not re.search(r"hvdcorerun\b[^\n]*--check-build[^\n]*--require\b", body):
            out.append(
                Problem(
                    path,
                    test.line,
                    "DEF013",
                    "%test must run 'hvdcorerun --check-build --require <features>'",
                )
            )
        if not re.search(r"hvdcorerun\b[^\n]*-np\s+2\b", body):
            out.append(
                Problem(
                    path,
                    test.line,
                    "DEF013",
                    "%test must run a 2-rank allreduce ('hvdcorerun -np 2 ...')",
                )
            )
    return out


def check_definition(
    defn: Definition,
    context: str | Path = ".",
    *,
    policy: bool = True,
    shellcheck: bool = True,
    severity: str = "style",
    build_args: dict[str, str] | None = None,
) -> list[Problem]:
    """All problems in a parsed definition, sorted by line."""
    ctx = Path(context)
    problems = [Problem(defn.path, line, "DEF003", msg) for line, msg in defn.syntax_errors]
    problems += _placeholder_problems(defn, build_args or {})
    for index, stage in enumerate(defn.stages):
        problems += _header_problems(defn, stage, index)
        problems += _section_problems(defn, stage)
        problems += _files_problems(defn, stage, ctx)
        if shellcheck:
            problems += _shellcheck(defn, stage, severity)
    if policy:
        problems += _policy_problems(defn, defn.final)
    return sorted(set(problems))


def check_file(path: str | Path, context: str | Path = ".", **kwargs: object) -> list[Problem]:
    """Parse and check one file (see :func:`check_definition` for the options)."""
    return check_definition(parse(path), context, **kwargs)  # type: ignore[arg-type]


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    ap = argparse.ArgumentParser(
        prog="python -m containers.recipetools.defcheck",
        description="Lint Apptainer definition files (file:line: CODE message per problem).",
    )
    ap.add_argument("files", nargs="+", help="definition files")
    ap.add_argument(
        "--context",
        default=".",
        help="directory %%files sources are relative to (default: current directory)",
    )
    ap.add_argument(
        "--generic",
        action="store_true",
        help="skip the hvdcore recipe policy (required sections, labels, %%test)",
    )
    ap.add_argument("--no-shellcheck", action="store_true", help="do not run shellcheck")
    ap.add_argument(
        "--severity",
        default="style",
        choices=["error", "warning", "info", "style"],
        help="lowest shellcheck severity reported (default: style)",
    )
    args = ap.parse_args(argv)
    total = 0
    for name in args.files:
        try:
            problems = check_file(
                name,
                args.context,
                policy=not args.generic,
                shellcheck=not args.no_shellcheck,
                severity=args.severity,
            )
        except DefinitionError as exc:
            print(f"{exc}", file=sys.stderr)
            return 2
        for problem in problems:
            print(problem)
        total += len(problems)
    if total:
        print(f"defcheck: {total} problem(s) in {len(args.files)} file(s)", file=sys.stderr)
        return 1
    print(f"defcheck: {len(args.files)} file(s) OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
