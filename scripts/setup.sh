#!/usr/bin/env bash
# Idempotent set-up: Debian packages, .venv, cyvlfeat built against the system VLFeat (wheel cached),
# then `pip install -e .[dev,bench,cluster]`. Prints what it does; a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
WHEELS=.cache/wheels
say() { echo "[setup] $*" >&2; }

need_apt=()
dpkg -s libvlfeat-dev >/dev/null 2>&1 || need_apt+=(libvlfeat-dev)
# the compilers: C builds cyvlfeat; C++ runs the C++ cross-check of the Oxford AP (tests/evaluation/test_protocols.py)
command -v cc >/dev/null 2>&1 || need_apt+=(build-essential)
command -v g++ >/dev/null 2>&1 || need_apt+=(g++)
# a real browser for the browser tests (the HTML gallery is checked in headless Chromium; the web page of
# 'retrieval serve' is driven through Selenium and chromedriver)
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1 \
   && ! command -v google-chrome >/dev/null 2>&1; then
  need_apt+=(chromium)
fi
if ! command -v chromedriver >/dev/null 2>&1; then
  need_apt+=(chromium-driver)
fi
if ! "$PYTHON" -c 'import sysconfig, os, sys; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)'; then
  need_apt+=(python3-dev)
fi
if [ ! -x "$VENV/bin/python" ] && ! "$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1; then
  need_apt+=(python3-venv)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  say "installing Debian packages: ${need_apt[*]}"
  if [ "$(id -u)" = 0 ]; then SUDO=""; elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo"; else
    echo "[setup] cannot install Debian packages (not root, no sudo). Run:" >&2
    echo "    sudo apt-get update && sudo apt-get install -y ${need_apt[*]}" >&2
    exit 1
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
else
  say "Debian packages present (libvlfeat-dev, C and C++ compilers, Python headers, Chromium, chromedriver)"
fi

if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV with $($PYTHON --version)"
  "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
PIP="$PY -m pip --disable-pip-version-check"

stamp="$VENV/.retrieval-installed"
want="$(sha256sum pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)-$($PY -c 'import sys; print(sys.version.split()[0])')"
generic_models() {
  # the generic models of the presets (retrieval/data/models), learnt once from the Holidays photos of ../shared
  if [ -d ../shared/data/real/holidays805/jpg ]; then
    say "generic models (scripts/train_generic_models.py --if-missing: only what is missing or outdated)"
    "$PY" scripts/train_generic_models.py --data ../shared/data --if-missing | sed 's/^/[setup]   /' >&2
  else
    say "generic models skipped: ../shared/data/real/holidays805 not found (indexes then learn from their folder)"
  fi
}
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && $PY -c 'import retrieval, cyvlfeat, pyhesaff' 2>/dev/null; then
  say "environment up to date ($VENV)"
  generic_models
  exit 0
fi

say "installing build tools into $VENV"
$PIP install -q --upgrade pip setuptools wheel cython numpy scipy
if ! $PY -c 'import cyvlfeat' 2>/dev/null; then
  mkdir -p "$WHEELS"
  if ! ls "$WHEELS"/cyvlfeat-0.7.1-*.whl >/dev/null 2>&1 || ! $PIP install -q --no-deps "$WHEELS"/cyvlfeat-0.7.1-*.whl 2>/dev/null; then
    rm -f "$WHEELS"/cyvlfeat-*.whl
    say "building cyvlfeat 0.7.1 against the system VLFeat (about a minute, cached in $WHEELS)"
    $PIP wheel -q --no-build-isolation --no-deps -w "$WHEELS" cyvlfeat==0.7.1
    $PIP install -q --no-deps "$WHEELS"/cyvlfeat-0.7.1-*.whl
  else
    say "cyvlfeat installed from cached wheel"
  fi
fi
say "pip install -e .[dev,bench,cluster]"
$PIP install -q -e ".[dev,bench,cluster]"
echo "$want" > "$stamp"
generic_models
say "done: $($PY -c 'import retrieval; print("retrieval", retrieval.__version__)')"
