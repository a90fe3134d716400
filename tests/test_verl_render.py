"""verl backend rendering: a trial's MindSpeed-RL keys as overrides over verl's ppo_trainer config."""

from grpo.config import load_config
from grpo.sweep.backends.verl._render import trial_overrides, verl_settings


def test_grpo_units_and_kl_as_loss():
    cfg = load_config("grpo_trainer_tiny_cpu", overrides=["actor_config.lr=3e-5", "rl_config.mini_batch_size=8"])
    out = verl_settings(cfg)
    assert out["algorithm.adv_estimator"] == "grpo"
    assert out["actor_rollout_ref.rollout.n"] == cfg.rl_config.n_samples_per_prompt
    # both count prompts in verl and MindSpeed-RL: no multiplication by n
    assert out["actor_rollout_ref.actor.ppo_mini_batch_size"] == 8
    assert out["data.train_batch_size"] == cfg.megatron_training.global_batch_size
    assert out["actor_rollout_ref.actor.optim.lr"] == 3e-5
    assert out["actor_rollout_ref.actor.use_kl_loss"] is True
    assert out["algorithm.use_kl_in_reward"] is False
    assert "algorithm.kl_ctrl.kl_coef" not in out


def test_clip_low_high_always_written():
    cfg = load_config("grpo_trainer_tiny_cpu", overrides=["rl_config.clip_ratio=0.3"])
    out = verl_settings(cfg)
    # verl's clip_ratio_low/high default to 0.2 and win over clip_ratio: both must follow the trial
    assert out["actor_rollout_ref.actor.clip_ratio_low"] == 0.3
    assert out["actor_rollout_ref.actor.clip_ratio_high"] == 0.3


def test_overrides_are_hydra_strings_and_stable():
    cfg = load_config("grpo_trainer_tiny_cpu")
    first = trial_overrides(cfg)
    assert first == trial_overrides(cfg) == sorted(first)
    assert "actor_rollout_ref.actor.use_kl_loss=true" in first


def test_clip_higher_and_kl_in_reward():
    cfg = load_config(
        "grpo_trainer_tiny_cpu",
        overrides=[
            "rl_config.clip_higher_enable=true",
            "rl_config.clip_ratio_low=0.1",
            "rl_config.clip_ratio_high=0.28",
            "rl_config.use_kl_in_reward=true",
        ],
    )
    out = verl_settings(cfg)
    assert (out["actor_rollout_ref.actor.clip_ratio_low"], out["actor_rollout_ref.actor.clip_ratio_high"]) == (
        0.1,
        0.28,
    )
    # KL in the reward, never also in the loss
    assert out["algorithm.use_kl_in_reward"] is True
    assert out["actor_rollout_ref.actor.use_kl_loss"] is False
    assert out["algorithm.kl_ctrl.kl_coef"] == cfg.rl_config.init_kl_coef
