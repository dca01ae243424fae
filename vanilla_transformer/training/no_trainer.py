"""The paper's training recipe (§5) as a plain `accelerate` loop, in the style of transformers'
`run_translation_no_trainer.py`: the data, model, token batches (§5.1), Adam and schedule (§5.3) and label smoothing
(§5.4) of `training.train`, with every step written out. One process, DDP, FSDP and mixed precision all run this one
loop; an update divides the summed loss of every micro-batch on every process by the target tokens of all of them, so
N processes with batches of b pairs give exactly the update of one process with batches of N·b.
"""

import json
import math
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration, set_seed
from torch.utils.data import DataLoader
from transformers import PreTrainedModel, PreTrainedTokenizerBase
from transformers.dynamic_module_utils import custom_object_save

from ..data.batching import Seq2SeqCollator
from ..data.streaming import StreamingTokenBatches
from ..data.tokenized import model_columns
from ..files.outputs import (
    STAGED_SUFFIX,
    begin_staged_folder,
    fsync_directory,
    fsync_tree,
    publish_staged_folder,
    write_text_atomic,
)
from ..inference.scoring import IGNORED_LABEL_ID, score_translations
from ..model.modeling_vanilla_transformer import own_class
from .checkpoints import STAGING_PREFIX, checkpoint_step, list_checkpoints, remove_stale_staging
from .fsdp import shard_tied_embeddings, warn_if_fsdp_dropped
from .optimization import label_smoothed_loss, paper_adam, paper_schedule, peak_learning_rate
from .run import PreparedRun, prepare_run, run_lock, start_run
from .settings import TrainingSettings

LOG_FILE = "train_log.json"
# the middle of the fixed hidden name the final model is written under (`save_final_model`)
FINAL_STAGING = "final-model"


@dataclass
class NoTrainerRun:
    """What a run of `train_no_trainer` did: every update's loss and gradient norm, the evaluations, the model."""

    output_dir: Path
    final_dir: Path
    losses: list[float] = field(default_factory=list)
    grad_norms: list[float] = field(default_factory=list)
    evaluations: list[dict] = field(default_factory=list)
    predictions: list[str] = field(default_factory=list)
    train_seconds: float = 0.0


def evaluate_translations(
    accelerator: Accelerator,
    model: torch.nn.Module,
    loader: DataLoader,
    tokenizer: PreTrainedTokenizerBase,
    num_beams: int = 1,
) -> tuple[list[str], list[str]]:
    """`(hypotheses, references)` of the whole set of a prepared (sharded) loader, in dataset order, on every process:
    each decodes its own batches, and `gather_for_metrics` drops the examples accelerate repeated to even them out."""
    unwrapped = accelerator.unwrap_model(model)
    was_training = unwrapped.training
    unwrapped.eval()
    hypotheses, references = [], []
    pad = tokenizer.pad_token_id
    for batch in loader:
        with torch.inference_mode():
            generated = unwrapped.generate(
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], num_beams=num_beams
            )
        # processes decode to different lengths; gathering needs one shape
        generated = accelerator.pad_across_processes(generated, dim=1, pad_index=pad)
        labels = accelerator.pad_across_processes(batch["labels"], dim=1, pad_index=IGNORED_LABEL_ID)
        generated, labels = accelerator.gather_for_metrics((generated, labels))
        labels = labels.masked_fill(labels == IGNORED_LABEL_ID, pad)
        hypotheses += [text.strip() for text in tokenizer.batch_decode(generated, skip_special_tokens=True)]
        references += [text.strip() for text in tokenizer.batch_decode(labels, skip_special_tokens=True)]
    unwrapped.train(was_training)
    return hypotheses, references


def save_model_files(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, folder: Path) -> None:
    """What `save_pretrained` writes besides the weights (the code files with an `auto_map`, config, generation
    config), and the tokenizer."""
    if model._auto_class is not None:
        model.add_remote_auto_map()
        with own_class(model):  # not FSDP2's class of the same name, whose code is torch's
            custom_object_save(model, folder, config=model.config)
    model.config.save_pretrained(folder)
    model.generation_config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def save_checkpoint(
    accelerator: Accelerator,
    model: torch.nn.Module,
    tokenizer,
    folder: Path,
    keep: int,
    stream: StreamingTokenBatches | None = None,
) -> None:
    """`accelerator.save_state` plus config, generation config and tokenizer, so that a checkpoint also loads with
    `from_pretrained` and averages (§6.1) like the Trainer's; the newest `keep` are kept. It is written into
    `tmp-checkpoint-N` and renamed when complete; a stream's processes each add their position in it."""
    staging = folder.with_name(STAGING_PREFIX + folder.name)
    if accelerator.is_main_process:
        shutil.rmtree(staging, ignore_errors=True)  # a leftover of a run killed while saving this step
    accelerator.wait_for_everyone()
    accelerator.save_state(str(staging), safe_serialization=True)
    if stream is not None:
        (staging / stream_state_name(accelerator)).write_text(json.dumps(stream.state_dict()) + "\n")
    if accelerator.is_main_process:
        save_model_files(accelerator.unwrap_model(model), tokenizer, staging)
    accelerator.wait_for_everyone()  # every process's random states are in
    if accelerator.is_main_process:
        fsync_tree(staging)  # the bytes reach the disk before the name does
        if folder.exists():  # a checkpoint of this step from before a resume: the new one replaces it
            shutil.rmtree(folder)
        staging.rename(folder)
        fsync_directory(folder.parent)
        for old in list_checkpoints(folder.parent)[:-keep]:
            shutil.rmtree(old)
    accelerator.wait_for_everyone()


def stream_state_name(accelerator: Accelerator) -> str:
    """The file of a checkpoint that holds this process's position in the training stream."""
    return f"stream_state_{accelerator.process_index}.json"


def save_final_model(
    accelerator: Accelerator, model: torch.nn.Module, tokenizer, folder: Path, command: str = "train-no-trainer"
) -> None:
    """`save_pretrained` of the weights gathered from every process (FSDP's shards), and the tokenizer, written
    under a hidden name beside `folder` and replacing it whole only when complete."""
    # one name every process knows (save_model gathers from all of them), not a random one
    staging = folder.with_name(f".{folder.name}-{FINAL_STAGING}{STAGED_SUFFIX}")
    if accelerator.is_main_process:
        begin_staged_folder(folder, name=staging.name)
    accelerator.wait_for_everyone()
    try:
        state_dict = accelerator.get_state_dict(model)  # every process: FSDP gathers the shards
        if accelerator.is_main_process:
            unwrapped = accelerator.unwrap_model(model)
            # FSDP gathers each name of a tied matrix as a tensor of its own, and save_pretrained would then keep
            # lm_head.weight: keep model.shared.weight, the name a one-process save_pretrained keeps
            for alias in unwrapped.all_tied_weights_keys:
                state_dict.pop(alias, None)
            unwrapped.save_pretrained(staging, state_dict=state_dict)
            tokenizer.save_pretrained(staging)
            # the run's own final/: replaced whatever it held
            publish_staged_folder(staging, folder, "model", command, overwrite=True)
    finally:
        if accelerator.is_main_process:
            shutil.rmtree(staging, ignore_errors=True)
    accelerator.wait_for_everyone()


def write_log(accelerator: Accelerator, output: Path, run: NoTrainerRun) -> None:
    """`output/train_log.json` (main process): losses, gradient norms, evaluations and the last translations."""
    if accelerator.is_main_process:
        log = {
            "losses": run.losses,
            "grad_norms": run.grad_norms,
            "evaluations": run.evaluations,
            "predictions": run.predictions,
        }
        write_text_atomic(output / LOG_FILE, json.dumps(log, indent=1) + "\n")


@dataclass
class LoopParts:
    """What the loop trains and validates with, as `accelerator.prepare` returned it."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    train_loader: DataLoader
    valid_loader: DataLoader
    tokenizer: PreTrainedTokenizerBase
    prepared: PreparedRun
    stream: StreamingTokenBatches | None = None


def validate(
    accelerator: Accelerator, parts: LoopParts, settings: TrainingSettings, run: NoTrainerRun, updates: int
) -> None:
    """Translate the validation pairs (`evaluate_translations`), score them and log the result."""
    hypotheses, references = evaluate_translations(
        accelerator, parts.model, parts.valid_loader, parts.tokenizer, settings.eval_beams
    )
    scores = score_translations(hypotheses, references, lang=settings.target_lang)
    bleu, chrf = scores["bleu"]["score"], scores["chrf"]["score"]
    run.evaluations.append({"step": updates, "bleu": bleu, "chrf": chrf, "n": len(hypotheses)})
    run.predictions = hypotheses
    accelerator.print(f"step {updates}: {run.evaluations[-1]}")
    write_log(accelerator, settings.output_dir, run)


def training_batches(
    settings: TrainingSettings, prepared: PreparedRun, collator: Seq2SeqCollator, accelerator: Accelerator
) -> tuple[DataLoader, StreamingTokenBatches | None]:
    """The training loader (not yet prepared by accelerate) and a streamed run's stream."""
    if settings.streaming:
        # every process reads the stream and takes its own batches of each buffer (not accelerate's sharding)
        preset = settings.preset
        stream = StreamingTokenBatches(
            preset.corpus,
            prepared.data.tokenizer,
            "train",
            settings.source_lang,
            settings.target_lang,
            max_tokens=preset.max_tokens,
            max_length=preset.max_length,
            buffer_pairs=settings.stream_buffer_pairs,
            seed=settings.seed,
            rank=accelerator.process_index,
            world_size=accelerator.num_processes,
            dataset_config=preset.dataset_config,
        )
        return DataLoader(stream, batch_size=None, collate_fn=collator), stream
    pairs = model_columns(prepared.data.train_set)  # the loaders read the token ids alone; the sampler the lengths
    if settings.per_device_batch_size:
        # accelerate swaps the RandomSampler for its seedable one; every process takes its own batches of it
        return DataLoader(pairs, batch_size=settings.per_device_batch_size, shuffle=True, collate_fn=collator), None
    # accelerate shards a batch sampler by whole batches: process i takes batches i, i+N, ...; with `even_batches`
    # (the default) the processes short of a batch at the end of an epoch repeat early ones
    return DataLoader(pairs, batch_sampler=prepared.sampler, collate_fn=collator), None


def resume(
    accelerator: Accelerator, settings: TrainingSettings, run: NoTrainerRun, stream: StreamingTokenBatches | None
) -> int:
    """Restore the newest `checkpoint-N` and the log up to it; the number of updates done (0 for a new run)."""
    output = settings.output_dir
    checkpoints = list_checkpoints(output) if settings.resume and output.is_dir() else []
    if not checkpoints:
        return 0
    checkpoint = checkpoints[-1]
    accelerator.load_state(str(checkpoint))
    updates = checkpoint_step(checkpoint)
    if stream is not None:
        stream.load_state_dict(json.loads((checkpoint / stream_state_name(accelerator)).read_text()))
    if (output / LOG_FILE).is_file():
        log = json.loads((output / LOG_FILE).read_text())
        run.losses, run.grad_norms = log["losses"][:updates], log["grad_norms"][:updates]
        run.evaluations = [e for e in log["evaluations"] if e["step"] <= updates]
    accelerator.print(f"resuming from {checkpoint}")
    return updates


def train_no_trainer(settings: TrainingSettings) -> NoTrainerRun:
    """Train `settings.preset` into `settings.output_dir` with a hand-written `accelerate` loop, resuming from the
    newest `checkpoint-N` when `settings.resume`; launch it once per process. Validation runs every
    `preset.eval_steps` updates and at the end, checkpoints every `preset.save_steps`; the final weights go to
    `output_dir/final`, the log to `train_log.json`.
    """
    start_run(settings, trainer=False)
    preset, output = settings.preset, settings.output_dir
    accelerator = Accelerator(
        # without a GPU, accelerate forms a multi-process (gloo) group only when told it runs on the CPU
        cpu=not torch.cuda.is_available(),
        mixed_precision=settings.mixed_precision,  # None: accelerate's launcher or config decides
        # the paper's schedule counts updates, so the scheduler steps once per update, not once per process
        step_scheduler_with_optimizer=False,
        # pairs drawn by a sampler seeded from (seed, epoch) alone: the same permutation on every process and for any
        # number of processes, and again after a resume
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=settings.seed),
    )
    set_seed(settings.seed)
    with run_lock(accelerator.state, output):  # one run at a time in a folder
        if accelerator.is_main_process:
            remove_stale_staging(output)  # checkpoints a killed run left half-written
        prepared = prepare_run(accelerator.state, settings, trainer=False)
        model, tokenizer, accumulation = prepared.model, prepared.data.tokenizer, prepared.accumulation
        collator = Seq2SeqCollator(tokenizer, model=model, label_pad_token_id=IGNORED_LABEL_ID)
        train_loader, stream = training_batches(settings, prepared, collator, accelerator)
        accelerator.gradient_accumulation_steps = accumulation
        valid_loader = DataLoader(
            model_columns(prepared.data.valid_set), batch_size=settings.eval_batch_size, collate_fn=collator
        )
        warn_if_fsdp_dropped(accelerator)
        shard_tied_embeddings(accelerator, model)  # FSDP2 only; before the optimizer takes the parameters
        learning_rate = peak_learning_rate(model.config.d_model, preset.warmup_steps, preset.lr_factor)
        optimizer = paper_adam(model.parameters(), learning_rate, accelerator.device)
        scheduler = paper_schedule(optimizer, preset.warmup_steps)
        model, optimizer, valid_loader, scheduler = accelerator.prepare(model, optimizer, valid_loader, scheduler)
        if stream is None:
            train_loader = accelerator.prepare(train_loader)
        batches = "an endless stream of" if stream is not None else len(train_loader)
        accelerator.print(
            f"{prepared.summary}; {batches} batches per process and epoch on {accelerator.num_processes} process(es); "
            f"{accumulation} batch(es) per process and update; peak learning rate {learning_rate:.2e} at step "
            f"{preset.warmup_steps}"
        )
        parts = LoopParts(model, optimizer, scheduler, train_loader, valid_loader, tokenizer, prepared, stream)
        run = NoTrainerRun(output, output / "final")
        updates = resume(accelerator, settings, run, stream)
        start = time.perf_counter()
        train_updates(accelerator, settings, parts, run, updates)
        run.train_seconds = time.perf_counter() - start
        validate(accelerator, parts, settings, run, preset.max_steps)
        save_final_model(accelerator, model, tokenizer, run.final_dir, settings.command)
        accelerator.print(f"final model: {run.final_dir}")
        accelerator.end_training()
        return run


def train_updates(
    accelerator: Accelerator, settings: TrainingSettings, parts: LoopParts, run: NoTrainerRun, updates: int
) -> None:
    """Train from update `updates` to `preset.max_steps`: each update the summed smoothed loss of the micro-batches
    of all processes divided by their target tokens (fairseq's scheme), clipped if asked; log, validate and save."""
    preset, model, accumulation = settings.preset, parts.model, parts.prepared.accumulation
    streaming = parts.stream is not None
    # the last update of an epoch takes the batches left over, however few
    # (a stream knows its own position, and its epochs have no length known in advance)
    updates_per_epoch = math.inf if streaming else math.ceil(len(parts.train_loader) / accumulation)
    epoch, updates_in_epoch = (0, 0) if streaming else divmod(updates, updates_per_epoch)
    smoothed_loss_sum = label_smoothed_loss(preset.label_smoothing)
    model.train()
    # the loss and target tokens summed over the micro-batches of this process since the last update
    summed = torch.zeros(2, device=accelerator.device)
    micro_batches = 0  # of the update under way, on this process
    while updates < preset.max_steps:
        # accelerate reaches a sampler's set_epoch only when it is not wrapped in its BatchSamplerShard; set ours
        if not streaming:
            parts.train_loader.set_epoch(epoch)
        if parts.prepared.sampler is not None:
            parts.prepared.sampler.set_epoch(epoch)
        loader = parts.train_loader
        if updates_in_epoch:  # resumed mid-epoch: skip the batches the checkpoint has already seen
            loader = accelerator.skip_first_batches(parts.train_loader, updates_in_epoch * accumulation)
            updates_in_epoch = 0
        for batch in loader:
            if streaming:  # a loader accelerate did not prepare: its batches are on the CPU
                batch = {name: tensor.to(accelerator.device) for name, tensor in batch.items()}
            if not micro_batches:
                # dropout's random numbers drawn from (seed, update, process) alone, as fairseq seeds each update: a
                # resume draws what the uninterrupted run drew, though its loader's new iterator took a number from
                # the generator the checkpoint restored
                torch.manual_seed(settings.seed + updates * accelerator.num_processes + accelerator.process_index)
            micro_batches += 1
            with accelerator.accumulate(model):
                labels = batch.pop("labels")
                # no key/value cache, which the model fills without labels: a recomputed layer (FSDP's activation
                # checkpointing) would find it full and save other tensors than the first time
                outputs = model(**batch, use_cache=False)
                # summed, not averaged: the divisor is the target tokens of the whole update, known after all of it
                loss = smoothed_loss_sum(outputs, labels, num_items_in_batch=1)
                accelerator.backward(loss)
                summed += torch.stack([loss.detach().float(), (labels != IGNORED_LABEL_ID).sum().float()])
                if accelerator.sync_gradients:
                    loss_sum, target_tokens = accelerator.reduce(summed, reduction="sum").tolist()
                    # DDP averaged the gradients over the processes and accelerator.backward divided them by the
                    # accumulation steps: undo both and divide by the update's target tokens (fairseq's scheme)
                    scale = accelerator.num_processes * accumulation / target_tokens
                    for parameter in model.parameters():
                        if parameter.grad is not None:
                            parameter.grad.mul_(scale)
                    grad_norm = accelerator.clip_grad_norm_(model.parameters(), settings.max_grad_norm or math.inf)
                parts.optimizer.step()
                if accelerator.sync_gradients and not accelerator.optimizer_step_was_skipped:
                    parts.scheduler.step()
                parts.optimizer.zero_grad()
            if not accelerator.sync_gradients:
                continue
            updates += 1
            summed.zero_()
            micro_batches = 0
            run.losses.append(loss_sum / target_tokens)
            run.grad_norms.append(float(grad_norm))
            if updates % settings.log_steps == 0:
                accelerator.print(
                    f"step {updates}: loss {run.losses[-1]:.4f}, grad norm {run.grad_norms[-1]:.3f}, "
                    f"lr {parts.scheduler.get_last_lr()[0]:.2e}, {target_tokens:.0f} target tokens"
                )
                write_log(accelerator, settings.output_dir, run)
            if updates % preset.eval_steps == 0 and updates < preset.max_steps:
                validate(accelerator, parts, settings, run, updates)
            if updates % preset.save_steps == 0:
                folder = settings.output_dir / f"checkpoint-{updates}"
                save_checkpoint(accelerator, model, parts.tokenizer, folder, preset.average_last, parts.stream)
            if updates >= preset.max_steps:
                break
        epoch += 1
