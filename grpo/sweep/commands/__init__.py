"""The ``grpo-sweep`` subcommands (run, status, best, report, export, dashboard, validate) and their views."""
