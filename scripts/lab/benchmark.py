"""Speed and memory, side by side in one process: this model, transformers' `MarianMTModel` and a plain
`torch.nn.Transformer` of the same sizes (`benchmark_models`); ours and Marian also through `torch.compile`
(`<name>_compiled`); and this model exported to CTranslate2 (`CTRANSLATE2`). Each precision of
`Benchmark(dtypes=...)` is a pass over every workload (rows named `<name>_bf16`: autocast for training, bf16
weights for generation), its shares taken of that precision's measured matmul peak.

Each workload runs on every model in turn, the order rotated each repeat, and the median of the repeats is reported.
Training counts real (non-padding) source + target tokens per second of forward + backward + Adam step; generation
counts new tokens per second, every model made to generate exactly as many (EOS suppressed until then). Peak
training memory is measured in a fresh process per model (CPU: the growth of the peak resident set; GPU:
`torch.cuda.max_memory_allocated`).
"""

import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from vanilla_transformer.model.configuration_vanilla_transformer import VanillaTransformerConfig

from . import lab_process
from .benchmark_models import (
    CTRANSLATE2,
    MODELS,
    Workloads,
    build_benchmark_model,
    ctranslate2_fns,
    generate_fn,
    measure,
    random_batch,
    train_step_fn,
    training_step,
)

# the config fields the report names
REPORTED_CONFIG = (
    "vocab_size",
    "d_model",
    "encoder_layers",
    "decoder_layers",
    "encoder_ffn_dim",
    "encoder_attention_heads",
)


def matmul_params(config: VanillaTransformerConfig) -> tuple[int, int, int]:
    """Weights multiplied per source token (encoder), per target token (decoder, output projection included) and
    per source token by the decoder's cross-attention keys and values."""
    d = config.d_model
    encoder = config.encoder_layers * (4 * d * d + 2 * d * config.encoder_ffn_dim)
    cross_kv = config.decoder_layers * 2 * d * d
    decoder = config.decoder_layers * (6 * d * d + 2 * d * config.decoder_ffn_dim) + d * config.vocab_size
    return encoder, decoder, cross_kv


def training_flops(config: VanillaTransformerConfig, batch: dict) -> float:
    """Matmul FLOPs of forward + backward (3 × forward) on the padded batch, attention scores included."""
    encoder, decoder, cross_kv = matmul_params(config)
    batch_size, source = batch["input_ids"].shape
    target = batch["labels"].shape[1]
    d = config.d_model
    weights = 2 * batch_size * ((encoder + cross_kv) * source + decoder * target)
    attention = (
        4 * batch_size * d * (config.encoder_layers * source**2 + config.decoder_layers * (target**2 + target * source))
    )
    return 3.0 * (weights + attention)


def generation_flops(config: VanillaTransformerConfig, rows: int, source: int, new_tokens: int) -> float:
    """Matmul FLOPs of cached decoding: the encoder and cross-attention keys/values once, then per token the
    decoder's weights and attention over the source and the prefix."""
    encoder, decoder, cross_kv = matmul_params(config)
    d = config.d_model
    once = 2 * rows * source * (encoder + cross_kv) + 4 * rows * d * config.encoder_layers * source**2
    per_token = 2 * rows * decoder
    attention = sum(4 * rows * d * config.decoder_layers * (source + t + 1) for t in range(new_tokens))
    return once + per_token * new_tokens + attention


def peak_matmul_flops(device: torch.device, dtype: torch.dtype, size: int = 2048, repeats: int = 5) -> float:
    """The best FLOP/s of a square matmul, the machine's practical peak for this dtype."""
    a, b = torch.randn(2, size, size, device=device, dtype=dtype)
    return 2 * size**3 / min(measure(lambda: a @ b, device) for _ in range(repeats))


def time_workload(
    fns: dict[str, Callable[[], None]],
    device: torch.device,
    repeats: int,
    tokens: int,
    flops: float = 0.0,
    warmup: int = 1,
) -> dict[str, dict]:
    """One workload on every row: each called `warmup` times first (the first call timed: a compiled row compiles
    there), then `repeats` rounds with the order rotated so that no row always runs first; the median per row."""
    names = list(fns)
    first_call = {name: measure(fn, device, warmup=0) for name, fn in fns.items()}
    for fn in fns.values():
        for _ in range(warmup - 1):
            fn()
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for repeat in range(repeats):
        for name in names[repeat % len(names) :] + names[: repeat % len(names)]:
            seconds[name].append(measure(fns[name], device, warmup=0))
    medians = {name: statistics.median(times) for name, times in seconds.items()}
    return {
        name: {
            "median_seconds": median,
            "tokens_per_second": tokens / median,
            "flops_per_second": flops / median,
            "seconds": seconds[name],
            "first_call_seconds": first_call[name],  # for a compiled row: compiling, then one run
        }
        for name, median in medians.items()
    }


@dataclass(frozen=True)
class Benchmark:
    """What `run_benchmark` measures: `compiled` adds `vanilla_compiled` and `marian_compiled` rows, `ctranslate2`
    this model exported to CTranslate2 (with the float32 pass), `memory` the peak training memory of each model."""

    config: VanillaTransformerConfig
    workloads: Workloads = Workloads()
    models: tuple[str, ...] = MODELS
    repeats: int = 5
    device: str = "cpu"
    dtypes: tuple[torch.dtype, ...] = (torch.float32,)
    attn_implementation: str = "sdpa"
    memory: bool = True
    compiled: bool = True
    ctranslate2: bool = True


def workload_inputs(config: VanillaTransformerConfig, workloads: Workloads, device: torch.device) -> dict[str, tuple]:
    """Each workload's (batch or sources, tokens counted, FLOPs, beams): "train", then the greedy and beam searches."""
    shape = (workloads.train_batch_size, workloads.train_source_length, workloads.train_target_length)
    train = random_batch(*shape, config.vocab_size, device=device)
    train_tokens = int((train["attention_mask"].sum() + (train["labels"] != -100).sum()).item())
    jobs = {"train": (train, train_tokens, training_flops(config, train), 0)}
    beam = (f"beam{workloads.num_beams}_b{workloads.beam_batch_size}", workloads.beam_batch_size, workloads.num_beams)
    searches = [(f"greedy_b{size}", size, 1, size) for size in workloads.greedy_batch_sizes] + [(*beam, 7)]
    for job, batch_size, num_beams, seed in searches:
        batch = random_batch(batch_size, workloads.generate_source_length, 2, config.vocab_size, seed, device)
        rows = batch_size * num_beams
        flops = generation_flops(config, rows, workloads.generate_source_length, workloads.new_tokens)
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask")}
        jobs[job] = (inputs, batch_size * workloads.new_tokens, flops, num_beams)
    return jobs


def speed_pass(run: Benchmark, dtype: torch.dtype, jobs: dict[str, tuple], log: Callable[[str], None]) -> dict:
    """tokens/s medians per workload and row in one precision (see the module docstring)."""
    device, new_tokens = torch.device(run.device), run.workloads.new_tokens

    def build(name: str) -> torch.nn.Module:
        return build_benchmark_model(name, run.config, run.attn_implementation).to(device)

    built = {name: build(name) for name in run.models}
    generators = built if dtype == torch.float32 else {name: build(name).to(dtype) for name in run.models}
    compiled = [name for name in ("vanilla", "marian") if run.compiled and name in built]
    with tempfile.TemporaryDirectory(prefix="benchmark-ctranslate2-") as folder:
        exported = {}
        if run.ctranslate2 and dtype == torch.float32 and "vanilla" in built:
            exported = ctranslate2_fns(built["vanilla"], folder, device)
        fns: dict[str, dict[str, Callable[[], None]]] = {}
        for job, (batch, _, _, beams) in jobs.items():
            if job == "train":  # a compiled row trains a second copy of the model, through `torch.compile`
                fns[job] = {name: train_step_fn(name, model, batch, dtype) for name, model in built.items()}
                fns[job] |= {
                    f"{name}_compiled": training_step(name, run.config, batch, dtype, True, run.attn_implementation)
                    for name in compiled
                }
            else:
                fns[job] = {
                    name: generate_fn(name, model, batch, new_tokens, beams)
                    for name, model in generators.items()
                    if beams == 1 or name != "torch"
                }
                fns[job] |= {
                    f"{name}_compiled": generate_fn(name, generators[name], batch, new_tokens, beams, compiled=True)
                    for name in compiled
                }
                fns[job] |= {name: translate_fn(batch, new_tokens, beams) for name, translate_fn in exported.items()}
        results: dict[str, dict] = {}
        for job, (_, tokens, flops, _) in jobs.items():
            results[job] = time_workload(fns[job], device, run.repeats, tokens, flops)
            log(
                f"{job}: "
                + ", ".join(f"{name} {result['tokens_per_second']:.0f} tok/s" for name, result in results[job].items())
            )
    return results


def peak_training_memory(
    name: str, config: VanillaTransformerConfig, workloads: Workloads, device: str = "cpu", steps: int = 3
) -> int:
    """Bytes of peak memory of `steps` training steps of one model, measured in a fresh process."""
    args = json.dumps([name, config.to_dict(), workloads.__dict__, device, steps])
    command, env = lab_process("benchmark", args)
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the memory measurement of {name} failed:\n{done.stderr[-3000:]}")
    return int(json.loads(done.stdout.strip().splitlines()[-1]))


def _memory_child(name: str, config: dict, workloads: dict, device: str, steps: int) -> int:
    config = VanillaTransformerConfig.from_dict(config)
    workloads = Workloads(**{k: tuple(v) if isinstance(v, list) else v for k, v in workloads.items()})
    shape = (workloads.train_batch_size, workloads.train_source_length, workloads.train_target_length)
    batch = random_batch(*shape, config.vocab_size, device="cuda" if device == "cuda" else "cpu")
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    else:
        # Linux: writing 5 to clear_refs resets the peak resident set (VmHWM) to the current one, so the imports'
        # own peak does not hide the model's
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
        before = status_kib("VmRSS")
    step = training_step(name, config, batch, torch.float32)
    for _ in range(steps):
        step()
    return torch.cuda.max_memory_allocated() if device == "cuda" else (status_kib("VmHWM") - before) * 1024


def status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}: peak CPU memory is measured on Linux only")


def machine_description(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name()
    cpu = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {torch.get_num_threads()} threads"


DTYPE_SUFFIX = {torch.float32: "", torch.bfloat16: "_bf16", torch.float16: "_fp16"}


def speed_ratios(speed: dict) -> dict[str, dict[str, float]]:
    """tokens/s of subject / reference per workload, for the pairs whose rows exist: ours against Marian in each
    precision, each precision of ours against our fp32 eager, and the CTranslate2 exports against ours."""
    rows = {name for by_model in speed.values() for name in by_model}
    pairs = [(f"vanilla{suffix}", f"marian{suffix}") for suffix in DTYPE_SUFFIX.values()]
    pairs += [
        (f"vanilla{variant}{suffix}", "vanilla") for suffix in ("_bf16", "_fp16") for variant in ("", "_compiled")
    ]
    pairs += [(name, "vanilla") for name in CTRANSLATE2]
    return {
        f"{subject} / {reference}": {
            job: by_model[subject]["tokens_per_second"] / by_model[reference]["tokens_per_second"]
            for job, by_model in speed.items()
            if subject in by_model and reference in by_model
        }
        for subject, reference in pairs
        if subject in rows and reference in rows
    }


def format_table(report: dict) -> str:
    """A Markdown table: tokens/s per model and workload with its share of the matmul peak, and the ratios."""
    speed, ratios = report["speed"], report["ratios"]
    models = list(dict.fromkeys(name for by_model in speed.values() for name in by_model))
    header = "| workload | " + " | ".join(f"{m} tok/s (% of peak)" for m in models) + " |"
    header += "".join(f" {pair} |" for pair in ratios)
    lines = [header, "|" + "---|" * (len(models) + 1 + len(ratios))]
    for job, by_model in speed.items():
        cells = [
            f"{by_model[m]['tokens_per_second']:,.0f} ({by_model[m]['share_of_peak']:.1%})" if m in by_model else "n/a"
            for m in models
        ]
        cells += [f"{by_job[job]:.2f}×" if job in by_job else "n/a" for by_job in ratios.values()]
        lines.append(f"| {job} | " + " | ".join(cells) + " |")
    if report.get("memory"):
        memory = report["memory"]
        cells = [f"{memory[m] / 2**20:,.0f} MiB" if m in memory else "n/a" for m in models]
        lines.append("| peak training memory (fp32) | " + " | ".join(cells) + " |" + " n/a |" * len(ratios))
    return "\n".join(lines)


def run_benchmark(run: Benchmark, log: Callable[[str], None] = print) -> dict:
    """Speeds in each of `run.dtypes` (rows named with a suffix, `_bf16`), the matmul peak of each, ratios, peak
    training memory, the machine."""
    config, workloads, device = run.config, run.workloads, run.device
    peaks = {dtype: peak_matmul_flops(torch.device(device), dtype) for dtype in run.dtypes}
    for dtype, peak in peaks.items():
        log(f"matmul peak: {peak / 1e9:.1f} GFLOP/s ({dtype}, {machine_description(device)})")
    jobs = workload_inputs(config, workloads, torch.device(device))
    speed: dict[str, dict] = {}
    for dtype in run.dtypes:
        for job, by_model in speed_pass(run, dtype, jobs, log).items():
            for name, result in by_model.items():
                result["dtype"] = str(dtype).removeprefix("torch.")
                result["share_of_peak"] = result["flops_per_second"] / peaks[dtype]
                speed.setdefault(job, {})[f"{name}{DTYPE_SUFFIX[dtype]}"] = result
    report = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine_description(device),
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "dtypes": [str(dtype).removeprefix("torch.") for dtype in run.dtypes],
        "attn_implementation": run.attn_implementation,
        "config": {k: getattr(config, k) for k in REPORTED_CONFIG},
        "workloads": workloads.__dict__,
        "repeats": run.repeats,
        "peak_flops_per_second": {str(dtype).removeprefix("torch."): peak for dtype, peak in peaks.items()},
        "speed": speed,
        "ratios": speed_ratios(speed),
    }
    if run.memory:
        report["memory"] = {name: peak_training_memory(name, config, workloads, device) for name in run.models}
        log("peak training memory: " + ", ".join(f"{k} {v / 2**20:.0f} MiB" for k, v in report["memory"].items()))
    return report


if __name__ == "__main__":  # `peak_training_memory`'s fresh process
    print(json.dumps(_memory_child(*json.loads(sys.argv[1]))))
