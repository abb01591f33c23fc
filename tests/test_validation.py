import polars as pl
import pytest

from leap_serving.launch.contract import schema
from leap_serving.launch.validation import ContractError, validate_attempts


def _day(small_fleet) -> pl.DataFrame:
    return small_fleet.day(2).attempts.head(40)


def test_a_clean_simulated_day_is_kept_or_dropped_never_quarantined(small_fleet):
    day = _day(small_fleet)
    known = small_fleet.hardware_specs()["hardware_type"]
    result = validate_attempts(day, known)
    assert result.quarantined.height == 0
    assert result.kept.schema == schema("job_attempts")
    unlabelled = day.filter(~(pl.col("throughput") > 0) | pl.col("throughput").is_null()).height
    assert result.dropped == unlabelled
    assert result.counts(day.height)["kept"] + unlabelled == day.height


def test_bad_rows_are_quarantined_with_reasons(small_fleet):
    day = _day(small_fleet).with_columns(pl.col(c).cast(pl.String) for c in ("batch_size",))
    ids = day["attempt_id"].to_list()
    broken = day.with_columns(
        batch_size=pl.when(pl.col("attempt_id") == ids[0]).then(pl.lit("lots"))
        .when(pl.col("attempt_id") == ids[1]).then(pl.lit("-64"))
        .otherwise(pl.col("batch_size")),
        hardware_type=pl.when(pl.col("attempt_id") == ids[2]).then(pl.lit("TPU-v9"))
        .otherwise(pl.col("hardware_type")),
    )  # fmt: skip
    duplicate = broken.filter(pl.col("attempt_id") == ids[3])
    broken = pl.concat([broken, duplicate])
    result = validate_attempts(broken, small_fleet.hardware_specs()["hardware_type"])
    reasons = dict(
        zip(result.quarantined["attempt_id"], result.quarantined["reason"], strict=False)
    )
    assert reasons[ids[0]] == "batch_size: not a valid Int64"
    assert reasons[ids[1]] == "batch_size: -64 is not positive"
    assert reasons[ids[2]] == "hardware_type: TPU-v9 is not in the spec table"
    assert "appears more than once" in reasons[ids[3]]
    assert result.quarantined.height == 5  # both copies of the duplicate
    counts = result.counts(broken.height)
    assert counts["kept"] + counts["dropped"] + counts["quarantined"] == broken.height


def test_missing_required_column_is_an_error_naming_it(small_fleet):
    with pytest.raises(ContractError, match="hardware_type"):
        validate_attempts(_day(small_fleet).drop("hardware_type"), ["A100-80GB"])


def test_missing_optional_columns_become_nulls(small_fleet):
    day = _day(small_fleet).drop("num_readers", "model_definition")
    result = validate_attempts(day, small_fleet.hardware_specs()["hardware_type"])
    assert result.quarantined.height == 0
    assert result.kept["num_readers"].is_null().all()


def test_the_contract_page_lists_every_column_as_the_code_defines_it():
    from pathlib import Path

    from leap_serving.launch.contract import SOURCES

    page = (Path(__file__).parents[1] / "docs" / "data-contract.md").read_text()
    for source, columns in SOURCES.items():
        assert f"## {source}" in page
        for column in columns:
            required = "yes" if column.required else "no"
            assert f"| `{column.name}` | {column.dtype} | {required} |" in page


@pytest.mark.parametrize("text", ["NaN", "inf", "1e400", "-inf"])
def test_a_throughput_that_is_not_a_finite_number_is_quarantined_not_a_label(small_fleet, text):
    """NaN sorts above every number, so "throughput > 0" alone kept it as a label; 1e400 reads as
    infinity."""
    day = _day(small_fleet).with_columns(pl.col("throughput").cast(pl.String))
    first = day["attempt_id"][0]
    broken = day.with_columns(
        throughput=pl.when(pl.col("attempt_id") == first).then(pl.lit(text))
        .otherwise(pl.col("throughput"))
    )  # fmt: skip
    result = validate_attempts(broken, small_fleet.hardware_specs()["hardware_type"])
    assert result.quarantined["attempt_id"].to_list() == [first]
    assert "throughput" in result.quarantined["reason"][0]
    assert "is not a finite number" in result.quarantined["reason"][0]
    assert result.kept["throughput"].is_finite().all()
