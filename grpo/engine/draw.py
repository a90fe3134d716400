"""The rollout and reward phase of an iteration (trainer.py's steps 1-3): the next prompts of the seeded data
order, ``n_samples_per_prompt`` responses each, scored by the verifiers (plus the overlong penalty); with
dynamic sampling (``filter_groups_enable``, ``dapo.py``) as many generation batches as it takes."""

from __future__ import annotations

import time
from collections import defaultdict

import torch

from grpo.config import GRPOConfig
from grpo.engine import checkpoint as ckpt
from grpo.engine import dapo, rewards, variants
from grpo.engine import data as data_mod
from grpo.engine.model import Qwen2
from grpo.engine.rollout import SamplingParams, generate
from grpo.engine.tokenizer import Tokenizer
from grpo.errors import UserError


class Drawer:
    """Draws scored generation batches from ``train_set`` with ``policy``; ``generator`` is the run's stream."""

    def __init__(
        self,
        cfg: GRPOConfig,
        v: variants.Variants,
        train_set: list[data_mod.Example],
        prompt_ids: dict[str, list[int]],
        policy: Qwen2,
        tokenizer: Tokenizer,
        sampling: SamplingParams,
        generator: torch.Generator,
        device: torch.device,
        max_steps: int,
    ):
        self.cfg, self.v, self.train_set, self.prompt_ids = cfg, v, train_set, prompt_ids
        self.max_steps = max_steps  # the run's optimizer steps (a TRL trainer_state's max_steps)
        self.policy, self.tokenizer, self.sampling, self.generator, self.device = (
            policy,
            tokenizer,
            sampling,
            generator,
            device,
        )

    def draw(self, state: ckpt.TrainerState, timing: dict[str, float]) -> dapo.Scored:
        """One generation batch: the next ``global_batch_size`` prompts of the data order, ``n`` responses each,
        scored (the rollout and reward stages; their seconds are added to ``timing``)."""
        cfg, rl, v = self.cfg, self.cfg.rl_config, self.v
        t_start = time.perf_counter()
        gbs, n = cfg.megatron_training.global_batch_size, rl.n_samples_per_prompt
        idx = data_mod.batch_indices(
            len(self.train_set),
            gbs,
            state.consumed_prompts,
            cfg.megatron_training.seed,
            shuffle=not cfg.megatron_training.no_shuffle,
        )
        state.consumed_prompts += gbs
        examples = [self.train_set[i] for i in idx]
        batch = generate(
            self.policy,
            [self.prompt_ids[e.prompt] for e in examples],
            n,
            self.sampling,
            self.tokenizer.stop_ids,
            self.tokenizer.pad_id,
            self.tokenizer.vocab_size,
            self.generator,
        )
        t_rollout = time.perf_counter()

        texts = self.tokenizer.decode_batch(batch.response_lists())
        labels = [e.label for e in examples for _ in range(n)]
        scores, per_verifier = rewards.score(
            texts, labels, list(rl.verifier_function), list(rl.verifier_weight),
            prompts=[e.messages or e.prompt for e in examples for _ in range(n)],
            extras=[e.extra for e in examples for _ in range(n)],
            completion_ids=batch.response_lists(), progress=(state.optimizer_steps, self.max_steps),
        )  # fmt: skip
        if v.overlong:  # added to the total as MindSpeed-RL does, in float64 before its float32 tensor
            penalty = dapo.overlong_penalty(
                batch.response_lengths, v.rollout_max_tokens, v.overlong_buffer, v.overlong_factor
            )
            score_t = (torch.tensor(scores, dtype=torch.float64, device=self.device) + penalty).float()
        else:
            score_t = torch.tensor(scores, dtype=torch.float32, device=self.device)
        correct = [rewards.is_correct(text, label) for text, label in zip(texts, labels, strict=True)]
        timing["timing/rollout"] += t_rollout - t_start
        timing["timing/reward"] += time.perf_counter() - t_rollout
        return dapo.Scored(batch, texts, labels, score_t, per_verifier, correct)

    def dynamic_sampling(
        self, state: ckpt.TrainerState, timing: dict[str, float]
    ) -> tuple[dapo.Scored, dict[str, float], float]:
        """DAPO's dynamic sampling (see ``dapo.py``): generation batches until ``filter_groups_train_batch_size``
        groups with a varying ``filter_groups_metric`` are kept. Returns the kept groups, the metrics of every
        generated response (verifier means as MindSpeed-RL accumulates them, counts) and all tokens generated."""
        v, n = self.v, self.cfg.rl_config.n_samples_per_prompt
        kept: list[dapo.Scored] = []
        have = found = batches = groups = 0
        verifier_values: dict[str, list[float]] = defaultdict(list)
        responses = prompts = 0.0
        while have < v.filter_train_prompts:
            if 0 < v.filter_max_batches <= batches:  # RayDAPOTrainer.dynamic_sampling raises here
                raise UserError(
                    f"{self.cfg._source}: rl_config.filter_groups_max_batches: {batches} generation batches kept "
                    f"{have} groups whose {v.filter_metric} scores vary, fewer than filter_groups_train_batch_size="
                    f"{v.filter_train_prompts} (MindSpeed-RL: 'Generated too many. Please check your data.'); raise "
                    f"filter_groups_max_batches (0 = no limit) or lower filter_groups_train_batch_size"
                )
            scored = self.draw(state, timing)
            batches += 1
            groups += len(scored.texts) // n
            responses += float(scored.batch.response_lengths.sum())
            prompts += float(scored.batch.prompt_lengths.sum())
            for name, values in scored.per_verifier.items():
                verifier_values[name] += values
            informative = dapo.kept_groups(scored.per_verifier[v.filter_metric], n).nonzero().flatten()
            found += len(informative)
            take = informative[: v.filter_train_prompts - have]  # the surplus of the last batch is dropped
            if len(take):
                kept.append(scored.groups(take, n))
                have += len(take)
        metrics = {
            **rewards.reward_means(verifier_values),  # every generated response's, as MindSpeed-RL accumulates
            "train/num_gen_batches": float(batches),
            "dynamic_sampling/kept_groups": float(found),
            "dynamic_sampling/kept_fraction": found / groups,
            "generated_tokens": responses,
        }
        return dapo.concat(kept, self.tokenizer.pad_id), metrics, responses + prompts
