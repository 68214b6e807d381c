"""The integration tests are a package so that their conftest is imported as
`integrations.conftest`, leaving the name `conftest` to
tests/fsdp_conformance, whose tests import it by that name when scripts/test
collects both directories in one run."""
