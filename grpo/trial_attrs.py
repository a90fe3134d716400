"""The names of what a study stores about its trials: the keys of ``trial.user_attrs`` that the sweep writes
and the report reads, and Optuna's own system attrs, kept apart by name.

One module at the bottom of the import graph (no grpo imports), so the writer (grpo.sweep) and the reader
(grpo.report) spell each key once. docs/contracts.md describes each value.
"""

from __future__ import annotations

# -- trial.user_attrs written when the trial is asked -------------------------------------------------------
DRIVER = "driver"  # {id, host, pid} of the driver running it
HEARTBEAT = "heartbeat"  # time.time() of the driver's last beat
OVERRIDES = "overrides"  # the trial's override strings
CONFIG_POINTER = "config_file"  # {"path": from the study folder, "sha256": 16 hex}: the resolved config's file
CONFIG_INLINE = "config"  # studies written before CONFIG_POINTER: the resolved config itself
SEEDS = "seeds"  # the seed numbers; seed k runs in runs/seed<k>/
TRIAL_DIR = "trial_dir"  # absolute
RESOURCES = "resources"  # Ray options of each seed
ATTEMPT = "attempt"
RETRY_OF = "retry_of"  # grpo's retry lineage: the trial number this retry reruns (see OPTUNA_FAILED_TRIAL)
RESUME_FROM = "resume_from"  # the trial folder whose checkpoints a retry resumes from
RESUMED_AT_ITERATION = "resumed_at_iteration"  # seed -> checkpoint iteration
START_POINT = "start_point"  # the index in the spec's start_points of the point this trial was enqueued as
TRANSFERRED_FROM = "transferred_from"  # "<study>#<trial number>": the source study's configuration it reruns
CONFIRMATION_OF = "confirmation_of"  # the search trial a confirmation trial reruns on fresh seeds
REPEAT_OF = "repeat_of"  # a proposal equal to that trial's parameters, told its result, never run

# -- population-based branching (spec ``scheduler: {kind: pbt}``), written when the trial is enqueued or asked --
PBT_MEMBER = "pbt_member"  # the population slot 0..P-1 this trial runs a segment of
PBT_GENERATION = "pbt_generation"  # 0..G-1: the trial trains iterations [g * interval, (g + 1) * interval)
BRANCH_OF = "branch_of"  # the trial whose checkpoint (at BRANCHED_AT) this one continues; absent in generation 0
BRANCHED_AT = "branched_at"  # the iteration of that checkpoint (= generation * interval)
EXPLOITED = "exploited"  # True: a bottom member replaced by a copy of a top member (BRANCH_OF), then explored
SCHEDULE = "schedule"  # {config key: {str(first iteration): value}}: what the lineage ran with, iteration 0 on
PROMOTED_BASE = "promoted_base"  # a confirmation trial run on another base (spec ``confirm.base``): that base

# -- study.user_attrs
PBT_SETTINGS = "pbt"  # the study's scheduler settings (population, interval, quantile, explore)

# -- written when it ends ------------------------------------------------------------------------------------
WALL_S = "wall_s"
CPU_S = "cpu_s"
NPU_S = "npu_s"
DEVICES = "devices"
NODE = "node"
NODE_ID = "node_id"
VALUES_PER_SEED = "values_per_seed"
VALUE_SPREAD = "value_spread"
VALUE_INTERVAL = "value_interval"
FAILURE_REASON = "failure_reason"  # FAIL
LAST_LOG_LINES = "last_log_lines"  # FAIL
RETRIED = "retried"  # FAIL: a retry was enqueued
GAVE_UP = "gave_up"  # FAIL: no retries left
PRUNED_REASON = "pruned_reason"  # PRUNED
INFEASIBLE = "infeasible"  # PRUNED (or FAIL) without running

# -- Optuna's own trial.system_attrs (optuna.storages.RetryHeartbeatStaleTrialCallback writes them) ----------
OPTUNA_FAILED_TRIAL = "failed_trial"  # the first trial of a retry chain (what retried_trial_number reads)
OPTUNA_RETRY_HISTORY = "retry_history"  # every trial number of the chain before this one
