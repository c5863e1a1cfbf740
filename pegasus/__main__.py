"""Lets ``python -m pegasus`` behave exactly like the ``pegasus`` console script."""

from pegasus.cli import main

raise SystemExit(main())
