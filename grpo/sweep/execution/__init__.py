"""Execution: joining Ray, the scheduler of seed actors, the worker that runs a seed, trial storage."""
