"""The manual: a real ``sphinx-build -W`` of ``docs/``, what it generates from the code, and its
pages as a person sees them (rendered by headless Chromium).

One build per test session (module fixture): the knob list and ``hvdcorerun``'s options are
generated, so every knob and every option must be in the rendered pages; every built page is
opened in one headless Chromium (``tests/chromium_pages.py``) and must render as written; no
link between pages is dead; the README stays an overview that opens with the two
fresh-machine commands and links only to pages that exist.
"""

from __future__ import annotations

import html
import inspect
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from chromium_pages import Browser, find_chromium, page_problems

from hvdcore.config import KNOBS
from hvdcore.runner.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

pytestmark = pytest.mark.docs


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


def test_release_notes_are_the_changelog(site: Path) -> None:
    """The release-notes page includes CHANGELOG.md: every release section is on it."""
    versions = re.findall(r"^## \[(\d[^\]]*)\]", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert versions, "CHANGELOG.md has no release section"
    text = _text(site / "release-notes.html")
    missing = [v for v in versions if v not in text]
    assert not missing, f"releases missing from the release notes: {missing}"


def test_readme_is_an_overview_opening_with_the_two_commands() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 120, f"README.md has {len(lines)} lines"
    head = "\n".join(lines[:8])
    assert "./scripts/validate.sh" in head and "./scripts/test.sh" in head
    links = re.findall(r"\]\(((?:docs|checks|easyconfigs)/[^)#]+)", "\n".join(lines))
    assert links, "README links into the manual"
    for link in links:
        assert (ROOT / link).exists(), f"README links to {link}, which does not exist"


def _built_pages(site: Path) -> list[Path]:
    """Every HTML page of the build (the generated index, search and source pages too)."""
    return sorted(p.relative_to(site) for p in site.rglob("*.html"))


def _chromium() -> str:
    exe = find_chromium()
    if exe is None:
        pytest.skip("Debian's chromium is not installed (ci/apt/reframe.txt installs it)")
    return exe


#: Entry pages: their heading and the first thing a reader looks for on them.
ENTRY_PAGES = [("index.html", "hvdcore", "Getting started"),
               ("users/getting-started.html", "Getting started", "module load hvdcore")]


def test_every_page_renders_in_chromium(site: Path, tmp_path: Path) -> None:
    """What a person sees at 1280 px, every page in one headless Chromium: no MyST markup left
    as text, every image drawn, every table within the content column (or scrolling in its
    frame with the first column fixed); the entry pages show their heading, their first
    command and the theme's navigation, and a screenshot is drawn."""
    pages = _built_pages(site)
    assert len(pages) >= 40, pages
    with Browser(_chromium(), width=1280) as browser:
        problems = page_problems(browser, site, pages)
        for page, heading, first in ENTRY_PAGES:
            browser.open((site / page).as_uri())
            assert heading in browser.evaluate("document.querySelector('h1').innerText"), page
            text = browser.evaluate("document.querySelector('article').innerText")
            assert first in text, (page, text[:2000])
            assert browser.evaluate("!!document.querySelector('.sidebar-tree')"), page
        shot = tmp_path / "index.png"
        browser.open((site / "index.html").as_uri())
        browser.screenshot(shot)
    assert shot.stat().st_size > 20_000
    assert not problems, "pages that do not render as written:\n" + "\n".join(
        f"{page}: {p}" for page, found in problems.items() for p in found)


def test_no_link_inside_the_manual_is_dead(site: Path) -> None:
    """Every link from one built page to another (source pages included) reaches a file that
    exists, and its #anchor an element of that page."""
    ids = {p: set(re.findall(r'\bid="([^"]+)"', (site / p).read_text()))
           for p in _built_pages(site)}
    dead = []
    for page in ids:
        for href in re.findall(r'<a\b[^>]*\bhref="([^"]*)"', (site / page).read_text()):
            url = urlsplit(html.unescape(href))
            if url.scheme or url.netloc:
                continue
            target = (site / page).parent / unquote(url.path) if url.path else site / page
            target = target.resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                dead.append(f"{page}: {href} (no such file)")
            elif url.fragment and target.suffix == ".html" and unquote(
                    url.fragment) not in ids.get(target.relative_to(site.resolve()), set()):
                dead.append(f"{page}: {href} (no such anchor)")
    assert not dead, "dead links:\n" + "\n".join(dead)


def _api_text(site: Path) -> str:
    """The API page's visible text, a framework's type named alike whether autodoc had the
    framework (``Tensor``) or stood in for it (``torch.Tensor``)."""
    text = _text(site / "reference" / "api.html")
    text = re.sub(r"\b(?:torch|tensorflow)\.(?:[a-z_]+\.)*([A-Z]\w*)", r"\1", text)
    return re.sub(r"\s*([\[\],])\s*", r"\1", " ".join(text.split()))  # (tags were spaces)


@pytest.mark.slow
def test_the_manual_builds_from_the_docs_extra_alone(site: Path, tmp_path: Path) -> None:
    """What a docs host does: a fresh venv with ``pip install .[docs]`` and nothing else (no
    torch, no TensorFlow), then ``sphinx-build -W``; its API page says what the full build's
    says (the same objects, signatures and text)."""
    src = tmp_path / "src"  # pip builds in the tree: a copy, so the checkout gets no build/
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "_build", "__pycache__", "*.so",
        ".pytest_cache", ".ruff_cache", ".mypy_cache"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = str(venv / "bin" / "python")
    pip = subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                          f"{src}[docs]"], capture_output=True, text=True, timeout=900,
                         check=False)
    assert pip.returncode == 0, pip.stderr[-4000:]
    for framework in ("torch", "tensorflow", "keras"):  # the point: the extra alone
        probe = subprocess.run([py, "-c", f"import {framework}"], capture_output=True,
                               timeout=60, check=False)
        assert probe.returncode != 0, f"{framework} got into the docs-only venv"
    out = tmp_path / "html"
    build = subprocess.run(
        [py, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", "-d",
         str(tmp_path / "doctrees"), str(src / "docs"), str(out)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)
    assert build.returncode == 0, f"{build.stdout[-3000:]}\n{build.stderr[-6000:]}"
    assert _api_text(out) == _api_text(site)


def test_public_functions_document_their_parameters() -> None:
    """Every public function of ``hvdcore`` and ``hvdcore.torch`` that takes parameters has a
    Google-style ``Args:`` section naming each one (what napoleon renders on the API page)."""
    torch_binding = pytest.importorskip("hvdcore.torch")
    import hvdcore

    missing = []
    for module in (hvdcore, torch_binding):
        for name in module.__all__:
            obj = getattr(module, name)
            if not inspect.isfunction(obj):
                continue
            doc = obj.__doc__ or ""
            args = doc.partition("Args:")[2]
            for param in inspect.signature(obj).parameters:
                if f"\n    {param}: " not in args:
                    missing.append(f"{module.__name__}.{name}({param})")
    assert not missing, f"parameters without a description: {missing}"
