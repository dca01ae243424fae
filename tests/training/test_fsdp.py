"""FSDP2 on the CPU (docs/fsdp.md): `train` (Seq2SeqTrainer) launched with `accelerate launch --num_processes 2
--use_fsdp --fsdp_version 2` (2 gloo processes; `fsdp_on_cpu.py` lets accelerate run FSDP on the CPU, which it
otherwise drops for DDP) follows one process with twice the batch, resumes after every process of the run is killed
with SIGKILL, and ends in an ordinary `final/` that translates as the one-process model's.

The run trains 6 updates on 40 pairs, saving at 3: the FSDP run is killed right after its checkpoint-3 is complete
and started again; the one-process run (the same command, in this process, while the FSDP run resumes) goes straight
through. Weights: every one within 1e-5 and all but 0.01% within 1e-7. FSDP sums the gradients in another order than
one process, and Adam divides each gradient by its running size, so the rounding difference of a near-zero gradient
moves its weight by up to a fraction of the learning rate (peak 1.25e-4): in 8 runs (seeds 0-3 of the Trainer and of
a loop without it, since removed), at most 9 of the 710,656 weights differed by more than 1e-7, the largest by
2.0e-6, and 99.9% by at most 1.5e-8. A learning rate 5% off, let alone a lost reduction, a restarted optimizer or
schedule, or batches skipped or repeated, moves 73% of them by more than 1e-5."""

import contextlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
import torch
from accelerate.state import AcceleratorState, GradientState
from conftest import tiny_model
from safetensors.torch import load_file
from torch.distributed.fsdp import StateDictType
from transformers import AutoModelForSeq2SeqLM, PreTrainedTokenizerFast

from vanilla_transformer.cli.main import main
from vanilla_transformer.data.corpora import load_builtin
from vanilla_transformer.errors import SettingsError
from vanilla_transformer.release.folder_checks import CODE_FILES
from vanilla_transformer.training.fsdp import check_trainer_fsdp, tied_modules

# processes or training runs: with RUN_SLOW=1 (CI)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SAVED, STEPS = 3, 6  # the checkpoint the FSDP run is killed after, and the updates in all
TRAIN_PAIRS = 40  # 5 updates of 8 pairs an epoch: the run crosses an epoch, and resumes in the middle of one
# weights, FSDP against one process (module docstring): every one within ATOL, all but a share OUTLIERS within CLOSE
ATOL, CLOSE, OUTLIERS = 1e-5, 1e-7, 1e-4
# the learning rate of COMMON peaks at 1.25e-4 (step 2); --max-grad-norm: never reached, so the norm is logged
COMMON = ["--preset", "demo", "--vocab-size", "400", "--max-steps", str(STEPS), "--save-steps", str(SAVED),
          "--warmup-steps", "2", "--lr-factor", "0.002", "--dropout", "0", "--log-steps", "1", "--eval-steps", "100",
          "--eval-samples", "2", "--max-grad-norm", "1e9", "--seed", "0", "--threads", "1"]  # fmt: skip
FSDP_LAUNCH = ["-m", "accelerate.commands.launch", "--num_processes", "2", "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no", "--use_fsdp", "--fsdp_version", "2",
               "--fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP", "--fsdp_transformer_layer_cls_to_wrap",
               "VanillaTransformerEncoderLayer,VanillaTransformerDecoderLayer"]  # fmt: skip
WRAPPER_NAMES = ("_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod", "module.")


@dataclass(frozen=True)
class TrainingPath:
    command: str
    one_process: list[str]  # one process, B pairs per batch
    two_processes: list[str]  # each of two processes, B/2 pairs per batch
    launch: list[str]  # accelerate launch flags beyond FSDP_LAUNCH
    complete: str  # a file a checkpoint holds only once it is complete


# 1 batch per update (--tokens-per-update 320 over ~350 tokens); FULL_STATE_DICT, the one whose checkpoints hold
# model.safetensors (`fsdp.check_trainer_fsdp`); final/ averages checkpoint-3 and checkpoint-6
PATHS = {
    "trainer": TrainingPath(
        "train",
        ["--per-device-batch-size", "8", "--tokens-per-update", "320", "--average-last", "2", "--report-to", "none"],
        ["--per-device-batch-size", "4", "--tokens-per-update", "320", "--average-last", "2", "--report-to", "none"],
        ["--fsdp_state_dict_type", "FULL_STATE_DICT"],
        "trainer_state.json",
    ),
}


@dataclass
class Runs:
    path: str
    one: Path  # one process, straight through
    fsdp: Path  # two processes under FSDP2, killed after checkpoint-3 and started again
    killed_code: int
    killed_log: str
    left_when_killed: list[str]
    resumed_log: str


def environment() -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env["TQDM_DISABLE"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return env


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def kill_everything(launcher: subprocess.Popen) -> None:
    """SIGKILL the launcher and every process it started at once, as a lost machine ends a run, and wait until they
    are gone (the workers are the launcher's children, in sessions of their own, so they are found by parentage)."""
    try:
        tree = [psutil.Process(launcher.pid), *psutil.Process(launcher.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    for process in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(signal.SIGKILL)
    launcher.wait(timeout=60)
    deadline = time.monotonic() + 60
    for process in tree[1:]:
        with contextlib.suppress(psutil.NoSuchProcess):
            while process.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
                time.sleep(0.01)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """The first 40 training and 2 validation pairs of the built-in corpus as `{split}.{lang}` files: `train` has no
    --train-samples, and tokenizing the 6000 built-in pairs in every process would cost more than the training."""
    folder = tmp_path_factory.mktemp("corpus")
    for split, pairs in (("train", TRAIN_PAIRS), ("valid", 2)):
        rows = load_builtin(split)["translation"][:pairs]
        for lang in ("en", "de"):
            (folder / f"{split}.{lang}").write_text("".join(row[lang] + "\n" for row in rows))
    return folder


@contextlib.contextmanager
def fresh_accelerate_state():
    """A run inside this process: accelerate's process-wide state from nothing, and as it was found afterwards, so
    that neither this run nor a later test in this worker meets settings the other left; torch's thread count too."""
    threads = torch.get_num_threads()
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()
    try:
        yield
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()
        torch.set_num_threads(threads)


@pytest.fixture(scope="module", params=sorted(PATHS))
def runs(request, corpus, tmp_path_factory) -> Runs:
    path = PATHS[request.param]
    base = tmp_path_factory.mktemp(request.param)
    one, fsdp = base / "one", base / "fsdp"
    args = [path.command, *COMMON, "--corpus", str(corpus)]
    env = environment()
    fsdp_command = [sys.executable, *FSDP_LAUNCH, *path.launch, "--main_process_port", str(free_port()),
                    str(ROOT / "tests" / "fsdp_on_cpu.py"), *args, *path.two_processes,
                    "--output-dir", str(fsdp)]  # fmt: skip
    with (base / "killed.log").open("w") as log:
        first = subprocess.Popen(fsdp_command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    marker = fsdp / f"checkpoint-{SAVED}" / path.complete
    deadline = time.monotonic() + 300
    while first.poll() is None and not marker.is_file() and time.monotonic() < deadline:
        time.sleep(0.005)
    left = sorted(p.name for p in fsdp.iterdir()) if fsdp.is_dir() else []
    kill_everything(first)
    killed_log = (base / "killed.log").read_text()
    assert marker.is_file(), f"checkpoint-{SAVED} never appeared:\n{killed_log[-4000:]}"

    fsdp_command[fsdp_command.index("--main_process_port") + 1] = str(free_port())
    with (base / "resumed.log").open("w") as log:
        second = subprocess.Popen(fsdp_command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    # meanwhile the uninterrupted one-process run, the same command in this process (whose imports are done)
    with fresh_accelerate_state():
        main([*args, *path.one_process, "--output-dir", str(one)])
    second.wait(timeout=600)
    resumed_log = (base / "resumed.log").read_text()
    assert second.returncode == 0, f"the resumed FSDP run failed:\n{resumed_log[-6000:]}"
    return Runs(request.param, one, fsdp, first.returncode, killed_log, left, resumed_log)


def weights_at(run: Path, checkpoint: str) -> dict[str, torch.Tensor]:
    """A checkpoint's or final/'s weights."""
    return load_file(run / checkpoint / "model.safetensors")


def assert_same_weights(fsdp: dict[str, torch.Tensor], one: dict[str, torch.Tensor], what: str) -> None:
    # FSDP gathers each name of the shared embedding matrix as a tensor of its own: the copies must agree
    for alias in set(fsdp) - set(one):
        assert alias in {"lm_head.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"}
        assert torch.equal(fsdp[alias], fsdp["model.shared.weight"]), f"{what}: {alias} is not model.shared.weight"
    assert set(one) <= set(fsdp)
    for name in one:
        torch.testing.assert_close(fsdp[name], one[name], rtol=0, atol=ATOL, msg=lambda m, n=name: f"{what} {n}: {m}")
    differences = torch.cat([(fsdp[name] - one[name]).abs().flatten() for name in one])
    beyond = int((differences > CLOSE).sum())
    assert beyond <= OUTLIERS * differences.numel(), (
        f"{what}: {beyond} of {differences.numel()} weights differ by >{CLOSE}"
    )


def updates(run: Runs, which: Path) -> list[dict]:
    """Per update: loss, gradient norm and learning rate, as the run logged them."""
    history = json.loads((which / f"checkpoint-{STEPS}" / "trainer_state.json").read_text())["log_history"]
    return [{key: entry[key] for key in ("loss", "grad_norm", "learning_rate")} for entry in history if "loss" in entry]


def assert_same_updates(fsdp: list[dict], one: list[dict], steps: range) -> None:
    for step in steps:
        a, b = fsdp[step - 1], one[step - 1]
        # the logged loss is the global one in both; Adam hides a gradient scaled by a constant, the norm does not
        assert math.isclose(a["loss"], b["loss"], rel_tol=1e-4), f"step {step}: loss {a} under FSDP, {b} alone"
        assert math.isclose(a["grad_norm"], b["grad_norm"], rel_tol=1e-4), f"step {step}: {a} under FSDP, {b} alone"
        assert math.isclose(a["learning_rate"], b["learning_rate"], rel_tol=1e-9), f"step {step}: {a} vs {b}"


def test_fsdp2_run_follows_one_process_with_twice_the_batch(runs):
    # accelerate ran FSDP2 in both processes, not the DDP it falls back to on the CPU
    for rank in (0, 1):
        assert f"fsdp_on_cpu: process {rank} runs FSDP2 on the CPU" in runs.killed_log
    saved = runs.fsdp / f"checkpoint-{SAVED}"
    assert (saved / "pytorch_model_fsdp.bin").is_file()
    # its config.json and code are this package's model's, as one process writes them: not those of the subclass
    # FSDP2 makes of the model in torch's module, which transformers would name and copy
    assert json.loads((saved / "config.json").read_text()) == json.loads(
        (runs.one / saved.name / "config.json").read_text()
    )
    assert not list(saved.glob("_fsdp*.py"))
    for name in CODE_FILES:
        assert (saved / name).read_bytes() == (ROOT / "vanilla_transformer" / "model" / name).read_bytes(), name
    # checkpoint-3 was written before the kill, by the first, uninterrupted part of the FSDP run
    one_updates, fsdp_updates = updates(runs, runs.one), updates(runs, runs.fsdp)
    assert len(one_updates) == len(fsdp_updates) == STEPS
    assert_same_updates(fsdp_updates, one_updates, range(1, SAVED + 1))
    assert one_updates[SAVED - 1]["loss"] < one_updates[0]["loss"]  # it trains
    assert_same_weights(
        weights_at(runs.fsdp, saved.name), weights_at(runs.one, saved.name), f"{runs.path} {saved.name}"
    )


def test_fsdp2_run_killed_after_a_checkpoint_resumes_to_the_weights_of_an_uninterrupted_run(runs):
    # every process was killed after checkpoint-3 was complete and before the run could go on to save another
    assert runs.killed_code == -signal.SIGKILL, runs.killed_log[-4000:]
    assert f"checkpoint-{SAVED}" in runs.left_when_killed
    assert f"checkpoint-{STEPS}" not in runs.left_when_killed and "final" not in runs.left_when_killed
    assert f"resuming from {runs.fsdp / f'checkpoint-{SAVED}'}" in runs.resumed_log
    # the resumed updates (with the schedule's learning rates) are the uninterrupted run's
    assert_same_updates(updates(runs, runs.fsdp), updates(runs, runs.one), range(SAVED + 1, STEPS + 1))
    for folder in (f"checkpoint-{STEPS}", "final"):
        assert_same_weights(weights_at(runs.fsdp, folder), weights_at(runs.one, folder), f"{runs.path} {folder}")


def test_fsdp2_final_folder_is_an_ordinary_model_folder_that_translates_as_one_process(runs):
    final, alone = runs.fsdp / "final", runs.one / "final"
    # nothing of FSDP's in it: no distributed checkpoint, no pickled state, no wrapper names, the tied matrix once
    names = sorted(p.name for p in final.iterdir())
    assert names == sorted(p.name for p in alone.iterdir())
    assert not [name for name in names if name.startswith(("pytorch_model_fsdp", "optimizer", "_fsdp"))]
    saved = load_file(final / "model.safetensors")
    assert saved.keys() == load_file(alone / "model.safetensors").keys()
    assert not [name for name in saved if any(wrapper in name for wrapper in WRAPPER_NAMES)]
    # config.json names this package's classes (not torch's FSDP subclasses), whose code is beside it
    assert json.loads((final / "config.json").read_text()) == json.loads((alone / "config.json").read_text())
    for name in CODE_FILES:
        assert (final / name).read_bytes() == (ROOT / "vanilla_transformer" / "model" / name).read_bytes(), name

    # it loads in this one process, exactly as saved, and translates as the one-process model does
    model, info = AutoModelForSeq2SeqLM.from_pretrained(final, output_loading_info=True)
    assert not any(info.values()), info
    for name, tensor in model.state_dict().items():
        if name in saved:
            assert torch.equal(tensor, saved[name]), name
    assert model.lm_head.weight is model.model.shared.weight
    reference = AutoModelForSeq2SeqLM.from_pretrained(alone)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(final)
    sentences = [pair["en"] for pair in load_builtin("test")["translation"][:4]]
    batch = tokenizer(sentences, return_tensors="pt", padding=True)
    with torch.no_grad():
        ids = [m.eval().generate(**batch, num_beams=1, do_sample=False).tolist() for m in (model, reference)]
        labels = tokenizer(text_target=sentences, return_tensors="pt", padding=True)["input_ids"]
        logits = [m(**batch, labels=labels).logits for m in (model, reference)]
    assert ids[0] == ids[1]
    torch.testing.assert_close(logits[0], logits[1], rtol=0, atol=1e-4)


def test_tied_modules_are_every_holder_of_a_shared_matrix():
    """What `fsdp.shard_tied_embeddings` puts into one FSDP group: accelerate groups only the encoder's embeddings and
    `lm_head`, and FSDP2 refuses the shared matrix that `model.shared` and the decoder's embeddings also hold."""
    model = tiny_model()
    inner = model.model
    assert [{id(m) for m in group} for group in tied_modules(model)] == [
        {id(inner.shared), id(inner.encoder.embed_tokens), id(inner.decoder.embed_tokens), id(model.lm_head)}
    ]
    # separate vocabularies: the decoder's embeddings are the output projection's
    model = tiny_model(share_encoder_decoder_embeddings=False, decoder_vocab_size=40)
    assert [{id(m) for m in group} for group in tied_modules(model)] == [
        {id(model.model.decoder.embed_tokens), id(model.lm_head)}
    ]
    assert tied_modules(tiny_model(share_encoder_decoder_embeddings=False, tie_word_embeddings=False)) == []


@pytest.mark.parametrize("state_dict_type", list(StateDictType))
def test_trainer_under_fsdp_needs_full_state_dict_checkpoints(state_dict_type):
    accelerator = SimpleNamespace(state=SimpleNamespace(fsdp_plugin=SimpleNamespace(state_dict_type=state_dict_type)))
    if state_dict_type == StateDictType.FULL_STATE_DICT:
        check_trainer_fsdp(accelerator)
    else:
        with pytest.raises(SettingsError, match="--fsdp_state_dict_type FULL_STATE_DICT") as refusal:
            check_trainer_fsdp(accelerator)
        assert state_dict_type.name in str(refusal.value)
    check_trainer_fsdp(SimpleNamespace(state=SimpleNamespace()))  # no FSDP, nothing to check


def test_an_fsdp_launch_is_checked_and_its_dropping_on_a_cpu_said(tmp_path, monkeypatch, capsys, caplog):
    # the environment `accelerate launch --use_fsdp --fsdp_version 2 ...` gives its processes
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_VERSION", "2")
    quick = ["--preset", "demo", "--vocab-size", "400", "--max-tokens", "600", "--tokens-per-update", "600"]
    quick += ["--eval-samples", "2", "--threads", "1", "--max-steps", "1", "--save-steps", "1", "--average-last", "1"]
    quick += ["--output-dir", str(tmp_path / "run")]
    cases = [
        (
            {"FSDP_TRANSFORMER_CLS_TO_WRAP": "EncoderLayer", "FSDP_STATE_DICT_TYPE": "FULL_STATE_DICT"},
            "names EncoderLayer, which the model",
        ),
        (
            {"FSDP_TRANSFORMER_CLS_TO_WRAP": "VanillaTransformerEncoderLayer", "FSDP_STATE_DICT_TYPE": "SHARDED"},
            "state dict type SHARDED writes the Trainer's checkpoints without model.safetensors",
        ),
    ]
    for env, expected in cases:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        with pytest.raises(SystemExit) as exited:
            main(["train", *quick])
        error = capsys.readouterr().err.strip().splitlines()[-1]
        assert exited.value.code == 2 and expected in error, error
        assert not (tmp_path / "run").exists()
    # right flags on a machine without a GPU: accelerate trains with DDP; the run says so
    monkeypatch.setenv("FSDP_TRANSFORMER_CLS_TO_WRAP", "VanillaTransformerEncoderLayer,VanillaTransformerDecoderLayer")
    monkeypatch.setenv("FSDP_STATE_DICT_TYPE", "FULL_STATE_DICT")
    AcceleratorState._reset_state(reset_partial_state=True)
    main(["train", *quick])
    AcceleratorState._reset_state(reset_partial_state=True)
    assert "launched with FSDP, but accelerate uses FSDP only on GPUs" in caplog.text
    capsys.readouterr()
