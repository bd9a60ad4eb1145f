#!/usr/bin/env bash
# Create .venv and install Agent Arena with its dev tools (idempotent; fast when nothing changed).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [[ ! -x .venv/bin/python ]]; then
    "${PYTHON}" -m venv .venv
fi
stamp=.venv/.arena-installed
if [[ ! -f "${stamp}" || pyproject.toml -nt "${stamp}" ]]; then
    .venv/bin/python -m pip install --quiet --upgrade pip
    # The CPU build of torch first: an unpinned torch would pull a CUDA build of several GB.
    .venv/bin/python -m pip install --quiet "torch==${TORCH_VERSION:-2.13.0}"
    .venv/bin/python -m pip install --quiet -e ".[dev]"
    touch "${stamp}"
fi
echo "[bootstrap] .venv ready ($(.venv/bin/python --version))" >&2
if ! command -v bwrap >/dev/null 2>&1; then  # generated programs and imported tools run in its sandbox
    echo "[bootstrap] bubblewrap (bwrap) is not installed: programmatic tasks, imported tools and BFCL will be" \
        "infrastructure errors until it is (Debian: apt-get install bubblewrap; see docs/security.md)" >&2
fi
