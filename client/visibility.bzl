"""Who may depend on each of client/'s rooms (docs/architecture.md, client).

Each room is visible to the rooms above it, to the tests and to the
benchmarks: files/ and lib/ at the bottom, cli/ (summonctl's command line)
on both, summonctl's main in client/ on top, testing/ beside the tests.
"""

TESTS_AND_BENCH = [
    "//bench:__subpackages__",
    "//tests:__subpackages__",
]

def visible_to(*rooms):
    """The packages above a room: e.g. visible_to("cli", "testing")."""
    return ["//client:__pkg__"] + ["//client/%s:__pkg__" % room for room in rooms] + TESTS_AND_BENCH
