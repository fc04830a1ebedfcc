"""``python -m tests.mutants``: see :mod:`tests.mutants.run`."""

import sys

from tests.mutants.run import main

sys.exit(main())
