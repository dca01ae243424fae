"""Loading a saved model folder, and every check on one that transformers does not make (config, weights,
tokenizer, checksums). Each safetensors file's SHA-256 is stored beside it (`<file>.sha256`): the format cannot see a
flipped bit in tensor data. Pickled weights are named, never opened: unpickling runs arbitrary code.
"""

import json
from pathlib import Path

import torch
from huggingface_hub.errors import StrictDataclassError
from transformers import AutoModelForSeq2SeqLM, PreTrainedConfig, PreTrainedModel
from transformers.tokenization_utils_base import PreTrainedTokenizerBase
from transformers.utils import SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME

from ..data.text import file_sha256
from ..data.tokenization import load_tokenizer, tokenizer_fingerprint
from ..errors import ModelFolderError
from ..model.configuration_vanilla_transformer import SIZE_FIELDS, VanillaTransformerConfig

CHECKSUM_SUFFIX = ".sha256"
# what `export-ctranslate2` writes beside CTranslate2's own files (`ctranslate2_engine`): the mark of an export
EXPORT_INFO = "export_info.json"
# the fields that size the network: a config.json without one would silently get the paper's base-model default
# (decoder_vocab_size follows vocab_size; max_position_embeddings, for learned positions, is checked by the shapes)
REQUIRED_CONFIG_FIELDS = tuple(f for f in SIZE_FIELDS if f not in ("decoder_vocab_size", "max_position_embeddings"))
# names under which PyTorch/NumPy/joblib write pickles; loading one can run any code
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle", ".joblib", ".npy", ".npz")
# the files `tokenizer.save_pretrained` writes for this project's tokenizers
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
# how many names an error lists before "and N more"
LISTED = 5
# what building a `VanillaTransformerConfig` from bad values raises (`@strict` validation wraps our ValueError)
CONFIG_ERRORS = (ValueError, TypeError, StrictDataclassError)
# No training yields a weight this large: its square overflows float32, and it is what flipping the top exponent bit
# makes of any float32 or bfloat16 weight above 2^-63 (a weight of exactly 0 becomes ±2, which no check can tell).
HUGE_WEIGHT = 2.0**64


def bad_values(tensor: torch.Tensor) -> str:
    """What is impossible in a floating-point tensor ("3 NaN, 1 Inf of 2048 values"), or "" when nothing is."""
    if not tensor.is_floating_point() or tensor.numel() == 0:
        return ""
    if tensor.dtype.itemsize == 1:  # float8: aminmax, isnan and abs have no CPU kernel
        tensor = tensor.float()
    low, high = torch.aminmax(tensor)  # one pass, NaN propagates to both
    if -HUGE_WEIGHT < float(low) and float(high) < HUGE_WEIGHT:
        return ""
    nan = int(torch.isnan(tensor).sum())
    inf = int(torch.isinf(tensor).sum())
    huge = int((tensor.abs() >= HUGE_WEIGHT).sum()) - inf  # float16 cannot hold 2^64: only its Inf count here
    parts = [f"{count} {kind}" for count, kind in ((nan, "NaN"), (inf, "Inf"), (huge, "of magnitude >= 2^64")) if count]
    return f"{', '.join(parts)} of {tensor.numel()} values" if parts else ""


def config_error_message(error: Exception) -> str:
    """The message of a config validation error: for `@strict` validation its cause's, which names field and fix."""
    return str(error.__cause__) if isinstance(error, StrictDataclassError) and error.__cause__ else str(error)


def write_checksums(folder: str | Path) -> None:
    """Write `<name>.sha256` (the `sha256sum -c` format) beside every `*.safetensors` file of `folder`."""
    for path in Path(folder).glob("*.safetensors"):
        path.with_name(path.name + CHECKSUM_SUFFIX).write_text(f"{file_sha256(path)}  {path.name}\n", encoding="utf-8")


def check_config_file(path: str | Path) -> dict:
    """The parsed config.json of a vanilla_transformer folder."""
    path = Path(path)
    if not path.is_file():
        raise ModelFolderError(f"{path} is missing; a model folder needs the config.json that save_pretrained writes.")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ModelFolderError(f"{path} is not valid JSON ({error}); restore it from a good copy.") from None
    if not isinstance(config, dict):
        raise ModelFolderError(f"{path} holds a JSON {type(config).__name__}, not an object; it is not a config.json.")
    model_type, expected = config.get("model_type"), VanillaTransformerConfig.model_type
    if model_type != expected:
        found = f"model_type={model_type!r}" if model_type is not None else "no model_type"
        raise ModelFolderError(
            f"{path} has {found} (expected {expected!r}): pass a folder saved from "
            f"VanillaTransformerForConditionalGeneration."
        )
    missing = [name for name in REQUIRED_CONFIG_FIELDS if name not in config]
    if missing:
        raise ModelFolderError(
            f"{path} lacks {', '.join(missing)}, which would default to the base model's; restore the config.json "
            f"saved with the weights."
        )
    return config


def check_safetensors_file(path: str | Path) -> None:
    """Refuse `path` unless it is a complete safetensors file that matches its `<name>.sha256`."""
    from safetensors import safe_open

    path = Path(path)
    try:
        with safe_open(str(path), framework="pt"):
            pass
    except Exception as error:  # safetensors raises its own SafetensorError, not an OSError
        raise ModelFolderError(_safetensors_problem(path, error)) from None

    checksum_path = path.with_name(path.name + CHECKSUM_SUFFIX)
    if checksum_path.is_file():
        expected = checksum_path.read_text(encoding="utf-8").split()[:1]
        actual = file_sha256(path)
        if expected != [actual]:
            raise ModelFolderError(
                f"{path} does not match its checksum in {checksum_path.name} (sha256 {actual[:16]}…, expected "
                f"{(expected or ['nothing'])[0][:16]}…): restore it from a good copy, or delete {checksum_path.name} "
                f"if you replaced it on purpose."
            )


def _safetensors_problem(path: Path, error: Exception) -> str:
    # safetensors gives the same message for a file cut short and one with bytes past its last tensor, and no sizes
    size = path.stat().st_size
    fix = "copy or download it again, or re-save the model"
    with path.open("rb") as handle:
        length_field = handle.read(8)
        if len(length_field) < 8:
            return f"{path} is truncated: {size} bytes, too few for a safetensors header; {fix}."
        header_length = int.from_bytes(length_field, "little")
        if header_length > size - 8:
            return (
                f"{path} is truncated or corrupted: its header length field says {header_length} bytes but only "
                f"{size - 8} follow; {fix}."
            )
        try:
            header = json.loads(handle.read(header_length))
            data_end = max(
                (int(entry["data_offsets"][1]) for name, entry in header.items() if name != "__metadata__"), default=0
            )
        except (UnicodeDecodeError, json.JSONDecodeError, AttributeError, KeyError, IndexError, TypeError) as problem:
            return f"{path} has a corrupted header ({type(problem).__name__}: {problem}); {fix}."
    data_size = size - 8 - header_length
    if data_size < data_end:
        return (
            f"{path} is truncated: its header describes {data_end} bytes of tensor data but the file holds "
            f"{data_size} (an interrupted write or copy); {fix}."
        )
    if data_size > data_end:
        return f"{path} is corrupted: {data_size - data_end} bytes follow the last tensor its header describes; {fix}."
    # dtypes, shapes and offsets that disagree with each other
    return f"{path} is not a valid safetensors file ({error}); {fix}."


def index_shards(index: Path) -> list:
    """The shard names a model.safetensors.index.json maps weights to."""
    try:
        return sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as error:
        raise ModelFolderError(f"{index} is corrupted ({type(error).__name__}: {error}); re-save the model.") from None


def weight_files(folder: str | Path) -> list[Path]:
    """The safetensors files holding a folder's weights; pickled ones are refused by name."""
    folder = Path(folder)
    index = folder / SAFE_WEIGHTS_INDEX_NAME
    if index.is_file():
        names = index_shards(index)
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
            f"can run code, so this project never opens them. If you trust the file, convert it once: "
            f"AutoModelForSeq2SeqLM.from_pretrained(folder, use_safetensors=False).save_pretrained(folder) writes "
            f"{SAFE_WEIGHTS_NAME}."
        )
    raise ModelFolderError(
        f"{folder} has no {SAFE_WEIGHTS_NAME}; a model folder needs the weights that save_pretrained writes."
    )


def check_model_folder(folder: str | Path) -> PreTrainedModel:
    """The model of a checked saved model folder."""
    folder = Path(folder)
    if not folder.exists():
        raise ModelFolderError(
            f"{folder} does not exist; pass a model folder (a run's final/ or checkpoint-N/), or a Hub id (owner/name)."
        )
    if not folder.is_dir():
        raise ModelFolderError(
            f"{folder} is a file, expected a model folder (the one that holds it, e.g. {folder.parent})."
        )
    if (folder / EXPORT_INFO).is_file():
        raise ModelFolderError(
            f"{folder} is a CTranslate2 export (it holds {EXPORT_INFO}): pass --engine ctranslate2, or the model "
            f"folder it was exported from."
        )
    model, problems = load_checked_weights(folder, check_config_file(folder / "config.json"))
    if problems:
        raise ModelFolderError("\n".join(problems))
    return model


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:LISTED])
    return shown if len(names) <= LISTED else f"{shown} and {len(names) - LISTED} more"


def _names_and_shapes_problems(folder: Path, files: list[Path], model_class: str, info: dict) -> list[str]:
    from safetensors import safe_open

    where: dict[str, str] = {}
    for path in files:
        with safe_open(str(path), framework="pt") as handle:
            where |= dict.fromkeys(handle.keys(), path.name)
    fix = "restore the folder from a good copy, or re-save the model"
    problems = []
    unexpected = sorted(info["unexpected_keys"])
    if unexpected:
        problems.append(
            f"{folder} holds {len(unexpected)} tensor(s) that {model_class} with its config.json lacks "
            f"({_listed(unexpected)}) in {', '.join(sorted({where.get(n, '?') for n in unexpected}))}: transformers "
            f"would silently drop them; pass the config.json saved with these weights, or {fix}."
        )
    missing = sorted(info["missing_keys"])
    if missing:
        problems.append(
            f"{folder} lacks {len(missing)} tensor(s) of the model ({_listed(missing)}) in "
            f"{', '.join(path.name for path in files)}: transformers would initialise them at random; {fix}."
        )
    wrong = [
        f"{name} is {list(stored)} in {where.get(name, '?')}, expected {list(expected)}"
        for name, stored, expected in sorted(info["mismatched_keys"])
    ]
    if wrong:
        problems.append(
            f"{folder} holds {len(wrong)} tensor(s) whose shape does not match its config.json: {_listed(wrong)}; "
            f"pass the config.json saved with them, or {fix}."
        )
    return problems


def _value_problems(files: list[Path]) -> list[str]:
    from safetensors import safe_open

    bad = []
    for path in files:
        with safe_open(str(path), framework="pt") as handle:
            for name in handle.keys():
                if problem := bad_values(handle.get_tensor(name)):
                    bad.append((path, f"{name} ({problem})"))
    if not bad:
        return []
    where = ", ".join(str(path) for path in sorted({path for path, _ in bad}))
    return [
        f"{where} holds impossible weights in {len(bad)} tensor(s): {_listed([text for _, text in bad])}; restore "
        f"the folder from a good copy, or use a checkpoint saved before the loss became NaN."
    ]


def load_checked_weights(
    folder: str | Path, config: dict | PreTrainedConfig
) -> tuple[PreTrainedModel | None, list[str]]:
    """The model of `folder`'s weights with `config`, and every reason they cannot be this model's (the model is
    None then), in stages, each only when the one before found nothing: the files (complete, matching their
    `.sha256`); names and shapes, from transformers' loading report; values (`bad_values`)."""
    folder = Path(folder)
    try:
        files = weight_files(folder)
        for path in files:
            check_safetensors_file(path)
    except ModelFolderError as error:
        return None, [str(error)]
    if isinstance(config, dict):
        try:
            config = VanillaTransformerConfig.from_dict(config)
        except CONFIG_ERRORS as error:
            return None, [
                f"{folder / 'config.json'} describes no valid model ({config_error_message(error)}); restore the "
                f"config.json saved with the weights."
            ]
    model, info = AutoModelForSeq2SeqLM.from_pretrained(
        folder, config=config, use_safetensors=True, output_loading_info=True, ignore_mismatched_sizes=True
    )
    problems = _names_and_shapes_problems(folder, files, type(model).__name__, info) or _value_problems(files)
    return (None if problems else model), problems


def weights_problems(folder: str | Path, config: dict | PreTrainedConfig) -> list[str]:
    return load_checked_weights(folder, config)[1]


def check_tokenizer_fits_model(tokenizer: PreTrainedTokenizerBase, config: PreTrainedConfig, source: str) -> None:
    """Refuse a tokenizer with ids past the model's embeddings, or another padding or end-of-sentence id."""
    size = len(tokenizer)
    if size > config.vocab_size:
        raise ModelFolderError(
            f"The tokenizer of {source} (tokenizer.json) has {size} tokens but the model's config.json has "
            f"vocab_size={config.vocab_size}; use the tokenizer saved with this model, or resize the model "
            f"(model.resize_token_embeddings({size})) and train it further."
        )
    for name in ("pad_token_id", "eos_token_id"):
        tokenizer_id, model_ids = getattr(tokenizer, name), getattr(config, name, None)
        model_ids = model_ids if isinstance(model_ids, list) else [model_ids]
        if tokenizer_id is not None and None not in model_ids and tokenizer_id not in model_ids:
            raise ModelFolderError(
                f"The tokenizer of {source} has {name}={tokenizer_id} but the model's config.json has "
                f"{name}={model_ids[0] if len(model_ids) == 1 else model_ids}; use the tokenizer saved with this model."
            )


def check_tokenizer_files(folder: str | Path) -> None:
    """Refuse a model folder that lacks one of `TOKENIZER_FILES`."""
    folder = Path(folder)
    missing = [name for name in TOKENIZER_FILES if not (folder / name).is_file()]
    if missing:
        raise ModelFolderError(
            f"{folder} lacks {' and '.join(missing)}: a model folder needs the tokenizer saved with the model; copy "
            f"{' and '.join(missing)} from the training run's tokenizer/ folder into {folder}."
        )


def check_tokenizer_matches_model(tokenizer: PreTrainedTokenizerBase, config: PreTrainedConfig, source: str) -> None:
    """Refuse a tokenizer whose fingerprint differs from the one config.json records (folders that predate the
    fingerprint get `check_tokenizer_fits_model` only)."""
    recorded = getattr(config, "tokenizer_fingerprint", None)
    if recorded is not None and (actual := tokenizer_fingerprint(tokenizer)) != recorded:
        raise ModelFolderError(
            f"The tokenizer of {source} (tokenizer.json) is not the one the model was trained with: its "
            f"fingerprint is {actual[:16]}… but {source}/config.json records tokenizer_fingerprint="
            f"{recorded[:16]}…. Copy tokenizer.json and tokenizer_config.json from the training run's tokenizer/ "
            f"folder into {source}."
        )
    check_tokenizer_fits_model(tokenizer, config, source)


# what loading reads of a Hub model: config and generation config, weights and their checksums, the tokenizer
# files; never a pickle, and no code (the installed package runs its own)
DOWNLOADED_FILES = ("*.json", "*.safetensors", "*" + CHECKSUM_SUFFIX, "*.txt")


def download_model(repo_id: str) -> Path:
    """The cached folder of Hub model `repo_id`'s `DOWNLOADED_FILES`, checked as a local folder is."""
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, allow_patterns=list(DOWNLOADED_FILES)))
    except (OSError, ValueError) as error:  # the Hub's refusals, the network's, offline mode; an invalid id
        # the client's message ends in advice about the internet connection; say first what was looked for
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ModelFolderError(
            f"{repo_id} is not a folder here, and no Hub model of that id could be loaded ({reason}); give a saved "
            f"model folder, or a Hub id with the network reachable or the model in the cache."
        ) from error


def load_model_and_tokenizer(
    name_or_path: str | Path, device: str | None = None, dtype: torch.dtype | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The model (in eval mode, on `device` and in `dtype` if given) and tokenizer of a saved folder or Hub id,
    checked before transformers reads them. A path-like name is never looked up on the Hub."""
    path = Path(name_or_path)
    text = str(name_or_path)
    local = path.exists() or path.is_absolute() or text.startswith((".", "~")) or text.count("/") > 1 or "\\" in text
    if not local:
        path = download_model(text)
    try:
        model = check_model_folder(path)
        check_tokenizer_files(path)
    except ModelFolderError as error:
        if local:
            raise
        raise ModelFolderError(
            f"The Hub model {text} cannot be loaded; ask its owner to fix the upload, or use another revision:\n{error}"
        ) from None
    tokenizer = load_tokenizer(path)
    check_tokenizer_matches_model(tokenizer, model.config, text)
    return model.to(device=device, dtype=dtype).eval(), tokenizer
