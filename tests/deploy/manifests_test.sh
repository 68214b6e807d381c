#!/bin/bash
# Runs tests/deploy/manifests_test.py (PyYAML reads the manifests) in summon's
# Python environment through scripts/python; scripts/setup builds it. A Bazel
# test gets no HOME of its own user, so the venv is looked up under that
# user's home from the password database, unless SUMMON_VENV_ROOT says where
# (.bazelrc passes it through). The Python test prints one line per check
# and writes them to $XML_OUTPUT_FILE.
set -euo pipefail
if [ -z "${SUMMON_VENV_ROOT:-}" ]; then
  SUMMON_VENV_ROOT="$(getent passwd "$(id -u)" | cut -d: -f6)/.cache"
  export SUMMON_VENV_ROOT
fi
exec "$TEST_SRCDIR/summon/scripts/python" \
  "$TEST_SRCDIR/summon/tests/deploy/manifests_test.py" "$TEST_SRCDIR/summon/deploy"
