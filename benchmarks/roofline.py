"""The machine's bounds and the model's cost per decoding step, for the roofline columns.

Batch 1 reads every decoder weight once per step for one row of work: memory-bound. Batch 32 ×
beam 4 reuses each weight for 128 rows: compute-bound. A cell's bound is the larger of the two
times; its roofline fraction is bound / measured step time.

Legend: H d_model, F feed-forward size, L decoder layers, V target vocabulary, S source length,
P past length.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Machine:
    gemm_gflops: float  # fp32 GEMM peak, all cores (numpy's BLAS)
    bandwidth_gbs: float  # DRAM copy bandwidth: bytes read + written per second


def measure_machine(seconds: float = 2.0) -> Machine:
    n = 1024
    a, b = np.random.rand(n, n).astype(np.float32), np.random.rand(n, n).astype(np.float32)
    best = float("inf")
    stop = time.perf_counter() + seconds
    while time.perf_counter() < stop:
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    gflops = 2 * n**3 / best / 1e9
    src = np.ones(64 * 2**20, dtype=np.float32)  # 256 MiB: far past the caches
    dst = np.empty_like(src)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return Machine(gemm_gflops=gflops, bandwidth_gbs=2 * src.nbytes / best / 1e9)


@dataclass(frozen=True)
class StepCost:
    weight_params: int  # decoder weights read per step (cross-attention K/V precomputed)
    matmul_params: int  # those in matrix products (quantized in int8)
    flops_per_row: float  # at the given source and past length

    def weight_bytes(self, precision: str) -> float:
        if precision == "int8":
            return self.matmul_params * 1 + (self.weight_params - self.matmul_params) * 4
        return self.weight_params * 4.0


def transformer_step_cost(config: dict[str, Any], src_len: int, past: int) -> StepCost:
    """Decoder cost of one step: self-attention (q, k, v, out), cross (q, out), FFN, output layer."""
    H, F, L, V = config["d_model"], config["ff_dim"], config["dec_layers"], config["tgt_vocab"]
    per_layer = 6 * H * H + 2 * H * F  # matrices
    matmul = L * per_layer + H * V
    small = L * (6 * H + F + H + 6 * H) + 2 * H  # biases and layer norms
    attention = L * 2 * 2 * H * (past + 1 + src_len)  # scores and weighted sums, self and cross
    embed = H  # one embedding row
    return StepCost(matmul + small + embed, matmul, 2.0 * matmul + attention)


def bound_seconds(cost: StepCost, machine: Machine, precision: str, rows: int) -> tuple[float, str]:
    """The roofline time of one step for `rows` rows, and which bound it is."""
    memory = cost.weight_bytes(precision) / (machine.bandwidth_gbs * 1e9)
    compute = rows * cost.flops_per_row / (machine.gemm_gflops * 1e9)
    return (memory, "memory") if memory >= compute else (compute, "compute")
