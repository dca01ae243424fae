"""The `vanilla-transformer` command line (`vanilla_transformer/cli/main.py`, one module per subcommand in
`vanilla_transformer/cli/`), the lab's `scripts/*.py`, and the package as a
wheel: built, installed into a fresh virtualenv and run from another folder, where the model card template can only
come from the package data."""

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import HUB_USER, command_main, tiny_model

from vanilla_transformer.cli.main import COMMANDS, build_parser, main
from vanilla_transformer.data.corpora import load_builtin
from vanilla_transformer.files.loading import load_model_and_tokenizer
from vanilla_transformer.inference.translation import translate

ROOT = Path(__file__).resolve().parents[2]
# the lab's commands (scripts/<name>.py), which the wheel leaves out
LAB_SCRIPTS = ("table3", "benchmark", "benchmark_data", "gpu_speed")
RESULTS = {  # a release record (what `vanilla-transformer release` writes to results.json), for the card
    "results": {"test2016": {"sacrebleu": 12.3, "chrf": 45.6, "tokenized_bleu": 13.4, "signature": "nrefs:1|tok:13a"}},
    "training": {"summary": "an untrained 2+2-layer model for the wheel test", "hyperparameters": {"d_model": 32}},
}


def help_text(argv: list[str], run, capsys) -> str:
    """What `run(argv)` prints for --help; argparse exits with status 0 after printing it."""
    with pytest.raises(SystemExit) as exited:
        run(argv)
    assert exited.value.code == 0
    return capsys.readouterr().out


def options_section(text: str) -> str:
    return text[text.index("\noptions:") :]


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory, builtin_tokenizer) -> Path:
    """A saved tiny model with the built-in corpus's tokenizer and a release record, but no card."""
    folder = tmp_path_factory.mktemp("cli") / "tiny-en-de"
    tiny_model(vocab_size=len(builtin_tokenizer)).save_pretrained(folder)
    builtin_tokenizer.save_pretrained(folder)
    (folder / "results.json").write_text(json.dumps(RESULTS))
    return folder


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_prints_its_help(command, capsys):
    assert f"usage: vanilla-transformer {command} [-h]" in help_text([command, "--help"], main, capsys)


def test_the_command_list_names_every_command(capsys):
    text = help_text(["--help"], main, capsys)
    assert all(f"\n    {command}" in text for command in COMMANDS)
    with pytest.raises(SystemExit) as exited:
        main([])
    assert exited.value.code == 2 and "required: COMMAND" in capsys.readouterr().err


@pytest.mark.parametrize("script", LAB_SCRIPTS)
def test_each_lab_script_prints_its_help(script, capsys):
    assert "usage: " in help_text(["--help"], command_main(script), capsys)


def test_arguments_that_do_not_go_together_print_the_usage(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["evaluate", "--model", "some/model"])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "usage: vanilla-transformer evaluate" in error and error.endswith("error: --model needs --split\n")


def test_evaluate_and_release_leave_the_data_folder_to_the_data_stage(tmp_path):
    run_dir = str(tmp_path)  # --run-dir must exist
    for argv in (
        ["evaluate", "--model", "m", "--split", "valid"],
        ["release", "--run-dir", run_dir, "--output-dir", "o"],
    ):
        assert build_parser().parse_args(argv).data_dir is None


def test_download_multi30k_prints_the_folder_or_says_what_is_missing(tmp_path, capsys):
    for name in ("train.en", "train.de"):
        (tmp_path / name).write_text("A dog.\n" if name.endswith("en") else "Ein Hund.\n")
    main(["download-multi30k", "--data-dir", str(tmp_path)])
    assert capsys.readouterr().out == f"{tmp_path}\n"
    (tmp_path / "elsewhere").mkdir()  # a folder without the files (a missing one is refused by the parser)
    with pytest.raises(SystemExit) as exited:
        main(["download-multi30k", "--data-dir", str(tmp_path / "elsewhere")])
    assert exited.value.code == 2  # a user error
    assert re.match(r"^error: data_dir=\S*elsewhere ", capsys.readouterr().err)


def test_evaluate_without_multi30k_offline_says_how_to_get_it(model_folder, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("VANILLA_TRANSFORMER_MULTI30K", raising=False)
    monkeypatch.setenv("VANILLA_TRANSFORMER_CACHE", str(tmp_path / "cache"))  # empty: nothing downloaded yet
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # one line naming the problem and the ways out, not a traceback; nothing half-downloaded left behind
    with pytest.raises(SystemExit) as exited:
        main(["evaluate", "--model", str(model_folder), "--split", "test2016"])
    assert exited.value.code == 2  # a user error
    error = capsys.readouterr().err
    assert re.match(r"^error: Multi30k is not on this machine.*download", error)
    assert "Traceback" not in error
    assert not list((tmp_path / "cache").rglob("*.de"))


@pytest.mark.slow
def test_python_m_translates_stdin_as_the_library_does(model_folder):
    sources = [pair["en"] for pair in load_builtin("test")["translation"][:4]]
    lines = [sources[0], "", *sources[1:]]
    done = subprocess.run(
        [sys.executable, "-m", "vanilla_transformer", "translate", "--model", str(model_folder), "--device", "cpu"],
        input="".join(f"{line}\n" for line in lines),
        env=dict(os.environ, OMP_NUM_THREADS="1"),  # the threads of this process (conftest), for equal float sums
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    model, tokenizer = load_model_and_tokenizer(model_folder)
    assert done.stdout.split("\n") == [*translate(model, tokenizer, lines), ""]
    assert f"translate: translated {len(lines)} lines in" in done.stderr


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh virtualenv with the wheel of this checkout installed, seeing this environment's dependencies but not
    the checkout; returns its bin/ folder.

    The dependencies come through a .pth line naming this environment's site-packages: Python adds such a folder to
    sys.path without processing the .pth files inside it, so the editable install's import hook (itself a .pth file
    there) stays out, and `vanilla_transformer` can only be the wheel's copy."""
    work = tmp_path_factory.mktemp("wheel")
    # build from a copy: pip builds in place, and build/ or an egg-info in the checkout would race other runs
    source = work / "source"
    shutil.copytree(
        ROOT / "vanilla_transformer", source / "vanilla_transformer", ignore=shutil.ignore_patterns("__pycache__")
    )
    for path in ROOT.iterdir():  # pyproject.toml, the README it names, LICENSE
        if path.is_file():
            shutil.copy2(path, source / path.name)
    # without build isolation, so that no package index is needed: the test extras bring the setuptools that
    # build-system.requires asks for
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    build = [*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", str(work / "dist")]
    subprocess.run([*build, str(source)], check=True)
    (wheel,) = (work / "dist").glob("vanilla_transformer-*.whl")

    venv = work / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([*pip, "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)], check=True)
    site_packages = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    ours = dict.fromkeys(sysconfig.get_path(kind) for kind in ("purelib", "platlib"))
    (Path(site_packages) / "test-environment-dependencies.pth").write_text("".join(f"{path}\n" for path in ours))
    return venv / "bin"


def run_installed(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}
    # the Hub variables conftest set (HF_ENDPOINT: its stand-in server on 127.0.0.1, HF_TOKEN, HF_HOME) go along
    done = subprocess.run(
        argv, cwd=cwd, env=dict(env, PYTHONNOUSERSITE="1"), capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.slow
def test_the_wheel_installed_elsewhere_runs_and_renders_cards(installed, model_folder, tmp_path):
    bin_dir = installed
    elsewhere = tmp_path / "elsewhere"  # no vanilla_transformer/ and no model_cards/ here or above
    elsewhere.mkdir()
    where = run_installed(
        [str(bin_dir / "python"), "-c",
         "import json, sys, vanilla_transformer, vanilla_transformer.files.model_card as mc; "
         "print(json.dumps([vanilla_transformer.__file__, str(mc.CARD_TEMPLATE), sorted(sys.modules)]))"],
        elsewhere,
    )  # fmt: skip
    package, template, modules = json.loads(where.stdout)
    venv = bin_dir.parent
    assert Path(package).is_relative_to(venv) and Path(template).is_relative_to(venv)
    assert not [name for name in modules if name.startswith("__editable__")]

    command_help = run_installed([str(bin_dir / "vanilla-transformer"), "--help"], elsewhere).stdout
    module_help = run_installed([str(bin_dir / "python"), "-m", "vanilla_transformer", "--help"], elsewhere).stdout
    assert command_help == module_help and all(f"\n    {command}" in command_help for command in COMMANDS)

    # a folder without a card: `push` renders one from the package's template, then checks and uploads the folder
    folder = shutil.copytree(model_folder, tmp_path / "tiny-en-de")
    repo_id = f"{HUB_USER}/wheel-install"
    pushed = run_installed([str(bin_dir / "vanilla-transformer"), "push", str(folder), "--repo-id", repo_id], elsewhere)
    assert f"pushed {folder} to {repo_id}: commit " in pushed.stdout
    card = (folder / "README.md").read_text()
    assert card.startswith("---\n") and "model-index:" in card and "license: other" in card  # Multi30k's terms
    assert "# wheel-install" in card and "| test2016 | 13.4 | 12.3 | 45.6 |" in card
    assert "an untrained 2+2-layer model for the wheel test" in card


def test_evaluate_on_a_tsv_file_needs_its_languages_unless_its_name_gives_them(model_folder, tmp_path, capsys):
    line = "Hi.\t嗨。\tCC-BY 2.0 (France) Attribution: tatoeba.org #1 (a) & #2 (b)\n"
    (tmp_path / "cmn.txt").write_text(line, encoding="utf-8")
    (tmp_path / "cmn.en-zh.txt").write_text(line, encoding="utf-8")
    evaluate = ["evaluate", "--model", str(model_folder), "--split", "test", "--num-beams", "1", "--corpus-file"]
    for languages in ([], ["--source-lang", "en"], ["--target-lang", "zh"]):
        with pytest.raises(SystemExit) as exited:
            main([*evaluate, str(tmp_path / "cmn.txt"), *languages])
        assert exited.value.code == 2
        captured = capsys.readouterr()
        assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
        assert captured.err.startswith(f"error: {tmp_path / 'cmn.txt'} is a TSV file of English and one other language")
        assert "give --source-lang and --target-lang" in captured.err
    # named for its direction, the file is read as en→zh: what stops it then is its size (one pair, no train split)
    with pytest.raises(SystemExit) as exited:
        main([*evaluate, str(tmp_path / "cmn.en-zh.txt")])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "--source-lang" not in error and "cmn.en-zh.txt holds 1 pair, too few for the fixed split" in error
