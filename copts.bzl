"""Compiler flags for the project's own code (system headers stay exempt)."""

SUMMON_COPTS = [
    "-Wall",
    "-Wextra",
    "-Werror",
]
