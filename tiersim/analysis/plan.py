"""Capacity planning: which model fits, which sizing is fastest, which hardware is cheapest.

Pure functions over a scenario document (as read from YAML, overrides applied); each returns a
``pandas.DataFrame`` with one row per candidate, ranked. A candidate or search probe is a
variant of the document (``with_values``: only the branches it changes are new, and hardware
specs already resolved are reused). Every candidate is simulated with
``simulate`` (no shortcuts), so a planner answer is exactly what ``tiersim run`` would say.

Objectives
----------
``largest-model``
    For each strategy on the scenario's hardware as given, the largest model that fits. With
    ``scale="layers"`` the scenario's model is deepened or made shallower at fixed width
    (hidden, heads, FFN): the largest layer count that fits is found by doubling then binary
    search (fitting is monotone in depth). With ``scale="ladder"`` the candidates are the
    standard shapes in ``LADDER`` (Llama-2-style, 7B ... 175B) and the largest fitting rung
    is reported. Each row names the next larger step and why it does not fit.
``fastest``
    Tier sizing x strategies: DRAM per socket from a list, CXL device counts, NVMe drive
    counts. A device a strategy does not use is left out of that candidate (and of its cost):
    ``gpu`` and ``dram`` candidates have no CXL and no NVMe, ``cxl`` ones no NVMe, ``nvme`` ones
    no CXL. With ``policies``, each ``cxl`` sizing is tried under each of those host memory
    policies (``strategies.cxl.policy``: ``bind`` fills DRAM then spills to CXL, ``interleave``,
    ``weighted-interleave``...); without, under the scenario's. With ``ratios``, each ``dram``
    and ``cxl`` sizing under each partial-offload ratio (``strategies.NAME.ratio``, DeepSpeed
    ``offload_optimizer.ratio``); with ``offload_param``, every strategy's under each parameter
    offload device (``none``, ``cpu``, ``nvme``: ``strategies.NAME.offload_param.device``; with
    ``nvme`` the candidate keeps the drives, and its ``buffer_size`` is raised to the smallest
    DeepSpeed takes where the largest parameter partition does not fit: ``param_block``).
    Parameter offload beside a ratio below 1 is not modelled, so that pair is not tried.
    Ranked by iteration time (then cost); ``budget`` and ``max_iteration_time`` filter;
    ``chosen`` says which candidate won and why.
``cheapest``
    The same candidates; among those that fit, meet ``max_iteration_time`` and ``budget``,
    ranked by hardware cost (then iteration time). Every priced device needs ``price_usd``.

Costs
-----
Hardware cost = sum of unit prices (``price_usd`` in the device profiles; user-editable, each
cited) x counts: GPU x ``gpus``, CPU x ``sockets``, DRAM kit x ``sockets`` scaled per byte when
``dram_capacity`` differs from the profile's capacity, CXL x count, NVMe x count, each node's,
times ``hardware.nodes``. Links (PCIe) and the NICs between nodes are part of the platform and
not priced. ``cost_per_iteration_usd`` = hardware cost amortised
linearly over ``lifetime_years`` of continuous use (default 3 years, 365-day years) x iteration
time; power, hosting and the rest of the server are not included. ``iterations_per_hour`` is
3600 / iteration time.

Binding constraint
------------------
A candidate that does not fit is bound by capacity: ``capacity: <tier> (needs X GB, has Y GB)``
(or the missing device). One that fits is bound by the busiest resource of the optimizer step
(``Result.bottleneck()``), labelled stream or link, with the phase that dominates the iteration.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from tiersim.config.document import Origin, ScenarioDocument, load_document
from tiersim.config.document import with_model as with_named_model
from tiersim.config.hardware import TIERS, Hardware
from tiersim.config.scenario import RunConfig
from tiersim.config.schema import build
from tiersim.errors import API, ConfigError
from tiersim.results import PHASES, Result
from tiersim.simulate import simulate
from tiersim.strategies.param_offload import smallest_buffer
from tiersim.strategies.param_options import ParamOffload
from tiersim.strategies.placement import Misfit
from tiersim.workload import build_step, parameter_count

GIB = 2**30
SECONDS_PER_YEAR = 365 * 24 * 3600
OBJECTIVES = ("fastest", "cheapest", "largest-model")
DEFAULT_DRAM_GIB = (256, 512, 1024, 2048)
DEFAULT_CXL_COUNTS = (2, 4, 8)
DEFAULT_NVME_COUNTS = (1, 2, 4, 8)
DEFAULT_LIFETIME_YEARS = 3.0
DEFAULT_MAX_LAYERS = 1024

LADDER: tuple[dict[str, Any], ...] = (
    # Llama-2-style decoders (SwiGLU, RMSNorm, no bias, vocab 32000). 7B/13B/70B are Llama-2;
    # 20B/30B/52B are the seed study's shapes (scenarios/seed-*.yaml); 34B is Code Llama 34B;
    # 100B is a 70B-style shape widened to 10240; 175B has GPT-3's depth and width (96 x 12288)
    # with a SwiGLU FFN of the same parameter count as GPT-3's 4h GELU FFN.
    {"name": "7b", "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 32, "ffn": 11008},
    {"name": "13b", "layers": 40, "hidden": 5120, "heads": 40, "kv_heads": 40, "ffn": 13824},
    {"name": "20b", "layers": 40, "hidden": 5120, "heads": 64, "kv_heads": 64, "ffn": 20480},
    {"name": "30b", "layers": 60, "hidden": 6656, "heads": 52, "kv_heads": 52, "ffn": 17920},
    {"name": "34b", "layers": 48, "hidden": 8192, "heads": 64, "kv_heads": 8, "ffn": 22016},
    {"name": "52b", "layers": 64, "hidden": 8192, "heads": 64, "kv_heads": 64, "ffn": 21824},
    {"name": "70b", "layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8, "ffn": 28672},
    {"name": "100b", "layers": 88, "hidden": 10240, "heads": 80, "kv_heads": 8, "ffn": 28672},
    {"name": "175b", "layers": 96, "hidden": 12288, "heads": 96, "kv_heads": 96, "ffn": 32768},
)
"""The ``scale="ladder"`` model shapes, smallest first."""

_USES = {"gpu": (), "dram": (), "cxl": ("cxl",), "nvme": ("nvme",)}
"""Optional devices each strategy needs (others are left out of its candidates)."""
POLICY_PATH = "strategies.cxl.policy"
"""The option ``policies`` varies: the host memory policy over DRAM and CXL nodes."""
RATIO_STRATEGIES = ("dram", "cxl")
"""The strategies with a partial-offload ``ratio`` (the option ``ratios`` varies)."""
PARAM_DEVICES = ("none", "cpu", "nvme")
"""The values of the option ``offload_param``: no parameter offload, DeepSpeed's ``cpu``, ``nvme``."""
OPTION_COLUMNS = ("policy", "ratio", "offload_param")
"""The candidate options a row carries besides its strategy and sizing."""


CANDIDATE = Origin("plan", "a candidate's tier sizing")
"""Where the planner's tier sizings come from (an error names the field and this)."""
POLICIES = Origin("plan", "--policies")
"""Where the memory policies the planner tries come from."""
RATIOS = Origin("plan", "--ratios")
"""Where the partial-offload ratios the planner tries come from."""
OFFLOAD_PARAM = Origin("plan", "--offload-param")
"""Where the parameter offload devices the planner tries come from."""
PROBE = Origin("plan", "a model size tried")
"""Where the planner's model shapes come from."""


@dataclass(frozen=True)
class Scenario:
    """The scenario planned for (overrides applied) and whether the work limit is lifted."""

    document: ScenarioDocument
    force: bool = False
    """Lift the work limit on each candidate (``tiersim.config.worksize``)."""

    @property
    def data(self) -> dict[str, Any]:
        """The scenario mapping (read only)."""
        return self.document.data

    @property
    def source(self) -> str:
        """The scenario's file."""
        return self.document.source

    def configs(self, strategies: Sequence[str] = ()) -> list[RunConfig]:
        """Validate into run configs (of ``strategies``, default all)."""
        return self.document.configs(strategies, self.force)

    def strategies(self) -> list[str]:
        """Strategy names in scenario order."""
        return self.document.strategy_names()

    def with_values(self, values: dict[str, Any], origin: Origin) -> Scenario:
        """A variant with these canonical paths set (see ``ScenarioDocument.with_values``)."""
        return Scenario(self.document.with_values(values, origin), self.force)


def read_scenario(path: str | Path, overrides: Sequence[str] = (), force: bool = False,
                  model: str | None = None) -> Scenario:
    """Read a scenario YAML, put ``--model``'s model in and apply ``--set`` overrides (validated
    once here)."""
    document = with_named_model(load_document(path), model).with_overrides(overrides)
    document.configs((), force)
    return Scenario(document, force)


# --------------------------------------------------------------------------------------------
# costs


def hardware_cost(hw: Hardware) -> dict[str, float | None]:
    """Cost in USD of each part of the job's machines, ``hardware.nodes`` of them, and ``total``
    (None where a price is missing)."""
    parts: dict[str, float | None] = {}

    def priced(profile: Any, count: float) -> float | None:
        if profile is None or count == 0:
            return 0.0
        return None if profile.price_usd is None else float(profile.price_usd) * count * hw.nodes

    parts["gpu"] = priced(hw.gpu, hw.gpus)
    parts["cpu"] = priced(hw.cpu, hw.sockets)
    parts["dram"] = priced(hw.dram, hw.sockets * hw.dram_capacity_per_socket / hw.dram.capacity)
    parts["cxl"] = priced(hw.cxl, hw.cxl_count)
    parts["nvme"] = priced(hw.nvme, hw.nvme_count)
    values = list(parts.values())
    parts["total"] = None if any(v is None for v in values) else float(sum(v for v in values if v is not None))
    return parts


def unpriced(hw: Hardware) -> list[str]:
    """Names of the machine's priced device profiles that lack ``price_usd``."""
    devices = [(hw.gpu, hw.gpus), (hw.cpu, hw.sockets), (hw.dram, hw.sockets), (hw.cxl, hw.cxl_count),
               (hw.nvme, hw.nvme_count)]
    return [p.name for p, n in devices if p is not None and n and p.price_usd is None]


def cost_per_iteration(cost: float | None, iteration_time_s: float | None,
                       lifetime_years: float = DEFAULT_LIFETIME_YEARS) -> float | None:
    """Hardware cost amortised linearly over ``lifetime_years`` of use, times one iteration."""
    if cost is None or iteration_time_s is None:
        return None
    return cost / (lifetime_years * SECONDS_PER_YEAR) * iteration_time_s


# --------------------------------------------------------------------------------------------
# binding constraint

def binding_tier(result: Result) -> str | None:
    """The tier whose capacity a non-fitting result exceeds (None if it fits or lacks a device)."""
    return result.misfit.tier if isinstance(result.misfit, Misfit) else None


def binding_constraint(result: Result) -> str:
    """One phrase: the capacity that fails, or the busiest resource of the step and the main phase."""
    if not result.fits:
        misfit = result.misfit
        if isinstance(misfit, Misfit):
            return (f"capacity: {misfit.tier} (needs {misfit.need_bytes / 1e9:.1f} GB {misfit.scope}, "
                    f"has {misfit.have_bytes / 1e9:.1f} GB)")
        return f"missing: {misfit}"
    assert result.phases is not None and result.iteration_time_s
    phase = max(PHASES, key=lambda p: result.phases[p])  # type: ignore[index]
    share = result.phases[phase] / result.iteration_time_s
    busiest = result.bottleneck()
    if busiest is None:
        return f"{phase} {share:.0%} of iteration"
    row = result.utilisation[(result.utilisation["phase"] == "optimizer_step")
                             & (result.utilisation["resource"] == busiest)].iloc[0]
    kind = "bandwidth: link" if row["kind"] == "link" else "busy: stream"
    return f"{kind} {busiest} ({row['utilisation']:.0%} in step); {phase} {share:.0%} of iteration"


# --------------------------------------------------------------------------------------------
# candidates


@dataclass(frozen=True)
class Sizing:
    """Tier sizing of one candidate: DRAM per socket (bytes), CXL devices, NVMe drives."""

    dram_per_socket: int
    cxl_count: int
    nvme_count: int


def sized(scenario: Scenario, sizing: Sizing) -> Scenario:
    """The scenario with this tier sizing (count 0 removes the device)."""
    values: dict[str, Any] = {"hardware.dram_capacity": int(sizing.dram_per_socket)}
    for key, count in (("cxl", sizing.cxl_count), ("nvme", sizing.nvme_count)):
        if count == 0:
            values[f"hardware.{key}"] = None
        elif scenario.document.get(f"hardware.{key}.device") is None:
            raise ConfigError(CANDIDATE.source, f"hardware.{key}",
                              f"{key}_counts needs hardware.{key}.device in the scenario")
        else:
            values[f"hardware.{key}.count"] = int(count)
    return scenario.with_values(values, CANDIDATE)


def sizings(scenario: Scenario, strategy: str, dram_gib: Sequence[float], cxl_counts: Sequence[int],
            nvme_counts: Sequence[int]) -> list[Sizing]:
    """The tier sizings tried for ``strategy`` (devices it does not use are left out; parameter
    offload to ``nvme`` uses the drives)."""
    uses = _USES.get(strategy, ("cxl", "nvme"))
    if scenario.document.get(f"strategies.{strategy}.offload_param.device") == "nvme":
        uses = (*uses, "nvme")
    cxl = list(cxl_counts) if "cxl" in uses else [0]
    nvme = list(nvme_counts) if "nvme" in uses else [0]
    return [Sizing(int(round(g * GIB)), c, n) for g in dram_gib for c in cxl for n in nvme]


def _check_lists(dram_gib: Sequence[float], cxl_counts: Sequence[int], nvme_counts: Sequence[int]) -> None:
    if not dram_gib or any(not (g > 0) for g in dram_gib):
        raise ConfigError(API, "dram_gib", "expected positive sizes in GiB per socket")
    if not cxl_counts or any(c < 1 for c in cxl_counts):
        raise ConfigError(API, "cxl_counts", "expected counts >= 1 (CXL is left out where unused)")
    if not nvme_counts or any(n < 1 for n in nvme_counts):
        raise ConfigError(API, "nvme_counts", "expected counts >= 1 (NVMe is left out where unused)")


@dataclass(frozen=True)
class Options:
    """The strategy options the planner tries besides the scenario's (empty: the scenario's)."""

    policies: Sequence[str] = ()
    """Host memory policies of the ``cxl`` strategy (``strategies.cxl.policy``)."""
    ratios: Sequence[float] = ()
    """Partial-offload ratios of ``dram`` and ``cxl`` (``strategies.NAME.ratio``, 0 to 1)."""
    offload_param: Sequence[str] = ()
    """Parameter offload devices of every strategy (``PARAM_DEVICES``)."""

    def varied(self) -> list[str]:
        """The ``OPTION_COLUMNS`` these options vary."""
        given = {"policy": self.policies, "ratio": self.ratios, "offload_param": self.offload_param}
        return [column for column in OPTION_COLUMNS if given[column]]


def _check_options(scenario: Scenario, options: Options) -> None:
    for ratio in options.ratios:
        if not 0 <= ratio <= 1:
            raise ConfigError(API, "ratios", f"expected fractions from 0 to 1, got {ratio:g}")
    for device in options.offload_param:
        if device not in PARAM_DEVICES:
            raise ConfigError(API, "offload_param", f"expected {', '.join(PARAM_DEVICES)}, got {device!r}")
    if "nvme" in options.offload_param and scenario.document.get("hardware.nvme.device") is None:
        raise ConfigError(API, "offload_param", "nvme needs drives: hardware.nvme.device in the scenario")


def option_variants(scenario: Scenario, name: str, options: Options) -> list[Scenario]:
    """The variants of ``scenario`` strategy ``name`` is tried under: each combination of the
    ``options`` that apply to it, in order (a ratio below 1 with parameter offload is left out:
    not modelled)."""
    variants = [scenario]
    for axis in _axes(scenario, name, options):
        variants = [v.with_values({path: value}, origin) for v in variants for path, value, origin in axis]
    return [v for v in variants if not (v.document.get(f"strategies.{name}.offload_param")
                                        and v.document.get(f"strategies.{name}.ratio", 1) < 1)]


def _axes(scenario: Scenario, name: str, options: Options) -> list[list[tuple[str, Any, Origin]]]:
    """The (path, value, origin) of each option value tried for strategy ``name``, per option."""
    axes: list[list[tuple[str, Any, Origin]]] = []
    if options.policies and name == "cxl":
        axes.append([(POLICY_PATH, p, POLICIES) for p in options.policies])
    if options.ratios and name in RATIO_STRATEGIES:
        axes.append([(f"strategies.{name}.ratio", r, RATIOS) for r in options.ratios])
    if options.offload_param:
        axes.append([(f"strategies.{name}.offload_param", param_block(scenario, name, d), OFFLOAD_PARAM)
                     for d in options.offload_param])
    return axes


def param_block(scenario: Scenario, name: str, device: str) -> dict[str, Any] | None:
    """Strategy ``name``'s ``offload_param`` block on ``device`` (None for ``none``): the
    scenario's block with that device. On ``nvme``, a ``buffer_size`` (default 1e8 elements) not
    larger than the largest parameter partition (a large vocabulary's embedding) is raised to
    the smallest DeepSpeed's swapper takes (``smallest_buffer``), as a DeepSpeed user must write
    it; the row shows it (``param_buffer_size``)."""
    if device == "none":
        return None
    path = f"strategies.{name}.offload_param"
    block = {**(scenario.document.get(path) or {}), "device": device}
    if device == "nvme":
        (config,) = scenario.configs([name])
        needed = smallest_buffer(build_step(config.model, config.training))
        if build(ParamOffload, block, OFFLOAD_PARAM.source, path).buffer_size < needed:
            block["buffer_size"] = needed
    return block


def candidate_configs(scenario: Scenario, strategies: Sequence[str] = (),
                      dram_gib: Sequence[float] = DEFAULT_DRAM_GIB,
                      cxl_counts: Sequence[int] = DEFAULT_CXL_COUNTS,
                      nvme_counts: Sequence[int] = DEFAULT_NVME_COUNTS,
                      options: Options = Options()) -> list[tuple[Sizing, RunConfig]]:
    """Every (sizing, config) the ``fastest``/``cheapest`` objectives simulate, in a fixed order
    (each strategy under each combination of ``options`` that applies, or the scenario's)."""
    _check_lists(dram_gib, cxl_counts, nvme_counts)
    _check_options(scenario, options)
    names = list(strategies) or scenario.strategies()
    scenario.configs(strategies=names)  # unknown strategy -> ConfigError
    out = []
    for name in names:
        for variant in option_variants(scenario, name, options):
            for sizing in sizings(variant, name, dram_gib, cxl_counts, nvme_counts):
                (config,) = sized(variant, sizing).configs([name])
                out.append((sizing, config))
    return out


def result_row(result: Result, lifetime_years: float = DEFAULT_LIFETIME_YEARS) -> dict[str, Any]:
    """One candidate as a flat row: sizing, time, phases, cost and binding constraint."""
    hw = result.config.hardware
    cost = hardware_cost(hw)["total"]
    phases = result.phases or {}
    t = result.iteration_time_s
    return {
        "strategy": result.strategy,
        **option_values(result.config.options),
        "dram_gib_per_socket": hw.dram_capacity_per_socket / GIB,
        "cxl_devices": hw.cxl_count if hw.cxl is not None else 0,
        "nvme_drives": hw.nvme_count if hw.nvme is not None else 0,
        "fits": result.fits,
        "iteration_time_s": t,
        **{f"{p}_s": phases.get(p) for p in PHASES},
        "cost_usd": cost,
        "cost_per_iteration_usd": cost_per_iteration(cost, t, lifetime_years),
        "iterations_per_hour": 3600.0 / t if t else None,
        "binding": binding_constraint(result),
    }


def option_values(options: object) -> dict[str, Any]:
    """A candidate's ``OPTION_COLUMNS``: its memory policy and ratio (None where the strategy has
    none) and its parameter offload device (``none``: the parameters stay in HBM), and with
    ``nvme`` the swap buffers' ``param_buffer_size`` (elements; else None)."""
    offload = getattr(options, "offload_param", None)
    return {"policy": getattr(options, "policy", None), "ratio": getattr(options, "ratio", None),
            "offload_param": "none" if offload is None else offload.device,
            "param_buffer_size": offload.buffer_size if offload is not None and offload.device == "nvme" else None}


def _check_limits(budget: float | None, max_iteration_time: float | None, lifetime_years: float) -> None:
    if budget is not None and not budget > 0:
        raise ConfigError(API, "budget", f"expected a positive amount in USD, got {budget}")
    if max_iteration_time is not None and not max_iteration_time > 0:
        raise ConfigError(API, "max_iteration_time", f"expected positive seconds, got {max_iteration_time}")
    if not (lifetime_years > 0 and math.isfinite(lifetime_years)):
        raise ConfigError(API, "lifetime_years", f"expected a positive number of years, got {lifetime_years}")


def rank_rows(rows: list[dict[str, Any]], objective: str, budget: float | None = None,
              max_iteration_time: float | None = None) -> pd.DataFrame:
    """Mark which rows are eligible and rank them for ``objective`` ('fastest' or 'cheapest').

    Eligible: fits, cost within ``budget`` and time within ``max_iteration_time`` (when given).
    fastest: by (iteration time, cost); cheapest: by (cost, iteration time); ties keep the
    candidate order. Eligible rows come first with ``rank`` 1..n; the rest follow unranked
    (``rank`` None) with ``excluded`` saying why.
    """
    frame = pd.DataFrame(rows)
    frame["order"] = range(len(frame))
    why: list[str | None] = []
    for row in rows:
        reasons = []
        if not row["fits"]:
            reasons.append("does not fit")
        else:
            if max_iteration_time is not None and row["iteration_time_s"] > max_iteration_time:
                reasons.append(f"slower than {max_iteration_time:g} s")
            if budget is not None and (row["cost_usd"] is None or row["cost_usd"] > budget):
                reasons.append(f"over budget ${budget:,.0f}")
        why.append("; ".join(reasons) or None)
    frame["excluded"] = why
    eligible = frame[frame["excluded"].isna()].copy()
    rest = frame[frame["excluded"].notna()].copy()
    inf = float("inf")
    eligible["_cost"] = eligible["cost_usd"].map(lambda c: inf if c is None or pd.isna(c) else c)
    keys = ["iteration_time_s", "_cost", "order"] if objective == "fastest" else ["_cost", "iteration_time_s", "order"]
    eligible = eligible.sort_values(keys, kind="stable").drop(columns="_cost")
    eligible["rank"] = range(1, len(eligible) + 1)
    rest["rank"] = None
    out = pd.concat([eligible, rest], ignore_index=True) if len(rest) else eligible.reset_index(drop=True)
    columns = ["rank"] + [c for c in out.columns if c not in ("rank", "order")]
    return out[columns].astype({"rank": "object"})


def nearest_miss(frame: pd.DataFrame, budget: float | None = None, max_iteration_time: float | None = None) -> str:
    """The excluded candidate that came closest, and by how much it missed: among those that
    fit, the one least over the limits (iteration time and cost, relative to each limit)."""
    missed = [row for row in frame.to_dict(orient="records") if row["fits"] and row["rank"] is None]
    if not missed:
        return "no candidate fits at all (see the table's binding constraints)"

    def overshoot(row: dict[str, Any]) -> float:
        return max(_over(row, "iteration_time_s", max_iteration_time), _over(row, "cost_usd", budget))

    best = min(missed, key=overshoot)
    return f"nearest: {describe(best)}: {best['iteration_time_s']:.4g} s{_cost(best)} ({best['excluded']})"


def describe(row: dict[str, Any], varied: Sequence[str] = ()) -> str:
    """A candidate in words: its strategy, the ``varied`` options it has, and its sizing."""
    options = [f"{column} {row[column]:g}" if isinstance(row[column], float) else f"{column} {row[column]}"
               for column in varied if row.get(column) is not None and not pd.isna(row[column])]
    text = f"{row['strategy']} ({', '.join(options)})" if options else str(row["strategy"])
    text += f" with {row['dram_gib_per_socket']:g} GiB DRAM per socket"
    if row["cxl_devices"]:
        text += f", {row['cxl_devices']} CXL devices"
    if row["nvme_drives"]:
        text += f", {row['nvme_drives']} NVMe drive{'s' if row['nvme_drives'] != 1 else ''}"
    return text


def _cost(row: dict[str, Any]) -> str:
    """", $COST" of a row, or nothing where its cost is unknown."""
    return "" if row["cost_usd"] is None or pd.isna(row["cost_usd"]) else f", ${row['cost_usd']:,.0f}"


def chosen(frame: pd.DataFrame, objective: str, varied: Sequence[str] = ()) -> str | None:
    """Which candidate a ranked ``fastest``/``cheapest`` frame chose and why, in one line (None
    when none is eligible): it fits and is the fastest or cheapest of those eligible, and how
    many do not fit."""
    rows = frame.to_dict(orient="records")
    eligible = [row for row in rows if row["rank"] is not None and not pd.isna(row["rank"])]
    if not eligible:
        return None
    best = eligible[0]
    ranked_by = f"fastest ({best['iteration_time_s']:.4g} s{_cost(best)})" if objective == "fastest" else \
        f"cheapest ({_cost(best)[2:] or 'cost unknown'}, {best['iteration_time_s']:.4g} s)"
    misfits = sum(1 for row in rows if not row["fits"])
    others = sum(1 for row in rows if row["fits"]) - len(eligible)
    why = f"it fits and is the {ranked_by} of {len(eligible)} eligible"
    if misfits:
        why += f"; {misfits} of {len(rows)} do not fit"
    if others:
        why += f"; {others} that fit miss the limits"
    return f"chose {describe(best, varied)}: {why}"


def _over(row: dict[str, Any], column: str, limit: float | None) -> float:
    """How far ``row[column]`` is over ``limit``, as a fraction of it (0 when within or unset)."""
    value = row[column]
    if limit is None:
        return 0.0
    if value is None or pd.isna(value):
        return math.inf
    return max(0.0, value / limit - 1.0)


def plan_sizing(scenario: Scenario, objective: str, strategies: Sequence[str] = (),
                dram_gib: Sequence[float] = DEFAULT_DRAM_GIB, cxl_counts: Sequence[int] = DEFAULT_CXL_COUNTS,
                nvme_counts: Sequence[int] = DEFAULT_NVME_COUNTS, budget: float | None = None,
                max_iteration_time: float | None = None,
                lifetime_years: float = DEFAULT_LIFETIME_YEARS, policies: Sequence[str] = (),
                ratios: Sequence[float] = (), offload_param: Sequence[str] = ()) -> pd.DataFrame:
    """The ``fastest`` or ``cheapest`` answer: every candidate simulated, ranked (see module doc;
    ``policies``, ``ratios`` and ``offload_param`` are the ``Options`` tried)."""
    if objective not in ("fastest", "cheapest"):
        raise ConfigError(API, "objective", f"expected fastest or cheapest here, got {objective!r}")
    _check_limits(budget, max_iteration_time, lifetime_years)
    candidates = candidate_configs(scenario, strategies, dram_gib, cxl_counts, nvme_counts,
                                   Options(tuple(policies), tuple(ratios), tuple(offload_param)))
    if objective == "cheapest" or budget is not None:
        for _sizing, config in candidates:
            missing = unpriced(config.hardware)
            if missing:
                raise ConfigError(scenario.source, "hardware",
                                  f"profile {missing[0]!r} has no price_usd; add one (with sources.price_usd) "
                                  f"to rank by cost")
    rows = [result_row(simulate(config), lifetime_years) for _sizing, config in candidates]
    return rank_rows(rows, objective, budget, max_iteration_time)


def plan_fastest(scenario: Scenario, **kwargs: Any) -> pd.DataFrame:
    """Fastest strategy and tier sizing (see ``plan_sizing``)."""
    return plan_sizing(scenario, "fastest", **kwargs)


def plan_cheapest(scenario: Scenario, **kwargs: Any) -> pd.DataFrame:
    """Cheapest hardware meeting the iteration-time target and budget (see ``plan_sizing``)."""
    return plan_sizing(scenario, "cheapest", **kwargs)


# --------------------------------------------------------------------------------------------
# largest model


def with_model(scenario: Scenario, **fields: Any) -> Scenario:
    """The scenario with these ``model`` fields replaced."""
    return scenario.with_values({f"model.{key}": value for key, value in fields.items()}, PROBE)


def _simulate_model(scenario: Scenario, strategy: str, fields: dict[str, Any]) -> Result:
    (config,) = with_model(scenario, **fields).configs([strategy])
    return simulate(config)


def layer_unit(scenario: Scenario) -> int:
    """The layers a model of the scenario grows by: one, or with pipeline parallelism a layer
    for each stage and interleaved chunk (``pipeline_parallel x virtual_pipeline``, which must
    divide the layers: ``workload.check_stages``)."""
    document = scenario.document
    return int(document.get("training.pipeline_parallel", 1)) * int(document.get("training.virtual_pipeline", 1))


def largest_layers(scenario: Scenario, strategy: str,
                   max_layers: int = DEFAULT_MAX_LAYERS) -> tuple[int | None, Result | None, Result | None]:
    """The largest layer count (scenario width) that fits: (layers, its result, next result).

    Layer counts go in whole units of ``layer_unit``. ``layers`` is None when even one unit does not
    fit; ``next result`` (a unit more) is None when ``max_layers`` fits. Doubling from the
    scenario's depth, then binary search.
    """
    cache: dict[int, Result] = {}
    unit = layer_unit(scenario)

    def run(units: int) -> Result:
        if units not in cache:
            cache[units] = _simulate_model(scenario, strategy, {"layers": units * unit})
        return cache[units]

    most = max(max_layers // unit, 1)
    start = max(min(int(scenario.document.get("model.layers")), max_layers) // unit, 1)
    if run(start).fits:
        lo, hi = start, None
        while hi is None:
            probe = min(lo * 2, most)
            if probe == lo:
                return lo * unit, run(lo), None
            if run(probe).fits:
                lo = probe
            else:
                hi = probe
    else:
        if not run(1).fits:
            return None, None, run(1)
        lo, hi = 1, start
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if run(mid).fits:
            lo = mid
        else:
            hi = mid
    return lo * unit, run(lo), run(lo + 1)


def _model_row(strategy: str, model_name: str, result: Result | None, fields: dict[str, Any],
               nxt: Result | None, next_label: str | None, lifetime_years: float) -> dict[str, Any]:
    row: dict[str, Any] = {"strategy": strategy, "model": model_name, **fields}
    if result is not None:
        model = result.config.model
        row["params_b"] = parameter_count(model) / 1e9
        cost = hardware_cost(result.config.hardware)["total"]
        row.update({
            "fits": result.fits,
            "iteration_time_s": result.iteration_time_s,
            "cost_usd": cost,
            "cost_per_iteration_usd": cost_per_iteration(cost, result.iteration_time_s, lifetime_years),
            "binding": binding_constraint(result),
        })
    else:
        row.update({"params_b": None, "fits": False, "iteration_time_s": None, "cost_usd": None,
                    "cost_per_iteration_usd": None, "binding": None})
    row["next_step"] = next_label
    row["next_params_b"] = parameter_count(nxt.config.model) / 1e9 if nxt is not None else None
    row["next_binding"] = binding_constraint(nxt) if nxt is not None else None
    row["next_binding_tier"] = binding_tier(nxt) if nxt is not None else None
    return row


def check_search(scale: str, max_layers: int, lifetime_years: float) -> None:
    """The largest-model search's parameters, each a ConfigError naming it where it is wrong."""
    _check_limits(None, None, lifetime_years)
    if scale not in ("layers", "ladder"):
        raise ConfigError(API, "scale", f"expected layers or ladder, got {scale!r}")
    if max_layers < 1:
        raise ConfigError(API, "max_layers", f"expected a positive layer count, got {max_layers}")


def plan_largest_model(scenario: Scenario, strategies: Sequence[str] = (), scale: str = "layers",
                       max_layers: int = DEFAULT_MAX_LAYERS,
                       lifetime_years: float = DEFAULT_LIFETIME_YEARS) -> pd.DataFrame:
    """Per strategy, the largest model that fits this hardware, ranked by size (see module doc)."""
    check_search(scale, max_layers, lifetime_years)
    names = list(strategies) or scenario.strategies()
    scenario.configs(strategies=names)
    if scale == "layers":
        rows = [_largest_by_layers(scenario, name, max_layers, lifetime_years) for name in names]
    else:
        rows = [_largest_on_ladder(scenario, name, lifetime_years) for name in names]
    frame = pd.DataFrame(rows)
    frame["_size"] = frame["params_b"].map(lambda v: -1.0 if v is None or pd.isna(v) else v)
    frame = frame.sort_values("_size", ascending=False, kind="stable").drop(columns="_size").reset_index(drop=True)
    frame.insert(0, "rank", range(1, len(frame) + 1))
    return frame


def _largest_by_layers(scenario: Scenario, strategy: str, max_layers: int, lifetime_years: float) -> dict[str, Any]:
    """The row of ``strategy``'s deepest model of the scenario's width that fits."""
    base = scenario.document.get("model")
    layers, result, nxt = largest_layers(scenario, strategy, max_layers)
    deeper = nxt.config.model.layers if nxt is not None else None
    label = None if deeper is None else f"{deeper} layer{'s' if deeper > 1 else ''}"
    return _model_row(strategy, str(base.get("name", "custom")), result,
                      {"layers": layers, "hidden": base["hidden"]}, nxt, label, lifetime_years)


def _largest_on_ladder(scenario: Scenario, strategy: str, lifetime_years: float) -> dict[str, Any]:
    """The row of ``strategy``'s largest rung of ``LADDER`` that fits."""
    results = [_simulate_model(scenario, strategy, _ladder_fields(rung)) for rung in LADDER]
    fitting = [i for i, r in enumerate(results) if r.fits]
    if not fitting:
        return _model_row(strategy, "-", None, {"layers": None, "hidden": None}, results[0], LADDER[0]["name"],
                          lifetime_years)
    best = fitting[-1]
    rung = LADDER[best]
    nxt = results[best + 1] if best + 1 < len(results) else None
    return _model_row(strategy, rung["name"], results[best], {"layers": rung["layers"], "hidden": rung["hidden"]},
                      nxt, LADDER[best + 1]["name"] if nxt is not None else None, lifetime_years)


def _ladder_fields(rung: dict[str, Any]) -> dict[str, Any]:
    """The model fields of a rung of ``LADDER``, named ``ladder-NAME``."""
    return {k: v for k, v in rung.items() if k != "name"} | {"name": f"ladder-{rung['name']}"}


def memory_by_model_size(scenario: Scenario, frame: pd.DataFrame, scale: str = "layers",
                         points: int = 10) -> pd.DataFrame:
    """Bytes each tier holds against model size, per strategy of a ``plan_largest_model`` frame.

    ``scale="layers"``: ``points`` depths from 1 to 1.25 x the deepest "next step" of any
    strategy (the scenario's width), plus each strategy's largest and next depth; ``ladder``:
    every rung of ``LADDER``. One row per strategy, size and tier the strategy uses (HBM per
    GPU, host tiers per node): strategy, layers, params_b, fits, tier, need_bytes, capacity_bytes.
    """
    if scale == "ladder":
        shapes = [_ladder_fields(rung) for rung in LADDER]
    else:
        shapes = [{"layers": d} for d in _depths(scenario, frame, points)]
    rows = []
    for strategy in frame["strategy"]:
        for fields in shapes:
            rows += _tier_rows(strategy, _simulate_model(scenario, str(strategy), fields))
    return pd.DataFrame(rows, columns=["strategy", "layers", "params_b", "fits", "tier", "need_bytes",
                                       "capacity_bytes"])


def _depths(scenario: Scenario, frame: pd.DataFrame, points: int) -> list[int]:
    """``points`` layer counts from one ``layer_unit`` to 1.25 x the deepest next step (or the
    scenario's depth), with each strategy's largest and next depth, in order, each a whole
    number of units."""
    unit = layer_unit(scenario)
    depths = [int(v) // unit for v in frame["layers"] if not pd.isna(v)]
    top = max([d + 1 for d in depths] + [int(scenario.document.get("model.layers")) // unit])
    grid = {max(1, round(1 + i * (1.25 * top - 1) / (points - 1))) for i in range(points)}
    grid |= {d for d in depths} | {d + 1 for d in depths}
    return [units * unit for units in sorted(grid)]


def _tier_rows(strategy: Any, result: Result) -> list[dict[str, Any]]:
    """One ``memory_by_model_size`` row per tier the run holds bytes on (and that has some)."""
    rows = []
    for tier in TIERS:
        need, capacity = result.reserved_bytes.get(tier, 0), result.capacity_bytes.get(tier, 0)
        if need > 0 and capacity > 0:
            rows.append({"strategy": strategy, "layers": result.config.model.layers,
                         "params_b": parameter_count(result.config.model) / 1e9, "fits": result.fits,
                         "tier": tier, "need_bytes": need, "capacity_bytes": capacity})
    return rows


def parse_list(text: str, option: str, kind: type = float) -> list[Any]:
    """'1,2,4' -> [1, 2, 4]; a bad item is a ConfigError naming ``option``."""
    try:
        values = [kind(item) for item in str(text).split(",") if item.strip()]
    except ValueError:
        raise ConfigError("plan", option, f"expected a comma-separated list of numbers, got {text!r}") from None
    if not values:
        raise ConfigError("plan", option, "expected at least one value")
    return values
