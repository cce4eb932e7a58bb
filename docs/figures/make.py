"""Regenerate the README's pictures: ``python3 docs/figures/make.py [--out DIR] [--measured DIR]``.

- ``seed-phases.png``: the seed study's phase bars as ``tiersim reproduce seed`` predicts them,
  with the study's measured 70B phases beside them (hatched): DeepSpeed's rank-0 ``fwd``,
  ``bwd`` and ``step`` timers of the 70B logs as ``tiersim import-log`` reads them (the bundled
  ``scenarios/measured/``), mean of iterations 3 to N (the study's steady state).
- ``timeline-70b-nvme.png``: ``tiersim.timeline_figure`` of ``scenarios/seed-70b.yaml``, strategy
  nvme (one iteration: a row per stream and per tier link).
- ``plan-cheapest.png``: ``tiersim plan scenarios/llama2-70b-offload.yaml --objective cheapest
  --max-iteration-time 30 --plot FILE``.

Static export needs the figures extra and a Chromium or Chrome (see ``tiersim.analysis.figure_export``).
Exits 2 with one line when the measured runs or the browser are missing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from tiersim.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
FIGURES = ("seed-phases.png", "timeline-70b-nvme.png", "plan-cheapest.png")


def seed_measured(directory: Path) -> pd.DataFrame:
    """The measured runs in ``directory`` that ran a seed scenario (model, strategy, phase, seconds)."""
    from tiersim.analysis.reproduce import measured_runs, study_scenarios

    measured = measured_runs(study_scenarios("seed", ROOT / "scenarios"), (), directory)
    if measured.empty:
        raise ConfigError(str(directory), "--measured", "no measured run of a seed scenario (tiersim import-log "
                          "--out DIR writes them)")
    return measured


def seed_figure(out: Path, measured: pd.DataFrame) -> Path:
    """seed-phases.png: predicted phase bars of the seed study, measured 70B beside them."""
    from tiersim.analysis.figure_export import write_figure
    from tiersim.analysis.reproduce import phase_figure, run_study, study_scenarios

    df = run_study(study_scenarios("seed", ROOT / "scenarios"))
    fig = phase_figure(df, measured, title="seed study: iteration time by phase, predicted and measured (70B)")
    return write_figure(fig, out / "seed-phases.png")


def timeline(out: Path) -> Path:
    """timeline-70b-nvme.png: one 70B iteration under ZeRO-Infinity (NVMe offload)."""
    from tiersim.analysis.figure_export import write_figure
    from tiersim.analysis.plots import timeline_figure
    from tiersim.config.document import load_scenario
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
    parser.add_argument("--measured", type=Path, default=ROOT / "scenarios" / "measured",
                        help="measured runs as tiersim import-log --out writes them (default: scenarios/measured)")
    args = parser.parse_args(argv)
    from tiersim.analysis.figure_export import check_target

    try:
        measured = seed_measured(args.measured)
        check_target(args.out / FIGURES[0])
        for path in (seed_figure(args.out, measured), timeline(args.out), planner(args.out)):
            print(f"wrote {path}")
    except ConfigError as exc:
        print(f"make.py: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
