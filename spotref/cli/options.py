"""One typed options object per command, built once from its parsed command line.

A command declares its options as a frozen dataclass deriving from ``Options``, one field per
option of its parser, named as argparse names them (``--gen-length``: ``gen_length``). Its
``run(args)`` builds the object with ``from_namespace`` as its first step; every function below
it takes the object, never the namespace. ``from_namespace`` refuses a namespace whose options
and the class's fields differ (an option added to the parser and not to the class, or the
reverse), so the two cannot drift apart; tests/cli/test_options.py builds every command's object
from its own parser.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field

PARSER_EXTRAS = ("command", "argv")  # what the spotref command and tool_main add to a namespace


@dataclass(frozen=True)
class Options:
    """The base of the commands' options. ``argv``: the command line after the command's name,
    as reports quote it (empty when the options were built in code)."""

    argv: tuple = field(default=(), repr=False, compare=False, kw_only=True)

    @classmethod
    def names(cls) -> tuple:
        """The options' names, in the order of the fields."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.name != "argv")

    @classmethod
    def from_namespace(cls, args: argparse.Namespace):
        """The options of a parsed command line; ``TypeError`` naming the options and fields
        that do not match (a programming error, not a user's)."""
        values = vars(args)
        unknown = sorted(set(values) - set(cls.names()) - set(PARSER_EXTRAS))
        missing = sorted(set(cls.names()) - set(values))
        if unknown or missing:
            raise TypeError(
                f"{cls.__name__} and its command line differ: options without a field {unknown}, "
                f"fields without an option {missing}"
            )
        return cls(**{k: values[k] for k in cls.names()}, argv=tuple(values.get("argv", ())))

    def into(self, cls):
        """A ``cls`` (a dataclass) whose every field is the option of the same name."""
        return cls(**{f.name: getattr(self, f.name) for f in dataclasses.fields(cls)})

    @classmethod
    def parse(cls, add_arguments, argv: list[str]):
        """The options of a command line, parsed by a parser that ``add_arguments`` builds."""
        p = argparse.ArgumentParser(allow_abbrev=False)
        add_arguments(p)
        return cls.from_namespace(p.parse_args(argv))
