"""The ``verl`` trial backend (verl 0.9.x on GPUs): each trial one ``python -m verl.trainer.main_ppo`` Ray job.

``backend.VerlBackend`` (registered as ``backend: verl``); ``_render`` (a trial as overrides over verl's own
``ppo_trainer``), ``_validate`` (composed and validated by verl's own code, on a CPU), ``_launch`` (the Ray job),
``_resume`` (retries and pbt branches from ``global_step_N``), ``log`` (the file logger's JSONL as the metric
stream), ``coverage`` (every key applied, refused or classified: docs/backend_verl.md).
"""
