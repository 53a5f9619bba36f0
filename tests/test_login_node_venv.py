"""The checks' venv on a login node that is not Debian: docs/sites/nightly.md's recipe, run.

The section ``A venv for the checks on any login node`` (anchor ``login-node-venv``) is run as a
journey (the runner and block convention of ``tests/test_docs_journeys.py``), never through
``scripts/setup.sh``: the system's ``python3 -m venv``, ``pip install -e '.[reframe]'`` in a copy
of this checkout standing in for the clone, then ``reframe -l`` lists the suite's checks. The
epilogue then lists them once more with a configuration kept outside the clone (the site's
repository of ``checks/schedule/gitlab-ci.yml``), which loads hvdcore's ``common.py`` by path
from ``$CHECKS_HOME``, as the template's header shows.

pip reads the packages from the machine's indexes (PyPI, or the local mirror ``pip.conf``
names); its cache is the session's own, so nothing of the test venv is reused.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from lmod_shell import ROOT, eb_workdir, require_lmod
from test_docs_journeys import _copy_checkout, extract_blocks, run_journey

PAGE = Path(os.environ.get("HVDCORE_DOCS_DIR") or ROOT / "docs") / "sites" / "nightly.md"
ANCHOR = "(login-node-venv)="

SITE_CONFIG = '''"""A site's configuration kept outside the hvdcore clone (the GitLab template's layout)."""
import os

from reframe.utility import import_module_from_file

_config = os.path.join(os.environ["CHECKS_HOME"], "checks", "config")
common = import_module_from_file(os.path.join(_config, "common.py"))
site_configuration = import_module_from_file(os.path.join(_config, "local.py"),
                                             load_parents=True).site_configuration
print("site config: common from", common.__file__)
'''

EPILOGUE = f"""
__journey_info reframe "$(command -v .venv/bin/reframe)"
__journey_info hvdcore "$(.venv/bin/python -c 'import hvdcore; print(hvdcore.__file__)')"
mkdir -p "$HOME/site-repo/reframe"
cat > "$HOME/site-repo/reframe/site.py" <<'EOF'
{SITE_CONFIG}EOF
CHECKS_HOME="$PWD" .venv/bin/reframe -C "$HOME/site-repo/reframe/site.py" -c checks/ -l \\
    > "$HOME/site-list.out" 2>&1 || {{ cat "$HOME/site-list.out"; exit 1; }}
"""


def section(text: str) -> str:
    """The recipe's section of the page: from its anchor to the next heading of its level."""
    start = text.index(ANCHOR)
    end = text.find("\n## ", text.index("\n## ", start) + 1)
    return text[start:end if end != -1 else len(text)]


def test_the_recipe_is_a_venv_without_setup_sh() -> None:
    """Fast: the section parses, and what it runs is venv + pip + reframe, not setup.sh."""
    blocks = extract_blocks(section(PAGE.read_text()), "docs/sites/nightly.md#login-node-venv")
    run = "".join(b.text for b in blocks if b.action == "run")
    for needed in ("python3 -m venv .venv", "pip install -e '.[reframe]'", "reframe -C", " -l"):
        assert needed in run, f"the recipe does not run {needed!r}"
    assert "setup.sh" not in run
    assert any("git clone" in b.text for b in blocks if b.action == "skip")


@pytest.mark.reframe
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_recipe_builds_a_venv_whose_reframe_lists_the_checks() -> None:
    require_lmod()  # the journey's bash session sources Lmod's init
    if shutil.which("python3") is None or shutil.which("mpicc") is None:
        pytest.skip("needs the system's python3 and mpicc (Debian's python3-venv, Open MPI)")
    blocks = extract_blocks(section(PAGE.read_text()), "docs/sites/nightly.md#login-node-venv")
    base = eb_workdir("hvdcore-login-venv-")
    try:
        home = base / "home"
        home.mkdir()
        _copy_checkout(home / "hvdcore-checks")  # the clone (the recipe's git clone is marked)
        journey = run_journey("docs/sites/nightly.md", blocks, home, prelude=":",
                              epilogue=EPILOGUE)
        print(f"\nlogin-node venv journey: {journey.ran} blocks in {journey.seconds:.1f} s "
              f"({journey.timings()})")
        assert journey.ok, journey.report()
        clone = home / "hvdcore-checks"
        assert journey.info["reframe"] == ".venv/bin/reframe"
        assert Path(journey.info["hvdcore"]).is_relative_to(clone), journey.info["hvdcore"]
        listed = "".join(journey.outputs[str(blocks[-1].number)])
        names = set(re.findall(r"^- (Hvdcore\w+)", listed, re.M))
        # no framework in this venv: the framework checks have no variant, the MPI one lists
        assert "HvdcoreCollectivesCheck" in names, listed[-3000:]
        site = (home / "site-list.out").read_text()
        assert f"common from {clone}/checks/config/common.py" in site, site[-3000:]
        assert set(re.findall(r"^- (Hvdcore\w+)", site, re.M)) == names, site[-3000:]
    finally:
        shutil.rmtree(base, ignore_errors=True)
