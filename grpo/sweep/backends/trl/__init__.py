"""The ``trl`` backend (issue 32, in progress): MindSpeed-RL keys mapped to TRL's ``GRPOConfig``."""
