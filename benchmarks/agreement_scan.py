"""How widely the fast-forward agrees with the full simulation: random 70B-shaped scenarios.

Draws scenarios beyond the test suite's (which keeps to 12 layers to stay quick): 16 to 80
layers, 1 to 8 GPUs, 1 to 6 micro-steps, every ZeRO stage, sub-group size, CXL device count and
interleave weights, NVMe drive count, swap buffers, pipelining and queue depth, NVLink or a PCIe
fabric, every strategy; simulates each that fits with and without fast-forward for ``--seconds``
and prints every one that does not agree to 1e-9 (``assert_same`` of tests/equivalence/test_session.py) with
its relative iteration-time difference and how far the full simulation's own iteration times
spread under nudges of a rate by 1e-12 (``spreads``: float residue for a stable schedule), and
every figure that differs by more than twice its own spread (``beyond_spread``), then the counts.

    python3 benchmarks/agreement_scan.py --seed 11 --seconds 600
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "equivalence"))

from test_session import assert_same, beyond_spread, spreads  # noqa: E402

from tiersim import _native  # noqa: E402
from tiersim.config.document import load_scenario  # noqa: E402
from tiersim.simulate import simulate  # noqa: E402


def draw(rng: random.Random) -> tuple[str, list[str]]:
    """A strategy and the overrides of one scenario."""
    gpus = rng.choice([1, 2, 4, 8])
    overrides = [
        f"model.layers={rng.choice([16, 24, 40, 80])}", f"hardware.gpus={gpus}", "hardware.sockets=2",
        f"training.global_batch={gpus * rng.randint(1, 6)}", f"training.zero_stage={rng.randint(1, 3)}",
        f"training.sub_group_size={rng.choice(['1e7', '3e7', '1e8', '1e9'])}",
        f"training.activation_checkpointing={rng.choice(['true', 'false'])}",
        f"hardware.cxl.count={rng.randint(1, 8)}", f"strategies.cxl.dram_weight={rng.randint(1, 16)}",
        f"strategies.cxl.cxl_weight={rng.randint(1, 16)}", f"hardware.nvme.count={rng.randint(1, 8)}",
        f"strategies.nvme.buffer_count={rng.choice([4, 5, 8, 16, 40])}",
        f"strategies.nvme.pipeline_read={rng.choice(['true', 'false'])}",
        f"strategies.nvme.pipeline_write={rng.choice(['true', 'false'])}",
        f"strategies.nvme.queue_depth={rng.choice([1, 8, 64])}",
    ]
    if rng.random() < 0.5:  # collectives over the PCIe links the gradient copies use
        overrides.append("hardware.fabric=pcie-p2p-gen5")
    strategy = rng.choice(["gpu", "dram", "cxl", "nvme"])
    if strategy == "nvme":  # DeepSpeed swaps to NVMe under ZeRO-3 only
        overrides[4] = "training.zero_stage=3"
    return strategy, overrides


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--seconds", type=float, default=600.0, help="how long to draw scenarios")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    scenario = ROOT / "scenarios" / "llama2-70b-offload.yaml"
    checked = chaotic = off = 0
    began = time.perf_counter()
    while time.perf_counter() - began < args.seconds:
        strategy, overrides = draw(rng)
        config = load_scenario(scenario, overrides, [strategy], force=True)[0]
        fast = simulate(config)
        if not fast.fits:
            continue
        full = simulate(config, fast_forward=False)
        checked += 1
        try:
            assert_same(fast, full)
        except AssertionError:
            spread = spreads(config, full)  # the nudged full runs, once for every figure
            difference = abs(fast.iteration_time_s - full.iteration_time_s) / full.iteration_time_s
            beyond = beyond_spread(fast, full, spread)
            chaotic += not beyond
            off += bool(beyond)
            figures = "".join(f"; {name} {rel:.2e} off, spread {sp:.2e}  <- NOT within it" for name, rel, sp in beyond)
            print(f"{strategy} {' '.join(overrides)}: iteration {difference:.2e} off, the full run's own spread "
                  f"{spread['iteration']:.2e}{figures}", flush=True)
    print(f"{checked} scenarios that fit ({_native.describe()}): {checked - chaotic - off} agree to 1e-9, "
          f"{chaotic} chaotic ones, every figure within twice its spread, {off} otherwise")
    return 1 if off else 0


if __name__ == "__main__":
    raise SystemExit(main())
