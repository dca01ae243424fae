import pytest
import torch
from conftest import tiny_model
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM

from vanilla_transformer.training.checkpoints import average_checkpoints, list_checkpoints


def write_checkpoints(run_dir, steps):
    for seed, step in enumerate(steps):
        tiny_model(seed=seed).save_pretrained(run_dir / f"checkpoint-{step}")


def test_average_of_the_last_n_is_the_mean_and_loads(tmp_path):
    write_checkpoints(tmp_path, [5, 10, 100, 20])  # numeric order, not name order
    assert [p.name for p in list_checkpoints(tmp_path)] == ["checkpoint-5", "checkpoint-10", "checkpoint-20",
                                                            "checkpoint-100"]  # fmt: skip
    chosen = average_checkpoints(tmp_path, tmp_path / "final", last=2)
    assert [p.name for p in chosen] == ["checkpoint-20", "checkpoint-100"]
    averaged = load_file(tmp_path / "final" / "model.safetensors")
    for name, tensor in averaged.items():
        expected = (
            load_file(chosen[0] / "model.safetensors")[name] + load_file(chosen[1] / "model.safetensors")[name]
        ) / 2
        torch.testing.assert_close(tensor, expected)
    model = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "final")
    assert model.lm_head.weight.data_ptr() == model.model.shared.weight.data_ptr()  # still tied
    torch.testing.assert_close(model.model.shared.weight, averaged["model.shared.weight"])


def test_too_few_checkpoints_is_an_error_and_leaves_the_output_alone(tmp_path):
    write_checkpoints(tmp_path, [1, 2])
    (tmp_path / "final").mkdir()
    (tmp_path / "final" / "keep.txt").write_text("a good model")
    with pytest.raises(ValueError, match="has 2 checkpoints .* fewer than the 3 asked for"):
        average_checkpoints(tmp_path, tmp_path / "final", last=3)
    assert (tmp_path / "final" / "keep.txt").read_text() == "a good model"


def test_checkpoints_of_different_models_are_refused(tmp_path):
    tiny_model().save_pretrained(tmp_path / "checkpoint-1")
    tiny_model(d_model=16).save_pretrained(tmp_path / "checkpoint-2")
    with pytest.raises((ValueError, RuntimeError)):
        average_checkpoints(tmp_path, tmp_path / "final", last=2)
    assert not (tmp_path / "final").exists()


def test_averaging_names_the_architecture_fields_that_differ(tmp_path):
    tiny_model().save_pretrained(tmp_path / "checkpoint-1")
    tiny_model(encoder_ffn_dim=128, normalize_before=True).save_pretrained(tmp_path / "checkpoint-2")
    with pytest.raises(ValueError, match=r"differ in encoder_ffn_dim: 64 vs 128; normalize_before: False vs True"):
        average_checkpoints(tmp_path, tmp_path / "final", last=2)
    # training settings (dropout) may differ between the checkpoints of a run
    tiny_model(encoder_ffn_dim=128, normalize_before=True, dropout=0.3).save_pretrained(tmp_path / "checkpoint-3")
    average_checkpoints(tmp_path, tmp_path / "final", last=2)


def test_averaging_a_run_that_rotates_its_checkpoints_says_the_run_is_training(tmp_path, monkeypatch, capsys):
    import shutil

    from vanilla_transformer.cli.main import main
    from vanilla_transformer.files.outputs import hold_lock
    from vanilla_transformer.training import checkpoints

    run = tmp_path / "run"
    write_checkpoints(run, [1, 2])
    check_one_run = checkpoints.check_one_run

    def a_save_rotates(run_dir, chosen):  # the training run saves checkpoint-3 and deletes checkpoint-1 meanwhile
        check_one_run(run_dir, chosen)
        shutil.rmtree(chosen[0])

    monkeypatch.setattr(checkpoints, "check_one_run", a_save_rotates)
    argv = ["average", "--run-dir", str(run), "--last", "2", "--output-dir", str(tmp_path / "averaged")]
    with hold_lock(run), pytest.raises(SystemExit) as exited:  # a run is training in it
        main(argv)
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert exited.value.code == 2 and f"A run is training in {run} now and deletes its oldest checkpoint" in error
    assert not (tmp_path / "averaged").exists()
