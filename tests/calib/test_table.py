"""python -m workbench.calib_table: which sources each target is measured from, and which fits."""

import pytest

from workbench import calib_table as table


def options(*argv):
    return table.TableOptions.parse(table.add_arguments, list(argv))


def test_each_target_gets_its_default_source_or_the_named_ones():
    assert table.pairs(options("--targets", "stdlib-b16,stdlib-b32")) == [
        ("stdlib-b16", ["stdlib-b32"]),
        ("stdlib-b32", ["stdlib-b16"]),
    ]
    got = table.pairs(options("--targets", "stdlib-b16,stdlib-b32", "--sources", "stdlib-b32+stdlib-b32-d192,x.pt"))
    assert got == [("stdlib-b16", ["stdlib-b32", "stdlib-b32-d192"]), ("stdlib-b32", ["x.pt"])]


def test_bad_source_lists_are_refused_by_name():
    with pytest.raises(ValueError, match="--sources names 1 items for 2 --targets"):
        table.pairs(options("--targets", "stdlib-b16,stdlib-b32", "--sources", "stdlib-b32"))
    with pytest.raises(ValueError, match="no default source drafter for gsm-b32: pass --sources"):
        table.pairs(options("--targets", "gsm-b32"))


def test_fits_are_checked_by_the_parser(capsys):
    assert options("--fits", "full,calibrated").fits == ["full", "calibrated"]
    assert options().fits == ["calibrated", "set-head-only", "full"]
    with pytest.raises(SystemExit):
        options("--fits", "calibrated,nope")
    assert "unknown fit 'nope': choose from calibrated, set-head-only, full" in capsys.readouterr().err
