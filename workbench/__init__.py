"""The workbench: what made the bundled targets, the benchmarks and the results pages. It lives in
the repository and is tested with it, but it is not installed with spotref: run it from a checkout
as ``python -m workbench COMMAND`` (train-target, bench, quality), or a module of it as a script
(``python -m workbench.bench.costmodel``).
It imports spotref; spotref never imports it."""
