"""Model cards: `vanilla_transformer.files.model_card` renders a folder's README.md from the package's template, with
metadata (license, languages, datasets, `model-index`) that the Hub's own reader parses. The cards a push renders for
a folder without one, and the trainer's card, are checked over HTTP in `tests/release/test_hub.py`."""

import json
from pathlib import Path

from huggingface_hub import ModelCard

from vanilla_transformer.files.model_card import DATA_TERMS, render_model_card
from vanilla_transformer.release.folder_checks import validate_folder
from vanilla_transformer.release.hub import card_for_folder

REPO = Path(__file__).resolve().parents[2]
RELEASE = REPO / "model_cards" / "vanilla-transformer-multi30k-en-de"


def test_the_released_folder_is_ready_and_its_card_comes_from_the_template(tmp_path):
    assert validate_folder(RELEASE) == []
    record = json.loads((RELEASE / "results.json").read_text())
    rendered = render_model_card(RELEASE.name, record["results"], record["training"])
    committed = ModelCard.load(RELEASE / "README.md")

    def scores(card: ModelCard) -> list:
        return [(r.dataset_split, r.metric_type, r.metric_value, r.metric_name) for r in card.data.eval_results]

    assert scores(rendered) == scores(committed)
    # a release folder without its card gets the same one back from results.json
    assert scores(card_for_folder(RELEASE, "someone/multi30k")) == scores(committed)
    for field in ("license", "language", "datasets", "pipeline_tag"):
        assert getattr(rendered.data, field) == getattr(committed.data, field)
    # the weights carry the terms of Multi30k; the card names the Hub dataset that holds its sentences
    assert "solely for non-commercial research and educational\npurposes" in rendered.text
    assert (rendered.data.license, rendered.data.license_link) == ("other", DATA_TERMS["multi30k"][2])
    assert rendered.data.datasets == ["bentrevett/multi30k"]
