#!/usr/bin/env bash
# Creates (or refreshes) a virtualenv from a pinned requirements file, from PyPI by name only.
# Transitive dependencies are pinned by scripts/constraints.txt when given.
# Usage: scripts/venv.sh DIR REQUIREMENTS [CONSTRAINTS]
set -euo pipefail
dir=$1 req=$2 cons=${3:-}
stamp="$dir/.installed-$(cat "$req" ${cons:+"$cons"} | sha256sum | cut -c1-16)"
[ -f "$stamp" ] && exit 0
python3 -m venv "$dir"
"$dir/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req" ${cons:+-c "$cons"}
touch "$stamp"
