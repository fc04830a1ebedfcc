"""``python -m tests.mutation``: see :mod:`tests.mutation.tally`."""

import sys

from .tally import main

sys.exit(main())
