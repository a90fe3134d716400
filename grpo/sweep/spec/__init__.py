"""The sweep spec: its models, loading, the search space, samplers and pruners, curve objectives."""
