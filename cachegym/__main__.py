"""``python -m cachegym COMMAND ...``: the ``cachegym`` command (:func:`cachegym.cli.main`)."""

from cachegym.cli import main

raise SystemExit(main())
