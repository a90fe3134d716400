"""The run of a study: the driver and what it decides (preflight, trial plans, outcomes, retention, collapse)."""
