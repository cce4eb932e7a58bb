"""``tiersim validate``: run the real offloaded optimizer step and compare with the prediction."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tiersim.commands.options import add_format
from tiersim.errors import ConfigError


def register(p: argparse.ArgumentParser) -> None:
    """Add ``validate``'s arguments to its parser."""
    p.description = ("Runs the real optimizer step (DRAM CPU Adam, NVMe swapping; with CUDA also the PCIe "
                     "and all-GPU paths) over model sizes not used by calibration and reports prediction errors.")
    p.add_argument("--profile", type=Path, default=None,
                   help="host profile (default: newest device_profiles/host-*.yaml; a quick calibration if none)")
    p.add_argument("--quick", action="store_true", help="fewer, smaller cases (under two minutes on 2 cores)")
    add_format(p, "table", "json")
    p.add_argument(
        "--nvme-dir", type=Path, default=None, help="directory for the swap files (default: temp dir on local disk)"
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads for CPU Adam (default 1; the full set adds a case with all cores)",
    )
    p.add_argument("--repeats", type=int, default=None, help="timed repeats per case (interleaved rounds; default 9)")
    p.add_argument(
        "--as-calibrated",
        action="store_true",
        help="headline the prediction from the profile as calibrated (default: from the profile with its "
        "Adam rate and disk bandwidths scaled by the drift that the calibration's own micro-benchmarks, "
        "timed in the same rounds as the cases, measure; the table shows the other prediction either way)",
    )
    p.set_defaults(func=handler)


def newest_host_profile(directory: Path = Path("device_profiles")) -> Path | None:
    candidates = sorted(directory.glob("host-*.yaml"), key=lambda p: p.stat().st_mtime)
    return candidates[-1] if candidates else None


def handler(args: argparse.Namespace) -> int:
    import os

    from tiersim.commands.calibrate import require_torch

    require_torch("validate")

    from tiersim.calibration import microbench
    from tiersim.config.profiles import HostProfile, load_profile_file
    from tiersim.validation.cases import full_cases, quick_cases
    from tiersim.validation.predictor import PREDICTOR
    from tiersim.validation.report import render_table, to_json
    from tiersim.validation.runner import run_cases

    if args.threads < 1:
        raise ConfigError("--threads", "", "must be at least 1")
    if args.nvme_dir is not None and not Path(args.nvme_dir).is_dir():
        raise ConfigError("--nvme-dir", "", f"{args.nvme_dir} is not a directory")
    nvme_dir = Path(args.nvme_dir) if args.nvme_dir else microbench.default_nvme_dir()
    path = args.profile or newest_host_profile()
    if path is None:
        from tiersim.calibration.runner import quick_plan
        from tiersim.commands.calibrate import default_out, run_with_progress

        print("no device_profiles/host-*.yaml: running `tiersim calibrate --quick` first", file=sys.stderr)
        path = run_with_progress(quick_plan(), default_out(), nvme_dir).path  # type: ignore[attr-defined]
    host = load_profile_file(Path(path))
    if not isinstance(host, HostProfile):
        raise ConfigError(str(path), "kind", f"expected a host profile, got {host.kind}")
    cuda = microbench.cuda_available()
    cases = (
        quick_cases(args.threads, cuda)
        if args.quick
        else full_cases(args.threads, cuda, max_threads=os.cpu_count() or 1)
    )
    repeats = args.repeats or 9

    def on_case(case: object) -> None:
        if args.format == "table":
            print(f"  setting up {case.name} ...", file=sys.stderr, flush=True)  # type: ignore[attr-defined]

    validation = run_cases(
        cases, host, nvme_dir, warmup=1, repeats=repeats, correct_drift=not args.as_calibrated, on_case=on_case
    )
    if args.format == "json":
        print(to_json(validation.results))
    else:
        how, other = (
            ("drift-corrected", "as calibrated") if validation.corrected else ("as calibrated", "drift-corrected")
        )
        print(
            render_table(
                validation.results,
                title=f"tiersim validate ({path}; predicted by {PREDICTOR}, {how})",
                note=validation.drift.describe(),
                other=other,
            )
        )
    return 0
