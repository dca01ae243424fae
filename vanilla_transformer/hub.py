"""Share a trained model on the Hugging Face Hub: check that a folder is complete before anything is sent, render its
model card from the template shipped with the package (`templates/model_card.md`), and push it with `huggingface_hub`
(to a new or existing repo, a branch, or as a pull request).

A complete folder loads anywhere with `AutoModelForSeq2SeqLM.from_pretrained(repo_id, trust_remote_code=True)`:
`model.safetensors` (no pickles), `config.json` whose `auto_map` names the two code files, the code files, tokenizer
files, `generation_config.json` (the paper's decoding), and a `README.md` card whose YAML metadata carries the license
(the training data's terms where it has its own), languages, the Hub datasets that hold the training data (none when
none does) and `model-index` results.
"""

import ast
import json
import zipfile
from importlib import resources
from pathlib import Path

import jinja2
from huggingface_hub import CommitInfo, EvalResult, HfApi, ModelCard, ModelCardData
from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError
from safetensors import safe_open
from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer, GenerationConfig

from .checkpoints import list_checkpoints
from .data.multi30k import COMMIT as MULTI30K_COMMIT

# package data (pyproject.toml), so that an installed wheel renders cards as a checkout does
CARD_TEMPLATE = resources.files(__package__) / "templates" / "model_card.md"
CODE_FILES = (
    "configuration_vanilla_transformer.py",
    "generation_vanilla_transformer.py",
    "modeling_vanilla_transformer.py",
)
AUTO_CLASSES = ("AutoConfig", "AutoModel", "AutoModelForSeq2SeqLM")
# names under which PyTorch/NumPy/joblib write pickles; loading one runs arbitrary code, so none may be pushed
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".joblib", ".npy", ".npz")
LANGUAGE_NAMES = {"en": "English", "de": "German", "fr": "French", "cs": "Czech"}
# The Hub datasets that hold a corpus we train on, for the card's `datasets` (no entry: no Hub dataset holds it, and
# the card names none). `bentrevett/multi30k` is the WMT16 release of Multi30k Task 1: its train and test splits are
# our train and test2016; its validation has the WMT16 val.de, which the official files corrected in 61 lines.
HUB_DATASETS = {"multi30k": "bentrevett/multi30k", "wmt14": "wmt/wmt14"}
# Weights inherit the terms of their training data: (license, license_name, license_link) for data with terms of its
# own; other data leaves the card's license to the caller (apache-2.0, the code's, by default).
DATA_TERMS = {
    "multi30k": ("other", "multi30k-non-commercial", "https://github.com/multi30k/dataset#use-of-the-data"),
}
DATASET_TITLES = {
    "multi30k": "Multi30k Task 1",
    "builtin-en-de-grammar": "the built-in English→German grammar corpus",
    "wmt14": "WMT 2014",
}
EXAMPLES = {"en": "A man is riding a bike down the street.", "de": "Ein Mann fährt mit dem Fahrrad die Straße entlang."}
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
) -> ModelCard:
    """The model card from the package's template, `vanilla_transformer/templates/model_card.md`.

    `results` maps a split to its scores (`sacrebleu`, `chrf`, optionally `tokenized_bleu` and `signature`); splits
    named with a slice (`test2016[:50]`) stay out of the `model-index`. `training` holds `summary`,
    `hyperparameters` and optionally `status`. The YAML metadata (and its `model-index`) is written by
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
    )
    return ModelCard(text)


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
        record = json.loads((folder / "results.json").read_text())
        # scripts/release.py writes results.json for Multi30k releases (it scores test2016 and test2017)
        return render_model_card(name, record["results"], record["training"], dataset="multi30k", repo_id=repo_id)
    candidates = [folder / "trainer_state.json"]
    for run in (folder, folder.parent):
        candidates += [checkpoint / "trainer_state.json" for checkpoint in reversed(list_checkpoints(run))]
    state_file = next((path for path in candidates if path.is_file()), None)
    if state_file is None or not (folder / "config.json").is_file() or not (folder / "model.safetensors").is_file():
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
        parameters=_count_parameters(folder / "model.safetensors"),
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
    path = folder / "config.json"
    if not path.is_file():
        return ["config.json is missing: save the model with `model.save_pretrained(folder)`."]
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        return [f"config.json is not valid JSON ({error}): save the model again with `save_pretrained`."]
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
    if not (folder / "model.safetensors").is_file():
        return ["model.safetensors is missing: save the model with `model.save_pretrained(folder)` (safetensors)."]
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
    if not any((folder / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        return ["the tokenizer files (tokenizer.json, tokenizer_config.json) are missing: `tokenizer.save_pretrained`."]
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
        config = AutoConfig.from_pretrained(folder)
    except Exception as error:  # noqa: BLE001
        return [f"AutoTokenizer cannot load the tokenizer files: {type(error).__name__}: {error}"]
    problems = []
    if len(tokenizer) > config.vocab_size:
        problems.append(
            f"the tokenizer has {len(tokenizer)} tokens but config.json's vocab_size is {config.vocab_size}: "
            f"ids past the embedding table would fail; save the tokenizer the model was trained with."
        )
    for token in ("pad", "eos"):
        ours, theirs = getattr(tokenizer, f"{token}_token_id"), getattr(config, f"{token}_token_id")
        if ours is not None and theirs is not None and ours != theirs:
            problems.append(f"the tokenizer's {token}_token_id is {ours} but config.json says {theirs}.")
    return problems


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


def _is_pickle(path: Path) -> bool:
    if path.name.endswith(PICKLE_SUFFIXES):
        return True
    if path.suffix == ".safetensors":  # its first bytes are a header length, checked by loading it instead
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
    """Files anywhere under `folder` that are (or are named like) pickles: `torch.save` output, `.bin`, `.pkl`, ..."""
    return [path for path in sorted(Path(folder).rglob("*")) if path.is_file() and _is_pickle(path)]


def validate_folder(folder: str | Path) -> list[str]:
    """Every reason the folder would not make a complete, safe model repo; an empty list when it is ready."""
    folder = Path(folder)
    if not folder.is_dir():
        return [
            f"{folder} is not a folder: pass the folder written by save_pretrained or `vanilla-transformer release`."
        ]
    problems = [
        f"{path.relative_to(folder)} is a pickle (loading it runs arbitrary code): remove it; the weights belong in "
        f"model.safetensors."
        for path in find_pickles(folder)
    ]
    problems += _check_config_and_code(folder)
    if (folder / "config.json").is_file() and not any("config.json is not valid" in p for p in problems):
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
) -> CommitInfo:
    """Check `folder` (rendering its card first when it has none and its run left records), then upload it to
    `repo_id` (`namespace/name`) in one commit.

    The repo is created when missing (`private` applies then) and `revision` is a branch, created from `main` when
    missing. With `create_pr` the commit becomes a pull request against `revision` (default `main`) of an existing
    repo. Raises `FolderNotReadyError` (every problem, nothing sent) or `HubPushError` (the Hub refused; the remote
    is unchanged). The endpoint and token come from `HF_ENDPOINT` and `HF_TOKEN` unless `token` is given.
    """
    folder = Path(folder)
    if repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise ValueError(f"repo_id={repo_id!r} is not of the form namespace/name: e.g. --repo-id your-name/my-model.")
    if folder.is_dir() and not (folder / "README.md").exists():
        card = card_for_folder(folder, repo_id)
        if card is not None:
            card.save(folder / "README.md")
    problems = validate_folder(folder)
    if problems:
        raise FolderNotReadyError(folder, problems)

    api = HfApi(token=token)
    try:
        if create_pr:
            api.repo_info(repo_id, revision=revision)  # a pull request needs an existing repo and branch
        else:
            api.create_repo(repo_id, private=private, exist_ok=True)
            if revision not in (None, "main"):
                api.create_branch(repo_id, branch=revision, exist_ok=True)
        return api.upload_folder(
            repo_id=repo_id,
            folder_path=folder,
            revision=revision,
            create_pr=create_pr,
            commit_message=commit_message or f"Upload {folder.resolve().name}",
            ignore_patterns=[".*", "**/.*", "__pycache__", "**/__pycache__/**"],
        )
    except HfHubHTTPError as error:
        raise HubPushError(_explain(error, repo_id, api.endpoint, revision, create_pr)) from error
