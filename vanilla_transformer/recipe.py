"""The paper's training recipe (§5) on `Seq2SeqTrainer`: Adam(0.9, 0.98, 1e-9), the §5.3 learning-rate schedule,
label smoothing 0.1 (§5.4), token-based batching (§5.1) with gradient accumulation, and presets."""

import argparse
import copy
import json
import logging
import math
import os
import shutil
from dataclasses import MISSING, asdict, dataclass, fields, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import DataLoader
from transformers import Seq2SeqTrainer
from transformers.trainer import TRAINER_STATE_NAME, TRAINING_ARGS_NAME
from transformers.trainer_callback import TrainerState
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, HubStrategy, TrainOutput, rotate_checkpoints

from .checkpoints import (
    STAGING_PREFIX,
    checkpoint_step,
    last_complete_checkpoint,
    list_checkpoints,
    remove_stale_staging,
)
from .configuration_vanilla_transformer import VanillaTransformerConfig
from .data.batching import TokenBudgetBatchSampler
from .data.corpora import MULTI30K
from .data.multi30k import holds_multi30k
from .integrity import fsync_directory, fsync_tree, write_checksums

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainingPreset:
    """Everything a training run needs besides the data; `scripts/train.py` flags override single fields."""

    model_preset: str
    corpus: str
    vocab_size: int
    max_tokens: int
    tokens_per_update: int
    warmup_steps: int
    max_steps: int
    save_steps: int
    eval_steps: int
    average_last: int
    lr_factor: float = 1.0
    label_smoothing: float = 0.1
    dropout: float | None = None
    max_length: int = 256
    lowercase: bool = False
    dataset_config: str | None = None
    valid_split: str = "valid"
    model_overrides: tuple[tuple[str, object], ...] = ()

    def as_dict(self) -> dict:
        return asdict(self)

    def model_config(self, **fields) -> VanillaTransformerConfig:
        """The model this preset trains: `model_preset` with `model_overrides`, `dropout` when set, and positions for
        inputs of `max_length` and outputs of up to `max_length` + 64 tokens (validation generates up to
        `max_length` + 50) unless `model_overrides` sets `max_position_embeddings`; `fields` (the tokenizer's
        vocabulary size and special-token ids) over all of them."""
        values = {"max_position_embeddings": max(self.max_length + 64, 256), **dict(self.model_overrides)}
        if self.dropout is not None:
            values["dropout"] = self.dropout
        return VanillaTransformerConfig.from_preset(self.model_preset, **{**values, **fields})


TRAINING_PRESETS: dict[str, TrainingPreset] = {
    # §5.1-5.4, Table 3: 25k+25k tokens per update, 100k steps (base) / 300k (big), average the last 5 / 20
    # checkpoints, written every 10 minutes on 8 P100s (~1500 steps base, ~600 big).
    "paper-base": TrainingPreset(
        model_preset="base",
        corpus="wmt14",
        dataset_config="de-en",
        valid_split="validation",
        vocab_size=37000,
        max_tokens=8192,
        tokens_per_update=50000,
        warmup_steps=4000,
        max_steps=100_000,
        save_steps=1500,
        eval_steps=5000,
        average_last=5,
    ),
    "paper-big": TrainingPreset(
        model_preset="big",
        corpus="wmt14",
        dataset_config="de-en",
        valid_split="validation",
        vocab_size=37000,
        max_tokens=4096,
        tokens_per_update=50000,
        warmup_steps=4000,
        max_steps=300_000,
        save_steps=600,
        eval_steps=10000,
        average_last=20,
    ),
    # Transformer-tiny of the Multi30k literature (d=128, 4+4 layers, 4 heads, d_ff 256; Wu et al. 2021) with its
    # recipe: dropout 0.3, about 8k source + 8k target tokens per update, peak rate 5e-3 after 2000 warmup updates
    # (lr_factor 2.53 on the §5.3 schedule), 8000 updates; shared 8k BPE; average the last 10 checkpoints. README.md,
    # section Results, has the sweep on valid that led here.
    "multi30k": TrainingPreset(
        model_preset="multi30k",
        corpus=MULTI30K,
        vocab_size=8000,
        max_tokens=8192,
        tokens_per_update=16384,
        warmup_steps=2000,
        lr_factor=2.53,
        dropout=0.3,
        max_steps=8000,
        save_steps=100,
        eval_steps=500,
        average_last=10,
    ),
    # The built-in grammar corpus: a model small enough to learn it in a few minutes on a laptop CPU.
    "demo": TrainingPreset(
        model_preset="multi30k",
        corpus="builtin",
        vocab_size=1000,
        max_tokens=3000,
        tokens_per_update=3000,
        warmup_steps=200,
        max_steps=500,
        save_steps=100,
        eval_steps=500,
        average_last=3,
        lr_factor=0.5,
        dropout=0.1,
        max_length=64,
        model_overrides=(("encoder_layers", 2), ("decoder_layers", 2)),
    ),
}


def get_training_preset(name: str, **overrides) -> TrainingPreset:
    """A preset by name, with some fields replaced (`None` values are ignored)."""
    if name not in TRAINING_PRESETS:
        raise ValueError(f"unknown training preset {name!r}; choose one of {sorted(TRAINING_PRESETS)}.")
    return replace(TRAINING_PRESETS[name], **{k: v for k, v in overrides.items() if v is not None})


# TrainingPreset fields that `scripts/train.py` and `scripts/train_no_trainer.py` set with a flag of the same name
PRESET_FLAGS: dict[str, tuple[type, str]] = {
    "corpus": (str, "'multi30k' (downloaded once), 'builtin', a folder of {split}.{lang} files, or a datasets name"),
    "dataset_config": (str, "the datasets config, e.g. de-en for wmt14"),
    "valid_split": (str, "the validation split's name (datasets on the Hub: 'validation')"),
    "vocab_size": (int, "joint BPE vocabulary size"),
    "max_tokens": (int, "padded source+target tokens per batch (and process)"),
    "tokens_per_update": (int, "gradient accumulation reaches about this many (all processes together)"),
    "warmup_steps": (int, "§5.3 warmup"),
    "lr_factor": (float, "multiplies the §5.3 learning rate"),
    "max_steps": (int, "updates in all (a resumed run may raise it)"),
    "save_steps": (int, "updates between checkpoints"),
    "eval_steps": (int, "updates between validations"),
    "average_last": (int, "checkpoints kept, for averaging (§6.1); train.py averages them into final/"),
    "label_smoothing": (float, "§5.4 label smoothing"),
    "dropout": (float, "dropout rate (§5.4)"),
    "max_length": (int, "pairs with more tokens on a side are dropped (and counted)"),
    "lowercase": (bool, "train on lowercased text, as the Multi30k literature (the tokenizer lowercases)"),
}


def add_preset_arguments(parser: argparse.ArgumentParser) -> None:
    """`--preset` and one flag per `PRESET_FLAGS` field, each overriding the preset where given."""
    parser.add_argument("--preset", choices=sorted(TRAINING_PRESETS), default="demo")
    for field, (kind, help_text) in PRESET_FLAGS.items():
        value = {"action": argparse.BooleanOptionalAction} if kind is bool else {"type": kind}
        parser.add_argument(f"--{field.replace('_', '-')}", help=help_text, **value)


def preset_from_arguments(args: argparse.Namespace) -> TrainingPreset:
    """The preset named by `--preset`, with the fields its flags gave replaced."""
    return get_training_preset(args.preset, **{field: getattr(args, field) for field in PRESET_FLAGS})


# The fields a resumed run may change: how long it runs and what it keeps, not what its updates so far did (the §5.3
# rate depends on the step alone, so a longer run continues the same curve).
RESUMABLE_FIELDS = ("max_steps", "save_steps", "eval_steps", "average_last")
# The fields the tokenizer depends on: all a folder fixes while it holds a tokenizer but no checkpoint yet (a run
# refused right after tokenizing, or stopped before its first save), since its next start trains from scratch.
TOKENIZER_FIELDS = ("corpus", "dataset_config", "vocab_size", "lowercase")


def same_setting(field: str, value: object, other: object) -> bool:
    """Whether two values of a preset field (as `preset.json` holds them) mean the same thing."""
    if field == "corpus" and value != other and MULTI30K in (value, other):
        # a run recorded before Multi30k had a name holds the path of a folder of its files (../shared/data/multi30k)
        return holds_multi30k(str(other if value == MULTI30K else value))
    if field == "corpus" and value != other and Path(str(value)).is_dir():
        # the same folder written another way (absolute, or relative to another directory)
        return Path(str(other)).is_dir() and Path(str(value)).samefile(str(other))
    return value == other


def read_run_preset(path: str | Path) -> dict:
    """A run's `preset.json` as it holds it (lists, not tuples). A field added to `TrainingPreset` since the run was
    recorded reads as its default, which the run had."""
    defaults = {field.name: field.default for field in fields(TrainingPreset) if field.default is not MISSING}
    return json.loads(json.dumps(defaults)) | json.loads(Path(path).read_text())


def record_run_preset(output_dir: str | Path, preset: TrainingPreset, resume: bool, write: bool = True) -> None:
    """Write `preset` to `output_dir/preset.json`, the record of what the run in that folder trained with.

    A folder that already holds a run (checkpoints, or its tokenizer) is continued only with the preset that run
    recorded, `RESUMABLE_FIELDS` aside (before its first checkpoint, only `TOKENIZER_FIELDS` count), and never
    restarted: either would leave checkpoints of two runs side by side, averaged together at the end, and a
    `preset.json` that describes neither. Both raise a `ValueError` that says
    what differs, as does a `max_steps` below the newest checkpoint's step. `write=False` checks only (the other
    processes of a distributed run)."""
    output = Path(output_dir)
    record = output / "preset.json"
    new = json.loads(json.dumps(preset.as_dict()))  # as preset.json holds it: lists, not tuples
    checkpoints = list_checkpoints(output) if output.is_dir() else []
    tokenizer = [output / "tokenizer"] if (output / "tokenizer" / "tokenizer.json").is_file() else []
    earlier = checkpoints + tokenizer
    if earlier and not resume:
        raise ValueError(
            f"{output} already holds a run ({', '.join(path.name for path in earlier)}); starting over there would "
            "mix its checkpoints with the new ones. Give a new output directory, or delete that one first."
        )
    newest_step = checkpoint_step(checkpoints[-1]) if checkpoints else 0
    if newest_step > preset.max_steps:
        raise ValueError(
            f"{output} holds checkpoint-{newest_step}, past max_steps={preset.max_steps}: give a max_steps of at least "
            f"{newest_step}, or average the checkpoints you want with scripts/average_checkpoints.py."
        )
    if earlier and record.is_file():
        saved = read_run_preset(record)
        fixed = [field for field in new if field not in RESUMABLE_FIELDS] if checkpoints else TOKENIZER_FIELDS
        changed = [
            f"{field}: {saved.get(field)!r} -> {new[field]!r}"
            for field in fixed
            if not same_setting(field, new[field], saved.get(field))
        ]
        if changed:
            free = (
                f"only {', '.join(RESUMABLE_FIELDS)} may change"
                if checkpoints
                else f"it has no checkpoint yet: only {', '.join(TOKENIZER_FIELDS)}, which its tokenizer depends on, "
                "must stay"
            )
            raise ValueError(
                f"{output} holds a run trained with other settings ({'; '.join(changed)}). Resume it with the "
                f"settings in {record} ({free}), or give a new output directory."
            )
    if write:
        output.mkdir(parents=True, exist_ok=True)
        staging = record.with_name(f"{STAGING_PREFIX}{record.name}")
        staging.write_text(json.dumps(new, indent=2) + "\n")
        os.replace(staging, record)


def peak_learning_rate(d_model: int, warmup_steps: int, factor: float = 1.0) -> float:
    """The §5.3 rate at step = warmup_steps, where the two branches meet: factor·d_model^-0.5·warmup^-0.5."""
    return factor * d_model**-0.5 * warmup_steps**-0.5


def paper_learning_rate(step: int, d_model: int, warmup_steps: int, factor: float = 1.0) -> float:
    """§5.3: lrate = d_model^-0.5 · min(step^-0.5, step · warmup_steps^-1.5), `step` counting updates from 1."""
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def paper_schedule(optimizer: torch.optim.Optimizer, warmup_steps: int) -> LambdaLR:
    """The §5.3 schedule relative to the optimizer's learning rate, which must be the peak rate
    (`peak_learning_rate`). `LambdaLR` asks for the multiplier of update n+1 after n updates, so the first update
    uses step 1 as in the paper."""

    def multiplier(updates_done: int) -> float:
        step = updates_done + 1
        return min(step / warmup_steps, math.sqrt(warmup_steps / step))

    return LambdaLR(optimizer, multiplier)


def label_smoothed_loss(epsilon: float):
    """§5.4 label smoothing as a `Trainer` `compute_loss_func`: the summed smoothed cross-entropy divided by the
    target tokens of the whole accumulated batch, so that gradient accumulation gives the large batch's gradient
    (the Trainer's own `LabelSmoother` averages per micro-batch)."""

    def compute_loss(outputs, labels: torch.Tensor, num_items_in_batch: torch.Tensor | int | None = None):
        logits = outputs["logits"]
        loss = F.cross_entropy(
            logits.float().reshape(-1, logits.shape[-1]),
            labels.reshape(-1).to(logits.device),
            ignore_index=-100,
            label_smoothing=epsilon,
            reduction="sum",
        )
        if num_items_in_batch is None:
            num_items_in_batch = (labels != -100).sum()
        if isinstance(num_items_in_batch, torch.Tensor):
            num_items_in_batch = num_items_in_batch.to(loss.device)
        return loss / num_items_in_batch

    return compute_loss


class VanillaTransformerTrainer(Seq2SeqTrainer):
    """`Seq2SeqTrainer` with token-budget batches for training, the §5.3 schedule, and crash-safe checkpoints.

    `max_tokens` bounds the padded source+target tokens of a batch (`None`: the Trainer's batches of
    `args.per_device_train_batch_size` pairs); `warmup_steps` parameterizes the schedule, whose peak is
    `args.learning_rate`.

    With `push_to_hub=True` and `hub_strategy="end"`, `trainer.push_to_hub(dataset=...)` after training uploads a
    complete repo: weights, config with `auto_map`, the two code files, tokenizer, and the project's model card
    (`templates/model_card.md`, with the last evaluation's scores), without the pickled `training_args.bin`.

    A checkpoint is written to `tmp-checkpoint-N/`, flushed to disk, and only then renamed to `checkpoint-N`, so a
    run killed while saving (out of memory, pre-emption, Ctrl-C) never leaves a half-written `checkpoint-N` for the
    next run to resume from; `train(resume_from_checkpoint=True)` takes the newest complete checkpoint and removes
    interrupted `tmp-checkpoint-*` folders. Resuming from a checkpoint that has reached `args.max_steps` loads it and
    trains nothing, where transformers' loop would take one step more.
    """

    def __init__(self, *args, max_tokens: int | None, warmup_steps: int, batching_seed: int = 0, **kwargs):
        arguments = kwargs.get("args", args[1] if len(args) > 1 else None)
        if arguments is not None and arguments.push_to_hub and arguments.hub_strategy != HubStrategy.END:
            # checked before Trainer.__init__, which creates the repo: transformers' per-checkpoint pushes upload
            # weights without the code files or card, plus a pickle
            raise ValueError(
                f"hub_strategy={arguments.hub_strategy.value!r} would push every checkpoint's weights without the "
                f"code files and card, with a pickled training_args.bin; set hub_strategy='end' and call "
                f"trainer.push_to_hub() after train() for one complete repo."
            )
        self.max_tokens = max_tokens
        self.warmup_steps = warmup_steps
        self.batching_seed = batching_seed
        self._staging_dir: str | None = None
        super().__init__(*args, **kwargs)

    def train(self, resume_from_checkpoint: str | bool | None = None, *args, **kwargs):
        if self.args.should_save:
            remove_stale_staging(self.args.output_dir)
        if resume_from_checkpoint is True:  # transformers' own lookup would take a checkpoint-N however incomplete
            latest = last_complete_checkpoint(self.args.output_dir)
            if latest is None:
                raise ValueError(f"resume_from_checkpoint=True but {self.args.output_dir} has no complete checkpoint.")
            resume_from_checkpoint = str(latest)
        if resume_from_checkpoint:
            state = TrainerState.load_from_json(os.path.join(resume_from_checkpoint, TRAINER_STATE_NAME))
            if 0 < self.args.max_steps <= state.global_step:
                # a finished run started again: transformers' loop would take one more step before it looks at
                # max_steps, save it, and rotate the oldest kept checkpoint out of the final average
                logger.warning(
                    f"{resume_from_checkpoint} has reached max_steps={self.args.max_steps}; nothing to train"
                )
                self._load_from_checkpoint(resume_from_checkpoint)
                self.state = state
                losses = [entry["train_loss"] for entry in state.log_history if "train_loss" in entry]
                return TrainOutput(state.global_step, losses[-1] if losses else math.nan, {"train_runtime": 0.0})
        return super().train(resume_from_checkpoint, *args, **kwargs)

    def _issue_warnings_after_load(self, load_result) -> None:
        # a checkpoint stores tied matrices once (`model.shared.weight`); transformers would report their aliases as
        # missing on every resume, although loading the one matrix restores them all
        tied = set(self.model.all_tied_weights_keys)
        untied = [key for key in load_result.missing_keys if key not in tied]
        super()._issue_warnings_after_load(load_result._replace(missing_keys=untied))

    def _get_output_dir(self, trial) -> str:
        # while `_save_checkpoint` runs, transformers' code writes `checkpoint-N` inside the staging folder
        return self._staging_dir if self._staging_dir is not None else super()._get_output_dir(trial)

    def _save_checkpoint(self, model, trial) -> None:
        """transformers' checkpoint (weights, optimizer, scheduler, RNG states, trainer state), written into
        `tmp-checkpoint-N/checkpoint-N` and renamed to `checkpoint-N` once complete and on disk."""
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
        write_checksums(complete)
        fsync_tree(complete)
        if destination.exists():  # the same step saved again: move the old one aside first, then drop it
            os.replace(destination, staging / "replaced")
        os.replace(complete, destination)
        fsync_directory(run_dir)
        shutil.rmtree(staging)
        # transformers rotated the staging folder (a no-op); rotate the run's checkpoints by step, the order resume
        # and averaging use. By modification time (transformers' choice), a checkpoint half deleted by a rotation
        # that a kill interrupted counts as newer than the checkpoints saved before the kill, and is kept in their
        # place for the final average.
        rotate_checkpoints(
            output_dir=str(run_dir),
            save_total_limit=self.args.save_total_limit,
            best_model_checkpoint=self.state.best_model_checkpoint,
            use_mtime=False,
        )

    def train_batch_sampler(self) -> TokenBudgetBatchSampler:
        return TokenBudgetBatchSampler.for_dataset(self.train_dataset, self.max_tokens, seed=self.batching_seed)

    def get_train_dataloader(self) -> DataLoader:
        if self.max_tokens is None:
            return super().get_train_dataloader()
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
        return super().evaluation_loop(*args, **kwargs)

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        super()._save(output_dir, state_dict=state_dict)
        # A saved model folder is for sharing (push_to_hub uploads the output folder): keep the pickled
        # TrainingArguments, which runs code when loaded, out of it; checkpoints, which are for resuming, keep theirs.
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
        """Write the card `push_to_hub` uploads: `templates/model_card.md` with YAML metadata (license, languages,
        dataset, `model-index` from the last evaluation) instead of transformers' generic draft. `dataset` names the
        training data (`trainer.push_to_hub(dataset="multi30k")`); `language` is the (source, target) pair,
        `["en", "de"]` by default."""
        if not self.is_world_process_zero():
            return
        # the card template belongs to the Hub stage, later in the pipeline than the recipe: import it only here
        from .hub import card_from_training_log

        names = dataset if dataset is not None else dataset_tags
        if not names:
            raise ValueError(
                "the model card needs the training data's name for its metadata: "
                "trainer.push_to_hub(dataset='multi30k') (a Hub dataset id or a short name)."
            )
        languages = [language] if isinstance(language, str) else list(language or ["en", "de"])
        if len(languages) != 2:
            raise ValueError(f"language={language!r}: give the (source, target) pair, e.g. ['en', 'de'].")
        model = self.accelerator.unwrap_model(self.model)
        card = card_from_training_log(
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
        )
        card.save(Path(self.args.output_dir) / "README.md")

    def create_scheduler(self, num_training_steps: int, optimizer: torch.optim.Optimizer | None = None):
        if self.lr_scheduler is None:
            self.lr_scheduler = paper_schedule(optimizer or self.optimizer, self.warmup_steps)
            self._created_lr_scheduler = True
        return self.lr_scheduler
