"""Checkpoint averaging (§6.1: "For the base models, we used a single model obtained by averaging the last 5
checkpoints ... For the big models, we averaged the last 20 checkpoints")."""

import json
import logging
import pickle
import re
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import PreTrainedModel
from transformers.trainer import TRAINING_ARGS_NAME
from transformers.trainer_pt_utils import safe_globals
from transformers.utils import SAFE_WEIGHTS_NAME

from ..data.tokenization import load_tokenizer, tokenizer_fingerprint
from ..errors import ModelFolderError
from ..files.loading import check_config_file, check_model_folder, write_checksums
from ..files.outputs import check_not_an_input, check_output_folder, staged_folder
from ..model.configuration_vanilla_transformer import SIZE_FIELDS, VanillaTransformerConfig

logger = logging.getLogger(__name__)

CHECKPOINT_PATTERN = re.compile(r"^checkpoint-(\d+)$")
# the run's record, copied into each checkpoint as it is saved (`VanillaTransformerTrainer._save_checkpoint`)
RUN_RECORD = "preset.json"
# A checkpoint is written under this prefix and renamed to checkpoint-N when complete (`VanillaTransformerTrainer`);
# a folder still carrying it was interrupted.
STAGING_PREFIX = "tmp-"
# The Trainer writes trainer_state.json last: a checkpoint-N folder without it (written in place by another tool,
# or half deleted by checkpoint rotation) cannot resume a run.
RESUME_FILES = ("trainer_state.json", SAFE_WEIGHTS_NAME)


def checkpoint_step(folder: Path) -> int:
    """The update count in a `checkpoint-<step>` folder's name."""
    return int(CHECKPOINT_PATTERN.match(folder.name).group(1))


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """The `checkpoint-<step>` folders of a Trainer run, oldest first (by step, not by name)."""
    folders = [p for p in Path(run_dir).iterdir() if p.is_dir() and CHECKPOINT_PATTERN.match(p.name)]
    return sorted(folders, key=checkpoint_step)


def last_complete_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest `checkpoint-N` of `run_dir` that holds `RESUME_FILES`, or None; incomplete ones are skipped with a
    warning."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return None
    for folder in reversed(list_checkpoints(run_dir)):
        missing = [name for name in RESUME_FILES if not (folder / name).is_file()]
        if not missing:
            return folder
        logger.warning("skipping %s: it lacks %s, so it was not completely written", folder, ", ".join(missing))
    return None


def check_checkpoint_pickles(folder: str | Path) -> None:
    """Open every pickle a resume reads from `folder` (but `training_args.bin`) with `weights_only=True` before the
    Trainer or accelerate does: a file holding objects other than tensors is refused by name, never run, where
    accelerate would skip a random state it cannot read at INFO level."""
    fix = "delete that checkpoint and resume from an earlier one (or start a new --output-dir)"
    for path in sorted(Path(folder).iterdir()):
        if path.suffix not in (".pt", ".pth", ".bin", ".pkl") or path.name == TRAINING_ARGS_NAME:
            continue
        try:
            with safe_globals():  # numpy's RNG state, which transformers allows too
                torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except pickle.UnpicklingError as error:
            raise ModelFolderError(
                f"{path} holds pickled objects other than tensors, so it was refused and never run: if no run of "
                f"yours wrote it, {fix}"
            ) from error
        except (RuntimeError, EOFError, ValueError) as error:  # not a torch.save archive, or cut short
            raise ModelFolderError(
                f"{path} is not a whole torch.save file ({str(error).splitlines()[0]}), so it was never loaded: {fix}"
            ) from error


def remove_stale_staging(run_dir: str | Path) -> list[Path]:
    """Delete (and return) the `tmp-checkpoint-N` folders an interrupted run left in `run_dir`."""
    stale = sorted(Path(run_dir).glob(f"{STAGING_PREFIX}checkpoint-*/"))
    for folder in stale:
        logger.warning("removing %s, a checkpoint whose writing was interrupted", folder)
        shutil.rmtree(folder)
    return stale


def average_weights(folders: list[Path]) -> PreTrainedModel:
    """The newest of `folders`' models holding the element-wise mean of their weights (float32 accumulation). Each
    folder is checked first (`check_model_folder`), so that a truncated, bit-flipped or diverged checkpoint is named,
    not averaged in."""
    if not folders:
        raise ModelFolderError("no checkpoints to average.")
    for folder in folders:
        model = check_model_folder(folder)
    total: dict[str, torch.Tensor] = {}
    for folder in folders:
        state = load_file(folder / SAFE_WEIGHTS_NAME)
        if total and state.keys() != total.keys():
            raise ModelFolderError(
                f"{folder} holds other tensors than {folders[0]}; average checkpoints of one model only."
            )
        for name, tensor in state.items():
            total[name] = total.get(name, 0) + tensor.float()
    # the names and shapes were checked with each checkpoint; tied matrices are stored once (`model.shared.weight`)
    model.load_state_dict(
        {name: (tensor / len(folders)).to(state[name].dtype) for name, tensor in total.items()}, strict=False
    )
    model.tie_weights()
    return model


# The config.json fields that make two checkpoints the same model: averaging is only meaningful for checkpoints of one
# run, and a run never changes these (dropout and init_std change training, not what the weights mean).
ARCHITECTURE_FIELDS = (
    "model_type",
    *SIZE_FIELDS,
    "activation_function",
    "scale_embedding",
    "position_encoding",
    "normalize_before",
    "attention_bias",
    "share_encoder_decoder_embeddings",
    "tie_word_embeddings",
    "layer_norm_eps",
    "pad_token_id",
    "bos_token_id",
    "eos_token_id",
    "decoder_start_token_id",
)


def run_inputs(run_dir: str | Path) -> tuple[list[tuple[str, Path]], list[tuple[str, Path]]]:
    """What an output written from a run must leave alone (`outputs.check_not_an_input`): its checkpoints, staged
    ones too, tokenizer and preset.json, and the run folder as their holder."""
    run = Path(run_dir)
    inputs = [
        ("checkpoint", path)
        for path in sorted(run.glob("*/"))
        if CHECKPOINT_PATTERN.match(path.name.removeprefix(STAGING_PREFIX))
    ]
    for label, path in (("the run's tokenizer", run / "tokenizer"), ("the run's preset", run / RUN_RECORD)):
        if path.exists():
            inputs.append((label, path))
    return inputs, [("--run-dir", run)]


def _architecture(config: dict) -> dict:
    defaults = VanillaTransformerConfig().to_dict()
    values = {field: config.get(field, defaults.get(field)) for field in ARCHITECTURE_FIELDS}
    if values["decoder_vocab_size"] is None:
        values["decoder_vocab_size"] = values["vocab_size"]
    return values


def _differences(old: dict, new: dict, names) -> list[str]:
    return [f"{name}: {old.get(name)!r} vs {new.get(name)!r}" for name in names if old.get(name) != new.get(name)]


# what a run's record (`preset.json`) may change between its checkpoints, and a resume: how long it runs and what it
# keeps (the §5.3 rate depends on the step alone)
RESUMABLE_FIELDS = ("max_steps", "save_steps", "eval_steps", "average_last")


def _record_differences(folder: Path, newest: Path) -> list[str]:
    """How the run records of two checkpoints differ (`RESUMABLE_FIELDS` aside); none when either has no record,
    as checkpoints saved before records were copied into them have none."""
    try:
        records = [json.loads((path / RUN_RECORD).read_text()) for path in (folder, newest)]
    except (OSError, ValueError):
        return []
    old, new = (
        {name: value for name, value in record.items() if name not in (*RESUMABLE_FIELDS, "run")}
        | {f"run.{name}": value for name, value in record.get("run", {}).items()}
        for record in records
    )
    return [f"{RUN_RECORD} {difference}" for difference in _differences(old, new, sorted(old.keys() | new.keys()))]


def check_one_run(run_dir: str | Path, folders: list[Path]) -> None:
    """Refuse `folders` unless they are checkpoints of one run: one architecture (`ARCHITECTURE_FIELDS`), one run
    record (`RUN_RECORD`, its seed and every setting besides `RESUMABLE_FIELDS`) and the run's tokenizer
    (`run_dir/tokenizer`, else the newest checkpoint's) in each."""
    newest = folders[-1]
    configs = {folder: check_config_file(folder / "config.json") for folder in folders}
    reference = _architecture(configs[newest])
    for folder in folders[:-1]:
        config = configs[folder]
        differences = _differences(_architecture(config), reference, ARCHITECTURE_FIELDS)
        if None not in (config.get("tokenizer_fingerprint"), configs[newest].get("tokenizer_fingerprint")):
            differences += _differences(config, configs[newest], ["tokenizer_fingerprint"])
        differences += _record_differences(folder, newest)
        if differences:
            raise ModelFolderError(
                f"{folder.name} and {newest.name} in {run_dir} are not checkpoints of one run: they differ in "
                f"{'; '.join(differences)}; average checkpoints of one run only (move the others out of {run_dir}, "
                f"or lower --last)."
            )
    run_tokenizer = Path(run_dir) / "tokenizer"
    with_tokenizer = [folder for folder in folders if (folder / "tokenizer.json").is_file()]
    if (run_tokenizer / "tokenizer.json").is_file():
        reference = run_tokenizer
    elif with_tokenizer:
        reference = with_tokenizer[-1]
    else:
        return
    expected = tokenizer_fingerprint(load_tokenizer(reference))
    for folder in folders:
        for what, digest in (
            ("tokenizer.json", tokenizer_fingerprint(load_tokenizer(folder)) if folder in with_tokenizer else None),
            ("config.json's tokenizer_fingerprint", configs[folder].get("tokenizer_fingerprint")),
        ):
            if digest is not None and digest != expected:
                raise ModelFolderError(
                    f"{folder}'s {what} names another tokenizer than {reference} (fingerprint {digest[:12]}… vs "
                    f"{expected[:12]}…): that checkpoint was trained with other token ids; average checkpoints of "
                    f"one run only (move {folder.name} out of {run_dir}, or lower --last)."
                )


def average_checkpoints(
    run_dir: str | Path, output_dir: str | Path, last: int, overwrite: bool = False, command: str = "average"
) -> list[Path]:
    """Average the last `last` checkpoints of `run_dir` (§6.1) into a model folder at `output_dir` with the newest
    one's config and tokenizer, written whole; returns the averaged folders. An `output_dir` among the run's inputs,
    a non-empty folder no command of ours wrote (unless `overwrite`) and checkpoints of other runs are refused."""
    checkpoints = list_checkpoints(run_dir)
    if last < 1:
        raise ModelFolderError(f"last={last}: average at least one checkpoint.")
    if len(checkpoints) < last:
        raise ModelFolderError(
            f"{run_dir} has {len(checkpoints)} checkpoints ({[p.name for p in checkpoints]}), fewer than the "
            f"{last} asked for; lower --last or train longer."
        )
    inputs, holders = run_inputs(run_dir)
    check_not_an_input(output_dir, inputs, holders=holders)
    check_output_folder(output_dir, "model", overwrite)
    chosen = checkpoints[-last:]
    check_one_run(run_dir, chosen)
    model = average_weights(chosen)
    with staged_folder(output_dir, "model", command, overwrite) as staging:
        model.save_pretrained(staging)
        write_checksums(staging)
        if (chosen[-1] / "tokenizer.json").is_file():
            load_tokenizer(chosen[-1]).save_pretrained(staging)
    return chosen
