"""A real EasyBuild install of hvdcore into a temporary prefix, then used from a clean shell.

The SYSTEM-toolchain easyconfig is built against the test's own virtualenv, given to EasyBuild as
the external module ``Python/<major.minor>`` (``--external-modules-metadata``): build the sdist,
inject its checksum, ``eb`` it, then ``module load`` it in a fresh shell, run
``hvdcorerun --check-build --require mpi,torch`` and a 2-rank allreduce through ``hvdcorerun``, and
check that ``module purge`` leaves nothing behind. The install carries the examples
(``share/hvdcore/examples``) and the licence (``share/hvdcore/LICENSE``): the ReFrame MNIST check, discovering the module, runs them. The bad-input cases prove the sanity check
checks: an sdist without ``hvdcore/torch`` and a wrong checksum must both fail the install.
"""

from __future__ import annotations

import re
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from discovered_runs import assert_ran_the_module, mnist_cases, run_discovered
from lmod_shell import (
    EB,
    ROOT,
    build_sdist_module,
    drop_root_command,
    eb_workdir,
    env_difference,
    env_file,
    lmod_shell,
    module_table,
    require_eb,
    require_venv,
    run_eb,
)
from reframe_helpers import ONE_CHUNK_MNIST, QUICK_TORCH_MNIST

pytestmark = [pytest.mark.easybuild, pytest.mark.lmod, pytest.mark.torch, pytest.mark.mpi]

#: the committed SYSTEM easyconfig this checkout's is made from (on main, between releases, the
#: newest release's: build_sdist retargets it to the development version)
EC = next(ec for ec in build_sdist_module().current_easyconfigs()
          if ec.name.endswith("-Python-3.11.eb"))
#: the checkout's version: the sdist's, the installed easyconfig's and the module's
VERSION = build_sdist_module().project_version()
PROGRAM = ROOT / "tests" / "programs" / "easybuild_allreduce.py"
INSTALL_TARGET_S = 60.0
PYSHORT = f"{sys.version_info[0]}.{sys.version_info[1]}"
PYFULL = ".".join(map(str, sys.version_info[:3]))


@dataclass
class Site:
    """An EasyBuild installation made by the fixture."""

    base: Path
    ext_modules: Path  # where the external Python module lives
    modules: Path  # EasyBuild's modules/all
    module: str  # hvdcore/VERSION-Python-3.x
    easyconfig: Path  # the easyconfig with the injected checksum
    sources: Path
    proc: object
    seconds: float


def _prepare(base: Path, exclude: tuple[str, ...] = ()) -> tuple[Path, Path, Path, Path]:
    """sdist + easyconfig with its checksum + external Python module and its metadata."""
    bs = build_sdist_module()
    sources = base / "sources"
    bs.build_sdist(sources, exclude=exclude, python=sys.executable)
    ec = bs.retarget(EC, VERSION, base / "ecs")
    ec = bs.inject_checksums([ec], sources, eb=str(EB), python=sys.executable)[0]
    if PYSHORT != "3.11":  # the shipped file names Python/3.11; follow the venv's Python
        text = ec.read_text().replace("-Python-3.11", f"-Python-{PYSHORT}")
        text = text.replace("'Python/3.11'", f"'Python/{PYSHORT}'")
        new = ec.with_name(f"hvdcore-{VERSION}-Python-{PYSHORT}.eb")
        new.write_text(text)
        ec.unlink()
        ec = new
    ext = base / "external-modules"
    (ext / "Python").mkdir(parents=True)
    (ext / "Python" / f"{PYSHORT}.lua").write_text(
        f'whatis("Python {PYFULL}: the venv {sys.prefix} (torch, mpi4py, numpy)")\n'
        f'prepend_path("PATH", "{Path(sys.prefix) / "bin"}")\n'
    )
    meta = base / "external-modules.cfg"
    meta.write_text(
        f"[Python/{PYSHORT}]\nname = Python\nversion = {PYFULL}\nprefix = {sys.prefix}\n"
    )
    return sources, ec, ext, meta


def _install(base: Path, sources: Path, ec: Path, ext: Path, meta: Path):
    start = time.monotonic()
    proc = run_eb(
        [
            f"--installpath={base / 'eb'}",
            f"--sourcepath={sources}",
            f"--external-modules-metadata={meta}",
            str(ec),
        ],
        base,
        extra_env={"MODULEPATH": str(ext)},
        unprivileged=True,
    )
    return proc, time.monotonic() - start


@pytest.fixture
def eb_dir() -> Iterator[Path]:
    """A work directory that eb can use also after dropping root (see lmod_shell.eb_workdir)."""
    path = eb_workdir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    require_eb()
    require_venv()
    base = eb_workdir("hvdcore-eb-install-")
    sources, ec, ext, meta = _prepare(base)
    proc, seconds = _install(base, sources, ec, ext, meta)
    who = "as nobody" if drop_root_command() else "as the current user"
    print(f"\neb install of {ec.name} ({who}): {seconds:.1f} s (target < {INSTALL_TARGET_S:.0f} s)")
    yield Site(base, ext, base / "eb" / "modules" / "all",
               f"hvdcore/{VERSION}-Python-{PYSHORT}",
               ec, sources, proc, seconds)
    shutil.rmtree(base, ignore_errors=True)


def _ok(site: Site) -> None:
    if site.proc.returncode != 0:
        pytest.fail(f"eb install failed:\n{site.proc.stdout[-6000:]}\n{site.proc.stderr[-3000:]}")


def test_install_succeeds_and_sanity_check_runs_check_build(site: Site,
                                                            record_property) -> None:
    _ok(site)
    out = site.proc.stdout
    record_property("eb_install_seconds", round(site.seconds, 1))
    assert "COMPLETED: Installation ended successfully" in out
    assert "result for command 'hvdcorerun --check-build --require mpi,torch': OK" in out
    assert "result for command 'python -c 'import hvdcore.torch'': OK" in out
    assert f"directory 'lib/python{PYSHORT}/site-packages/hvdcore/torch' found: OK" in out
    assert "file 'share/hvdcore/examples/pytorch_mnist.py' found: OK" in out
    assert "file 'share/hvdcore/LICENSE' found: OK" in out
    # How long the install took is reported (printed by the fixture, and the property above),
    # never asserted: it depends on the machine's load. run_eb's timeout is the hang guard.
    print(f"eb install took {site.seconds:.1f} s (target < {INSTALL_TARGET_S:.0f} s)")


def test_generated_module_depends_on_external_python(site: Site) -> None:
    _ok(site)
    text = (site.modules / "hvdcore" / f"{VERSION}-Python-{PYSHORT}.lua").read_text()
    assert f'depends_on("Python/{PYSHORT}")' in text
    assert f'"python{PYSHORT}", "site-packages"' in text
    assert 'conflict("hvdcore")' in text


def test_clean_shell_module_load_and_check_build(site: Site, tmp_path: Path) -> None:
    _ok(site)
    proc = lmod_shell(
        f"""set -e
module use {site.ext_modules}
module use {site.modules}
module load {site.module}
module list 2>&1
echo "HVDCORERUN=$(command -v hvdcorerun)"
hvdcorerun --check-build --require mpi,torch
python -c 'import hvdcore, hvdcore.torch; print("IMPORTED", hvdcore.__file__)'
set +e
hvdcorerun --check-build --require nccl > nccl.out 2>&1
echo "NCCL_RC=$?"
""",
        cwd=tmp_path,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    # a feature this CPU-only Python lacks is refused (non-zero exit), and named
    assert re.search(r"^NCCL_RC=[1-9]", out, re.M), out
    root = site.base / "eb" / "software" / "hvdcore"
    assert f"HVDCORERUN={root}" in out
    # the sdist carries setup.py and the C source: the install built its compiled hot path
    assert re.search(rf"Repeated host allreduces: compiled \({re.escape(str(root))}/", out), out
    assert re.search(rf"IMPORTED {re.escape(str(root))}/\S+/hvdcore/__init__.py", out), out
    assert f"Python/{PYSHORT}" in out  # dependency loaded by the module
    assert "nccl" in (tmp_path / "nccl.out").read_text().lower()


def test_two_rank_allreduce_through_hvdcorerun(site: Site, tmp_path: Path) -> None:
    _ok(site)
    proc = lmod_shell(
        f"module use {site.ext_modules} {site.modules}\nmodule load {site.module}\n"
        f"hvdcorerun -np 2 python {PROGRAM}",
        cwd=tmp_path,
        timeout=240,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    lines = sorted(re.findall(r"^\[1,(\d)\]<stdout>:rank \1/2 (\w+) sum=\[([^\]]*)\] "
                              r"hvdcore=(\S+)$", out, re.M))
    assert [line[0] for line in lines] == ["0", "1"], out
    want = [float(3 * i) for i in range(12)]  # arange(12) * (1 + 2)
    for _, status, total, path in lines:
        assert status == "OK", out
        assert [float(x) for x in total.split(",")] == want
        assert path.startswith(str(site.base / "eb" / "software")), path


def test_module_purge_leaves_nothing_behind(site: Site) -> None:
    _ok(site)
    proc = lmod_shell(
        f"""module use {site.ext_modules} {site.modules}
env > before.env
module load {site.module}
env > loaded.env
module purge
env > after.env
""",
        cwd=site.base,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    before, loaded, after = (env_file(site.base / f"{n}.env") for n in ("before", "loaded", "after"))
    assert "EBROOTHVDCORE" in loaded and "hvdcore" in loaded["PATH"]  # the load did something
    assert 'mT = {}' not in module_table(loaded)
    assert env_difference(before, after) == {}
    assert "mT = {}" in module_table(after)
    assert f"hvdcore/{VERSION}" not in module_table(after)


def test_wrong_checksum_fails_the_install(site: Site, eb_dir: Path) -> None:
    _ok(site)
    text = site.easyconfig.read_text()
    good = re.search(r"checksums = \['([0-9a-f]{64})'\]", text).group(1)
    bad = eb_dir / site.easyconfig.name
    bad.write_text(text.replace(good, "f" * 64))
    proc = run_eb(
        [f"--installpath={eb_dir / 'eb'}", f"--sourcepath={site.sources}",
         f"--external-modules-metadata={site.base / 'external-modules.cfg'}", str(bad)],
        eb_dir,
        extra_env={"MODULEPATH": str(site.ext_modules)},
        unprivileged=True,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    sdist = re.escape(f"hvdcore-{VERSION}.tar.gz")
    assert re.search(rf"Checksum verification for .*{sdist}.* failed", out), out


def test_sdist_without_torch_binding_fails_the_sanity_check(eb_dir: Path) -> None:
    require_eb()
    require_venv()
    sources, ec, ext, meta = _prepare(eb_dir, exclude=("hvdcore/torch",))
    proc, _ = _install(eb_dir, sources, ec, ext, meta)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "Sanity check failed" in out, out
    assert "hvdcore/torch" in out  # the sanity_check_paths entry
    assert "import hvdcore.torch" in out  # the import command
    assert not list((eb_dir / "eb" / "modules").glob("all/hvdcore/*.lua")), "module was written"


def test_install_carries_the_examples_and_the_licence(site: Site) -> None:
    _ok(site)
    share = site.base / "eb" / "software" / "hvdcore" / f"{VERSION}-Python-{PYSHORT}" / "share" \
        / "hvdcore"
    for example in sorted((ROOT / "examples").glob("*.py")):
        assert (share / "examples" / example.name).read_bytes() == example.read_bytes(), example.name
    assert (share / "LICENSE").read_bytes() == (ROOT / "LICENSE").read_bytes()


@pytest.mark.reframe
@pytest.mark.slow
def test_mnist_check_runs_the_installed_examples(site: Site, tmp_path: Path) -> None:
    """The MNIST check discovers the eb-built module and trains with the examples it installed."""
    _ok(site)
    # The DDP peer trains too (the check's sanity wants it finished), once (ONE_CHUNK_MNIST):
    # the only run of the peer from a module's examples (test_reframe_modules.py leaves it out).
    run = run_discovered(["hvdcore_mnist.py"], [site.ext_modules, site.modules], tmp_path,
                         options=[*QUICK_TORCH_MNIST, *ONE_CHUNK_MNIST])
    assert sorted(run.cases) == mnist_cases(site.module, "torch"), run.out[-3000:]
    root = site.base / "eb" / "software" / "hvdcore" / f"{VERSION}-Python-{PYSHORT}"
    assert_ran_the_module(run, site.module, root / "share" / "hvdcore" / "examples")
