"""The study: its Optuna storage, leases of running trials, retries, answered repeats, the environment record."""
