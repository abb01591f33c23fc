import json

import pytest

from leap_serving.launch.architecture import ModelDefinitionError, summarize


def test_mlp_parameters_and_flops_by_hand():
    definition = {"layers": [{"op": "mlp", "widths": [4, 2]}]}
    s = summarize(json.dumps(definition), num_sparse_features=0, num_dense_features=3,
                  hash_size=0, seq_len=0)  # fmt: skip
    assert s["dense_params"] == 3 * 4 + 4 * 2
    assert s["flops_per_sample"] == 2 * (3 * 4 + 4 * 2)
    assert s["n_mlp_layers"] == 2 and s["max_width"] == 4


def test_embeddings_scale_with_the_launch_config():
    definition = {"layers": [{"op": "embedding_bag", "dim": 8, "pooling": 10}]}
    s = summarize(definition, num_sparse_features=5, num_dense_features=0, hash_size=1000,
                  seq_len=0, bytes_per_value=2)  # fmt: skip
    assert s["embedding_params"] == 1000 * 8
    assert s["embedding_bytes_per_sample"] == 5 * 10 * 8 * 2
    assert s["n_embedding_tables"] == 5


def test_transformer_flops_grow_with_sequence_length():
    definition = {"layers": [{"op": "transformer", "layers": 2, "d_model": 64, "heads": 4,
                              "ffn_mult": 4}]}  # fmt: skip
    short = summarize(definition, num_sparse_features=0, num_dense_features=0, hash_size=0,
                      seq_len=128)  # fmt: skip
    long = summarize(definition, num_sparse_features=0, num_dense_features=0, hash_size=0,
                     seq_len=256)  # fmt: skip
    assert long["flops_per_sample"] > 2 * short["flops_per_sample"]  # attention is quadratic
    assert long["dense_params"] == short["dense_params"]


@pytest.mark.parametrize(
    ("definition", "named"),
    [
        ("not json", "JSON"),
        ({"layer": []}, "layers"),
        ({"layers": [{"op": "warp_drive"}]}, "warp_drive"),
        ({"layers": [{"op": "mlp", "widths": []}]}, "widths"),
        ({"layers": [{"op": "embedding_bag", "dim": -4, "pooling": 1}]}, "dim"),
        ({"layers": [{"op": "interaction", "kind": "outer"}]}, "kind"),
    ],
)
def test_bad_definitions_name_the_field(definition, named):
    with pytest.raises(ModelDefinitionError, match=named):
        summarize(definition, num_sparse_features=1, num_dense_features=1, hash_size=1, seq_len=0)
