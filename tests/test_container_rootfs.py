"""Execute the container recipes without Apptainer: a real debootstrap rootfs, %files, %post,
%environment and %test under chroot (containers.recipetools.rootfs).

The full CPU build (debootstrap + apt + pip torch/tensorflow + hvdcore sdist, then %test:
check-build and a 2-rank allreduce) takes ~3 minutes here: it is marked ``slow``. The base
rootfs is cached between runs in $CONTAINERS_ROOTFS_CACHE (default /var/tmp/hvdcore-rootfs-cache).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from containers.recipetools import rootfs
from containers.recipetools.deffile import DefinitionError, parse_text

pytestmark = pytest.mark.container

ROOT = Path(__file__).resolve().parent.parent
CPU_RECIPE = ROOT / "containers" / "hvdcore-cpu.def"
CACHE = Path(os.environ.get("CONTAINERS_ROOTFS_CACHE", "/var/tmp/hvdcore-rootfs-cache"))
BASE = "Bootstrap: docker\nFrom: debian:bookworm-20250520-slim\n"


def _can_chroot() -> str | None:
    """Why the chroot tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (debootstrap, mount and chroot)"
    if shutil.which("debootstrap") is None:
        return "debootstrap not installed (Debian package 'debootstrap'; ci/apt/containers.txt)"
    try:
        rootfs.apt_mirror("bookworm")
    except DefinitionError as exc:
        return str(exc)
    return None


needs_chroot = pytest.mark.skipif(_can_chroot() is not None, reason=str(_can_chroot()))


@pytest.fixture
def workdir():
    """A tmpfs for rootfs trees (a CPU image is 2.7 GB: writing it to memory and dropping it
    with one umount saves minutes of disk I/O), checked to hold no leftover mounts."""
    path = Path("/var/tmp") / f"hvdcore-rootfs-test-{os.getpid()}-{time.monotonic_ns()}"
    path.mkdir(parents=True)
    tmpfs = (
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8g", "tmpfs", str(path)]).returncode
        == 0
    )
    try:
        yield path
    finally:
        leftover = [m for m in rootfs.mounts_under(path) if m != str(path)]
        assert not leftover, f"mounts left behind: {leftover}"
        if tmpfs:
            subprocess.run(["umount", str(path)], check=True)
        rootfs.remove_rootfs(path)


# --- fast: mirror discovery, base mapping -------------------------------------------------


def test_apt_mirror_from_deb822_and_one_line_sources(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text(
        "# comment\ndeb [arch=amd64] http://one.invalid/debian bullseye main contrib\n"
    )
    (tmp_path / "sources.list.d" / "a.sources").write_text(
        "Types: deb\nURIs: http://two.invalid/debian-security\nSuites: bookworm-security\n"
        "Components: main\n\n"
        "Types: deb\nURIs: http://disabled.invalid/debian\nSuites: trixie\nComponents: main\n"
        "Enabled: no\n\n"
        "Types: deb deb-src\nURIs: http://two.invalid/debian/\nSuites: bookworm bookworm-updates\n"
        "Components: main\n"
    )
    assert rootfs.apt_mirror("bookworm", tmp_path) == "http://two.invalid/debian"
    assert rootfs.apt_mirror("bullseye", tmp_path) == "http://one.invalid/debian"
    # a suite no entry names: the mirror of the plain archive (not the disabled one)
    assert rootfs.apt_mirror("trixie", tmp_path) in {
        "http://one.invalid/debian",
        "http://two.invalid/debian",
    }


def test_apt_mirror_missing(tmp_path: Path) -> None:
    with pytest.raises(DefinitionError, match="no apt mirror for suite 'bookworm'"):
        rootfs.apt_mirror("bookworm", tmp_path)


def test_this_machines_mirror_is_read_not_hardcoded() -> None:
    reason = _can_chroot()
    if reason and "mirror" in reason:
        pytest.skip(reason)
    mirror = rootfs.apt_mirror("bookworm")
    assert re.match(r"^(https?|file)://", mirror)
    sources = "".join(
        p.read_text()
        for p in [Path("/etc/apt/sources.list"), *Path("/etc/apt").glob("sources.list.d/*")]
        if p.is_file()
    )
    assert mirror in sources
    # the repository never names a mirror host
    host = re.sub(r"^\w+://", "", mirror).split("/")[0]
    tracked = subprocess.run(
        ["git", "grep", "-l", "-F", host], cwd=ROOT, capture_output=True, text=True
    )
    assert tracked.stdout == "", f"mirror host {host} written into: {tracked.stdout}"


@pytest.mark.parametrize(
    ("ref", "suite"),
    [
        ("debian:bookworm-20250520-slim", "bookworm"),
        ("debian:12.11", "bookworm"),
        ("docker.io/library/debian:bullseye-20240513", "bullseye"),
        ("debian:13.1-slim", "trixie"),
    ],
)
def test_base_suite_for_debian_images(ref: str, suite: str) -> None:
    defn = parse_text(f"Bootstrap: docker\nFrom: {ref}\n%post\n    true\n", "x.def")
    assert rootfs.base_suite(defn) == (suite, None)


def test_base_suite_rejects_other_images_with_line() -> None:
    defn = parse_text(
        "# x\nBootstrap: docker\nFrom: nvcr.io/nvidia/pytorch:24.12-py3\n", "cuda.def"
    )
    with pytest.raises(DefinitionError, match=r"^cuda\.def:2: base .* cannot be emulated"):
        rootfs.base_suite(defn)


def test_build_rejects_bad_recipe_before_doing_anything(tmp_path: Path) -> None:
    recipe = tmp_path / "bad.def"
    recipe.write_text(BASE + "%postt\n    echo never\n%files\n    missing.txt /x\n")
    with pytest.raises(DefinitionError) as info:
        rootfs.build(recipe, tmp_path / "rootfs", context=tmp_path)
    msg = str(info.value)
    assert f"{recipe}:3: DEF001 unknown section '%postt'" in msg
    assert f"{recipe}:6: DEF005" in msg
    assert not (tmp_path / "rootfs").exists()


def test_remove_rootfs_refuses_mounted_tree(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to mount")
    target = tmp_path / "tree" / "proc"
    target.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(target)], check=True)
    try:
        with pytest.raises(DefinitionError, match="still mounted"):
            rootfs.remove_rootfs(tmp_path / "tree")
        assert target.is_dir()
    finally:
        subprocess.run(["umount", str(target)], check=True)
    rootfs.remove_rootfs(tmp_path / "tree")
    assert not (tmp_path / "tree").exists()


# --- chroot: a small recipe (base from the cache) ------------------------------------------


@needs_chroot
@pytest.mark.slow
def test_failing_post_is_reported_with_file_line(workdir: Path) -> None:
    recipe = workdir / "fail.def"
    recipe.write_text(
        BASE
        + "%files\n    payload.txt /opt/payload.txt\n"
        + "%environment\n    export GREETING=hello\n"
        + "%post\n    set -eu\n    test -f /opt/payload.txt\n    echo building\n"
        + "    ls /no/such/dir\n    echo never\n"
    )
    (workdir / "payload.txt").write_text("x\n")
    with pytest.raises(DefinitionError) as info:
        rootfs.build(recipe, workdir / "rootfs", context=workdir, cache=CACHE, timeout=300)
    msg = str(info.value)
    assert msg.startswith(f"{recipe}:11: %post failed: 'ls /no/such/dir' exited with status 2"), msg
    assert "No such file or directory" in msg
    assert not rootfs.mounts_under(workdir / "rootfs")


@needs_chroot
@pytest.mark.slow
def test_small_recipe_environment_test_and_runscript(workdir: Path) -> None:
    recipe = workdir / "ok.def"
    recipe.write_text(
        BASE
        + "%arguments\n    WHO=world\n"
        + "%files\n    payload.txt /opt/\n"
        + "%labels\n    version 9.9\n"
        + "%environment\n    export GREETING=hello\n"
        + '%post\n    echo "{{ WHO }}" > /opt/who\n'
        + '%runscript\n    echo "run: $GREETING $*"\n'
        + '%test\n    test "$GREETING" = hello\n    test "$(cat /opt/who)" = there\n'
        + "    cat /opt/payload.txt\n"
    )
    (workdir / "payload.txt").write_text("payload-ok\n")
    rootfs.build(
        recipe,
        workdir / "rootfs",
        context=workdir,
        cache=CACHE,
        build_args={"WHO": "there"},
        timeout=300,
    )
    proc = rootfs.run_test(workdir / "rootfs")
    assert proc.returncode == 0, proc.stderr
    assert "payload-ok" in proc.stdout
    run = rootfs.run_in(workdir / "rootfs", ["/bin/sh", "/.singularity.d/runscript", "a", "b"])
    assert run.stdout.strip() == "run: hello a b"
    labels = (workdir / "rootfs" / ".singularity.d" / "labels.json").read_text()
    assert '"version": "9.9"' in labels
    # a %test that fails is reported as such
    (workdir / "rootfs" / ".singularity.d" / "test").write_text("#!/bin/sh\nexit 3\n")
    assert rootfs.run_test(workdir / "rootfs").returncode == 3
    assert not rootfs.mounts_under(workdir / "rootfs")


# --- chroot: the real CPU recipe -----------------------------------------------------------


def _local_torch_wheel() -> bool:
    env, _ = rootfs.host_pip_config()
    for d in env.get("PIP_FIND_LINKS", "").split():
        if list(Path(d).glob("torch-2.13.0+cpu-*.whl")):
            return True
    return False


@needs_chroot
@pytest.mark.slow
@pytest.mark.mpi
@pytest.mark.timeout(1500)
def test_cpu_recipe_builds_and_passes_its_test(workdir: Path) -> None:
    ctx = workdir / "ctx"
    started = time.monotonic()
    proc = subprocess.run(
        ["bash", str(ROOT / "containers" / "build-sdist.sh"), str(ctx / "dist")],
        env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    shutil.copy(ROOT / "LICENSE", ctx / "LICENSE")  # the repository root is the build context
    # this machine's pip sources stand in for the public indexes (as its apt mirror does for
    # Docker Hub's debian image); with a local CPU torch wheel the CPU index is not needed
    args = {"TORCH_PIP_OPTS": ""} if _local_torch_wheel() else {}
    log = workdir / "post.log"
    try:
        rootfs.build(
            CPU_RECIPE,
            workdir / "rootfs",
            context=ctx,
            cache=CACHE,
            host_pip=True,
            build_args=args,
            log=log,
            timeout=1200,
        )
    except DefinitionError as exc:
        tail = log.read_text()[-3000:] if log.exists() else ""
        pytest.fail(f"{exc}\n--- %post log tail ---\n{tail}")
    built = time.monotonic()
    test = rootfs.run_test(workdir / "rootfs", timeout=300)
    done = time.monotonic()
    print(f"\nCPU recipe: build {built - started:.0f}s, %test {done - built:.0f}s")
    out = test.stdout + test.stderr
    assert test.returncode == 0, out[-4000:]
    assert "All required capabilities present: mpi, torch, tensorflow" in out, out[-4000:]
    licence = workdir / "rootfs" / "usr" / "share" / "doc" / "hvdcore" / "LICENSE"
    assert licence.read_bytes() == (ROOT / "LICENSE").read_bytes()
    for rank in (0, 1):
        assert f"allreduce_check: rank {rank} of 2 OK" in out, out[-4000:]
    # the runscript passes its arguments to hvdcorerun
    run = rootfs.run_in(
        workdir / "rootfs",
        ["/bin/sh", "/.singularity.d/runscript", "--dry-run", "-np", "2", "true"],
    )
    assert run.returncode == 0, run.stderr
    assert re.search(r"mpirun .*-np 2 .*true$", run.stdout.strip()), run.stdout
    assert not rootfs.mounts_under(workdir / "rootfs")


def test_cli_build_reports_file_line(tmp_path: Path) -> None:
    recipe = tmp_path / "bad.def"
    recipe.write_text("Bootstrap: docker\nFrom: debian:latest\n%post\n    true\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "containers.recipetools.rootfs",
            "build",
            str(recipe),
            "--rootfs",
            str(tmp_path / "rootfs"),
            "--context",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 1
    assert f"{recipe}:2: DEF004 unpinned base image" in proc.stderr


MAPS_PROBE = (
    "import re, hvdcore; hvdcore.init(); "
    "libs = sorted(set(re.findall(r'/\\S*libmpi\\S*', open('/proc/self/maps').read()))); "
    "import os; os.write(1, ' '.join(['rank', str(hvdcore.rank()), 'libmpi', *libs, '\\n'])"
    ".encode()); hvdcore.shutdown()"
)
# hvdcorerun's rank tag under MPICH's Hydra (-l, as horovodrun): "[R] "; the probe writes its
# line in one write, so the tag comes once
HYDRA_LINE = re.compile(r"^\[(\d+)\] (rank \1 .*?) ?$")


def _probe_lines(stdout: str) -> list[str]:
    """The probe's lines, each checked to carry its own rank's tag, without the tag."""
    return sorted(m.group(2) for ln in stdout.splitlines() if (m := HYDRA_LINE.match(ln)))


@needs_chroot
@pytest.mark.slow
@pytest.mark.mpi
@pytest.mark.timeout(1500)
def test_hostmpi_recipe_and_bind_model(workdir: Path) -> None:
    """The bind-model recipe works on its own MPICH, and a libmpi.so.12 bound at
    /opt/hostmpi/lib (as a site binds its Cray MPICH) is the library the ranks load."""
    ctx = workdir / "ctx"
    proc = subprocess.run(
        ["bash", str(ROOT / "containers" / "build-sdist.sh"), str(ctx / "dist")],
        env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    shutil.copy(ROOT / "LICENSE", ctx / "LICENSE")
    args = {"TORCH_PIP_OPTS": ""} if _local_torch_wheel() else {}
    image = workdir / "rootfs"
    started = time.monotonic()
    rootfs.build(
        ROOT / "containers" / "hvdcore-hostmpi.def",
        image,
        context=ctx,
        cache=CACHE,
        host_pip=True,
        build_args=args,
        log=workdir / "post.log",
        timeout=1200,
    )
    built = time.monotonic()
    test = rootfs.run_test(image, timeout=300)
    print(f"\nhostmpi recipe: build {built - started:.0f}s, %test {time.monotonic() - built:.0f}s")
    out = test.stdout + test.stderr
    assert test.returncode == 0, out[-4000:]
    assert re.search(r"\[X\] MPI\b.*MPICH", out), out  # the image's MPICH, not Open MPI
    assert "All required capabilities present: mpi, torch" in out, out
    assert "allreduce_check: rank 1 of 2 OK" in out, out[-4000:]
    # the bind model: an MPICH-ABI library from outside the image, bound where the recipe's
    # %help says, is the one every rank loads (here a copy of an MPICH build standing in for
    # the site's; on a cluster it is Cray MPICH or Intel MPI)
    mpich = sorted(image.glob("usr/lib/*/libmpich.so.12"))
    assert mpich, "image has no libmpich.so.12"
    hostlib = workdir / "host-mpi-lib"
    hostlib.mkdir()
    shutil.copyfile(mpich[0].resolve(), hostlib / "libmpi.so.12")
    probe = ["hvdcorerun", "--launcher", "mpirun", "-np", "2", "python", "-c", MAPS_PROBE]
    unbound = rootfs.run_in(image, probe, timeout=300)
    assert unbound.returncode == 0, unbound.stderr[-3000:]
    lines = _probe_lines(unbound.stdout)
    assert len(lines) == 2 and all("/libmpich.so.12" in ln for ln in lines), unbound.stdout
    assert "/opt/hostmpi/lib/" not in unbound.stdout
    bound = rootfs.run_in(image, probe, timeout=300, binds=[(str(hostlib), "/opt/hostmpi/lib")])
    assert bound.returncode == 0, bound.stderr[-3000:]
    lines = _probe_lines(bound.stdout)
    assert lines == [f"rank {r} libmpi /opt/hostmpi/lib/libmpi.so.12" for r in (0, 1)], bound.stdout
    assert not rootfs.mounts_under(workdir / "rootfs")
