"""The manual's two journeys, run: the admins' EasyBuild page, then the users' getting-started page
on the module it installed.

``docs/admins/easybuild.md`` and ``docs/users/getting-started.md`` are written so that a person
can type them from top to bottom. This test does that, on what CI builds: the SYSTEM-toolchain
easyconfig installed by a real ``eb`` into a temporary prefix, its Lmod module, 2 MPI ranks on
localhost, CPU only. A documented command that breaks fails this test, naming the page, the block
and its line.

The convention (the pages follow it; :func:`extract_blocks` enforces it):

- A ```` ```bash ```` block is run. All bash blocks of a page run in ONE ``bash`` session
  (``set -eo pipefail``, Lmod's ``module`` function, a fresh temporary working directory that is
  also ``$HOME``), so variables and ``cd`` carry over from block to block.
- A ```` ```python ```` block whose fence is directly preceded by the MyST comment line
  ``% journey: file NAME`` is written to ``NAME``, relative to the session's directory at that
  point. Any other python block is run with ``python`` as the session finds it at that point.
- A block directly preceded by ``% journey: skip <what it needs that CI lacks>`` is not run. The
  reason is mandatory (``% journey: skip needs a GPU node``).
- Blocks in any other language (``text``, ``console``, ``ini``, ``lua``, ...) are shown, never run.
  A fence without a language, and the ambiguous ``sh``/``shell``/``py``/``python3``, are errors:
  say ``bash``/``python`` (run) or ``text``/``console`` (shown).
- Nested blocks count too: inside ``:::`` and backtick directives (``{note}``, ...), and
  ``{code-block} LANG`` is a block of ``LANG``.

The prelude stands in for what a site has and CI does not; the pages say nothing about it:

- admins' page: the module ``Python/3.11``, an Lmod *external* module that puts the test's
  virtualenv (torch, mpi4py, numpy, setuptools, wheel) on ``PATH`` (its EasyBuild metadata is
  NOT given here: the pages write it and pass ``--external-modules-metadata`` themselves, as an
  admin who types them must; :data:`PAGE_GIVES` lists what the prelude leaves to them); an
  ``eb`` on ``PATH`` that runs the virtualenv's EasyBuild (the site's ``module load EasyBuild``);
  a copy of this checkout's working tree as ``hvdcore/`` in the working directory (the checkout
  the page starts from); ``$HOME`` is the (writable, temporary) working directory.
- users' page: ``module use`` of every directory on the admins' session's final ``MODULEPATH``
  (the external Python module and the tree ``eb`` installed), so a plain ``module load hvdcore``
  loads what the admins' journey built.

When this process is root and the unprivileged user ``nobody`` can run the virtualenv (see
``lmod_shell.drop_root_command``), both sessions run as ``nobody``: EasyBuild should not build
as root. Otherwise they run as the current user (as root, the admins' prelude sets
``EASYBUILD_ALLOW_USE_AS_ROOT_AND_ACCEPT_CONSEQUENCES``, as a site's EasyBuild configuration
would have to).

Every block has a deadline (``eb`` blocks longer), and the session's whole process group is
killed at the end or on a timeout, so nothing hangs or lingers. ``HVDCORE_DOCS_DIR`` reads the
pages from another directory (a copy with a deliberately broken command shows the test failing);
``HVDCORE_JOURNEY_KEEP=1`` keeps the sessions' directories (their scripts in ``.journey/``).
"""

from __future__ import annotations

import os
import pwd
import queue
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from lmod_shell import (
    EB,
    LMOD_INIT,
    ROOT,
    build_sdist_module,
    clean_env,
    drop_root_command,
    eb_workdir,
    require_eb,
    require_lmod,
    require_venv,
)

DOCS = Path(os.environ.get("HVDCORE_DOCS_DIR") or ROOT / "docs")
ADMIN_PAGE = "admins/easybuild.md"
USER_PAGE = "users/getting-started.md"

PYSHORT = f"{sys.version_info[0]}.{sys.version_info[1]}"
PYFULL = ".".join(map(str, sys.version_info[:3]))
#: the checkout's version, the one its eb install (and module) carries: a development one on main
VERSION = build_sdist_module().project_version()

#: Seconds a block may take: a block that runs ``eb`` installs (the sanity check imports torch).
BLOCK_TIMEOUT_S = 180.0
EB_BLOCK_TIMEOUT_S = 480.0
PRELUDE_TIMEOUT_S = 60.0
EPILOGUE_TIMEOUT_S = 120.0

RUN_LANGUAGES = ("bash", "python")
AMBIGUOUS_LANGUAGES = ("sh", "shell", "zsh", "py", "python3", "py3")
CODE_DIRECTIVES = ("{code-block}", "{code}", "{sourcecode}")
MARK = re.compile(r"^\s*%\s*journey\b(?P<rest>.*)$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
SAFE_NAME = re.compile(r"[\w.\-/]+")


class JourneyError(ValueError):
    """A page breaks the journey convention (the message names the page and line)."""


@dataclass(frozen=True)
class Block:
    """One fenced block of a page."""

    number: int  # 1-based, in page order, among all fenced code blocks
    line: int  # 1-based line of the opening fence
    language: str
    text: str
    action: str  # "run", "file", "skip" or "show"
    arg: str = ""  # the file name (file) or the reason (skip)


# ------------------------------------------------------------------------------ block extraction

def _mark(line: str, page: str, lineno: int) -> tuple[str, str]:
    """(action, argument) of a ``% journey: ...`` line."""
    rest = MARK.match(line).group("rest")  # type: ignore[union-attr]
    m = re.match(r"\s*:\s*(?P<verb>\S*)\s*(?P<arg>.*?)\s*$", rest)
    if m is None:
        raise JourneyError(f"{page}:{lineno}: write '% journey: skip <reason>' or "
                           f"'% journey: file <name>', not {line.strip()!r}")
    verb, arg = m.group("verb"), m.group("arg")
    if verb == "skip":
        if not arg:
            raise JourneyError(f"{page}:{lineno}: '% journey: skip' needs a reason saying what "
                               "the block needs that CI lacks (e.g. 'needs a GPU node')")
        return "skip", arg
    if verb == "file":
        if not arg or " " in arg or not SAFE_NAME.fullmatch(arg) or arg.startswith("/") \
                or ".." in arg.split("/"):
            raise JourneyError(f"{page}:{lineno}: '% journey: file' needs one relative file "
                               f"name (letters, digits, . - _ /), got {arg!r}")
        return "file", arg
    raise JourneyError(f"{page}:{lineno}: unknown journey mark {verb!r}: use 'skip <reason>' or "
                       "'file <name>'")


def _scan(lines: list[str], first_lineno: int, page: str, out: list[dict]) -> None:
    """Append the fenced blocks of ``lines`` (line ``first_lineno`` is ``lines[0]``) to ``out``."""
    i = 0
    pending: tuple[str, str, int] | None = None  # a journey mark waiting for its fence
    while i < len(lines):
        line, lineno = lines[i], first_lineno + i
        if MARK.match(line):
            if pending is not None:
                raise JourneyError(f"{page}:{pending[2]}: journey mark not directly followed by "
                                   "a fenced block")
            action, arg = _mark(line, page, lineno)
            pending = (action, arg, lineno)
            i += 1
            continue
        fence = FENCE.match(line)
        if fence is None:
            if pending is not None:
                raise JourneyError(f"{page}:{pending[2]}: journey mark not directly followed by "
                                   "a fenced block (no blank line or text in between)")
            i += 1
            continue
        indent, marks, info = fence.group("indent"), fence.group("fence"), fence.group("info")
        info = info.strip()
        if marks[0] == "`" and "`" in info:  # inline code spanning a line start, not a fence
            i += 1
            continue
        close = re.compile(rf"^\s*{re.escape(marks[0])}{{{len(marks)},}}\s*$")
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        if j == len(lines):
            raise JourneyError(f"{page}:{lineno}: fence {marks} is never closed")
        body = [ln[len(indent):] if ln.startswith(indent) else ln.lstrip() for ln in lines[i + 1:j]]
        word = info.split(None, 1)[0] if info else ""
        if word.startswith("{") and word not in CODE_DIRECTIVES:
            if pending is not None:
                raise JourneyError(f"{page}:{pending[2]}: a journey mark belongs on a code "
                                   f"block, not on the directive {word}")
            _scan(body, lineno + 1, page, out)  # blocks nested in a note, tab, ...
            i = j + 1
            continue
        if word in CODE_DIRECTIVES:
            language = info.split()[1] if len(info.split()) > 1 else ""
            while body and re.match(r"^:[\w-]+:", body[0]):  # the directive's options
                body = body[1:]
        else:
            language = word
        out.append({"line": lineno, "language": language, "text": "\n".join(body) + "\n",
                    "mark": pending})
        pending = None
        i = j + 1
    if pending is not None:
        raise JourneyError(f"{page}:{pending[2]}: journey mark at the end, with no block after it")


def extract_blocks(text: str, page: str = "<page>") -> list[Block]:
    """Every fenced code block of a MyST page, in page order, with what the journey does with it.

    Raises :class:`JourneyError` where the page breaks the convention (see the module docstring).
    """
    raw: list[dict] = []
    _scan(text.splitlines(), 1, page, raw)
    blocks = []
    for number, b in enumerate(raw, start=1):
        lang, mark = b["language"], b["mark"]
        where = f"{page}:{b['line']}"
        if not lang:
            raise JourneyError(f"{where}: a fenced block without a language: write bash or "
                               "python (run) or text/console (shown only)")
        if lang in AMBIGUOUS_LANGUAGES:
            raise JourneyError(f"{where}: language {lang!r} is ambiguous here: write bash or "
                               "python (run) or text/console (shown only)")
        if mark is None:
            action, arg = ("run" if lang in RUN_LANGUAGES else "show"), ""
        else:
            action, arg = mark[0], mark[1]
            if action == "skip" and lang not in RUN_LANGUAGES:
                raise JourneyError(f"{where}: '% journey: skip' on a {lang} block, which is never "
                                   "run anyway")
            if action == "file" and lang != "python":
                raise JourneyError(f"{where}: '% journey: file' is for python blocks, not {lang}")
        blocks.append(Block(number, b["line"], lang, b["text"], action, arg))
    return blocks


# ---------------------------------------------------------------------------------- the session

@dataclass
class Journey:
    """What running one page's blocks gave."""

    page: str
    blocks: list[Block]
    outputs: dict[str, list[str]] = field(default_factory=dict)  # "prelude", "3", "epilogue"
    finished: set[str] = field(default_factory=set)
    info: dict[str, str] = field(default_factory=dict)  # NAME -> value from the epilogue
    returncode: int | None = None
    failed: str | None = None  # the step that failed or timed out
    timed_out: float | None = None
    seconds: float = 0.0
    ran: int = 0
    durations: dict[str, float] = field(default_factory=dict)  # step -> seconds

    def timings(self) -> str:
        """One line: seconds per step (page blocks by number and line)."""
        lines = {str(b.number): b.line for b in self.blocks}
        return ", ".join(f"{k}" + (f" (line {lines[k]})" if k in lines else "") + f": {v:.1f} s"
                         for k, v in self.durations.items())

    @property
    def ok(self) -> bool:
        return self.failed is None

    def report(self) -> str:
        """A failure message: the failing block, its page line, its text and its output."""
        step = self.failed or "?"
        out = "".join(self.outputs.get(step, []))[-8000:]
        how = (f"did not finish in {self.timed_out:.0f} s (killed)" if self.timed_out
               else f"failed (exit status {self.returncode})")
        block = next((b for b in self.blocks if str(b.number) == step), None)
        if block is None:
            head = f"{self.page}: the test's {step} (no page block) {how}"
            body = ""
        else:
            head = (f"{self.page}:{block.line}: block {block.number} ({block.language}) {how}")
            body = "\n".join("    " + ln for ln in block.text.rstrip("\n").splitlines())
        done = [b for b in self.blocks if str(b.number) in self.finished and b.action != "show"]
        return (f"{head}\n{body}\n--- its output (last 8000 characters) ---\n{out}\n"
                f"--- blocks that had passed before it: "
                f"{', '.join(f'{b.number} (line {b.line})' for b in done) or 'none'}")


def _timeout_for(step: str, blocks: dict[str, Block]) -> float:
    if step == "prelude":
        return PRELUDE_TIMEOUT_S
    if step == "epilogue":
        return EPILOGUE_TIMEOUT_S
    block = blocks.get(step)
    if block is not None and block.language == "bash" and re.search(r"(?m)(^|[\s;&|(])eb\s",
                                                                     block.text):
        return EB_BLOCK_TIMEOUT_S
    return BLOCK_TIMEOUT_S


def _chown_tree(path: Path, user: pwd.struct_passwd) -> None:
    for top, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(top, name), user.pw_uid, user.pw_gid)
    os.lchown(path, user.pw_uid, user.pw_gid)


def run_journey(page: str, blocks: list[Block], workdir: Path, prelude: str,
                epilogue: str = "") -> Journey:
    """Run ``blocks`` in one bash session in ``workdir`` (also ``$HOME``), as the unprivileged
    user where :func:`drop_root_command` allows it. ``prelude`` and ``epilogue`` are bash run
    before the first and after the last block; ``epilogue`` reports values with
    ``__journey_info NAME VALUE``."""
    token = uuid.uuid4().hex[:12]
    jdir = workdir / ".journey"
    jdir.mkdir()
    by_number = {str(b.number): b for b in blocks}
    lines = [
        f"source {shlex.quote(LMOD_INIT)}",
        f"__journey_mark() {{ printf '@@{token} %s %s\\n' \"$1\" \"$2\"; }}",
        f"__journey_info() {{ printf '@@{token} info %s %s\\n' \"$1\" \"$2\"; }}",
        "set -eo pipefail",
        "__journey_mark begin prelude",
        prelude,
        "__journey_mark end prelude",
    ]
    runnable = [b for b in blocks if b.action in ("run", "file")]
    for b in runnable:
        n = f"{b.number:02d}"
        if b.action == "file":
            (jdir / f"file-{n}").write_text(b.text)
            name = shlex.quote(b.arg)
            step = (f'mkdir -p -- "$(dirname -- {name})" && '
                    f'cp -- {shlex.quote(str(jdir / f"file-{n}"))} {name}')
        elif b.language == "bash":
            (jdir / f"block-{n}.sh").write_text(b.text)
            step = f"source {shlex.quote(str(jdir / f'block-{n}.sh'))}"
        else:
            (jdir / f"block-{n}.py").write_text(b.text)
            step = f"python {shlex.quote(str(jdir / f'block-{n}.py'))}"
        lines += [f"__journey_mark begin {b.number}", step, f"__journey_mark end {b.number}"]
    lines += ["__journey_mark begin epilogue", epilogue, "__journey_mark end epilogue",
              "__journey_mark done all"]
    script = jdir / "session.sh"
    script.write_text("\n".join(lines) + "\n")

    env = clean_env({"HOME": str(workdir)})
    cmd = ["bash", "--noprofile", "--norc", str(script)]
    if drop_root_command():
        _chown_tree(workdir, pwd.getpwnam("nobody"))
        cmd = [*drop_root_command(), *cmd]
        env["USER"] = "nobody"

    journey = Journey(page, blocks, outputs={"prelude": []}, ran=len(runnable))
    marker = re.compile(rf"@@{token} (\w+) (\S+)(?: (.*))?$")
    lines_q: queue.Queue[str | None] = queue.Queue()
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)

    def reader() -> None:
        assert proc.stdout is not None
        for raw in iter(proc.stdout.readline, b""):
            lines_q.put(raw.decode("utf-8", "replace"))
        lines_q.put(None)

    threading.Thread(target=reader, daemon=True).start()
    step, deadline, done, began = "prelude", start + PRELUDE_TIMEOUT_S, False, start
    log: list[str] = []  # the whole session's output, markers included: .journey/output.log
    try:
        while not done:
            try:
                line = lines_q.get(timeout=max(0.05, deadline - time.monotonic()))
            except queue.Empty:
                if time.monotonic() >= deadline:
                    journey.failed, journey.timed_out = step, _timeout_for(step, by_number)
                    break
                continue
            if line is None:  # the session's output ended
                break
            log.append(line)
            m = marker.search(line.rstrip("\n"))
            if m is None:
                journey.outputs.setdefault(step, []).append(line)
                continue
            if m.start():
                journey.outputs.setdefault(step, []).append(line[:m.start()] + "\n")
            kind, name, value = m.group(1), m.group(2), m.group(3) or ""
            if kind == "begin":
                step, began = name, time.monotonic()
                journey.outputs.setdefault(step, [])
                deadline = began + _timeout_for(step, by_number)
            elif kind == "end":
                journey.finished.add(name)
                journey.durations[name] = time.monotonic() - began
            elif kind == "info":
                journey.info[name] = value
            elif kind == "done":
                done = True
        if journey.failed is None:
            try:
                journey.returncode = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                journey.failed, journey.timed_out = step, 30.0
        if journey.failed is None and not done:
            journey.failed = step
        if journey.failed is None and journey.returncode != 0:
            journey.failed = step
    finally:
        # the session, mpirun's daemons, anything a block left running: the whole group
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                break
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                continue
            if sig == signal.SIGTERM:
                try:  # the leader is gone; stragglers of its group get SIGKILL
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                break
        if proc.returncode is None:
            proc.wait(timeout=5)
        if journey.returncode is None:
            journey.returncode = proc.returncode
        if proc.stdout is not None:
            proc.stdout.close()
    journey.seconds = time.monotonic() - start
    (jdir / "output.log").write_text("".join(log))
    return journey


def _page(rel: str) -> tuple[str, list[Block]]:
    path = DOCS / rel
    if not path.exists():
        pytest.fail(f"{path} is missing (HVDCORE_DOCS_DIR={os.environ.get('HVDCORE_DOCS_DIR')})")
    name = f"docs/{rel}" if DOCS == ROOT / "docs" else str(path)
    return name, extract_blocks(path.read_text(), name)


# ------------------------------------------------------------------------------- the site stand-in

def _copy_checkout(dest: Path) -> None:
    """The working tree as a checkout has it: git's tracked and untracked, not ignored, files."""
    try:
        listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "-co",
                                 "--exclude-standard"], capture_output=True, timeout=60,
                                check=True).stdout.decode().split("\0")
    except (OSError, subprocess.SubprocessError):
        listed = None
    if listed is None:
        shutil.copytree(ROOT, dest, symlinks=True, ignore=shutil.ignore_patterns(
            ".git", ".venv", "dist", "_build", "__pycache__", "*.egg-info", "*.pyc"))
        return
    for rel in filter(None, listed):
        src = ROOT / rel
        if not src.is_file():  # deleted in the working tree
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target, follow_symlinks=False)


def _site(base: Path) -> str:
    """The site stand-in under ``base/site`` and the admins' prelude that uses it."""
    site = base / "site"
    (site / "bin").mkdir(parents=True)
    (site / "modules" / "Python").mkdir(parents=True)
    (site / "modules" / "Python" / f"{PYSHORT}.lua").write_text(
        f'whatis("Python {PYFULL}: stands in for the site\'s Python: the test virtualenv '
        f'{sys.prefix} (torch, mpi4py, numpy, setuptools, wheel)")\n'
        f'prepend_path("PATH", "{Path(sys.prefix) / "bin"}")\n')
    eb = site / "bin" / "eb"
    eb.write_text(f"""#!/bin/sh
# stands in for the site's EasyBuild module: the eb of the test virtualenv
export EB_PYTHON={shlex.quote(sys.executable)}
exec {shlex.quote(str(EB))} "$@"
""")
    eb.chmod(0o755)
    return "\n".join([
        f"module use {shlex.quote(str(site / 'modules'))}",
        f"export PATH={shlex.quote(str(site / 'bin'))}:$PATH",
        # no EASYBUILD_EXTERNAL_MODULES_METADATA: the pages give it (PAGE_GIVES)
        "export EASYBUILD_OUTPUT_STYLE=basic",
        'if [ "$(id -u)" = 0 ]; then export EASYBUILD_ALLOW_USE_AS_ROOT_AND_ACCEPT_CONSEQUENCES=1; fi',
    ])


#: What the pages must give ``eb`` themselves, so the prelude may not: a site stand-in that set
#: one of these (as ``EASYBUILD_EXTERNAL_MODULES_METADATA`` once was) would let a documented
#: command pass here and fail as written.
PAGE_GIVES = ("EXTERNAL_MODULES_METADATA", "external-modules-metadata")


#: Epilogue: which hvdcore the session's ``python`` imports at the end, where it ends (its
#: directory, its modules), when an hvdcore module is loaded.
WHICH_HVDCORE = """
__journey_info loaded "${LOADEDMODULES:-}"
if [[ ":${LOADEDMODULES:-}:" == *:hvdcore/* ]]; then
    __journey_info hvdcore "$(python -c 'import hvdcore; print(hvdcore.__file__)')"
fi
"""


def _assert_imports_the_install(journey: Journey, home: Path) -> None:
    """With the module loaded at the end, python imports the eb install, not a checkout."""
    if "hvdcore" not in journey.info:
        return
    path = Path(journey.info["hvdcore"])
    assert path.is_relative_to(home) and "/software/hvdcore/" in str(path), (
        f"{journey.page}: at the end, with {journey.info.get('loaded')} loaded, python imports "
        f"{path}, not the hvdcore that eb installed under {home}")


@dataclass
class AdminRun:
    journey: Journey
    base: Path
    home: Path


@pytest.fixture(scope="module")
def admin_run() -> Iterator[AdminRun]:
    """The admins' page run from top to bottom (its real ``eb`` install included)."""
    require_eb()
    require_venv()
    if PYSHORT != "3.11":
        pytest.skip(f"the pages install hvdcore-*-Python-3.11.eb; tests run on {PYFULL}")
    page, blocks = _page(ADMIN_PAGE)
    base = eb_workdir("hvdcore-journey-")
    try:
        prelude = _site(base)
        home = base / "admin"
        home.mkdir()
        _copy_checkout(home / "hvdcore")
        journey = run_journey(page, blocks, home, prelude,
                              epilogue='__journey_info modulepath "$MODULEPATH"\n' + WHICH_HVDCORE)
        print(f"\nadmins' journey: {journey.ran} blocks in {journey.seconds:.1f} s "
              f"({journey.timings()})")
        yield AdminRun(journey, base, home)
    finally:
        if os.environ.get("HVDCORE_JOURNEY_KEEP"):
            print(f"\njourneys kept in {base} (HVDCORE_JOURNEY_KEEP)")
        else:
            shutil.rmtree(base, ignore_errors=True)


# ------------------------------------------------------------------------------------- the tests

@pytest.mark.easybuild
@pytest.mark.lmod
@pytest.mark.torch
@pytest.mark.mpi
@pytest.mark.timeout(1500)
def test_admins_easybuild_page_runs(admin_run: AdminRun) -> None:
    journey = admin_run.journey
    assert journey.ok, journey.report()
    # the page really installed hvdcore with eb: its module tree is on the session's MODULEPATH
    trees = [Path(p) for p in journey.info.get("modulepath", "").split(":") if p]
    built = [t for t in trees if t.is_relative_to(admin_run.home)
             and list(t.glob(f"hvdcore/{VERSION}-Python-{PYSHORT}.lua"))]
    assert built, f"no hvdcore module under {admin_run.home} on MODULEPATH: {trees}"
    assert "hvdcore" in journey.info, f"{journey.page} ends without an hvdcore module loaded"
    _assert_imports_the_install(journey, admin_run.home)


@pytest.mark.easybuild
@pytest.mark.lmod
@pytest.mark.torch
@pytest.mark.mpi
@pytest.mark.timeout(1500)
def test_users_getting_started_page_runs_on_that_install(admin_run: AdminRun) -> None:
    if not admin_run.journey.ok:
        pytest.fail("the admins' journey failed, so there is no install for the users' page:\n"
                    + admin_run.journey.report())
    page, blocks = _page(USER_PAGE)
    assert any(b.action == "run" for b in blocks), f"{page} has no block to run"
    trees = [p for p in admin_run.journey.info["modulepath"].split(":") if p]
    prelude = "\n".join(f"module use {shlex.quote(p)}" for p in reversed(trees))
    home = admin_run.base / "user"
    home.mkdir()
    journey = run_journey(page, blocks, home, prelude, epilogue=WHICH_HVDCORE)
    print(f"\nusers' journey: {journey.ran} blocks in {journey.seconds:.1f} s "
          f"({journey.timings()})")
    assert journey.ok, journey.report()
    _assert_imports_the_install(journey, admin_run.home)  # the admins' install, not a checkout


# ------------------------------------------------------------------- the extractor, without eb

PAGE = """# A page

Intro.

```bash
echo one
```

% journey: file train.py
```python
print("train")
```

```text
sample output
```

% journey: skip needs a GPU node
```bash
nvidia-smi
```

:::{note}
```python
print("nested in a colon fence")
```
:::

````{tip}
% journey: skip needs a Slurm allocation
```bash
srun hostname
```
````

```{code-block} bash
:caption: a directive code block
echo two
```
"""


def test_extractor_keeps_page_order_lines_and_actions() -> None:
    blocks = extract_blocks(PAGE, "page.md")
    got = [(b.number, b.line, b.language, b.action, b.arg) for b in blocks]
    assert got == [
        (1, 5, "bash", "run", ""),
        (2, 10, "python", "file", "train.py"),
        (3, 14, "text", "show", ""),
        (4, 19, "bash", "skip", "needs a GPU node"),
        (5, 24, "python", "run", ""),
        (6, 31, "bash", "skip", "needs a Slurm allocation"),
        (7, 36, "bash", "run", ""),
    ]
    assert blocks[0].text == "echo one\n"
    assert blocks[1].text == 'print("train")\n'
    assert blocks[6].text == "echo two\n"  # the directive's option line is not code


@pytest.mark.parametrize("bad, message", [
    ("% journey: skip\n```bash\nls\n```\n", "needs a reason"),
    ("% journey: skip   \n```bash\nls\n```\n", "needs a reason"),
    ("% journey: skip needs a GPU\n\n```bash\nls\n```\n", "not directly followed"),
    ("% journey: file\n```python\nx = 1\n```\n", "one relative file name"),
    ("% journey: file ../x.py\n```python\nx = 1\n```\n", "one relative file name"),
    ("% journey: file /tmp/x.py\n```python\nx = 1\n```\n", "one relative file name"),
    ("% journey: file run.sh\n```bash\nls\n```\n", "is for python blocks"),
    ("% journey: run\n```bash\nls\n```\n", "unknown journey mark"),
    ("% journey: skip needs a GPU\n```text\nout\n```\n", "never run anyway"),
    ("```\nls\n```\n", "without a language"),
    ("```sh\nls\n```\n", "ambiguous"),
    ("```bash\nls\n", "never closed"),
    ("text\n% journey: skip needs a GPU\n", "at the end"),
])
def test_extractor_rejects_what_breaks_the_convention(bad: str, message: str) -> None:
    with pytest.raises(JourneyError, match=message) as info:
        extract_blocks(bad, "page.md")
    assert str(info.value).startswith("page.md:")  # the page and line are named


def test_both_pages_follow_the_convention() -> None:
    """Fast (no eb): both pages parse, and the admins' page runs the install it documents."""
    admin_page, admin = _page(ADMIN_PAGE)
    run = "".join(b.text for b in admin if b.action == "run" and b.language == "bash")
    for needed in ("build_sdist.py", "eb ", "module load hvdcore", "hvdcorerun --check-build",
                   "hvdcorerun -np 2"):
        assert needed in run, f"{admin_page}: no run block does {needed!r}"
    user_page, user = _page(USER_PAGE)
    assert any(b.action == "run" for b in user), f"{user_page} has no block to run"


def _system_eb_commands(text: str) -> list[str]:
    """The ``eb`` commands of a page's run blocks that install the SYSTEM variant, each with its
    continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [line.strip() for line in joined.splitlines()
            if re.match(r"\s*(\S*/)?eb\s", line) and "-Python-3.11.eb" in line]


@pytest.mark.parametrize("page", [ADMIN_PAGE, "README.md"])
def test_the_system_install_names_its_metadata_file(page: str, tmp_path: Path) -> None:
    """Fast (no eb): a page's SYSTEM-variant ``eb`` command works as written. It passes
    ``--external-modules-metadata=FILE``, a run block before it writes FILE, and the journeys'
    prelude sets nothing of the kind (it would hide a command that fails without it:
    ``Failed to resolve all templates in "lib/python%(pyshortver)s/..."``)."""
    if page == "README.md":
        readme = Path(os.environ.get("HVDCORE_README") or ROOT / "README.md")
        name, blocks = page, extract_blocks(readme.read_text(), page)
    else:
        name, blocks = _page(page)
    run = [b for b in blocks if b.action == "run" and b.language == "bash"]
    found = [(b, cmd) for b in run for cmd in _system_eb_commands(b.text)]
    assert found, f"{name}: no run block installs hvdcore-*-Python-3.11.eb with eb"
    for block, cmd in found:
        given = re.search(r"--external-modules-metadata=(\S+)", cmd)
        assert given, (f"{name}:{block.line}: {cmd!r} does not pass --external-modules-metadata "
                       "(the SYSTEM variant's external Python is then unknown to EasyBuild)")
        meta = os.path.basename(given.group(1).strip("\"'"))
        before = "".join(b.text for b in run if b.number <= block.number)
        assert re.search(rf">\s*\S*{re.escape(meta)}\b", before), (
            f"{name}:{block.line}: no run block up to this one writes {meta}")
    prelude = _site(tmp_path)
    assert not [g for g in PAGE_GIVES if g in prelude], prelude


# --------------------------------------------------------------- the session runner, without eb

SESSION_PAGE = """# Session

```bash
mkdir -p work && cd work
GREETING=hello
```

% journey: file pkg/t.py
```python
print("written, not run")
```

```bash
test -f pkg/t.py && test "$GREETING" = hello && pwd | grep -q '/work$'
echo "state carried over"
```

```bash
echo "about to fail"
false
echo "never printed"
```

```bash
echo "never run"
```
"""


@pytest.fixture
def session_dir() -> Iterator[Path]:
    require_lmod()
    path = eb_workdir("hvdcore-journey-unit-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.lmod
def test_session_carries_state_and_names_the_failing_block(session_dir: Path) -> None:
    journey = run_journey("session.md", extract_blocks(SESSION_PAGE, "session.md"), session_dir,
                          prelude="type module >/dev/null")
    assert not journey.ok and journey.failed == "4" and journey.returncode == 1
    assert journey.finished >= {"prelude", "1", "2", "3"} and "5" not in journey.outputs
    assert "state carried over" in "".join(journey.outputs["3"])
    report = journey.report()
    assert report.startswith("session.md:18: block 4 (bash) failed (exit status 1)"), report
    assert "    false" in report and "about to fail" in report
    assert "never printed" not in "".join(journey.outputs["4"])
    assert (session_dir / "work" / "pkg" / "t.py").read_text() == 'print("written, not run")\n'


@pytest.mark.lmod
def test_a_block_past_its_deadline_is_killed_with_its_process_group(
        session_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "BLOCK_TIMEOUT_S", 2.0)
    page = "```bash\necho started\n(sleep 300 &)\nsleep 300\n```\n"
    start = time.monotonic()
    journey = run_journey("slow.md", extract_blocks(page, "slow.md"), session_dir, prelude=":")
    assert time.monotonic() - start < 30
    assert journey.failed == "1" and journey.timed_out == 2.0
    assert journey.report().startswith("slow.md:1: block 1 (bash) did not finish in 2 s (killed)")
    assert "started" in journey.report()
    left = subprocess.run(["pgrep", "-f", "^sleep 300$"], capture_output=True, text=True)
    assert left.stdout.strip() == "", f"sleep processes of the session still run: {left.stdout}"
