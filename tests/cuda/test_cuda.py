"""GPU correctness in one command (issue 48): what the model, generation and training tests check on the CPU, checked
on a CUDA device, plus what only a GPU can show (bf16 kernels, torch.compile with inductor and CUDA graphs, steps that
never wait for the device).

Every test here is marked `cuda` and deselected unless RUN_CUDA=1 (tests/conftest.py); `bash scripts/gpu_check.sh`
runs them. They run on $VANILLA_TRANSFORMER_TEST_DEVICE (default "cuda"): `RUN_CUDA=1
VANILLA_TRANSFORMER_TEST_DEVICE=cpu` runs the same tests on the CPU to check their logic, where a device-versus-CPU
comparison is the CPU against itself, the sync checks run their step without `torch.cuda.set_sync_debug_mode`, and
torch.compile traces with the "aot_eager" backend (the graphs dynamo and AOT autograd make, forward and backward,
without inductor's C++ code generation, which takes ~30 s a graph on 2 CPU cores; tests/model's slow tests compile
with inductor on the CPU).

They need torch, transformers, the model and training/optimization.py, nothing else: no `datasets` and no
`sacremoses`, which the GPU machines' image lacks. Models are the 2+2-layer `tiny_model` of tests/conftest.py with
random weights and random token ids.
"""

import copy
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from conftest import BOS, EOS, VOCAB, random_batch, tiny_model
from torch._dynamo.utils import counters
from transformers import CompileConfig
from transformers.cache_utils import DynamicCache, EncoderDecoderCache, StaticCache

from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.model.generation_vanilla_transformer import CACHE_OUTPUT_NAME
from vanilla_transformer.training.optimization import (
    label_smoothed_loss,
    paper_adam,
    paper_schedule,
    peak_learning_rate,
)

pytestmark = pytest.mark.cuda

DEVICE = torch.device(os.environ.get("VANILLA_TRANSFORMER_TEST_DEVICE", "cuda"))
ON_CUDA = DEVICE.type == "cuda"
# inductor (Triton kernels) and, for decoding, transformers' default "reduce-overhead" (CUDA graphs) on the GPU; see
# the module docstring for the CPU's "aot_eager"
COMPILE_BACKEND, DECODING_COMPILE_MODE = ("inductor", "reduce-overhead") if ON_CUDA else ("aot_eager", "default")

LABEL_SMOOTHING = 0.1  # §5.4
# fp32 on the device against fp32 on the CPU: the kernels sum in other orders (measured on the CPU: eager against sdpa
# attention differ by 1.3e-6 in logits of magnitude up to 3.3)
FP32_TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}
# relative difference of the bf16-autocast loss from the fp32 loss; 2.6e-4 on the CPU for this batch (8 mantissa
# bits), as in tests/model/test_mixed_precision.py
BF16_LOSS_TOLERANCE = 5e-3
# 1 - cosine of the bf16-autocast gradient with the fp32 one; at most 4.7e-3 over four batches on the CPU
BF16_GRADIENT_ANGLE = 5e-2
# decoding with weights perturbed by this much (std) must give the same tokens: it moves the logits by ~5e-4, 400 times
# what fp32 kernels on another device move them, so equal tokens across devices do not hang on a near tie
TIE_NOISE = 1e-5
DECODING = {"max_new_tokens": 10}


@pytest.fixture(scope="module", autouse=True)
def device() -> Iterator[torch.device]:
    """The test device, refused (failed, not skipped) where CUDA is asked for but absent: a GPU run that skipped
    everything would look green. fp32 matmuls in full precision (no TF32), cuBLAS set up for deterministic algorithms
    before its first use (the checkpoint test turns them on)."""
    if ON_CUDA and not torch.cuda.is_available():
        pytest.fail(
            f"VANILLA_TRANSFORMER_TEST_DEVICE={DEVICE} but torch {torch.__version__} sees no CUDA device; run "
            f"`bash scripts/gpu_check.sh` on a GPU machine, or set VANILLA_TRANSFORMER_TEST_DEVICE=cpu to check the "
            f"tests' logic",
            pytrace=False,
        )
    # cuBLAS reads the workspace setting when torch first creates its handle; deterministic algorithms refuse to run
    # matmuls without it (scripts/gpu_check.sh exports it too)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    yield DEVICE
    torch.set_float32_matmul_precision(precision)


@pytest.fixture
def fresh_dynamo() -> Iterator[None]:
    """Each compile test starts from no compiled code and leaves none behind."""
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


@pytest.fixture
def deterministic() -> Iterator[None]:
    """`torch.use_deterministic_algorithms(True)` for one test: an op without a deterministic CUDA kernel raises."""
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(enabled, warn_only=warn_only)


def on_device(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: tensor.to(DEVICE) for name, tensor in tensors.items()}


def training_batch(seed: int = 0) -> dict[str, torch.Tensor]:
    """`random_batch`'s padded source and its target as the collator gives them to the training loops: the labels are
    the target without its BOS and closed by EOS, the last row's last two ignored (-100, padding)."""
    batch = random_batch(seed=seed)
    target = batch["decoder_input_ids"]
    labels = torch.cat([target[:, 1:], torch.full_like(target[:, :1], EOS)], dim=1)
    labels[-1, -2:] = -100
    return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"], "labels": labels}


def smoothed_loss(model: torch.nn.Module, batch: dict, autocast_dtype: torch.dtype | None = None) -> tuple:
    """The forward with labels (the decoder reads them shifted right) and the label-smoothed loss the training loops
    minimise (training/optimization.py), under autocast if asked: (outputs, loss)."""
    with torch.autocast(DEVICE.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
        outputs = model(**batch)
        loss = label_smoothed_loss(LABEL_SMOOTHING)(outputs, batch["labels"])
    return outputs, loss


def loss_and_gradient(model: torch.nn.Module, batch: dict, autocast_dtype: torch.dtype | None = None) -> tuple:
    """(outputs, loss, every parameter's gradient flattened into one float32 vector) of one forward and backward."""
    model.zero_grad(set_to_none=True)
    outputs, loss = smoothed_loss(model, batch, autocast_dtype)
    loss.backward()
    gradient = torch.cat([parameter.grad.float().flatten() for parameter in model.parameters()])
    return outputs, loss.detach(), gradient


def training_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: dict,
    autocast_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """One update as the training loops make it: forward, label-smoothed loss, backward, Adam step, gradients
    cleared. Returns the loss, on the device (reading it would wait for the device)."""
    _, loss = smoothed_loss(model, batch, autocast_dtype)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()


@contextmanager
def sync_debug_error() -> Iterator[None]:
    """On CUDA, every call inside that makes the host wait for the device raises RuntimeError
    (`torch.cuda.set_sync_debug_mode("error")`): a host read (`.item()`, `bool(t)`, `nonzero`, boolean-mask indexing),
    a blocking copy between host and device, a synchronize. Elsewhere the block runs as it is;
    tests/model/test_modeling_vanilla_transformer.py counts the host reads of the same steps on the CPU."""
    if not ON_CUDA:
        yield
        return
    torch.cuda.synchronize()  # what was queued before is no part of the check
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(previous)


def decoding_case() -> tuple[VanillaTransformerForConditionalGeneration, list[dict[str, torch.Tensor]]]:
    """A tiny random model (on the CPU) whose hypotheses end with EOS at different lengths, and two padded batches of
    sources: 4 of up to 9 tokens, then 2 of up to 6 (shorter: a static cache pads them to the first's length)."""
    model = tiny_model(0).eval()
    with torch.no_grad():
        model.model.shared.weight[EOS] *= 3.0  # else a random model's hypotheses seldom end
    sources = []
    for batch_size, length, seed in ((4, 9, 5), (2, 6, 6)):
        batch = random_batch(batch_size=batch_size, src_len=length, seed=seed)
        sources.append({"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]})
    return model, sources


# --- fp32: the device computes what the CPU computes ----------------------------------------------------------------


@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
def test_fp32_logits_on_the_device_are_the_cpu_logits(attn_implementation):
    """One forward of the same weights on the same padded batch: the device's fp32 logits are the CPU's within 1e-4
    (relative and absolute), with torch's fused attention (sdpa) and with the model's own (eager)."""
    model = tiny_model().eval()
    model.set_attn_implementation(attn_implementation)
    batch = random_batch()
    with torch.no_grad():
        expected = model(**batch).logits
        logits = copy.deepcopy(model).to(DEVICE)(**on_device(batch)).logits
    assert logits.device.type == DEVICE.type and logits.dtype == torch.float32
    difference = (logits.cpu() - expected).abs().max().item()
    torch.testing.assert_close(logits.cpu(), expected, **FP32_TOLERANCE, msg=f"largest difference {difference:.2e}")


def test_the_decoding_case_is_no_near_tie():
    """The premise of the token comparisons below, checked on the CPU: greedy and beam-4 decoding of `decoding_case`
    give the same tokens when every weight moves by noise of std TIE_NOISE (logits move ~5e-4; noise of 1e-4 does
    change tokens), so a device whose fp32 kernels round differently (~1e-6) must give them too; and the case is not
    trivial (some sentences end with EOS before the limit, some do not, no two sentences of a batch decode alike)."""
    model, sources = decoding_case()
    for num_beams in (1, 4):
        ended = []
        for inputs in sources:
            expected = model.generate(**inputs, num_beams=num_beams, **DECODING)
            ended += (expected[:, 1:] == EOS).any(dim=1).tolist()
            assert len({tuple(row) for row in expected.tolist()}) == expected.shape[0]  # no two sentences alike
            for draw in range(3):
                noisy = copy.deepcopy(model)
                generator = torch.Generator().manual_seed(draw)
                with torch.no_grad():
                    for parameter in noisy.parameters():
                        parameter.add_(torch.randn(parameter.shape, generator=generator) * TIE_NOISE)
                tokens = noisy.generate(**inputs, num_beams=num_beams, **DECODING)
                assert torch.equal(tokens, expected), (num_beams, draw)
        assert any(ended) and not all(ended), (num_beams, ended)


@pytest.mark.parametrize("num_beams", [1, 4], ids=["greedy", "paper-beam-search"])
def test_generate_on_the_device_gives_the_cpu_tokens(num_beams):
    """Greedy search (transformers' loop) and the paper's beam search (beam 4, GNMT penalty, sentences leaving the
    batch as they finish) in fp32 on the device give the CPU's tokens for both batches of `decoding_case`."""
    model, sources = decoding_case()
    on_gpu = copy.deepcopy(model).to(DEVICE)
    for inputs in sources:
        expected = model.generate(**inputs, num_beams=num_beams, **DECODING)
        tokens = on_gpu.generate(**on_device(inputs), num_beams=num_beams, **DECODING)
        assert tokens.device.type == DEVICE.type
        assert torch.equal(tokens.cpu(), expected), (tokens, expected)


# --- bf16 -----------------------------------------------------------------------------------------------------------


def test_bf16_autocast_training_step_is_finite_and_near_fp32():
    """Forward and backward under bf16 autocast, as `--bf16` trains: the matmuls do run in bf16 (bf16 logits), the
    loss and every gradient are finite, the loss is within BF16_LOSS_TOLERANCE of the fp32 loss of the same weights
    and batch, and the gradient points where the fp32 gradient points (1 - cosine below BF16_GRADIENT_ANGLE)."""
    model = tiny_model(dropout=0.0).train().to(DEVICE)  # no dropout: both passes compute the same function
    batch = on_device(training_batch())
    _, reference_loss, reference_gradient = loss_and_gradient(model, batch)
    outputs, loss, gradient = loss_and_gradient(model, batch, torch.bfloat16)
    assert outputs.logits.dtype == torch.bfloat16
    assert torch.isfinite(loss) and torch.isfinite(gradient).all()
    assert loss.dtype == torch.float32  # the loss upcasts the logits before the softmax
    assert loss.item() == pytest.approx(reference_loss.item(), rel=BF16_LOSS_TOLERANCE)
    cosine = torch.nn.functional.cosine_similarity(gradient, reference_gradient, dim=0).item()
    assert 1 - cosine < BF16_GRADIENT_ANGLE, cosine


@pytest.mark.parametrize("num_beams", [1, 4], ids=["greedy", "paper-beam-search"])
def test_bf16_weights_generate_what_fp32_weights_generate_in_shape(num_beams):
    """A model cast to bf16 (`translate --dtype bfloat16`) decodes on the device: as many sentences and tokens as the
    fp32 model (a fixed number of new tokens), the decoder start first, every id in the vocabulary, finite raw logits
    at every step and, for beam search, finite sequence scores. The tokens themselves may differ: bf16 keeps 3
    significant digits, and weight noise that moves fp32 logits by ~5e-3 already changes them (see TIE_NOISE)."""
    model, sources = decoding_case()
    model = model.to(DEVICE)
    half = copy.deepcopy(model).to(torch.bfloat16)
    assert {parameter.dtype for parameter in half.parameters()} == {torch.bfloat16}
    options = {
        "num_beams": num_beams,
        "max_new_tokens": 6,
        "min_new_tokens": 6,
        "return_dict_in_generate": True,
        "output_logits": True,
    }
    inputs = on_device(sources[0])
    expected = model.generate(**inputs, **options)
    output = half.generate(**inputs, **options)
    sequences = output.sequences
    assert sequences.shape == expected.sequences.shape == (inputs["input_ids"].shape[0], 7)
    assert sequences.dtype == torch.long
    assert (sequences[:, 0] == BOS).all()
    assert ((sequences >= 0) & (sequences < VOCAB)).all()
    assert len(output.logits) == 6 and all(torch.isfinite(logits).all() for logits in output.logits)
    if num_beams > 1:
        assert torch.isfinite(output.sequences_scores).all()


# --- torch.compile --------------------------------------------------------------------------------------------------


def test_compiled_training_step_gives_the_eager_loss_and_gradient(fresh_dynamo):
    """The model compiled whole (`torch.compile(model)`, inductor on the GPU) gives, forward and backward, the eager
    loss within 1e-5 relative and the eager gradient within 1e-4 relative of its largest entry (fused kernels sum in
    other orders; on the CPU with aot_eager they are equal)."""
    model = tiny_model(dropout=0.0).train().to(DEVICE)  # compiled dropout draws other random numbers than eager
    batch = on_device(training_batch())
    _, eager_loss, eager_gradient = loss_and_gradient(model, batch)
    compiled = torch.compile(model, backend=COMPILE_BACKEND)
    _, loss, gradient = loss_and_gradient(compiled, batch)
    assert counters["stats"]["unique_graphs"] >= 1  # it did compile
    assert loss.item() == pytest.approx(eager_loss.item(), rel=1e-5)
    scale = eager_gradient.abs().max().item()
    torch.testing.assert_close(gradient, eager_gradient, rtol=0, atol=1e-4 * scale)


@pytest.mark.parametrize("num_beams", [1, 4], ids=["greedy", "paper-beam-search"])
def test_compiled_static_cache_decoding_gives_the_dynamic_cache_tokens(num_beams, fresh_dynamo):
    """`cache_implementation="static"` with `CompileConfig(fullgraph=True, dynamic=False)` (as the README shows; on the
    GPU with transformers' default mode, CUDA graphs) gives the tokens of eager decoding with the dynamic cache, for
    the first batch and for the shorter second one (padded, masked, to the first's length), and compiled a graph."""
    model, sources = decoding_case()
    model = model.to(DEVICE)
    compile_config = CompileConfig(fullgraph=True, dynamic=False, backend=COMPILE_BACKEND, mode=DECODING_COMPILE_MODE)
    compile_config._compile_all_devices = True  # transformers compiles on accelerators only, unless told
    for inputs in sources:
        inputs = on_device(inputs)
        expected = model.generate(**inputs, num_beams=num_beams, **DECODING)
        tokens = model.generate(
            **inputs, num_beams=num_beams, cache_implementation="static", compile_config=compile_config, **DECODING
        )
        assert torch.equal(tokens, expected), (tokens, expected)
    assert counters["stats"]["unique_graphs"] >= 1  # the decoding step was compiled


# --- no waiting for the device --------------------------------------------------------------------------------------


@pytest.mark.parametrize("autocast_dtype", [None, torch.bfloat16], ids=["fp32", "bf16-autocast"])
def test_a_training_step_never_waits_for_the_device(autocast_dtype):
    """A whole update (forward with labels, which also computes the model's own loss; label-smoothed loss; backward;
    fused Adam step, `paper_adam`; the §5.3 schedule; gradients cleared) under
    `torch.cuda.set_sync_debug_mode("error")` raises nothing: nothing in it makes the host wait for the GPU. It runs
    after a warm-up update, which creates Adam's state. The training loops around it do read values (the logged loss,
    accelerate's gradient accumulation), once per update; the step itself must not. The batches are small: above 3072
    tokens a side torch's embedding backward takes another (sorting) kernel, which this test does not reach."""
    model = tiny_model(dropout=0.1).train().to(DEVICE)
    optimizer = paper_adam(model.parameters(), peak_learning_rate(model.config.d_model, 4000), DEVICE)
    schedule = paper_schedule(optimizer, warmup_steps=4000)
    first, second = on_device(training_batch(0)), on_device(training_batch(1))
    before = training_step(model, optimizer, first, autocast_dtype=autocast_dtype)
    schedule.step()
    weights = [parameter.detach().clone() for parameter in model.parameters()]
    with sync_debug_error():
        loss = training_step(model, optimizer, second, autocast_dtype=autocast_dtype)
        schedule.step()
    assert torch.isfinite(before) and torch.isfinite(loss)
    assert all(not torch.equal(old, new) for old, new in zip(weights, model.parameters(), strict=True))
    assert all(parameter.grad is None for parameter in model.parameters())


@pytest.mark.parametrize("cache_implementation", ["dynamic", "static"])
def test_a_cached_decoding_step_never_waits_for_the_device(cache_implementation):
    """One decoding step (the model's forward on one new token per sentence, with the encoder output, the source mask
    and a filled `EncoderDecoderCache`, dynamic or static as `generate` builds them) under
    `torch.cuda.set_sync_debug_mode("error")` raises nothing, and gives the logits of the full forward at that
    position. The step is tested, not `generate()`: its loops read values on the host by design, once per step
    (transformers' stopping criteria, the paper's beam search's `done_sentences.all()` and the rows it drops). The
    first forward (the prefill: it creates the cache and, for a static one, moves its position counter to the device)
    and one cached step run before the checked one."""
    model = tiny_model().eval().to(DEVICE)
    batch = on_device(random_batch())
    target = batch["decoder_input_ids"]
    if cache_implementation == "static":
        cache = EncoderDecoderCache(
            StaticCache(config=model.config, max_cache_len=target.shape[1]),
            StaticCache(config=model.config, max_cache_len=batch["input_ids"].shape[1]),
        )
    else:
        cache = EncoderDecoderCache(DynamicCache(config=model.config), DynamicCache(config=model.config))
    with torch.no_grad():
        expected = model(**batch).logits
        encoder_outputs = model.get_encoder()(batch["input_ids"], attention_mask=batch["attention_mask"])
        step = {"encoder_outputs": encoder_outputs, "attention_mask": batch["attention_mask"], "use_cache": True}
        model(**step, decoder_input_ids=target[:, :3], cache=cache)
        model(**step, decoder_input_ids=target[:, 3:4], cache=cache)
        with sync_debug_error():
            outputs = model(**step, decoder_input_ids=target[:, 4:5], cache=cache)
    assert getattr(outputs, CACHE_OUTPUT_NAME) is cache
    torch.testing.assert_close(outputs.logits[:, 0], expected[:, 4], rtol=1e-5, atol=1e-5)


# --- checkpoint and resume ------------------------------------------------------------------------------------------

SEED = 1234


def resumable_parts(model: VanillaTransformerForConditionalGeneration) -> tuple:
    """The model on the device in training mode, with `paper_adam` and the §5.3 schedule over it."""
    model = model.to(DEVICE).train()
    optimizer = paper_adam(model.parameters(), peak_learning_rate(model.config.d_model, 4), DEVICE)
    return model, optimizer, paper_schedule(optimizer, warmup_steps=4)


def train(parts: tuple, batches: list[dict], updates: range) -> list[float]:
    """Updates `updates` over `batches`, each seeded from (SEED, update) alone as the accelerate loop seeds dropout,
    so that a resumed run draws what the uninterrupted one drew. Returns the losses."""
    model, optimizer, schedule = parts
    losses = []
    for update in updates:
        torch.manual_seed(SEED + update)
        losses.append(training_step(model, optimizer, batches[update]).item())
        schedule.step()
    return losses


def assert_same_training_state(parts: tuple, expected: tuple, what: str) -> None:
    """Every weight and Adam's step and moments of `parts` equal those of `expected` bit for bit; a failure names the
    tensor and its largest difference."""
    pairs = zip(parts[0].named_parameters(), expected[0].parameters(), strict=True)
    for (name, parameter), other in pairs:
        tensors = [(name, parameter, other)]
        mine, theirs = parts[1].state[parameter], expected[1].state[other]
        tensors += [(f"{name} Adam {key}", mine[key], theirs[key]) for key in ("step", "exp_avg", "exp_avg_sq")]
        for label, tensor, reference in tensors:
            difference = (tensor.double() - reference.double()).abs().max().item()
            assert torch.equal(tensor, reference), f"{what}: {label} differs by up to {difference:.3e}"


def test_resuming_from_a_checkpoint_continues_bit_for_bit(tmp_path: Path, deterministic):
    """2 updates, the model saved (`save_pretrained`) with the optimizer's and schedule's state, both loaded into
    fresh objects on the device, 2 more updates: the losses, every weight and Adam's moments equal those of 4
    uninterrupted updates exactly. Exact on CUDA too: the test runs under `torch.use_deterministic_algorithms(True)`
    (cuBLAS with CUBLAS_WORKSPACE_CONFIG=:4096:8) with the model's eager attention (matmuls and a softmax), since
    torch's fused attention kernels may accumulate their backward with atomics. Two uninterrupted runs are compared
    first, so that kernels that are not deterministic fail as such, not as a resume bug. Dropout is on: each update
    reseeds it, as the accelerate loop does."""

    def fresh_model() -> VanillaTransformerForConditionalGeneration:
        model = tiny_model(dropout=0.1)
        model.set_attn_implementation("eager")
        return model

    batches = [on_device(training_batch(seed)) for seed in range(4)]
    uninterrupted = resumable_parts(fresh_model())
    expected_losses = train(uninterrupted, batches, range(4))
    assert len(set(expected_losses)) == 4  # the updates did change the model
    again = resumable_parts(fresh_model())
    repeated_losses = train(again, batches, range(4))
    assert repeated_losses == expected_losses, "two uninterrupted runs differ: kernels not deterministic"
    assert_same_training_state(again, uninterrupted, "two uninterrupted runs (kernels not deterministic)")
    del again

    first = resumable_parts(fresh_model())
    losses = train(first, batches, range(2))
    model, optimizer, schedule = first
    model.save_pretrained(tmp_path)
    torch.save({"optimizer": optimizer.state_dict(), "schedule": schedule.state_dict()}, tmp_path / "state.pt")
    del first, model, optimizer, schedule

    loaded = VanillaTransformerForConditionalGeneration.from_pretrained(tmp_path, attn_implementation="eager")
    resumed = resumable_parts(loaded)
    state = torch.load(tmp_path / "state.pt", map_location=DEVICE, weights_only=True)
    resumed[1].load_state_dict(state["optimizer"])
    resumed[2].load_state_dict(state["schedule"])
    losses += train(resumed, batches, range(2, 4))

    assert losses == expected_losses
    assert_same_training_state(resumed, uninterrupted, "resumed against uninterrupted")
