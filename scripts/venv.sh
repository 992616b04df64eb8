#!/usr/bin/env bash
# Creates (or refreshes) a virtualenv from a pinned requirements file, from PyPI by name only.
# Usage: scripts/venv.sh DIR REQUIREMENTS
set -euo pipefail
dir=$1 req=$2
stamp="$dir/.installed-$(sha256sum "$req" | cut -c1-16)"
[ -f "$stamp" ] && exit 0
python3 -m venv "$dir"
"$dir/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req"
touch "$stamp"
