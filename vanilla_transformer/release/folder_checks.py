"""Whether a saved folder makes a complete, safe model repo (config.json and its auto_map, the code files, weights,
tokenizer, generation config, the card's metadata, no pickle anywhere): what `hub.plan_push` checks before a push."""

import ast
import zipfile
from pathlib import Path

from huggingface_hub import ModelCard
from transformers import AutoTokenizer, GenerationConfig

from ..errors import ModelFolderError
from ..files.loading import (
    CONFIG_ERRORS,
    PICKLE_SUFFIXES,
    check_config_file,
    check_tokenizer_files,
    check_tokenizer_fits_model,
    weights_problems,
)
from ..model.configuration_vanilla_transformer import VanillaTransformerConfig

# the remote code a folder carries for `trust_remote_code=True`, and the Auto classes its config.json's auto_map names
CODE_FILES = (
    "configuration_vanilla_transformer.py",
    "generation_vanilla_transformer.py",
    "modeling_vanilla_transformer.py",
)
AUTO_CLASSES = ("AutoConfig", "AutoModel", "AutoModelForSeq2SeqLM")


def _defined_classes(path: Path) -> set[str]:
    return {node.name for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ClassDef)}


def _imported_packages(path: Path) -> set[str]:  # absolute imports only: `from .x import` stays inside the repo
    packages = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            packages.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            packages.add(node.module.split(".")[0])
    return packages


def _check_code(folder: Path, config: dict) -> list[str]:
    problems = []
    for name in CODE_FILES:
        code = folder / name
        if not code.is_file():
            problems.append(
                f"{name} is missing, and `trust_remote_code=True` needs it: save with `import vanilla_transformer` "
                f"done first."
            )
        elif "vanilla_transformer" in _imported_packages(code):
            problems.append(f"{name} imports the vanilla_transformer package, which a downloader does not have.")
    auto_map = config.get("auto_map") or {}
    for auto_class in AUTO_CLASSES:
        reference = auto_map.get(auto_class)
        if reference is None:
            problems.append(
                f"config.json's auto_map has no {auto_class} entry (it has {sorted(auto_map)}): save with "
                f"`import vanilla_transformer` done first."
            )
            continue
        module, _, class_name = reference.rpartition(".")
        code = folder / f"{module}.py"
        if code.is_file() and class_name not in _defined_classes(code):
            problems.append(f"config.json's auto_map names {reference}, but {code.name} defines no {class_name}.")
        elif not code.is_file() and f"{module}.py" not in CODE_FILES:
            problems.append(f"config.json's auto_map names {reference}, but {module}.py is not in the folder.")
    return problems


def _check_tokenizer(folder: Path, config: dict) -> list[str]:
    try:
        check_tokenizer_files(folder)
        try:
            tokenizer = AutoTokenizer.from_pretrained(folder)
        except Exception as error:  # noqa: BLE001
            return [f"AutoTokenizer cannot load the tokenizer files: {type(error).__name__}: {error}"]
        check_tokenizer_fits_model(tokenizer, VanillaTransformerConfig.from_dict(config), str(folder))
    except ModelFolderError as error:
        return [str(error)]
    except CONFIG_ERRORS:
        pass  # a config.json that describes no model is named once, by `weights_problems`
    return []


def _check_card(folder: Path, card: str | None = None) -> list[str]:
    """The metadata of `card`, the text a push would add, else of the folder's README.md."""
    path = folder / "README.md"
    if card is None and not path.is_file():
        return [
            "README.md (the model card) is missing and no training record (results.json, or trainer_state.json and "
            "preset.json) renders one: write one, or release the run with `vanilla-transformer release`."
        ]
    try:
        data = (ModelCard(card) if card is not None else ModelCard.load(path)).data
    except Exception as error:  # noqa: BLE001
        return [f"README.md's YAML metadata does not parse: {error}"]
    problems = []
    for field, example in (("license", "apache-2.0"), ("language", "[en, de]")):
        if not getattr(data, field, None):
            problems.append(f"README.md's metadata has no `{field}` (e.g. `{field}: {example}`).")
    if not data.eval_results:
        problems.append("README.md's metadata has no `model-index` results: add the measured scores.")
    return problems


def resolves_inside(path: Path, root: Path) -> bool:
    """Whether `path`, its links followed, lies under `root` (a resolved folder); a link loop counts as outside."""
    try:
        return path.resolve().is_relative_to(root)
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop (Python 3.11, 3.12)
        return False


def _is_pickle(path: Path, *, read: bool = True) -> bool:
    if path.name.endswith(PICKLE_SUFFIXES):
        return True
    if not read or path.suffix == ".safetensors":  # a safetensors header length is checked by loading it instead
        return False
    with open(path, "rb") as handle:
        head = handle.read(2)
    if len(head) == 2 and head[0] == 0x80 and 2 <= head[1] <= 5:  # the PROTO opcode of pickle protocols 2-5
        return True
    if zipfile.is_zipfile(path):  # torch.save's format: a zip archive holding data.pkl
        with zipfile.ZipFile(path) as archive:
            return any(name.endswith(".pkl") for name in archive.namelist())
    return False


def find_pickles(folder: str | Path) -> list[Path]:
    """Files under `folder` that are (or are named like) pickles; a link out of it is judged by its name only."""
    folder = Path(folder)
    root = folder.resolve()
    return [
        path
        for path in sorted(folder.rglob("*"))
        if path.is_file() and _is_pickle(path, read=resolves_inside(path, root))
    ]


def pickle_problems(folder: Path) -> list[str]:
    return [
        f"{path.relative_to(folder)} is a pickle (loading it runs arbitrary code): remove it; the weights belong in "
        f"model.safetensors."
        for path in find_pickles(folder)
    ]


def validate_folder(folder: str | Path) -> list[str]:
    """Every reason the folder would not make a complete, safe model repo; an empty list when it is ready."""
    folder = Path(folder)
    if not folder.is_dir():
        return [
            f"{folder} is not a folder: pass the folder written by save_pretrained or `vanilla-transformer release`."
        ]
    return pickle_problems(folder) + check_contents(folder)


def check_contents(folder: Path, card: str | None = None) -> list[str]:
    """`validate_folder` but the pickle search, with `card` as the README.md when given."""
    try:
        config = check_config_file(folder / "config.json")
    except ModelFolderError as error:
        problems = [str(error)]  # the code's auto_map, the weights and the tokenizer cannot be judged without it
    else:
        problems = _check_code(folder, config) + weights_problems(folder, config) + _check_tokenizer(folder, config)
    if not (folder / "generation_config.json").is_file():
        problems.append(
            "generation_config.json is missing: it carries the paper's decoding; `save_pretrained` writes it."
        )
    else:
        try:
            GenerationConfig.from_pretrained(folder)
        except Exception as error:  # noqa: BLE001
            problems.append(f"generation_config.json does not load: {error}")
    return problems + _check_card(folder, card)
