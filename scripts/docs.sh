#!/usr/bin/env bash
# Build the manual (docs/, Sphinx + MyST) offline into docs/_build/html; any warning fails.
#   scripts/docs.sh            # then open docs/_build/html/index.html
#   scripts/docs.sh -b linkcheck ...   (extra arguments go to sphinx-build)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
"${VENV:-.venv}/bin/python" -m sphinx -W --keep-going -b html "$@" docs docs/_build/html
echo "docs: $(pwd)/docs/_build/html/index.html"
