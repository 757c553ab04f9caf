"""The latest GPU readings on ``/metrics`` under DCGM exporter's metric names and labels.

So that dashboards built for NVIDIA's dcgm-exporter work unchanged, every GPU
with a reading gets, labelled ``gpu`` (index), ``UUID``, ``device``
(``nvidia<index>``), ``modelName`` and ``Hostname`` (the node's name):

* ``DCGM_FI_DEV_GPU_UTIL`` (%), ``DCGM_FI_DEV_FB_USED`` / ``DCGM_FI_DEV_FB_FREE`` (MiB),
  ``DCGM_FI_DEV_GPU_TEMP`` (C), ``DCGM_FI_DEV_POWER_USAGE`` (W);
* ``DCGM_FI_DEV_ECC_SBE_VOL_TOTAL`` / ``DCGM_FI_DEV_ECC_DBE_VOL_TOTAL``: volatile ECC error totals;
* ``DCGM_FI_DEV_XID_ERRORS``: the last Xid seen (0: none), as dcgm-exporter reports it;
* ``gpusched_gpu_healthy``: 1, or 0 for a GPU taken out of service (``cluster/gpu_health.py``),
  for every GPU of the database, with or without a reading.

The text is written directly (not through prometheus_client's objects): at
8,000 GPUs that is several times faster, and ``/metrics`` must answer in
well under a second.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict

import redis

from cluster.models import Gpu
from gputelemetry import store
from gputelemetry.services import client

log = logging.getLogger(__name__)

#: (metric name, help, position in the latest reading (store.LATEST_FIELDS) or a derived value's name).
GAUGES = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "util"),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "fb_used"),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", "fb_free"),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "temp"),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", "power"),
)
COUNTERS = (
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "Total number of single-bit volatile ECC errors.", "ecc_sbe"),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors.", "ecc_dbe"),
)
_POS = {name: k for k, name in enumerate(store.LATEST_FIELDS)}


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return repr(float(value)) if isinstance(value, float) else str(value)


def dcgm_text() -> str:
    """The exposition text of every GPU's latest reading and health (module docstring)."""
    gpus: dict[str, list[tuple[int, str, bool]]] = defaultdict(list)
    for node, index, model, healthy in Gpu.objects.order_by("node__name", "index").values_list(
            "node__name", "index", "model_name", "healthy"):
        gpus[node].append((index, model, healthy))
    try:
        found = store.read_latest(client(), sorted(gpus))
    except redis.RedisError as exc:  # the scrape still carries the scheduler's metrics and GPU health
        log.warning("GPU readings left out of /metrics: %s", exc)
        found = {}
    families = {name: [] for name, _, _ in (*GAUGES, *COUNTERS)}
    families["DCGM_FI_DEV_XID_ERRORS"] = []
    health = []
    for node, rows in gpus.items():
        latest, xids = found.get(node, ({}, {}))
        for index, model, healthy in rows:
            key = str(index).encode()
            raw = latest.get(key)
            reading = json.loads(raw) if raw else None
            uuid = reading[0] if reading else ""
            labels = (f'gpu="{index}",UUID="{_label(uuid)}",device="nvidia{index}",modelName="{_label(model)}",'
                      f'Hostname="{_label(node)}"')
            health.append(f"gpusched_gpu_healthy{{{labels}}} {1 if healthy else 0}")
            if reading is None:
                continue
            values = {name: reading[pos] for name, pos in _POS.items()}
            values["fb_free"] = max(0, values["fb_total"] - values["fb_used"])
            for name, _, field in (*GAUGES, *COUNTERS):
                families[name].append(f"{name}{{{labels}}} {_number(values[field])}")
            families["DCGM_FI_DEV_XID_ERRORS"].append(f"DCGM_FI_DEV_XID_ERRORS{{{labels}}} {int(xids.get(key, 0))}")
    out = []
    helps = {name: (text, "gauge") for name, text, _ in GAUGES}
    helps.update({name: (text, "counter") for name, text, _ in COUNTERS})
    helps["DCGM_FI_DEV_XID_ERRORS"] = ("Value of the last XID error encountered.", "gauge")
    for name, lines in families.items():
        text, kind = helps[name]
        out += [f"# HELP {name} {text}", f"# TYPE {name} {kind}", *lines]
    out += ["# HELP gpusched_gpu_healthy 1 if the GPU is in service, 0 if taken out as unhealthy.",
            "# TYPE gpusched_gpu_healthy gauge", *health]
    return "\n".join(out) + "\n"
