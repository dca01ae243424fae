"""`VanillaTransformerTrainer`: `Seq2SeqTrainer` with the paper's recipe (§5: token-budget batches, the §5.3
schedule) and crash-safe checkpoints, a Hub upload without pickles, and the project's model card."""

import copy
import logging
import math
import os
import shutil
from pathlib import Path

import torch
from torch.utils.data import DataLoader
from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments
from transformers.trainer import TRAINER_STATE_NAME, TRAINING_ARGS_NAME
from transformers.trainer_callback import TrainerState
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, HubStrategy, TrainOutput, rotate_checkpoints

from ..data.batching import TokenBudgetBatchSampler
from ..data.staging import fsync_directory, fsync_tree
from ..errors import SettingsError
from ..files.loading import write_checksums
from ..files.model_card import card_from_training_log
from .checkpoints import RUN_RECORD, STAGING_PREFIX, last_complete_checkpoint, remove_stale_staging
from .optimization import ADAM_BETAS, ADAM_EPSILON, paper_schedule, peak_learning_rate
from .settings import TrainingSettings

logger = logging.getLogger(__name__)


class VanillaTransformerTrainer(Seq2SeqTrainer):
    """`Seq2SeqTrainer` with token-budget batches for training, the §5.3 schedule, and crash-safe checkpoints.

    `max_tokens` bounds the padded source+target tokens of a batch (`None`: batches of
    `args.per_device_train_batch_size` pairs); `warmup_steps` parameterizes the schedule, whose peak is
    `args.learning_rate`. `trainer.push_to_hub(dataset=...)` after training uploads a complete repo with the
    project's model card and without the pickled `training_args.bin`.

    A checkpoint is written to `tmp-checkpoint-N/`, flushed to disk, and only then renamed, so a killed run never
    leaves a half-written `checkpoint-N` to resume from.
    """

    def __init__(
        self,
        *args,
        max_tokens: int | None,
        warmup_steps: int,
        batching_seed: int = 0,
        batch_sampler: TokenBudgetBatchSampler | None = None,
        **kwargs,
    ):
        arguments = kwargs.get("args", args[1] if len(args) > 1 else None)
        if arguments is not None and arguments.push_to_hub and arguments.hub_strategy != HubStrategy.END:
            # checked before Trainer.__init__, which creates the repo: transformers' per-checkpoint pushes upload
            # weights without the code files or card, plus a pickle
            raise SettingsError(
                f"hub_strategy={arguments.hub_strategy.value!r} would push every checkpoint's weights without the "
                f"code files and card, with a pickled training_args.bin; set hub_strategy='end' and call "
                f"trainer.push_to_hub() after train() for one complete repo."
            )
        self.max_tokens = max_tokens
        self.warmup_steps = warmup_steps
        self.batching_seed = batching_seed
        self._batch_sampler = batch_sampler  # built once: sorting millions of lengths is not free
        self._staging_dir: str | None = None
        super().__init__(*args, **kwargs)

    def train(self, resume_from_checkpoint: str | bool | None = None, *args, **kwargs):
        if self.args.should_save:
            remove_stale_staging(self.args.output_dir)
        if resume_from_checkpoint is True:  # transformers' own lookup would take a checkpoint-N however incomplete
            latest = last_complete_checkpoint(self.args.output_dir)
            if latest is None:
                raise SettingsError(
                    f"resume_from_checkpoint=True but {self.args.output_dir} has no complete checkpoint."
                )
            resume_from_checkpoint = str(latest)
        if resume_from_checkpoint:
            state = TrainerState.load_from_json(os.path.join(resume_from_checkpoint, TRAINER_STATE_NAME))
            if 0 < self.args.max_steps <= state.global_step:
                # a finished run started again: transformers' loop would take one more step before it looks at
                # max_steps, save it, and rotate the oldest kept checkpoint out of the final average
                logger.warning(
                    f"{resume_from_checkpoint} has reached max_steps={self.args.max_steps}; nothing to train"
                )
                # private `Trainer._load_from_checkpoint`: the one place that restores a checkpoint's weights
                # (safetensors, sharded, PEFT, FSDP/DeepSpeed) without training; no public method does
                self._load_from_checkpoint(resume_from_checkpoint)
                self.state = state
                losses = [entry["train_loss"] for entry in state.log_history if "train_loss" in entry]
                return TrainOutput(state.global_step, losses[-1] if losses else math.nan, {"train_runtime": 0.0})
        return super().train(resume_from_checkpoint, *args, **kwargs)

    # Private override: a checkpoint stores tied matrices once (`model.shared.weight`), and transformers would report
    # their aliases as missing on every resume. No public hook: a filter on transformers' logger would hide real
    # missing keys too. Tested by tests/training/test_trainer.py::test_resume_reproduces_the_uninterrupted_run.
    def _issue_warnings_after_load(self, load_result) -> None:
        tied = set(self.model.all_tied_weights_keys)
        untied = [key for key in load_result.missing_keys if key not in tied]
        super()._issue_warnings_after_load(load_result._replace(missing_keys=untied))

    # Private override, for crash-safe checkpoints: while `_save_checkpoint` runs, transformers writes `checkpoint-N`
    # inside the staging folder. No public hook: changing `args.output_dir` for the save would also move what
    # callbacks, logging and `push_to_hub` see. Tested by tests/training/test_faults_training.py (a kill inside the
    # save) and tests/training/test_trainer.py's rotation test.
    def _get_output_dir(self, trial) -> str:
        return self._staging_dir if self._staging_dir is not None else super()._get_output_dir(trial)

    # Private override, for crash-safe checkpoints (write `tmp-checkpoint-N/checkpoint-N`, fsync, rename to
    # `checkpoint-N`) and rotation by step. No public hook: `save_model` writes only the weights, and `on_save` runs
    # after the checkpoint is written in its final place.
    def _save_checkpoint(self, model, trial) -> None:
        run_dir = Path(self._get_output_dir(trial))
        name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        staging, destination = run_dir / f"{STAGING_PREFIX}{name}", run_dir / name
        if not self.args.should_save:  # other processes of a distributed run only join the collective calls
            return super()._save_checkpoint(model, trial)
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        self._staging_dir = str(staging)
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self._staging_dir = None
        complete = staging / name
        if self.state.best_global_step:  # transformers looked for the best checkpoint in the staging folder
            best = run_dir / f"{PREFIX_CHECKPOINT_DIR}-{self.state.best_global_step}"
            if best.name == name or best.exists():
                self.state.best_model_checkpoint = str(best)
                self.state.save_to_json(str(complete / TRAINER_STATE_NAME))
        if (run_dir / RUN_RECORD).is_file():  # which run it belongs to, for `average` (`check_one_run`)
            shutil.copyfile(run_dir / RUN_RECORD, complete / RUN_RECORD)
        write_checksums(complete)
        fsync_tree(complete)
        if destination.exists():  # the same step saved again: move the old one aside first, then drop it
            os.replace(destination, staging / "replaced")
        os.replace(complete, destination)
        fsync_directory(run_dir)
        shutil.rmtree(staging)
        # transformers rotated the staging folder (a no-op); rotate by step, the order resume and averaging use. By
        # modification time (transformers' choice), a checkpoint half deleted by a killed rotation would count as
        # newer than those saved before the kill, and be kept in their place for the final average.
        rotate_checkpoints(
            output_dir=str(run_dir),
            save_total_limit=self.args.save_total_limit,
            best_model_checkpoint=self.state.best_model_checkpoint,
            use_mtime=False,
        )

    def train_batch_sampler(self) -> TokenBudgetBatchSampler:
        if self._batch_sampler is None:
            self._batch_sampler = TokenBudgetBatchSampler.for_dataset(
                self.train_dataset, self.max_tokens, seed=self.batching_seed
            )
        return self._batch_sampler

    def get_train_dataloader(self) -> DataLoader:
        if self.max_tokens is None:
            return super().get_train_dataloader()
        # private `Trainer._remove_unused_columns`: drops the columns `forward` does not take, as the Trainer's own
        # loaders do; no public method does, and `_get_dataloader` takes no `batch_sampler` of ours
        dataset = self._remove_unused_columns(self.train_dataset, description="training")
        loader = DataLoader(
            dataset,
            batch_sampler=self.train_batch_sampler(),
            collate_fn=self.data_collator,
            num_workers=self.args.dataloader_num_workers,
            pin_memory=self.args.dataloader_pin_memory,
        )
        return self.accelerator.prepare(loader)

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None, **gen_kwargs):
        # Seq2SeqTrainer fills the model's generation_config with transformers' defaults (max_length=20, ...) while
        # evaluating, and every later checkpoint would save them: keep the model's own decoding settings instead.
        generation_config = copy.deepcopy(self.model.generation_config)
        try:
            return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys=ignore_keys, **gen_kwargs)
        finally:
            self.model.generation_config = generation_config

    def evaluation_loop(self, *args, **kwargs):
        # Seq2SeqTrainer.evaluate/predict gather with `accelerator.gather`, which keeps the examples that accelerate
        # repeats so that every process gets as many batches: under N processes BLEU would count some sentences twice
        self.gather_function = self.accelerator.gather_for_metrics
        # the evaluation loader's iterator draws its seed from torch's generator, which dropout draws from too: put
        # it back, so that when a run validates changes none of its updates (the Trainer validates at the last
        # step, so a run continued past its end would otherwise differ from one trained straight through)
        devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
        with torch.random.fork_rng(devices=devices):
            return super().evaluation_loop(*args, **kwargs)

    # Private override: a saved model folder is for sharing, so keep the pickled TrainingArguments, which runs code
    # when loaded, out of it (checkpoints, for resuming, keep theirs). No public hook: `save_model` reaches `_save` by
    # several paths and pushes to the Hub itself before returning. Tested by tests/release/test_hub.py.
    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        super()._save(output_dir, state_dict=state_dict)
        folder = Path(output_dir or self.args.output_dir)
        if not folder.name.startswith(f"{PREFIX_CHECKPOINT_DIR}-"):
            (folder / TRAINING_ARGS_NAME).unlink(missing_ok=True)

    def create_model_card(
        self,
        language: str | list[str] | None = None,
        license: str | None = None,  # noqa: A002  (the name Trainer.push_to_hub passes)
        tags: str | list[str] | None = None,
        model_name: str | None = None,
        finetuned_from: str | None = None,
        tasks: str | list[str] | None = None,
        dataset_tags: str | list[str] | None = None,
        dataset: str | list[str] | None = None,
        dataset_args: str | list[str] | None = None,
    ) -> None:
        """Write the project's card (`templates/model_card.md`, `model-index` from the last evaluation) instead of
        transformers' draft; `dataset` names the training data, `language` the (source, target) pair."""
        if not self.is_world_process_zero():
            return
        names = dataset if dataset is not None else dataset_tags
        if not names:
            raise SettingsError(
                "the model card needs the training data's name for its metadata: "
                "trainer.push_to_hub(dataset='multi30k') (a Hub dataset id or a short name)."
            )
        languages = [language] if isinstance(language, str) else list(language or ["en", "de"])
        if len(languages) != 2:
            raise SettingsError(f"language={language!r}: give the (source, target) pair, e.g. ['en', 'de'].")
        model = self.accelerator.unwrap_model(self.model)
        card_from_training_log(
            model_name or Path(self.args.output_dir).name,
            self.state.log_history,
            model.config.to_dict(),
            global_step=self.state.global_step,
            epoch=self.state.epoch or 0.0,
            parameters=sum(p.numel() for p in model.parameters()),
            preset={"max_tokens": self.max_tokens, "warmup_steps": self.warmup_steps},
            dataset=names if isinstance(names, str) else names[0],
            languages=(languages[0], languages[1]),
            repo_id=self.hub_model_id,
            license=license or "apache-2.0",
        ).save(Path(self.args.output_dir) / "README.md")

    def create_scheduler(self, num_training_steps: int, optimizer: torch.optim.Optimizer | None = None):
        if self.lr_scheduler is None:
            self.lr_scheduler = paper_schedule(optimizer or self.optimizer, self.warmup_steps)
            # private, set as the Trainer's own `create_scheduler` sets it: a second `train()` then builds a fresh
            # scheduler, as it does for its own; there is no public flag for it
            self._created_lr_scheduler = True
        return self.lr_scheduler


def paper_training_arguments(settings: TrainingSettings, accumulation: int, d_model: int) -> Seq2SeqTrainingArguments:
    """The `Seq2SeqTrainingArguments` of a run of `settings` (§5.3 Adam, no weight decay, no clipping unless asked),
    with `accumulation` batches per update and the §5.3 peak learning rate of a `d_model` model."""
    preset = settings.preset
    return Seq2SeqTrainingArguments(
        output_dir=str(settings.output_dir),
        report_to=[settings.report_to] if settings.report_to != "none" else [],
        max_steps=preset.max_steps,
        per_device_eval_batch_size=settings.eval_batch_size,
        gradient_accumulation_steps=accumulation,
        learning_rate=peak_learning_rate(d_model, preset.warmup_steps, preset.lr_factor),
        # with weight_decay=0, AdamW is the paper's Adam; the fused kernel (transformers' own default on
        # torch >= 2.8) takes a base model's Adam step from 120 to 26 ms on 2 CPU threads (docs/speed.md)
        optim="adamw_torch_fused",
        adam_beta1=ADAM_BETAS[0],
        adam_beta2=ADAM_BETAS[1],
        adam_epsilon=ADAM_EPSILON,
        weight_decay=0.0,
        max_grad_norm=settings.max_grad_norm,  # 0: the paper clips nothing
        # label_smoothed_loss divides by the target tokens of all processes (the Trainer gathers them and scales the
        # loss by the process count, which DDP's gradient averaging cancels)
        average_tokens_across_devices=True,
        # the Trainer's default; token batches ignore it
        per_device_train_batch_size=settings.per_device_batch_size or 8,
        bf16=settings.precision == "bf16",
        fp16=settings.precision == "fp16",
        logging_steps=settings.log_steps,
        eval_strategy="steps",
        eval_steps=preset.eval_steps,
        save_strategy="steps",
        save_steps=preset.save_steps,
        save_total_limit=max(preset.average_last, 1),
        predict_with_generate=True,
        generation_num_beams=settings.eval_beams,
        generation_max_length=preset.max_length + 50,
        seed=settings.seed,
        disable_tqdm=not settings.progress,
        use_cpu=not torch.cuda.is_available(),
    )
