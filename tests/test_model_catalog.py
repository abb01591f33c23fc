"""The model catalog (leap_serving/launch/model_catalog.py): every entry summarizes, its sizes
match the published figures, the CNN costs counted from layer shapes are recomputed here, a
``{"catalog": ...}`` definition resolves or fails clearly, and the public adapters fill it."""

import json

import polars as pl
import pytest
from test_crossval import public_data

from leap_serving.launch.architecture import ModelDefinitionError, parse_definition, summarize
from leap_serving.launch.model_catalog import (
    CATALOG,
    NEUSIGHT_MODELS,
    catalog_model,
    resolve_definition,
)


def _summary(name: str) -> dict[str, float]:
    model = CATALOG[name]
    return summarize(model.definition, **model.launch_sizes)


def _params(name: str) -> float:
    """Weights as the vocabulary counts them: dense layers (a tied token table once, in the
    lm_head) plus embedding tables."""
    summary = _summary(name)
    return summary["dense_params"] + summary["embedding_params"]


@pytest.mark.parametrize("name", sorted(CATALOG))
def test_every_entry_summarizes_with_its_sample_and_sources(name):
    model = CATALOG[name]
    summary = _summary(name)
    assert summary["flops_per_sample"] > 0 and _params(name) > 0
    assert model.sample and model.sources and model.name == name
    assert json.loads(json.dumps(model.definition)) == model.definition  # plain JSON
    model.definition["layers"].clear()  # a copy: the entry is unchanged
    assert model.definition["layers"]


@pytest.mark.parametrize(
    ("name", "published"),
    [  # biases, norms, position embeddings and poolers are not counted: each lies a little under
        ("bert_large_squad", 335_141_888),  # HF bert-large-uncased (BertModel)
        ("bert_large", 335_141_888),  # the tied masked-LM decoder counts the token table
        ("bert_base_squad", 109_482_240),  # HF bert-base-uncased
        ("gpt2", 124_439_808),  # HF gpt2 ... gpt2-xl (GPT2LMHeadModel, tied)
        ("gpt2_medium", 354_823_168),
        ("gpt2_large", 774_030_080),
        ("gpt2_xl", 1_557_611_200),
        ("opt_1.3b", 1_315_758_080),  # HF facebook/opt-1.3b
        ("t5_base", 222_903_552),  # HF t5-base, t5-large
        ("t5_large", 737_668_096),
        ("resnet50", 25_557_032),  # torchvision metadata, exact
        ("mask_rcnn", 44_401_393),
    ],
)
def test_parameter_counts_match_the_published_models(name, published):
    assert 0.985 * published <= _params(name) <= 1.0001 * published


def test_bert_large_and_gpt_sizes_as_the_papers_round_them():
    # Devlin et al. give BERT-large as 340M, HF counts 335M; the vocabulary counts 333-334M
    assert 330e6 < _params("bert_large_squad") < 340e6
    assert 330e6 < _params("bert_large") < 340e6
    for name, billions in [("gpt3_1.3b", 1.3), ("gpt3_2.7b", 2.7), ("gpt3_6.7b", 6.7),
                           ("gpt3_13b", 13.0), ("gpt3_175b", 175.0)]:  # fmt: skip
        assert _params(name) == pytest.approx(billions * 1e9, rel=0.025), name
    assert _params("transformer_base") == pytest.approx(65e6, rel=0.04)  # Vaswani et al.
    assert _params("transformer_big") == pytest.approx(213e6, rel=0.02)
    # NeuSight's "gpt3_xl" is d=3072, L=24: 2.9B, larger than its gpt3_27 (README caveat)
    assert _params("neusight_gpt3_xl") == pytest.approx(2.9e9, rel=0.02)
    assert set(NEUSIGHT_MODELS.values()) <= set(CATALOG)


def test_flops_per_sample_in_the_sources_units():
    # torchvision's 4.089 "GFLOPS" are MACs: 8.18 GFLOPs per 224x224 image
    assert _summary("resnet50")["flops_per_sample"] == pytest.approx(8.178e9, rel=1e-3)
    # a dense LM's forward pass is 2 x weights x tokens plus attention (well under a fifth here)
    for name in ("gpt2_large", "gpt3_175b", "bert_large_squad", "t5_base"):
        model, summary = CATALOG[name], _summary(name)
        dense = 2.0 * summary["dense_params"] * model.seq_len
        assert dense <= summary["flops_per_sample"] <= 1.2 * dense
    # WaveGlow: 65 MFLOPs per audio sample, 8000 samples in a segment
    assert _summary("waveglow")["flops_per_sample"] / 8000 == pytest.approx(65.3e6, rel=0.01)
    # GNMT: about 255 MFLOPs per (source, target) token pair, 161M weights with the embedding
    assert _summary("gnmt")["flops_per_sample"] == pytest.approx(255e6, rel=0.02)
    assert _params("gnmt") == pytest.approx(160.6e6, rel=0.01)
    # Switch: 4 experts in every second FFN multiply those weights, not the FLOPs
    model, switch = CATALOG["switchxl4"], _summary("switchxl4")
    dense = model.definition
    for layer in dense["layers"]:
        layer.pop("num_experts", None)
    dense_summary = summarize(dense, **model.launch_sizes)
    assert switch["num_experts"] == 4 and _params("switchxl4") > 5e9
    assert switch["flops_per_sample"] == dense_summary["flops_per_sample"]
    assert switch["dense_params"] - dense_summary["dense_params"] == 24 * 3 * 2 * 1024 * 16384


# --- the convolution counter behind the counted CNN figures ----------------------------------
def _conv(acc, hw, cin, cout, k, stride=1, pad=None, bias=0):
    pad = k // 2 if pad is None else pad
    out = (hw + 2 * pad - k) // stride + 1
    acc.append((out * out * k * k * cin * cout, k * k * cin * cout + bias, out * out * cout))
    return out


def _bottlenecks(acc, hw, cin, width, blocks, stride):
    for b in range(blocks):
        s = stride if b == 0 else 1
        out = _conv(acc, _conv(acc, hw, cin, width, 1), width, width, 3, s)  # v1.5: 3x3 strides
        _conv(acc, out, width, 4 * width, 1)
        if b == 0:
            _conv(acc, hw, cin, 4 * width, 1, s, 0)
        hw, cin = out, 4 * width
    return hw


def _resnet50_to_layer3(acc, size, layer3_stride):
    hw = (_conv(acc, size, 3, 64, 7, 2, 3) + 2 - 3) // 2 + 1  # the stem and its max-pool
    hw = _bottlenecks(acc, _bottlenecks(acc, hw, 64, 64, 3, 1), 256, 128, 4, 2)
    return _bottlenecks(acc, hw, 512, 256, 6, layer3_stride)


def _yolov3(acc, size, head):
    hw, c, scales = _conv(acc, size, 3, 32, 3), 32, {}
    for out, repeats in [(64, 1), (128, 2), (256, 8), (512, 8), (1024, 4)]:  # Darknet-53
        hw, c = _conv(acc, hw, c, out, 3, 2, 1), out
        for _ in range(repeats):
            _conv(acc, _conv(acc, hw, c, c // 2, 1), c // 2, c, 3)
        scales[out] = hw
    for c_in, mid in [(1024, 512), (768, 256), (384, 128)]:  # the FPN head, coarse to fine
        hw = scales[2 * mid]
        for a, b, k in [(c_in, mid, 1), (mid, 2 * mid, 3), (2 * mid, mid, 1), (mid, 2 * mid, 3),
                        (2 * mid, mid, 1), (mid, 2 * mid, 3), (2 * mid, head, 1)]:  # fmt: skip
            _conv(acc, hw, a, b, k, bias=head if b == head else 0)
        if mid > 128:
            _conv(acc, hw, mid, mid // 2, 1)  # to the next scale, upsampled and concatenated


def _totals(acc):
    return tuple(sum(x[i] for x in acc) for i in range(3))


def test_the_counter_reproduces_published_figures():
    acc = []
    hw = _bottlenecks(acc, _resnet50_to_layer3(acc, 224, 2), 1024, 512, 3, 2)
    acc.append((2048 * 1000, 2048 * 1000 + 1000, 1000))
    macs, _, acts = _totals(acc)
    assert hw == 7 and round(macs / 1e9, 3) == 4.089  # torchvision's ResNet-50 _ops
    assert round(acts / 1e6, 1) == 11.1  # pycls's ResNet-50 activations
    acc = []
    _yolov3(acc, 416, 255)  # YOLOv3-416 on COCO: 65.86 BFLOPs (Redmon and Farhadi 2018)
    assert round(2 * _totals(acc)[0] / 1e9, 2) == 65.86


def _declared(name):
    (layer,) = CATALOG[name].layers
    return layer["macs"], layer["params"], layer["activations"]


def test_counted_cnn_figures_are_the_counters():
    acc = []  # SSD300: ResNet-50 to layer3 at stride 1 (38x38), extra blocks, 6 heads
    hw, feeds = _resnet50_to_layer3(acc, 300, 1), []
    feeds.append((hw, 1024))
    outs = [1024, 512, 512, 256, 256, 256]
    for i, (cin, cout, mid) in enumerate(
        zip(outs[:-1], outs[1:], [256, 256, 128, 128, 128], strict=True)
    ):
        _conv(acc, hw, cin, mid, 1)
        hw = _conv(acc, hw, mid, cout, 3, 2, 1) if i < 3 else _conv(acc, hw, mid, cout, 3, 1, 0)
        feeds.append((hw, cout))
    for boxes, (hw, c) in zip([4, 6, 6, 6, 4, 4], feeds, strict=True):
        _conv(acc, hw, c, boxes * 4, 3, bias=boxes * 4)
        _conv(acc, hw, c, boxes * 81, 3, bias=boxes * 81)
    assert [f[0] for f in feeds] == [38, 19, 10, 5, 3, 1]
    assert _declared("ssd300") == pytest.approx(_totals(acc), rel=1e-3)
    acc = []  # ResNet-18 for CIFAR: 3x3 stem, no max-pool, basic blocks
    hw, c = _conv(acc, 32, 3, 64, 3), 64
    for width, stride in [(64, 1), (64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
                          (512, 1)]:  # fmt: skip
        out = _conv(acc, _conv(acc, hw, c, width, 3, stride), width, width, 3)
        if stride != 1 or c != width:
            _conv(acc, hw, c, width, 1, stride, 0)
        hw, c = out, width
    acc.append((512 * 10, 512 * 10 + 10, 10))
    assert _declared("resnet18_cifar") == pytest.approx(_totals(acc), rel=1e-3)
    acc = []
    _yolov3(acc, 448, 3 * (5 + 20))  # PASCAL VOC: 20 classes, 3 anchors per scale
    assert _declared("yolov3_voc") == pytest.approx(_totals(acc), rel=1e-3)


def test_a_catalog_definition_resolves_and_an_unknown_one_fails_clearly():
    assert resolve_definition({"catalog": "bert_large"}) == CATALOG["bert_large"].definition
    layers = {"layers": [{"op": "mlp", "widths": [4]}]}
    assert resolve_definition(layers) is layers
    with pytest.raises(ValueError, match=r"catalog='unknown' is not a catalog model.*bert_large"):
        resolve_definition({"catalog": "unknown"})
    with pytest.raises(ValueError, match="not a catalog model"):
        catalog_model(["bert_large"])
    with pytest.raises(ValueError, match=r"also \['layers'\]"):
        resolve_definition({"catalog": "gpt2", "layers": []})
    # through the architecture module, as a launch's model_definition
    assert parse_definition('{"catalog": "gpt2"}') == CATALOG["gpt2"].definition["layers"]
    with pytest.raises(ModelDefinitionError, match="'unknown' is not a catalog model"):
        summarize('{"catalog": "unknown"}', num_sparse_features=0, num_dense_features=0,
                  hash_size=0, seq_len=0)  # fmt: skip


def test_the_lambda_adapter_names_a_catalog_model_for_every_column():
    from leap_pipeline.data.public_data import LAMBDA_MODELS, lambda_sources

    public = public_data("lambda-dl-benchmark", "epoch-ml-hardware")
    epoch = public / "epoch-ml-hardware" / "ml_hardware.csv"
    lambda_dir = public / "lambda-dl-benchmark"
    rows, _, specs = lambda_sources(lambda_dir / "head-aa5addb" / "pytorch", epoch)
    assert rows["model_definition"].null_count() == 0
    # maskrcnn is a column of the 2022 snapshot only (whose GPUs LAMBDA_GPUS does not all map)
    old = pl.read_csv(lambda_dir / "2022-07-06-67a9bb5" / "pytorch" /
                      "pytorch-train-throughput-fp16.csv", n_rows=1).columns[4:]  # fmt: skip
    assert "maskrcnn" in old and set(old) <= set(LAMBDA_MODELS)
    assert {m.split(".")[0] for m in rows["model_type"]} == set(LAMBDA_MODELS) - {"maskrcnn"}
    # types whose 16-bit peak is a tensor-core rate (Epoch gives only the plain FP16 rate of the
    # Quadro RTX 8000, RTX 3090, A10 and the workstation cards: their shares would exceed 1)
    tensor = specs.filter(pl.col("peak_bf16_tflops") > 3 * pl.col("peak_fp32_tflops"))
    peaks = dict(zip(tensor["hardware_type"], tensor["peak_bf16_tflops"], strict=True))
    for column, (name, divisor) in LAMBDA_MODELS.items():
        model = CATALOG[name]
        if name.startswith("transformer_xl"):  # tokens/s -> segments of tgt_len tokens
            assert divisor == model.seq_len
        if column == "maskrcnn":
            continue
        chosen = rows.filter(pl.col("model_type").str.starts_with(column + "."))
        definition = json.loads(chosen["model_definition"][0])
        assert definition == {"catalog": name}
        assert chosen["seq_len"][0] == model.seq_len
        assert chosen["hash_size"][0] == model.hash_size
        flops = summarize(definition, **model.launch_sizes)["flops_per_sample"]
        # one-GPU fp16 rows: forward and backward (3x) as a share of the 16-bit peak, so a unit
        # off by a sequence length or a segment would fall outside (multi-GPU rows are left out:
        # NCF's 4x and 8x H100 cells are up to 50x the one-GPU rate)
        fp16 = chosen.filter((pl.col("precision") == "fp16") & (pl.col("num_trainers") == 1)
                             & pl.col("hardware_type").is_in(list(peaks)))  # fmt: skip
        share = [3.0 * flops * r["throughput"] / (peaks[r["hardware_type"]] * 1e12)
                 for r in fp16.iter_rows(named=True)]  # fmt: skip
        assert min(share) > 0.005 and max(share) < 0.8, (column, min(share), max(share))
