"""The run's settings: every setting of a training run in one frozen dataclass (`TrainingSettings`), built once
from a preset and the options (flags or Python API), checked once as it is built, and passed whole to the run
(`run.train`); what it records (`record`) becomes the run's `preset.json` (`run_folder.RunFolder.write_record`).

What the settings alone decide is checked when they are built, before any process group exists or the corpus is read,
so that a doomed setting costs no training and no process waits for another; what depends on the run folder is
checked by `run_folder.RunFolder.check`, what depends on the data right after tokenizing (`run.prepare_run_data`). Each
error lists every problem in the command line's words (`--average-last 3`), with a fix. Only what cannot work is
refused: `--save-steps` past `--max-steps` still saves once at the end, and `--warmup-steps` past it ends the run on
the rising part of the §5.3 schedule.
"""

import argparse
import json
import os
import shlex
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from ..data.corpora import CorpusIdentity, corpus_identity
from ..data.tokenization import MIN_VOCAB_SIZE
from ..errors import SettingsError, UsageError
from ..files.loading import CONFIG_ERRORS, config_error_message
from .fsdp import fsdp_problems
from .presets import PRESET_FLAGS, TrainingPreset, preset_from_arguments
from .ranges import TRAINING_RANGES

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
    "tokenizer_path",  # where a given tokenizer came from (a local folder as its absolute path), else None
    "tokenizer_sample_pairs",
)
# the recorded settings a run object takes as options (precision is `mixed_precision`'s; the digest is computed)
OPTIONS = tuple(name for name in RECORDED if name not in ("precision", "corpus_sha256"))
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
    corpus: CorpusIdentity = field(init=False, repr=False)  # the preset's corpus, settled here once

    def __post_init__(self) -> None:
        corpus = corpus_identity(self.preset.corpus, self.source_lang, self.target_lang)
        resolved = {"output_dir": Path(self.output_dir), "corpus": corpus}
        resolved |= {"source_lang": corpus.source_lang, "target_lang": corpus.target_lang}
        for name, value in resolved.items():
            object.__setattr__(self, name, value)
        raise_problems(problems(self))

    @classmethod
    def from_arguments(cls, args: argparse.Namespace, command: str, recorded: dict | None) -> "TrainingSettings":
        """The settings the flags of `train` give. Resuming a run (no `--preset`) that `recorded` its settings, a flag
        left out keeps the recorded value: `train --output-dir RUN` continues the run as started, and `--max-steps
        9000` beside it trains it longer; a flag the run cannot take is refused by `RunFolder.check`."""
        if args.tokenizer is not None and args.vocab_size is not None:
            raise UsageError(
                f"--vocab-size {args.vocab_size} sizes the BPE a run learns, but --tokenizer {args.tokenizer} brings "
                f"its own vocabulary, which the model takes: leave --vocab-size out (or --tokenizer, to learn one)."
            )
        options = {field.name for field in fields(cls) if field.init} - {"preset", "resume"}
        renamed = {"tokenizer_path": args.tokenizer, "tokenizer_sample_pairs": args.tokenizer_sample}
        given = {name: getattr(args, name, None) for name in options} | renamed
        given = {name: value for name, value in given.items() if value is not None}
        if getattr(args, "bf16", False) or getattr(args, "fp16", False):
            given["mixed_precision"] = "bf16" if args.bf16 else "fp16"
        resumed = recorded if args.preset is None and not args.no_resume else None
        if resumed is not None:
            given = recorded_options(resumed.get("run", {})) | given
        preset = preset_from_arguments(args, resumed)
        return cls(preset, resume=not args.no_resume, command=command, **given)

    @property
    def precision(self) -> str:
        """ "fp32", "bf16" or "fp16": the given precision, else accelerate's launcher's."""
        return PRECISIONS[self.mixed_precision or os.environ.get("ACCELERATE_MIXED_PRECISION") or "no"]

    def run_record(self) -> dict:
        """What the run records besides its preset (`RECORDED`), each of which changes its weights."""
        values = asdict(self) | {"precision": self.precision, "corpus_sha256": self.corpus.sha256}
        if self.tokenizer_path is not None and Path(self.tokenizer_path).expanduser().is_dir():
            values["tokenizer_path"] = str(Path(self.tokenizer_path).expanduser().resolve())
        return {name: values[name] for name in RECORDED}

    def record(self) -> dict:
        """What `preset.json` holds: the preset's fields (a local corpus as its absolute path, so that a resume from
        another directory cannot take another file for it) and `run_record` under `"run"`."""
        record = json.loads(json.dumps(self.preset.as_dict()))  # as preset.json holds it: lists, not tuples
        return record | {"corpus": self.corpus.recorded, "run": self.run_record()}


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
    if run.get("tokenizer_path"):
        text += f" --tokenizer {shlex.quote(run['tokenizer_path'])}"
    elif run.get("tokenizer_sample_pairs") not in (None, TOKENIZER_SAMPLE_PAIRS):
        text += f" --tokenizer-sample {run['tokenizer_sample_pairs']}"
    return text


# -- what the settings together tell ----------------------------------------------------------------------------------


def fp16_available() -> bool:
    """Whether this machine has a device that trains in float16 mixed precision (CUDA, or Apple's MPS)."""
    import torch

    return torch.cuda.is_available() or torch.backends.mps.is_available()


def problems(settings: TrainingSettings) -> list[str]:
    """What no run can finish, known without the corpus: numbers out of range, fp16 without a device, more beams
    than tokens, and a model that cannot be built."""
    preset, found = settings.preset, []
    if settings.precision == "fp16" and not fp16_available():
        # transformers' Trainer and accelerate both train in float32 then, without a word
        asked = "--fp16" if settings.mixed_precision else "accelerate launch --mixed_precision fp16"
        found.append(
            f"{asked}: float16 mixed precision needs a CUDA or MPS device, and this machine has neither (on a CPU the "
            f"run would train in float32 without saying so); use --bf16 (or --mixed_precision bf16) on a CPU, or "
            f"leave it out."
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


def raise_problems(found: list[str]) -> None:
    """Raise a `SettingsError` listing `found`, if any."""
    if len(found) == 1:
        raise SettingsError(found[0])
    if found:
        raise SettingsError("the run cannot finish as asked:\n" + "\n".join(f"- {problem}" for problem in found))
