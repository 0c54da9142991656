"""``python -m spotref``: the ``spotref`` command (``spotref.cli.main``)."""

import sys

from spotref.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
