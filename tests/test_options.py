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
