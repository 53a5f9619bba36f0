"""Offline EasyBuild checks of easyconfigs/: --check-contrib, --dry-run --robot, easystacks,
and the broken-easyconfig cases that must fail with EasyBuild's own message.

They judge the current easyconfigs, ``build_sdist.current_easyconfigs()``: the version's own,
``hvdcore-<hvdcore.__version__>-*.eb``, or, while main carries a development version
(``0.3.0.dev0``), the newest release's, from which ``build_sdist.py`` generates the development
build's (those are checked too: EasyBuild takes the ``.dev0`` version). Not every file in
``easyconfigs/h/hvdcore/``: earlier releases' easyconfigs stay there as released
(easyconfigs/README.md) and are not edited again, so running EasyBuild over them would only add
time per release. tests/test_release.py checks them: each release's easyconfigs carry the
checksum of that release's rebuilt sdist.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from lmod_shell import ROOT, build_sdist_module, require_eb, run_eb

pytestmark = [pytest.mark.easybuild]

EC_DIR = ROOT / "easyconfigs" / "h" / "hvdcore"
EASYSTACKS = sorted((ROOT / "easyconfigs" / "easystacks").glob("*.yml"))
VERSION = build_sdist_module().project_version()  # the checkout's: its sdist's
ALL_ECS = build_sdist_module().current_easyconfigs()  # committed, not earlier releases'
EC_VERSION = build_sdist_module().easyconfig_version(ALL_ECS[0])  # VERSION, or main's release
FOSS_ECS = [ec for ec in ALL_ECS if "-foss-" in ec.name]
PYTORCH_EC = EC_DIR / f"hvdcore-{EC_VERSION}-foss-2023a-PyTorch-2.1.2.eb"

# what each variant must resolve to (the easyconfigs shipped with easybuild-easyconfigs 5.x;
# the foss/2024a, 2025a and 2025b ones checked against 5.4.1, the floor in pyproject.toml)
EXPECTED_DEPS = {
    f"hvdcore-{EC_VERSION}-foss-2023a-PyTorch-2.1.2.eb": [
        "PyTorch/2.1.2-foss-2023a", "mpi4py/3.1.4-gompi-2023a", "Python/3.11.3-GCCcore-12.3.0",
        "SciPy-bundle/2023.07-gfbf-2023a"],
    f"hvdcore-{EC_VERSION}-foss-2023a-CUDA-12.1.1-PyTorch-2.1.2.eb": [
        "PyTorch/2.1.2-foss-2023a-CUDA-12.1.1", "NCCL/2.18.3-GCCcore-12.3.0-CUDA-12.1.1",
        "CUDA/12.1.1", "mpi4py/3.1.4-gompi-2023a"],
    f"hvdcore-{EC_VERSION}-foss-2023a-TensorFlow-2.13.0.eb": [
        "TensorFlow/2.13.0-foss-2023a", "mpi4py/3.1.4-gompi-2023a"],
    f"hvdcore-{EC_VERSION}-foss-2023a-CUDA-12.1.1-TensorFlow-2.15.1.eb": [
        "TensorFlow/2.15.1-foss-2023a-CUDA-12.1.1", "CUDA/12.1.1", "mpi4py/3.1.4-gompi-2023a"],
    f"hvdcore-{EC_VERSION}-foss-2023b-PyTorch-2.3.0.eb": [
        "PyTorch/2.3.0-foss-2023b", "mpi4py/3.1.5-gompi-2023b", "Python/3.11.5-GCCcore-13.2.0",
        "SciPy-bundle/2023.11-gfbf-2023b"],
    f"hvdcore-{EC_VERSION}-foss-2023b-CUDA-12.4.0-PyTorch-2.3.0.eb": [
        "PyTorch/2.3.0-foss-2023b-CUDA-12.4.0", "NCCL/2.20.5-GCCcore-13.2.0-CUDA-12.4.0",
        "CUDA/12.4.0", "mpi4py/3.1.5-gompi-2023b"],
    f"hvdcore-{EC_VERSION}-foss-2024a-PyTorch-2.9.1.eb": [
        "PyTorch/2.9.1-foss-2024a", "mpi4py/4.0.1-gompi-2024a", "Python/3.12.3-GCCcore-13.3.0",
        "SciPy-bundle/2024.05-gfbf-2024a"],
    f"hvdcore-{EC_VERSION}-foss-2024a-CUDA-12.6.0-PyTorch-2.9.1.eb": [
        "PyTorch/2.9.1-foss-2024a-CUDA-12.6.0", "NCCL/2.27.5-GCCcore-13.3.0-CUDA-12.6.0",
        "CUDA/12.6.0", "mpi4py/4.0.1-gompi-2024a"],
    f"hvdcore-{EC_VERSION}-foss-2024a-TensorFlow-2.18.1.eb": [
        "TensorFlow/2.18.1-foss-2024a", "mpi4py/4.0.1-gompi-2024a"],
    f"hvdcore-{EC_VERSION}-foss-2024a-CUDA-12.6.0-TensorFlow-2.18.1.eb": [
        "TensorFlow/2.18.1-foss-2024a-CUDA-12.6.0", "CUDA/12.6.0", "mpi4py/4.0.1-gompi-2024a"],
    f"hvdcore-{EC_VERSION}-foss-2025a-PyTorch-2.9.1.eb": [
        "PyTorch/2.9.1-foss-2025a", "mpi4py/4.1.0-gompi-2025a", "Python/3.13.1-GCCcore-14.2.0",
        "SciPy-bundle/2025.06-gfbf-2025a"],
    f"hvdcore-{EC_VERSION}-foss-2025a-CUDA-12.8.0-PyTorch-2.9.1.eb": [
        "PyTorch/2.9.1-foss-2025a-CUDA-12.8.0", "NCCL/2.27.7-GCCcore-14.2.0-CUDA-12.8.0",
        "CUDA/12.8.0", "mpi4py/4.1.0-gompi-2025a"],
    f"hvdcore-{EC_VERSION}-foss-2025b-PyTorch-2.9.1.eb": [
        "PyTorch/2.9.1-foss-2025b", "mpi4py/4.1.0-gompi-2025b", "Python/3.13.5-GCCcore-14.3.0",
        "SciPy-bundle/2025.07-gfbf-2025b"],
    f"hvdcore-{EC_VERSION}-foss-2025b-CUDA-12.9.1-PyTorch-2.9.1.eb": [
        "PyTorch/2.9.1-foss-2025b-CUDA-12.9.1", "NCCL/2.27.7-GCCcore-14.3.0-CUDA-12.9.1",
        "CUDA/12.9.1", "mpi4py/4.1.0-gompi-2025b"],
}


@pytest.fixture(autouse=True)
def _needs_eb() -> None:
    require_eb()


def _out(proc) -> str:
    return proc.stdout + proc.stderr


def _planned_modules(output: str) -> set[str]:
    """Module names from the ' * [ ] file (module: NAME)' lines of eb --dry-run."""
    return set(re.findall(r"^ \* \[[ x]\] .*\(module: ([^)]+)\)", output, re.M))


def test_every_variant_is_shipped() -> None:
    names = {ec.name for ec in ALL_ECS}
    assert set(EXPECTED_DEPS) <= names
    assert f"hvdcore-{EC_VERSION}-Python-3.11.eb" in names
    system = f"hvdcore-{EC_VERSION}-Python-3.11.eb"
    assert names == set(EXPECTED_DEPS) | {system}, "untested variant"
    assert {ec.name for ec in FOSS_ECS} == set(EXPECTED_DEPS)


def test_check_contrib_passes_for_every_easyconfig(tmp_path: Path) -> None:
    proc = run_eb(["--check-contrib", *map(str, ALL_ECS)], tmp_path)
    out = _out(proc)
    assert proc.returncode == 0, out
    assert "All contribution checks PASSed" in out
    for ec in ALL_ECS:
        # one [PASS] for the style check and one for the sha256 check
        assert out.count(f"[PASS] {ec}") == 2, f"{ec.name} not checked twice:\n{out}"


def test_dry_run_robot_resolves_every_foss_easyconfig(tmp_path: Path) -> None:
    proc = run_eb(["--dry-run", "--robot", *map(str, FOSS_ECS)], tmp_path)
    out = _out(proc)
    assert proc.returncode == 0, out
    planned = _planned_modules(out)
    for ec in FOSS_ECS:
        module = "hvdcore/" + ec.name[len("hvdcore-"):-len(".eb")]
        assert module in planned, f"{module} missing from the dry run:\n{out}"
        for dep in EXPECTED_DEPS[ec.name]:
            assert dep in planned, f"{ec.name}: dependency {dep} not resolved:\n{out}"


def test_dry_run_system_variant_depends_on_external_python(tmp_path: Path) -> None:
    ec = EC_DIR / f"hvdcore-{EC_VERSION}-Python-3.11.eb"
    proc = run_eb(["--dry-run", "--robot", str(ec)], tmp_path)
    assert proc.returncode == 0, _out(proc)
    # the external Python module is not something EasyBuild would build
    assert _planned_modules(_out(proc)) == {f"hvdcore/{EC_VERSION}-Python-3.11"}
    assert "('Python/3.11', EXTERNAL_MODULE)" in ec.read_text()


def test_sanity_check_really_checks_the_binding() -> None:
    for ec in ALL_ECS:
        text = ec.read_text()
        binding = "tensorflow" if "TensorFlow" in ec.name else "torch"
        require = "mpi," + binding
        if "CUDA" in ec.name:
            # NCCL is used through torch.distributed only; TensorFlow GPU tensors go through MPI
            require += ",cuda,nccl" if binding == "torch" else ",cuda"
        assert f"hvdcorerun --check-build --require {require}\"" in text, ec.name
        assert f"import hvdcore.{binding}" in text, ec.name
        assert f"site-packages/hvdcore/{binding}" in text, ec.name


def test_every_easyconfig_installs_the_examples() -> None:
    """Where the ReFrame MNIST check looks ($EBROOTHVDCORE/share/hvdcore/examples), with the
    binding's MNIST example in the sanity check."""
    for ec in ALL_ECS:
        text = ec.read_text()
        example = "keras_mnist.py" if "TensorFlow" in ec.name else "pytorch_mnist.py"
        assert "'cp %(start_dir)s/examples/*.py %(installdir)s/share/hvdcore/examples/'" in text
        assert f"'share/hvdcore/examples/{example}'" in text, ec.name


def test_build_sdist_writes_easyconfigs_of_the_checkouts_version(tmp_path: Path) -> None:
    """``build_sdist.py --ec-outdir`` (the command the README runs) writes
    ``hvdcore-VERSION-*.eb`` for the checkout's version, a development one included, with the
    sdist's sha256; EasyBuild accepts them (check-contrib, and the SYSTEM variant's dry run
    plans the module ``hvdcore/VERSION-Python-3.11``). The committed files stay as they are."""
    before = {ec: ec.read_bytes() for ec in EC_DIR.glob("*.eb")}
    proc = subprocess.run([sys.executable, str(ROOT / "easyconfigs" / "build_sdist.py"),
                           "--outdir", str(tmp_path / "dist"),
                           "--ec-outdir", str(tmp_path / "ecs")],
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {ec: ec.read_bytes() for ec in EC_DIR.glob("*.eb")} == before
    digest = hashlib.sha256((tmp_path / "dist" / f"hvdcore-{VERSION}.tar.gz").read_bytes())
    written = sorted((tmp_path / "ecs").glob("*.eb"))
    assert [ec.name for ec in written] == [
        ec.name.replace(f"hvdcore-{EC_VERSION}-", f"hvdcore-{VERSION}-") for ec in ALL_ECS]
    for ec in written:
        text = ec.read_text()
        assert f"\nversion = '{VERSION}'\n" in text, ec.name
        assert f"checksums = ['{digest.hexdigest()}']" in text, ec.name
    proc = run_eb(["--check-contrib", *map(str, written)], tmp_path)
    assert proc.returncode == 0 and "All contribution checks PASSed" in _out(proc), _out(proc)
    system = tmp_path / "ecs" / f"hvdcore-{VERSION}-Python-3.11.eb"
    proc = run_eb(["--dry-run", "--robot", str(system)], tmp_path)
    assert proc.returncode == 0, _out(proc)
    assert _planned_modules(_out(proc)) == {f"hvdcore/{VERSION}-Python-3.11"}


@pytest.mark.parametrize("easystack", EASYSTACKS, ids=lambda p: p.name)
def test_easystack_dry_run_robot(easystack: Path, tmp_path: Path) -> None:
    proc = run_eb(
        ["--easystack", str(easystack), "--dry-run", f"--robot={ROOT / 'easyconfigs'}:"], tmp_path
    )
    out = _out(proc)
    assert proc.returncode == 0, out
    listed = re.findall(r"^\s+-\s+(hvdcore-\S+\.eb)", easystack.read_text(), re.M)
    assert listed, f"no easyconfigs in {easystack}"
    assert all(name.startswith(f"hvdcore-{EC_VERSION}-") for name in listed), listed  # current
    planned = _planned_modules(out)
    for name in listed:
        assert "hvdcore/" + name[len("hvdcore-"):-len(".eb")] in planned, out
        if "CUDA" in name:
            assert "accept-eula-for: CUDA" in easystack.read_text()


def _broken(tmp_path: Path, name: str, old: str, new: str) -> Path:
    text = PYTORCH_EC.read_text()
    assert old in text
    path = tmp_path / name
    path.write_text(text.replace(old, new))
    return path


def test_missing_dependency_fails_dry_run(tmp_path: Path) -> None:
    ec = _broken(tmp_path, f"hvdcore-{EC_VERSION}-foss-2023a-PyTorch-2.99.0.eb",
                 "local_pytorch_version = '2.1.2'", "local_pytorch_version = '2.99.0'")
    proc = run_eb(["--dry-run", "--robot", str(ec)], tmp_path)
    assert proc.returncode != 0
    assert "Missing dependencies: PyTorch/2.99.0-foss-2023a" in _out(proc)


def test_wrong_toolchain_fails(tmp_path: Path) -> None:
    ec = _broken(tmp_path, "tc.eb", "'name': 'foss'", "'name': 'fooss'")
    proc = run_eb(["--dry-run", "--robot", str(ec)], tmp_path)
    assert proc.returncode != 0
    assert "Toolchain fooss not found" in _out(proc)


def test_toolchain_version_that_does_not_exist_fails(tmp_path: Path) -> None:
    ec = _broken(tmp_path, f"hvdcore-{EC_VERSION}-foss-2099a-PyTorch-2.1.2.eb",
                 "'version': '2023a'", "'version': '2099a'")
    proc = run_eb(["--dry-run", "--robot", str(ec)], tmp_path)
    assert proc.returncode != 0
    assert re.search(r"Missing dependencies: .*foss/2099a", _out(proc))


@pytest.mark.parametrize(
    ("new", "message"),
    [
        ("checksums = ['abc']\n", f"Non-SHA256 checksum(s) found for hvdcore-{EC_VERSION}.tar.gz"),
        ("", "Checksums missing for one or more sources"),
    ],
    ids=["malformed-checksum", "missing-checksum"],
)
def test_bad_checksum_fails_check_contrib(tmp_path: Path, new: str, message: str) -> None:
    text = PYTORCH_EC.read_text()
    line = re.search(r"^checksums = \['[0-9a-f]{64}'\]\n", text, re.M)
    assert line, "the committed easyconfig has no sha256 checksum line"
    ec = tmp_path / PYTORCH_EC.name
    ec.write_text(text.replace(line.group(0), new))
    proc = run_eb(["--check-contrib", str(ec)], tmp_path)
    assert proc.returncode != 0
    assert message in _out(proc)


def test_sdist_is_reproducible_and_exclude_works(tmp_path: Path) -> None:
    """Same tree, same sha256 (so a checksum in an easyconfig names one source tree)."""
    bs = build_sdist_module()
    first = bs.build_sdist(tmp_path / "a", python=sys.executable)
    second = bs.build_sdist(tmp_path / "b", python=sys.executable)
    assert first.name == f"hvdcore-{VERSION}.tar.gz"
    digest = [hashlib.sha256(p.read_bytes()).hexdigest() for p in (first, second)]
    assert digest[0] == digest[1]
    with tarfile.open(first) as tar:
        names = tar.getnames()
    assert f"hvdcore-{VERSION}/hvdcore/torch/__init__.py" in names
    assert f"hvdcore-{VERSION}/hvdcore/runner/cli.py" in names
    # the examples the easyconfigs install, and nothing of the tests or checks
    assert f"hvdcore-{VERSION}/examples/pytorch_mnist.py" in names
    assert f"hvdcore-{VERSION}/examples/keras_mnist.py" in names
    assert not [n for n in names if n.split("/")[1:2] in (["tests"], ["checks"], ["benchmarks"])]
    without = bs.build_sdist(tmp_path / "c", exclude=["hvdcore/torch"], python=sys.executable)
    with tarfile.open(without) as tar:
        assert not [n for n in tar.getnames() if "/hvdcore/torch" in n]
