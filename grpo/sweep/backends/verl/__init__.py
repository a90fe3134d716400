"""The ``verl`` trial backend (verl 0.9.x on GPUs), in progress: so far only the rendering of a trial as
overrides over verl's own ``ppo_trainer`` config (``_render``). Not registered in ``backend_class`` yet."""
