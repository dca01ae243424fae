"""Hub sharing over real HTTP: `vanilla_transformer.release.hub`, `vanilla-transformer push`, `model.push_to_hub` and
the trainer's `push_to_hub`, against the Hub stand-in of `tests/hub_server.py` that `conftest.py` starts on 127.0.0.1
and points the real `huggingface_hub` client at. Pushed repos are loaded back by repo id in a fresh process where
`vanilla_transformer` cannot be imported, and must translate exactly as the local folder does.

`.ci/run` runs this module on the oldest supported transformers (5.15.0) as well as the latest, so the pushed remote
code is also checked to load and generate on both.
"""

import ast
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import HUB, HUB_USER, tiny_config, tiny_model
from huggingface_hub import HfApi, ModelCard, hf_hub_download, snapshot_download
from safetensors.torch import load_file, save_file
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, DataCollatorForSeq2Seq, Seq2SeqTrainingArguments

from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.cli.main import main as cli_main
from vanilla_transformer.data.corpora import load_builtin
from vanilla_transformer.data.tokenized import tokenize_pairs
from vanilla_transformer.errors import FolderNotReadyError, HubPushError
from vanilla_transformer.files.loading import write_checksums
from vanilla_transformer.files.model_card import render_model_card, training_hyperparameters
from vanilla_transformer.inference.scoring import compute_metrics_for_trainer
from vanilla_transformer.release.folder_checks import CODE_FILES, validate_folder
from vanilla_transformer.release.hub import card_for_folder, check_repo_id, plan_push, push_folder
from vanilla_transformer.release.remote_code import _BLOCK_PACKAGE, translate_without_package
from vanilla_transformer.training.optimization import label_smoothed_loss
from vanilla_transformer.training.presets import get_training_preset
from vanilla_transformer.training.trainer import VanillaTransformerTrainer

REPO = Path(__file__).resolve().parents[2]
RELEASE = REPO / "model_cards" / "vanilla-transformer-multi30k-en-de"
RELEASE_EN_ZH = REPO / "model_cards" / "vanilla-transformer-tatoeba-en-zh"
SENTENCES = [pair["en"] for pair in load_builtin("test")["translation"][:4]]
STEPS = 150  # enough for German-looking output that differs from sentence to sentence
# what save_pretrained, tokenizer.save_pretrained, a card and write_checksums leave in a folder: a push sends all of it
MODEL_FOLDER_FILES = {
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "model.safetensors.sha256",
    "tokenizer.json",
    "tokenizer_config.json",
    "README.md",
    *CODE_FILES,
}


def local_translations(folder: Path, sentences: list[str] = SENTENCES) -> dict:
    """What the folder translates to with the installed package, as the clean process reports it."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    ids = model.generate(**tokenizer(sentences, return_tensors="pt", padding=True))
    return {"ids": ids.tolist(), "texts": tokenizer.batch_decode(ids, skip_special_tokens=True)}


def save_model_folder(source: Path, destination: Path, card_from: Path) -> Path:
    """A shareable folder (model, tokenizer, code files, card) from a checkpoint, which itself holds pickles."""
    AutoModelForSeq2SeqLM.from_pretrained(source).save_pretrained(destination)
    AutoTokenizer.from_pretrained(source).save_pretrained(destination)
    shutil.copy(card_from / "README.md", destination / "README.md")
    return destination


def exit_message(stop: pytest.ExceptionInfo, capsys: pytest.CaptureFixture) -> tuple[int, str]:
    """The exit status and the `error: ...` text of a command that ended with SystemExit: the CLI prints a command's
    `sys.exit("error: ...")` and exits with status 2 (the message may also travel in the SystemExit itself)."""
    code = stop.value.code
    if isinstance(code, str):
        return 1, code
    return code, capsys.readouterr().err.strip().splitlines()[-1]


def push_command(capsys: pytest.CaptureFixture, *argv: str) -> SimpleNamespace:
    """`vanilla-transformer push ARGV` in this process: its exit status, stdout, and the error line (if any)."""
    try:
        cli_main(["push", *argv])
    except SystemExit as stop:
        captured = capsys.readouterr()
        code, error = (1, stop.code) if isinstance(stop.code, str) else (stop.code, captured.err.strip())
        return SimpleNamespace(code=code, out=captured.out, error=error.splitlines()[-1] if error else "", err=error)
    captured = capsys.readouterr()
    return SimpleNamespace(code=0, out=captured.out, error="", err=captured.err)


def hub_activity() -> tuple:
    """What the Hub stand-in has seen so far: requests, offered or committed files, repos."""
    return len(HUB.state.requests), len(HUB.state.uploads), set(HUB.state.repos)


def uploaded_paths(repo_id: str) -> set[str]:
    """Every path a client offered or committed to `repo_id`."""
    return {path for repo, path in HUB.state.uploads if repo == repo_id}


@pytest.fixture(scope="module")
def model_folder(builtin_tokenizer, tmp_path_factory) -> Path:
    """A complete folder of an untrained tiny model (model, tokenizer, code files, card, the weights' checksum)."""
    folder = tmp_path_factory.mktemp("model") / "model"
    torch.manual_seed(0)
    model = VanillaTransformerForConditionalGeneration(tiny_config(vocab_size=len(builtin_tokenizer)))
    model.save_pretrained(folder)
    builtin_tokenizer.save_pretrained(folder)
    training = {"summary": "untrained", "hyperparameters": training_hyperparameters(model.config.to_dict())}
    results = {"valid": {"sacrebleu": 0.0, "chrf": 0.0}}
    render_model_card("tiny", results, training, dataset="builtin-en-de-grammar").save(folder / "README.md")
    write_checksums(folder)
    assert {path.name for path in folder.iterdir()} == MODEL_FOLDER_FILES
    return folder


@pytest.fixture
def folder(model_folder, tmp_path) -> Path:
    """A fresh copy of `model_folder` for one test to change."""
    return shutil.copytree(model_folder, tmp_path / "model")


@pytest.fixture(scope="module")
def api() -> HfApi:
    return HfApi()  # HF_ENDPOINT and HF_TOKEN come from conftest.py


@pytest.fixture(scope="module")
def run(builtin_tokenizer, tmp_path_factory) -> SimpleNamespace:
    """A tiny model trained with the project's trainer (`push_to_hub=True`, pushed at the end to `tester/trainer`),
    then laid out as `vanilla-transformer train` leaves a run: `preset.json`, `checkpoint-N/` with
    `trainer_state.json`, and the model folder `final/`."""
    run_dir = tmp_path_factory.mktemp("run")
    tokenizer = builtin_tokenizer
    train_set, _ = tokenize_pairs(load_builtin("train").select(range(512)), tokenizer, "en", "de", max_length=64)
    valid_set, _ = tokenize_pairs(load_builtin("valid").select(range(16)), tokenizer, "en", "de", max_length=64)
    torch.manual_seed(0)
    model = VanillaTransformerForConditionalGeneration(
        tiny_config(vocab_size=len(tokenizer), max_position_embeddings=128)
    )
    arguments = Seq2SeqTrainingArguments(
        output_dir=str(run_dir),
        max_steps=STEPS,
        learning_rate=3e-3,
        optim="adamw_torch",
        adam_beta2=0.98,
        weight_decay=0.0,
        save_strategy="steps",
        save_steps=STEPS // 2,
        eval_strategy="steps",
        eval_steps=STEPS,
        predict_with_generate=True,
        generation_num_beams=1,
        generation_max_length=40,
        per_device_eval_batch_size=16,
        report_to=[],
        disable_tqdm=True,
        use_cpu=True,
        push_to_hub=True,
        hub_model_id=f"{HUB_USER}/trainer",
        hub_strategy="end",
    )
    trainer = VanillaTransformerTrainer(
        model=model,
        args=arguments,
        train_dataset=train_set,
        eval_dataset=valid_set,
        processing_class=tokenizer,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100),
        compute_metrics=compute_metrics_for_trainer(tokenizer),
        compute_loss_func=label_smoothed_loss(0.1),
        max_tokens=1500,
        warmup_steps=10,
    )
    trainer.train()
    trainer_commit = trainer.push_to_hub(dataset="builtin-en-de-grammar")
    final = run_dir / "final"
    trainer.model.save_pretrained(final)  # as averaging writes it (trainer.save_model would push again)
    tokenizer.save_pretrained(final)
    preset = get_training_preset("demo", max_steps=STEPS, max_tokens=1500, warmup_steps=10)
    (run_dir / "preset.json").write_text(json.dumps(preset.as_dict()))  # what `train` records
    return SimpleNamespace(
        dir=run_dir,
        final=final,
        trainer=trainer,
        trainer_commit=trainer_commit,
        half=run_dir / f"checkpoint-{STEPS // 2}",
    )


@pytest.fixture(scope="module")
def script_push(run) -> SimpleNamespace:
    """`python -m vanilla_transformer push` run on the trained folder, which has no card yet."""
    assert not (run.final / "README.md").exists()
    repo_id = f"{HUB_USER}/tiny"
    command = [sys.executable, "-m", "vanilla_transformer", "push", str(run.final), "--repo-id", repo_id]
    completed = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert completed.returncode == 0, completed.stderr
    return SimpleNamespace(completed=completed, repo_id=repo_id)


@pytest.fixture(scope="module")
def model_api_push(run) -> str:
    """The libraries' own calls: `model.push_to_hub` and `tokenizer.push_to_hub` (transformers writes the card)."""
    repo_id = f"{HUB_USER}/model-api"
    AutoModelForSeq2SeqLM.from_pretrained(run.final).push_to_hub(repo_id)
    AutoTokenizer.from_pretrained(run.final).push_to_hub(repo_id)
    return repo_id


@pytest.fixture(scope="module")
def versions(run, tmp_path_factory) -> SimpleNamespace:
    """`tester/versions`: the halfway model, then the trained one on main; the halfway one again on branch `dev` and
    as pull request 1."""
    scratch = tmp_path_factory.mktemp("versions")
    old = save_model_folder(run.half, scratch / "old", card_from=run.dir)
    new = save_model_folder(run.dir, scratch / "new", card_from=run.dir)
    repo_id = f"{HUB_USER}/versions"
    return SimpleNamespace(
        repo_id=repo_id,
        old=old,
        new=new,
        first=push_folder(old, repo_id, commit_message="halfway"),
        second=push_folder(new, repo_id, commit_message="trained"),
        branch=push_folder(old, repo_id, revision="dev"),
        pull_request=push_folder(old, repo_id, create_pr=True, commit_message="go back"),
    )


@pytest.mark.slow
def test_push_script_publishes_the_folder_with_a_card_from_the_run(run, script_push, api):
    assert f"pushed {run.final} to {script_push.repo_id}" in script_push.completed.stdout
    # the missing card was rendered from the run's records: its dataset, languages, and last evaluation
    card = ModelCard.load(script_push.repo_id)  # over HTTP
    evaluation = [entry for entry in run.trainer.state.log_history if "eval_bleu" in entry][-1]
    # no Hub dataset holds the built-in corpus, so the card lists none; its results still name it
    assert card.data.datasets is None and card.data.language == ["en", "de"]
    assert {result.dataset_type for result in card.data.eval_results} == {"builtin-en-de-grammar"}
    assert card.data.license == "apache-2.0"
    assert {(r.dataset_split, r.metric_type): r.metric_value for r in card.data.eval_results} == {
        ("valid", "sacrebleu"): round(evaluation["eval_bleu"], 2),
        ("valid", "chrf"): round(evaluation["eval_chrf"], 2),
    }
    assert f'repo = "{script_push.repo_id}"' in card.text and "from_pretrained(repo, revision=revision" in card.text
    files = set(api.list_repo_files(script_push.repo_id))
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", *CODE_FILES} <= files
    assert not [name for name in files if name.endswith((".bin", ".pt", ".pth", ".pkl"))]


def test_trainer_push_to_hub_uploads_a_complete_repo(run, api, tmp_path):
    repo_id = f"{HUB_USER}/trainer"
    assert run.trainer_commit.oid == api.repo_info(repo_id).sha
    files = set(api.list_repo_files(repo_id))
    assert "training_args.bin" not in files and not [f for f in files if f.startswith("checkpoint-")]
    # the very checks the script makes before it pushes pass on what the trainer pushed
    snapshot = Path(snapshot_download(repo_id, local_dir=tmp_path / "snapshot"))
    assert validate_folder(snapshot) == []
    card = ModelCard.load(snapshot / "README.md")
    assert card.data.datasets is None and card.data.eval_results
    config = json.loads((snapshot / "config.json").read_text())
    assert set(config["auto_map"]) == {"AutoConfig", "AutoModel", "AutoModelForSeq2SeqLM"}


def test_trainer_refuses_per_checkpoint_pushes(tmp_path):
    arguments = Seq2SeqTrainingArguments(output_dir=str(tmp_path), push_to_hub=True, hub_model_id="x/y", report_to=[])
    requests = len(HUB.state.requests)
    with pytest.raises(ValueError, match="set hub_strategy='end'"):
        VanillaTransformerTrainer(model=tiny_model(), args=arguments, max_tokens=100, warmup_steps=1)
    assert HUB.state.requests[requests:] == []  # refused before the Trainer creates the repo


def test_model_push_to_hub_uploads_code_files_and_auto_map_and_the_card_completes_it(
    run, model_api_push, api, tmp_path
):
    repo_id = model_api_push
    before = Path(snapshot_download(repo_id, local_dir=tmp_path / "before"))
    assert {"config.json", "model.safetensors", "tokenizer.json", *CODE_FILES} <= {p.name for p in before.iterdir()}
    config = json.loads((before / "config.json").read_text())
    assert set(config["auto_map"]) == {"AutoConfig", "AutoModel", "AutoModelForSeq2SeqLM"}
    # transformers' generic card lacks the metadata; ours (license, languages, datasets, model-index) completes it
    problems = validate_folder(before)
    assert problems and all(problem.startswith("README.md") for problem in problems)
    card = card_for_folder(run.final, repo_id)
    # (`card.push_to_hub(repo_id)` does the same, but huggingface_hub 1.x validates it at huggingface.co itself)
    api.upload_file(path_or_fileobj=str(card).encode(), path_in_repo="README.md", repo_id=repo_id)
    assert validate_folder(snapshot_download(repo_id, local_dir=tmp_path / "after")) == []


def test_versions_branches_and_pull_requests_are_separate_revisions(versions, api):
    assert versions.pull_request.pr_revision == "refs/pr/1"
    refs = api.list_repo_refs(versions.repo_id, include_pull_requests=True)
    assert {b.name: b.target_commit for b in refs.branches} == {"main": versions.second.oid, "dev": versions.branch.oid}
    assert [p.ref for p in refs.pull_requests] == ["refs/pr/1"]
    assert [c.title for c in api.list_repo_commits(versions.repo_id)] == ["trained", "halfway", "initial commit"]
    # a folder already on the Hub makes no new commit (the client skips unchanged files)
    assert push_folder(versions.new, versions.repo_id).oid == versions.second.oid


@pytest.mark.slow
def test_every_pushed_repo_loads_by_repo_id_without_the_package(run, script_push, model_api_push, versions):
    """One clean process (no `vanilla_transformer`, an empty cache) downloads each repo and revision by id over
    HTTP and must translate exactly as the local folder it came from."""
    trained, old = local_translations(run.final), local_translations(versions.old)
    assert len(set(trained["texts"])) == len(SENTENCES) and all(trained["texts"])  # a model that really translates
    assert old != trained
    models = {
        "script": (script_push.repo_id, None),
        "trainer": (f"{HUB_USER}/trainer", None),
        "model.push_to_hub": (model_api_push, None),
        "first version": (versions.repo_id, versions.first.oid),
        "main": (versions.repo_id, "main"),
        "branch": (versions.repo_id, "dev"),
        "pull request": (versions.repo_id, "refs/pr/1"),
    }
    expected = [trained, trained, trained, old, trained, old, old]
    loaded = translate_without_package(SENTENCES, list(models.values()))
    assert dict(zip(models, loaded, strict=True)) == dict(zip(models, expected, strict=True))


def test_wrong_token_or_missing_repo_fail_clearly_and_leave_the_remote_unchanged(
    run, script_push, api, monkeypatch, capsys
):
    repo_id = script_push.repo_id

    def remote_state() -> tuple:
        commits = [c.commit_id for c in api.list_repo_commits(repo_id)]
        return commits, api.list_repo_refs(repo_id, include_pull_requests=True)

    before = remote_state()
    requests = len(HUB.state.requests)
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_token")
    with pytest.raises(SystemExit) as stop:
        cli_main(["push", str(run.final), "--repo-id", repo_id])
    code, message = exit_message(stop, capsys)
    assert code != 0 and re.match(r"error: the Hub at .* refused the token \(401: invalid credentials\)", message)
    monkeypatch.undo()
    with pytest.raises(HubPushError, match="refused the token"):
        push_folder(run.final, repo_id, token="hf_not_a_token", create_pr=True)
    with pytest.raises(HubPushError, match="not found .*--create-pr opens a pull request on an existing repo"):
        push_folder(run.final, f"{HUB_USER}/no-such-repo", create_pr=True)
    with pytest.raises(HubPushError, match="may not write to 'someone-else'"):
        push_folder(run.final, "someone-else/tiny")
    with pytest.raises(HubPushError, match="has no branch 'nope'"):
        push_folder(run.final, repo_id, revision="nope", create_pr=True)
    with pytest.raises(OSError, match="not a valid model identifier"):
        AutoModelForSeq2SeqLM.from_pretrained(f"{HUB_USER}/no-such-repo", trust_remote_code=True)

    assert remote_state() == before
    assert not api.repo_exists(f"{HUB_USER}/no-such-repo") and not api.repo_exists("someone-else/tiny")
    writes = [status for method, _, status in HUB.state.requests[requests:] if method in ("POST", "PUT", "DELETE")]
    assert writes and all(status >= 400 for status in writes)  # every write was refused


def test_an_incomplete_folder_gets_every_problem_and_nothing_is_sent(run, tmp_path):
    folder = tmp_path / "checkpoint"
    shutil.copytree(run.half, folder)  # a Trainer checkpoint: optimizer, scheduler, RNG and arguments are pickles
    (folder / "generation_config.json").unlink()
    config = json.loads((folder / "config.json").read_text())
    del config["auto_map"]["AutoModel"]
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "README.md").write_text("---\nlicense: apache-2.0\n---\n# a card without languages or results\n")
    (folder / "logs").mkdir()
    torch.save({"step": 1}, folder / "logs" / "state.dat")  # a pickle under an innocent name, in a subfolder
    requests = len(HUB.state.requests)

    with pytest.raises(FolderNotReadyError) as refused:
        push_folder(folder, f"{HUB_USER}/incomplete")
    problems = refused.value.problems
    pickles = {"optimizer.pt", "scheduler.pt", "rng_state.pth", "training_args.bin", "logs/state.dat"}
    assert {p.split(" ")[0] for p in problems if "is a pickle" in p} == pickles
    assert any(p.startswith("generation_config.json is missing") for p in problems)
    assert any("auto_map has no AutoModel entry" in p for p in problems)
    assert any("no `language`" in p for p in problems)
    assert any("no `model-index` results" in p for p in problems)
    assert len(problems) == len(pickles) + 4
    assert f"({len(problems)} problem(s)); nothing was pushed" in str(refused.value)
    assert HUB.state.requests[requests:] == []  # checked before any request


def test_large_weights_go_through_git_lfs(builtin_tokenizer, api, tmp_path):
    folder = tmp_path / "large"
    torch.manual_seed(0)
    model = VanillaTransformerForConditionalGeneration(tiny_config(vocab_size=6000, d_model=256, encoder_ffn_dim=128))
    model.save_pretrained(folder)
    builtin_tokenizer.save_pretrained(folder)
    training = {"summary": "untrained", "hyperparameters": training_hyperparameters(model.config.to_dict())}
    results = {"valid": {"sacrebleu": 0.0, "chrf": 0.0}}
    render_model_card("large", results, training, dataset="builtin-en-de-grammar").save(folder / "README.md")
    weights = folder / "model.safetensors"
    assert weights.stat().st_size > 10 * 2**20
    requests = len(HUB.state.requests)

    push_folder(folder, f"{HUB_USER}/large")
    sent = [(method, path.split("?")[0]) for method, path, _ in HUB.state.requests[requests:]]
    sha256 = hashlib.sha256(weights.read_bytes()).hexdigest()
    assert ("PUT", f"/_lfs/{HUB_USER}/large/{sha256}") in sent  # the bytes went to the LFS store, not the commit
    (info,) = api.get_paths_info(f"{HUB_USER}/large", ["model.safetensors"])
    assert info.lfs is not None and info.lfs.sha256 == sha256 and info.size == weights.stat().st_size
    downloaded = hf_hub_download(f"{HUB_USER}/large", "model.safetensors")
    assert hashlib.sha256(Path(downloaded).read_bytes()).hexdigest() == sha256


@pytest.mark.slow
def test_the_readme_snippet_loads_the_release_by_repo_id_without_a_prompt_or_warning(tmp_path):
    repo_id = f"{HUB_USER}/vanilla-transformer-multi30k-en-de"
    push_folder(RELEASE, repo_id)
    readme = (REPO / "README.md").read_text()
    snippet = readme.split("<!-- hub-snippet -->")[1].split("```python")[1].split("```")[0]
    by_id = snippet.replace('"model_cards/vanilla-transformer-multi30k-en-de"', repr(repo_id))
    assert by_id != snippet
    # a new machine: no vanilla_transformer, an empty cache, and nobody at the keyboard to answer a prompt; the
    # snippet as written, from the checkout's folder, then with the Hub id
    for code, folder in ((snippet, REPO), (by_id, tmp_path)):
        completed = subprocess.run(
            [sys.executable, "-c", _BLOCK_PACKAGE + code],
            cwd=folder,
            env=dict(os.environ, PYTHONPATH="", HF_HOME=str(tmp_path / "hf_home"), HF_HUB_DISABLE_PROGRESS_BARS="1"),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert completed.returncode == 0, completed.stderr[-3000:]
        assert completed.stderr.strip() == "", completed.stderr[-3000:]  # no "[y/N]" prompt, no warning
        (translation,) = ast.literal_eval(completed.stdout.strip().splitlines()[-1])
        assert translation.startswith("Ein Hund")


@pytest.mark.slow
def test_the_en_zh_release_loads_by_repo_id_and_translates_as_the_folder(tmp_path):
    """The English→Chinese release goes through the same round trip as the first: pushed over HTTP, downloaded by
    repo id into an empty cache by a process without `vanilla_transformer`, and decoded there as here."""
    repo_id = f"{HUB_USER}/{RELEASE_EN_ZH.name}"
    push_folder(RELEASE_EN_ZH, repo_id)
    sentences = ["I'm hungry.", "Where is the station?", "She reads a book every evening."]
    (loaded,) = translate_without_package(sentences, [(repo_id, None)])
    assert loaded == local_translations(RELEASE_EN_ZH, sentences)
    assert all(any("\u4e00" <= char <= "\u9fff" for char in text) for text in loaded["texts"])  # Chinese out


# -- a push sends only the model --------------------------------------------------------------------------------------


def test_a_push_sends_only_the_model_and_names_what_it_leaves_out(folder, tmp_path, api, capsys):
    """A training folder's extras stay behind, are named in one line, and never reach the Hub, not even offered."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "id_rsa").write_text("a private key")
    (folder / "credentials.json").write_text(json.dumps({"token": "hf_secret"}))
    (folder / "runs" / "Nov25").mkdir(parents=True)
    (folder / "runs" / "Nov25" / "events.out.tfevents.1.host").write_bytes(b"\x00" * 64)
    save_file({"exp_avg": torch.zeros(4, 4)}, folder / "optimizer.safetensors")  # optimizer state, not a pickle
    (folder / "notes.txt").write_text("lr 3e-3 diverged at step 900")
    (folder / "secrets").symlink_to(outside, target_is_directory=True)  # a link out of the folder, not allowlisted
    # a link inside the folder to a file inside it is read like the file
    (folder / "backup").mkdir()
    (folder / "tokenizer.json").rename(folder / "backup" / "tokenizer.json")
    (folder / "tokenizer.json").symlink_to(Path("backup") / "tokenizer.json")
    repo_id = f"{HUB_USER}/only-the-model"

    pushed = push_command(capsys, str(folder), "--repo-id", repo_id)
    assert pushed.code == 0, pushed.err
    left_out = [line for line in pushed.out.splitlines() if line.startswith("left out")]
    assert left_out == [
        "left out (not part of a model repo): backup/, credentials.json, notes.txt, optimizer.safetensors, runs/, "
        "secrets (a link out of the folder)"
    ]
    assert uploaded_paths(repo_id) == MODEL_FOLDER_FILES  # nothing else was even offered
    assert set(api.list_repo_files(repo_id)) == MODEL_FOLDER_FILES | {".gitattributes"}
    downloaded = hf_hub_download(repo_id, "tokenizer.json")
    assert Path(downloaded).read_bytes() == (folder / "backup" / "tokenizer.json").read_bytes()


def test_a_dry_run_lists_exactly_the_files_a_push_sends_and_sends_nothing(folder, capsys):
    (folder / "README.md").unlink()  # the card is rendered from results.json, and not written by a dry run
    shutil.copy(RELEASE / "results.json", folder / "results.json")
    (folder / "credentials.json").write_text("{}")
    (folder / "runs").mkdir()
    (folder / "runs" / "log.txt").write_text("step 1")
    repo_id = f"{HUB_USER}/dry-run"
    card = str(card_for_folder(folder, repo_id)).encode()
    expected = {path.name: path.stat().st_size for path in folder.iterdir() if path.name in MODEL_FOLDER_FILES}
    expected |= {"results.json": (folder / "results.json").stat().st_size, "README.md": len(card)}
    before = hub_activity()

    dry = push_command(capsys, str(folder), "--repo-id", repo_id, "--dry-run")
    assert dry.code == 0, dry.err
    assert hub_activity() == before  # not one request: no repo, no upload
    assert not (folder / "README.md").exists()
    listed = {}
    for line in dry.out.splitlines():
        if line.startswith("  "):
            size, name = line.split()
            listed[name] = int(size)
    assert listed == expected
    assert f"would send {len(expected)} file(s), {sum(expected.values())} bytes:" in dry.out
    assert "left out (not part of a model repo): credentials.json, runs/" in dry.out
    assert plan_push(folder, repo_id).files == expected

    # the push itself sends exactly that list
    pushed = push_command(capsys, str(folder), "--repo-id", repo_id)
    assert pushed.code == 0, pushed.err
    assert uploaded_paths(repo_id) == set(expected)
    assert (folder / "README.md").read_bytes() == card  # a real push keeps the card it sent, as before


def _set_one_weight(folder: Path, value: float) -> str:
    """Put `value` into one weight of model.safetensors (its checksum rewritten to match); returns the tensor's name."""
    path = folder / "model.safetensors"
    tensors = load_file(path)
    name = sorted(key for key, tensor in tensors.items() if tensor.dim() == 2)[-1]
    tensors[name].view(-1)[5] = value
    save_file(tensors, path, metadata={"format": "pt"})
    write_checksums(folder)
    return name


def _flip_a_tensor_byte(folder: Path) -> list[str]:
    path = folder / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x01  # tensor data: the safetensors file stays well-formed, only its checksum notices
    path.write_bytes(bytes(data))
    return ["model.safetensors", "model.safetensors.sha256", "checksum"]


def _nan_weight(folder: Path) -> list[str]:
    name = _set_one_weight(folder, float("nan"))
    return ["model.safetensors", f"{name} (1 NaN of ", "a checkpoint saved before the loss became NaN"]


def _inf_weight(folder: Path) -> list[str]:
    name = _set_one_weight(folder, float("-inf"))
    return ["model.safetensors", f"{name} (1 Inf of ", "a checkpoint saved before the loss became NaN"]


def _link_out_of_the_folder(folder: Path) -> list[str]:
    outside = folder.parent / "elsewhere"
    outside.mkdir()
    (folder / "config.json").rename(outside / "config.json")
    (folder / "config.json").symlink_to(outside / "config.json")
    return ["config.json", f"a link to {outside / 'config.json'}, outside the folder", "copy the file into the folder"]


def _modified_code(folder: Path) -> list[str]:
    with (folder / "modeling_vanilla_transformer.py").open("a") as handle:
        handle.write("\nimport os  # runs on every downloader's machine\n")
    return ["modeling_vanilla_transformer.py", "trust_remote_code=True", "--allow-modified-code"]


@pytest.mark.parametrize(
    "damage",
    [_flip_a_tensor_byte, _nan_weight, _inf_weight, _link_out_of_the_folder, _modified_code],
    ids=["checksum-mismatch", "nan-weight", "inf-weight", "link-out-of-the-folder", "modified-code-file"],
)
def test_an_unsafe_folder_is_refused_in_one_line_and_nothing_reaches_the_hub(folder, damage, capsys):
    expected = damage(folder)
    repo_id = f"{HUB_USER}/refused-{damage.__name__.strip('_').replace('_', '-')}"
    before = hub_activity()

    refused = push_command(capsys, str(folder), "--repo-id", repo_id)
    assert refused.code != 0
    # one line, no traceback (transformers' "Loading weights" progress bar aside, from checking that the model loads)
    assert [line for line in refused.err.splitlines() if not line.startswith("Loading weights")] == [refused.error]
    assert refused.error.startswith(f"error: {folder} is not ready for the Hub; nothing was pushed: ")
    for fragment in expected:
        assert fragment in refused.error
    assert hub_activity() == before  # refused before any request: no repo, no commit, no upload
    assert repo_id not in HUB.state.repos
    with pytest.raises(FolderNotReadyError) as error:  # the Python API refuses the same, with the same one problem
        push_folder(folder, repo_id)
    assert len(error.value.problems) == 1 and all(fragment in str(error.value) for fragment in expected)


def test_modified_code_is_pushed_with_allow_modified_code_and_says_so(folder, capsys):
    _modified_code(folder)
    repo_id = f"{HUB_USER}/modified-code"
    pushed = push_command(capsys, str(folder), "--repo-id", repo_id, "--allow-modified-code")
    assert pushed.code == 0, pushed.err
    assert "pushing modified code files (allowed): modeling_vanilla_transformer.py;" in pushed.out
    downloaded = hf_hub_download(repo_id, "modeling_vanilla_transformer.py")
    assert Path(downloaded).read_bytes() == (folder / "modeling_vanilla_transformer.py").read_bytes()
    assert uploaded_paths(repo_id) == MODEL_FOLDER_FILES


def test_a_sharded_model_sends_its_index_shards_and_their_checksums(builtin_tokenizer, model_folder, tmp_path):
    folder = tmp_path / "sharded"
    model = AutoModelForSeq2SeqLM.from_pretrained(model_folder)
    model.save_pretrained(folder, max_shard_size="100KB")
    builtin_tokenizer.save_pretrained(folder)
    shutil.copy(model_folder / "README.md", folder / "README.md")
    write_checksums(folder)
    shards = sorted(json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"].values())
    assert len(set(shards)) > 1
    (folder / "model-00099-of-00099.safetensors").write_bytes((folder / shards[0]).read_bytes())  # not in the index

    plan = plan_push(folder, f"{HUB_USER}/sharded")
    weights = {"model.safetensors.index.json", *shards, *(shard + ".sha256" for shard in shards)}
    assert set(plan.files) == MODEL_FOLDER_FILES - {"model.safetensors", "model.safetensors.sha256"} | weights
    assert plan.left_out == ("model-00099-of-00099.safetensors",)
    push_folder(folder, f"{HUB_USER}/sharded", plan=plan)
    assert uploaded_paths(f"{HUB_USER}/sharded") == set(plan.files)


@pytest.mark.parametrize(
    "repo_id, reason",
    [
        ("model", "not of the form namespace/name"),
        ("a/b/c", "not of the form namespace/name"),
        ("me/my model", "Repo id must use"),
    ],
)
def test_a_push_refuses_repo_ids_the_hub_would_refuse_with_the_command_line_s_message(repo_id, reason):
    with pytest.raises(
        ValueError, match=rf"{re.escape(repr(repo_id))} is not a Hub repo id \({reason}.*your-name/my-model"
    ):
        check_repo_id(repo_id)
    check_repo_id("your-name/my-model.v2")  # the Hub's characters: letters, digits, -, _, .
