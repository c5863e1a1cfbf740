"""One module per ``pegasus`` sub-command: each has ``add_parser(subparsers)`` and ``run(args)``."""
