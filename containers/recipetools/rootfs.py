"""Execute a Debian-based Apptainer definition in a ``debootstrap`` rootfs under ``chroot``.

For machines without Apptainer (it is not packaged for Debian 12), this does what
``apptainer build --sandbox`` and ``apptainer test`` would do with a definition whose base is a
Debian image, closely enough to prove the recipe works:

1. the base: ``Bootstrap: docker`` + ``From: debian:<tag>`` becomes ``debootstrap --variant=minbase
   <suite>`` from the mirror this machine's apt is configured with (read from
   ``/etc/apt/sources.list`` and ``/etc/apt/sources.list.d``); ``Bootstrap: debootstrap`` uses its
   own ``OSVersion``/``MirrorURL``. The base is cached (``--cache``) and copied for each build;
2. ``%arguments`` / ``--build-arg`` fill ``{{ NAME }}`` placeholders; ``%setup`` runs on the host
   with ``APPTAINER_ROOTFS`` set; ``%files`` are copied in (sources relative to ``--context``);
3. ``%post`` runs in the chroot with ``/proc``, ``/sys`` and ``/dev`` mounted. It runs under
   ``bash --posix -eE`` with an ERR trap, so a failing command is reported as
   ``file:line: %post failed: '<command>' exited with status N``;
4. ``%environment``, ``%runscript``, ``%test``, ``%labels`` and ``%help`` are written where
   Apptainer keeps them (``/.singularity.d/...``); ``test`` runs ``%test`` with the environment
   sourced, as ``apptainer test`` does.

Differences from Apptainer, on purpose: the chroot runs as root (so Open MPI gets
``OMPI_ALLOW_RUN_AS_ROOT``), and ``--host-pip`` hands the machine's pip configuration (index
URLs, find-links, CA bundle) to ``%post`` so that the build uses the same package sources as the
host, binding local wheel directories read-only at the same path.

Example::

    python -m containers.recipetools.rootfs build containers/hvdcore-cpu.def --rootfs /var/tmp/cpu \\
        --cache /var/cache/hvdcore-rootfs --host-pip --build-arg TORCH_PIP_OPTS=
    python -m containers.recipetools.rootfs test --rootfs /var/tmp/cpu
"""

# Over 400 lines on purpose: it follows Apptainer's build steps in order (base, %setup, %files,
# %post, %environment, %test); one module keeps that order visible.

from __future__ import annotations

import argparse
import configparser
import contextlib
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from .defcheck import check_definition
from .deffile import Definition, DefinitionError, Section, parse, substitute

__all__ = [
    "DEBIAN_SUITES",
    "apt_mirror",
    "base_suite",
    "host_pip_config",
    "build",
    "run_test",
    "run_in",
    "mounts_under",
    "remove_rootfs",
    "main",
]

DEBIAN_SUITES = {"10": "buster", "11": "bullseye", "12": "bookworm", "13": "trixie"}
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_META = ".singularity.d"
_BUILD_DIR = ".hvdcore-build"
_TRAP = (
    "trap '__hvd_rc=$?; echo \"hvdcore-rootfs-failed line=$LINENO rc=$__hvd_rc "
    "cmd=$BASH_COMMAND\" >&2' ERR"
)


def _log(msg: str) -> None:
    print(f"[rootfs {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _sources_entries(apt_dir: Path) -> list[tuple[str, list[str], list[str]]]:
    """(uri, suites, components) for every 'deb' entry in the apt configuration."""
    out: list[tuple[str, list[str], list[str]]] = []
    files = [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*.list"))]
    for f in files:
        if not f.is_file():
            continue
        for line in f.read_text().splitlines():
            words = line.split("#", 1)[0].split()
            if len(words) >= 3 and words[0] == "deb":
                words = [w for w in words[1:] if not w.startswith("[")]
                out.append((words[0], [words[1]], words[2:]))
    for f in sorted((apt_dir / "sources.list.d").glob("*.sources")):
        for stanza in re.split(r"\n\s*\n", f.read_text()):
            fields: dict[str, str] = {}
            for line in stanza.splitlines():
                if line.startswith("#") or ":" not in line or line[:1].isspace():
                    continue
                key, value = line.split(":", 1)
                fields[key.strip().lower()] = value.strip()
            if "deb" not in fields.get("types", "").split() or fields.get("enabled") == "no":
                continue
            for uri in fields.get("uris", "").split():
                out.append(
                    (uri, fields.get("suites", "").split(), fields.get("components", "").split())
                )
    return out


def apt_mirror(suite: str, apt_dir: str | Path = "/etc/apt") -> str:
    """The mirror URI this machine's apt uses for ``suite`` (its ``main`` component).

    >>> apt_mirror("bookworm")  # doctest: +SKIP
    'http://.../debian'
    """
    entries = _sources_entries(Path(apt_dir))
    for uri, suites, components in entries:
        if suite in suites and "main" in components:
            return uri.rstrip("/")
    # Another release of the same archive serves the suite too (e.g. machine on bookworm,
    # recipe on trixie): take the mirror that serves the plain Debian archive.
    for uri, suites, components in entries:
        if "main" in components and any(s in DEBIAN_SUITES.values() for s in suites):
            return uri.rstrip("/")
    raise DefinitionError(
        f"no apt mirror for suite '{suite}' in {apt_dir}/sources.list(.d): configure apt first"
    )


def base_suite(defn: Definition) -> tuple[str, str | None]:
    """(Debian suite, mirror from the recipe or None) for the recipe's base image."""
    stage = defn.final
    agent = (stage.get("bootstrap") or "").lower()
    values = defn.arguments()
    if agent == "debootstrap":
        return (stage.get("osversion") or "", stage.get("mirrorurl"))
    ref, _ = substitute(stage.get("from") or "", values)
    ref = ref.split("://", 1)[-1]
    match = re.fullmatch(r"(?:docker\.io/)?(?:library/)?debian:([A-Za-z0-9._-]+)", ref)
    if agent == "docker" and match:
        tag = match.group(1).lower()
        first = re.split(r"[-.]", tag)[0]
        suite = DEBIAN_SUITES.get(first, first)
        if suite in DEBIAN_SUITES.values():
            return suite, None
    boot = stage.entry("bootstrap")
    line = boot.line if boot else 1
    raise DefinitionError(
        f"{defn.path}:{line}: base '{agent}: {ref}' cannot be emulated with debootstrap "
        "(only 'Bootstrap: docker' + 'From: debian:<release tag>' or 'Bootstrap: debootstrap')"
    )


def host_pip_config() -> tuple[dict[str, str], list[str]]:
    """The machine's pip configuration as ``PIP_*`` variables, plus local paths it refers to.

    Reads ``PIP_*`` from the environment and the ``[global]``/``[install]`` sections of
    ``/etc/pip.conf``, ``/etc/xdg/pip/pip.conf``, ``~/.config/pip/pip.conf`` and ``$PIP_CONFIG_FILE``.
    Local paths: find-links directories, local indexes and constraint/requirement files.
    """
    env: dict[str, str] = {}
    files = [
        "/etc/xdg/pip/pip.conf",
        "/etc/pip.conf",
        os.path.expanduser("~/.pip/pip.conf"),
        os.path.expanduser("~/.config/pip/pip.conf"),
    ]
    if os.environ.get("PIP_CONFIG_FILE"):
        files.append(os.environ["PIP_CONFIG_FILE"])
    for f in files:
        parser = configparser.ConfigParser()
        try:
            parser.read(f)
        except configparser.Error:
            continue
        for section in ("global", "install"):
            if parser.has_section(section):
                for key, value in parser.items(section):
                    env["PIP_" + key.upper().replace("-", "_")] = " ".join(value.split())
    env.update(
        {k: v for k, v in os.environ.items() if k.startswith("PIP_") and k != "PIP_CONFIG_FILE"}
    )
    paths: list[str] = []
    for key in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_INDEX_URL", "PIP_CONSTRAINT",
                "PIP_REQUIREMENT"):
        for item in env.get(key, "").split():
            path = item[len("file://") :] if item.startswith("file://") else item
            if path.startswith("/") and os.path.exists(path):
                # a local index's pages may link to files beside it (../files), and a
                # constraints file is a file: bind the directory that holds it
                paths.append(path if key == "PIP_FIND_LINKS" else str(Path(path).parent))
    return env, sorted(set(paths))


def mounts_under(path: str | Path) -> list[str]:
    """Mount points at or below ``path`` (from /proc/self/mounts)."""
    root = os.path.realpath(path)
    found = []
    with open("/proc/self/mounts") as fh:
        for line in fh:
            point = line.split()[1].replace("\\040", " ")
            if point == root or point.startswith(root.rstrip("/") + "/"):
                found.append(point)
    return found


def remove_rootfs(path: str | Path) -> None:
    """Delete a rootfs directory, refusing while anything is mounted below it.

    (Deleting through a bind mount of /dev or /sys would delete the host's files.)
    """
    busy = mounts_under(path)
    if busy:
        raise DefinitionError(f"refusing to delete {path}: still mounted: {', '.join(busy)}")
    shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _mounted(rootfs: Path, binds: Sequence[tuple[str, str]] = ()) -> Iterator[None]:
    """Mount /proc, /sys, /dev (and read-only binds) into ``rootfs``; unmount on exit."""
    done: list[Path] = []
    try:
        for src, kind in (("proc", "proc"), ("/sys", "rbind"), ("/dev", "rbind")):
            target = rootfs / src.strip("/")
            target.mkdir(parents=True, exist_ok=True)
            if kind == "proc":
                subprocess.run(["mount", "-t", "proc", "proc", str(target)], check=True)
            else:
                subprocess.run(["mount", "--rbind", src, str(target)], check=True)
                subprocess.run(["mount", "--make-rslave", str(target)], check=True)
            done.append(target)
        for src, dst in binds:
            target = rootfs / dst.lstrip("/")
            target.mkdir(parents=True, exist_ok=True)
            subprocess.run(["mount", "--bind", "-o", "ro", src, str(target)], check=True)
            done.append(target)
        yield
    finally:
        for target in reversed(done):
            proc = subprocess.run(["umount", "-R", str(target)], capture_output=True, text=True)
            if proc.returncode != 0:
                subprocess.run(["umount", "-R", "-l", str(target)], capture_output=True)


def _host_files(rootfs: Path) -> None:
    """Give the chroot this host's name resolution, as Apptainer binds it."""
    for name in ("etc/resolv.conf", "etc/hosts"):
        src = Path("/") / name
        if src.is_file():
            dst = rootfs / name
            if dst.is_symlink():
                dst.unlink()
            shutil.copyfile(src, dst)


def _base(suite: str, mirror: str, cache: Path | None, where: Path | None = None) -> Path:
    """A pristine minbase rootfs for ``suite``: reused from ``cache`` when given, else new
    (in ``where``)."""
    key = hashlib.sha256(f"{suite} {mirror} minbase".encode()).hexdigest()[:12]
    root = cache if cache is not None else (where or Path("/var/tmp"))
    root.mkdir(parents=True, exist_ok=True)
    done = root / f"debian-{suite}-{key}"
    if cache is not None and (done / "etc" / "debian_version").is_file():
        _log(f"base: cached {done}")
        return done
    tmp = root / f"debian-{suite}-{key}.tmp{os.getpid()}"
    remove_rootfs(tmp)
    if shutil.which("debootstrap") is None:
        raise DefinitionError("debootstrap not found: install the Debian package 'debootstrap'")
    _log(f"base: debootstrap --variant=minbase {suite} from {mirror}")
    proc = subprocess.run(
        ["debootstrap", "--variant=minbase", suite, str(tmp), mirror],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        remove_rootfs(tmp)
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
        raise DefinitionError(
            f"debootstrap {suite} {mirror} failed (exit {proc.returncode}):\n{tail}"
        )
    if cache is None:
        return tmp
    remove_rootfs(done)
    tmp.rename(done)
    return done


def _copy_files(defn: Definition, rootfs: Path, context: Path, values: dict[str, str]) -> None:
    for entry in defn.final.files():
        if entry.from_stage is not None:
            raise DefinitionError(
                f"{defn.path}:{entry.line}: '%files from {entry.from_stage}' "
                "(multi-stage) is not supported by the chroot builder"
            )
        src, _ = substitute(entry.src, values)
        dst, _ = substitute(entry.dst, values)
        full = src if os.path.isabs(src) else str(context / src)
        matches = sorted(glob.glob(full))
        if not matches:
            raise DefinitionError(f"{defn.path}:{entry.line}: %files source '{src}' not found")
        target = rootfs / dst.lstrip("/")
        into_dir = dst.endswith("/") or len(matches) > 1 or target.is_dir()
        for m in matches:
            out = target / Path(m).name if into_dir else target
            out.parent.mkdir(parents=True, exist_ok=True)
            if os.path.isdir(m):
                shutil.copytree(m, out, symlinks=True, dirs_exist_ok=True)
            else:
                shutil.copy2(m, out)


def _script(section: Section, values: dict[str, str]) -> str:
    text, _ = substitute("\n".join(section.body) + "\n", values)
    return text


def _run_section(
    defn: Definition,
    section: Section,
    rootfs: Path,
    values: dict[str, str],
    env: dict[str, str],
    log: Path | None,
    timeout: float,
) -> None:
    """Run a build section in the chroot; a failure raises with the recipe's file:line."""
    build_dir = rootfs / _BUILD_DIR
    build_dir.mkdir(exist_ok=True)
    script = build_dir / f"{section.name}.sh"
    # line 1: the trap; body line k is script line k + 1 and recipe line section.line + k
    script.write_text(_TRAP + "\n" + _script(section, values))
    cmd = [
        "chroot",
        str(rootfs),
        "/usr/bin/env",
        "-i",
        *[f"{k}={v}" for k, v in env.items()],
        "/bin/bash",
        "--posix",
        "-eE",
        f"/{_BUILD_DIR}/{script.name}",
    ]
    _log(f"%{section.name}: running ({defn.path}:{section.line})")
    out = open(log, "a") if log else subprocess.PIPE  # noqa: SIM115 - closed below
    try:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.PIPE, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise DefinitionError(
            f"{defn.path}:{section.line}: %{section.name} did not finish in {timeout:.0f}s"
        ) from exc
    finally:
        if log:
            out.close()  # type: ignore[union-attr]
    stderr = proc.stderr or ""
    if log:
        with open(log, "a") as fh:
            fh.write(stderr)
    if proc.returncode != 0:
        found = re.findall(r"hvdcore-rootfs-failed line=(\d+) rc=(\d+) cmd=(.*)", stderr)
        tail = "\n".join(
            line
            for line in stderr.splitlines()[-12:]
            if not line.startswith("hvdcore-rootfs-failed")
        )
        if found:
            line, rc, command = found[0]
            where = section.line + int(line) - 1
            raise DefinitionError(
                f"{defn.path}:{where}: %{section.name} failed: '{command}' "
                f"exited with status {rc}\n{tail}"
            )
        raise DefinitionError(
            f"{defn.path}:{section.line}: %{section.name} failed with exit "
            f"status {proc.returncode}\n{tail}"
        )
    _log(f"%{section.name}: done")


def _write_metadata(defn: Definition, rootfs: Path, values: dict[str, str]) -> None:
    meta = rootfs / _META
    (meta / "env").mkdir(parents=True, exist_ok=True)
    stage = defn.final
    env = stage.section("environment")
    (meta / "env" / "90-environment.sh").write_text(
        "#!/bin/sh\n" + (_script(env, values) if env else "")
    )
    for name, fname in (
        ("runscript", "runscript"),
        ("test", "test"),
        ("startscript", "startscript"),
    ):
        sec = stage.section(name)
        path = meta / fname
        path.write_text("#!/bin/sh\n" + (_script(sec, values) if sec else ""))
        path.chmod(0o755)
    labels: dict[str, str] = {}
    sec = stage.section("labels")
    if sec:
        for _, text in sec.lines():
            parts = substitute(text.strip(), values)[0].split(None, 1)
            if parts and not parts[0].startswith("#"):
                labels[parts[0]] = parts[1] if len(parts) > 1 else ""
    (meta / "labels.json").write_text(json.dumps(labels, indent=2) + "\n")
    help_sec = stage.section("help")
    (meta / "runscript.help").write_text(help_sec.text if help_sec else "")


def build(
    def_path: str | Path,
    rootfs: str | Path,
    *,
    context: str | Path = ".",
    build_args: dict[str, str] | None = None,
    cache: str | Path | None = None,
    host_pip: bool = False,
    binds: Sequence[tuple[str, str]] = (),
    log: str | Path | None = None,
    timeout: float = 1800,
) -> Definition:
    """Build the recipe at ``def_path`` into the directory ``rootfs`` (replaced if present).

    The recipe is checked first (:func:`containers.recipetools.defcheck.check_definition`, hvdcore
    policy off); any problem, a failing section or an unsupported base raises
    :class:`~containers.recipetools.deffile.DefinitionError` whose message starts with ``file:line:``.
    """
    defn = parse(def_path)
    ctx = Path(context).resolve()
    args = dict(build_args or {})
    problems = check_definition(defn, ctx, policy=False, build_args=args)
    if problems:
        raise DefinitionError("recipe rejected:\n" + "\n".join(str(p) for p in problems))
    values = {**defn.arguments(), **args}
    suite, mirror = base_suite(defn)
    mirror = mirror or apt_mirror(suite)
    root = Path(rootfs).resolve()
    remove_rootfs(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    if cache:
        base = _base(suite, mirror, Path(cache).resolve())
        _log(f"copying base into {root}")
        subprocess.run(["cp", "-a", "--reflink=auto", str(base), str(root)], check=True)
    else:  # no cache: debootstrap next to the target and move it into place
        _base(suite, mirror, None, where=root.parent).rename(root)
    _host_files(root)
    stage = defn.final
    env = {
        "PATH": DEFAULT_PATH,
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "APPTAINER_ROOTFS": "/",
        "SINGULARITY_ROOTFS": "/",
    }
    all_binds = list(binds)
    if host_pip:
        pip_env, pip_paths = host_pip_config()
        cert = pip_env.pop("PIP_CERT", None)
        if cert and os.path.isfile(cert):
            (root / _BUILD_DIR).mkdir(exist_ok=True)
            shutil.copyfile(cert, root / _BUILD_DIR / "host-ca.pem")
            pip_env["PIP_CERT"] = f"/{_BUILD_DIR}/host-ca.pem"
        env.update(pip_env)
        all_binds += [(p, p) for p in pip_paths]
    setup = stage.section("setup")
    if setup is not None:
        _log("%setup: running on the host")
        host_env = {**os.environ, "APPTAINER_ROOTFS": str(root), "SINGULARITY_ROOTFS": str(root)}
        proc = subprocess.run(
            ["/bin/bash", "--posix", "-e", "-c", _script(setup, values)],
            env=host_env,
            cwd=ctx,
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise DefinitionError(
                f"{defn.path}:{setup.line}: %setup failed with exit status "
                f"{proc.returncode}\n{proc.stderr[-2000:]}"
            )
    _copy_files(defn, root, ctx, values)
    post = stage.section("post")
    with _mounted(root, all_binds):
        if post is not None:
            _run_section(defn, post, root, values, env, Path(log) if log else None, timeout)
    _write_metadata(defn, root, values)
    shutil.rmtree(root / _BUILD_DIR, ignore_errors=True)
    return defn


def _container_cmd(rootfs: Path, script: str, extra_env: dict[str, str]) -> list[str]:
    env = {
        "PATH": DEFAULT_PATH,
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        # the chroot runs as root; Apptainer would run as the calling user
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        **extra_env,
    }
    prelude = f'for f in /{_META}/env/*.sh; do . "$f"; done; '
    return [
        "chroot",
        str(rootfs),
        "/usr/bin/env",
        "-i",
        *[f"{k}={v}" for k, v in env.items()],
        "/bin/sh",
        "-c",
        prelude + script,
    ]


def run_in(
    rootfs: str | Path,
    argv: Sequence[str],
    env: dict[str, str] | None = None,
    timeout: float = 600,
    binds: Sequence[tuple[str, str]] = (),
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in the rootfs with its %environment (like ``apptainer exec --bind``)."""
    import shlex

    root = Path(rootfs)
    _host_files(root)
    with _mounted(root, binds):
        return subprocess.run(
            _container_cmd(root, "exec " + shlex.join(argv), env or {}),
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def run_test(
    rootfs: str | Path,
    env: dict[str, str] | None = None,
    timeout: float = 600,
    binds: Sequence[tuple[str, str]] = (),
) -> subprocess.CompletedProcess[str]:
    """Run the image's %test with its %environment (like ``apptainer test --bind``)."""
    root = Path(rootfs)
    _host_files(root)
    with _mounted(root, binds):
        return subprocess.run(
            _container_cmd(root, f"exec /bin/sh -e /{_META}/test", env or {}),
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def _kv(items: Sequence[str], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        if "=" not in item:
            raise SystemExit(f"{what} '{item}' must be NAME=VALUE")
        k, v = item.split("=", 1)
        out[k] = v
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point: ``build``, ``test`` or ``exec``."""
    ap = argparse.ArgumentParser(
        prog="python -m containers.recipetools.rootfs", description=__doc__.split("\n")[0]
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build a recipe into a rootfs directory")
    b.add_argument("definition")
    b.add_argument("--rootfs", required=True)
    b.add_argument("--context", default=".")
    b.add_argument("--cache", help="directory caching the debootstrap base (outside the repo)")
    b.add_argument("--build-arg", action="append", default=[], metavar="NAME=VALUE")
    b.add_argument(
        "--bind",
        action="append",
        default=[],
        metavar="SRC[:DST]",
        help="read-only bind into the rootfs during %%post",
    )
    b.add_argument("--host-pip", action="store_true", help="use this machine's pip configuration")
    b.add_argument("--log", help="append %%post output to this file")
    t = sub.add_parser("test", help="run the image's %%test")
    t.add_argument("--rootfs", required=True)
    e = sub.add_parser("exec", help="run a command in the rootfs with its %%environment")
    e.add_argument("--rootfs", required=True)
    for p in (t, e):
        p.add_argument(
            "--bind",
            action="append",
            default=[],
            metavar="SRC[:DST]",
            help="read-only bind into the rootfs (like apptainer --bind)",
        )
    e.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "build":
            binds = [(s.split(":", 1)[0], s.split(":", 1)[-1]) for s in args.bind]
            build(
                args.definition,
                args.rootfs,
                context=args.context,
                build_args=_kv(args.build_arg, "--build-arg"),
                cache=args.cache,
                host_pip=args.host_pip,
                binds=binds,
                log=args.log,
            )
            return 0
        binds = [(s.split(":", 1)[0], s.split(":", 1)[-1]) for s in args.bind]
        proc = (
            run_test(args.rootfs, binds=binds)
            if args.cmd == "test"
            else run_in(args.rootfs, [a for a in args.command if a != "--"], binds=binds)
        )
    except DefinitionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
