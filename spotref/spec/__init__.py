"""The specification: SPOT's algorithm and each family's forward pass, nothing else (docs/spec.md
lists these modules in reading order). Each imports only numpy, torch and the others here."""
