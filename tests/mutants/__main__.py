"""``python -m tests.mutants``: see :mod:`tests.mutants.run`."""

import sys

from .run import main

sys.exit(main())
