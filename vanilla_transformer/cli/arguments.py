"""The flags shared by the subcommands of `vanilla-transformer` (`vanilla_transformer/cli/main.py`, one module each:
its docstring is its help, `add_arguments(parser)` declares its flags, `run(args)` does the work, importing what does
it inside `run` so that `--help` stays quick).

Every numeric and path flag is checked where it is parsed, by a `type=` below: a value no run can use stops the
command at once with argparse's one line `error: argument --flag: ...` naming the value and the fix (exit status 2).
The training settings' flags are only read as numbers here: their ranges are checked as the run's settings are built.
"""

import argparse
import math
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from ..training.ranges import BEAMS, TRAINING_RANGES, Range

# --data-dir of the commands that read Multi30k: None is resolved by vanilla_transformer.data.multi30k.multi30k_dir
DATA_DIR_HELP = (
    "a folder of {split}.{lang} files and tok/; default: $VANILLA_TRANSFORMER_MULTI30K, else the official Multi30k "
    "files, downloaded once to the cache"
)
# what transformers.set_seed accepts (numpy's seeds are unsigned 32-bit numbers)
MAX_SEED = 2**32 - 1


def argument_type(rule: Range, check_range: bool = True) -> Callable[[str], int | float]:
    """A `type=` refusing what `rule` refuses, in its words; without `check_range` only a text of the wrong kind of
    number (a training setting's range is checked once, by `training.settings.TrainingSettings`)."""

    def check(text: str) -> int | float:
        try:
            return rule.parse(text, check_range)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return check


def int_in_range(minimum: int, maximum: int | None = None, fix: str = "") -> Callable[[str], int]:
    """A `type=` for whole numbers from `minimum` to `maximum` (no upper end when None); `fix` ends the message of a
    value refused (default: the range to give)."""
    if not fix:
        fix = f"give {minimum} or more" if maximum is None else f"give a number from {minimum} to {maximum}"
    return argument_type(Range(minimum, math.inf if maximum is None else maximum, whole=True, fix=fix))


# the `type=`s of numbers; `generate` checks beams against the model's vocabulary
positive_int = int_in_range(1)  # steps, batches, samples
non_negative_int = int_in_range(0)  # 0-based indices (layers, heads)
optional_count = int_in_range(1, fix="give 1 or more, or leave the flag out")  # flags with a default when left out
num_beams = argument_type(BEAMS)  # 1 (greedy) to MAX_NUM_BEAMS
seed = int_in_range(0, MAX_SEED)
finite_float = argument_type(Range(-math.inf, fix="give a finite number"))  # no nan or inf
non_negative_float = argument_type(Range(0, fix="give 0 or more"))


def float_list(text: str) -> list[float]:
    """A `type=` for comma-separated finite numbers, e.g. length penalties `0.6,1.0,1.5`."""
    fix = "give numbers separated by commas, e.g. 0.6,1.0"
    values = [value.strip() for value in text.split(",")]
    if not all(values):
        raise argparse.ArgumentTypeError(f"{text!r} has an empty item: {fix}")
    try:
        return [finite_float(value) for value in values]
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"{text!r} holds an item that is not a finite number: {fix}") from None


def comma_separated_choices(choices: Iterable[str]) -> Callable[[str], str]:
    """A `type=` for a comma-separated subset of `choices`; the text itself is kept, for `run` to split."""
    choices = tuple(choices)

    def check(text: str) -> str:
        unknown = [name.strip() for name in text.split(",") if name.strip() not in choices]
        if unknown:
            raise argparse.ArgumentTypeError(
                f"{text!r}: no {', '.join(unknown)}; give a comma-separated subset of {','.join(choices)}"
            )
        return text

    return check


def available_devices() -> list[str]:
    """The torch devices of this machine: cpu, then cuda and cuda:N for each GPU, then mps on Apple silicon."""
    import torch

    devices = ["cpu"]
    if torch.cuda.is_available():
        devices += ["cuda", *(f"cuda:{index}" for index in range(torch.cuda.device_count()))]
    if torch.backends.mps.is_available():
        devices.append("mps")
    return devices


def device(text: str) -> str:
    """A `type=` for a torch device this machine has (`available_devices`)."""
    devices = available_devices()
    if text not in devices:
        raise argparse.ArgumentTypeError(f"{text!r} is not a device of this machine: give one of {', '.join(devices)}")
    return text


def _blocked(path: Path) -> str | None:
    """Why a file or folder cannot be created at `path` (a parent is a file, or not writable), or None."""
    parent = path.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        return f"{parent} is a file, so nothing can be created under it"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"this user may not write in {parent}"
    return None


def _relative(text: str) -> str:
    """Where a relative path is looked for, for a message about a path not found."""
    return "" if Path(text).expanduser().is_absolute() else f" (relative to {Path.cwd()})"


def existing_file(text: str) -> str:
    """A `type=` for a file to read: it exists, is not a folder, and this user may read it."""
    path = Path(text).expanduser()
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder, not a file: give the file itself")
    if not path.exists():
        raise argparse.ArgumentTypeError(f"no file {text}{_relative(text)}: check the path")
    if not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"this user may not read {text}: check its permissions")
    return text


def input_file(text: str) -> str:
    """`existing_file`, or '-' for stdin."""
    return text if text == "-" else existing_file(text)


def existing_dir(text: str) -> str:
    """A `type=` for a folder to read: it exists and is a folder."""
    path = Path(text).expanduser()
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file, not a folder: give the folder that holds it")
    if not path.exists():
        raise argparse.ArgumentTypeError(f"no folder {text}{_relative(text)}: check the path")
    return text


def output_dir(text: str) -> str:
    """A `type=` for a folder to write in: a folder already, or a path where one can be created (whether an existing
    folder may be written over is the command's business)."""
    path = Path(text).expanduser()
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file, not a folder: give a new folder's path")
    if not path.is_dir() and (blocked := _blocked(path)):
        raise argparse.ArgumentTypeError(f"{text} cannot be created: {blocked}")
    return text


def output_file(text: str) -> str:
    """A `type=` for a file to write: not a folder, and creatable (missing folders above it are created)."""
    path = Path(text).expanduser()
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder: give a file's path, e.g. {Path(text) / 'out.txt'}")
    if blocked := _blocked(path):
        raise argparse.ArgumentTypeError(f"{text} cannot be written: {blocked}")
    return text


def output_file_or_stdout(text: str) -> str:
    """`output_file`, or '-' for stdout."""
    return text if text == "-" else output_file(text)


def output_file_in_existing_folder(text: str) -> str:
    """`output_file` whose folder exists already (for commands that do not create it)."""
    output_file(text)
    parent = Path(text).expanduser().absolute().parent
    if not parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text} cannot be written: no folder {parent}; create it first")
    return text


def model_source(text: str) -> str:
    """A `type=` for a model: an existing folder, or a Hub id (`name` or `namespace/name`) to download; a file, or a
    path that is neither an existing folder nor a Hub id, is refused."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    path = Path(text).expanduser()
    if path.is_dir():
        return text
    if path.exists():
        raise argparse.ArgumentTypeError(
            f"{text} is a file: give the model's folder (save_pretrained output) or a Hub id"
        )
    try:
        validate_repo_id(text)
        hub_id = not text.startswith((".", "/", "~")) and text.count("/") <= 1
    except HFValidationError:
        hub_id = False
    if not hub_id:
        raise argparse.ArgumentTypeError(
            f"no folder {text}{_relative(text)}, and it is not a Hub id: give a saved model's folder, or "
            "namespace/name on the Hub"
        )
    return text


def repo_id(text: str) -> str:
    """A `type=` for a Hub repository to push to (`hub.check_repo_id`)."""
    from ..release.hub import check_repo_id

    try:
        check_repo_id(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def add_engine_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """`--dtype` and `--engine`, the choices of `translation.load_translator`."""
    parser.add_argument(
        "--dtype",
        choices=["float32", "bfloat16", "float16"],
        help="the weights' type for the pytorch engine (default: as saved); bfloat16 uses the CPU's AMX units",
    )
    parser.add_argument(
        "--engine",
        default="pytorch",
        choices=["pytorch", "ctranslate2"],
        help="pytorch (default), or ctranslate2 with --model a folder made by `export-ctranslate2`",
    )


def add_overwrite_argument(parser: argparse.ArgumentParser, folder: str = "--output-dir") -> None:
    parser.add_argument(
        "--overwrite", action="store_true", help=f"replace {folder} even if it holds what no command of ours wrote"
    )


def add_language_arguments(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """`--source-lang` and `--target-lang`: en and de by default, except for a TSV file, whose columns do not say
    (`data.corpora.corpus_languages`)."""
    for flag, default in (("--source-lang", "en"), ("--target-lang", "de")):
        parser.add_argument(flag, help=f"default: {default}; needed for a TSV file unless its name says (en-zh.tsv)")


def add_typed_preset_arguments(parser: argparse.ArgumentParser) -> None:
    """`--preset` and one flag per `presets.PRESET_FLAGS` field, overriding the preset where given
    (`--lowercase`/`--no-lowercase` for a yes or no)."""
    from ..training.presets import PRESET_FLAGS, TRAINING_PRESETS

    parser.add_argument(
        "--preset",
        choices=sorted(TRAINING_PRESETS),
        help="default: demo, or, resuming a run, the settings it recorded (preset.json)",
    )
    for field, help_text in PRESET_FLAGS.items():
        if isinstance(getattr(TRAINING_PRESETS["demo"], field), bool):
            parser.add_argument(f"--{field.replace('_', '-')}", help=help_text, action=argparse.BooleanOptionalAction)
        else:
            add_setting_arguments(parser, {field: help_text})


def add_setting_arguments(parser: argparse.ArgumentParser, helps: dict[str, str | None], **defaults: object) -> None:
    """A flag `--field-name` per training setting in `helps` (field: help), a number of the kind its rule in
    `TRAINING_RANGES` takes (else text), with its default in `defaults` (else None)."""
    for field, help_text in helps.items():
        kind = argument_type(TRAINING_RANGES[field], check_range=False) if field in TRAINING_RANGES else str
        parser.add_argument(f"--{field.replace('_', '-')}", type=kind, default=defaults.get(field), help=help_text)


def add_training_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `train`: `--preset` with one flag per preset field, and the options of the run."""
    add_typed_preset_arguments(parser)
    parser.add_argument("--output-dir", required=True, type=output_dir)
    add_language_arguments(parser)
    helps = {
        "per_device_batch_size": "batches of this many pairs instead of tokens",
        "max_grad_norm": "clip gradients to this norm (default 0: never)",
        "eval_beams": "beams for validation BLEU during training",
        "eval_samples": "validate on the first N valid pairs only",
        "threads": "CPU threads for torch (default: torch's choice)",
        "log_steps": None,
    }
    add_setting_arguments(parser, helps, eval_beams=1, log_steps=50)
    parser.add_argument("--seed", type=seed, help="default: 0")
    parser.add_argument(
        "--no-resume", action="store_true", help="never resume: stop with an error if --output-dir already holds a run"
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="train in --output-dir even if it is a non-empty folder that holds no run of ours (no preset.json)",
    )
    tokenizer = parser.add_mutually_exclusive_group()
    tokenizer.add_argument(
        "--tokenizer",
        type=model_source,
        help="use this tokenizer (a folder with tokenizer.json, e.g. another run's tokenizer/, or a Hub id) instead "
        "of learning a BPE from the corpus",
    )
    tokenizer.add_argument(
        "--tokenizer-sample",
        type=optional_count,
        help="learn the BPE from a seeded sample of this many training pairs (default: all pairs up to 1,000,000, "
        "a sample of 1,000,000 above)",
    )
