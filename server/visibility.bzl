"""Who may depend on each of server/'s rooms (docs/architecture.md, layers).

Each room is visible to the rooms above it, to the tests and to the
benchmarks; nothing outside server/, tests/ and bench/ may reach into the
daemon (clients talk to it over gRPC only).
"""

TESTS_AND_BENCH = [
    "//bench:__subpackages__",
    "//tests:__subpackages__",
]

def visible_to(*rooms):
    """The packages above a room: e.g. visible_to("service", "session")."""
    return ["//server:__pkg__"] + ["//server/%s:__pkg__" % room for room in rooms] + TESTS_AND_BENCH
