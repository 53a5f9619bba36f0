"""The manual: a real ``sphinx-build -W`` of ``docs/``, what it generates from the code, and its
pages as a person sees them (rendered by headless Chromium).

One build per test session (module fixture): the knob table and ``hvdcorerun``'s options are
generated, so every knob and every option must be in the rendered pages; the README stays an
overview that opens with the two fresh-machine commands and links only to pages that exist.
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hvdcore.config import KNOBS
from hvdcore.runner.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

pytestmark = pytest.mark.docs

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The HTML manual, built warning-free (``-W``) into a temporary directory."""
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_parser")
    out = tmp_path_factory.mktemp("docs-html")
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         "-d", str(out / ".doctrees"), str(DOCS), str(out)],
        capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, f"sphinx-build -W failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
    return out


def _text(page: Path) -> str:
    """The visible text of an HTML page, roughly: tags dropped, entities decoded."""
    body = re.sub(r"<(script|style)\b.*?</\1>", " ", page.read_text(), flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", body))


def test_every_knob_is_on_the_configuration_page(site: Path) -> None:
    text = _text(site / "reference" / "configuration.html")
    missing = [k.env for k in KNOBS if not k.internal and k.env not in text]
    assert not missing, f"knobs missing from the configuration page: {missing}"
    for k in KNOBS:
        if k.alias and not k.internal:
            assert k.alias in text, k.alias


def test_every_runner_option_is_on_the_hvdcorerun_page(site: Path) -> None:
    text = _text(site / "reference" / "hvdcorerun.html")
    flags = [s for a in build_parser()._actions for s in a.option_strings if s not in ("-h", "--help")]
    missing = [f for f in flags if f not in text]
    assert not missing, f"hvdcorerun options missing from its page: {missing}"


def test_the_checks_page_is_generated_from_every_check(site: Path) -> None:
    """Each ReFrame check (and its fixtures) has its section, with its performance variables."""
    page = (site / "reference" / "checks.html").read_text()
    for name in ("HvdcoreCapabilitiesCheck", "HvdcoreCollectivesCheck", "HvdcoreMnistCheck",
                 "MnistBaseline", "HvdcoreSyntheticCheck", "HvdcoreFaultJob"):
        assert f'id="check-{name.lower()}"' in page, name
    text = _text(site / "reference" / "checks.html")
    for var in ("busbw_ratio", "latency_ratio", "ddp_ratio", "mpi_ratio", "efficiency"):
        assert var in text, var


def test_every_page_is_built_and_none_is_a_stub(site: Path) -> None:
    sources = sorted(p.relative_to(DOCS).with_suffix(".html") for p in DOCS.rglob("*.md")
                     if "_build" not in p.parts and p.name != "README.md")
    assert len(sources) >= 20
    for rel in sources:
        page = site / rel
        assert page.exists(), rel
        assert "(Being written.)" not in _text(page), f"{rel} is still a stub"


def test_readme_is_an_overview_opening_with_the_two_commands() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 120, f"README.md has {len(lines)} lines"
    head = "\n".join(lines[:8])
    assert "./scripts/validate.sh" in head and "./scripts/test.sh" in head
    links = re.findall(r"\]\(((?:docs|checks|easyconfigs)/[^)#]+)", "\n".join(lines))
    assert links, "README links into the manual"
    for link in links:
        assert (ROOT / link).exists(), f"README links to {link}, which does not exist"


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("Debian's chromium is not installed (ci/apt/reframe.txt installs it)")
    return exe


@pytest.mark.parametrize("page, heading, first_command", [
    ("index.html", "hvdcore", "Getting started"),
    ("users/getting-started.html", "Getting started", "module load hvdcore"),
])
def test_pages_render_in_chromium(site: Path, tmp_path: Path, page: str, heading: str,
                                  first_command: str) -> None:
    """What a person sees: Chromium's rendered DOM has the page's heading and its first command
    (or, on the index, the way into the users' pages), and a screenshot is drawn."""
    chromium = _chromium()
    flags = [*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    uri = (site / page).as_uri()
    dom = subprocess.run([chromium, *flags, "--dump-dom", uri], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    h1 = re.search(r"<h1>(.*?)<", dom, re.S)
    assert h1 and heading in html.unescape(h1.group(1)), dom[:3000]
    visible = html.unescape(re.sub(r"<[^>]+>", "", dom))
    assert first_command in visible, visible[:3000]
    assert "furo" in dom.lower() or "sidebar" in dom.lower()  # the theme's navigation is there
    shot = tmp_path / (page.replace("/", "-") + ".png")
    subprocess.run([chromium, *flags, f"--screenshot={shot}", "--window-size=1280,1600", uri],
                   capture_output=True, timeout=120, check=True)
    assert shot.stat().st_size > 20_000
