"""``python -m streamworker`` is the ``streamworker`` command."""

from __future__ import annotations

import sys

from streamworker.cli import main

sys.exit(main())
