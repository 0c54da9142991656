"""Each command builds one typed options object from its parser (spotref.cli.options)."""

import argparse
import dataclasses
import inspect
from pathlib import Path

import pytest

from spotref.cli.options import Options


def dests(add_arguments) -> list:
    """The parser's options (argparse dests), in its order."""
    p = argparse.ArgumentParser()
    add_arguments(p)
    return [a.dest for a in p._actions if a.dest != "help"]


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
    from spotref.cli import demo

    o = demo.DemoOptions.parse(demo.add_arguments, ["--budgets", "4,8", "--no-auto"])
    assert set(o.names()) == set(dests(demo.add_arguments))
    assert o.budgets == [4, 8] and o.budget_auto is False and o.model == "default"
    for f in (demo.demo, demo.setup, demo.gen_length, demo.why):
        assert "DemoOptions" in str(inspect.signature(f)), f


def test_costmodel_options_match_its_parser():
    from workbench.bench import costmodel

    o = costmodel.CostOptions.parse(costmodel.add_arguments, ["stdlib-b32", "--profile", "--budgets", "2,4"])
    assert set(o.names()) == set(dests(costmodel.add_arguments))
    assert o.target == "stdlib-b32" and o.profile and o.budgets == [2, 4]
    for f in (costmodel.fused_store, costmodel.round_budget, costmodel.profile, costmodel.cost_table):
        assert "CostOptions" in str(inspect.signature(f)), f


# ---- spotref generate, spotref audit (spotref.cli.generate) -------------------------------

CLI_MODELS_ARGV = ["--model", "stdlib-b16", "--prompt-ids", "1, 2,3", "--seed", "5"]


class ReachedSetup(Exception):
    """Raised by a stand-in ``setup``: what ``run_generate``/``run_audit`` passed it, seen, the run stops."""


def cli_models_setup_sees(monkeypatch, run, command: str):
    """What ``run`` (``run_generate`` or ``run_audit``) gives ``setup``, parsed by the ``spotref`` parser."""
    from spotref.cli import generate as cli_models
    from spotref.cli import main as cli

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


def test_generate_options_match_its_parser(monkeypatch):
    from spotref.cli.generate import GenerateOptions, add_generate, check_chat_args, prompt_ids, run_generate

    o = GenerateOptions.parse(add_generate, CLI_MODELS_ARGV)
    assert type(o) is GenerateOptions and list(o.names()) == dests(add_generate)
    assert (o.max_new_tokens, o.drafter, o.seed, o.argv) == (128, "confidence", 5, ())
    assert prompt_ids(o, None) == [1, 2, 3]
    with pytest.raises(ValueError, match="--system needs --chat"):
        check_chat_args(GenerateOptions.parse(add_generate, CLI_MODELS_ARGV + ["--system", "s"]))
    seen = cli_models_setup_sees(monkeypatch, run_generate, "generate")
    assert type(seen) is GenerateOptions and seen.argv == tuple(CLI_MODELS_ARGV) and seen.seed == 5


def test_audit_options_match_its_parser(monkeypatch):
    from spotref.cli.generate import AuditOptions, add_audit, add_generate, run_audit

    o = AuditOptions.parse(add_audit, CLI_MODELS_ARGV + ["--batch-rows", "3"])
    assert type(o) is AuditOptions and list(o.names()) == dests(add_audit)
    assert (o.batch_rows, o.max_new_tokens) == (3, 64)
    with pytest.raises(TypeError, match=r"fields without an option \['batch_rows'\]"):
        AuditOptions.parse(add_generate, CLI_MODELS_ARGV)
    seen = cli_models_setup_sees(monkeypatch, run_audit, "audit")
    assert type(seen) is AuditOptions and seen.batch_rows == 8 and seen.argv == tuple(CLI_MODELS_ARGV)


def test_bench_options_match_its_parser(tmp_path, monkeypatch):
    import dataclasses
    import typing

    from workbench.bench import bench, bench_report, bench_run, bench_sets
    from workbench.bench.bench_options import DRAFTERS, BenchOptions, Grid, add_arguments, grid

    options = BenchOptions.parse(add_arguments, ["--quick", "--targets", "random"])
    assert isinstance(options, BenchOptions) and list(BenchOptions.names()) == dests(add_arguments)
    assert BenchOptions.parse(add_arguments, ["--with", "a.md", "b.md"]).also == ["a.md", "b.md"]
    for f in (bench.bench_target, bench.outputs, bench_run.gen, bench_run.run_drafter, bench_sets.bench_sets):
        assert typing.get_type_hints(f)["options"] is BenchOptions, f.__name__
    assert typing.get_type_hints(bench_report.header)["options"] is BenchOptions
    g = grid(options)  # --quick's grid where an option was left out; the depth capped
    assert g == Grid((0.0, 1.0), (1, 4), 2, 24, 4, (0.9,), DRAFTERS, True)
    monkeypatch.chdir(tmp_path)
    assert bench.outputs(dataclasses.replace(options, out="r.md")) == ("r.md", "r.png")


# ---- spotref train-drafter, python -m workbench quality, python -m workbench.bench.stability -----------------


def test_train_drafter_options_match_its_parser(monkeypatch, tmp_path):
    from spotref.train import train_drafter
    from spotref.train.train_drafter import DrafterOptions, add_arguments

    o = DrafterOptions.parse(add_arguments, ["t", "--out", str(tmp_path / "d.pt"), "--seeds", "3"])
    assert type(o) is DrafterOptions and list(o.names()) == dests(add_arguments)
    assert (o.target, o.prompts, o.test_prompts, o.lr, o.init, o.no_sets, o.argv) == (
        "t",
        120,
        24,
        1e-3,
        None,
        False,
        (),
    )
    assert train_drafter.out_path(o) == tmp_path / "d.pt"
    spec = train_drafter.trajectory_spec(o)
    assert (spec.prompts, spec.test_prompts, spec.set_prompts, spec.seeds) == (120, 24, 60, 3)
    assert train_drafter.command(o) == "python -m spotref.train.train_drafter"

    seen = []
    monkeypatch.setattr(train_drafter, "load_target", lambda name, directory: name)
    monkeypatch.setattr(train_drafter, "remeasure", lambda target, options: seen.append((target, options)) or 0)
    assert train_drafter.main(["t", "--curves-only"]) == 0
    ((target, options),) = seen
    assert target == "t" and type(options) is DrafterOptions and options.curves_only
    assert options.argv == ("t", "--curves-only")
    assert train_drafter.command(options) == "python -m spotref.train.train_drafter t --curves-only"


def test_quality_options_match_its_parser(monkeypatch, capsys):
    from spotref.load.targets import TARGETS_DIR
    from workbench.bench import quality
    from workbench.bench.quality import QualityOptions, add_arguments

    o = QualityOptions.parse(add_arguments, ["t"])
    assert type(o) is QualityOptions and list(o.names()) == dests(add_arguments)
    assert (o.prompts, o.prompt_tokens, o.new_tokens, o.write_meta) == (None, 64, None, False)
    assert quality.meta_path(o) == Path(TARGETS_DIR) / "t.json"
    assert quality.meta_path(QualityOptions.parse(add_arguments, ["x/t.json"])) == Path("x/t.json")

    seen = []
    monkeypatch.setattr(quality, "load_target", lambda name, directory: name)
    monkeypatch.setattr(quality, "target_report", lambda target, options: seen.append(options) or {"meets_bar": False})
    assert quality.main(["t", "--prompts", "3"]) == 1  # below the bar
    (options,) = seen
    assert type(options) is QualityOptions and options.prompts == 3 and options.argv == ("t", "--prompts", "3")
    assert '"meets_bar": false' in capsys.readouterr().out


def test_stability_options_match_its_parser(monkeypatch, tmp_path):
    from workbench.bench import stability
    from workbench.bench.stability import StabilityOptions, add_arguments

    o = StabilityOptions.parse(add_arguments, [])
    assert type(o) is StabilityOptions and list(o.names()) == dests(add_arguments)
    assert (o.targets, o.test_prompts, o.new_tokens, o.out, o.update_shipped) == ([], 10, 128, None, False)
    spec = stability.trajectory_spec(o)
    assert (spec.prompts, spec.test_prompts, spec.seeds, spec.data_dir) == (0, 10, 1, "runs/drafter-data")
    assert "10 held-out prompts x 128 new tokens" in stability.report(o, [], [], [])

    seen, out = [], tmp_path / "s.md"
    monkeypatch.setattr(stability, "list_targets", lambda directory: [])  # no target: nothing recorded
    monkeypatch.setattr(stability, "report", lambda options, *tables: seen.append(options) or "the report")
    assert stability.main(["--out", str(out), "--test-prompts", "2"]) == 0
    (options,) = seen
    assert type(options) is StabilityOptions and options.test_prompts == 2 and options.out == str(out)
    assert out.read_text() == "the report"


def test_every_spotref_command_has_one_options_class_matching_its_parser():
    """A command added to ``spotref`` without its typed options fails here."""
    import importlib

    from spotref.cli import main as cli
    from workbench import cli as workbench_cli
    from workbench.train.train_options import OPTIONS as TRAIN_OPTIONS

    classes = {
        "demo": "DemoOptions",
        "generate": "GenerateOptions",
        "audit": "AuditOptions",
        "show": "ShowOptions",
        "train-target": None,  # TrainOptions: its own record of a run's options (train_options)
        "bench": "BenchOptions",
        "quality": "QualityOptions",
        "train-drafter": "DrafterOptions",
        "train-universal": "UniversalOptions",
        "conform": "ConformOptions",
        "calibrate-sets": "CalibOptions",
    }
    commands = {**cli.COMMANDS, **workbench_cli.COMMANDS}  # spotref's and python -m workbench's
    assert set(classes) == set(commands)
    for command, (_, module, add, _) in commands.items():
        add_arguments = getattr(importlib.import_module(module), add)
        if classes[command] is None:
            assert set(TRAIN_OPTIONS) == set(dests(add_arguments))
            continue
        options = getattr(importlib.import_module(module), classes[command])
        assert issubclass(options, Options) and set(options.names()) == set(dests(add_arguments)), command


def test_spotref_version_prints_the_installed_version(capsys):
    import importlib.metadata

    from spotref.cli.main import main

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"spotref {importlib.metadata.version('spotref')}"
