import polars as pl
import pytest

from leap_pipeline.modeling.lookup_table import build_lookup_table


def _window() -> pl.DataFrame:
    rows = []
    for model_type, n in (("big", 30), ("mid", 25), ("small", 5)):
        for i in range(n):
            rows.append(
                {
                    "model_type": model_type,
                    "num_trainers": 4,
                    "batch_size": 512,
                    "hardware_type": "A100",
                    "throughput": 100.0 + i,
                }
            )
    rows.append({**rows[0], "throughput": 0.0})  # zero throughput never enters the table
    return pl.DataFrame(rows)


def test_table_holds_top_types_with_enough_support_at_their_median():
    table = build_lookup_table(_window(), top_model_types=2, min_support=20)
    assert table.model_types == ("big", "mid")
    assert table.entries.sort("model_type")["lookup_throughput"].to_list() == [114.5, 112.0]
    assert table.entries["support"].to_list() == [30, 25]


def test_table_answers_only_on_exact_keys():
    table = build_lookup_table(_window(), top_model_types=2, min_support=20)
    queries = pl.DataFrame(
        {
            "model_type": ["big", "big", "big", "small", "mid"],
            "num_trainers": [4, 8, 4, 4, 4],
            "batch_size": [512, 512, 256, 512, 512],
            "hardware_type": ["A100", "A100", "A100", "A100", "H100"],
        }
    )
    assert table.predict(queries).to_list() == [114.5, None, None, None, None]


def test_min_support_and_bad_settings():
    assert build_lookup_table(_window(), top_model_types=3, min_support=26).entries.height == 1
    with pytest.raises(ValueError, match="min_support"):
        build_lookup_table(_window(), min_support=0)
    with pytest.raises(ValueError, match="top_model_types"):
        build_lookup_table(_window(), top_model_types=0)
