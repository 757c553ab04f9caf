"""Readers for the Rubick (Morphling) profiling and placement data.

Formats: ``../shared/traces/README.md`` section 3. Every parser takes the
file's text and a source name and returns plain records; the ``load_*``
wrappers only read the file the caller names (no global state, no default
paths). A malformed row raises ``DataError`` naming ``file:line`` and the
field; nothing is skipped silently.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path

from scheduler.core.perf.plans import Plan, PlanError, parse_placement, parse_plan

PROFILE_CONFIG_COLUMNS = (
    "nodes", "gpus", "parameter_size", "batch_size", "seq_hid",
    "num_cpu_threads", "zero_type", "is_tp", "is_pp",
)
PROFILE_DATA_COLUMNS = ("forward_time", "Tcc", "Topt", "iter_time", "strategy")
PLACEMENT_COLUMNS = ("exec_plan", "placement", "iter_time")
AUTHORS_COEFFS = ("k_bwd", "k_sync", "k_opt", "k_os_offload", "k_const", "k_off", "k_swap")
ZERO_TYPES = {0: "none", 1: "zero-offload", 2: "zero-dp"}


class DataError(ValueError):
    """A malformed input file; the message starts with ``file:line``."""


@dataclass(frozen=True, slots=True)
class ProfileRun:
    """One profiling run: its configuration and measured times (ms)."""

    nodes: int
    gpus: int
    params_mi: float
    threads: int
    zero_type: int
    is_tp: int
    is_pp: int
    forward_ms: float
    sync_ms: float
    opt_ms: float
    iter_ms: float
    strategy: str
    source: str

    @property
    def plan(self) -> Plan:
        """The data-parallel-family plan this run used."""
        return Plan(memory=ZERO_TYPES[self.zero_type])


@dataclass(frozen=True, slots=True)
class PlacementRow:
    """One measured iteration time (seconds) of a plan on a placement."""

    plan: Plan
    placement: tuple[int, ...]
    iter_s: float
    source: str


def _rows(text: str, name: str, required: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    """CSV rows with their 1-based line numbers; checks the header."""
    reader = csv.DictReader(io.StringIO(text.lstrip("\ufeff")))
    header = [h.strip() for h in (reader.fieldnames or [])]
    if not header:
        raise DataError(f"{name}:1: empty file, expected a header with {', '.join(required)}")
    reader.fieldnames = header
    missing = [c for c in required if c not in header]
    if missing:
        raise DataError(f"{name}:1: missing column(s) {', '.join(missing)}")
    out = []
    for row in reader:
        line = reader.line_num
        if all((v or "").strip() == "" for k, v in row.items() if k is not None):
            continue
        if None in row or any(row.get(c) is None for c in required):
            raise DataError(f"{name}:{line}: expected {len(header)} fields")
        out.append((line, {k: (v or "").strip() for k, v in row.items()}))
    return out


def _number(row: dict[str, str], col: str, where: str, *, integer: bool = False,
            positive: bool = False, minimum: float | None = None) -> float:
    raw = row[col]
    try:
        value = float(raw)
    except ValueError:
        raise DataError(f"{where}: {col}={raw!r} is not a number") from None
    if not math.isfinite(value):
        raise DataError(f"{where}: {col}={raw!r} is not finite")
    if integer and value != int(value):
        raise DataError(f"{where}: {col}={raw!r} must be an integer")
    if positive and value <= 0:
        raise DataError(f"{where}: {col}={raw!r} must be > 0")
    if minimum is not None and value < minimum:
        raise DataError(f"{where}: {col}={raw!r} must be >= {minimum:g}")
    return int(value) if integer else value


def parse_profile(config_text: str, data_text: str, config_name: str, data_name: str) -> list[ProfileRun]:
    """Join ``config.csv`` and ``data.csv`` row by row into profiling runs."""
    configs = _rows(config_text, config_name, PROFILE_CONFIG_COLUMNS)
    datas = _rows(data_text, data_name, PROFILE_DATA_COLUMNS)
    if len(configs) != len(datas):
        raise DataError(
            f"{data_name}:{datas[-1][0] if datas else 1}: {len(datas)} data rows but "
            f"{len(configs)} config rows in {config_name}"
        )
    if not configs:
        raise DataError(f"{config_name}:2: no profiling runs")
    return [_profile_run(c, d, config_name, data_name) for c, d in zip(configs, datas)]


def _profile_run(config, data, config_name: str, data_name: str) -> ProfileRun:
    (cline, c), (dline, d) = config, data
    cw, dw = f"{config_name}:{cline}", f"{data_name}:{dline}"
    zero_type = _number(c, "zero_type", cw, integer=True, minimum=0)
    if zero_type not in ZERO_TYPES:
        raise DataError(f"{cw}: zero_type={c['zero_type']!r} must be 0, 1 or 2")
    flags = {}
    for col in ("is_tp", "is_pp"):
        flags[col] = _number(c, col, cw, integer=True, minimum=0)
        if flags[col] > 1:
            raise DataError(f"{cw}: {col}={c[col]!r} must be 0 or 1")
    strategy = d["strategy"]
    if not (len(strategy) == 4 and strategy.isascii() and strategy.isdigit()):
        raise DataError(f"{dw}: strategy={strategy!r} must be four digits")
    if int(strategy[3]) != zero_type:
        raise DataError(f"{dw}: strategy={strategy!r} says zero type {strategy[3]}, {cw} says {zero_type}")
    return ProfileRun(
        nodes=_number(c, "nodes", cw, integer=True, positive=True),
        gpus=_number(c, "gpus", cw, integer=True, positive=True),
        params_mi=_number(c, "parameter_size", cw, positive=True),
        threads=_number(c, "num_cpu_threads", cw, integer=True, positive=True),
        zero_type=zero_type,
        is_tp=flags["is_tp"],
        is_pp=flags["is_pp"],
        forward_ms=_number(d, "forward_time", dw, positive=True),
        sync_ms=_number(d, "Tcc", dw, positive=True),
        opt_ms=_number(d, "Topt", dw, positive=True),
        iter_ms=_number(d, "iter_time", dw, positive=True),
        strategy=strategy,
        source=dw,
    )


def load_profile(folder: str | Path) -> list[ProfileRun]:
    """Read ``<folder>/config.csv`` and ``<folder>/data.csv``."""
    folder = Path(folder)
    config, data = folder / "config.csv", folder / "data.csv"
    for f in (config, data):
        if not f.is_file():
            raise DataError(f"{f}:0: file not found")
    return parse_profile(config.read_text(encoding="utf-8"), data.read_text(encoding="utf-8"),
                         str(config), str(data))


def parse_placements(text: str, name: str) -> list[PlacementRow]:
    """Parse a ``placements/<model>.csv`` file; extra columns are ignored."""
    out = []
    for line, row in _rows(text, name, PLACEMENT_COLUMNS):
        where = f"{name}:{line}"
        try:
            plan = parse_plan(row["exec_plan"])
            placement = parse_placement(row["placement"])
        except PlanError as exc:
            raise DataError(f"{where}: {exc}") from None
        iter_s = _number(row, "iter_time", where, positive=True)
        out.append(PlacementRow(plan, placement, iter_s, where))
    if not out:
        raise DataError(f"{name}:2: no measurements")
    return out


def load_placements(path: str | Path) -> list[PlacementRow]:
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}:0: file not found")
    return parse_placements(path.read_text(encoding="utf-8"), str(path))


def parse_authors_params(text: str, name: str) -> dict[str, dict[str, float]]:
    """``fitted_params.csv``: model name (as written) -> coefficient -> value."""
    out: dict[str, dict[str, float]] = {}
    for line, row in _rows(text, name, ("model",) + AUTHORS_COEFFS):
        where = f"{name}:{line}"
        model = row["model"]
        if not model:
            raise DataError(f"{where}: model is empty")
        if model in out:
            raise DataError(f"{where}: model {model!r} listed twice")
        out[model] = {k: _number(row, k, where) for k in AUTHORS_COEFFS}
    return out


def load_authors_params(path: str | Path) -> dict[str, dict[str, float]]:
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}:0: file not found")
    return parse_authors_params(path.read_text(encoding="utf-8"), str(path))


def parse_env_bandwidth(text: str, name: str) -> float:
    """``env_params.json``: the measured inter-node bandwidth, GB/s."""
    try:
        value = json.loads(text)["env_params"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise DataError(f"{name}:1: expected {{\"env_params\": <number>}} ({exc})") from None
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise DataError(f"{name}:1: env_params={value!r} must be a positive number")
    return float(value)


def load_env_bandwidth(path: str | Path) -> float:
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}:0: file not found")
    return parse_env_bandwidth(path.read_text(encoding="utf-8"), str(path))
