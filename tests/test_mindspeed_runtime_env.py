"""What a trial's MindSpeed-RL run is given beyond the trainer YAML: its own Ray runtime env, its own ports,
and the forward micro batch sizes MindSpeed-RL would use.

MindSpeed-RL's ``main`` (cli/train_grpo.py) opens ``os.path.join(<checkout>, rl_config.runtime_env_path)``
and passes it to ``ray.init(runtime_env=...)``; its env_vars are what every Ray worker of the run sees. The
rendered trial points ``runtime_env_path`` at its own file (an absolute path, which ``os.path.join`` keeps).
"""

import ast
import os
import threading

import pytest
import yaml
from mindspeed_helpers import STANDIN, Recorder, config, make_weights, settings_for

from grpo.config import load_config
from grpo.plan import estimate
from grpo.sweep.backends.mindspeed._ports import HCCL_PORT_STRIDE, lease_port_block, trial_ports
from grpo.sweep.backends.mindspeed._render import render_trial_config
from grpo.sweep.backends.mindspeed.backend import MindSpeedBackend

# MindSpeed-RL's configs/envs/runtime_env.yaml (05a90d7), the port settings of it.
MINDSPEED_PORTS = {"HCCL_IF_BASE_PORT": "12345", "LCAL_COMM_ID": "127.0.0.1:27001"}


@pytest.fixture
def weights(tmp_path):
    return make_weights(tmp_path / "weights")


def runtime_env_logged(run_dir) -> dict:
    """The dict the stand-in logged as MindSpeed-RL's main does: ``ray init with runtime_env: {...}``."""
    for line in (run_dir / "train.log").read_text().splitlines():
        if "ray init with runtime_env: " in line:
            return ast.literal_eval(line.split("ray init with runtime_env: ", 1)[1])
    raise AssertionError("no 'ray init with runtime_env' line in train.log")


# ------------------------------------------------------------------------------------ runtime env
def test_the_trial_renders_its_own_runtime_env_from_the_checkouts(tmp_path, weights):
    """cli/train_grpo.py main: runtime_env = yaml of <checkout>/<runtime_env_path>; ray.init(runtime_env)."""
    env = {"TASK_QUEUE_ENABLE": "1", "RAY_ADDRESS": "10.0.0.1:6766"}
    cfg = config("rl_config.use_wandb=true", "rl_config.wandb_project=p", "rl_config.wandb_exp_name=e",
                 "engine.wandb_mode=offline", "engine.wandb_group=study")
    plan = render_trial_config(cfg, tmp_path / "run", settings_for(weights, env=env), resume=False, port_block=2)
    path = plan.trainer["rl_config"]["runtime_env_path"]
    assert path == str((tmp_path / "run" / "mindspeed_config" / "runtime_env.yaml").resolve())
    written = yaml.safe_load(open(path))
    assert written == plan.runtime_env
    env_vars = written["env_vars"]
    checkout = yaml.safe_load((STANDIN / "configs" / "envs" / "runtime_env.yaml").read_text())["env_vars"]
    assert {k: env_vars[k] for k in checkout} == checkout  # the checkout's variables are kept
    assert env_vars["TASK_QUEUE_ENABLE"] == "1"  # mindspeed.env reaches the workers, not only the driver
    assert "RAY_ADDRESS" not in env_vars  # the driver's business
    assert env_vars["WANDB_MODE"] == "offline" and env_vars["WANDB_RUN_GROUP"] == "study"  # wandb.init runs in `train`
    assert env_vars["HCCL_IF_BASE_PORT"] == str(12345 + 2 * HCCL_PORT_STRIDE)


def test_a_config_naming_its_own_runtime_env_file_is_the_base(tmp_path, weights):
    custom = tmp_path / "my_env.yaml"
    custom.write_text("env_vars:\n  HCCL_IF_BASE_PORT: '24703'\n  MY_FLAG: 'x'\n")
    cfg = config(f"+rl_config.runtime_env_path={custom}")
    plan = render_trial_config(cfg, tmp_path / "run", settings_for(weights), resume=False, port_block=1)
    assert plan.runtime_env["env_vars"]["MY_FLAG"] == "x"
    assert plan.runtime_env["env_vars"]["HCCL_IF_BASE_PORT"] == str(24703 + HCCL_PORT_STRIDE)


def test_port_blocks_give_disjoint_ports_and_block_zero_keeps_the_configured_ones():
    env = {**MINDSPEED_PORTS, "HCCL_HOST_SOCKET_PORT_RANGE": "60000-60050", "HCCL_NPU_SOCKET_PORT_RANGE": "auto"}
    zero, one, two = (trial_ports(env, b) for b in range(3))
    assert zero == {"HCCL_IF_BASE_PORT": "12345", "LCAL_COMM_ID": "127.0.0.1:27001",
                    "HCCL_HOST_SOCKET_PORT_RANGE": "60000-60050", "HCCL_NPU_SOCKET_PORT_RANGE": "auto"}
    assert one["LCAL_COMM_ID"] == "127.0.0.1:27002" and two["LCAL_COMM_ID"] == "127.0.0.1:27003"
    assert one["HCCL_HOST_SOCKET_PORT_RANGE"] == "60051-60101"  # the next range of the same width
    bases = [int(p["HCCL_IF_BASE_PORT"]) for p in (zero, one, two)]
    assert all(b - a >= 16 for a, b in zip(bases, bases[1:]))  # HCCL takes a run of ports from its base
    assert trial_ports({}, 0)["HCCL_IF_BASE_PORT"] == "12345"  # nothing set: MindSpeed-RL's file's base


def test_port_leases_are_exclusive_while_held(tmp_path):
    first, second = lease_port_block(tmp_path), lease_port_block(tmp_path)
    assert (first.block, second.block) == (0, 1)
    first.release()
    third = lease_port_block(tmp_path)
    assert third.block == 0  # freed blocks are reused
    second.release()
    third.release()



def test_port_lock_files_are_shared_by_every_user_whatever_the_umask(tmp_path):
    """Ports belong to the host: a second user's trials must open (and lock) the same files."""
    folder = tmp_path / "ports"
    old = os.umask(0o077)  # a strict umask, as on shared hosts
    try:
        lease = lease_port_block(folder)
    finally:
        os.umask(old)
    assert folder.stat().st_mode & 0o7777 == 0o1777  # world-writable and sticky, like /tmp
    assert (folder / "block-000.lock").stat().st_mode & 0o777 == 0o666
    lease.release()

def test_concurrent_standin_mindspeed_trials_get_their_own_ports_and_env(tmp_path, weights):
    """Two trials at once on one host: each MindSpeed-RL run's ray.init gets another HCCL/LCAL port."""
    settings = settings_for(weights, env={"GRPO_STANDIN_ITER_S": "0.3", "TASK_QUEUE_ENABLE": "2",
                                          "LCAL_COMM_ID": "127.0.0.1:27001"})
    cfg = config(iters=3)
    errors = []

    def run(name):
        try:
            MindSpeedBackend(settings).run(cfg, tmp_path / name, Recorder(), resume=False)
        except Exception as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=run, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    a, b = (runtime_env_logged(tmp_path / name)["env_vars"] for name in ("a", "b"))
    assert a["TASK_QUEUE_ENABLE"] == b["TASK_QUEUE_ENABLE"] == "2"
    assert a["HCCL_IF_BASE_PORT"] != b["HCCL_IF_BASE_PORT"]
    assert a["LCAL_COMM_ID"] != b["LCAL_COMM_ID"]


# --------------------------------------------------------------------------- forward micro batches
def test_forward_micro_batch_sizes_inherit_micro_batch_size_like_mindspeed(tmp_path, weights):
    """mindspeed_rl/workers/integrated_worker.py: a null *_forward_micro_batch_size keeps the Megatron
    micro_batch_size (temporary_micro_batch_size is only entered for a value); RLConfig's default is None."""
    cfg = config("rl_config.actor_forward_micro_batch_size=null", "rl_config.ref_forward_micro_batch_size=null",
                 "actor_config.micro_batch_size=2")
    assert cfg.forward_micro_batch_size("actor") == cfg.forward_micro_batch_size("ref") == 2
    rl = render_trial_config(cfg, tmp_path / "run", settings_for(weights), resume=False).trainer["rl_config"]
    assert "actor_forward_micro_batch_size" not in rl and "ref_forward_micro_batch_size" not in rl
    explicit = config("rl_config.actor_forward_micro_batch_size=2", "rl_config.ref_forward_micro_batch_size=2",
                      "actor_config.micro_batch_size=2")
    assert estimate(cfg).forward_peak_gb == estimate(explicit).forward_peak_gb  # the planner reads the same micro batch
    set_one = config("rl_config.actor_forward_micro_batch_size=4", "rl_config.ref_forward_micro_batch_size=null",
                     "actor_config.micro_batch_size=2")
    assert set_one.forward_micro_batch_size("actor") == 4 and set_one.forward_micro_batch_size("ref") == 2


def test_the_schema_default_is_mindspeeds_null():
    cfg = load_config("grpo_trainer_tiny_cpu", ["rl_config.actor_forward_micro_batch_size=null"])
    assert cfg.rl_config.actor_forward_micro_batch_size is None
    assert cfg.forward_micro_batch_size("actor") == cfg.actor_config.micro_batch_size
