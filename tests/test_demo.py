"""The demo end to end on a tiny fleet: what `leap demo --json` promises is there."""

from leap_pipeline.demo import DemoSettings, run_demo, summary_lines


def test_the_demo_reports_the_published_model_beside_its_rivals(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = DemoSettings(scale=0.02, days=10, nights=1, profile="quick", data=tmp_path / "data")
    result = run_demo(settings, log=lambda _: None)
    assert set(result["w20"]) == {"published", "cascade", "single_gbdt", "lookup"}
    chosen = result["selection"]
    assert result["published_model"] == chosen["published"]
    assert chosen["published"] in chosen["scores"]
    # the published model is one of the two it was chosen from, scored on the same attempts
    rival = "single_gbdt" if chosen["published"] == "single_gbdt" else "cascade"
    if chosen["published"] in ("single_gbdt", "cascade_mean"):  # cascade_mean: the default
        assert result["w20"]["published"] == result["w20"][rival]
    assert result["table1"]["published_w20"] is None or 0 <= result["table1"]["published_w20"] <= 1
    assert any(line.startswith("published: ") for line in summary_lines(result, settings))
