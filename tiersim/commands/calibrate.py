"""``tiersim calibrate``: measure this host with micro-benchmarks and write a host profile."""

from __future__ import annotations

import argparse
import socket
from pathlib import Path

from tiersim.commands.options import output_folder
from tiersim.errors import ConfigError


def require_torch(command: str) -> None:
    """Calibration and validation run torch's CPU Adam and tensors: without torch, one line
    naming the extra to install."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise ConfigError(f"tiersim {command}", "", "needs PyTorch, which is not installed: pip install "
                                                     "'tiersim[torch]' (a GPU machine installs a CUDA build of "
                                                     "torch first; see the README)") from None


def default_out() -> Path:
    return Path("device_profiles") / f"host-{socket.gethostname()}.yaml"


def register(p: argparse.ArgumentParser) -> None:
    """Add ``calibrate``'s arguments to its parser."""
    p.description = ("Single-resource micro-benchmarks, fitted with scipy.optimize into a `kind: host` "
                     "profile that `tiersim run` can use; raw measurements and residuals are kept in it.")
    p.add_argument("--out", type=Path, default=None, help="profile file (default device_profiles/host-HOSTNAME.yaml)")
    p.add_argument("--quick", action="store_true", help="fewer sizes and repeats (under about a minute)")
    p.add_argument(
        "--nvme-dir", type=Path, default=None, help="directory for file I/O (default: a temp dir on local disk)"
    )
    p.set_defaults(func=handler)


def run_with_progress(plan: object, out: Path, nvme_dir: Path | None, quiet: bool = False) -> object:
    """Run the calibration with a progress bar (on stderr); returns the CalibrationResult."""
    from tiersim.calibration import microbench
    from tiersim.calibration.runner import run_calibration
    from tiersim.progress import progress_bar

    total = plan.points(microbench.cuda_available())  # type: ignore[attr-defined]
    with progress_bar(not quiet, total, "calibrating", "points") as bar:
        return run_calibration(plan, out, nvme_dir, lambda label: bar.advance(label=label))  # type: ignore[arg-type]


def handler(args: argparse.Namespace) -> int:
    require_torch("calibrate")
    from tiersim.calibration.runner import full_plan, quick_plan

    out = args.out or default_out()
    output_folder(out.parent)  # before measuring: a folder that cannot be written in is one line now
    if args.nvme_dir is not None and not Path(args.nvme_dir).is_dir():
        raise ConfigError("--nvme-dir", "", f"{args.nvme_dir} is not a directory")
    plan = quick_plan() if args.quick else full_plan()
    result = run_with_progress(plan, out, args.nvme_dir)
    print(f"wrote {result.path}")  # type: ignore[attr-defined]
    for key, value in result.summary.items():  # type: ignore[attr-defined]
        print(f"  {key}: {value}")
    return 0
