"""``python -m streamworker.cli`` is the ``streamworker`` command, as ``python -m streamworker``."""

from __future__ import annotations

import sys

from streamworker.cli import main

sys.exit(main())
