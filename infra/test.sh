#!/usr/bin/env bash
# The test command: install everything, start the container engine, build the image, run pytest.
# Container tests run for real when an engine is reachable; with CI set they fail rather than skip.
set -euo pipefail
cd "$(dirname "$0")/.."
bash infra/bootstrap.sh

if [[ ${EUID} -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    if ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then  # the store's Postgres tests
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    fi
    if ! command -v bwrap >/dev/null 2>&1; then  # the sandbox of generated programs
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
    fi
    if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then  # arena view's browser test
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
    fi
    eval "$(bash infra/podman/setup.sh)"
elif [[ -n "${CI:-}" ]]; then
    echo "[test] CI needs root with apt-get to install Podman" >&2
    exit 1
fi
if [[ -n "${DOCKER_HOST:-}" ]]; then
    .venv/bin/arena image build
fi

# llama.cpp's OpenAI-compatible server, the real model server of tests/test_llama_server.py. Built for
# any x86-64 CPU: the native build crashed with "Illegal instruction" on a machine advertising AVX512/AMX
# it could not use. pip caches the built wheel, so only the first run compiles (docs/evaluation.md).
if ! .venv/bin/python -c "import llama_cpp.server.app" >/dev/null 2>&1; then
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF" \
        .venv/bin/pip install -q "llama-cpp-python[server]==0.3.36" \
        || echo "[test] could not build llama-cpp-python; tests/test_llama_server.py will say why" >&2
fi

export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}"
# BFCL's published wheel (data, backends, checker; no dependencies) into the arena's data folder, once.
.venv/bin/python -m environments.bfcl fetch || echo "[test] could not fetch bfcl-eval; BFCL tests will say why" >&2
set +e
.venv/bin/python -m pytest --durations=20 "$@"
status=$?
set -e
if [[ ${status} -eq 5 ]]; then
    echo "[test] pytest collected no tests: failing" >&2
    exit 1
fi
exit ${status}
