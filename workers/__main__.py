"""``python -m workers``: the worker processes of this host (one per GPU, one for the CPU lanes)."""

from workers.launcher import main

raise SystemExit(main())
