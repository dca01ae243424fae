"""Settings that cannot finish as asked, refused before the first update.

A setting that dooms a run from its start (averaging more checkpoints than the run writes, a pair too long for every
batch, a learning rate of zero) should not cost the hours of training that come before the failure; and under N
processes the process that fails first leaves the others to die in their next collective call. So both training
paths call `check_settings` first, on the preset, their own options and the output folder, before a process group
exists or the corpus is read, and `check_tokenized` right after tokenizing, before the model is built. Each raises one
`SettingsError` listing every problem it finds in the words of the command line (`--average-last 3`), with a fix.
Every process of a distributed run calls both with the same inputs before any collective call, so all of them raise
the same error and none is left waiting.

A single number out of its range is refused by the rule its flag applies (`ranges.TRAINING_RANGES`): the command
line refuses it as it parses the flag, and `check_settings` applies the same rule to the training functions'
arguments, for callers of the Python API; the other checks here are of what only the settings together tell.

Only what cannot work is refused. `--eval-steps` or `--save-steps` past `--max-steps` still validate, and the Trainer
still saves, once, at the last update (transformers' `DefaultFlowCallback` evaluates and saves at `max_steps`; the
loop of `no_trainer.py` validates at its end); `--tokens-per-update` below one batch makes updates of one batch;
`--warmup-steps` past `--max-steps` ends the run on the rising part of the §5.3 schedule.
"""

from collections.abc import Iterable
from pathlib import Path

from datasets import Dataset

from ..data.batching import dataset_lengths, longest_pair_problem
from ..data.corpora import BUILTIN
from ..data.tokenization import MIN_VOCAB_SIZE
from ..data.tokenized import FilterReport
from ..errors import SettingsError
from ..files.loading import CONFIG_ERRORS, config_error_message
from .checkpoints import checkpoint_step, last_complete_checkpoint, list_checkpoints
from .presets import PRESET_FLAGS, RunSettings, TrainingPreset, record_run_preset
from .ranges import TRAINING_RANGES


def flag(name: str, value: object) -> str:
    """A preset field or training option as the command line gives it: `flag("max_steps", 60)` is `--max-steps 60`."""
    return f"--{name.replace('_', '-')} {value}"


def fp16_available() -> bool:
    """Whether this machine has a device that trains in float16 mixed precision (CUDA, or Apple's MPS)."""
    import torch

    return torch.cuda.is_available() or torch.backends.mps.is_available()


def trainer_checkpoint_steps(
    max_steps: int, save_steps: int, existing: Iterable[int] = (), resume_step: int = 0
) -> list[int]:
    """The steps of the checkpoints a `Seq2SeqTrainer` run leaves in its folder before rotation: those already there
    (`existing`), every multiple of `save_steps` after `resume_step` up to `max_steps`, and `max_steps` itself, which
    transformers' `DefaultFlowCallback` saves whatever `save_steps` says."""
    steps = set(existing)
    if max_steps > resume_step:
        steps.update(range((resume_step // save_steps + 1) * save_steps, max_steps + 1, save_steps))
        steps.add(max_steps)
    return sorted(steps)


def check_settings(
    preset: TrainingPreset,
    output_dir: str | Path,
    *,
    resume: bool,
    averages_checkpoints: bool,
    per_device_batch_size: int | None = None,
    gradient_accumulation_steps: int | None = None,
    train_samples: int | None = None,
    eval_samples: int | None = None,
    eval_beams: int = 1,
    eval_batch_size: int = 1,
    log_steps: int = 1,
    max_grad_norm: float = 0.0,
    threads: int | None = None,
    mixed_precision: str | None = None,
    run: RunSettings | None = None,
) -> None:
    """Raise a `SettingsError` for every setting of `preset` and of the training function's own options that
    cannot finish as asked; needs neither the corpus nor a process group.

    `averages_checkpoints`: the run averages its last `preset.average_last` checkpoints at the end (`training.train`),
    so it must write or find that many: `output_dir`'s checkpoints count when `resume`. A folder that holds another
    run raises `record_run_preset`'s `ValueError`. Options left at `None` were not given; `mixed_precision` is
    "fp16", "bf16" or "no"/None; `run` what the run records besides its preset, which a resume must match."""
    problems = []
    if mixed_precision == "fp16" and not fp16_available():
        # transformers' Trainer and accelerate both train in float32 then, without a word
        problems.append(
            "--fp16: float16 mixed precision needs a CUDA or MPS device, and this machine has neither (on a CPU the "
            "run would train in float32 without saying so); use --bf16 on a CPU, or leave the flag out."
        )
    values = {field: getattr(preset, field) for field in PRESET_FLAGS if field in TRAINING_RANGES}
    values |= {
        "per_device_batch_size": per_device_batch_size,
        "gradient_accumulation_steps": gradient_accumulation_steps,
        "train_samples": train_samples,
        "eval_samples": eval_samples,
        "eval_batch_size": eval_batch_size,
        "eval_beams": eval_beams,
        "log_steps": log_steps,
        "max_grad_norm": max_grad_norm,
        "threads": threads,
    }
    if per_device_batch_size is not None:  # batches of pairs: no token budget applies
        del values["max_tokens"]
    if gradient_accumulation_steps is not None:  # a fixed accumulation: the token target is not used
        del values["tokens_per_update"]
    # each number in its range, by the rule its command-line flag applies (`ranges.TRAINING_RANGES`)
    out_of_range = {
        field: problem
        for field, value in values.items()
        if value is not None and (problem := TRAINING_RANGES[field].problem(value))
    }
    problems += [f"{flag(field, values[field])} is {problem}." for field, problem in out_of_range.items()]
    if eval_beams > preset.vocab_size >= 1:  # more beams than continuations: the search only repeats itself
        problems.append(
            f"{flag('eval_beams', eval_beams)} is more beams than the vocabulary's {preset.vocab_size} tokens "
            f"(--vocab-size); give --eval-beams {min(4, preset.vocab_size)} (the paper) or at most {preset.vocab_size}."
        )
    if "dropout" not in out_of_range:  # an invalid dropout would fail the model's config as well: one message is enough
        problems += _model_problems(preset)
    if Path(output_dir).exists() and not Path(output_dir).is_dir():
        problems.append(f"--output-dir {output_dir} is a file, not a folder: give a new folder, or the run's own.")
    _raise(problems)

    record_run_preset(output_dir, preset, resume, write=False, run=run)
    if averages_checkpoints:
        _raise(_checkpoint_problems(preset, Path(output_dir), resume))


def _model_problems(preset: TrainingPreset) -> list[str]:
    """The preset's model: buildable at all, and with positions for the pairs `max_length` keeps."""
    try:
        config = preset.model_config(vocab_size=max(preset.vocab_size, MIN_VOCAB_SIZE))
    except CONFIG_ERRORS as error:
        return [
            f"the preset's model ({preset.model_preset!r} with model_overrides {dict(preset.model_overrides)}) "
            f"cannot be built: {config_error_message(error)}"
        ]
    # sinusoidal positions extend to any length; learned ones end at their table (sources and decoder inputs are
    # at most max_length tokens; validation's generation stops at the table by itself)
    if config.position_encoding == "learned" and config.max_position_embeddings < preset.max_length:
        return [
            f"{flag('max_length', preset.max_length)} keeps pairs of up to {preset.max_length} tokens a side, but "
            f"the model's learned positions end at max_position_embeddings={config.max_position_embeddings} (the "
            f"preset's model_overrides); give --max-length {config.max_position_embeddings} or less, or raise "
            f"max_position_embeddings."
        ]
    return []


def _checkpoint_problems(preset: TrainingPreset, output: Path, resume: bool) -> list[str]:
    """Whether a Trainer run ends with the `average_last` checkpoints it averages: those it writes, plus those of the
    run it resumes (`save_total_limit` = `average_last` keeps the newest that many, and never fewer). The counts
    involved are at least 1 (checked first)."""
    existing = [checkpoint_step(path) for path in list_checkpoints(output)] if resume and output.is_dir() else []
    latest = last_complete_checkpoint(output) if existing else None  # where `train` resumes
    resume_step = checkpoint_step(latest) if latest else 0
    wanted, every, last = preset.average_last, preset.save_steps, preset.max_steps
    steps = trainer_checkpoint_steps(last, every, existing, resume_step)
    if len(steps) >= wanted:
        return []
    names = ", ".join(f"checkpoint-{step}" for step in steps)
    earlier = f"; {len(existing)} of them already in {output}" if existing else ""
    fixes = [flag("average_last", len(steps))]
    # the other ways out: checkpoints closer together, or more updates (a multiple of save_steps: evenly spaced)
    missing = wanted - len(existing)
    if missing <= last - resume_step:
        closer = (last - resume_step) // missing
        while closer > 0 and len(trainer_checkpoint_steps(last, closer, existing, resume_step)) < wanted:
            closer -= 1
        if closer:
            fixes.append(flag("save_steps", closer))
    longer = every * (missing + resume_step // every)
    while len(trainer_checkpoint_steps(longer, every, existing, resume_step)) < wanted:
        longer += every
    fixes.append(flag("max_steps", longer))
    return [
        f"{flag('average_last', wanted)} averages the last {wanted} checkpoints at the end, but "
        f"{flag('max_steps', last)} with {flag('save_steps', every)} leaves {len(steps)} ({names}{earlier}); give "
        f"{', '.join(fixes[:-1])} or {fixes[-1]}."
    ]


def check_tokenized(
    preset: TrainingPreset,
    train_set: Dataset,
    train_report: FilterReport,
    valid_report: FilterReport,
    *,
    token_batches: bool,
) -> None:
    """Raise a `SettingsError` when the tokenized data leaves nothing to train or validate on, or (with
    `token_batches`, batches of at most `preset.max_tokens` padded tokens) holds a pair that fits no batch."""
    problems = []
    for name, report in (("training", train_report), ("validation", valid_report)):
        if report.kept:
            continue
        total = len(report.empty) + len(report.too_long)
        split = "train" if name == "training" else preset.valid_split
        if report.too_long:
            empty = f" and {len(report.empty)} an empty side" if report.empty else ""
            problems.append(
                f"{flag('max_length', preset.max_length)} leaves no {name} pair: {len(report.too_long)} of the "
                f"{total} pairs of split {split!r} have more tokens on a side{empty}; raise --max-length."
            )
        else:
            problems.append(f"--corpus {preset.corpus} has no {name} pair with text on both sides in split {split!r}.")
    if token_batches and train_report.kept:
        source_lengths, target_lengths = dataset_lengths(train_set)
        problem = longest_pair_problem(int((source_lengths + target_lengths).max()), preset.max_tokens)
        problems += [problem] if problem else []
    _raise(problems)


def check_streaming(
    corpus: str,
    output_dir: str | Path,
    tokenizer_path: str | Path | None,
    per_device_batch_size: int | None,
    train_samples: int | None,
) -> None:
    """Refuse, before anything is read, what `--streaming` cannot do: learn a BPE (it never holds the corpus),
    batches of pairs, or a first-N selection (it reads the corpus as it trains, in token-budget batches); and corpora
    that are no stream: the built-in one (made in memory) and a TSV file (split by its own rule, read whole)."""
    problems = []
    if corpus == BUILTIN:
        problems.append(
            "--streaming reads files or a datasets name; the built-in corpus is made in memory: leave it out."
        )
    elif Path(corpus).expanduser().is_file():
        problems.append(
            f"--streaming reads a folder of line-aligned split.lang files or a datasets name; {corpus} is a TSV file, "
            "split by its own rule and read whole: leave out --streaming."
        )
    if tokenizer_path is None and not (Path(output_dir) / "tokenizer" / "tokenizer.json").is_file():
        problems.append(
            "--streaming never reads the whole corpus, so it cannot learn a BPE from it: give a tokenizer with "
            "--tokenizer (`vanilla-transformer train-tokenizer`'s output, or another run's tokenizer/ folder)."
        )
    if per_device_batch_size:
        problems.append("--streaming cuts token-budget batches (--max-tokens); leave out --per-device-batch-size.")
    if train_samples:
        problems.append("--streaming reads the whole stream; leave out --train-samples.")
    _raise(problems)


def _raise(problems: list[str]) -> None:
    if len(problems) == 1:
        raise SettingsError(problems[0])
    if problems:
        raise SettingsError("the run cannot finish as asked:\n" + "\n".join(f"- {problem}" for problem in problems))
