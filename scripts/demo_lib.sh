# Shared by scripts/demo and scripts/demo_failover (sourced, not run): how a
# step is printed, a command shown before it runs, a failure, and the
# shared-memory instance of a data directory.

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }
fail() { echo "demo FAILED: $*" >&2; exit 1; }

# The shared-memory instance summond derives from a data directory: FNV-1a 64
# of its canonical path, low 48 bits in hex (InstanceForDataDir in
# server/model/model_registry.cc); its segments are /dev/shm/summon-<it>-*.
instance_of() {
  /usr/bin/python3 -c '
import sys
h = 0xcbf29ce484222325
for b in sys.argv[1].encode():
    h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
print("%012x" % (h & 0xffffffffffff))' "$(realpath -m "$1")"
}
