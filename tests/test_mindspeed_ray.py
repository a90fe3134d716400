"""NPU admission on a real local Ray cluster with the STAND-IN MindSpeed-RL entry point.

The cluster declares 4 ``NPU`` and 4 ``npu_slots``. The trial's Ray task holds 4 ``npu_slots``
(``MindSpeedBackend.resources``); the stand-in, like MindSpeed-RL, joins the cluster through
``RAY_ADDRESS`` and reserves the 4 NPUs with its own placement group. Had the task held the 4 ``NPU``
itself, that placement group could never be placed (docs/npu.md).
"""

import time
from pathlib import Path

import pytest
from mindspeed_helpers import config, make_weights, settings_for

from grpo.sweep.backends.mindspeed.backend import MindSpeedBackend


@pytest.mark.slow
def test_trials_hold_npu_slots_while_standin_mindspeed_holds_the_npus(tmp_path):
    weights = make_weights(tmp_path / "weights")
    ray = pytest.importorskip("ray")
    ray.init(address="local", num_cpus=2, resources={"NPU": 4, "npu_slots": 4}, include_dashboard=False,
             log_to_driver=False, configure_logging=False)
    try:
        cfg = config("rl_config.actor_resource.num_npus=4", iters=3)  # TP2 x PP2 on 4 NPUs
        backend = MindSpeedBackend(settings_for(weights, env={"GRPO_STANDIN_ITER_S": "0.1", "GRPO_STANDIN_RAY": "1"}))
        options = backend.resources(cfg)
        assert options == {"num_cpus": 1, "resources": {"npu_slots": 4.0}}

        @ray.remote
        def trial(run_dir: str):
            seen = []

            def report(iteration, metrics):
                if iteration == 2:  # mid-run: what is left of the cluster
                    seen.append(ray.available_resources())
                return False

            summary = backend.run(cfg, Path(run_dir), report, False)
            return summary, seen

        summary, seen = ray.get(trial.options(**options).remote(str(tmp_path / "trial")), timeout=120)
        assert summary["iterations"] == 3 and summary["returncode"] == 0
        assert seen[0].get("npu_slots", 0) == 0  # the trial's admission slots
        assert seen[0].get("NPU", 0) == 0  # its MindSpeed placement group, not a second copy
        assert "placement group of 4 NPUs ready" in (tmp_path / "trial" / "train.log").read_text()
        deadline = time.monotonic() + 10  # the placement groups go with their drivers
        while ray.available_resources().get("NPU", 0) < 4 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ray.available_resources().get("NPU", 0) == 4
    finally:
        ray.shutdown()
