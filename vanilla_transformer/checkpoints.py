"""Checkpoint averaging (§6.1: "For the base models, we used a single model obtained by averaging the last 5
checkpoints ... For the big models, we averaged the last 20 checkpoints")."""

import logging
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM

from .integrity import check_config_file, check_safetensors_file, fsync_directory, fsync_tree, write_checksums
from .tokenization import load_tokenizer

logger = logging.getLogger(__name__)

CHECKPOINT_PATTERN = re.compile(r"^checkpoint-(\d+)$")
# A checkpoint is written under this prefix and renamed to checkpoint-N when complete (`VanillaTransformerTrainer`);
# a folder still carrying it was interrupted.
STAGING_PREFIX = "tmp-"
# The Trainer writes trainer_state.json last: a checkpoint-N folder without it (written in place by another tool,
# or half deleted by checkpoint rotation) cannot resume a run.
RESUME_FILES = ("trainer_state.json", "model.safetensors")


def checkpoint_step(folder: Path) -> int:
    """The update count in a `checkpoint-<step>` folder's name."""
    return int(CHECKPOINT_PATTERN.match(folder.name).group(1))


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """The `checkpoint-<step>` folders of a Trainer run, oldest first (by step, not by name)."""
    folders = [p for p in Path(run_dir).iterdir() if p.is_dir() and CHECKPOINT_PATTERN.match(p.name)]
    return sorted(folders, key=checkpoint_step)


def last_complete_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest `checkpoint-N` of `run_dir` that holds everything a resume needs (`RESUME_FILES`), or None. Staged
    folders (`tmp-checkpoint-N`) are never candidates; incomplete checkpoints are skipped with a warning."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return None
    for folder in reversed(list_checkpoints(run_dir)):
        missing = [name for name in RESUME_FILES if not (folder / name).is_file()]
        if not missing:
            return folder
        logger.warning("skipping %s: it lacks %s, so it was not completely written", folder, ", ".join(missing))
    return None


def remove_stale_staging(run_dir: str | Path) -> list[Path]:
    """Delete the `tmp-checkpoint-N` folders an interrupted run left in `run_dir` (logging each); returns them."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    stale = sorted(p for p in run_dir.iterdir() if p.is_dir() and p.name.startswith(STAGING_PREFIX + "checkpoint-"))
    for folder in stale:
        logger.warning("removing %s, a checkpoint whose writing was interrupted", folder)
        shutil.rmtree(folder)
    return stale


def average_state_dicts(folders: list[Path]) -> dict[str, torch.Tensor]:
    """The element-wise mean of the `model.safetensors` weights of `folders` (float32 accumulation)."""
    if not folders:
        raise ValueError("no checkpoints to average.")
    total: dict[str, torch.Tensor] = {}
    dtypes: dict[str, torch.dtype] = {}
    for folder in folders:
        path = folder / "model.safetensors"
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing; every averaged checkpoint needs its model.safetensors.")
        check_safetensors_file(path)  # a truncated or bit-flipped file is named, not averaged in
        state = load_file(path)
        if total and state.keys() != total.keys():
            raise ValueError(f"{path} holds other tensors than {folders[0]}; average checkpoints of one model only.")
        for name, tensor in state.items():
            total[name] = total[name] + tensor.float() if name in total else tensor.float().clone()
            dtypes[name] = tensor.dtype
    return {name: (tensor / len(folders)).to(dtypes[name]) for name, tensor in total.items()}


@contextmanager
def staged_folder(destination: str | Path) -> Iterator[Path]:
    """A scratch folder beside `destination` that replaces it only when the block completes, so a failure never
    leaves a partial folder in place of a good one."""
    destination = Path(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{destination.name}-", dir=destination.parent))
    try:
        yield staging
        fsync_tree(staging)  # the bytes reach the disk before the name does
        if destination.exists():
            shutil.rmtree(destination)
        staging.rename(destination)
        fsync_directory(destination.parent)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def average_checkpoints(run_dir: str | Path, output_dir: str | Path, last: int) -> list[Path]:
    """Average the last `last` checkpoints of `run_dir` into a loadable model folder at `output_dir` (config,
    generation config and tokenizer from the newest checkpoint). The folder is written next to its destination
    and moved into place only when complete. Returns the averaged checkpoint folders."""
    checkpoints = list_checkpoints(run_dir)
    if last < 1:
        raise ValueError(f"last={last}: average at least one checkpoint.")
    if len(checkpoints) < last:
        raise ValueError(
            f"{run_dir} has {len(checkpoints)} checkpoints ({[p.name for p in checkpoints]}), fewer than the "
            f"{last} asked for; lower --last or train longer."
        )
    chosen = checkpoints[-last:]
    averaged = average_state_dicts(chosen)  # checks every file first: a corrupt one is named, not loaded
    check_config_file(chosen[-1] / "config.json")
    model = AutoModelForSeq2SeqLM.from_pretrained(chosen[-1], use_safetensors=True)
    # tied matrices are stored once (`model.shared.weight`); their aliases are the only keys allowed to be missing
    result = model.load_state_dict(averaged, strict=False)
    untied = set(result.missing_keys) - set(model.all_tied_weights_keys)
    if untied or result.unexpected_keys:
        raise ValueError(
            f"averaged weights do not fit the model: missing {untied}, unexpected {result.unexpected_keys}"
        )
    model.tie_weights()

    with staged_folder(output_dir) as staging:
        model.save_pretrained(staging)
        write_checksums(staging)
        if (chosen[-1] / "tokenizer.json").is_file():
            load_tokenizer(chosen[-1]).save_pretrained(staging)
    return chosen
