"""Bad command lines, run in-process (``spotref.cli.main.main``).

A bad option value is an argparse error: ``SystemExit(2)`` and a usage message that names the
option. A bad input found later is one line ``spotref CMD: error: ...`` and status 2. Ctrl-C is
one line ``... interrupted`` and status 130. Never a traceback.
"""

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from spotref.cli import main as cli
from spotref.load.targets import DEFAULT_TARGET, TARGETS_DIR
from spotref.train import train_drafter
from workbench import cli as workbench_cli
from workbench.bench import bench

pytest.importorskip("safetensors")
MODEL = ["--model", "stdlib-b32", "--prompt", "def f(x):"]  # a code target: no chat format
COMMANDS = {**cli.COMMANDS, **workbench_cli.COMMANDS}  # spotref's and the workbench's (python -m workbench)


def main(argv) -> int:
    """The command line ``argv[0]`` belongs to: the workbench's, else spotref's."""
    return (workbench_cli.main if argv and argv[0] in workbench_cli.COMMANDS else cli.main)(argv)


def prog(command: str) -> str:
    """How ``command``'s errors name it."""
    return f"python -m workbench {command}" if command in workbench_cli.COMMANDS else f"spotref {command}"


def option_error(capsys, argv) -> str:
    """The argparse error message of ``argv`` (SystemExit 2), checked to be one usage + one line."""
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert e.value.code == 2 and out == "" and "Traceback" not in err
    assert err.startswith("usage: ") and err.splitlines()[-1].startswith(f"{prog(argv[0])}: error: ")
    return err.splitlines()[-1]


def input_error(capsys, argv) -> str:
    """The one-line error of ``argv`` found after parsing (exit status 2, no SystemExit)."""
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert rc == 2 and "Traceback" not in err and err.count("\n") == 1, err
    assert err.startswith(f"{prog(argv[0])}: error: ")
    return err


# ---- option values: argparse errors naming the option -----------------------------------------


@pytest.mark.parametrize(
    "argv, option",
    [
        (["generate", *MODEL, "--block-length", 0], "--block-length"),
        (["generate", *MODEL, "--block-length", -4], "--block-length"),
        (["generate", *MODEL, "--block-length", "x"], "--block-length"),
        (["audit", *MODEL, "--batch-rows", -1], "--batch-rows"),
        (["audit", *MODEL, "--batch-rows", 100000], "--batch-rows"),
        (["audit", *MODEL, "--batch-rows", "x"], "--batch-rows"),
        (["generate", *MODEL, "--seed", -1], "--seed"),
        (["generate", *MODEL, "--seed", 2**64], "--seed"),
        (["generate", *MODEL, "--budget", 0], "--budget"),
        (["generate", *MODEL, "--budget", "automatic"], "--budget"),
        (["generate", *MODEL, "--depth", -1], "--depth"),
        (["generate", *MODEL, "--max-new-tokens", -1], "--max-new-tokens"),
        (["generate", *MODEL, "--top-k", 0], "--top-k"),
        (["generate", *MODEL, "--mask-id", -1], "--mask-id"),
        (["audit", *MODEL, "--block-length", 0], "--block-length"),
        (["demo", "--prompts", 0], "--prompts"),
        (["demo", "--prompts", -2], "--prompts"),
        (["demo", "--gen-length", 0], "--gen-length"),
        (["demo", "--budgets", "4,x"], "--budgets"),
        (["demo", "--budgets", ","], "--budgets"),
        (["demo", "--budgets", "0"], "--budgets"),
        (["demo", "--depth", -2], "--depth"),
        (["demo", "--seed", 1.5], "--seed"),
        (["bench", "--drafters", "bogus"], "--drafters"),
        (["bench", "--drafters", "spot,bogus"], "--drafters"),
        (["bench", "--drafters", ""], "--drafters"),
        (["bench", "--prompts", 0], "--prompts"),
        (["bench", "--temperatures", "-1"], "--temperatures"),
        (["bench", "--temperatures", "nan"], "--temperatures"),
        (["bench", "--temperatures", "0,x"], "--temperatures"),
        (["bench", "--budgets", "0"], "--budgets"),
        (["bench", "--budgets", "x"], "--budgets"),
        (["bench", "--new-tokens", 0], "--new-tokens"),
        (["bench", "--depth", -1], "--depth"),
        (["bench", "--seed", -1], "--seed"),
        (["train-target", "--name", "t", "--steps", -1], "--steps"),
        (["train-target", "--name", "t", "--steps", 0], "--steps"),
        (["train-target", "--name", "t", "--lr", 0], "--lr"),
        (["train-target", "--name", "t", "--batch", 0], "--batch"),
        (["train-target", "--name", "t", "--block-size", 0], "--block-size"),
        (["train-target", "--name", "t", "--mix-blocks", "16,x"], "--mix-blocks"),
        (["train-target", "--name", "t", "--minutes", -1], "--minutes"),
        (["train-target", "--name", "t", "--threads", 0], "--threads"),
        (["train-target", "--name", "t", "--weight-decay", -0.1], "--weight-decay"),
        (["train-drafter", DEFAULT_TARGET, "--prompts", 0], "--prompts"),
        (["train-drafter", DEFAULT_TARGET, "--tf-depth", -1], "--tf-depth"),
        (["train-drafter", DEFAULT_TARGET, "--lr", -1], "--lr"),
        (["train-drafter", DEFAULT_TARGET, "--steps", 0], "--steps"),
        (["train-drafter", DEFAULT_TARGET, "--seeds", 0], "--seeds"),
    ],
)
def test_bad_option_values_are_argparse_errors_naming_the_option(capsys, argv, option):
    assert f"argument {option}: " in option_error(capsys, argv)


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["nope"],
        ["--versions"],
        ["demo", "--nope"],
        ["generate", "--model", "x"],
        ["generate", *MODEL, "--chat", "--raw"],  # one or the other
    ],
)
def test_bad_command_lines(capsys, argv):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and "usage: spotref" in capsys.readouterr().err


# ---- later errors: one line naming the option -------------------------------------------------


@pytest.mark.parametrize(
    "argv, message",
    [
        (["generate", *MODEL, "--system", "be brief"], "--system needs --chat"),
        (["generate", *MODEL, "--no-think"], "--no-think needs --chat"),
        (["generate", "--model", DEFAULT_TARGET, "--prompt-ids", "1,2", "--chat"], "--chat wraps --prompt text"),
        (["generate", *MODEL, "--chat"], "--chat: --model 'stdlib-b32' has no chat format"),
        (["audit", *MODEL, "--chat", "--system", "x"], "--chat: --model"),
        (["generate", "--model", DEFAULT_TARGET, "--prompt-ids", "1,2", "--raw"], "--raw sends --prompt text as it is"),
        (["generate", "--model", DEFAULT_TARGET, "--prompt", "x", "--raw", "--no-think"], "which --raw leaves out"),
        (["generate", *MODEL, "--drafter", "bogus"], "--drafter 'bogus' is unknown"),
        (["generate", *MODEL, "--drafter", "nope.pt"], "--drafter 'nope.pt': no drafter checkpoint"),
        (["generate", "--model", "no-such-target", "--prompt", "x"], "--model 'no-such-target'"),
        (["demo", "--model", "no-such-target"], "unknown target 'no-such-target'"),
        (["bench", "--update-shipped", "--out", "x.md"], "--update-shipped writes the shipped report"),
        (["bench", "--replot"], "--replot needs --out"),
        (["bench", "--replot", "--out", "/nonexistent/r.md"], "--out '/nonexistent/r.md': cannot read the report"),
        (["bench", "--targets", "nope"], "--targets: unknown target(s) nope"),
        (["train-target", "--name", "t", "--export", str(TARGETS_DIR)], "t.safetensors is a shipped file"),
        (["train-drafter", DEFAULT_TARGET, "--update-shipped", "--out", "x.pt"], "--update-shipped writes the shipped"),
        (["train-drafter", "no-such-target"], "unknown target 'no-such-target'"),
        (
            ["quality", "stdlib-b32", "--prompt-tokens", 7],
            "--prompt-tokens 7 is not a multiple of stdlib-b32's block size 32",
        ),
    ],
)
def test_bad_input_found_later_is_one_line(capsys, argv, message):
    assert message in input_error(capsys, argv)


def test_drafter_option_takes_what_load_drafter_takes(capsys):
    from spotref.cli.generate import drafter_arg
    from spotref.drafters.spot import SpotDrafter
    from spotref.load.drafters import ORDER_DIR

    assert isinstance(drafter_arg("stdlib-b16"), SpotDrafter)
    assert isinstance(drafter_arg(str(ORDER_DIR / "stdlib-b16.pt")), SpotDrafter)
    rc = main(
        [
            "generate",
            "--model",
            "stdlib-b16",
            "--prompt",
            "def f(x):",
            "--max-new-tokens",
            "8",
            "--drafter",
            "stdlib-b16",
        ]
    )
    assert rc == 0 and "(drafter stdlib-b16)" in capsys.readouterr().err


def test_costmodel_temperature_is_an_argparse_error_naming_it(capsys):
    """``--temperature nan`` ran the cost model on NaN; now refused as parsed."""
    from workbench.bench import costmodel

    with pytest.raises(SystemExit) as e:
        costmodel.main(["--temperature", "nan"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "argument --temperature: must be a finite number, got nan" in err


def test_architecture_png_without_matplotlib_is_one_line(capsys, monkeypatch, tmp_path):
    """``--png`` without matplotlib: one line saying what to install (status 1), before any
    output or run directory (it was a traceback from inside the drawing, and an empty runs/ dir)."""
    from workbench import architecture

    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib: ImportError
    assert architecture.main(["--png"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err == (
        "python -m workbench.architecture: error: --png needs matplotlib: "
        "pip install 'spotref[bench]' (or pip install matplotlib)\n"
    )
    assert list(tmp_path.iterdir()) == []


# ---- Ctrl-C -------------------------------------------------------------------------------------


def interrupt(*args, **kwargs):
    raise KeyboardInterrupt


@pytest.mark.parametrize(
    "target, argv, prog",
    [
        ("spotref.cli.demo.run", ["demo", "--model", "random"], "spotref demo"),
        ("spotref.cli.generate.run_generate", ["generate", *MODEL], "spotref generate"),
        ("workbench.bench.bench.run", ["bench"], "python -m workbench bench"),
        ("workbench.train.train_target.run", ["train-target", "--name", "t"], "python -m workbench train-target"),
    ],
)
def test_ctrl_c_is_one_line_and_status_130(capsys, monkeypatch, target, argv, prog):
    monkeypatch.setattr(target, interrupt)
    assert main(argv) == 130
    out, err = capsys.readouterr()
    assert err == f"{prog}: interrupted\n" and "Traceback" not in out + err


def test_ctrl_c_in_the_module_entry_points(capsys, monkeypatch):
    monkeypatch.setattr(bench, "run", interrupt)
    monkeypatch.setattr(train_drafter, "run", interrupt)
    assert bench.main([]) == 130 and train_drafter.main([DEFAULT_TARGET]) == 130
    assert capsys.readouterr().err.splitlines() == [
        "python -m workbench.bench.bench: interrupted",
        "python -m spotref.train.train_drafter: interrupted",
    ]


# ---- help ---------------------------------------------------------------------------------------


def subparser(name: str) -> argparse.ArgumentParser:
    own = workbench_cli.COMMANDS if name in workbench_cli.COMMANDS else cli.COMMANDS
    p = cli.parser_for(name, own)
    return next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices[name]


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_option_has_plain_help(name):
    p = subparser(name)
    for action in p._actions:
        assert action.help, f"spotref {name} {action.option_strings or action.dest}: no help text"
        assert "``" not in action.help, f"spotref {name} {action.option_strings}: RST markup in help"
    assert "``" not in p.format_help()


def test_top_level_help_is_plain_and_does_not_import_torch():
    code = (
        "import sys; from spotref.cli.main import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "assert 'torch' not in sys.modules, 'spotref --help imported torch'"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "usage: spotref" in r.stdout and "``" not in r.stdout
    for name in cli.COMMANDS:
        assert name in r.stdout


# ---- outputs: a run directory unless told -----------------------------------------------------

QUICK = [
    "bench",
    "--quick",
    "--targets",
    "random",
    "--no-auto",
    "--no-transfer",
    "--drafters",
    "confidence",
    "--budgets",
    "2",
    "--temperatures",
    "0",
    "--prompts",
    "1",
    "--new-tokens",
    "8",
]


@pytest.mark.slow
def test_bench_defaults_to_a_run_directory_and_honours_quick_overrides(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(QUICK) == 0
    reports = list(tmp_path.glob("runs/bench-*/results.md"))
    assert len(reports) == 1 and not (tmp_path / "docs").exists()
    text = reports[0].read_text()
    assert "N in {2}" in text and "T in {0}" in text and "1 prompts x 8 new tokens" in text  # --quick's own grid lost
    assert not list(tmp_path.glob("runs/bench-*/.*.tmp"))


def test_bench_out_into_a_missing_directory_is_created(tmp_path, capsys):
    out = tmp_path / "a" / "b" / "r.md"
    assert main(QUICK + ["--out", str(out)]) == 0
    assert out.is_file() and "## Goals" in out.read_text()


def test_train_drafter_defaults_to_a_run_directory(tmp_path, monkeypatch):
    from spotref.load.drafters import ORDER_DIR

    monkeypatch.chdir(tmp_path)

    def out_path(*argv):
        return train_drafter.out_path(train_drafter.DrafterOptions.parse(train_drafter.add_arguments, ["t", *argv]))

    path = out_path()
    assert path.parent.parent == Path("runs") and path.parent.name.startswith("drafter-") and path.name == "t.pt"
    assert out_path("--out", "x/y.pt") == Path("x/y.pt")
    from spotref.files import shipped_writes

    with shipped_writes():  # as the tool runs it with --update-shipped
        assert out_path("--update-shipped") == ORDER_DIR / "t.pt"
    with pytest.raises(ValueError, match="is a shipped file"):
        out_path("--update-shipped")
    with pytest.raises(ValueError, match="--update-shipped"):
        out_path("--out", "x.pt", "--update-shipped")


SHIPPED_PLOT = Path(bench.__file__).resolve().parents[2] / "docs" / "results.png"


def test_a_refused_bench_leaves_no_run_directory(tmp_path, monkeypatch, capsys):
    """``--plot`` onto a shipped file is refused after the run directory was named: the
    directory, still empty, is removed (it was left behind)."""
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "--quick", "--targets", "random", "--plot", str(SHIPPED_PLOT)]) == 2
    assert "is a shipped file" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "module, argv",
    [
        ("spotref.train.train_drafter", ["train-drafter", DEFAULT_TARGET]),
        ("workbench.bench.stability", None),
    ],
)
def test_an_interrupted_run_leaves_no_empty_run_directory(tmp_path, monkeypatch, capsys, module, argv):
    """Ctrl-C while the trajectories are recorded, before anything is written: no empty
    ``runs/drafter-TIME/`` or ``runs/stability-TIME/`` is left."""
    import importlib

    tool = importlib.import_module(module)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tool, "recorded", interrupt)
    assert (main(argv) if argv else tool.main([DEFAULT_TARGET])) == 130
    assert "interrupted" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_bench_outputs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    paths = bench.outputs(bench.BenchOptions.parse(bench.add_arguments, []))
    assert Path(paths.report).parent.name.startswith("bench-")
    assert paths.plot == str(Path(paths.report).with_suffix(".png"))
    shipped = bench.outputs(bench.BenchOptions.parse(bench.add_arguments, ["--update-shipped"]))
    assert shipped == ("docs/results.md", "docs/results.png")


def refusal(capsys, argv) -> str:
    """The one error line of ``argv``, an argparse error or one found after parsing (exit status 2
    either way, no traceback)."""
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as e:
        rc = e.code
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and "Traceback" not in err, err
    return err.splitlines()[-1]


NO_CHECKPOINT = ["--model", "./no-such-checkpoint"]  # a late refusal would name it instead


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--width", 4, "--budget", 16], "budget 16 exceeds the verify width 4"),
        (["--budget", 10**6], "budget must be an int in"),
        (["--width", 10**6], "width must be an int in"),
        (["--temperature", "nan"], "argument --temperature: must be a finite number, got nan"),
        (["--temperature", "-1"], "argument --temperature: must be in [0.0, inf], got -1.0"),
        (["--temperature", "1e300"], "argument --temperature: 1e+300 is above 3.4e+38, float32's largest"),
        (["--temperature", "1e-320"], "argument --temperature: 1e-320 is below 1e-06"),
        (["--top-p", 2], "argument --top-p: must be in (0.0, 1.0], got 2.0"),
        (["--top-p", "nan"], "argument --top-p: must be a finite number, got nan"),
        (["--threshold", 1.5], "argument --threshold: must be in (0.0, 1.0), got 1.5"),
        (["--threshold", 1], "argument --threshold: must be in (0.0, 1.0), got 1.0"),
        (["--prompt-ids", "a,b"], "argument --prompt-ids: must be an integer, got 'a'"),
        (["--prompt-ids", "1,-2"], "argument --prompt-ids: must be an int in [0, inf], got -2"),
        (["--device", "bogus"], "argument --device: bad device 'bogus'"),
        (["--dtype", "int8"], "argument --dtype: unsupported dtype 'int8': use one of bfloat16, float16, float32"),
        (["--threads", 100000], "argument --threads: must be an int in [1, 1024], got 100000"),
        (["--threads", 0], "argument --threads: must be an int in [1, 1024], got 0"),
    ],
)
@pytest.mark.parametrize("command", ["generate", "audit"])
def test_bad_arguments_are_refused_before_the_model_loads(capsys, command, argv, message):
    """No checkpoint is read (the directory does not exist): the arguments alone are refused, each
    by its own message (a refusal after loading would name the missing checkpoint)."""
    prompt = [] if "--prompt-ids" in argv else ["--prompt-ids", "1,2"]
    err = refusal(capsys, [command, *NO_CHECKPOINT, *prompt, *argv])
    assert message in err and "no-such-checkpoint" not in err


@pytest.mark.parametrize("command", ["generate", "audit"])
def test_llada_s_temperature_cap_is_refused_before_its_weights_load(capsys, monkeypatch, tmp_path, command):
    """T > 20 on a LLaDA model (bundled, or a directory whose config.json says llada) is refused from
    the metadata by the API's own check (``DecodeOptions.check`` on its ``Shape``): no weight is
    read (the loader is made to fail if called)."""
    import json

    import spotref.cli.generate as cli_generate
    from spotref.api import DecodeOptions
    from spotref.load.targets import target_shape

    monkeypatch.setattr(cli_generate, "load_model_and_tokenizer", lambda *a, **k: pytest.fail("loaded"))
    config = json.loads((TARGETS_DIR / "gsm-llada.json").read_text())["config"]
    (tmp_path / "config.json").write_text(json.dumps({**config, "model_type": "llada"}))
    for model in ("gsm-llada", str(tmp_path)):
        err = refusal(capsys, [command, "--model", model, "--prompt-ids", "1,2", "--temperature", "25"])
        assert f"--temperature 25 (--model {model}): temperature 25.0 is above 20, the most LLaDA's draw takes" in err
    monkeypatch.undo()  # a Dream model takes T = 25: the cap is LLaDA's alone
    assert DecodeOptions(temperature=25.0).check(target_shape("gsm-dream")).temperature == 25.0


@pytest.mark.parametrize(
    "argv",
    [
        ["demo", "--model", "random"],
        ["quality", DEFAULT_TARGET],
        ["train-target", "--name", "t"],
        ["train-drafter", DEFAULT_TARGET],
    ],
)
def test_threads_are_capped_by_name_before_any_work(capsys, argv):
    """``--threads 100000`` crashed torch's thread pool (a segmentation fault); every tool that
    takes ``--threads`` caps it at ``argtypes.MAX_THREADS``."""
    err = option_error(capsys, [*argv, "--threads", 100000])
    assert "argument --threads: must be an int in [1, 1024], got 100000" in err


def test_threads_are_capped_in_the_module_entry_points(capsys):
    from workbench.bench import stability

    with pytest.raises(SystemExit) as e:
        stability.main(["--threads", "100000"])
    assert e.value.code == 2 and "argument --threads: must be an int in [1, 1024]" in capsys.readouterr().err
