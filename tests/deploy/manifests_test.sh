#!/bin/bash
# Runs tests/deploy/manifests_test.py with Debian's python3 (python3-yaml);
# another python3 first on PATH may lack the package. The Python test prints
# one line per check and writes them to $XML_OUTPUT_FILE.
set -euo pipefail
exec /usr/bin/python3 "$TEST_SRCDIR/summon/tests/deploy/manifests_test.py" \
  "$TEST_SRCDIR/summon/deploy"
