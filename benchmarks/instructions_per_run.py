"""Instructions per run of the 70B sweep, counted by valgrind's callgrind.

Wall and CPU time on the development VM drift by tens of percent within an hour, so a change
to the engine is measured here in instructions instead: the same 1,000-point grid as
``sweep_throughput.py``, every 25th point, run through ``run_batch`` (simulate and the result
row) after one untimed run; callgrind counts the batch alone (``callgrind.py``), over the batch
size that is the instructions per run. Needs ``valgrind`` on the PATH (not a dependency); takes
under a minute. ``--scenario`` and ``--strategy`` count one scenario's run of one strategy instead
(``simulate`` alone, ``--runs`` times after one untimed run), with ``--set`` overrides.

    python3 benchmarks/instructions_per_run.py [--runs 20]
    python3 benchmarks/instructions_per_run.py --scenario scenarios/seed-70b.yaml --strategy cxl \
        --set strategies.cxl.policy=bind
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def child(runs: int) -> None:
    """Plan the sweep, run one point untimed, then ``runs`` points (the counted part)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from sweep_throughput import sweep_spec

    from tiersim.sweeping.points import load_sweep, plan_sweep
    from tiersim.sweeping.runner import run_batch

    planned = plan_sweep(load_sweep(sweep_spec(1000)))
    chosen = [(r.index, r.config) for r in planned[::25]]
    run_batch(chosen[:1])
    sys.call_tracing(run_batch, (chosen[:runs],))


def scenario_child(runs: int, scenario: str, strategy: str, sets: list[str]) -> None:
    """Load ``scenario``'s ``strategy``, run it once untimed, then ``runs`` times (counted)."""
    from tiersim.config.document import load_scenario
    from tiersim.simulate import simulate

    config = load_scenario(Path(scenario), sets, [strategy], force=True)[0]
    simulate(config)
    sys.call_tracing(lambda: [simulate(config) for _ in range(runs)], ())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs in the counted batch (at most 40)")
    parser.add_argument("--scenario", help="count this scenario's runs instead of the sweep's")
    parser.add_argument("--strategy", help="with --scenario, the strategy to run")
    parser.add_argument("--set", action="append", default=[], help="with --scenario, an override (repeatable)")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        if args.scenario:
            scenario_child(args.child, args.scenario, args.strategy, args.set)
        else:
            child(args.child)
        return 0
    if bool(args.scenario) != bool(args.strategy):
        print("instructions_per_run: --scenario and --strategy go together", file=sys.stderr)
        return 2
    if shutil.which("valgrind") is None:
        print("instructions_per_run: needs valgrind on the PATH", file=sys.stderr)
        return 2
    if not 1 <= args.runs <= 40:
        print("instructions_per_run: --runs must be 1-40", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from callgrind import counted

    from tiersim import _native  # decides as the child will: same checkout, same environment

    if args.scenario:
        chosen = ["--scenario", args.scenario, "--strategy", args.strategy, *(f"--set={s}" for s in args.set)]
        total = counted([__file__, "--child", str(args.runs), *chosen])
        print(f"{total / args.runs / 1e6:.2f} M instructions per run (simulate), {args.scenario} "
              f"{args.strategy} {' '.join(args.set)} ({_native.describe()})")
        return 0
    total = counted([__file__, "--child", str(args.runs)])
    print(f"{total / args.runs / 1e6:.2f} M instructions per run (simulate + row), "
          f"mean of {args.runs} 70B NVMe sweep points ({_native.describe()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
