"""Regenerate the README's pictures: ``python3 docs/figures/make.py [--out DIR] [--seed-logs DIR]``.

- ``seed-phases.png``: the seed study's phase bars as ``tiersim reproduce seed`` predicts them,
  with the study's measured 70B phases beside them (hatched): DeepSpeed's rank-0 ``fwd``,
  ``bwd`` and ``step`` timers in the 70B logs, mean of iterations 3 to N (the study's steady
  state; the first two are warm-up).
- ``timeline-70b-nvme.png``: ``tiersim.timeline_figure`` of ``scenarios/seed-70b.yaml``, strategy
  nvme (one iteration: a row per stream and per tier link).
- ``plan-cheapest.png``: ``tiersim plan scenarios/llama2-70b-offload.yaml --objective cheapest
  --max-iteration-time 30 --plot FILE``.

Static export needs the figures extra and a Chromium or Chrome (see ``tiersim.figure_export``).
Exits 2 with one line when the logs or the browser are missing.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pandas as pd

from tiersim.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_LOGS = ROOT.parent / "shared" / "reference" / "seed-logs"
SEED_70B_LOGS = {"dram": "70B-dram.log", "cxl": "70B-cxl-interleave-12-5.log", "nvme": "70B-nvme.log"}
"""The study's measured 70B runs (global batch 4), one log per strategy."""
_TIMERS = re.compile(r"time \(ms\) \| fwd: ([\d.]+) \| bwd: ([\d.]+) \|.*\| step: ([\d.]+)")
FIGURES = ("seed-phases.png", "timeline-70b-nvme.png", "plan-cheapest.png")


def seed_70b_measured(log_dir: Path) -> pd.DataFrame:
    """The three 70B logs' steady-state phases: columns model, strategy, phase, seconds.

    Only DeepSpeed's rank-0 ``time (ms) | fwd: .. | bwd: .. | .. | step: ..`` lines are read
    (one per iteration); the figure is the mean of iterations 3 to N, in seconds. Not a log
    reader: ``tiersim import-log`` (issue 12) is to replace this.
    """
    rows = []
    for strategy, name in SEED_70B_LOGS.items():
        path = log_dir / name
        try:
            text = path.read_text(errors="replace")
        except OSError as exc:
            raise ConfigError(str(path), "--seed-logs", f"cannot read the seed log ({exc.strerror})") from None
        iterations = [tuple(float(v) / 1e3 for v in m.groups()) for m in _TIMERS.finditer(text)]
        if len(iterations) < 3:
            raise ConfigError(str(path), "--seed-logs", f"{len(iterations)} DeepSpeed fwd/bwd/step timer lines, "
                              "need at least 3 (two warm-up iterations, then the steady state)")
        steady = iterations[2:]
        for i, phase in enumerate(("forward", "backward", "optimizer_step")):
            rows.append({"model": "70B", "strategy": strategy, "phase": phase,
                         "seconds": sum(it[i] for it in steady) / len(steady)})
    return pd.DataFrame(rows)


def seed_figure(out: Path, measured: pd.DataFrame) -> Path:
    """seed-phases.png: predicted phase bars of the seed study, measured 70B beside them."""
    from tiersim.figure_export import write_figure
    from tiersim.reproduce import phase_figure, run_study, study_scenarios

    df = run_study(study_scenarios("seed", ROOT / "scenarios"))
    fig = phase_figure(df, measured, title="seed study: iteration time by phase, predicted and measured (70B)")
    return write_figure(fig, out / "seed-phases.png")


def timeline(out: Path) -> Path:
    """timeline-70b-nvme.png: one 70B iteration under ZeRO-Infinity (NVMe offload)."""
    from tiersim.figure_export import write_figure
    from tiersim.plots import timeline_figure
    from tiersim.scenario import load_scenario
    from tiersim.simulate import simulate

    (config,) = load_scenario(ROOT / "scenarios" / "seed-70b.yaml", strategies=["nvme"])
    fig = timeline_figure(simulate(config))
    fig.update_layout(width=1300)
    return write_figure(fig, out / "timeline-70b-nvme.png")


def planner(out: Path) -> Path:
    """plan-cheapest.png: the planner's candidates, cost against iteration time (the CLI itself)."""
    from tiersim.cli import main

    path = out / "plan-cheapest.png"
    status = main(["plan", str(ROOT / "scenarios" / "llama2-70b-offload.yaml"), "--objective", "cheapest",
                   "--max-iteration-time", "30", "--top", "5", "--plot", str(path)])
    if status != 0:
        raise ConfigError(str(path), "plan", f"tiersim plan exited {status}")
    return path


def main(argv: list[str] | None = None) -> int:
    """Write the README's figures into ``--out`` (default: this folder)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent, help="where to write them")
    parser.add_argument("--seed-logs", type=Path, default=DEFAULT_LOGS,
                        help=f"the study's 70B logs ({', '.join(SEED_70B_LOGS.values())}); default {DEFAULT_LOGS}")
    args = parser.parse_args(argv)
    from tiersim.figure_export import check_target

    try:
        measured = seed_70b_measured(args.seed_logs)
        check_target(args.out / FIGURES[0])
        for path in (seed_figure(args.out, measured), timeline(args.out), planner(args.out)):
            print(f"wrote {path}")
    except ConfigError as exc:
        print(f"make.py: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
