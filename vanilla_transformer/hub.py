"""Share a trained model on the Hugging Face Hub: check that a folder is complete before anything is sent, render its
model card from the template shipped with the package (`templates/model_card.md`), and push it with `huggingface_hub`
(to a new or existing repo, a branch, or as a pull request).

A complete folder loads anywhere with `AutoModelForSeq2SeqLM.from_pretrained(repo_id, trust_remote_code=True)`:
`model.safetensors` (no pickles), `config.json` whose `auto_map` names the two code files, the code files, tokenizer
files, `generation_config.json` (the paper's decoding), and a `README.md` card whose YAML metadata carries the license
(the training data's terms where it has its own), languages, the Hub datasets that hold the training data (none when
none does) and `model-index` results.

A push sends only those files (`plan_push` lists them; see its docstring for the exact rules): never the rest of a
training folder (logs, optimizer state, credentials), never what a link points to outside the folder, never weights
that fail their checksum or hold NaN/Inf, and never remote code that differs from this package's own unless asked.
"""

import ast
import dataclasses
import json
import os
import shutil
import tempfile
import zipfile
from importlib import resources
from pathlib import Path

import jinja2
from huggingface_hub import CommitInfo, EvalResult, HfApi, ModelCard, ModelCardData
from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError
from safetensors import safe_open
from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer, GenerationConfig
from transformers.utils import SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME

from .checkpoints import list_checkpoints
from .data.multi30k import COMMIT as MULTI30K_COMMIT
from .loading import (
    CHECKSUM_SUFFIX,
    PICKLE_SUFFIXES,
    ModelFolderError,
    bad_values,
    check_config_file,
    check_safetensors_file,
    check_tokenizer_files,
    check_tokenizer_fits_model,
    weight_files,
)

# package data (pyproject.toml), so that an installed wheel renders cards as a checkout does
CARD_TEMPLATE = resources.files(__package__) / "templates" / "model_card.md"
CODE_FILES = (
    "configuration_vanilla_transformer.py",
    "generation_vanilla_transformer.py",
    "modeling_vanilla_transformer.py",
)
AUTO_CLASSES = ("AutoConfig", "AutoModel", "AutoModelForSeq2SeqLM")
# What a push sends (top level only; besides these, the shards a model.safetensors.index.json names, and the
# `.sha256` of each weights file): what `from_pretrained(repo_id, trust_remote_code=True)` and `AutoTokenizer` read,
# the card and the scores it is rendered from. Everything else in the folder stays on this machine.
MODEL_FILES = (
    "config.json",
    "generation_config.json",
    SAFE_WEIGHTS_NAME,
    SAFE_WEIGHTS_INDEX_NAME,  # a sharded model: its weight_map names the shards
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    *CODE_FILES,
    "README.md",
    "results.json",
)
LANGUAGE_NAMES = {
    "en": "English",
    "de": "German",
    "fr": "French",
    "cs": "Czech",
    "zh": "Chinese",
    "ja": "Japanese",
    "ko": "Korean",
}
# The Hub datasets that hold a corpus we train on, for the card's `datasets` (no entry: no Hub dataset holds it, and
# the card names none). `bentrevett/multi30k` is the WMT16 release of Multi30k Task 1: its train and test splits are
# our train and test2016; its validation has the WMT16 val.de, which the official files corrected in 61 lines.
HUB_DATASETS = {"multi30k": "bentrevett/multi30k", "wmt14": "wmt/wmt14"}
# Weights inherit the terms of their training data: (license, license_name, license_link) for data with terms of its
# own; other data leaves the card's license to the caller (apache-2.0, the code's, by default).
DATA_TERMS = {
    "multi30k": ("other", "multi30k-non-commercial", "https://github.com/multi30k/dataset#use-of-the-data"),
    "tatoeba": ("cc-by-2.0", None, None),  # Tatoeba's sentences: CC-BY 2.0 France
}
DATASET_TITLES = {
    "multi30k": "Multi30k Task 1",
    "builtin-en-de-grammar": "the built-in English→German grammar corpus",
    "wmt14": "WMT 2014",
    "tatoeba": "Tatoeba",
}
EXAMPLES = {
    "en": "A man is riding a bike down the street.",
    "de": "Ein Mann fährt mit dem Fahrrad die Straße entlang.",
    "zh": "我今天在公园里看到了一只很大的狗。",
}
CONFIG_HYPERPARAMETERS = (
    "d_model",
    "encoder_layers",
    "decoder_layers",
    "encoder_attention_heads",
    "encoder_ffn_dim",
    "dropout",
    "vocab_size",
)
PRESET_HYPERPARAMETERS = ("max_tokens", "tokens_per_update", "warmup_steps", "lr_factor", "label_smoothing")
INVALID_TOKEN = "Invalid credentials in Authorization header"  # the Hub's words for a token it does not know


class FolderNotReadyError(ValueError):
    """A folder that would make an incomplete or unsafe repo; `problems` lists every one of them."""

    def __init__(self, folder: str | Path, problems: list[str]):
        self.problems = problems
        if len(problems) == 1:  # one problem, one line (each problem names the file and the fix)
            super().__init__(f"{folder} is not ready for the Hub; nothing was pushed: {problems[0]}")
            return
        lines = "\n".join(f"  - {problem}" for problem in problems)
        super().__init__(
            f"{folder} is not ready for the Hub ({len(problems)} problem(s)); nothing was pushed:\n{lines}"
        )


class HubPushError(RuntimeError):
    """The Hub refused a push (token, repo, branch); the message says why and what to do."""


# -- the model card -------------------------------------------------------------------------------------------------


def dataset_id(corpus: str) -> str:
    """The name the card gives a training preset's `corpus`: a folder counts by its name (`multi30k`)."""
    if corpus == "builtin":
        return "builtin-en-de-grammar"
    if corpus.endswith(".txt") or Path(corpus).is_file():  # manythings.org's Anki files hold Tatoeba's sentences
        return "tatoeba"
    if corpus.startswith(("/", "./", "../", "~")) or Path(corpus).is_dir():
        return Path(corpus).name
    return corpus  # a `datasets` name (`wmt14`, `bentrevett/multi30k`) is already an id


def hub_dataset_ids(dataset: str) -> list[str]:
    """The card's `datasets`: the Hub dataset holding `dataset` (a `dataset_id`), or none for data no Hub dataset
    holds (the built-in corpus, a local folder), rather than a name the Hub would link to nothing."""
    if dataset in HUB_DATASETS:
        return [HUB_DATASETS[dataset]]
    return [dataset] if "/" in dataset else []


def decoding_summary(generation: dict | None = None) -> str:
    """The decoding a `generation_config.json` sets, in a few words (the paper's §6.1 settings when not given)."""
    generation = generation or {}
    return (
        f"beam {generation.get('num_beams', 4)}, GNMT length penalty α={generation.get('length_penalty', 0.6)}, "
        f"at most input length + {generation.get('max_new_tokens_over_input', 50)} tokens"
    )


def training_hyperparameters(config: dict, preset: dict | None = None, generation: dict | None = None) -> dict:
    """The card's hyperparameter table: the architecture from `config.json`, the recipe from the run's preset, the
    decoding from `generation_config.json` (the paper's when not given)."""
    table = {key: config[key] for key in CONFIG_HYPERPARAMETERS if key in config}
    table.update({key: preset[key] for key in PRESET_HYPERPARAMETERS if preset and key in preset})
    table["optimizer"] = "Adam(0.9, 0.98, 1e-9)"
    table["decoding"] = decoding_summary(generation)
    return table


def render_model_card(
    name: str,
    results: dict[str, dict],
    training: dict,
    *,
    dataset: str = "multi30k",
    languages: tuple[str, str] = ("en", "de"),
    repo_id: str | None = None,
    license: str = "apache-2.0",  # noqa: A002  (the card's own field name)
    reproduce: list[str] | None = None,
    evaluated_during_training: bool = False,
    data: dict | None = None,
    examples: list[dict] | None = None,
) -> ModelCard:
    """The model card from the package's template, `vanilla_transformer/templates/model_card.md`.

    `results` maps a split to its scores (`sacrebleu`, `chrf`, optionally `tokenized_bleu` and `signature`); splits
    named with a slice (`test2016[:50]`) stay out of the `model-index`. `training` holds `summary`,
    `hyperparameters` and optionally `status`. `data` is what `release.ReleaseData.record()` says of a TSV file
    (name, SHA-256, split sizes, contributors), `examples` translations to show (`source`, `reference`,
    `translation`). The YAML metadata (and its `model-index`) is written by
    `huggingface_hub.ModelCardData`, so it parses with the Hub's own reader.
    """
    if not CARD_TEMPLATE.is_file():
        raise FileNotFoundError(
            f"the card template {CARD_TEMPLATE} is missing: it is package data of vanilla_transformer "
            f"(vanilla_transformer/templates/model_card.md), left out of this install; reinstall the package, or "
            f"write README.md yourself."
        )
    source, target = languages
    title = DATASET_TITLES.get(dataset, dataset)
    rows = []
    eval_results = []
    for split, scores in results.items():
        rows.append(
            {
                "split": split,
                "tokenized_bleu": scores.get("tokenized_bleu", "–"),
                "sacrebleu": scores["sacrebleu"],
                "chrf": scores["chrf"],
            }
        )
        if "[" in split:
            continue
        metrics = [("sacrebleu", scores["sacrebleu"], "sacreBLEU"), ("chrf", scores["chrf"], "chrF")]
        if "tokenized_bleu" in scores:
            metrics.insert(0, ("bleu", scores["tokenized_bleu"], "BLEU (lowercased Moses-tokenized reference)"))
        eval_results += [
            EvalResult(
                task_type="translation",
                task_name=f"Translation {source.capitalize()}-{target.capitalize()}",
                dataset_type=dataset,
                dataset_name=f"{title[0].upper()}{title[1:]} {split}",
                dataset_split=split,
                dataset_config=f"{source}-{target}",
                metric_type=metric,
                metric_value=value,
                metric_name=metric_name,
            )
            for metric, value, metric_name in metrics
        ]
    license_name = license_link = None
    if dataset in DATA_TERMS:
        license, license_name, license_link = DATA_TERMS[dataset]
    card_data = ModelCardData(
        language=[source, target],
        license=license,
        license_name=license_name,
        license_link=license_link,
        library_name="transformers",
        pipeline_tag="translation",
        tags=["translation", "transformer", "attention-is-all-you-need", dataset],
        datasets=hub_dataset_ids(dataset) or None,
        metrics=sorted({result.metric_type for result in eval_results}),
        model_name=name,
        eval_results=eval_results or None,
    )
    signatures = [scores["signature"] for scores in results.values() if scores.get("signature")]
    bleu_tokenizer = next((part[4:] for part in (signatures or [""])[0].split("|") if part.startswith("tok:")), "13a")
    # trim_blocks/lstrip_blocks: the template's {% %} lines leave no blank lines; StrictUndefined: a misspelt
    # variable fails here instead of vanishing from the card
    environment = jinja2.Environment(
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined
    )
    text = environment.from_string(
        CARD_TEMPLATE.read_text()
    ).render(
        card_data=card_data.to_yaml(),
        name=name,
        repo_id=repo_id or f"your-name/{name}",  # where the folder is not pushed yet: the user's namespace
        dataset=dataset,
        dataset_title=title,
        multi30k_commit=MULTI30K_COMMIT[:7],  # the files `multi30k_dir` downloads
        source_language=LANGUAGE_NAMES.get(source, source),
        target_language=LANGUAGE_NAMES.get(target, target),
        example=EXAMPLES.get(source, EXAMPLES["en"]),
        status=training.get("status"),
        results=rows,
        has_tokenized_bleu=any("tokenized_bleu" in scores for scores in results.values()),
        evaluated_during_training=evaluated_during_training,
        signature=signatures[0] if signatures else None,
        training_summary=training["summary"],
        hyperparameters=training["hyperparameters"],
        decoding=training["hyperparameters"].get("decoding", decoding_summary()),
        reproduce=reproduce,
        bleu_tokenizer=bleu_tokenizer,
        data=data or {},
        examples=examples or [],
    )
    return ModelCard(text)


def card_from_release_record(name: str, record: dict, repo_id: str | None = None) -> ModelCard:
    """The card of a release folder from its `results.json` (`release.write_release`): Multi30k en→de where the
    record names no data (releases before it did)."""
    data = record.get("data", {"dataset": "multi30k", "languages": ["en", "de"]})
    return render_model_card(
        name,
        record["results"],
        record["training"],
        dataset=data["dataset"],
        languages=tuple(data["languages"]),
        repo_id=repo_id,
        reproduce=record.get("reproduce"),
        data=data,
        examples=record.get("examples"),
    )


def card_from_training_log(
    name: str,
    log_history: list[dict],
    config: dict,
    *,
    global_step: int,
    epoch: float,
    parameters: int,
    preset: dict | None = None,
    dataset: str,
    languages: tuple[str, str] = ("en", "de"),
    repo_id: str | None = None,
    license: str = "apache-2.0",  # noqa: A002
) -> ModelCard:
    """A card from what a `Trainer` run records (`trainer_state.json`'s `log_history`, `config.json`, the preset):
    its results are the last evaluation's sacreBLEU and chrF on the validation split."""
    evaluations = [entry for entry in log_history if "eval_bleu" in entry]
    if not evaluations:
        raise ValueError(
            f"the training log of {name} holds no evaluation (no `eval_bleu` entry), so the card would have no "
            f"results: evaluate before pushing (`trainer.evaluate()`, or eval_strategy='steps') or write README.md."
        )
    last = evaluations[-1]
    split = (preset or {}).get("valid_split", "validation")
    results = {split: {"sacrebleu": round(last["eval_bleu"], 2), "chrf": round(last["eval_chrf"], 2)}}
    training = {
        "summary": (
            f"{parameters:,} parameters; {global_step} updates ({epoch:.1f} epochs); scores of the evaluation at "
            f"update {last.get('step', global_step)}."
        ),
        "hyperparameters": training_hyperparameters(config, preset),
    }
    return render_model_card(
        name,
        results,
        training,
        dataset=dataset,
        languages=languages,
        repo_id=repo_id,
        license=license,
        evaluated_during_training=True,
    )


def _count_parameters(weights: Path) -> int:
    """Parameters as stored (tied matrices once), read from the safetensors header only."""
    with safe_open(weights, framework="pt") as handle:
        total = 0
        for key in handle.keys():
            size = 1
            for dim in handle.get_slice(key).get_shape():
                size *= dim
            total += size
        return total


def card_for_folder(folder: str | Path, repo_id: str | None = None) -> ModelCard | None:
    """Render a card for a folder that has none, from its run's records; None when there are none.

    A release folder has `results.json` (`scripts/release.py`); a training job's folder (`<run>/final`, as
    `scripts/train.py` leaves it) has the run's `trainer_state.json` in its newest checkpoint and `preset.json`
    beside it.
    """
    folder = Path(folder)
    name = repo_id.split("/")[-1] if repo_id else folder.resolve().name
    if (folder / "results.json").is_file():
        return card_from_release_record(name, json.loads((folder / "results.json").read_text()), repo_id=repo_id)
    candidates = [folder / "trainer_state.json"]
    for run in (folder, folder.parent):
        candidates += [checkpoint / "trainer_state.json" for checkpoint in reversed(list_checkpoints(run))]
    state_file = next((path for path in candidates if path.is_file()), None)
    if state_file is None or not (folder / "config.json").is_file() or not (folder / SAFE_WEIGHTS_NAME).is_file():
        return None
    state = json.loads(state_file.read_text())
    preset_file = next((p for p in (folder / "preset.json", folder.parent / "preset.json") if p.is_file()), None)
    if preset_file is None:  # without it the training data is unknown, and the card's `datasets` would be a guess
        return None
    preset = json.loads(preset_file.read_text())
    return card_from_training_log(
        name,
        state["log_history"],
        json.loads((folder / "config.json").read_text()),
        global_step=state["global_step"],
        epoch=state.get("epoch") or 0.0,
        parameters=_count_parameters(folder / SAFE_WEIGHTS_NAME),
        preset=preset,
        dataset=dataset_id(preset["corpus"]),
        repo_id=repo_id,
    )


# -- checking a folder ----------------------------------------------------------------------------------------------


def _defined_classes(path: Path) -> set[str]:
    return {node.name for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ClassDef)}


def _imported_packages(path: Path) -> set[str]:
    """Top-level packages a file imports absolutely (relative `from .x import` stays inside the repo)."""
    packages = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            packages.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            packages.add(node.module.split(".")[0])
    return packages


def _check_config_and_code(folder: Path) -> list[str]:
    try:
        config = check_config_file(folder / "config.json")
    except ModelFolderError as error:
        return [str(error)]
    problems = []
    for name in CODE_FILES:
        code = folder / name
        if not code.is_file():
            problems.append(
                f"{name} is missing: without it `trust_remote_code=True` cannot load the model; save with "
                f"`import vanilla_transformer` done first (it registers the classes for remote code)."
            )
        elif "vanilla_transformer" in _imported_packages(code):
            problems.append(f"{name} imports the vanilla_transformer package, which a downloader does not have.")
    auto_map = config.get("auto_map") or {}
    for auto_class in AUTO_CLASSES:
        reference = auto_map.get(auto_class)
        if reference is None:
            problems.append(
                f"config.json's auto_map has no {auto_class} entry (it has {sorted(auto_map)}): save with "
                f"`import vanilla_transformer` done first, which registers all three Auto classes."
            )
            continue
        module, _, class_name = reference.rpartition(".")
        code = folder / f"{module}.py"
        if code.is_file() and class_name not in _defined_classes(code):
            problems.append(f"config.json's auto_map names {reference}, but {code.name} defines no {class_name}.")
        elif not code.is_file() and f"{module}.py" not in CODE_FILES:
            problems.append(f"config.json's auto_map names {reference}, but {module}.py is not in the folder.")
    return problems


def _check_weights(folder: Path) -> list[str]:
    """The weights are safetensors files (`loading.weight_files`) that load with config.json. Their values are
    judged by `_weights_problems`, with the push's own advice."""
    try:
        weight_files(folder)
    except ModelFolderError as error:
        return [str(error)]
    try:
        _, info = AutoModelForSeq2SeqLM.from_pretrained(folder, output_loading_info=True)
    except Exception as error:  # noqa: BLE001  (any failure to load is the problem to report)
        return [f"model.safetensors does not load with config.json: {type(error).__name__}: {error}"]
    problems = []
    for kind in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        if info.get(kind):
            problems.append(f"model.safetensors does not match config.json: {kind} {sorted(info[kind])[:5]}")
    return problems


def _check_tokenizer(folder: Path) -> list[str]:
    """The tokenizer files are there, load, and fit the model (`loading.check_tokenizer_fits_model`)."""
    try:
        check_tokenizer_files(folder)
    except ModelFolderError as error:
        return [str(error)]
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
        config = AutoConfig.from_pretrained(folder)
    except Exception as error:  # noqa: BLE001
        return [f"AutoTokenizer cannot load the tokenizer files: {type(error).__name__}: {error}"]
    try:
        check_tokenizer_fits_model(tokenizer, config, str(folder))
    except ModelFolderError as error:
        return [str(error)]
    return []


def _check_card(folder: Path) -> list[str]:
    path = folder / "README.md"
    if not path.is_file():
        return [
            "README.md (the model card) is missing and no training record (results.json, or the run's "
            "trainer_state.json and preset.json) was found to render one from the card template: write one or "
            "release the run with `vanilla-transformer release` (scripts/release.py)."
        ]
    try:
        data = ModelCard.load(path).data
    except Exception as error:  # noqa: BLE001
        return [f"README.md's YAML metadata does not parse: {error}"]
    problems = []
    for field, example in (("license", "apache-2.0"), ("language", "[en, de]")):
        if not getattr(data, field, None):
            problems.append(f"README.md's metadata has no `{field}` (e.g. `{field}: {example}`).")
    if not data.eval_results:
        problems.append("README.md's metadata has no `model-index` results: add the measured scores.")
    return problems


def _resolves_inside(path: Path, root: Path) -> bool:
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
    """Files anywhere under `folder` that are (or are named like) pickles: `torch.save` output, `.bin`, `.pkl`, ...

    A link to a file outside the folder is judged by its name only: its target is never opened."""
    folder = Path(folder)
    root = folder.resolve()
    return [
        path
        for path in sorted(folder.rglob("*"))
        if path.is_file() and _is_pickle(path, read=_resolves_inside(path, root))
    ]


def _pickle_problems(folder: Path) -> list[str]:
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
    return _pickle_problems(folder) + _check_contents(folder)


def _check_contents(folder: Path) -> list[str]:
    """Every reason the model files in `folder` would not make a complete repo (all but the pickle search)."""
    problems = _check_config_and_code(folder)
    try:
        check_config_file(folder / "config.json")
    except ModelFolderError:
        pass  # reported above; the weights and tokenizer cannot be judged without a config
    else:
        problems += _check_weights(folder)
        problems += _check_tokenizer(folder)
    if not (folder / "generation_config.json").is_file():
        problems.append(
            "generation_config.json is missing: it carries the paper's decoding; `save_pretrained` writes it."
        )
    else:
        try:
            GenerationConfig.from_pretrained(folder)
        except Exception as error:  # noqa: BLE001
            problems.append(f"generation_config.json does not load: {error}")
    return problems + _check_card(folder)


# -- what a push sends ----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PushPlan:
    """What a push of `folder` sends, after every check passed (`plan_push`).

    `files` maps each file's name in the repo to its size in bytes; `left_out` names the folder's other top-level
    entries (a folder with a trailing `/`); `modified_code` names the code files that differ from the installed
    package's (pushed only with `allow_modified_code`); `card` is the README.md rendered for a folder without one.
    """

    folder: Path
    files: dict[str, int]
    left_out: tuple[str, ...] = ()
    modified_code: tuple[str, ...] = ()
    card: str | None = None
    # name -> the file whose bytes are sent (a link inside the folder resolved)
    sources: dict[str, Path] = dataclasses.field(default_factory=dict, repr=False)

    def notes(self) -> list[str]:
        """One line each for what a user should know before it is sent: what stays behind, modified code, the card."""
        lines = []
        if self.left_out:
            lines.append(f"left out (not part of a model repo): {', '.join(self.left_out)}")
        if self.modified_code:
            lines.append(
                f"pushing modified code files (allowed): {', '.join(self.modified_code)}; they differ from the "
                f"installed vanilla_transformer's, and every downloader runs them with trust_remote_code=True"
            )
        if self.card is not None:
            lines.append("README.md: rendered from the run's records (the folder has no card)")
        return lines

    def listing(self) -> list[str]:
        """The files to send, one `size name` line each, under a line with their count and total size."""
        total = sum(self.files.values())
        width = len(str(max(self.files.values(), default=0)))
        return [f"{len(self.files)} file(s), {total} bytes:"] + [
            f"  {size:>{width}}  {name}" for name, size in self.files.items()
        ]


def _shard_names(index: Path) -> tuple[list[str], list[str]]:
    """The shard files a model.safetensors.index.json names, and a problem for each that push could not send."""
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        names = sorted(set(weight_map.values()))
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError):
        return [], []  # from_pretrained reports the broken index when the folder is checked
    shards, problems = [], []
    for name in names:
        if isinstance(name, str) and name.endswith(".safetensors") and Path(name).name == name and "\\" not in name:
            shards.append(name)
        else:
            problems.append(
                f"{SAFE_WEIGHTS_INDEX_NAME} names the shard {name!r}, which push does not send: shards are "
                f".safetensors files beside the index; re-save the model with save_pretrained."
            )
    return shards, problems


def _impossible_values_problem(name: str, path: Path) -> str | None:
    """A problem naming the tensors of a safetensors file that hold NaN, ±Inf or absurd values (`loading.bad_values`;
    None when there are none); the file is read one tensor at a time."""
    bad = []
    with safe_open(str(path), framework="pt") as handle:
        for key in handle.keys():
            if problem := bad_values(handle.get_tensor(key)):
                bad.append((key, problem))
    if not bad:
        return None
    key, problem = bad[0]
    more = f" (and {len(bad) - 1} more tensor(s): {', '.join(k for k, _ in bad[1:4])})" if len(bad) > 1 else ""
    return (
        f"{name} holds impossible weights: tensor {key!r} has {problem}{more}; the training diverged (or the file "
        f"was damaged) and the model would translate to garbage: push a checkpoint saved before the loss became NaN, "
        f"or train again with a lower learning rate or more warmup."
    )


def _weights_problems(sources: dict[str, Path], folder: Path) -> list[str]:
    """Weights files that fail their `.sha256` or are not complete safetensors files, or hold NaN/Inf."""
    problems = []
    for name in sorted(sources):
        if not name.endswith(".safetensors"):
            continue
        path = folder / name  # beside its own .sha256 (the one that is sent)
        try:
            check_safetensors_file(path)
        except ModelFolderError as error:
            problems.append(str(error) if name in str(error) else f"{name}: {error}")
            continue
        problem = _impossible_values_problem(name, path)
        if problem:
            problems.append(problem)
    return problems


def _packaged_code(name: str) -> bytes | None:
    """The installed package's own copy of a code file (None if this install lacks it)."""
    try:
        return (resources.files(__package__) / name).read_bytes()
    except OSError:
        return None


def _modified_code(sources: dict[str, Path]) -> list[str]:
    return [
        name
        for name in CODE_FILES
        if name in sources and _packaged_code(name) not in (None, sources[name].read_bytes())
    ]


def _stage(plan: PushPlan, staging: Path) -> Path:
    """Lay out exactly the files of `plan` in the empty folder `staging` (links to them where the system allows,
    copies otherwise), so that what is checked, and what is uploaded, is only what the plan lists."""
    for name, source in plan.sources.items():
        try:
            os.symlink(source, staging / name)
        except OSError:  # Windows without the symlink privilege
            shutil.copy2(source, staging / name)
    if plan.card is not None:
        (staging / "README.md").write_bytes(plan.card.encode("utf-8"))
    return staging


def _check_repo_id(repo_id: str) -> None:
    if repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise ValueError(f"repo_id={repo_id!r} is not of the form namespace/name: e.g. --repo-id your-name/my-model.")


def plan_push(folder: str | Path, repo_id: str | None = None, *, allow_modified_code: bool = False) -> PushPlan:
    """Check `folder` and list what a push would send; raises `FolderNotReadyError` (every problem, one line each).

    The rules, for the folder's top-level entries:

    - Sent: the `MODEL_FILES` that are files, the shards its model.safetensors.index.json names, and the `.sha256`
      of each weights file. Nothing else: other files and every subfolder (`runs/`, `checkpoint-*/`, `.cache/`,
      credentials, optimizer state) are left out and named in `PushPlan.left_out`, not refused, so that a training
      folder pushes as it is. A pickle anywhere under the folder is refused all the same (`find_pickles`).
    - Links: a link inside the folder to a file inside it is read like the file. A link whose target resolves
      outside the folder is never followed: with the name of a file that would be sent it is refused (the user
      meant it to be sent, and sending a copy of something elsewhere on the machine is a decision to make by copying
      the file in); with any other name it is left out like any other extra file.
    - Weights: refused when a weights file fails its `.sha256`, is not a complete safetensors file, or holds NaN or
      ±Inf in any floating tensor.
    - Remote code: a code file that differs from the installed package's copy is refused (every downloader runs it
      with trust_remote_code=True) unless `allow_modified_code`; then it is sent and `PushPlan.modified_code` says so.
    - The folder's checks (`validate_folder`) run on exactly the files that would be sent, so a model that only
      loads thanks to a file left out is refused rather than pushed broken.

    A folder without README.md gets a card rendered from its run's records (`card_for_folder`), held in
    `PushPlan.card`: nothing is written to the folder here.
    """
    folder = Path(folder)
    if repo_id is not None:
        _check_repo_id(repo_id)
    if not folder.is_dir():
        raise FolderNotReadyError(folder, validate_folder(folder))
    root = folder.resolve()
    entries = {path.name: path for path in sorted(folder.iterdir())}
    wanted = set(MODEL_FILES) | {SAFE_WEIGHTS_NAME + CHECKSUM_SUFFIX}
    problems = []

    def escapes(name: str) -> bool:
        path = entries.get(name)
        return path is not None and path.is_symlink() and not _resolves_inside(path, root)

    def refuse_link(name: str) -> str:
        link = entries[name]
        try:
            target = link.resolve()
        except (OSError, RuntimeError):  # a link loop
            return f"{name} is a link that never reaches a file (a loop of links): put the file itself in its place."
        return (
            f"{name} is a link to {target}, outside the folder, and push never follows a link out of the folder: "
            f"copy the file into the folder (cp --remove-destination {target} {link}) if it belongs to the model."
        )

    index = SAFE_WEIGHTS_INDEX_NAME
    if index in entries and not escapes(index) and entries[index].is_file():
        shards, shard_problems = _shard_names(entries[index])
        problems += shard_problems
        wanted |= {name for shard in shards for name in (shard, shard + CHECKSUM_SUFFIX)}
    problems += [refuse_link(name) for name in sorted(wanted) if escapes(name)]
    if problems:  # nothing is read through a link out of the folder, not even to check it
        raise FolderNotReadyError(folder, problems)

    sources, left_out = {}, []
    for name, path in entries.items():
        if name in wanted and path.is_file():
            sources[name] = path.resolve()
        elif escapes(name):
            left_out.append(f"{name} (a link out of the folder)")
        else:
            left_out.append(f"{name}/" if path.is_dir() else name)
    card = None
    if "README.md" not in entries:
        rendered = card_for_folder(folder, repo_id)
        card = None if rendered is None else str(rendered)

    problems += _pickle_problems(folder)
    problems += _weights_problems(sources, folder)
    modified = _modified_code(sources)
    if not allow_modified_code:
        problems += [
            f"{name} differs from the installed vanilla_transformer's own copy ({resources.files(__package__) / name})"
            f", and every downloader runs it with trust_remote_code=True: re-save the model with this package "
            f"(save_pretrained copies its code files) or copy that file over it; pass --allow-modified-code "
            f"(allow_modified_code=True) if you changed it on purpose."
            for name in modified
        ]
    files = {name: path.stat().st_size for name, path in sources.items()}
    if card is not None:
        files["README.md"] = len(card.encode("utf-8"))
    plan = PushPlan(
        folder=root,
        files=dict(sorted(files.items())),
        left_out=tuple(left_out),
        modified_code=tuple(modified),
        card=card,
        sources=sources,
    )
    with tempfile.TemporaryDirectory(prefix="vanilla-transformer-push-") as scratch:
        staging = _stage(plan, Path(scratch))
        # the checks name the staging folder where an error message quotes a path: show the user's folder instead
        problems += [problem.replace(str(staging), str(folder)) for problem in _check_contents(staging)]
    if problems:
        raise FolderNotReadyError(folder, problems)
    return plan


# -- pushing --------------------------------------------------------------------------------------------------------


def _explain(error: HfHubHTTPError, repo_id: str, endpoint: str, revision: str | None, create_pr: bool) -> str:
    """What a refused request means for a push, and what to do about it."""
    status = error.response.status_code if error.response is not None else None
    message = error.response.headers.get("X-Error-Message", "") if error.response is not None else ""
    namespace = repo_id.split("/")[0]
    if status == 401 and message == INVALID_TOKEN:
        return (
            f"the Hub at {endpoint} refused the token (401: invalid credentials): set HF_TOKEN or run "
            f"`hf auth login` with a write token for {namespace!r}."
        )
    if isinstance(error, RevisionNotFoundError):
        return (
            f"{repo_id} has no branch {revision!r}: push with --revision {revision} (without --create-pr) to "
            f"create it, or target an existing branch."
        )
    if isinstance(error, RepositoryNotFoundError):
        hint = (
            "--create-pr opens a pull request on an existing repo: push once without --create-pr to create it"
            if create_pr
            else "check the name, and that the token (HF_TOKEN) belongs to an account that can see it"
        )
        return f"{repo_id} was not found at {endpoint} (or the token cannot see it): {hint}."
    if status == 401:
        return f"the Hub at {endpoint} needs a token to push: set HF_TOKEN or run `hf auth login`."
    if status == 403:
        return f"the token may not write to {namespace!r} at {endpoint}: use a write token of that account or org."
    return f"the Hub at {endpoint} refused the push of {repo_id}: {error}"


def push_folder(
    folder: str | Path,
    repo_id: str,
    *,
    private: bool = False,
    revision: str | None = None,
    create_pr: bool = False,
    commit_message: str | None = None,
    token: str | None = None,
    allow_modified_code: bool = False,
    plan: PushPlan | None = None,
) -> CommitInfo:
    """Check `folder` (`plan_push`: what is sent, what is left out, what is refused), then upload exactly the files
    of its plan to `repo_id` (`namespace/name`) in one commit.

    A card rendered for a folder without one is also saved as the folder's README.md. The repo is created when
    missing (`private` applies then) and `revision` is a branch, created from `main` when missing. With `create_pr`
    the commit becomes a pull request against `revision` (default `main`) of an existing repo. `plan` is
    `plan_push`'s answer for this folder, when the caller has it already (the CLI shows it before pushing), so that
    the checks do not run twice. Raises `FolderNotReadyError` (every problem, nothing sent) or `HubPushError` (the
    Hub refused; the remote is unchanged). The endpoint and token come from `HF_ENDPOINT` and `HF_TOKEN` unless
    `token` is given.
    """
    folder = Path(folder)
    _check_repo_id(repo_id)
    if plan is None:
        plan = plan_push(folder, repo_id, allow_modified_code=allow_modified_code)
    elif plan.folder != folder.resolve():
        raise ValueError(f"the plan is for {plan.folder}, not {folder}: pass plan_push's answer for this folder.")
    if plan.card is not None and not os.path.lexists(folder / "README.md"):
        (folder / "README.md").write_bytes(plan.card.encode("utf-8"))  # the folder keeps the card it was pushed with
    description = None
    if plan.modified_code:
        description = (
            f"These code files differ from vanilla_transformer's own (pushed with --allow-modified-code): "
            f"{', '.join(plan.modified_code)}."
        )

    api = HfApi(token=token)
    try:
        if create_pr:
            api.repo_info(repo_id, revision=revision)  # a pull request needs an existing repo and branch
        else:
            api.create_repo(repo_id, private=private, exist_ok=True)
            if revision not in (None, "main"):
                api.create_branch(repo_id, branch=revision, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="vanilla-transformer-push-") as scratch:
            return api.upload_folder(
                repo_id=repo_id,
                folder_path=_stage(plan, Path(scratch)),
                revision=revision,
                create_pr=create_pr,
                commit_message=commit_message or f"Upload {plan.folder.name}",
                commit_description=description,
            )
    except HfHubHTTPError as error:
        raise HubPushError(_explain(error, repo_id, api.endpoint, revision, create_pr)) from error
