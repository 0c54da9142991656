"""``python -m workbench COMMAND`` (``workbench.cli``)."""

import sys

from workbench.cli import main

sys.exit(main())
