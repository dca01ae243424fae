"""The benchmark measures what it says: the same work for every model, and a report with every figure."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import command_main, run_in_process
from lab import benchmark, benchmark_models

# processes or training runs: with RUN_SLOW=1 (CI)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TINY = {"d_model": 32, "encoder_layers": 2, "decoder_layers": 2, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64}
WORKLOADS = benchmark_models.Workloads(
    train_batch_size=4, train_source_length=8, train_target_length=6, generate_source_length=7, new_tokens=5,
    greedy_batch_sizes=(1, 3), beam_batch_size=2, num_beams=3,
)  # fmt: skip


def tiny_config():
    return benchmark_models.vanilla_config("multi30k", vocab_size=101, **TINY)


def test_marian_and_torch_models_have_the_same_dimensions():
    config = tiny_config()
    ours, marian, plain = (benchmark_models.build_benchmark_model(name, config) for name in benchmark_models.MODELS)
    count = lambda model: sum(p.numel() for p in model.parameters() if p.requires_grad)  # noqa: E731
    # Marian's attention projections carry biases the paper's do not; everything trained is the same size
    d, attention_blocks = config.d_model, config.encoder_layers + 2 * config.decoder_layers
    assert count(marian) - count(ours) == attention_blocks * 4 * d
    assert marian.config.activation_function == "relu" and marian.config.scale_embedding
    assert marian.get_input_embeddings().weight is marian.lm_head.weight  # shared and tied, as ours
    # nn.Transformer's stacks end with an extra LayerNorm each, its attention has biases, the sizes match
    assert count(plain) - count(ours) == attention_blocks * 4 * d + 2 * 2 * d


def test_every_model_generates_exactly_the_asked_number_of_tokens(tmp_path):
    config = tiny_config()
    batch = benchmark_models.random_batch(3, 7, 2, config.vocab_size)
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask")}
    for name in benchmark_models.MODELS:
        model = benchmark_models.build_benchmark_model(name, config).eval()
        with torch.no_grad():  # EOS made the likeliest token: only the minimum length keeps it out
            weight = model.lm_head.weight if name != "torch" else model.embed.weight
            weight[benchmark_models.EOS] = 10 * weight.abs().max()
        for num_beams in (1, 3) if name != "torch" else (1,):
            if name == "torch":
                output = model.greedy(inputs["input_ids"], inputs["attention_mask"], 5)
            else:
                options = {"num_beams": num_beams, "max_new_tokens": 5, "min_new_tokens": 5}
                output = model.generate(**inputs, **options)
            assert output.shape == (3, 6), (name, num_beams)
            assert not (output[:, 1:] == benchmark_models.EOS).any(), (name, num_beams)
        if name == "vanilla":  # its CTranslate2 exports decode the same sources to the same number of tokens
            for exported, translate_fn in benchmark_models.ctranslate2_fns(
                model, str(tmp_path), torch.device("cpu")
            ).items():
                for num_beams in (1, 3):
                    results = translate_fn(inputs, 5, num_beams)()
                    assert [len(r.hypotheses[0]) for r in results] == [5, 5, 5], (exported, num_beams)
                    assert not any("</s>" in r.hypotheses[0] for r in results), (exported, num_beams)


def test_the_script_writes_a_report_and_a_table(tmp_path):
    report_path = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts/benchmark.py"), "--preset", "multi30k", "--vocab-size", "101",
         "--repeats", "2", "--threads", "1", "--train-batch-size", "4", "--new-tokens", "4",
         "--no-compiled",  # compiling the eight compiled rows took 90 s; compiled decoding is tested in test_modeling
         "--output", str(report_path)],
        capture_output=True, text=True, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert report["dtypes"] == ["float32", "bfloat16"]  # both precisions in one run, each with its own peak
    assert set(report["peak_flops_per_second"]) == {"float32", "bfloat16"}
    assert all(peak > 1e8 for peak in report["peak_flops_per_second"].values())
    assert set(report["speed"]) == {"train", "greedy_b1", "greedy_b32", "beam4_b8"}
    for job, by_model in report["speed"].items():
        expected = {"vanilla", "marian"} | ({"torch"} if not job.startswith("beam") else set())
        expected |= {f"{name}_bf16" for name in expected}
        expected |= set(benchmark_models.CTRANSLATE2) if job != "train" else set()  # measured with the fp32 pass
        assert set(by_model) == expected, job
        for name, result in by_model.items():
            assert len(result["seconds"]) == 2 and result["tokens_per_second"] > 0
            assert result["dtype"] == ("bfloat16" if name.endswith("_bf16") else "float32")
            peak = report["peak_flops_per_second"][result["dtype"]]
            assert abs(result["share_of_peak"] - result["flops_per_second"] / peak) < 1e-12
        for subject, reference in (("vanilla", "marian"), ("vanilla_bf16", "vanilla"), ("ctranslate2_int8", "vanilla")):
            if subject in by_model:
                ratio = by_model[subject]["tokens_per_second"] / by_model[reference]["tokens_per_second"]
                assert abs(report["ratios"][f"{subject} / {reference}"][job] - ratio) < 1e-9
    assert all(report["memory"][name] > 0 for name in benchmark_models.MODELS)
    assert "| greedy_b32 |" in done.stdout and "| peak training memory (fp32) |" in done.stdout
    assert "vanilla_bf16 tok/s" in done.stdout and "| vanilla_bf16 / vanilla |" in done.stdout


def test_flop_counts_follow_the_dimensions():
    config = tiny_config()
    encoder, decoder, cross_kv = benchmark.matmul_params(config)
    d, ffn = config.d_model, config.encoder_ffn_dim
    assert encoder == 2 * (4 * d * d + 2 * d * ffn)
    assert decoder == 2 * (6 * d * d + 2 * d * ffn) + d * config.vocab_size
    assert cross_kv == 2 * 2 * d * d
    # twice the batch, twice the FLOPs
    small = benchmark_models.random_batch(2, 8, 6, config.vocab_size)
    large = benchmark_models.random_batch(4, 8, 6, config.vocab_size)
    assert benchmark.training_flops(config, large) == 2 * benchmark.training_flops(config, small)


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--repeats", "0"], "argument --repeats: 0 is out of range: give 1 or more"),
        (["--vocab-size", "3"], "give 4 or more"),
        (["--models", "vanilla,fairseq"], "subset of vanilla,marian,torch"),
        (["--device", "tpu"], "give one of cpu"),
        (["--output", "MISSING/report.json"], "create it first"),
    ],
)
def test_a_value_no_benchmark_can_use_is_refused_in_one_line(argv, expected, tmp_path):
    done = run_in_process(command_main("benchmark"), argv, tmp_path)
    assert done.returncode == 2 and expected in done.stderr.splitlines()[-1], done.stderr
