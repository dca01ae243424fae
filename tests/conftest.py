import atexit
import contextlib
import importlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

# The Hub stand-in (tests/hub_server.py), one per test process (each pytest-xdist worker imports this file). The
# huggingface_hub client reads HF_ENDPOINT, HF_TOKEN, HF_HOME, HF_HUB_DISABLE_XET and HF_HUB_OFFLINE once, when it is
# first imported (below, through vanilla_transformer → transformers), so the server starts and the variables are set
# before any of those imports.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from hub_server import LocalHub  # noqa: E402  (must precede the imports that load huggingface_hub)

HUB_USER, HUB_TOKEN = "tester", "hf_tester_write_token"
HUB = LocalHub({HUB_TOKEN: HUB_USER}).start()
_HF_HOME = tempfile.mkdtemp(prefix="hf-home-")  # a cache no other run shares, and no stored login
atexit.register(shutil.rmtree, _HF_HOME, True)
atexit.register(HUB.stop)
# scripts/run.sh runs the suite with HF_HUB_OFFLINE=1 so that no test reaches the internet. Hub tests need the client
# online, and it is safe to turn it on: HF_ENDPOINT sends every request of the client to the server above on
# 127.0.0.1. `datasets` keeps the offline mode it was given (it has its own variable, and would otherwise look up
# datasets on that server).
os.environ.setdefault("HF_DATASETS_OFFLINE", os.environ.get("HF_HUB_OFFLINE", "0"))
os.environ.update(
    HF_ENDPOINT=HUB.url,
    HF_TOKEN=HUB_TOKEN,
    HF_HOME=_HF_HOME,
    HF_HUB_DISABLE_XET="1",  # the client uploads through Xet whenever hf_xet is installed; the stand-in has no Xet
    HF_HUB_OFFLINE="0",
)

import pytest  # noqa: E402
import torch  # noqa: E402

import vanilla_transformer  # noqa: E402, F401  (registers the Auto classes)
from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration  # noqa: E402
from vanilla_transformer.data.multi30k import multi30k_dir  # noqa: E402
from vanilla_transformer.errors import Multi30kUnavailable  # noqa: E402

# transformers' convention: the tests that spawn processes or train are marked slow and run only with RUN_SLOW=1
# (`.ci/run` runs them); the README's test command runs the rest in a few minutes.
RUN_SLOW = os.environ.get("RUN_SLOW", "0").lower() in ("1", "true", "yes")
# the tests marked cuda (tests/cuda/) need a GPU and run only with RUN_CUDA=1 (`scripts/gpu_check.sh`); CI has no GPU,
# so they are deselected there as slow ones are, not counted as skipped
RUN_CUDA = os.environ.get("RUN_CUDA", "0").lower() in ("1", "true", "yes")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for marker, run in (("slow", RUN_SLOW), ("cuda", RUN_CUDA)):
        if run:
            continue
        marked = [item for item in items if item.get_closest_marker(marker)]
        if marked:
            config.hook.pytest_deselected(items=marked)
            items[:] = [item for item in items if not item.get_closest_marker(marker)]


# pytest -n 2 runs two workers on two cores: more threads per worker only make them wait for each other
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def multi30k() -> Path:
    """The Multi30k folder (`{split}.{lang}`, `tok/`): $VANILLA_TRANSFORMER_MULTI30K, else a complete download cache;
    tests never download it. Without it the tests that read it are skipped, or fail where
    VANILLA_TRANSFORMER_REQUIRE_DATA=1 (CI, whose data must not go missing unnoticed)."""
    try:
        return multi30k_dir(download=False)
    except Multi30kUnavailable as error:
        unavailable = error
    if os.environ.get("VANILLA_TRANSFORMER_REQUIRE_DATA") == "1":
        pytest.fail(f"VANILLA_TRANSFORMER_REQUIRE_DATA=1: {unavailable}", pytrace=False)
    pytest.skip(
        "no Multi30k files: set VANILLA_TRANSFORMER_MULTI30K=DIR (a folder of {split}.{lang} and tok/), "
        "or run `vanilla-transformer download-multi30k`"
    )


@pytest.fixture(scope="session")
def tatoeba() -> Path:
    """The Tatoeba English-Mandarin file (manythings.org's `cmn.txt`), $VANILLA_TRANSFORMER_TATOEBA; skipped without
    it, failed where VANILLA_TRANSFORMER_REQUIRE_DATA=1 (CI points at its copy beside the checkout)."""
    path = Path(os.environ.get("VANILLA_TRANSFORMER_TATOEBA") or "no-such-file")
    if path.is_file():
        return path
    if os.environ.get("VANILLA_TRANSFORMER_REQUIRE_DATA") == "1":
        pytest.fail(f"VANILLA_TRANSFORMER_REQUIRE_DATA=1, but {path} is no file", pytrace=False)
    pytest.skip("no Tatoeba cmn.txt: set VANILLA_TRANSFORMER_TATOEBA=FILE (from manythings.org/anki/cmn-eng.zip)")


VOCAB = 64
PAD, BOS, EOS = 0, 1, 2


def tiny_config(**overrides) -> VanillaTransformerConfig:
    """A 2+2-layer model small enough for exact CPU checks; dropout off unless a test turns it on."""
    values = {
        "vocab_size": VOCAB,
        "d_model": 32,
        "encoder_layers": 2,
        "decoder_layers": 2,
        "encoder_attention_heads": 4,
        "decoder_attention_heads": 4,
        "encoder_ffn_dim": 64,
        "decoder_ffn_dim": 64,
        "dropout": 0.0,
        "max_position_embeddings": 64,
    }
    values.update(overrides)
    return VanillaTransformerConfig(**values)


def tiny_model(seed: int = 0, **overrides) -> VanillaTransformerForConditionalGeneration:
    torch.manual_seed(seed)
    return VanillaTransformerForConditionalGeneration(tiny_config(**overrides)).eval()


def random_batch(batch_size: int = 3, src_len: int = 9, tgt_len: int = 7, seed: int = 0) -> dict:
    """Source and target ids without special tokens, with some right padding in the source."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(3, VOCAB, (batch_size, src_len), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    for row in range(1, batch_size):
        attention_mask[row, src_len - 2 * row :] = 0
    input_ids = input_ids.masked_fill(attention_mask == 0, PAD)
    decoder_input_ids = torch.randint(3, VOCAB, (batch_size, tgt_len), generator=generator)
    decoder_input_ids[:, 0] = BOS
    return {"input_ids": input_ids, "attention_mask": attention_mask, "decoder_input_ids": decoder_input_ids}


@pytest.fixture
def model() -> VanillaTransformerForConditionalGeneration:
    return tiny_model()


@pytest.fixture
def batch() -> dict:
    return random_batch()


@pytest.fixture(scope="session")
def builtin_tokenizer():
    """The joint BPE trained on the built-in corpus (real tokenizer, built in about a second)."""
    from vanilla_transformer.data.corpora import load_builtin
    from vanilla_transformer.data.tokenization import train_joint_bpe

    pairs = load_builtin("train")["translation"]
    return train_joint_bpe([p["en"] for p in pairs] + [p["de"] for p in pairs], vocab_size=600)


def command_main(command: str) -> Callable[[list[str]], None]:
    """The `main(argv)` of `vanilla-transformer COMMAND`, or of the lab's `scripts/<command>.py` (on the path: see
    pyproject's pytest settings)."""
    from vanilla_transformer.cli.main import COMMANDS, main, run_script

    if command in COMMANDS:
        return lambda argv: main([command, *argv])
    return lambda argv: run_script(importlib.import_module(command), argv)


def run_in_process(
    entry: Callable[[list[str]], None], argv: tuple[str, ...] | list[str], cwd: Path, stdin_path: Path | None = None
) -> subprocess.CompletedProcess:
    """`entry(argv)` (a script's or the CLI's `main`) in `cwd`, as a process would run it: its stdin from
    `stdin_path`, its stdout, stderr and exit status returned. The refusal tests run here, not in a fresh process,
    which would spend ~10 s importing torch and transformers each time; tests/cli/test_cli.py runs the real programs."""
    stdout, stderr = io.StringIO(), io.StringIO()
    returncode = 0
    with open(stdin_path or os.devnull) as stdin:
        saved_stdin, saved_cwd, sys.stdin = sys.stdin, Path.cwd(), stdin
        os.chdir(cwd)
        try:
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                entry(list(argv))
        except SystemExit as exited:
            returncode = exited.code if isinstance(exited.code, int) else 1
        finally:
            sys.stdin = saved_stdin
            os.chdir(saved_cwd)
    return subprocess.CompletedProcess(list(argv), returncode, stdout.getvalue(), stderr.getvalue())
