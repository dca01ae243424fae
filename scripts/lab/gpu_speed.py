"""The GPU check's measurements (`scripts/gpu_speed.py` runs them): what each is, is said there."""

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from vanilla_transformer.errors import VanillaTransformerError

from . import lab_process
from .benchmark import machine_description, peak_matmul_flops, time_workload, training_flops
from .benchmark_models import (
    build_benchmark_model,
    ctranslate2_fns,
    generate_fn,
    measure,
    random_batch,
    synchronize,
    training_step,
    vanilla_config,
)

MARKER = "<!-- gpu-check -->"
# the goals of issue 48, shown beside the figures they judge
GOALS = {"base": "MFU ≥ 35%, ≥ 1.2× Marian", "big": "MFU ≥ 40%", "grid": "≥ 5M tokens/s for the whole GPU"}


@dataclass(frozen=True)
class GpuCheck:
    """What one run measures, and how big: the defaults are the GPU run's, `small()` the CPU try-out's."""

    presets: tuple[str, ...] = ("base", "big")
    vocab_size: int = 37_000  # the paper's shared BPE (§5.1)
    train_pairs: int = 256  # 256 pairs of 48 + 48 tokens: ~24k tokens, the paper's ~25k of each side per batch
    train_length: int = 48
    peak_size: int = 8192
    generate_batch: int = 32
    new_tokens: int = 64
    num_beams: int = 4
    grid_pairs: int = 128  # 128 pairs of 32 + 32: the grid's 8,192 padded tokens per update
    grid_length: int = 32
    grid_processes: tuple[int, ...] = (1, 4, 11)
    grid_seconds: float = 20.0
    repeats: int = 5
    # compiling paper-big's step twice (ours, Marian) would take most of a 4-minute GPU call
    compiled_presets: tuple[str, ...] = ("base",)

    @classmethod
    def small(cls) -> "GpuCheck":
        return cls(
            presets=("multi30k",),
            vocab_size=1000,
            train_pairs=4,
            train_length=8,
            peak_size=1024,  # a 256³ matmul reached 80% of a 1024³ one's FLOP/s on an AMD EPYC
            generate_batch=2,
            new_tokens=4,
            grid_pairs=4,
            grid_length=8,
            grid_processes=(1, 2),
            grid_seconds=2.0,
            repeats=1,
            compiled_presets=("multi30k",),
        )


def train_rows(check: GpuCheck, device: torch.device, peak: float, log=print) -> list[dict]:
    """The training step of each preset, ours and Marian, eager and compiled: target tokens/s and MFU."""
    rows = []
    for preset in check.presets:
        config = vanilla_config(preset, vocab_size=check.vocab_size)
        batch = random_batch(check.train_pairs, check.train_length, check.train_length, config.vocab_size, 0, device)
        suffixes = ("", "_compiled") if preset in check.compiled_presets else ("",)
        steps = {
            f"{name}{suffix}": training_step(name, config, batch, torch.bfloat16, bool(suffix))
            for suffix in suffixes
            for name in ("vanilla", "marian")
        }
        targets, flops = int((batch["labels"] != -100).sum()), training_flops(config, batch)
        # three calls before the timed ones compile, and warm the allocator and cuBLAS
        timed = time_workload(steps, device, check.repeats, targets, flops, warmup=3)
        del steps
        if device.type == "cuda":
            torch.cuda.empty_cache()
        for suffix in suffixes:
            ours, marian = timed[f"vanilla{suffix}"], timed[f"marian{suffix}"]
            rows.append(
                {
                    "measure": f"training step, paper-{preset}" if preset in ("base", "big") else f"training, {preset}",
                    "settings": f"{check.train_pairs} pairs × {check.train_length}+{check.train_length} tokens, bf16 "
                    f"autocast, fused Adam, sdpa{', torch.compile' if suffix else ''}",
                    "ours": ours["tokens_per_second"],
                    "marian": marian["tokens_per_second"],
                    "unit": "target tokens/s",
                    "ours_over_marian": ours["tokens_per_second"] / marian["tokens_per_second"],
                    "mfu": ours["flops_per_second"] / peak,
                    "marian_mfu": marian["flops_per_second"] / peak,
                    "goal": GOALS.get(preset, ""),
                }
            )
            log(json.dumps(rows[-1]))
    return rows


def decoding_rows(check: GpuCheck, device: torch.device, sources: list[str], tokenizer, log=print) -> list[dict]:
    """The paper's beam search on newstest2014 sources in bf16, and the CTranslate2 export of the same model."""
    config = vanilla_config("base", vocab_size=len(tokenizer))
    inputs = tokenizer(sources[: check.generate_batch], return_tensors="pt", padding=True, truncation=False)
    inputs = {name: inputs[name].to(device) for name in ("input_ids", "attention_mask")}
    model = build_benchmark_model("vanilla", config).to(device)  # exported in float32, then decoding in bf16
    compute_type = "float16" if device.type == "cuda" else "int8"
    ctranslate2, tokens = f"ctranslate2_{compute_type}", check.generate_batch * check.new_tokens
    speed = {ctranslate2: {"unit": ""}}
    with tempfile.TemporaryDirectory(prefix="gpu-speed-ctranslate2-") as scratch:  # the export, removed after timing
        try:
            exported = ctranslate2_fns(model, scratch, device, {ctranslate2: compute_type})
        except (ImportError, RuntimeError, ValueError) as error:  # no wheel for this machine, or no CUDA build of it
            exported, speed[ctranslate2]["note"] = {}, str(error)
        model.to(torch.bfloat16)
        decode = {"vanilla": generate_fn("vanilla", model, inputs, check.new_tokens, check.num_beams)}
        decode |= {name: fn(inputs, check.new_tokens, check.num_beams) for name, fn in exported.items()}
        for name, result in time_workload(decode, device, check.repeats, tokens, warmup=2).items():
            speed[name] = {"ours": result["tokens_per_second"], "unit": "new tokens/s"}
    longest = inputs["input_ids"].shape[1]
    settings = (
        f"paper-base, batch {check.generate_batch} newstest2014 sources ({longest} tokens at most), beam "
        f"{check.num_beams}, α 0.6, {check.new_tokens} new tokens each"
    )
    rows = [
        {"measure": "generate(), bf16", "settings": settings, **speed["vanilla"]},
        {"measure": f"CTranslate2 {compute_type}", "settings": settings, **speed[ctranslate2]},
    ]
    for row in rows:
        log(json.dumps(row))
    return rows


def grid_child(device: str, pairs: int, length: int, seconds: float, vocab_size: int) -> dict:
    """One Table 3 row's training steps for `seconds` after a warm-up: the `multi30k` model, one batch per update."""
    device = torch.device(device)
    config = vanilla_config("multi30k", vocab_size=vocab_size)
    step = training_step("vanilla", config, random_batch(pairs, length, length, vocab_size, 0, device), torch.float32)
    measure(step, device, warmup=3)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        steps += 1
    synchronize(device)
    return {"steps": steps, "seconds": time.perf_counter() - start}


def grid_rows(check: GpuCheck, device: str, log=print) -> list[dict]:
    """The grid's model trained by 1 and by several processes at once: the whole device's tokens/s, counted as the
    grid counts them (updates × padded tokens per batch)."""
    rows = []
    padded = check.grid_pairs * 2 * check.grid_length
    for processes in check.grid_processes:
        arguments = json.dumps([device, check.grid_pairs, check.grid_length, check.grid_seconds, 8000])
        command, env = lab_process("gpu_speed", arguments, env={**os.environ, "OMP_NUM_THREADS": "1"})
        children = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env) for _ in range(processes)]
        results = [json.loads(child.communicate()[0].strip().splitlines()[-1]) for child in children]
        if any(child.returncode for child in children):
            raise RuntimeError(f"a grid process failed: {[child.returncode for child in children]}")
        rate = sum(result["steps"] * padded / result["seconds"] for result in results)
        rows.append(
            {
                "measure": f"Table 3 grid's model, {processes} process(es)",
                "settings": f"multi30k model, {check.grid_pairs} pairs × {check.grid_length}+{check.grid_length} "
                f"({padded} padded tokens) per update, fp32, {check.grid_seconds:.0f} s each",
                "ours": rate,
                "unit": "padded tokens/s, whole device",
                "goal": GOALS["grid"],
            }
        )
        log(json.dumps(rows[-1]))
    return rows


def markdown(report: dict) -> str:
    """The report as one table under a line naming the device, torch, CUDA and the peak."""
    lines = [
        f"{report['date']}, {report['machine']}, torch {report['torch']}, CUDA {report['cuda']}; bf16 matmul peak "
        f"{report['peak_flops'] / 1e12:.1f} TFLOP/s ({report['check']['peak_size']}³).",
        "",
        "| measure | settings | ours | Marian | ours / Marian | MFU (ours) | goal |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in report["rows"]:
        ours = f"{row['ours']:,.0f} {row['unit']}" if "ours" in row else row.get("note", "")
        marian = f"{row['marian']:,.0f}" if "marian" in row else ""
        ratio = f"{row['ours_over_marian']:.2f}×" if "ours_over_marian" in row else ""
        mfu = f"{row['mfu']:.1%}" if "mfu" in row else ""
        lines.append(
            f"| {row['measure']} | {row['settings']} | {ours} | {marian} | {ratio} | {mfu} | {row.get('goal', '')} |"
        )
    return "\n".join(lines) + "\n"


def run_check(check: GpuCheck, device: str, sources: list[str], tokenizer, log=print) -> dict:
    """Every measurement of the module docstring, in one report."""
    torch.manual_seed(0)
    device_type = torch.device(device)
    peak = peak_matmul_flops(device_type, torch.bfloat16, size=check.peak_size)
    log(f"bf16 matmul peak: {peak / 1e12:.2f} TFLOP/s")
    rows = train_rows(check, device_type, peak, log)
    rows += decoding_rows(check, device_type, sources, tokenizer, log)
    rows += grid_rows(check, device, log)
    return {
        "date": time.strftime("%Y-%m-%d"),
        "machine": machine_description(device),
        "torch": torch.__version__,
        "cuda": torch.version.cuda or "none",
        "peak_flops": peak,
        "check": asdict(check),
        "rows": rows,
    }


def docs_parts(docs: Path) -> list[str]:
    """The text of `docs` before, between and after its two `MARKER` lines (checked before anything is measured)."""
    parts = docs.read_text(encoding="utf-8").split(MARKER)
    if len(parts) != 3:
        raise VanillaTransformerError(
            f"{docs} must hold two {MARKER} lines, between which the table goes; it holds {len(parts) - 1}."
        )
    return parts


def write_report(report: dict, output_dir: Path, docs: Path | None = None) -> Path:
    """`gpu-speed.json` and `gpu-speed.md` in `output_dir`; with `docs`, the table between its two `MARKER` lines."""
    from vanilla_transformer.files.outputs import write_marker, write_text_atomic

    output_dir.mkdir(parents=True, exist_ok=True)
    write_marker(output_dir, "gpu-speed", "gpu_speed")
    table = markdown(report)
    write_text_atomic(output_dir / "gpu-speed.json", json.dumps(report, indent=2) + "\n")
    write_text_atomic(output_dir / "gpu-speed.md", table)
    if docs is not None:
        before, _, after = docs_parts(docs)
        write_text_atomic(docs, f"{before}{MARKER}\n{table}{MARKER}{after}")
    return output_dir / "gpu-speed.md"


if __name__ == "__main__":  # `grid_rows`' child processes: the arguments of `grid_child`, as JSON
    print(json.dumps(grid_child(*json.loads(sys.argv[1]))))
