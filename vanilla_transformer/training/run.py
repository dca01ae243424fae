"""The training job, one function per arrow of the pipeline: corpus → tokenizer → model → `Seq2SeqTrainer` with the
paper's recipe → checkpoints → averaging (§6.1) → a Hub-ready folder."""

from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import torch
from accelerate import PartialState
from datasets import Dataset
from transformers import PreTrainedTokenizerBase

from ..data.batching import (
    Seq2SeqCollator,
    TokenBudgetBatchSampler,
    accumulation_steps,
    dataset_lengths,
    longest_pair_problem,
)
from ..data.corpora import load_corpus
from ..data.staging import atomic_folder
from ..data.tokenization import (
    load_tokenizer,
    side_texts,
    tokenizer_fingerprint,
    tokenizer_sample,
    train_joint_bpe,
)
from ..data.tokenized import FilterReport, tokenize_pairs, tokenized_cache_root
from ..errors import SettingsError
from ..inference.scoring import compute_metrics_for_trainer
from ..model.modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration
from .checkpoints import average_checkpoints
from .fsdp import check_trainer_fsdp, shard_tied_embeddings, warn_if_fsdp_dropped
from .optimization import label_smoothed_loss
from .run_folder import RunFolder
from .settings import TrainingSettings, flag, raise_problems
from .trainer import VanillaTransformerTrainer, paper_training_arguments


@dataclass
class TrainingRun:
    """Where a run left its outputs."""

    output_dir: Path
    final_dir: Path
    log_history: list[dict]
    train_seconds: float


def build_tokenizer(settings: TrainingSettings, run: RunFolder, train_corpus: Dataset) -> PreTrainedTokenizerBase:
    """The run's tokenizer in `output_dir/tokenizer`, where a resume finds it: the one there (another
    `tokenizer_path` is refused), else a copy of `tokenizer_path`, else the joint BPE learned from both sides of the
    corpus or of a seeded sample of `tokenizer_sample_pairs` pairs."""
    folder, given = settings.output_dir / "tokenizer", settings.tokenizer_path
    if run.tokenizer is not None:
        tokenizer = load_tokenizer(run.tokenizer)
        # the origin the run recorded, kept on a resume without --tokenizer, need not exist any more
        recorded = (run.record or {}).get("run", {}).get("tokenizer_path")
        other = given is not None and given != recorded
        if other and tokenizer_fingerprint(load_tokenizer(given)) != tokenizer_fingerprint(tokenizer):
            raise SettingsError(
                f"--tokenizer {given} is not the tokenizer the run in {settings.output_dir} was started with "
                f"({folder}); drop --tokenizer to resume it, or start a new run in another --output-dir."
            )
        return tokenizer
    if given is not None:
        tokenizer = load_tokenizer(given)
    else:
        sample = tokenizer_sample(train_corpus, settings.tokenizer_sample_pairs)
        tokenizer = train_joint_bpe(
            chain(side_texts(sample, settings.source_lang), side_texts(sample, settings.target_lang)),
            vocab_size=settings.preset.vocab_size,
            lowercase=settings.preset.lowercase,
        )
    with atomic_folder(folder) as staging:  # a run killed while saving leaves no half-written tokenizer to reuse
        tokenizer.save_pretrained(staging)
    return tokenizer


@dataclass
class RunData:
    """A run's tokenizer and its tokenized training and validation pairs (`data.tokenized`), with what was dropped."""

    tokenizer: PreTrainedTokenizerBase
    train_set: Dataset
    valid_set: Dataset
    train_report: FilterReport
    valid_report: FilterReport

    def train_tokens(self) -> int:
        """Source and target tokens of all training pairs."""
        return int(sum(lengths.sum() for lengths in dataset_lengths(self.train_set)))


def prepare_run_data(state: PartialState, settings: TrainingSettings, folder: RunFolder) -> RunData:
    """The tokenizer and the tokenized pairs (the first `eval_samples` validation pairs if given), the main process
    first, so that it fills the caches before the others open them. Unlike `state.main_process_first()`, an error in
    the main process's turn still lets the others past the barrier to meet it themselves, instead of waiting for a
    peer that is gone until the process group times out. A `SettingsError` when the pairs leave nothing to train or
    validate on, or hold a pair that fits no token batch."""
    preset, languages = settings.preset, (settings.source_lang, settings.target_lang)
    if not state.is_main_process:
        state.wait_for_everyone()
    try:
        train_corpus = load_corpus(preset.corpus, "train", *languages, preset.dataset_config)
        valid_corpus = load_corpus(preset.corpus, preset.valid_split, *languages, preset.dataset_config)
        tokenizer = build_tokenizer(settings, folder, train_corpus)
        if settings.eval_samples:
            valid_corpus = valid_corpus.select(range(min(settings.eval_samples, len(valid_corpus))))
        cache = tokenized_cache_root()
        (train_set, train_report), (valid_set, valid_report) = (
            tokenize_pairs(corpus, tokenizer, *languages, preset.max_length, cache)
            for corpus in (train_corpus, valid_corpus)
        )
    finally:
        if state.is_main_process:
            state.wait_for_everyone()
    state.print(f"train: {train_report}\nvalid: {valid_report}")
    found = []
    for name, report in (("training", train_report), ("validation", valid_report)):
        if report.kept:
            continue
        split = "train" if name == "training" else preset.valid_split
        if report.too_long:
            empty = f" and {len(report.empty)} an empty side" if report.empty else ""
            found.append(
                f"{flag('max_length', preset.max_length)} leaves no {name} pair: {len(report.too_long)} of the "
                f"{len(report.empty) + len(report.too_long)} pairs of split {split!r} have more tokens on a "
                f"side{empty}; raise --max-length."
            )
        else:
            found.append(f"--corpus {preset.corpus} has no {name} pair with text on both sides in split {split!r}.")
    if not settings.per_device_batch_size and train_report.kept:
        source_lengths, target_lengths = dataset_lengths(train_set)
        problem = longest_pair_problem(int((source_lengths + target_lengths).max()), preset.max_tokens)
        found += [problem] if problem else []
    raise_problems(found)
    return RunData(tokenizer, train_set, valid_set, train_report, valid_report)


@dataclass
class PreparedRun:
    """What a run trains from (`prepare_run`)."""

    data: RunData
    model: VanillaTransformerForConditionalGeneration
    sampler: TokenBudgetBatchSampler | None  # the token batches (None: batches of pairs)
    accumulation: int  # batches per process and update
    summary: str  # the parameters, pairs, tokens and batches, for the run's first lines


def prepare_run(state: PartialState, settings: TrainingSettings, folder: RunFolder) -> PreparedRun:
    """The run's setup, on every process under the run's lock (`RunFolder.open`), in the order the data flows: the
    tokenized data, a resume's record rewritten, the model, and the batches (token budgets or pairs) with the
    accumulation that reaches `preset.tokens_per_update` over all processes."""
    preset = settings.preset
    data = prepare_run_data(state, settings, folder)
    # a resume's record is rewritten only once every check has passed: a refused resume leaves it as it was
    if state.is_main_process and folder.record is not None:
        folder.write_record(settings)
    model = preset.model_for(data.tokenizer)
    sampler = None
    tokens = data.train_tokens()
    pairs = f"{len(data.train_set)} pairs, {tokens:,} tokens"
    if settings.per_device_batch_size:
        tokens_per_batch = settings.per_device_batch_size * tokens / len(data.train_set)
        pairs += f" in batches of {settings.per_device_batch_size} pairs"
    else:
        sampler = TokenBudgetBatchSampler.for_dataset(data.train_set, preset.max_tokens, seed=settings.seed)
        tokens_per_batch = sampler.tokens_per_batch()
        pairs += (
            f" in {len(sampler)} batches of ≤{preset.max_tokens} padded tokens ({tokens_per_batch:.0f} real on "
            f"average, padding {sampler.padding_share():.1%})"
        )
    accumulation = accumulation_steps(preset.tokens_per_update, tokens_per_batch * state.num_processes)
    summary = f"{sum(p.numel() for p in model.parameters()):,} parameters; {pairs}"
    return PreparedRun(data, model, sampler, accumulation, summary)


def train(settings: TrainingSettings, folder: RunFolder | None = None) -> TrainingRun:
    """Train `settings.preset` into `settings.output_dir` (read as `folder`, unless given) on `Seq2SeqTrainer`,
    resuming from its newest checkpoint when `settings.resume`, and average the last `preset.average_last`
    checkpoints into `output_dir/final` (§6.1).

    Under N processes (`accelerate launch`, `torchrun`) every process runs this function; the loss is divided by the
    target tokens of all of them, and accumulation counts the tokens of all of them. Each reads the folder and checks
    it before the process group exists, so that every process refuses the same way.
    """
    if settings.threads:
        torch.set_num_threads(settings.threads)
    torch.manual_seed(settings.seed)
    preset, output = settings.preset, settings.output_dir
    folder = folder or RunFolder.read(output)
    with folder.open(settings) as state:  # one run at a time in a folder
        prepared = prepare_run(state, settings, folder)
        model, tokenizer = prepared.model, prepared.data.tokenizer
        trainer = VanillaTransformerTrainer(
            model=model,
            args=paper_training_arguments(settings, prepared.accumulation, model.config.d_model),
            train_dataset=prepared.data.train_set,  # the length columns feed the sampler; the loaders drop them
            eval_dataset=prepared.data.valid_set,
            data_collator=Seq2SeqCollator(tokenizer, model=model, label_pad_token_id=-100),
            processing_class=tokenizer,
            compute_metrics=compute_metrics_for_trainer(tokenizer, settings.target_lang),
            compute_loss_func=label_smoothed_loss(preset.label_smoothing),
            max_tokens=None if settings.per_device_batch_size else preset.max_tokens,
            warmup_steps=preset.warmup_steps,
            batching_seed=settings.seed,
            batch_sampler=prepared.sampler,  # the one the accumulation was sized with
        )
        check_trainer_fsdp(trainer.accelerator)  # before training: checkpoints that resume and average
        warn_if_fsdp_dropped(trainer.accelerator)
        shard_tied_embeddings(trainer.accelerator, model)  # FSDP2 only
        state.print(
            f"{prepared.summary}; {prepared.accumulation} batch(es) per process and update; peak learning rate "
            f"{trainer.args.learning_rate:.2e} at step {preset.warmup_steps}"
        )

        checkpoint = folder.resume_from
        if checkpoint:
            print(f"resuming from {checkpoint}")
        result = trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
        final = output / "final"
        if trainer.is_world_process_zero():
            # the run's own final/ (a folder inside the run, which this function owns): replaced whole
            averaged = average_checkpoints(output, final, preset.average_last, overwrite=True, command=settings.command)
            print(f"averaged {[p.name for p in averaged]} into {final}")
        trainer.accelerator.wait_for_everyone()
        return TrainingRun(output, final, trainer.state.log_history, result.metrics.get("train_runtime", 0.0))
