"""``python -m operative``: the ``operative`` command."""

from operative.cli import main

raise SystemExit(main())
