"""The hand-written Lmod modules in modules/, with real Lmod.

A small EESSI-style module tree is made per test session: Python/3.11.3-GCCcore-12.3.0,
mpi4py/3.1.4-gompi-2023a and PyTorch/2.1.2-foss-2023a modules that put the test's virtualenv
(which has torch and mpi4py) on PATH, standing in for EESSI's modules (EESSI is not reachable
here). hvdcore is installed into the tree with ``modules/install.sh prefix`` from a real sdist,
then loaded, used, purged; the Apptainer module is loaded and its wrapper exercised up to the point
where the apptainer binary is needed. ``install.sh`` runs with this test's own Python, which must
come out of all this unchanged (hvdcore still installed as before, editable from this checkout).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest
from lmod_shell import (
    CHECK_SYNTAX,
    CLEAN_PATH,
    EESSI_STAND_INS,
    ROOT,
    VENV_BIN,
    PythonState,
    clean_env,
    env_difference,
    env_file,
    install_hvdcore_tree,
    lmod_shell,
    module_table,
    python_state,
    require_lmod,
    require_module_python,
    write_stand_in_modules,
)

pytestmark = [pytest.mark.lmod]

MODULES = ROOT / "modules"
PREFIX_MOD = "hvdcore/0.2.0-foss-2023a"
APPTAINER_MOD = "hvdcore/0.2.0-apptainer"
TF_MOD = "hvdcore/0.2.0-foss-2023a-TensorFlow-2.13.0"
DEPS = EESSI_STAND_INS


@dataclass
class Tree:
    """An EESSI-layout prefix: <path>/modules/all and <path>/software."""

    path: Path

    @property
    def modules(self) -> Path:
        return self.path / "modules" / "all"


@pytest.fixture(scope="module")
def python_before() -> PythonState:
    """This test's Python before any module test ran (and before ``tree`` installs)."""
    return python_state()


@pytest.fixture(scope="module")
def tree(python_before: PythonState, tmp_path_factory: pytest.TempPathFactory) -> Tree:
    return Tree(install_hvdcore_tree(tmp_path_factory.mktemp("eessi"), PREFIX_MOD))


def test_module_tree_syntax_is_clean() -> None:
    require_lmod()
    proc = subprocess.run([CHECK_SYNTAX, str(MODULES / "all")], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "No errors found" in proc.stdout + proc.stderr


def test_module_tree_syntax_check_catches_an_error(tmp_path: Path) -> None:
    require_lmod()
    broken = tmp_path / "all" / "hvdcore" / "0.2.0-foss-2023a.lua"
    broken.parent.mkdir(parents=True)
    text = (MODULES / "all" / "hvdcore" / "0.2.0-foss-2023a.lua").read_text()
    broken.write_text(text.replace('conflict("hvdcore")', 'conflict("hvdcore"'))
    proc = subprocess.run([CHECK_SYNTAX, str(tmp_path / "all")], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode != 0
    assert "0.2.0-foss-2023a.lua" in proc.stdout + proc.stderr


def test_spider_lists_every_module() -> None:
    require_lmod()
    proc = lmod_shell(f"module use {MODULES / 'all'}\nmodule spider hvdcore")
    out = proc.stdout + proc.stderr
    assert PREFIX_MOD in out and APPTAINER_MOD in out and TF_MOD in out, out
    proc = lmod_shell(f"module use {MODULES / 'all'}\nmodule whatis {PREFIX_MOD}")
    assert "Horovod-compatible" in proc.stdout + proc.stderr
    proc = lmod_shell(f"module use {MODULES / 'all'}\nmodule whatis {TF_MOD}")
    assert "(TensorFlow and Keras bindings)" in proc.stdout + proc.stderr


def test_load_brings_dependencies_import_and_check_build(tree: Tree) -> None:
    proc = lmod_shell(
        f"""set -e
module use {tree.modules}
module load {PREFIX_MOD}
module --terse list 2>&1
echo "ROOT=$EBROOTHVDCORE VERSION=$EBVERSIONHVDCORE"
python -c 'import hvdcore, hvdcore.torch; print("IMPORTED", hvdcore.__file__)'
hvdcorerun --check-build --require mpi,torch
"""
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    loaded = set(re.findall(r"^(\S+/\S+)$", out, re.M))
    assert {PREFIX_MOD, *DEPS} <= loaded, out
    root = tree.path / "software" / "hvdcore" / "0.2.0-foss-2023a"
    assert f"ROOT={root} VERSION=0.2.0" in out
    assert f"IMPORTED {root}/lib/python3.11/site-packages/hvdcore/__init__.py" in out


def test_two_rank_allreduce_through_the_module(tree: Tree, tmp_path: Path) -> None:
    proc = lmod_shell(
        f"module use {tree.modules}\nmodule load {PREFIX_MOD}\n"
        f"hvdcorerun -np 2 python {ROOT / 'tests' / 'programs' / 'easybuild_allreduce.py'}",
        cwd=tmp_path,
        timeout=240,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    # each line tagged with its rank, as horovodrun's (Open MPI --tag-output)
    assert sorted(re.findall(r"^\[1,(\d)\]<stdout>:rank \1/2 OK ", out, re.M)) == ["0", "1"], out


def test_purge_leaves_nothing_behind(tree: Tree) -> None:
    proc = lmod_shell(
        f"""module use {tree.modules}
env > before.env
module load {PREFIX_MOD}
env > loaded.env
module purge
env > after.env
""",
        cwd=tree.path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    before, loaded, after = (env_file(tree.path / f"{n}.env") for n in ("before", "loaded", "after"))
    assert loaded.get("EBROOTPYTORCH") and loaded.get("EBROOTHVDCORE")
    assert "site-packages" in loaded.get("PYTHONPATH", "")
    assert env_difference(before, after) == {}
    assert "mT = {}" in module_table(after)


def test_missing_dependency_is_lmods_error_not_a_half_load(tree: Tree, tmp_path: Path) -> None:
    partial = Tree(tmp_path / "stack")
    write_stand_in_modules(partial.path, {n: DEPS[n] for n in (
        "Python/3.11.3-GCCcore-12.3.0", "mpi4py/3.1.4-gompi-2023a")})
    shutil.copytree(tree.modules / "hvdcore", partial.modules / "hvdcore")
    shutil.copytree(tree.path / "software", partial.path / "software")
    proc = lmod_shell(
        f"""module use {partial.modules}
env > before.env
module load {PREFIX_MOD}
echo "RC=$?"
env > after.env
module --terse list 2>&1
""",
        cwd=tmp_path,
    )
    out = proc.stdout + proc.stderr
    assert re.search(r'module\(s\) are unknown:\s*"PyTorch/2\.1\.2-foss-2023a"', out), out
    assert "RC=0" not in out
    before, after = env_file(tmp_path / "before.env"), env_file(tmp_path / "after.env")
    assert env_difference(before, after) == {}, "a failed load changed the environment"
    assert "hvdcore" not in module_table(after) and "mpi4py" not in module_table(after)


def test_one_hvdcore_at_a_time(tree: Tree, tmp_path: Path) -> None:
    _install_apptainer_module(tree, tmp_path)
    proc = lmod_shell(
        f"""module use {tree.modules}
module load {PREFIX_MOD}
module load {APPTAINER_MOD} 2>&1
echo LOADED:
module --terse list 2>&1
"""
    )
    out = proc.stdout + proc.stderr
    assert f"{PREFIX_MOD} => {APPTAINER_MOD}" in out, out  # Lmod swapped them
    loaded = out.split("LOADED:")[-1].split()
    assert APPTAINER_MOD in loaded and PREFIX_MOD not in loaded, out


def test_module_outside_its_tree_gives_a_clear_error(tmp_path: Path) -> None:
    require_lmod()
    (tmp_path / "hvdcore").mkdir()
    shutil.copy(MODULES / "all" / "hvdcore" / "0.2.0-foss-2023a.lua", tmp_path / "hvdcore")
    proc = lmod_shell(f"module use {tmp_path}\nmodule load {PREFIX_MOD}")
    message = " ".join((proc.stdout + proc.stderr).split())  # Lmod wraps long lines
    assert "is not in a <prefix>/modules/all/hvdcore/ tree" in message, message
    assert "install it with modules/install.sh" in message


def _install_apptainer_module(tree: Tree, tmp_path: Path) -> Path:
    """Install the Apptainer module into the tree. The image is the one named by
    HVDC_TEST_IMAGE when set; otherwise an empty placeholder file, which the wrapper never
    runs (these tests stop where apptainer itself would start)."""
    image = os.environ.get("HVDC_TEST_IMAGE")
    if not image:
        image = str(tmp_path / "placeholder.sif")
        Path(image).write_bytes(b"")
    proc = subprocess.run(
        [str(MODULES / "install.sh"), "apptainer", str(tree.path), image],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return tree.path / "software" / "hvdcore" / "0.2.0-apptainer"


def test_apptainer_module_wraps_commands(tree: Tree, tmp_path: Path) -> None:
    root = _install_apptainer_module(tree, tmp_path)
    proc = lmod_shell(
        f"""module use {tree.modules}
module load {APPTAINER_MOD}
for c in hvdcorerun python python3; do echo "WHICH $c=$(command -v $c)"; done
echo "IMAGE=$HVDC_IMAGE"
HVDC_DRYRUN=1 hvdcorerun -np 2 python 'my script.py'
HVDC_DRYRUN=1 HVDC_APPTAINER_OPTS='--cleanenv --bind /scratch' python3 -c 'print(1)'
""",
        cwd=tmp_path,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    for cmd in ("hvdcorerun", "python", "python3"):
        assert f"WHICH {cmd}={root}/bin/{cmd}" in out
    assert f"IMAGE={root}/hvdcore.sif" in out
    commands = [shlex.split(line) for line in out.splitlines() if line.startswith("apptainer ")]
    assert len(commands) == 2, out
    gpu = ["--nv"] if os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/nvidia0") else []
    image = f"{root}/hvdcore.sif"
    binds = ["--bind", f"{tmp_path},/tmp", "--pwd", str(tmp_path)]
    assert commands[0] == ["apptainer", "exec", *gpu, *binds, image,
                           "hvdcorerun", "-np", "2", "python", "my script.py"]
    assert commands[1] == ["apptainer", "exec", *gpu, *binds, "--cleanenv", "--bind", "/scratch",
                           image, "python3", "-c", "print(1)"]


def test_apptainer_wrapper_without_apptainer_says_what_to_do(tree: Tree, tmp_path: Path) -> None:
    if shutil.which("apptainer") or shutil.which("singularity"):
        pytest.skip("apptainer is installed here; the missing-runtime error cannot be provoked")
    _install_apptainer_module(tree, tmp_path)
    proc = lmod_shell(f"module use {tree.modules}\nmodule load {APPTAINER_MOD}\n"
                      "hvdcorerun --check-build")
    assert proc.returncode == 127
    assert "neither apptainer nor singularity is on PATH" in proc.stderr


def test_apptainer_runs_check_build_inside_the_image(tree: Tree, tmp_path: Path) -> None:
    if not (shutil.which("apptainer") or shutil.which("singularity")):
        pytest.skip("apptainer/singularity not installed (not packaged for Debian 12 or PyPI)")
    if not os.environ.get("HVDC_TEST_IMAGE"):
        pytest.skip("no hvdcore image: build one from containers/ and set HVDC_TEST_IMAGE")
    _install_apptainer_module(tree, tmp_path)
    proc = lmod_shell(f"module use {tree.modules}\nmodule load {APPTAINER_MOD}\n"
                      "hvdcorerun --check-build --require mpi,torch", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_reinstall_replaces_the_earlier_install(tree: Tree, tmp_path: Path) -> None:
    """Running ``install.sh prefix`` again over an install leaves no file of the earlier one; a
    failed reinstall puts the earlier one back."""
    stack = tmp_path / "stack"
    shutil.copytree(tree.path / "software", stack / "software", symlinks=True)
    root = stack / "software" / "hvdcore" / "0.2.0-foss-2023a"
    (root / "lib" / "python3.11" / "site-packages" / "hvdcore" / "stale.py").write_text("")
    env = clean_env({"PYTHON": sys.executable})
    bad = tmp_path / "hvdcore-0.2.0.tar.gz"
    bad.write_bytes(b"not a tarball")
    install = [str(MODULES / "install.sh"), "prefix", str(stack)]
    proc = subprocess.run([*install, str(bad)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and "pip could not install" in proc.stderr, proc.stderr
    assert (root / "lib" / "python3.11" / "site-packages" / "hvdcore" / "stale.py").exists()
    assert (root / "bin" / "hvdcorerun").exists()
    assert not list(root.parent.glob(f"{root.name}.previous.*")), "the earlier install was left"
    sdist, = (tree.path.parent / "dist").glob("hvdcore-*.tar.gz")  # the checkout's version
    proc = subprocess.run([*install, str(sdist)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (root / "lib" / "python3.11" / "site-packages" / "hvdcore" / "stale.py").exists()
    assert (root / "bin" / "hvdcorerun").exists()
    assert (root / "share" / "hvdcore" / "examples" / "pytorch_mnist.py").exists()
    assert not list(root.parent.glob(f"{root.name}.previous.*")), "the earlier install was left"


@pytest.mark.parametrize("target", ["python-prefix", "site-packages", "module-loaded"])
def test_install_refuses_a_target_it_cannot_keep_apart(target: str, tmp_path: Path) -> None:
    """``install.sh prefix`` refuses, before writing anything, a PREFIX that is the running
    Python's own prefix or inside a directory it imports from, and a reinstall while the
    install it would replace is on that Python's path (the module is loaded)."""
    require_module_python()
    before = python_state()
    sdist = tmp_path / "hvdcore-0.2.0.tar.gz"
    sdist.write_bytes(b"never read: install.sh must refuse first")
    env = clean_env({"PYTHON": sys.executable})
    stack = tmp_path / "stack"
    installed = stack / "software" / "hvdcore" / "0.2.0-foss-2023a"
    if target == "python-prefix":
        prefix, untouched = Path(sys.prefix), Path(sys.prefix) / "software"
        expected = f"is the installation prefix of {sys.executable}"
    elif target == "site-packages":
        site = Path(sysconfig.get_paths()["purelib"])
        prefix = untouched = site / "hvdcore-stack"
        expected = f"is inside {site.resolve()}, a directory {sys.executable} imports from"
    else:
        site = installed / "lib" / "python3.11" / "site-packages"
        (site / "hvdcore").mkdir(parents=True)
        (site / "hvdcore" / "__init__.py").write_text("# the install in use\n")
        env["PYTHONPATH"] = str(site)
        prefix, untouched = stack, None
        expected = "module unload hvdcore"
    assert untouched is None or not untouched.exists()
    proc = subprocess.run([str(MODULES / "install.sh"), "prefix", str(prefix), str(sdist)],
                          env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    message = proc.stderr.strip()
    assert proc.returncode == 2, proc.stdout + message
    assert message.startswith("install.sh: ") and expected in message, message
    assert len(message.splitlines()) == 1, message  # one clear line, no traceback
    if untouched is not None:
        assert not untouched.exists(), f"a refused install.sh created {untouched}"
    else:
        assert (installed / "lib" / "python3.11" / "site-packages" / "hvdcore" / "__init__.py"
                ).read_text() == "# the install in use\n"
        assert not (stack / "modules").exists()
    changed = before.difference(python_state())
    assert not changed, changed


def test_running_environment_is_untouched(python_before: PythonState, tree: Tree) -> None:
    """Last of this file: after ``install.sh prefix`` with this test's Python (the ``tree``
    fixture) and every module test above, that Python still has exactly what it had: the same
    distributions, ``pip show hvdcore`` (version, location, editable project location), ``import
    hvdcore`` from the same place -- this checkout when installed editable -- and a working
    ``hvdcorerun --check-build`` in its bin/."""
    if not python_before.hvdcorerun:
        pytest.skip(f"hvdcore is not installed in {sys.prefix} (no bin/hvdcorerun): "
                    "run scripts/setup.sh")
    after = python_state()
    changed = python_before.difference(after)
    assert not changed, f"the module tests changed {sys.prefix}:\n{changed}"
    if python_before.editable_location:
        assert after.editable_location == python_before.editable_location
        assert Path(after.hvdcore_file).is_relative_to(Path(after.editable_location)), after
    proc = subprocess.run(
        ["hvdcorerun", "--check-build", "--require", "mpi,torch"],
        env=clean_env({"PATH": f"{VENV_BIN}:{CLEAN_PATH}"}), capture_output=True, text=True,
        timeout=240, cwd="/",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert shutil.which("hvdcorerun", path=f"{VENV_BIN}:{CLEAN_PATH}") == str(VENV_BIN / "hvdcorerun")
