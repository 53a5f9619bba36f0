"""The Apptainer recipe checker: the project's recipes pass, every kind of bad input is rejected
with file:line and a reason. Uses the real shellcheck (Debian package)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from containers.recipetools.defcheck import Problem, check_definition, check_file, is_pinned, main
from containers.recipetools.deffile import DefinitionError, parse, parse_text

pytestmark = pytest.mark.container

ROOT = Path(__file__).resolve().parent.parent
RECIPES = sorted((ROOT / "containers").glob("*.def"))

GOOD = """\
# a comment before the header
Bootstrap: docker
From: debian:bookworm-20250520-slim

%arguments
    GREETING=hello

%files
    payload.txt /opt/payload.txt

%labels
    version 1.0
    source tests

%help
    Help text.

%environment
    export FOO=bar

%post
    set -eu
    echo "{{ GREETING }}" > /opt/greeting

%runscript
    exec hvdcorerun "$@"

%test
    hvdcorerun --check-build --require mpi
    hvdcorerun -np 2 python -m hvdcore.tools.allreduce_check
"""


@pytest.fixture
def ctx(tmp_path: Path) -> Path:
    (tmp_path / "payload.txt").write_text("x\n")
    return tmp_path


def problems_for(text: str, ctx: Path, **kwargs: object) -> list[Problem]:
    path = ctx / "recipe.def"
    path.write_text(text)
    return check_file(path, ctx, **kwargs)  # type: ignore[arg-type]


def line_of(text: str, needle: str) -> int:
    for i, line in enumerate(text.splitlines(), start=1):
        if needle in line:
            return i
    raise AssertionError(f"{needle!r} not in text")


def codes(problems: list[Problem]) -> list[tuple[int, str]]:
    return [(p.line, p.code) for p in problems]


def test_good_recipe_is_clean(ctx: Path) -> None:
    assert problems_for(GOOD, ctx) == []


@pytest.fixture(scope="module")
def sdist_context(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A build context with dist/hvdcore-*.tar.gz made by containers/build-sdist.sh."""
    ctx = tmp_path_factory.mktemp("ctx")
    proc = subprocess.run(
        ["bash", str(ROOT / "containers" / "build-sdist.sh"), str(ctx / "dist")],
        env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    built = Path(proc.stdout.strip().splitlines()[-1])
    assert built.is_file() and re.fullmatch(r"hvdcore-[\w.]+\.tar\.gz", built.name)
    shutil.copy(ROOT / "LICENSE", ctx / "LICENSE")  # the repository root is the build context
    return ctx


def test_build_sdist_says_why_it_failed(tmp_path: Path) -> None:
    """With a Python that has no setuptools, containers/build-sdist.sh exits non-zero and its
    stderr carries the Python error and what the script needs (it used to print nothing)."""
    bare = tmp_path / "python-without-site"
    bare.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")  # no site-packages
    bare.chmod(0o755)
    proc = subprocess.run(
        ["bash", str(ROOT / "containers" / "build-sdist.sh"), str(tmp_path / "dist")],
        env={"PATH": "/usr/bin:/bin", "PYTHON": str(bare)},
        capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and proc.stdout == "", (proc.returncode, proc.stdout)
    assert "No module named 'setuptools'" in proc.stderr, proc.stderr
    assert "build-sdist.sh: building the sdist with" in proc.stderr
    assert "PYTHON=" in proc.stderr, proc.stderr


def test_project_recipes_exist() -> None:
    names = {p.name for p in RECIPES}
    assert {
        "hvdcore-cpu.def",
        "hvdcore-cuda.def",
        "hvdcore-rocm.def",
        "hvdcore-hostmpi.def",
    } <= names


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_project_recipe_passes(recipe: Path, sdist_context: Path) -> None:
    assert check_file(recipe, sdist_context) == []


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_project_recipe_label_version_matches_the_version_source(recipe: Path) -> None:
    match = re.search(r'^__version__ = "([^"]+)"$', (ROOT / "hvdcore" / "__init__.py").read_text(),
                      re.M)
    assert match, "hvdcore/__init__.py has no __version__"
    version = match.group(1)
    labels = parse(recipe).final.section("labels")
    assert labels is not None
    found = dict(t.strip().split(None, 1) for _, t in labels.lines() if t.strip())
    assert found["version"] == version


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_project_recipe_ships_the_licence(recipe: Path) -> None:
    """The image carries the Apache-2.0 text where Debian keeps a package's licence."""
    files = [(f.src, f.dst) for f in parse(recipe).final.files()]
    assert ("LICENSE", "/usr/share/doc/hvdcore/LICENSE") in files, files


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_project_recipe_labels_the_licence(recipe: Path) -> None:
    """The OCI licence annotation, as an SPDX identifier (what registries and scanners read)."""
    labels = parse(recipe).final.section("labels")
    assert labels is not None
    found = dict(t.strip().split(None, 1) for _, t in labels.lines() if t.strip())
    assert found.get("org.opencontainers.image.licenses") == "Apache-2.0", found


def test_project_recipes_without_sdist_report_missing_files(tmp_path: Path) -> None:
    shutil.copy(ROOT / "LICENSE", tmp_path / "LICENSE")
    problems = check_file(ROOT / "containers" / "hvdcore-cpu.def", tmp_path)
    assert [p.code for p in problems] == ["DEF005"]
    assert "dist/hvdcore-*.tar.gz" in problems[0].message


def test_unknown_section_is_rejected_with_line_and_suggestion(ctx: Path) -> None:
    text = GOOD.replace("%post", "%postt")
    problems = problems_for(text, ctx)
    assert (line_of(text, "%postt"), "DEF001") in codes(problems)
    msg = next(p for p in problems if p.code == "DEF001").message
    assert "%postt" in msg and "did you mean '%post'" in msg


def test_unknown_section_without_near_name(ctx: Path) -> None:
    text = GOOD + "%zzzzqq\n    echo\n"
    problems = problems_for(text, ctx)
    assert (line_of(text, "%zzzzqq"), "DEF001") in codes(problems)


def test_unknown_header_key(ctx: Path) -> None:
    text = GOOD.replace("From: debian", "Frm: debian")
    problems = problems_for(text, ctx)
    line = line_of(text, "Frm:")
    assert (line, "DEF002") in codes(problems)
    assert "did you mean 'From'" in next(p for p in problems if p.code == "DEF002").message
    # and Bootstrap: docker now lacks From
    assert any(p.code == "DEF003" and "'from:'" in p.message for p in problems)


def test_missing_bootstrap(ctx: Path) -> None:
    text = GOOD.replace("Bootstrap: docker\n", "")
    problems = problems_for(text, ctx)
    assert any(p.code == "DEF003" and "no 'Bootstrap:'" in p.message for p in problems)


def test_header_line_without_colon(ctx: Path) -> None:
    text = GOOD.replace("From: debian", "From debian")
    problems = problems_for(text, ctx)
    assert (line_of(text, "From debian"), "DEF003") in codes(problems)


def test_unknown_bootstrap_agent(ctx: Path) -> None:
    text = GOOD.replace("Bootstrap: docker", "Bootstrap: dokcer")
    problems = problems_for(text, ctx)
    assert (line_of(text, "dokcer"), "DEF003") in codes(problems)


def test_debootstrap_needs_osversion_and_mirror(ctx: Path) -> None:
    text = GOOD.replace(
        "Bootstrap: docker\nFrom: debian:bookworm-20250520-slim",
        "Bootstrap: debootstrap\nOSVersion: stable",
    )
    problems = problems_for(text, ctx)
    assert any(p.code == "DEF003" and "mirrorurl" in p.message for p in problems)
    assert (line_of(text, "OSVersion"), "DEF004") in codes(problems)


@pytest.mark.parametrize(
    "ref",
    [
        "debian",
        "debian:latest",
        "debian:bookworm",
        "debian:bookworm-slim",
        "debian:12",
        "nvcr.io/nvidia/pytorch",
        "docker://ubuntu:rolling",
        "localhost:5000/img",
    ],
)
def test_unpinned_base_is_rejected(ref: str, ctx: Path) -> None:
    text = GOOD.replace("debian:bookworm-20250520-slim", ref)
    problems = problems_for(text, ctx)
    assert codes(problems) == [(line_of(text, "From:"), "DEF004")]
    assert "unpinned base image" in problems[0].message


@pytest.mark.parametrize(
    "ref",
    [
        "debian:12.11-slim",
        "debian:bookworm-20250520",
        "nvcr.io/nvidia/pytorch:24.12-py3",
        "rocm/pytorch:rocm6.2.3_ubuntu22.04_py3.10_pytorch_release_2.3.0",
        "localhost:5000/img:1.2",
        "debian@sha256:" + "a" * 64,
    ],
)
def test_pinned_bases(ref: str) -> None:
    assert is_pinned(ref) == (True, "")


def test_pin_of_build_argument_is_checked_after_substitution(ctx: Path) -> None:
    text = GOOD.replace("debian:bookworm-20250520-slim", "debian:{{ TAG }}").replace(
        "GREETING=hello", "GREETING=hello\n    TAG=latest"
    )
    problems = problems_for(text, ctx)
    assert codes(problems) == [(line_of(text, "From:"), "DEF004")]


def test_missing_files_source(ctx: Path) -> None:
    (ctx / "payload.txt").unlink()
    problems = problems_for(GOOD, ctx)
    assert codes(problems) == [(line_of(GOOD, "payload.txt"), "DEF005")]
    assert "payload.txt" in problems[0].message


def test_files_glob_and_from_stage(ctx: Path) -> None:
    (ctx / "a-1.tar.gz").write_text("")
    text = GOOD.replace(
        "payload.txt /opt/payload.txt",
        'a-*.tar.gz /opt/\n    "payload.txt"\n    # a comment\n    b-*.whl /opt/',
    )
    problems = problems_for(text, ctx)
    assert codes(problems) == [(line_of(text, "b-*.whl"), "DEF005")]
    staged = text.replace("%files\n", "%files from builder\n")
    assert problems_for(staged, ctx) == []


def test_shellcheck_finding_maps_to_recipe_line(ctx: Path) -> None:
    text = GOOD.replace(
        '    echo "{{ GREETING }}" > /opt/greeting', "    echo ok\n    rm -rf $TARGET/cache"
    )
    problems = problems_for(text, ctx)
    assert codes(problems) == [(line_of(text, "rm -rf $TARGET"), "DEF006")]
    assert "SC2086" in problems[0].message and "%post" in problems[0].message


def test_shellcheck_uses_section_shell(ctx: Path) -> None:
    text = GOOD.replace("    set -eu\n", "    set -eu\n    if [[ -d /opt ]]; then echo dir; fi\n")
    problems = problems_for(text, ctx)
    assert (line_of(text, "[[ -d"), "DEF006") in codes(problems)  # POSIX sh has no [[ ]]
    as_bash = text.replace("%post\n", "%post -c /bin/bash\n")
    assert problems_for(as_bash, ctx) == []


def test_shellcheck_in_test_and_runscript(ctx: Path) -> None:
    text = GOOD.replace('exec hvdcorerun "$@"', "exec hvdcorerun $@")
    problems = problems_for(text, ctx)
    assert any(
        p.code == "DEF006" and p.line == line_of(text, "exec hvdcorerun $@") for p in problems
    )


def test_environment_variables_are_not_unused(ctx: Path) -> None:
    text = GOOD.replace("export FOO=bar", "FOO=bar\n    export FOO")
    assert problems_for(text, ctx) == []


def test_shellcheck_missing_is_reported(ctx: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(ctx))
    problems = problems_for(GOOD, ctx)
    assert [p.code for p in problems] == ["DEF006"]
    assert "shellcheck not found" in problems[0].message
    assert problems_for(GOOD, ctx, shellcheck=False) == []


def test_undefined_build_argument(ctx: Path) -> None:
    text = GOOD.replace("{{ GREETING }}", "{{ GREETNG }}")
    problems = problems_for(text, ctx)
    assert codes(problems) == [(line_of(text, "GREETNG"), "DEF007")]
    assert problems_for(text, ctx, build_args={"GREETNG": "x"}) == []


def test_duplicate_section_and_app_without_name(ctx: Path) -> None:
    text = GOOD + "%post\n    echo again\n%apprun\n    echo app\n%apprun tool\n    echo tool\n"
    problems = problems_for(text, ctx)
    dup = line_of(text, "echo again") - 1
    assert (dup, "DEF008") in codes(problems)
    assert any(p.code == "DEF008" and "app name" in p.message for p in problems)
    assert "first at line" in next(p for p in problems if p.line == dup).message


@pytest.mark.parametrize("section", ["labels", "help", "environment", "runscript", "test"])
def test_policy_required_sections(section: str, ctx: Path) -> None:
    defn = parse_text(GOOD, "recipe.def")
    defn.final.sections = [s for s in defn.final.sections if s.name != section]
    problems = check_definition(defn, ctx)
    assert [(p.code, f"'%{section}'" in p.message) for p in problems] == [("DEF010", True)]
    assert check_definition(defn, ctx, policy=False) == []


def test_policy_labels_runscript_test(ctx: Path) -> None:
    text = (
        GOOD.replace("    version 1.0\n", "")
        .replace('exec hvdcorerun "$@"', "exec python3")
        .replace("hvdcorerun --check-build --require mpi", "hvdcorerun --check-build")
        .replace("-np 2", "-np 1")
    )
    problems = problems_for(text, ctx)
    got = [p.code for p in problems]
    assert got == ["DEF011", "DEF012", "DEF013", "DEF013"]
    assert problems[0].line == line_of(text, "%labels")


def test_multistage_and_continuation() -> None:
    text = (
        "Bootstrap: docker\nFrom: debian:12.11\nStage: build\n%post\n    echo a\n"
        "Bootstrap: docker\nFrom: \\\n  debian:12.11-slim\nStage: final\n"
        "%files from build\n    /x /x\n%test\n    true\n"
    )
    defn = parse_text(text, "m.def")
    assert [s.get("stage") for s in defn.stages] == ["build", "final"]
    assert defn.final.get("from") == "debian:12.11-slim"
    assert defn.final.files()[0].from_stage == "build"
    assert defn.final.section("test").line == 12  # type: ignore[union-attr]


def test_empty_file_is_an_error(ctx: Path) -> None:
    problems = problems_for("# only a comment\n\n", ctx, policy=False)
    assert any("empty definition" in p.message for p in problems)


def test_cli_reports_file_line_and_exit_status(
    ctx: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = ctx / "bad.def"
    bad.write_text(GOOD.replace("%post", "%postt"))
    good = ctx / "good.def"
    good.write_text(GOOD)
    assert main(["--context", str(ctx), str(good), str(bad)]) == 1
    out = capsys.readouterr().out
    assert re.search(rf"^{re.escape(str(bad))}:\d+: DEF001 unknown section '%postt'", out, re.M)
    assert str(good) not in out
    assert main(["--context", str(ctx), str(good)]) == 0
    assert main([str(ctx / "missing.def")]) == 2


def test_cli_as_module_on_project_recipes(sdist_context: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "containers.recipetools.defcheck",
            "--context",
            str(sdist_context),
            *map(str, RECIPES),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{len(RECIPES)} file(s) OK" in proc.stdout


def test_unreadable_definition() -> None:
    with pytest.raises(DefinitionError, match="cannot read"):
        parse("/nonexistent/x.def")


def test_shellcheck_is_installed() -> None:
    assert shutil.which("shellcheck"), "shellcheck missing: ci/apt/containers.txt installs it"


def test_unbalanced_quote_in_files_does_not_crash(ctx: Path) -> None:
    text = GOOD.replace("payload.txt /opt/payload.txt", '"payload.txt /opt/payload.txt')
    problems = problems_for(text, ctx)
    assert codes(problems) == [(line_of(text, '"payload.txt'), "DEF005")]
