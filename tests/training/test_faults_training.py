"""Faults during training: a run killed with SIGKILL (also in the middle of writing a checkpoint) resumes from its last
complete checkpoint and ends with the weights of an uninterrupted run, bit for bit; the same seed gives the same
weights and the same BLEU."""

import os
import pickle
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers.trainer_utils import get_last_checkpoint

from vanilla_transformer.data.corpora import load_builtin
from vanilla_transformer.errors import ModelFolderError
from vanilla_transformer.files.loading import check_safetensors_file, load_model_and_tokenizer
from vanilla_transformer.inference.scoring import score_translations
from vanilla_transformer.inference.translation import translate
from vanilla_transformer.training.checkpoints import last_complete_checkpoint, list_checkpoints, remove_stale_staging
from vanilla_transformer.training.presets import get_training_preset
from vanilla_transformer.training.run import train
from vanilla_transformer.training.settings import TrainingSettings

# processes or training runs: with RUN_SLOW=1 (CI)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

# A child process that runs `vanilla-transformer train`. With KILL_WHILE_SAVING_STEP=N it dies by SIGKILL half way
# through writing checkpoint-N's weights: transformers' safetensors writer is wrapped to truncate the file to half its
# size and kill the process, which is what a pre-emption or the OOM killer does to a save in progress.
CHILD = r"""
import os, re, signal, sys
kill_at = os.environ.get("KILL_WHILE_SAVING_STEP")
if kill_at:
    import transformers.modeling_utils as modeling_utils
    write = modeling_utils.safe_save_file
    def write_half_then_die(tensors, filename, metadata=None):
        write(tensors, filename, metadata=metadata)
        if re.search(rf"/checkpoint-{kill_at}/model\.safetensors$", str(filename)):
            os.truncate(filename, os.path.getsize(filename) // 2)
            os.kill(os.getpid(), signal.SIGKILL)
    modeling_utils.safe_save_file = write_half_then_die
from vanilla_transformer.cli.main import main
main(["train", *sys.argv[1:]])
"""

MAX_STEPS = 16
TRAIN_ARGS = [
    *("--preset", "demo", "--max-steps", str(MAX_STEPS), "--save-steps", "2", "--average-last", "2"),
    *("--eval-steps", "1000", "--eval-samples", "4", "--max-tokens", "600", "--tokens-per-update", "600"),
    *("--vocab-size", "400", "--warmup-steps", "4", "--threads", "1", "--report-to", "none", "--seed", "0"),
]


def start(output_dir: Path, log: Path, kill_while_saving: int | None = None) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", TQDM_DISABLE="1")
    env.pop("KILL_WHILE_SAVING_STEP", None)
    if kill_while_saving is not None:
        env["KILL_WHILE_SAVING_STEP"] = str(kill_while_saving)
    handle = log.open("w")
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, *TRAIN_ARGS, "--output-dir", str(output_dir)],
        cwd=ROOT,
        env=env,
        stdout=handle,
        stderr=subprocess.STDOUT,
    )


def finish(process: subprocess.Popen, log: Path, timeout: float = 300) -> tuple[int, str]:
    code = process.wait(timeout=timeout)
    return code, log.read_text()


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(folder / "model.safetensors")


def assert_bit_identical(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    different = [name for name in a if not torch.equal(a[name], b[name])]
    assert not different, f"tensors differ: {different}"


def test_killed_runs_resume_to_the_weights_of_an_uninterrupted_run(tmp_path):
    straight_dir, broken_dir = tmp_path / "straight", tmp_path / "killed"
    straight = start(straight_dir, tmp_path / "straight.log")  # runs beside the interrupted one

    # 1. SIGKILL half way through writing checkpoint-4's model.safetensors
    code, log = finish(start(broken_dir, tmp_path / "kill1.log", kill_while_saving=4), tmp_path / "kill1.log")
    assert code == -signal.SIGKILL, log[-3000:]
    half_written = broken_dir / "tmp-checkpoint-4" / "checkpoint-4" / "model.safetensors"
    assert half_written.is_file()
    try:
        check_safetensors_file(half_written)
        raise AssertionError("a half-written safetensors file passed the check")
    except ModelFolderError as error:
        assert "is truncated" in str(error) and str(half_written) in str(error)
    assert [p.name for p in list_checkpoints(broken_dir)] == ["checkpoint-2"]
    # neither our lookup nor transformers' ever takes the interrupted folder for the latest checkpoint
    assert last_complete_checkpoint(broken_dir) == broken_dir / "checkpoint-2"
    assert Path(get_last_checkpoint(str(broken_dir))).name == "checkpoint-2"

    # 2. resume; SIGKILL at a random moment (seeded) within one save interval after checkpoint-6 appears: mid-step,
    # mid-save or mid-rotation. The interval is the one just measured (checkpoint-4 to checkpoint-6), so that a fast
    # machine does not finish the run before the kill, nor a slow one get killed before it could save again.
    rng = random.Random(6)
    resumed = start(broken_dir, tmp_path / "kill2.log")
    deadline = time.monotonic() + 300
    appeared: dict[int, float] = {}
    while 6 not in appeared and resumed.poll() is None and time.monotonic() < deadline:
        for step in (4, 6):
            if step not in appeared and (broken_dir / f"checkpoint-{step}").is_dir():
                appeared[step] = time.monotonic()
        time.sleep(0.005)
    assert 6 in appeared, f"checkpoint-6 never appeared:\n{(tmp_path / 'kill2.log').read_text()[-3000:]}"
    time.sleep(rng.uniform(0.0, appeared[6] - appeared.get(4, appeared[6])))
    resumed.send_signal(signal.SIGKILL)
    code, log = finish(resumed, tmp_path / "kill2.log")
    assert code == -signal.SIGKILL, f"the run ended before it could be killed:\n{log[-3000:]}"
    assert "removing" in log and "tmp-checkpoint-4" in log  # the interrupted save was cleaned up, and said so
    assert f"resuming from {broken_dir / 'checkpoint-2'}" in log
    killed_at = last_complete_checkpoint(broken_dir)
    assert int(killed_at.name.split("-")[1]) >= 6

    # 3. resume to the end
    code, log = finish(start(broken_dir, tmp_path / "resume.log"), tmp_path / "resume.log")
    assert code == 0, log[-3000:]
    assert f"resuming from {killed_at}" in log
    code, log = finish(straight, tmp_path / "straight.log")
    assert code == 0, log[-3000:]

    final_step = f"checkpoint-{MAX_STEPS}"
    assert_bit_identical(weights(broken_dir / final_step), weights(straight_dir / final_step))
    assert_bit_identical(weights(broken_dir / "final"), weights(straight_dir / "final"))
    assert not list(broken_dir.glob("tmp-*"))
    # every checkpoint and the final folder carry the checksum that later finds flipped bits
    assert (broken_dir / final_step / "model.safetensors.sha256").is_file()
    assert (broken_dir / "final" / "model.safetensors.sha256").is_file()


def test_incomplete_checkpoints_are_skipped_and_stale_staging_removed(tmp_path, caplog):
    for step in (2, 4):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "model.safetensors").write_bytes(b"x")
    (tmp_path / "checkpoint-2" / "trainer_state.json").write_text("{}")  # 4 was written in place and cut short
    (tmp_path / "tmp-checkpoint-6" / "checkpoint-6").mkdir(parents=True)
    assert last_complete_checkpoint(tmp_path) == tmp_path / "checkpoint-2"
    assert "skipping" in caplog.text and "checkpoint-4" in caplog.text and "trainer_state.json" in caplog.text
    assert remove_stale_staging(tmp_path) == [tmp_path / "tmp-checkpoint-6"]
    assert not (tmp_path / "tmp-checkpoint-6").exists()
    assert last_complete_checkpoint(tmp_path / "missing") is None


def test_same_seed_same_weights_and_bleu(tmp_path):
    preset = get_training_preset(
        "demo", max_steps=6, save_steps=3, eval_steps=1000, average_last=1, max_tokens=600, tokens_per_update=600,
        vocab_size=400, warmup_steps=4,
    )  # fmt: skip
    runs = {}
    for name, seed in (("first", 0), ("again", 0), ("other", 1)):
        run = train(
            TrainingSettings(preset, tmp_path / name, seed=seed, eval_samples=8, report_to="none", progress=False)
        )
        model, tokenizer = load_model_and_tokenizer(run.final_dir)
        pairs = load_builtin("test")["translation"][:16]
        hypotheses = translate(model, tokenizer, [p["en"] for p in pairs], num_beams=2)
        bleu = score_translations(hypotheses, [p["de"] for p in pairs])["bleu"]["score"]
        eval_bleu = [entry["eval_bleu"] for entry in run.log_history if "eval_bleu" in entry]
        runs[name] = (weights(run.final_dir), hypotheses, bleu, eval_bleu)
    assert_bit_identical(runs["first"][0], runs["again"][0])
    assert runs["first"][1:] == runs["again"][1:]
    # Adam ran as torch's fused kernel (the Trainer's own record of its optimizer; loaded without unpickling code)
    state = torch.load(tmp_path / "first" / "checkpoint-6" / "optimizer.pt", weights_only=True)
    assert state["param_groups"][0]["fused"] is True
    # a different seed gives different weights, so the comparison above can fail
    assert any(not torch.equal(runs["first"][0][k], runs["other"][0][k]) for k in runs["first"][0])


# -- one line for what a user meets (issue 36): a full disk, a second run in the folder, a hostile pickle -------------

QUICK_ARGS = [
    *("--preset", "demo", "--max-steps", "2", "--save-steps", "2", "--average-last", "1", "--eval-samples", "4"),
    *("--max-tokens", "600", "--tokens-per-update", "600", "--vocab-size", "400", "--threads", "1"),
]


def command(*argv: str, cwd: Path, file_size_limit: int | None = None) -> subprocess.CompletedProcess:
    """`python -m vanilla_transformer ARGV`; with `file_size_limit`, no file of the process may grow past that many
    bytes (the kernel refuses the write with EFBIG, as a full disk refuses it with ENOSPC)."""

    def limit_file_size() -> None:
        import resource

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an error from write(), not a signal that kills
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    return subprocess.run(
        [sys.executable, "-m", "vanilla_transformer", *argv],
        cwd=cwd,
        env=dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", TQDM_DISABLE="1"),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        preexec_fn=limit_file_size if file_size_limit else None,
    )


def assert_one_line(done: subprocess.CompletedProcess, *parts: str) -> None:
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and all(part in last for part in parts), last


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory) -> Path:
    """A finished two-update run of the demo preset: checkpoint-2 with the Trainer's pickles, final/."""
    run = tmp_path_factory.mktemp("quick") / "run"
    done = command("train", *QUICK_ARGS, "--report-to", "none", "--output-dir", str(run), cwd=run.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    return run


def test_a_full_disk_ends_training_and_averaging_in_one_line_keeping_what_was_there(quick_run, tmp_path):
    # training: the tokenizer fits, the first checkpoint's weights do not
    done = command("train", *QUICK_ARGS, "--output-dir", "run", cwd=tmp_path, file_size_limit=200_000)
    assert_one_line(done, "File too large", "free space")
    assert not list_checkpoints(tmp_path / "run")
    # averaging into a folder that holds an earlier average: it stays as it was
    shutil.copytree(quick_run / "final", tmp_path / "average")
    before = tree(tmp_path)
    argv = ("average", "--run-dir", str(quick_run), "--last", "1", "--output-dir", "average")
    done = command(*argv, cwd=tmp_path, file_size_limit=200_000)
    assert_one_line(done, "File too large", "what was there is kept")
    assert tree(tmp_path) == before


def test_a_second_run_into_a_folder_in_use_is_refused_on_every_path(tmp_path, monkeypatch, capsys):
    from vanilla_transformer.cli.main import main
    from vanilla_transformer.files.outputs import hold_lock

    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    with hold_lock(run):  # this process trains there
        done = command("train", *QUICK_ARGS, "--output-dir", "run", cwd=tmp_path)  # another process
        assert_one_line(done, "--output-dir run is in use: another run is training in it")
        with pytest.raises(SystemExit) as exited:  # the lock is per open folder: this process is refused as well
            main(["train", *QUICK_ARGS, "--output-dir", "run"])
        assert exited.value.code == 2 and "is in use" in capsys.readouterr().err
    assert list(run.iterdir()) == []
    with hold_lock(run):  # released when the first holder ends
        pass


EVIL = """
import pathlib, sys, torch
class Evil:
    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(sys.argv[2]),))
torch.save({"cpu_rng_state": Evil()}, sys.argv[1])
"""


def plain_pickle(path: Path) -> None:  # pickle.dump, not torch.save: no archive to open memory-mapped
    path.write_bytes(pickle.dumps({"cpu_rng_state": [1, 2, 3]}))


def truncated(path: Path) -> None:  # a copy cut short, as a full disk or a kill leaves one
    path.write_bytes(path.read_bytes()[:200])


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (None, "rng_state.pth holds pickled objects other than tensors"),
        (plain_pickle, "rng_state.pth is not a whole torch.save file"),
        (truncated, "rng_state.pth is not a whole torch.save file"),
    ],
    ids=["hostile", "plain-pickle", "truncated"],
)
def test_a_damaged_or_hostile_pickle_in_a_checkpoint_is_refused_in_one_line_and_never_run(
    damage, expected, quick_run, tmp_path
):
    run = tmp_path / "run"
    shutil.copytree(quick_run, run)
    record = (run / "preset.json").read_bytes()
    marker = tmp_path / "the-pickle-ran"
    rng_state = run / "checkpoint-2" / "rng_state.pth"
    if damage is None:
        subprocess.run([sys.executable, "-c", EVIL, str(rng_state), str(marker)], check=True)
    else:
        damage(rng_state)
    done = command("train", *QUICK_ARGS, "--max-steps", "4", "--output-dir", "run", cwd=tmp_path)  # resumed
    assert_one_line(done, expected, "delete that checkpoint")
    assert not marker.exists()
    assert (run / "preset.json").read_bytes() == record  # a refused resume changes nothing


def test_a_run_continued_past_its_end_with_dropout_reaches_the_weights_of_an_uninterrupted_run(tmp_path):
    # the demo preset's dropout (0.1) draws random numbers every update, and the Trainer validates at a run's last
    # step, drawing a loader seed: the continued run must draw what the straight one drew
    argv = ("train", *QUICK_ARGS, "--save-steps", "1", "--average-last", "2")
    for output, steps in (("straight", "4"), ("resumed", "2"), ("resumed", "4")):
        done = command(*argv, "--max-steps", steps, "--output-dir", output, cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-3000:]
    assert "resuming from" in done.stdout
    # each checkpoint carries its run's record, by which `average` tells the checkpoints of two runs apart
    assert (tmp_path / "resumed" / "checkpoint-4" / "preset.json").read_bytes() == (
        tmp_path / "resumed" / "preset.json"
    ).read_bytes()
    straight, resumed = (load_file(tmp_path / name / "final" / "model.safetensors") for name in ("straight", "resumed"))
    assert all(torch.equal(straight[name], resumed[name]) for name in straight)


def test_fp16_on_a_machine_without_a_gpu_is_refused_not_ignored(tmp_path, monkeypatch, capsys):
    from vanilla_transformer.cli.main import main

    if torch.cuda.is_available() or torch.backends.mps.is_available():
        pytest.skip("this machine trains in fp16; the refusal is for machines without a CUDA or MPS device")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        main(["train", *QUICK_ARGS, "--fp16", "--output-dir", "run"])
    error = capsys.readouterr().err
    assert exited.value.code == 2 and "--fp16: float16 mixed precision needs a CUDA or MPS device" in error
    assert not (tmp_path / "run").exists()
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "fp16")  # what `accelerate launch --mixed_precision fp16` sets
    with pytest.raises(SystemExit) as exited:
        main(["train", *QUICK_ARGS, "--output-dir", "run"])
    error = capsys.readouterr().err
    assert exited.value.code == 2 and "accelerate launch --mixed_precision fp16: float16 mixed precision" in error
    assert not (tmp_path / "run").exists()
