import json

from vanilla_transformer.quickstart import run


def test_main_job_saves_a_folder_that_loads_as_remote_code(tmp_path, capsys):
    run(str(tmp_path / "out"), vocab_size=500)
    printed = capsys.readouterr().out
    assert "identical output" in printed
    assert json.loads((tmp_path / "out" / "config.json").read_text())["model_type"] == "vanilla_transformer"
