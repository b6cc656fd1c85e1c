#!/usr/bin/env bash
# CI for the Python SDK: install it into a fresh virtual environment with its test extra, check the committed gRPC
# stubs against proto/, and run the pytest suite against real `cairn serve` processes.
#
#   sdk/python/ci.sh [CAIRN_BIN]
#
# CAIRN_BIN (argument or environment): the cairn binary the tests spawn; default target/debug/cairn under the
# repository root (build it first: cargo build -p cairn-cli). DATABASE_URL (a PostgreSQL server URL) enables the
# PostgreSQL half of the suite; without it those tests are skipped with that reason. PYTHON picks the interpreter
# (default python3, >= 3.10). CAIRN_SDK_VENV reuses a virtual environment at that path instead of a temporary one.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

bin="${1:-${CAIRN_BIN:-target/debug/cairn}}"
case "$bin" in /*) ;; *) bin="$repo/$bin" ;; esac
if [[ ! -x "$bin" ]]; then
  echo "sdk/python/ci.sh: no cairn binary at $bin (cargo build -p cairn-cli, or pass its path)" >&2
  exit 2
fi
export CAIRN_BIN="$bin"

python="${PYTHON:-python3}"
if [[ -n "${CAIRN_SDK_VENV:-}" ]]; then
  venv="$CAIRN_SDK_VENV"
else
  scratch="$(mktemp -d)"
  trap 'rm -rf "$scratch"' EXIT
  venv="$scratch/venv"
fi
[[ -x "$venv/bin/python" ]] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
# A regular (not editable) install: the tests import the package as users get it.
"$venv/bin/python" -m pip install --quiet "$here[test]"

echo "== gRPC stubs against proto/"
"$venv/bin/python" "$here/scripts/gen_proto.py" --check

echo "== pytest (CAIRN_BIN=$CAIRN_BIN, DATABASE_URL=${DATABASE_URL:-unset})"
cd "$here"
"$venv/bin/python" -m pytest -p no:cacheprovider tests
