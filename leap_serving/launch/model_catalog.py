"""Well-known models in the architecture vocabulary (``architecture.py``), each size sourced.

A launch may name a catalog model instead of writing its layer list: ``{"catalog": "bert_large"}``
resolves to the entry's layers (``resolve_definition``). An entry also carries the launch sizes its
layers need (``seq_len``, ``num_sparse_features``, ``num_dense_features``, ``hash_size``) and what
one throughput sample is: the FLOPs ``summarize`` counts are per that sample.

Conventions, stated once:
- One multiply-accumulate (MAC) is two FLOPs. ``conv_net`` takes MACs. torchvision's "GFLOPS"
  metadata (``_ops``) counts MACs: ResNet-50's 4.089 is 4.089 G MACs, 8.18 GFLOPs per 224x224 image.
- CNN costs not published for the exact network were counted here from the layer shapes in the
  cited code (convolutions and linear layers; norms and activations are not counted), with the
  counter that gives torchvision's 4.089 G MACs for ResNet-50 and Darknet's 65.86 BFLOPs for
  YOLOv3-416 (tests/test_model_catalog.py holds it and recomputes every such figure).
  ``activations`` are the elements the convolutions write, as pycls counts them.
- A token embedding tied to the output projection is counted once, by ``lm_head``. An untied
  input table is an ``embedding_bag``: one feature, ``pooling`` = tokens looked up per sample (at
  the entry's ``seq_len``), ``hash_size`` = its rows. Position embeddings, biases and norms are
  not counted (under 1% of each model here).
- ``summarize`` counts one ``hash_size`` x ``dim`` table per ``embedding_bag`` layer, so an entry
  with several tables (NCF's users and items, DLRM's 26) gives ``hash_size`` as their total rows.
- One ``seq_len`` serves an encoder and its decoder (T5, Switch, Vaswani's Transformer): the
  decoder is counted at the encoder's length.
- A CNN's ``num_dense_features`` is its input values per sample (3 x H x W for an image).
- Transformer layers give ``d_ff`` and also ``ffn_mult`` = d_ff / d_model (``memory.py`` reads it).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CatalogModel:
    """One model: its layers, the launch sizes they need, what a sample is, and the sources."""

    name: str
    layers: tuple[dict[str, Any], ...]
    sample: str
    sources: tuple[str, ...]
    seq_len: int = 0
    num_sparse_features: int = 0
    num_dense_features: int = 0
    hash_size: int = 0

    @property
    def definition(self) -> dict[str, Any]:
        """The ``{"layers": [...]}`` mapping (a copy: callers may change it)."""
        return {"layers": copy.deepcopy(list(self.layers))}

    @property
    def launch_sizes(self) -> dict[str, int]:
        """The launch columns ``summarize`` reads, at the sizes the sources give."""
        return {
            "seq_len": self.seq_len,
            "num_sparse_features": self.num_sparse_features,
            "num_dense_features": self.num_dense_features,
            "hash_size": self.hash_size,
        }


def _tf(layers: int, d: int, heads: int, d_ff: int, **extra: Any) -> dict[str, Any]:
    return {
        "op": "transformer",
        "layers": layers,
        "d_model": d,
        "heads": heads,
        "d_ff": d_ff,
        "ffn_mult": d_ff / d,
        **extra,
    }


def _lstm(hidden: int, layers: int = 1, **extra: Any) -> dict[str, Any]:
    return {"op": "lstm", "layers": layers, "hidden": hidden, **extra}


def _conv(macs: float, params: float, **extra: Any) -> dict[str, Any]:
    return {"op": "conv_net", "macs": macs, "params": params, **extra}


def _lm(vocab: int) -> dict[str, Any]:
    return {"op": "lm_head", "vocab": vocab}


def _tokens(dim: int, seq_len: int) -> dict[str, Any]:
    return {"op": "embedding_bag", "dim": dim, "pooling": seq_len}


def _decoder_lm(
    name: str,
    layers: int,
    d: int,
    heads: int,
    vocab: int,
    seq_len: int,
    source: str,
    d_ff: int | None = None,
) -> CatalogModel:
    """A decoder-only LM with its embedding tied to the output projection."""
    layers_ = (_tf(layers, d, heads, d_ff or 4 * d), _lm(vocab))
    sample = f"one sequence of {seq_len} tokens"
    return CatalogModel(name, layers_, sample, (source,), seq_len=seq_len)


def _encoder_decoder(
    name: str,
    layers: int,
    d: int,
    heads: int,
    d_ff: int,
    vocab: int,
    seq_len: int,
    sources: tuple[str, ...],
) -> CatalogModel:
    """Encoder layers, decoder layers with cross-attention, a tied output projection."""
    encoder, decoder = _tf(layers, d, heads, d_ff), _tf(layers, d, heads, d_ff)
    decoder["cross_attention"] = True
    return CatalogModel(
        name,
        (encoder, decoder, _lm(vocab)),
        f"one pair of {seq_len}-token input and target sequences",
        sources,
        seq_len=seq_len,
    )


# --- sources -------------------------------------------------------------------------------------
_TV = "torchvision {} weights metadata (num_params, _ops in G MACs)"
_DLE = "NVIDIA DeepLearningExamples PyTorch/{} (commit 729963d), as Lambda's benchmark runs it"
_LAMBDA = "lambdal/deeplearning-benchmark pytorch/scripts (commit aa5addb): {}"
_HF = "Hugging Face {} config.json"
_NEUSIGHT = "NeuSight scripts/asplos/data/DLmodel_configs/{}.json (sitar-lab/NeuSight 6945927)"
_GPT3 = "Brown et al. 2020 (GPT-3) Table 2.1: {}; d_ff = 4 d_model, context 2048, GPT-2's BPE"
_ADAPTDL = "petuum/adaptdl branch osdi21-artifact benchmark/models/{} (Sia's and Pollux's runs)"
_COUNTED = "MACs, params and activations counted from the layer shapes of {}"

# --- derived sizes (each expression is its source's arithmetic) ----------------------------------
# Tacotron 2 per mel frame (DLE tacotron2/model.py and arg_parser.py defaults): the two LSTMs and
# the prenet are layers; the rest is declared. Postnet: 5 convolutions of kernel 5
# (80-512-512-512-512-80); attention: query 1024x128 per frame, then per input character the
# location conv (2x31x32), location dense (32x128), energy (128) and context (512); output
# projection (1024+512) x (80+1). The encoder per character (3 convolutions 5x512x512, a
# bidirectional LSTM of 256, the memory layer 512x128) is spread over the frames: LJSpeech has
# 1,308,674 characters in 23:55:17 of audio (keithito.com/LJ-Speech-Dataset statistics) at
# 22050/256 frames per second, 0.1764 characters per frame, and 99.9 characters per clip.
_CHARS_PER_CLIP = 1_308_674 / 13_100
_CHARS_PER_FRAME = 1_308_674 / ((23 * 3600 + 55 * 60 + 17) * 22050 / 256)
_TACO_ENCODER_PER_CHAR = 3 * 5 * 512 * 512 + 2 * 4 * 256 * (512 + 256) + 512 * 128
_TACO_POSTNET = 5 * (80 * 512 + 3 * 512 * 512 + 512 * 80)
_TACO_MACS = (
    _TACO_POSTNET
    + 1024 * 128
    + (2 * 31 * 32 + 32 * 128 + 128 + 512) * _CHARS_PER_CLIP
    + 1536 * 81
    + _TACO_ENCODER_PER_CHAR * _CHARS_PER_FRAME
)
_TACO_PARAMS = (
    _TACO_POSTNET
    + _TACO_ENCODER_PER_CHAR
    + 148 * 512
    + 1024 * 128
    + 2 * 31 * 32
    + 32 * 128
    + 128
    + 1536 * 81
)
# WaveGlow per 8000-sample segment (DLE waveglow/model.py, arg_parser defaults: 12 flows of a
# WaveNet-like net of 8 layers, 512 channels, kernel 3, over groups of 8 samples conditioned on
# 80 x 8 = 640 mel channels; 2 channels leave every 4 flows, so the flows' halves are 4,3,2
# four times each; Lambda's --segment-length 8000 gives 1000 steps of 8 samples).
_WN = 8 * 3 * 512 * 1024 + 8 * 640 * 1024 + 7 * 512 * 1024 + 512 * 512  # per flow and step
_WAVEGLOW_MACS = (
    1000 * (12 * _WN + 512 * 3 * (4 + 3 + 2) * 4 + 4 * (64 + 36 + 16)) + 32 * 80 * 80 * 1024
)  # + the mel upsampling (transposed conv, 32 frames)
_WAVEGLOW_PARAMS = 12 * _WN + 512 * 3 * 36 + 4 * (64 + 36 + 16) + 80 * 80 * 1024
_WAVEGLOW_ACTS = 1000 * 12 * (8 * 1024 + 8 * 1024 + 7 * 1024 + 512 + 512)
# DLRM's MLPerf tables (facebookresearch/dlrm dlrm_s_pytorch.py, --max-ind-range=40000000)
_DLRM_ROWS = (
    39884406,
    39043,
    17289,
    7420,
    20263,
    3,
    7120,
    1543,
    63,
    38532951,
    2953546,
    403346,
    10,
    2208,
    11938,
    155,
    4,
    976,
    14,
    39979771,
    25641295,
    39664984,
    585935,
    12972,
    108,
    36,
)

_MODELS: tuple[CatalogModel, ...] = (
    CatalogModel(
        "resnet50",
        (_conv(4.089e9, 25_557_032, activations=11.1e6, image_size=224),),
        "one 224x224 image",
        (
            _TV.format("ResNet50_Weights.IMAGENET1K_V1"),
            "pycls MODEL_ZOO.md (Radosavovic et al. 2020): 11.1 M activations",
            _DLE.format("Classification/ConvNets resnet50 (v1.5, torchvision's)"),
        ),
        num_dense_features=3 * 224 * 224,
    ),
    CatalogModel(
        "ssd300",
        (_conv(20.151e9, 22.859e6, activations=31.32e6, image_size=300),),
        "one 300x300 image",
        (
            _DLE.format(
                "Detection/SSD ssd/model.py: ResNet-50 to "
                "layer3 with its stride removed (38x38), 5 extra blocks, heads for 8732 boxes"
            ),
            _COUNTED.format("that model.py"),
        ),
        num_dense_features=3 * 300 * 300,
    ),
    CatalogModel(
        "mask_rcnn",
        (_conv(134.38e9, 44_401_393, image_size=800),),
        "one COCO image, shorter side 800",
        (
            _TV.format("MaskRCNN_ResNet50_FPN_Weights.COCO_V1") + ", measured at 800x800 "
            "in eval mode (pytorch/vision PR 6996)",
            _DLE.format("Segmentation/MaskRCNN (R-50-FPN, 800-1333 px)"),
        ),
        num_dense_features=3 * 800 * 800,
    ),
    CatalogModel(
        "bert_base_squad",
        (_tokens(768, 384), _tf(12, 768, 12, 3072), {"op": "mlp", "widths": [2]}),
        "one SQuAD sequence of 384 tokens",
        (
            _HF.format("bert-base-uncased"),
            _LAMBDA.format("patch/run_squad.sh --max_seq_length=384"),
        ),
        seq_len=384,
        num_sparse_features=1,
        hash_size=30522,
    ),
    CatalogModel(
        "bert_large_squad",
        (_tokens(1024, 384), _tf(24, 1024, 16, 4096), {"op": "mlp", "widths": [2]}),
        "one SQuAD sequence of 384 tokens",
        (
            _HF.format("bert-large-uncased"),
            _LAMBDA.format("patch/run_squad.sh --max_seq_length=384"),
        ),
        seq_len=384,
        num_sparse_features=1,
        hash_size=30522,
    ),
    CatalogModel(
        "bert_base",
        (_tf(12, 768, 12, 3072), {"op": "mlp", "widths": [768]}, _lm(30522)),
        "one pre-training sequence of 512 tokens (masked-LM head over every token)",
        (_HF.format("bert-base-uncased"), _NEUSIGHT.format("bert")),
        seq_len=512,
    ),
    CatalogModel(
        "bert_large",
        (_tf(24, 1024, 16, 4096), {"op": "mlp", "widths": [1024]}, _lm(30522)),
        "one pre-training sequence of 512 tokens (masked-LM head over every token)",
        (_HF.format("bert-large-uncased"), _NEUSIGHT.format("bert_large")),
        seq_len=512,
    ),
    CatalogModel(
        "gnmt",
        (
            {"op": "embedding_bag", "dim": 1024, "pooling": 1},  # shared by encoder and decoder
            _lstm(1024, bidirectional=True, input=1024),
            _lstm(1024, input=2048),
            _lstm(1024, 2),
            _lstm(1024, input=1024),  # the decoder's first layer: its output is the attention query
            {"op": "mlp", "widths": [1024, 1024]},  # Bahdanau attention's query and key projections
            *(_lstm(1024, input=2048) for _ in range(3)),  # decoder layers, fed the context too
            _lm(32320),
        ),
        "one source token and one target token (Lambda's tokens/s counts both: halved)",
        (
            _DLE.format(
                "Translation/GNMT seq2seq/models (GNMT v2: 4+4 LSTM layers of 1024, the "
                "first bidirectional, shared embedding)"
            ),
            "DLE GNMT vocabulary: 32000 BPE merges padded to 32320 (--synthetic-vocab default)",
        ),
        num_sparse_features=2,
        hash_size=32320,
    ),
    _encoder_decoder(
        "transformer_base",
        6,
        512,
        8,
        2048,
        37000,
        256,
        (
            "Vaswani et al. 2017 Table 3 (base), shared 37000-token vocabulary",
            "tensor2tensor transformer_base_v1 max_length 256",
        ),
    ),
    _encoder_decoder(
        "transformer_big",
        6,
        1024,
        16,
        4096,
        37000,
        256,
        (
            "Vaswani et al. 2017 Table 3 (big), shared 37000-token vocabulary",
            "tensor2tensor transformer_base_v1 max_length 256",
        ),
    ),
    # Lambda passes no --adaptive: a full softmax over WikiText-103's 267,735 words, tied to the
    # input embedding. Attention over the memory and the relative-position scores are about 3x
    # the vocabulary's 4 T^2 d per layer (a few % of these models' FLOPs): not counted.
    CatalogModel(
        "transformer_xl_base",
        (_tf(16, 512, 8, 2048), _lm(267735)),
        "one segment of 192 tokens (with 192 tokens of memory)",
        (
            _DLE.format("LanguageModeling/Transformer-XL pytorch/wt103_base.yaml"),
            _LAMBDA.format("config_v1 --n_layer 16 --d_model 512 --tgt_len 192, no --adaptive"),
        ),
        seq_len=192,
    ),
    CatalogModel(
        "transformer_xl_large",
        (_tf(18, 1024, 16, 4096), _lm(267735)),
        "one segment of 256 tokens (with 256 tokens of memory)",
        (
            _DLE.format("LanguageModeling/Transformer-XL pytorch/wt103_large.yaml"),
            _LAMBDA.format(
                "config_v1 --n_layer 18 --d_model 1024 --tgt_len 256 "
                "(DLE's yaml: 384), no --adaptive"
            ),
        ),
        seq_len=256,
    ),
    CatalogModel(
        "tacotron2",
        (
            {"op": "mlp", "widths": [256, 256]},  # the prenet, from the 80 mel channels
            _lstm(1024, input=256 + 512),
            _lstm(1024, input=1024 + 512),  # attention and decoder
            _conv(_TACO_MACS, _TACO_PARAMS),
        ),
        "one mel frame (DLE's items/s sums the batch's output lengths)",
        (
            _DLE.format("SpeechSynthesis/Tacotron2 tacotron2/model.py"),
            "LJSpeech 1.1 statistics (keithito.com/LJ-Speech-Dataset)",
        ),
        num_dense_features=80,
    ),
    CatalogModel(
        "waveglow",
        (_conv(_WAVEGLOW_MACS, _WAVEGLOW_PARAMS, activations=_WAVEGLOW_ACTS),),
        "one 8000-sample audio segment (Lambda's items/s are audio samples: / 8000)",
        (
            _DLE.format("SpeechSynthesis/Tacotron2 waveglow/model.py (512 WN channels)"),
            _LAMBDA.format("config_v1 --segment-length 8000"),
        ),
        num_dense_features=8000 + 80 * 32,
    ),  # the audio and its 32 mel frames
    CatalogModel(
        "ncf",
        (
            {"op": "embedding_bag", "dim": 128, "pooling": 1},  # MLP user, item
            {"op": "mlp", "widths": [256, 128, 64]},
            {"op": "embedding_bag", "dim": 64, "pooling": 1},  # GMF user, item
            {"op": "mlp", "widths": [1]},
        ),
        "one user-item pair",
        (
            _DLE.format(
                "Recommendation/NCF neumf.py, ncf.py defaults (factors 64, layers 256-256-128-64)"
            ),
            "DLE NCF data/ml-20m/feature_spec_template.yaml: 138,493 users, 26,744 items",
        ),
        num_sparse_features=2,
        hash_size=138_493 + 26_744,
    ),
    CatalogModel(
        "dlrm",
        (
            {"op": "mlp", "widths": [512, 256, 128]},
            {"op": "embedding_bag", "dim": 128, "pooling": 1},
            {"op": "interaction", "kind": "dot"},
            {"op": "mlp", "widths": [1024, 1024, 512, 256, 1]},
        ),
        "one Criteo click log (13 dense, 26 categorical features)",
        (
            "facebookresearch/dlrm bench/run_and_time.sh (MLPerf: 13-512-256-128, "
            "1024-1024-512-256-1, dim 128, --max-ind-range=40000000)",
            "facebookresearch/dlrm dlrm_s_pytorch.py: the 26 table sizes at 40M",
        ),
        num_sparse_features=26,
        num_dense_features=13,
        hash_size=sum(_DLRM_ROWS),
    ),
    _decoder_lm("gpt2", 12, 768, 12, 50257, 1024, _HF.format("openai-community/gpt2")),
    _decoder_lm("gpt2_medium", 24, 1024, 16, 50257, 1024, _HF.format("gpt2-medium")),
    _decoder_lm("gpt2_large", 36, 1280, 20, 50257, 1024, _HF.format("gpt2-large")),
    _decoder_lm("gpt2_xl", 48, 1600, 25, 50257, 1024, _HF.format("gpt2-xl")),
    _decoder_lm("gpt3_1.3b", 24, 2048, 24, 50257, 2048, _GPT3.format("XL")),
    _decoder_lm("gpt3_2.7b", 32, 2560, 32, 50257, 2048, _GPT3.format("2.7B; NeuSight's gpt3_27")),
    _decoder_lm("gpt3_6.7b", 32, 4096, 32, 50257, 2048, _GPT3.format("6.7B")),
    _decoder_lm("gpt3_13b", 40, 5140, 40, 50257, 2048, _GPT3.format("13B")),
    _decoder_lm("gpt3_175b", 96, 12288, 96, 50257, 2048, _GPT3.format("175B")),
    _decoder_lm("neusight_gpt3_xl", 24, 3072, 24, 50257, 2048, _NEUSIGHT.format("gpt3_xl")),
    _decoder_lm("opt_1.3b", 24, 2048, 32, 50272, 2048, _HF.format("facebook/opt-1.3b"), 8192),
    _encoder_decoder("t5_base", 12, 768, 12, 3072, 32128, 512, (_HF.format("t5-base"),)),
    _encoder_decoder("t5_large", 24, 1024, 16, 4096, 32128, 512, (_HF.format("t5-large"),)),
    # every second layer of 24 is a 4-expert FFN; NeuSight's traced forward runs each expert on
    # expert_capacity (64) rows per sequence, half the FFN FLOPs of top-1 over 512 tokens
    CatalogModel(
        "switchxl4",
        (
            _tf(12, 1024, 32, 16384, d_attn=4096),
            _tf(12, 1024, 32, 16384, d_attn=4096, num_experts=4),
            _tf(12, 1024, 32, 16384, d_attn=4096, cross_attention=True),
            _tf(12, 1024, 32, 16384, d_attn=4096, cross_attention=True, num_experts=4),
            _lm(32128),
        ),
        "one pair of 512-token input and target sequences (NeuSight feeds the input as both)",
        (_NEUSIGHT.format("switchxl4"), "NeuSight neusight/Tracing/trace.py"),
        seq_len=512,
    ),
    CatalogModel(
        "resnet18_cifar",
        (_conv(555.42e6, 11.164e6, activations=614.4e3, image_size=32),),
        "one 32x32 CIFAR-10 image",
        (
            _ADAPTDL.format(
                "cifar10 (--model=ResNet18, "
                "kuangliu/pytorch-cifar models/resnet.py: 3x3 stem, no max-pool)"
            ),
            _COUNTED.format("that resnet.py"),
        ),
        num_dense_features=3 * 32 * 32,
    ),
    CatalogModel(
        "yolov3_voc",
        (_conv(37.94e9, 61.573e6, activations=44.71e6, image_size=448),),
        "one 448x448 PASCAL VOC image (training also draws other sizes)",
        (
            _ADAPTDL.format(
                "yolov3 (Darknet-53 with YOLOv3's FPN head, 20 classes, config TRAIN_IMG_SIZE 448)"
            ),
            _COUNTED.format("that model/"),
        ),
        num_dense_features=3 * 448 * 448,
    ),
    CatalogModel(
        "ncf_ml1m",
        (
            {"op": "embedding_bag", "dim": 128, "pooling": 1},
            {"op": "mlp", "widths": [128, 64, 32]},
            {"op": "embedding_bag", "dim": 32, "pooling": 1},
            {"op": "mlp", "widths": [1]},
        ),
        "one user-item pair",
        (
            _ADAPTDL.format(
                "ncf (NeuMF-end, factor_num 32, num_layers 3: MLP embeddings 32 x 2^2)"
            ),
            "He et al. 2017 (NCF) Table 1: MovieLens 1M, 6,040 users, 3,706 items",
        ),
        num_sparse_features=2,
        hash_size=6_040 + 3_706,
    ),
)

CATALOG: dict[str, CatalogModel] = {model.name: model for model in _MODELS}

# NeuSight's model names (its measurements' ``model``) -> catalog names
NEUSIGHT_MODELS: dict[str, str] = {
    "bert_large": "bert_large",
    "gpt2_large": "gpt2_large",
    "gpt3_xl": "neusight_gpt3_xl",
    "gpt3_27": "gpt3_2.7b",
    "opt_13": "opt_1.3b",
    "switchxl4": "switchxl4",
}


def catalog_model(name: Any) -> CatalogModel:
    """The catalog entry called ``name``; a ValueError names it and lists the known ones."""
    model = CATALOG.get(name) if isinstance(name, str) else None
    if model is None:
        shown = repr(name) if len(repr(name)) <= 60 else repr(name)[:57] + "..."
        raise ValueError(
            f"model_definition catalog={shown} is not a catalog model; known: {sorted(CATALOG)}"
        )
    return model


def resolve_definition(definition: Mapping[str, Any]) -> Mapping[str, Any]:
    """``{"catalog": name}`` -> the entry's ``{"layers": [...]}``; any other mapping as it is."""
    if "catalog" not in definition:
        return definition
    others = sorted(str(key) for key in definition if key != "catalog")
    if others:
        raise ValueError(
            f"model_definition names a catalog model and also {others}: give one or the other"
        )
    return catalog_model(definition["catalog"]).definition
