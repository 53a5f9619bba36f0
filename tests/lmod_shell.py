"""Helpers for the EasyBuild and Lmod tests: clean login-like shells with Lmod, and ``eb`` runs."""

from __future__ import annotations

import base64
import functools
import importlib.util
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
LMOD_INIT = "/usr/share/lmod/lmod/init/bash"
LMOD_CMD = "/usr/share/lmod/lmod/libexec/lmod"
CHECK_SYNTAX = "/usr/share/lmod/lmod/libexec/check_module_tree_syntax"
VENV_BIN = Path(sys.prefix) / "bin"
EB = VENV_BIN / "eb"

# A clean shell: no variables of this test process, nothing of the venv on PATH.
CLEAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ROOT_MPI_ENV = {
    # mpirun as root (CI) and more ranks than cores; harmless for a normal user
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
}


def require_lmod() -> None:
    """Skip the test when Debian's Lmod is not installed."""
    if not (os.path.exists(LMOD_INIT) and os.path.exists(LMOD_CMD)):
        pytest.skip(f"Lmod not installed ({LMOD_INIT} missing): apt-get install lmod")


def require_eb() -> None:
    """Skip the test when EasyBuild is not installed in the test's venv."""
    require_lmod()
    if not EB.exists():
        pytest.skip(f"EasyBuild not installed in {sys.prefix}: pip install '.[easybuild]'")


def require_venv() -> None:
    """Skip unless the tests run from a virtualenv (EasyBuild must build against a venv)."""
    if sys.prefix == sys.base_prefix:
        pytest.skip(
            f"tests run with {sys.executable}, not a virtualenv: the install tests use the "
            "test's venv as the external Python module (never the distribution's Python)"
        )


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment of a fresh login: HOME, a system PATH, locale, MPI-as-root switches."""
    env = {
        "HOME": os.environ.get("HOME", "/root"),
        "PATH": CLEAN_PATH,
        "LANG": "C.UTF-8",
        "USER": os.environ.get("USER", "root"),
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
        "LMOD_IGNORE_CACHE": "1",
        **ROOT_MPI_ENV,
    }
    if extra:
        env.update(extra)
    return env


def lmod_shell(
    script: str, extra_env: dict[str, str] | None = None, timeout: float = 180, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in ``bash`` with a clean environment after sourcing Lmod's init."""
    full = f"source {LMOD_INIT}\n{script}\n"
    try:
        return subprocess.run(
            ["bash", "--noprofile", "--norc", "-c", full],
            env=clean_env(extra_env),
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=cwd or "/",
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"shell script did not finish in {timeout}s:\n{script}\n{exc.stdout}\n{exc.stderr}")


def eb_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for ``eb``: EB_PYTHON is this Python, the venv's bin/ is NOT on PATH."""
    env = clean_env(
        {
            "EB_PYTHON": sys.executable,
            "LMOD_CMD": LMOD_CMD,
            "EASYBUILD_OUTPUT_STYLE": "basic",
            "MODULEPATH": "",
        }
    )
    if os.geteuid() == 0:
        env["EASYBUILD_ALLOW_USE_AS_ROOT_AND_ACCEPT_CONSEQUENCES"] = "1"
    if extra:
        env.update(extra)
    return env


@functools.cache
def drop_root_command() -> tuple[str, ...]:
    """Command prefix that runs as the unprivileged user ``nobody``, or () when not possible.

    Used only when this process is root and ``nobody`` can run this venv's Python (importing
    torch and mpi4py) and its ``eb`` (EasyBuild should not build as root). Otherwise -- e.g. a
    venv whose base Python lives under a private /root -- ``eb`` runs as the current user (as
    root with --allow-use-as-root-and-accept-consequences).
    """
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        return ()
    try:
        user = pwd.getpwnam("nobody")
    except KeyError:
        return ()
    cmd = (setpriv, f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups")
    env = eb_env({"HOME": "/tmp"})
    env.pop("EASYBUILD_ALLOW_USE_AS_ROOT_AND_ACCEPT_CONSEQUENCES", None)
    probes = (
        [*cmd, sys.executable, "-c", "import torch, mpi4py"],
        [*cmd, str(EB), "--version"],  # the eb script itself must find EB_PYTHON as that user
    )
    for probe in probes:
        proc = subprocess.run(probe, env=env, capture_output=True, text=True, timeout=120, cwd="/")
        if proc.returncode != 0:
            return ()
    return cmd


def eb_workdir(prefix: str = "hvdcore-eb-") -> Path:
    """A fresh directory ``eb`` can write to, also when it runs as ``nobody`` (see
    :func:`drop_root_command`); pytest's own tmp dirs are private to root. Caller removes it."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    if drop_root_command():
        user = pwd.getpwnam("nobody")
        os.chown(path, user.pw_uid, user.pw_gid)
    return path


def run_eb(
    args: list[str],
    prefix: Path,
    extra_env: dict[str, str] | None = None,
    timeout: float = 300,
    unprivileged: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``eb ARGS`` with its prefix (build dirs, logs, installs) under ``prefix``.

    ``unprivileged``: drop root to ``nobody`` where :func:`drop_root_command` allows it
    (``prefix`` must then be writable by that user: make it with :func:`eb_workdir`).
    """
    env = eb_env({"EASYBUILD_PREFIX": str(prefix), **(extra_env or {})})
    cmd = [str(EB), *args]
    if unprivileged and drop_root_command():
        cmd = [*drop_root_command(), *cmd]
        env.pop("EASYBUILD_ALLOW_USE_AS_ROOT_AND_ACCEPT_CONSEQUENCES", None)
        env.update(HOME=str(prefix), USER="nobody")
    try:
        return subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=prefix
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"eb {args} did not finish in {timeout}s\n{exc.stdout}\n{exc.stderr}")


def build_sdist_module() -> ModuleType:
    """Import easyconfigs/build_sdist.py (the sdist + checksum script) as a module."""
    path = ROOT / "easyconfigs" / "build_sdist.py"
    spec = importlib.util.spec_from_file_location("hvdcore_build_sdist", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def env_file(path: Path) -> dict[str, str]:
    """Parse the output of ``env`` (one NAME=value a line; continuation lines are skipped)."""
    env = {}
    for line in path.read_text().splitlines():
        name, sep, value = line.partition("=")
        if sep and re.fullmatch(r"\w+", name):
            env[name] = value
    return env


def module_table(env: dict[str, str]) -> str:
    """Lmod's module table, decoded from its base64 chunks (_ModuleTable001_ ...)."""
    size = int(env.get("_ModuleTable_Sz_", "0"))
    chunks = "".join(env[f"_ModuleTable{i:03d}_"] for i in range(1, size + 1))
    return base64.b64decode(chunks).decode()


def user_visible(env: dict[str, str]) -> dict[str, str]:
    """``env`` without Lmod's bookkeeping: module-table chunks (compare them decoded with
    :func:`module_table`; Lmod 8.6 leaves stale chunks beyond _ModuleTable_Sz_) and the
    __LMOD_REF_COUNT_* reference counts."""
    return {k: v for k, v in env.items()
            if not re.fullmatch(r"_ModuleTable\d+_|__LMOD_REF_COUNT_\w+", k)}


def env_difference(before: dict[str, str], after: dict[str, str]) -> dict[str, tuple]:
    """Variables that differ (user-visible ones only), as name -> (before, after)."""
    b, a = user_visible(before), user_visible(after)
    return {k: (b.get(k), a.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)}


#: Stand-ins for the EESSI modules hvdcore/0.2.0-foss-2023a depends on (name -> dependencies).
EESSI_STAND_INS = {
    "Python/3.11.3-GCCcore-12.3.0": [],
    "mpi4py/3.1.4-gompi-2023a": ["Python/3.11.3-GCCcore-12.3.0"],
    "PyTorch/2.1.2-foss-2023a": ["Python/3.11.3-GCCcore-12.3.0"],
}

#: hvdcore/0.2.0-foss-2023a-TensorFlow-2.13.0 needs TensorFlow instead of PyTorch.
TF_STAND_INS = {
    **{k: v for k, v in EESSI_STAND_INS.items() if not k.startswith("PyTorch/")},
    "TensorFlow/2.13.0-foss-2023a": ["Python/3.11.3-GCCcore-12.3.0"],
}


def write_stand_in_modules(tree: Path, deps: dict[str, list[str]] = EESSI_STAND_INS) -> None:
    """Write ``<tree>/modules/all/<name>.lua`` for each stand-in: backed by this test's venv
    (the Python one puts its ``bin/`` on PATH), each setting ``EBROOT<NAME>`` as EasyBuild's do."""
    venv_bin = Path(sys.prefix) / "bin"
    for name, needs in deps.items():
        path = tree / "modules" / "all" / f"{name}.lua"
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = [f'whatis("{name}: stands in for the EESSI module, backed by {sys.prefix}")']
        lines += [f'depends_on("{dep}")' for dep in needs]
        if name.startswith("Python/"):
            lines.append(f'prepend_path("PATH", "{venv_bin}")')
            lines.append('setenv("EBVERSIONPYTHON", "3.11.3")')
        lines.append(f'setenv("EBROOT{name.split("/")[0].upper()}", "{sys.prefix}")')
        path.write_text("\n".join(lines) + "\n")


@dataclass(frozen=True)
class PythonState:
    """What a Python has installed, as pip and a fresh process see it: every distribution
    (name, version, location, editable project location), ``pip show hvdcore``, where ``import
    hvdcore`` comes from and whether ``<prefix>/bin/hvdcorerun`` exists."""

    packages: tuple[tuple[str, str, str, str], ...]
    pip_show_hvdcore: tuple[tuple[str, str], ...]
    hvdcore_file: str
    hvdcorerun: bool

    @property
    def editable_location(self) -> str:
        return dict(self.pip_show_hvdcore).get("Editable project location", "")

    def difference(self, other: PythonState) -> str:
        """What changed from ``self`` to ``other``, one line per change ('' when nothing)."""
        lines = [f"gone: {p}" for p in sorted(set(self.packages) - set(other.packages))]
        lines += [f"new: {p}" for p in sorted(set(other.packages) - set(self.packages))]
        for name in ("pip_show_hvdcore", "hvdcore_file", "hvdcorerun"):
            if getattr(self, name) != getattr(other, name):
                lines.append(f"{name}: {getattr(self, name)!r} -> {getattr(other, name)!r}")
        return "\n".join(lines)


def python_state(python: str = sys.executable) -> PythonState:
    """:class:`PythonState` of ``python`` (run from ``/`` without PYTHONPATH, so only what is
    installed counts, not a checkout in the working directory)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([python, *args], env=env, cwd="/", capture_output=True, text=True,
                              timeout=120)

    pip = ("-m", "pip", "--disable-pip-version-check")
    listed = run(*pip, "list", "-v", "--format=json")
    assert listed.returncode == 0, listed.stderr
    packages = tuple(sorted(
        (p["name"], p["version"], p.get("location", ""), p.get("editable_project_location", ""))
        for p in json.loads(listed.stdout)))
    show = run(*pip, "show", "hvdcore")
    fields = ("Name", "Version", "Location", "Editable project location")
    pip_show = tuple((k, v.strip()) for k, _, v in
                     (line.partition(":") for line in show.stdout.splitlines()) if k in fields)
    imported = run("-c", "import hvdcore; print(hvdcore.__file__)")
    hvdcore_file = (imported.stdout.strip() if imported.returncode == 0
                    else "import failed: " + imported.stderr.strip()[-300:])
    bin_dir = Path(run("-c", "import sys; print(sys.prefix)").stdout.strip()) / "bin"
    return PythonState(packages, pip_show, hvdcore_file, (bin_dir / "hvdcorerun").exists())


def require_module_python(module: str = "hvdcore/0.2.0-foss-2023a") -> None:
    """Skip unless this Python can stand in for the module's: a venv with the Python 3.11 of
    foss/2023a (``modules/install.sh`` checks the version against the module file)."""
    require_venv()
    if sys.version_info[:2] != (3, 11):
        pytest.skip(f"{module} is for the Python 3.11 of foss/2023a; tests run on "
                    f"{sys.version.split()[0]}")


def install_hvdcore_tree(base: Path, module: str = "hvdcore/0.2.0-foss-2023a") -> Path:
    """An EESSI-layout tree under ``base/stack``: the stand-ins (TensorFlow's instead of
    PyTorch's for a ``-TensorFlow-`` module), plus hvdcore installed as ``module`` by
    ``modules/install.sh prefix`` from a real sdist of this checkout, with this test's Python
    (whose own installs -- hvdcore editable included -- must come out unchanged). Skips where
    Lmod or the venv are missing, or on a Python other than the 3.11 of foss/2023a."""
    require_lmod()
    require_module_python(module)
    sdist = build_sdist_module().build_sdist(base / "dist", python=sys.executable)
    tree = base / "stack"
    stand_ins = TF_STAND_INS if "-TensorFlow-" in module else EESSI_STAND_INS
    write_stand_in_modules(tree, stand_ins)
    framework = next(n for n in stand_ins if n.startswith(("PyTorch/", "TensorFlow/")))
    before = python_state()
    proc = lmod_shell(f"""set -e
module use {tree / 'modules' / 'all'}
module load {framework} mpi4py/3.1.4-gompi-2023a
{ROOT / 'modules' / 'install.sh'} prefix {tree} {sdist} {module.split('/', 1)[1]}
""", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"module load {module}" in proc.stdout
    changed = before.difference(python_state())
    assert not changed, f"modules/install.sh changed {sys.prefix}, the Python it ran:\n{changed}"
    return tree
