"""Saved folders that survive crashes and strangers.

Writing: `fsync_tree` puts a folder's bytes on disk before it is renamed into place (checkpoints, averaged models),
and `write_checksums` stores the SHA-256 of each safetensors file beside it as `<file>.sha256` (`sha256sum -c`
reads it), so that a flipped bit in tensor data, which the safetensors format cannot see, is found later.

Reading: `check_model_folder` looks at a folder before transformers does and raises a `ModelFolderError` that names
the file and the problem: a config.json that is not JSON, is another model's, or lacks the fields that size the
model; weights that exist only as a pickle (`pytorch_model.bin`: named, never opened, since unpickling runs
arbitrary code); a truncated or corrupted safetensors file, or one that no longer matches its checksum.
`load_model_and_tokenizer` runs those checks, loads with `use_safetensors=True`, and refuses a tokenizer whose ids do
not fit the model. The translate, evaluate, average and plot commands load through it.
"""

import hashlib
import json
import os
from pathlib import Path

from transformers import AutoModelForSeq2SeqLM, PretrainedConfig, PreTrainedModel
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from .tokenization import load_tokenizer

MODEL_TYPE = "vanilla_transformer"
SAFE_WEIGHTS_NAME = "model.safetensors"
SAFE_WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
CHECKSUM_SUFFIX = ".sha256"
# the fields that size the network: a config.json without one would silently get the paper's base-model default
REQUIRED_CONFIG_FIELDS = (
    "vocab_size",
    "d_model",
    "encoder_layers",
    "decoder_layers",
    "encoder_attention_heads",
    "decoder_attention_heads",
    "encoder_ffn_dim",
    "decoder_ffn_dim",
)
# weights stored with Python's pickle (torch.save), which can run any code when loaded
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")


class ModelFolderError(ValueError):
    """A saved model folder that cannot be loaded safely; the message names the file, the problem and the fix."""


def fsync_tree(folder: str | Path) -> None:
    """Flush every file under `folder`, then the folders themselves, to disk, so that a rename that follows cannot
    publish a folder whose data is still only in the page cache when the machine goes down."""
    folder = Path(folder)
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            with path.open("rb") as handle:
                os.fsync(handle.fileno())
    for path in [*sorted(p for p in folder.rglob("*") if p.is_dir()), folder]:
        fsync_directory(path)


def fsync_directory(folder: str | Path) -> None:
    """Flush a folder's entries (names created, renamed or removed in it) to disk, where the platform allows it."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:  # Windows cannot open folders; NTFS journals renames itself
        return
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_checksums(folder: str | Path) -> list[Path]:
    """Write `<name>.sha256` (the `sha256sum` format) beside every `*.safetensors` file of `folder`; returns them."""
    written = []
    for path in sorted(Path(folder).glob("*.safetensors")):
        checksum = path.with_name(path.name + CHECKSUM_SUFFIX)
        checksum.write_text(f"{file_sha256(path)}  {path.name}\n", encoding="utf-8")
        written.append(checksum)
    return written


def check_config_file(path: str | Path) -> dict:
    """The parsed config.json of a vanilla_transformer folder, or a `ModelFolderError` naming what is wrong."""
    path = Path(path)
    if not path.is_file():
        raise ModelFolderError(f"{path} is missing; a model folder needs the config.json that save_pretrained writes.")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ModelFolderError(
            f"{path} is not valid JSON ({error}); the file is truncated or corrupted: restore it from the folder it "
            f"was copied from."
        ) from None
    if not isinstance(config, dict):
        raise ModelFolderError(f"{path} holds a JSON {type(config).__name__}, not an object; it is not a config.json.")
    model_type = config.get("model_type")
    if model_type != MODEL_TYPE:
        found = f"model_type={model_type!r}" if model_type is not None else "no model_type"
        raise ModelFolderError(
            f"{path} has {found} (expected {MODEL_TYPE!r}): the folder does not hold this project's model. Pass "
            f"a folder saved from VanillaTransformerForConditionalGeneration, or load other models with their own "
            f"classes."
        )
    missing = [name for name in REQUIRED_CONFIG_FIELDS if name not in config]
    if missing:
        raise ModelFolderError(
            f"{path} lacks {', '.join(missing)}: without them the model would be built with the base model's "
            f"defaults and would not match the weights. Restore the config.json saved with the weights."
        )
    return config


def check_safetensors_file(path: str | Path) -> None:
    """Raise a `ModelFolderError` if `path` is not a complete, well-formed safetensors file, or no longer matches the
    checksum stored beside it (`<name>.sha256`)."""
    path = Path(path)
    size = path.stat().st_size
    fix = "copy or download it again, or re-save the model"
    with path.open("rb") as handle:
        length_field = handle.read(8)
        if len(length_field) < 8:
            raise ModelFolderError(f"{path} is truncated: {size} bytes, too few for a safetensors header; {fix}.")
        header_length = int.from_bytes(length_field, "little")
        if header_length > size - 8:
            raise ModelFolderError(
                f"{path} is truncated or corrupted: its header length field says {header_length} bytes but only "
                f"{size - 8} follow; {fix}."
            )
        try:
            header = json.loads(handle.read(header_length))
            data_end = max(
                (int(entry["data_offsets"][1]) for name, entry in header.items() if name != "__metadata__"), default=0
            )
        except (UnicodeDecodeError, json.JSONDecodeError, AttributeError, KeyError, IndexError, TypeError) as error:
            raise ModelFolderError(f"{path} has a corrupted header ({type(error).__name__}: {error}); {fix}.") from None
    data_size = size - 8 - header_length
    if data_size < data_end:
        raise ModelFolderError(
            f"{path} is truncated: its header describes {data_end} bytes of tensor data but the file holds "
            f"{data_size} (an interrupted write or copy); {fix}."
        )
    if data_size > data_end:
        raise ModelFolderError(
            f"{path} is corrupted: {data_size - data_end} bytes follow the last tensor its header describes; {fix}."
        )
    # dtypes, shapes and offsets that disagree with each other: safetensors' own validation, with the file named
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt"):
            pass
    except Exception as error:  # safetensors raises its own SafetensorError, not an OSError
        raise ModelFolderError(f"{path} is not a valid safetensors file ({error}); {fix}.") from None

    checksum_path = path.with_name(path.name + CHECKSUM_SUFFIX)
    if checksum_path.is_file():
        expected = checksum_path.read_text(encoding="utf-8").split()[:1]
        actual = file_sha256(path)
        if expected != [actual]:
            raise ModelFolderError(
                f"{path} does not match its checksum in {checksum_path.name} (sha256 {actual[:16]}…, expected "
                f"{(expected or ['nothing'])[0][:16]}…): the file changed after it was written (disk or copy "
                f"corruption); restore it from a good copy. If you replaced it on purpose, delete {checksum_path.name}."
            )


def weight_files(folder: str | Path) -> list[Path]:
    """The safetensors files holding a folder's weights. A folder with only pickled weights (`pytorch_model.bin`,
    `*.pt`, ...) raises a `ModelFolderError` naming the file; the file is never opened."""
    folder = Path(folder)
    index = folder / SAFE_WEIGHTS_INDEX_NAME
    if index.is_file():
        try:
            names = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as error:
            problem = f"{type(error).__name__}: {error}"
            raise ModelFolderError(f"{index} is corrupted ({problem}); re-save the model.") from None
        missing = [name for name in names if not (folder / name).is_file()]
        if missing:
            raise ModelFolderError(f"{index} lists {', '.join(missing)}, which {folder} lacks; copy the whole folder.")
        return [folder / name for name in names]
    if (folder / SAFE_WEIGHTS_NAME).is_file():
        return [folder / SAFE_WEIGHTS_NAME]
    pickles = sorted(p.name for p in folder.iterdir() if p.is_file() and p.suffix in PICKLE_SUFFIXES)
    if pickles:
        raise ModelFolderError(
            f"{folder / pickles[0]} holds the weights as a pickle and {folder} has no {SAFE_WEIGHTS_NAME}; pickles "
            f"can run arbitrary code when loaded, so this project never opens them. If you trust where the file comes "
            f"from, convert it once in a throwaway environment: AutoModelForSeq2SeqLM.from_pretrained(folder, "
            f"use_safetensors=False).save_pretrained(folder) writes {SAFE_WEIGHTS_NAME}."
        )
    raise ModelFolderError(
        f"{folder} has no {SAFE_WEIGHTS_NAME}; a model folder needs the weights that save_pretrained writes."
    )


def check_model_folder(folder: str | Path) -> dict:
    """Check a saved model folder before it is loaded (see the module docstring); returns its parsed config.json."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelFolderError(f"{folder} is not a folder; pass a folder written by save_pretrained.")
    config = check_config_file(folder / "config.json")
    for path in weight_files(folder):
        check_safetensors_file(path)
    return config


def check_tokenizer_fits_model(tokenizer: PreTrainedTokenizerBase, config: PretrainedConfig, source: str) -> None:
    """Raise a `ModelFolderError` if the tokenizer can produce ids the model has no embedding for, or if the two
    disagree on the padding or end-of-sentence id (the model would then read or stop at the wrong token)."""
    size = len(tokenizer)
    if size > config.vocab_size:
        raise ModelFolderError(
            f"The tokenizer of {source} (tokenizer.json) has {size} tokens but the model's config.json has "
            f"vocab_size={config.vocab_size}: ids from {config.vocab_size} up would index past the embedding matrix. "
            f"Use the tokenizer saved with this model, or resize the model (model.resize_token_embeddings({size})) "
            f"and train it further."
        )
    for name in ("pad_token_id", "eos_token_id"):
        tokenizer_id, model_ids = getattr(tokenizer, name), getattr(config, name, None)
        model_ids = model_ids if isinstance(model_ids, list) else [model_ids]
        if tokenizer_id is not None and None not in model_ids and tokenizer_id not in model_ids:
            raise ModelFolderError(
                f"The tokenizer of {source} has {name}={tokenizer_id} but the model's config.json has "
                f"{name}={model_ids[0] if len(model_ids) == 1 else model_ids}; use the tokenizer saved with this model."
            )


def load_model_and_tokenizer(
    name_or_path: str | Path, device: str | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The model (in eval mode, on `device` if given) and tokenizer of a saved folder or Hub id, after the checks of
    `check_model_folder` (local folders) and `check_tokenizer_fits_model`. Only safetensors weights are loaded."""
    if Path(name_or_path).is_dir():
        check_model_folder(name_or_path)
    tokenizer = load_tokenizer(name_or_path)
    model = AutoModelForSeq2SeqLM.from_pretrained(str(name_or_path), use_safetensors=True)
    check_tokenizer_fits_model(tokenizer, model.config, str(name_or_path))
    if device is not None:
        model.to(device)
    return model.eval(), tokenizer


__all__ = [
    "ModelFolderError",
    "check_config_file",
    "check_model_folder",
    "check_safetensors_file",
    "check_tokenizer_fits_model",
    "fsync_tree",
    "load_model_and_tokenizer",
    "weight_files",
    "write_checksums",
]
