"""The run object: every setting of a training run in one frozen dataclass (`TrainingSettings`), built once from a
preset and the options (flags or Python API), checked once (`check`), written once as the run's record
(`preset.json`), and passed whole to `prepare_run` and `train`.

It is checked on every process before the process group exists or the corpus is read, so that a doomed setting costs
no training and no process waits for another; what depends on the data is checked right after tokenizing
(`check_tokenized`). Each error lists every problem in the command line's words (`--average-last 3`), with a fix.
Only what cannot work is refused: `--save-steps` past `--max-steps` still saves once at the end, and `--warmup-steps`
past it ends the run on the rising part of the §5.3 schedule.
"""

import argparse
import json
import logging
import os
from collections.abc import Iterable
from dataclasses import MISSING, asdict, dataclass, fields, replace
from functools import cached_property
from pathlib import Path

from datasets import Dataset

from ..data.batching import dataset_lengths, longest_pair_problem
from ..data.corpora import corpus_languages, corpus_location, local_corpus, same_corpus
from ..data.corpora import corpus_sha256 as content_digest
from ..data.staging import atomic_file
from ..data.tokenization import MIN_VOCAB_SIZE
from ..data.tokenized import FilterReport
from ..errors import SettingsError, UsageError
from ..files.loading import CONFIG_ERRORS, config_error_message
from ..files.outputs import check_not_an_input, check_output_folder
from .checkpoints import RESUMABLE_FIELDS, checkpoint_step, last_complete_checkpoint, list_checkpoints
from .fsdp import fsdp_problems
from .presets import PRESET_FLAGS, TrainingPreset, preset_from_arguments, preset_from_record
from .ranges import TRAINING_RANGES

logger = logging.getLogger(__name__)

# corpora with more pairs learn their BPE from a seeded sample of this many: WMT14's 4.5M pairs would hold ~9M
# sentences in the BPE trainer's word counts, for merges that a million pairs fix
TOKENIZER_SAMPLE_PAIRS = 1_000_000
# the settings besides the preset that change a run's weights: recorded under "run", and a resume must match them
RECORDED = (
    "source_lang",
    "target_lang",
    "seed",
    "precision",
    "per_device_batch_size",
    "max_grad_norm",
    "corpus_sha256",
)
# the recorded settings a run object takes as options (precision is `mixed_precision`'s; the digest is computed)
OPTIONS = tuple(name for name in RECORDED if name not in ("precision", "corpus_sha256"))
# what a folder holding a tokenizer but no checkpoint yet fixes: its next start trains from scratch
TOKENIZER_FIELDS = ("corpus", "dataset_config", "vocab_size", "lowercase")
PRECISIONS = {"no": "fp32", "fp32": "fp32", "bf16": "bf16", "fp16": "fp16"}


def flag(name: str, value: object) -> str:
    """A setting as the command line gives it: `flag("max_steps", 60)` is `--max-steps 60`."""
    return f"--{name.replace('_', '-')} {value}"


@dataclass(frozen=True)
class TrainingSettings:
    """Everything a training run trains with: the preset and the run's options. Languages left out are the
    corpus's; `mixed_precision` left out is accelerate's launcher's choice, else float32."""

    preset: TrainingPreset
    output_dir: Path
    source_lang: str | None = None
    target_lang: str | None = None
    seed: int = 0
    mixed_precision: str | None = None  # "no", "bf16", "fp16"
    per_device_batch_size: int | None = None  # batches of pairs instead of token budgets
    max_grad_norm: float = 0.0  # 0: the paper clips nothing
    eval_samples: int | None = None
    eval_beams: int = 1  # greedy validation; the paper's beam 4 is for the final model
    eval_batch_size: int = 64
    log_steps: int = 50
    threads: int | None = None
    resume: bool = True
    overwrite: bool = False  # train in a non-empty folder that holds no run of ours
    tokenizer_path: str | None = None  # an existing tokenizer instead of learning a BPE
    tokenizer_sample_pairs: int | None = TOKENIZER_SAMPLE_PAIRS
    report_to: str = "tensorboard"
    progress: bool = True
    command: str = "train"  # the command final/ is marked as written by

    def __post_init__(self) -> None:
        source_lang, target_lang = corpus_languages(self.preset.corpus, self.source_lang, self.target_lang)
        resolved = {"output_dir": Path(self.output_dir), "source_lang": source_lang, "target_lang": target_lang}
        for name, value in resolved.items():
            object.__setattr__(self, name, value)

    @classmethod
    def from_arguments(cls, args: argparse.Namespace, command: str) -> "TrainingSettings":
        """The settings the flags of `train` give. Resuming a recorded run (no `--preset`), a
        flag left out keeps the recorded value: `train --output-dir RUN` continues the run as started, and
        `--max-steps 9000` beside it trains it longer; a flag the run cannot take is refused by `check_record`."""
        if args.tokenizer is not None and args.vocab_size is not None:
            raise UsageError(
                f"--vocab-size {args.vocab_size} sizes the BPE a run learns, but --tokenizer {args.tokenizer} brings "
                f"its own vocabulary, which the model takes: leave --vocab-size out (or --tokenizer, to learn one)."
            )
        options = {field.name for field in fields(cls) if field.init} - {"preset", "resume", "tokenizer_path"}
        given = {name: getattr(args, name) for name in options if getattr(args, name, None) is not None}
        if getattr(args, "bf16", False) or getattr(args, "fp16", False):
            given["mixed_precision"] = "bf16" if args.bf16 else "fp16"
        given["tokenizer_sample_pairs"] = getattr(args, "tokenizer_sample", None) or TOKENIZER_SAMPLE_PAIRS
        record = Path(args.output_dir) / "preset.json"
        if args.preset is None and not args.no_resume and record.is_file():
            recorded = read_run_preset(record)
            flags = {name: getattr(args, name) for name in PRESET_FLAGS if getattr(args, name) is not None}
            preset = replace(preset_from_record(recorded), **flags)
            given = recorded_options(recorded.get("run", {})) | given
        else:
            preset = preset_from_arguments(args)
        return cls(preset, resume=not args.no_resume, tokenizer_path=args.tokenizer, command=command, **given)

    @cached_property
    def corpus_sha256(self) -> str | None:
        """A local corpus's content digest, read when the run is recorded (a WMT-sized file is gigabytes)."""
        return content_digest(self.preset.corpus)

    @property
    def precision(self) -> str:
        """ "fp32", "bf16" or "fp16": the given precision, else accelerate's launcher's."""
        return PRECISIONS[self.mixed_precision or os.environ.get("ACCELERATE_MIXED_PRECISION") or "no"]

    def run_record(self) -> dict:
        """What the run records besides its preset (`RECORDED`), each of which changes its weights."""
        values = asdict(self) | {"precision": self.precision, "corpus_sha256": self.corpus_sha256}
        return {name: values[name] for name in RECORDED}

    def record(self) -> dict:
        """What `preset.json` holds: the preset's fields (a local corpus as its absolute path, so that a resume from
        another directory cannot take another file for it) and `run_record` under `"run"`."""
        record = json.loads(json.dumps(self.preset.as_dict()))  # as preset.json holds it: lists, not tuples
        local = local_corpus(self.preset.corpus)
        if local is not None:
            record["corpus"] = str(local)
        return record | {"run": self.run_record()}

    def check(self) -> None:
        """Raise a `SettingsError` for every setting that cannot finish as asked, then for a run that cannot write
        or find the `preset.average_last` checkpoints it averages."""
        _raise(problems(self))
        _raise(checkpoint_problems(self))
        check_run_folder(self)


def recorded_options(run: dict) -> dict:
    """The options a run recorded under "run" in its preset.json (`run_record`), as `TrainingSettings` takes them."""
    options = {name: run[name] for name in RECORDED if run.get(name) is not None and name in OPTIONS}
    if run.get("precision"):
        options["mixed_precision"] = {"fp32": "no"}.get(run["precision"], run["precision"])
    return options


def run_flags(run: dict) -> str:
    """The training command's flags for the recorded run settings that differ from the defaults (languages aside)."""
    text = f" --seed {run['seed']}" if run.get("seed") else ""
    text += {"bf16": " --bf16", "fp16": " --fp16"}.get(run.get("precision", "fp32"), "")
    for name in ("per_device_batch_size", "max_grad_norm"):
        text += f" {flag(name, run[name])}" if run.get(name) else ""
    return text


# -- what the settings together tell ----------------------------------------------------------------------------------


def fp16_available() -> bool:
    """Whether this machine has a device that trains in float16 mixed precision (CUDA, or Apple's MPS)."""
    import torch

    return torch.cuda.is_available() or torch.backends.mps.is_available()


def problems(settings: TrainingSettings) -> list[str]:
    """What no run can finish, known without the corpus: numbers out of range, fp16 without a device, more beams
    than tokens, a model that cannot be built, and an output that is a file."""
    preset, found = settings.preset, []
    if settings.precision == "fp16" and not fp16_available():
        # transformers' Trainer and accelerate both train in float32 then, without a word
        found.append(
            "--fp16: float16 mixed precision needs a CUDA or MPS device, and this machine has neither (on a CPU the "
            "run would train in float32 without saying so); use --bf16 on a CPU, or leave the flag out."
        )
    values = {name: getattr(preset, name) for name in PRESET_FLAGS if name in TRAINING_RANGES}
    values |= {name: getattr(settings, name) for name in TRAINING_RANGES if name not in values}
    if settings.per_device_batch_size is not None:  # batches of pairs: no token budget applies
        del values["max_tokens"]
    # each number in its range, by the rule its command-line flag applies (`ranges.TRAINING_RANGES`)
    out_of_range = {
        name: problem
        for name, value in values.items()
        if value is not None and (problem := TRAINING_RANGES[name].problem(value))
    }
    found += [f"{flag(name, values[name])} is {problem}." for name, problem in out_of_range.items()]
    if settings.eval_beams > preset.vocab_size >= 1:  # more beams than continuations: the search only repeats itself
        found.append(
            f"{flag('eval_beams', settings.eval_beams)} is more beams than the vocabulary's {preset.vocab_size} "
            f"tokens (--vocab-size); give --eval-beams {min(4, preset.vocab_size)} (the paper) or at most "
            f"{preset.vocab_size}."
        )
    if "dropout" not in out_of_range:  # an invalid dropout would fail the model's config as well: one message is enough
        found += _model_problems(preset)
    if settings.output_dir.exists() and not settings.output_dir.is_dir():
        found.append(
            f"--output-dir {settings.output_dir} is a file, not a folder: give a new folder, or the run's own."
        )
    return found


def _model_problems(preset: TrainingPreset) -> list[str]:
    """The preset's model: buildable at all, with positions for the pairs `max_length` keeps, and what an FSDP launch
    asks of it (`fsdp.fsdp_problems`)."""
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
    return fsdp_problems(config)


def trainer_checkpoint_steps(
    max_steps: int, save_steps: int, existing: Iterable[int] = (), resume_step: int = 0
) -> list[int]:
    """The steps of the checkpoints a `Seq2SeqTrainer` run leaves before rotation: `existing`, every multiple of
    `save_steps` after `resume_step`, and `max_steps` itself, which transformers' `DefaultFlowCallback` saves."""
    steps = set(existing)
    if max_steps > resume_step:
        steps.update(range((resume_step // save_steps + 1) * save_steps, max_steps + 1, save_steps))
        steps.add(max_steps)
    return sorted(steps)


def checkpoint_problems(settings: TrainingSettings) -> list[str]:
    """Whether a Trainer run ends with the `average_last` checkpoints it averages, its own plus those of the run it
    resumes (the counts were checked to be at least 1)."""
    output, preset = settings.output_dir, settings.preset
    resumes = settings.resume and output.is_dir()
    existing = [checkpoint_step(path) for path in list_checkpoints(output)] if resumes else []
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


def check_run_folder(settings: TrainingSettings) -> None:
    """Refuse, before anything is read, an `output_dir` that is, holds or lies inside the corpus, and a non-empty
    folder that is not a run of ours (its `preset.json`, `tokenizer/` or `training-run` marker) unless `overwrite`."""
    output = settings.output_dir
    check_not_an_input(output, [("the corpus", corpus_location(settings.preset.corpus))])
    if output.exists() and not output.is_dir():
        return
    recognised = ("preset.json", "tokenizer/tokenizer.json")
    overwrite = settings.overwrite
    if check_output_folder(output, "training-run", overwrite, recognised_by=recognised, overwrite_does="train there"):
        logger.warning("--overwrite: training in %s, which holds files no run of ours wrote", output)


def check_tokenized(
    settings: TrainingSettings, train_set: Dataset, train_report: FilterReport, valid_report: FilterReport
) -> None:
    """Raise a `SettingsError` when the tokenized data leaves nothing to train or validate on, or holds a pair that
    fits no token batch."""
    preset, found = settings.preset, []
    for name, report in (("training", train_report), ("validation", valid_report)):
        if report.kept:
            continue
        total = len(report.empty) + len(report.too_long)
        split = "train" if name == "training" else preset.valid_split
        if report.too_long:
            empty = f" and {len(report.empty)} an empty side" if report.empty else ""
            found.append(
                f"{flag('max_length', preset.max_length)} leaves no {name} pair: {len(report.too_long)} of the "
                f"{total} pairs of split {split!r} have more tokens on a side{empty}; raise --max-length."
            )
        else:
            found.append(f"--corpus {preset.corpus} has no {name} pair with text on both sides in split {split!r}.")
    if not settings.per_device_batch_size and train_report.kept:
        source_lengths, target_lengths = dataset_lengths(train_set)
        problem = longest_pair_problem(int((source_lengths + target_lengths).max()), preset.max_tokens)
        found += [problem] if problem else []
    _raise(found)


def _raise(found: list[str]) -> None:
    if len(found) == 1:
        raise SettingsError(found[0])
    if found:
        raise SettingsError("the run cannot finish as asked:\n" + "\n".join(f"- {problem}" for problem in found))


# -- the record of a run: preset.json ---------------------------------------------------------------------------------


def same_setting(name: str, value: object, other: object) -> bool:
    """Whether two values of a preset field (as `preset.json` holds them) mean the same thing."""
    if name == "corpus" and value is not None and other is not None:
        return same_corpus(str(value), str(other))
    return value == other


def _changed_corpus(saved: dict, new: dict) -> str | None:
    """How a new start's corpus differs from the recorded one, or None: by content digest where both have one, else
    by name."""
    digests = saved.get("run", {}).get("corpus_sha256"), new.get("run", {}).get("corpus_sha256")
    if None not in digests:
        if digests[0] == digests[1]:
            return None
        return (
            f"corpus: {saved['corpus']!r} (sha256 {digests[0][:12]}…) -> {new['corpus']!r} (sha256 "
            f"{digests[1][:12]}…), other content"
        )
    if same_setting("corpus", new["corpus"], saved.get("corpus")):
        return None
    return f"corpus: {saved.get('corpus')!r} -> {new['corpus']!r}"


def read_run_preset(path: str | Path) -> dict:
    """A run's `preset.json` (lists, not tuples); a field added to `TrainingPreset` since reads as its default."""
    defaults = {field.name: field.default for field in fields(TrainingPreset) if field.default is not MISSING}
    return json.loads(json.dumps(defaults)) | json.loads(Path(path).read_text())


def check_record(settings: TrainingSettings, write: bool = False) -> None:
    """Refuse to continue a run in `output_dir` with other settings than it recorded, then (`write`) write the
    record. A folder holding a run is continued only with its settings (`RESUMABLE_FIELDS` aside; before its first
    checkpoint only `TOKENIZER_FIELDS` and the corpus's content count) and never restarted: either would average
    checkpoints of two runs together. The error names each field that differs."""
    output, preset = settings.output_dir, settings.preset
    record = output / "preset.json"
    new = settings.record()
    checkpoints = list_checkpoints(output) if output.is_dir() else []
    tokenizer = [output / "tokenizer"] if (output / "tokenizer" / "tokenizer.json").is_file() else []
    earlier = checkpoints + tokenizer
    if earlier and not settings.resume:
        raise SettingsError(
            f"{output} already holds a run ({', '.join(path.name for path in earlier)}); starting over there would "
            "mix its checkpoints with the new ones. Give a new output directory, or delete that one first."
        )
    newest_step = checkpoint_step(checkpoints[-1]) if checkpoints else 0
    if newest_step > preset.max_steps:
        raise SettingsError(
            f"{output} holds checkpoint-{newest_step}, past max_steps={preset.max_steps}: give a max_steps of at least "
            f"{newest_step}, or average the checkpoints you want with `vanilla-transformer average`."
        )
    if earlier and record.is_file():
        saved = read_run_preset(record)
        fixed = [name for name in new if name not in RESUMABLE_FIELDS] if checkpoints else TOKENIZER_FIELDS
        changed = [
            f"{name}: {saved.get(name)!r} -> {new[name]!r}"
            for name in fixed
            if name not in ("corpus", "run") and not same_setting(name, new[name], saved.get(name))
        ]
        corpus = _changed_corpus(saved, new)
        changed = ([corpus] if corpus else []) + changed
        if checkpoints and "run" in saved:
            changed += [
                f"{name}: {saved['run'].get(name)!r} -> {value!r}"
                for name, value in new["run"].items()
                if name != "corpus_sha256" and saved["run"].get(name) != value
            ]
        if changed:
            free = (
                f"only {', '.join(RESUMABLE_FIELDS)} may change"
                if checkpoints
                else f"it has no checkpoint yet: only {', '.join(TOKENIZER_FIELDS)}, which its tokenizer depends on, "
                "must stay"
            )
            raise SettingsError(
                f"{output} holds a run trained with other settings ({'; '.join(changed)}). Resume it with the "
                f"settings in {record} ({free}), or give a new output directory."
            )
    if write:
        write_record(settings)


def write_record(settings: TrainingSettings) -> None:
    """Write `settings.record()` to `output_dir/preset.json` whole (`data.staging.atomic_file`)."""
    settings.output_dir.mkdir(parents=True, exist_ok=True)
    with atomic_file(settings.output_dir / "preset.json") as staging:
        staging.write_text(json.dumps(settings.record(), indent=2) + "\n")
