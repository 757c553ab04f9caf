"""/metrics's GPU part: DCGM exporter's names and labels, health for every GPU, valid exposition text."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cluster.models import Gpu
from cluster.telemetry_schema import check_report
from gputelemetry import exporter, services

pytestmark = [pytest.mark.django_db, pytest.mark.redis]


def test_readings_are_exported_under_dcgm_names_with_its_labels(make_node) -> None:  # noqa: ANN001
    make_node("n1", 2)
    Gpu.objects.filter(node__name="n1", index=1).update(healthy=False, unhealthy_reason="Xid 79")
    services.ingest("n1", check_report(1.7e9, [
        {"i": 0, "uuid": 'GPU-"q"', "util": 87.5, "fb_used": 100, "fb_total": 1000, "temp": 55, "power": 250.5,
         "ecc_sbe": 2, "ecc_dbe": 1, "xid": [43]}], []))
    # Keyed by family: the parser renames a counter's samples (..._TOTAL_total), Prometheus does not.
    samples = {(f.name, s.labels.get("gpu")): s for f in text_string_to_metric_families(exporter.dcgm_text())
               for s in f.samples}
    util = samples[("DCGM_FI_DEV_GPU_UTIL", "0")]
    assert util.value == 87.5
    assert util.labels == {"gpu": "0", "UUID": 'GPU-"q"', "device": "nvidia0", "modelName": "Virtual GPU",
                           "Hostname": "n1"}
    assert samples[("DCGM_FI_DEV_FB_USED", "0")].value == 100 and samples[("DCGM_FI_DEV_FB_FREE", "0")].value == 900
    assert samples[("DCGM_FI_DEV_GPU_TEMP", "0")].value == 55
    assert samples[("DCGM_FI_DEV_POWER_USAGE", "0")].value == 250.5
    assert samples[("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "0")].value == 1
    assert samples[("DCGM_FI_DEV_XID_ERRORS", "0")].value == 43
    assert ("DCGM_FI_DEV_GPU_UTIL", "1") not in samples  # no reading yet
    assert samples[("gpusched_gpu_healthy", "0")].value == 1 and samples[("gpusched_gpu_healthy", "1")].value == 0
