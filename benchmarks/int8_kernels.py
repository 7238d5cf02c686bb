"""onnxruntime's int8 MatMul kernels side by side, on the shapes of a decoder step.

    python -m benchmarks.int8_kernels [--rounds 7]

One MatMulInteger per graph, one thread, the same uint8 activations for every int8 form: uint8 x
uint8 weights (what per-row bundles first used), uint8 x int8 with full-range weights, and uint8 x
int8 with activations below 128 (what exports write now: exact on AVX2's saturating 16-bit path
too); fp32 MatMul for reference. Each form's exactness against numpy's int64 product is checked on
the same inputs. Medians of interleaved rounds, in microseconds a call.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

SHAPES = ((1, 256, 8000), (32, 256, 1024), (32, 1024, 256), (32, 256, 8000), (128, 256, 768))
FORMS = ("fp32", "u8 x u8", "u8 x s8", "u8<128 x s8")


def graph(form: str, weight: npt.NDArray[Any]) -> onnx.ModelProto:
    K, N = weight.shape
    if form == "fp32":
        inputs = [numpy_helper.from_array(weight.astype(np.float32), "w")]
        node = helper.make_node("MatMul", ["a", "w"], ["y"])
        a_type, y_type = TensorProto.FLOAT, TensorProto.FLOAT
    else:
        if form == "u8 x u8":  # the same values, shifted by 128
            w, zero = (weight + 128).astype(np.uint8), np.array(128, np.uint8)
        else:
            w, zero = weight.astype(np.int8), np.array(0, np.int8)
        a_zero = np.array(64 if form == "u8<128 x s8" else 128, np.uint8)
        inputs = [numpy_helper.from_array(v, n) for n, v in (("w", w), ("wz", zero), ("az", a_zero))]
        node = helper.make_node("MatMulInteger", ["a", "w", "az", "wz"], ["y"])
        a_type, y_type = TensorProto.UINT8, TensorProto.INT32
    a = helper.make_tensor_value_info("a", a_type, [None, K])
    y = helper.make_tensor_value_info("y", y_type, [None, N])
    model = helper.make_model(
        helper.make_graph([node], "g", [a], [y], inputs), opset_imports=[helper.make_opsetid("", 17)]
    )
    model.ir_version = 9
    return model


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def activations(form: str, M: int, K: int, rng: np.random.Generator) -> npt.NDArray[Any]:
    if form == "fp32":
        return rng.standard_normal((M, K)).astype(np.float32)
    high = 128 if form == "u8<128 x s8" else 256
    return rng.integers(0, high, (M, K)).astype(np.uint8)


def max_error(form: str, a: npt.NDArray[Any], weight: npt.NDArray[Any], got: npt.NDArray[Any]) -> int | None:
    if form == "fp32":
        return None
    zero = 64 if form == "u8<128 x s8" else 128
    return int(np.abs(got - (a.astype(np.int64) - zero) @ weight.astype(np.int64)).max())


def measure(M: int, K: int, N: int, rounds: int, rng: np.random.Generator) -> dict[str, tuple[float, int | None]]:
    weight = rng.integers(-127, 128, (K, N))  # symmetric int8, as quantize_dynamic writes
    sessions = {form: session(graph(form, weight)) for form in FORMS}
    feeds = {form: activations(form, M, K, rng) for form in FORMS}
    errors = {f: max_error(f, feeds[f], weight, sessions[f].run(None, {"a": feeds[f]})[0]) for f in FORMS}
    calls = 200 if M < 64 else 50
    times: dict[str, list[float]] = {form: [] for form in FORMS}
    for r in range(rounds):
        for form in FORMS[r % len(FORMS) :] + FORMS[: r % len(FORMS)]:
            started = time.perf_counter()
            for _ in range(calls):
                sessions[form].run(None, {"a": feeds[form]})
            times[form].append((time.perf_counter() - started) / calls * 1e6)
    return {form: (statistics.median(times[form]), errors[form]) for form in FORMS}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    print("M x K x N".ljust(18) + "".join(f"{form:>22}" for form in FORMS))
    for M, K, N in SHAPES:
        figures = measure(M, K, N, args.rounds, rng)
        cells = [
            f"{us:9.1f} us" + (f" (err {err})" if err is not None else "").ljust(10) for us, err in figures.values()
        ]
        print(f"{M} x {K} x {N}".ljust(18) + "".join(f"{c:>22}" for c in cells))


if __name__ == "__main__":
    main()
