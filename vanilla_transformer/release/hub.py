"""Push a model folder to the Hugging Face Hub: check it and list what a push sends (`plan_push`), then send exactly
that with `HfApi.upload_folder(allow_patterns=...)` (`push_folder`), explaining what the Hub refuses."""

import dataclasses
import glob
import json
import math
import os
from importlib import resources
from pathlib import Path

from huggingface_hub import CommitInfo, HfApi, ModelCard
from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError
from huggingface_hub.utils import HFValidationError, validate_repo_id
from safetensors import safe_open
from transformers.utils import SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME

from ..errors import FolderNotReadyError, HubPushError, ModelFolderError, VanillaTransformerError
from ..files.loading import CHECKSUM_SUFFIX, index_shards
from ..files.model_card import card_from_release_record, card_from_training_log, dataset_id
from ..training.checkpoints import list_checkpoints
from .folder_checks import CODE_FILES, check_contents, pickle_problems, resolves_inside, validate_folder

# What a push sends at the top level (besides the shards an index names and each weights file's `.sha256`): what
# `from_pretrained(repo_id, trust_remote_code=True)` and `AutoTokenizer` read, the card and the scores it shows.
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

MODEL_CODE = resources.files(f"{__package__.rpartition('.')[0]}.model")
INVALID_TOKEN = "Invalid credentials in Authorization header"  # the Hub's words for a token it does not know


@dataclasses.dataclass(frozen=True)
class PushPlan:
    """What a push of `folder` sends: each file's name and size, the top-level entries left out, the code files that
    differ from the installed package's, and the README.md rendered for a folder without one."""

    folder: Path
    files: dict[str, int]
    left_out: tuple[str, ...] = ()
    modified_code: tuple[str, ...] = ()
    card: str | None = None

    def notes(self) -> list[str]:
        lines = []
        if self.left_out:
            lines.append(f"left out (not part of a model repo): {', '.join(self.left_out)}")
        if self.modified_code:
            lines.append(
                f"pushing modified code files (allowed): {', '.join(self.modified_code)}; every downloader runs them "
                f"with trust_remote_code=True"
            )
        if self.card is not None:
            lines.append("README.md: rendered from the run's records (the folder has no card)")
        return lines

    def listing(self) -> list[str]:
        width = len(str(max(self.files.values(), default=0)))
        return [f"{len(self.files)} file(s), {sum(self.files.values())} bytes:"] + [
            f"  {size:>{width}}  {name}" for name, size in self.files.items()
        ]


def _shard_names(index: Path) -> tuple[list[str], list[str]]:
    """The shards an index names, and a problem for each that push could not send."""
    try:
        names = index_shards(index)
    except ModelFolderError:
        return [], []  # reported when the folder is checked
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


def check_repo_id(repo_id: str) -> None:
    """Refuse a repo id other than `namespace/name` in the characters the Hub allows: huggingface_hub's
    `validate_repo_id`, which alone also takes a bare `name` (a repo of the token's user; a push names its owner)."""
    try:
        if repo_id.count("/") != 1 or not all(repo_id.split("/")):
            raise HFValidationError("not of the form namespace/name")
        validate_repo_id(repo_id)
    except HFValidationError as error:
        reason = str(error).splitlines()[0].rstrip(".")
        raise VanillaTransformerError(
            f"{repo_id!r} is not a Hub repo id ({reason}): give namespace/name, e.g. your-name/my-model"
        ) from None


def plan_push(folder: str | Path, repo_id: str | None = None, *, allow_modified_code: bool = False) -> PushPlan:
    """Check `folder` and list what a push would send; raises `FolderNotReadyError` (every problem, one line each).

    Sent: the top-level `MODEL_FILES`, the shards the index names and each weights file's `.sha256`; everything else
    is left out, not refused, so that a training folder pushes as it is (a pickle anywhere under it is refused). A
    link out of the folder is never followed: refused under the name of a file that would be sent, else left out.
    Nothing is written to the folder here: a rendered card is held in `PushPlan.card`.
    """
    folder = Path(folder)
    if repo_id is not None:
        check_repo_id(repo_id)
    if not folder.is_dir():
        raise FolderNotReadyError(folder, validate_folder(folder))
    root = folder.resolve()
    entries = {path.name: path for path in sorted(folder.iterdir())}
    wanted = set(MODEL_FILES) | {SAFE_WEIGHTS_NAME + CHECKSUM_SUFFIX}
    problems = []

    def escapes(name: str) -> bool:
        path = entries.get(name)
        return path is not None and path.is_symlink() and not resolves_inside(path, root)

    def refuse_link(name: str) -> str:
        link = entries[name]
        try:
            target = link.resolve()
        except (OSError, RuntimeError):  # a link loop
            return f"{name} is a link that never reaches a file (a loop of links): put the file itself in its place."
        return (
            f"{name} is a link to {target}, outside the folder, which push never follows: copy the file into the "
            f"folder (cp --remove-destination {target} {link})."
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
    rendered = card_for_folder(folder, repo_id) if "README.md" not in entries else None
    card = None if rendered is None else str(rendered)

    problems += pickle_problems(folder)
    modified = [
        name
        for name in CODE_FILES
        if name in sources
        and (MODEL_CODE / name).is_file()
        and (MODEL_CODE / name).read_bytes() != sources[name].read_bytes()
    ]
    if not allow_modified_code:
        problems += [
            f"{name} differs from the installed vanilla_transformer's own copy ({MODEL_CODE / name})"
            f", and every downloader runs it with trust_remote_code=True: copy that file over it, or pass "
            f"--allow-modified-code (allow_modified_code=True) if you changed it on purpose."
            for name in modified
        ]
    files = {name: path.stat().st_size for name, path in sources.items()}
    if card is not None:
        files["README.md"] = len(card.encode("utf-8"))
    problems += check_contents(folder, card)
    if problems:
        raise FolderNotReadyError(folder, problems)
    return PushPlan(root, dict(sorted(files.items())), tuple(left_out), tuple(modified), card)


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
    """Upload exactly the files of `plan` (`plan_push`'s when not given) to `repo_id` in one commit; a rendered card
    is also saved as the folder's README.md. The repo is created when missing (`private` applies then), and `revision`
    is a branch, created from `main` when missing; `create_pr` opens a pull request against `revision` of an existing
    repo. Raises `FolderNotReadyError` (nothing sent) or `HubPushError` (the Hub refused; the remote is unchanged)."""
    folder = Path(folder)
    check_repo_id(repo_id)
    if plan is None:
        plan = plan_push(folder, repo_id, allow_modified_code=allow_modified_code)
    elif plan.folder != folder.resolve():
        raise VanillaTransformerError(
            f"the plan is for {plan.folder}, not {folder}: pass plan_push's answer for this folder."
        )
    if plan.card is not None and not os.path.lexists(folder / "README.md"):
        (folder / "README.md").write_bytes(plan.card.encode("utf-8"))  # the folder keeps the card it was pushed with
    modified = ", ".join(plan.modified_code)
    description = f"These code files differ from vanilla_transformer's own (--allow-modified-code): {modified}."

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
            allow_patterns=[glob.escape(name) for name in plan.files],  # top-level names: nothing else is offered
            revision=revision,
            create_pr=create_pr,
            commit_message=commit_message or f"Upload {plan.folder.name}",
            commit_description=description if modified else None,
        )
    except HfHubHTTPError as error:
        raise HubPushError(_explain(error, repo_id, api.endpoint, revision, create_pr)) from error


def _count_parameters(weights: Path) -> int:  # as stored (tied matrices once), from the header only
    with safe_open(weights, framework="pt") as handle:
        return sum(math.prod(handle.get_slice(key).get_shape()) for key in handle.keys())


def card_for_folder(folder: str | Path, repo_id: str | None = None) -> ModelCard | None:
    """A card rendered from the folder's run records (a release's `results.json`, or a run's newest
    `trainer_state.json` and its `preset.json`); None when there are none."""
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
