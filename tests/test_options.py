"""Each command builds one typed options object from its parser (spotref.tools.options)."""

import argparse
import dataclasses
import inspect

import pytest

from spotref.tools.options import Options


def dests(add_arguments) -> set:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return {a.dest for a in p._actions if a.dest != "help"}


def test_options_refuse_a_namespace_that_differs_from_their_fields():
    @dataclasses.dataclass(frozen=True)
    class Two(Options):
        a: int
        b: str

    assert Two.from_namespace(argparse.Namespace(a=1, b="x", command="c", argv=["--a", "1"])) == Two(1, "x")
    assert Two.from_namespace(argparse.Namespace(a=1, b="x", argv=["--a", "1"])).argv == ("--a", "1")
    with pytest.raises(TypeError, match=r"options without a field \['c'\], fields without an option \[\]"):
        Two.from_namespace(argparse.Namespace(a=1, b="x", c=2))
    with pytest.raises(TypeError, match=r"fields without an option \['b'\]"):
        Two.from_namespace(argparse.Namespace(a=1))
    with pytest.raises(dataclasses.FrozenInstanceError):
        Two(1, "x").a = 2


def test_demo_options_match_its_parser():
    from spotref.tools import demo

    o = demo.DemoOptions.parse(demo.add_arguments, ["--budgets", "4,8", "--no-auto"])
    assert set(o.names()) == dests(demo.add_arguments)
    assert o.budgets == [4, 8] and o.budget_auto is False and o.model == "default"
    for f in (demo.demo, demo.setup, demo.gen_length, demo.why):
        assert "DemoOptions" in str(inspect.signature(f)), f


def test_costmodel_options_match_its_parser():
    from spotref.tools import costmodel

    o = costmodel.CostOptions.parse(costmodel.add_arguments, ["stdlib-b32", "--profile", "--budgets", "2,4"])
    assert set(o.names()) == dests(costmodel.add_arguments)
    assert o.target == "stdlib-b32" and o.profile and o.budgets == [2, 4]
    for f in (costmodel.fused_store, costmodel.round_budget, costmodel.profile, costmodel.cost_table):
        assert "CostOptions" in str(inspect.signature(f)), f


# ---- spotref generate, spotref audit (spotref.tools.cli_models) -------------------------------

CLI_MODELS_ARGV = ["--model", "stdlib-b16", "--prompt-ids", "1, 2,3", "--seed", "5"]


class ReachedSetup(Exception):
    """Raised by a stand-in ``setup``: what ``run_generate``/``run_audit`` passed it, seen, the run stops."""


def cli_models_setup_sees(monkeypatch, run, command: str):
    """What ``run`` (``run_generate`` or ``run_audit``) gives ``setup``, parsed by the ``spotref`` parser."""
    from spotref.tools import cli, cli_models

    seen = []

    def setup(options):
        seen.append(options)
        raise ReachedSetup

    monkeypatch.setattr(cli_models, "setup", setup)
    args = cli.parser_for(command).parse_args([command, *CLI_MODELS_ARGV])
    args.argv = CLI_MODELS_ARGV
    with pytest.raises(ReachedSetup):
        run(args)
    return seen[0]


def cli_models_parser_dests(add_arguments) -> list:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return [a.dest for a in p._actions if a.dest != "help"]


def test_generate_options_match_its_parser(monkeypatch):
    from spotref.tools.cli_models import GenerateOptions, add_generate, check_chat_args, prompt_ids, run_generate

    o = GenerateOptions.parse(add_generate, CLI_MODELS_ARGV)
    assert type(o) is GenerateOptions and list(o.names()) == cli_models_parser_dests(add_generate)
    assert (o.max_new_tokens, o.drafter, o.seed, o.argv) == (128, "confidence", 5, ())
    assert prompt_ids(o, None) == [1, 2, 3]
    with pytest.raises(ValueError, match="--system needs --chat"):
        check_chat_args(GenerateOptions.parse(add_generate, CLI_MODELS_ARGV + ["--system", "s"]))
    seen = cli_models_setup_sees(monkeypatch, run_generate, "generate")
    assert type(seen) is GenerateOptions and seen.argv == tuple(CLI_MODELS_ARGV) and seen.seed == 5


def test_audit_options_match_its_parser(monkeypatch):
    from spotref.tools.cli_models import AuditOptions, add_audit, add_generate, run_audit

    o = AuditOptions.parse(add_audit, CLI_MODELS_ARGV + ["--batch-rows", "3"])
    assert type(o) is AuditOptions and list(o.names()) == cli_models_parser_dests(add_audit)
    assert (o.batch_rows, o.max_new_tokens) == (3, 64)
    with pytest.raises(TypeError, match=r"fields without an option \['batch_rows'\]"):
        AuditOptions.parse(add_generate, CLI_MODELS_ARGV)
    seen = cli_models_setup_sees(monkeypatch, run_audit, "audit")
    assert type(seen) is AuditOptions and seen.batch_rows == 8 and seen.argv == tuple(CLI_MODELS_ARGV)


def test_bench_options_match_its_parser(tmp_path, monkeypatch):
    import argparse
    import dataclasses
    import typing

    from spotref.tools import bench, bench_report, bench_run, bench_sets
    from spotref.tools.bench_options import DRAFTERS, BenchOptions, Grid, add_arguments, grid

    p = argparse.ArgumentParser()
    add_arguments(p)
    dests = [a.dest for a in p._actions if a.dest != "help"]
    options = BenchOptions.from_namespace(p.parse_args(["--quick", "--targets", "random"]))
    assert isinstance(options, BenchOptions) and list(BenchOptions.names()) == dests
    assert BenchOptions.parse(add_arguments, ["--with", "a.md", "b.md"]).also == ["a.md", "b.md"]
    for f in (bench.bench_target, bench.outputs, bench_run.gen, bench_run.run_drafter, bench_sets.bench_sets):
        assert typing.get_type_hints(f)["options"] is BenchOptions, f.__name__
    assert typing.get_type_hints(bench_report.header)["options"] is BenchOptions
    g = grid(options)  # --quick's grid where an option was left out; the depth capped
    assert g == Grid((0.0, 1.0), (1, 4), 2, 24, 4, (0.9,), DRAFTERS, True)
    monkeypatch.chdir(tmp_path)
    assert bench.outputs(dataclasses.replace(options, out="r.md")) == ("r.md", "r.png")
