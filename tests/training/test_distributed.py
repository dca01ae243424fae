"""Data parallelism on the CPU: `vanilla-transformer train` (Seq2SeqTrainer) launched with `torchrun --nproc_per_node
2` (a gloo group; `accelerate launch --cpu` would start one process) follows one process with twice the batch,
evaluates every example exactly once, and resumes exactly; settings that cannot finish stop every process with the
same error before training, with none left waiting in gloo."""

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from accelerate.data_loader import BatchSamplerShard
from conftest import EOS, tiny_model
from safetensors.torch import load_file

from vanilla_transformer.data.batching import TokenBudgetBatchSampler

# processes or training runs: with RUN_SLOW=1 (CI)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ("-m", "vanilla_transformer", "train")
VALID_PAIRS = 7  # odd: two processes cannot split it evenly, so accelerate repeats an example to pad the last batch
# a small learning rate keeps Adam's amplification of rounding differences in near-zero gradients below 1e-6
COMMON = ["--preset", "demo", "--max-steps", "5", "--warmup-steps", "2", "--lr-factor", "0.002", "--dropout", "0",
          "--log-steps", "1", "--eval-samples", str(VALID_PAIRS)]  # fmt: skip


def launch_environment() -> dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return env


def run_launched(
    script: tuple[str, ...], processes: int, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run the script `script[0]` with its arguments (or a module: `("-m", "vanilla_transformer", "train")`) in
    `processes` processes (torchrun, gloo, one thread each), with `env` added to the environment."""
    launcher = [sys.executable]
    if processes > 1:
        # --standalone: a rendezvous on a free port, so that parallel test workers do not collide
        launcher += ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes)]
    target = list(script)
    return subprocess.run(
        [*launcher, *target, *args],
        cwd=ROOT,
        env={**launch_environment(), **(env or {})},
        capture_output=True,
        text=True,
    )


def launch(
    script: tuple[str, ...], processes: int, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`run_launched`, which must succeed."""
    result = run_launched(script, processes, *args, env=env)
    assert result.returncode == 0, (
        f"{script} on {processes} process(es) failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    )
    return result


def assert_same_weights(a: Path, b: Path) -> None:
    first, second = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert first.keys() == second.keys()
    for name in first:
        torch.testing.assert_close(first[name], second[name], rtol=0, atol=1e-6, msg=name)


def assert_same_losses(first: list[float], second: list[float]) -> None:
    assert len(first) == len(second) == 5
    for step, (a, b) in enumerate(zip(first, second, strict=True), start=1):
        assert abs(a - b) <= 1e-4 * abs(a), f"step {step}: {a} on one process, {b} on two"


@pytest.fixture(scope="module")
def trainer_runs(tmp_path_factory) -> dict[int, Path]:
    """Seq2SeqTrainer: 1 process × 8 pairs and 2 processes × 4 pairs, 2 batches per update in both."""
    runs = {}
    for processes, batch in ((1, 8), (2, 4)):
        runs[processes] = tmp_path_factory.mktemp(f"trainer{processes}")
        # the console command as the README launches it (`torchrun -m vanilla_transformer train`); --max-grad-norm: a
        # norm never reached, so that the Trainer computes and logs the gradient norm
        launch(TRAIN, processes, *COMMON, "--output-dir", str(runs[processes]),
               "--per-device-batch-size", str(batch), "--tokens-per-update", "320", "--save-steps", "5",
               "--eval-steps", "5", "--average-last", "1", "--report-to", "none", "--max-grad-norm", "1e9")  # fmt: skip
    return runs


def trainer_log(run: Path) -> list[dict]:
    return json.loads((run / "checkpoint-5" / "trainer_state.json").read_text())["log_history"]


def test_trainer_on_two_processes_follows_one_process_with_twice_the_batch(trainer_runs):
    one, two = (trainer_log(trainer_runs[n]) for n in (1, 2))
    assert_same_losses([e["loss"] for e in one if "loss" in e], [e["loss"] for e in two if "loss" in e])
    # Adam hides a gradient scaled by a constant; the logged norm does not
    norms = [[e["grad_norm"] for e in log if "loss" in e] for log in (one, two)]
    assert norms[1] == pytest.approx(norms[0], rel=1e-4)
    assert_same_weights(trainer_runs[1] / "checkpoint-5", trainer_runs[2] / "checkpoint-5")
    # the main process alone wrote the averaged model, and it is whole
    assert_same_weights(trainer_runs[2] / "checkpoint-5", trainer_runs[2] / "final")


def test_trainer_evaluation_on_two_processes_returns_one_prediction_per_example(trainer_runs, tmp_path):
    # Seq2SeqTrainer.predict itself gathers with `gather`, which keeps the example accelerate repeats to give both
    # processes 4 batches of 2: 8 rows for 7 pairs
    script = str(ROOT / "tests" / "distributed_predict.py")
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    launch((script, str(one)), 1)
    launch((script, str(two)), 2)
    single, distributed = json.loads(one.read_text()), json.loads(two.read_text())
    assert len(single) == len(distributed) == VALID_PAIRS
    assert distributed == single  # the same greedy translations in dataset order
    assert len({tuple(row) for row in single}) > 2
    # the CLI run evaluated on 7 pairs as well, with the same scores on one and two processes
    one_log, two_log = ([e for e in trainer_log(trainer_runs[n]) if "eval_bleu" in e][0] for n in (1, 2))
    for metric in ("eval_gen_len", "eval_bleu", "eval_chrf"):
        assert two_log[metric] == pytest.approx(one_log[metric], rel=1e-9, abs=1e-12)


def test_a_resume_on_two_processes_reproduces_the_uninterrupted_run(tmp_path):
    # token batches on 2 processes: the checkpoint after update 5 falls inside an epoch, so resuming sets the epoch
    # and skips that update's batches
    args = [*COMMON, "--max-steps", "7", "--max-tokens", "700", "--tokens-per-update", "2000", "--save-steps", "5",
            "--eval-steps", "100", "--eval-samples", "2", "--average-last", "2", "--report-to", "none"]  # fmt: skip
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    # the main process tokenizes the corpus into the cache; the other opens the same files
    cache = {"VANILLA_TRANSFORMER_TOKENIZED_CACHE": str(tmp_path / "cache")}
    first_run = launch(TRAIN, 2, *args, "--output-dir", str(straight), env=cache)
    assert len(list((tmp_path / "cache").iterdir())) == 2  # train and valid, no staging left
    assert first_run.stderr.count("tokenizing:   0%") == 2, first_run.stderr[-3000:]  # one map each, by one process
    # an interrupted run: what the first one had written when it saved its checkpoint
    resumed.mkdir()
    for name in ("checkpoint-5", "tokenizer", "preset.json"):
        source = straight / name
        shutil.copytree(source, resumed / name) if source.is_dir() else shutil.copy(source, resumed / name)
    resumed_run = launch(TRAIN, 2, *args, "--output-dir", str(resumed), env=cache)
    assert "tokenizing" not in resumed_run.stderr and len(list((tmp_path / "cache").iterdir())) == 2
    assert f"resuming from {resumed / 'checkpoint-5'}" in resumed_run.stdout
    assert_same_weights(straight / "final", resumed / "final")
    # Adam ran as torch's fused kernel
    state = torch.load(straight / "checkpoint-5" / "optimizer.pt", weights_only=True)
    assert state["param_groups"][0]["fused"] is True


def test_token_batches_shard_into_whole_batches_per_process():
    """What accelerate does with our sampler on N processes: process i takes batches i, i+N, ... of the shuffled
    epoch; with no fixed batch size (`even_batches`) a process short of a batch repeats the first ones; the epoch
    set on our sampler still reshuffles."""
    lengths = [3 + i % 11 for i in range(60)]
    sampler = TokenBudgetBatchSampler(lengths, lengths, max_tokens=60, seed=1)
    batches = list(sampler)
    assert len(batches) % 2 == 1  # the uneven case
    shards = [BatchSamplerShard(sampler, num_processes=2, process_index=i) for i in range(2)]
    assert [len(s) for s in shards] == [len(batches) // 2 + 1] * 2
    taken = [list(s) for s in shards]
    assert taken[0] == batches[0::2]
    assert taken[1] == batches[1::2] + [batches[0]]
    sampler.set_epoch(1)
    assert list(shards[0]) != taken[0] and sorted(map(sorted, list(sampler))) == sorted(map(sorted, batches))


# what a process prints when a peer of its gloo group died while it waited in a collective call
GLOO_ERRORS = ("Connection closed by peer", "Connection reset by peer", "gloo/transport")


def test_settings_no_run_can_finish_stop_both_processes_before_training(tmp_path):
    # issue 23: averaging 3 checkpoints (the demo preset) when 60 updates saved every 30 write 2 failed after all 60
    # updates on one process, and in a collective call on the other
    output = tmp_path / "run"
    result = run_launched(TRAIN, 2, "--preset", "demo", "--max-steps", "60", "--save-steps", "30",
                          "--output-dir", str(output), "--report-to", "none")  # fmt: skip
    printed = result.stdout + result.stderr
    # torchrun stops the other process once one fails; that each stops by itself is the test below
    assert result.returncode != 0
    assert "error: --average-last 3 averages the last 3 checkpoints at the end, but" in printed
    assert not any(error in printed for error in GLOO_ERRORS), printed[-4000:]
    assert not output.exists()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize(
    ("flags", "error"),
    [
        (["--max-tokens", "20"], "error: --max-tokens 20 is smaller than the longest training pair"),
        # raised by the main process alone, while the others wait for it to load the data first
        (["--valid-split", "dev"], "the built-in corpus has splits ['test', 'train', 'valid'], not 'dev'"),
    ],
)
def test_data_errors_stop_every_process_by_itself(flags, error, tmp_path):
    """Errors after the process group exists (a corpus without the split asked for, data that fit no batch): each
    process, started by hand as torchrun would start it but with no launcher to stop the others when one fails,
    exits with the error by itself rather than waiting for a peer."""
    env = {**launch_environment(), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": "2",
           "LOCAL_WORLD_SIZE": "2"}  # fmt: skip
    args = ["--preset", "demo", *flags, "--max-steps", "5", "--save-steps", "5", "--average-last", "1",
            "--output-dir", str(tmp_path / "run")]  # fmt: skip
    processes = [
        subprocess.Popen(
            [sys.executable, *TRAIN, *args],
            cwd=ROOT,
            env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(2)
    ]
    for process in processes:
        printed, _ = process.communicate(timeout=300)
        assert process.returncode == 2, printed[-4000:]
        assert error in printed, printed[-4000:]
        assert not any(error in printed for error in GLOO_ERRORS), printed[-4000:]
    assert not list((tmp_path / "run").glob("checkpoint-*"))


def test_paper_beam_search_keeps_processes_in_step_with_synced_gpus(tmp_path):
    """Under FSDP or ZeRO-3 every process must run the same number of forwards; the process whose search ends first
    keeps running dummy forwards until the other's ends, and each translates as it would alone."""
    result = tmp_path / "generated.json"
    launch(("tests/distributed_generate.py", str(result)), 2)
    first, second = json.loads(result.read_text())
    assert first["forwards"] == second["forwards"]
    assert len(first["output"][0]) < len(second["output"][0])  # the first process was done sooner
    model = tiny_model().eval()
    with torch.no_grad():
        model.model.shared.weight[EOS] *= 2.5
    for process in (first, second):
        alone = model.generate(input_ids=torch.tensor(process["source"]), max_new_tokens_over_input=2)
        assert alone.tolist() == process["output"]
