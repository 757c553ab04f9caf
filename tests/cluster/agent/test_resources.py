"""What a node offers: virtual or NVML GPUs, memory from meminfo, declared CPUs and memory."""

from __future__ import annotations

import sys
import types

import pytest

from cluster.agent import resources


def test_virtual_gpus_from_a_count():
    assert resources.discover_gpus("3") == (("virtual",) * 3, "virtual")
    assert resources.discover_gpus("0") == ((), "virtual")


@pytest.mark.parametrize(("spec", "message"), [("-1", "must not be negative"), ("two", "'auto' or a whole number")])
def test_bad_gpu_spec_is_a_clear_error(spec, message):
    with pytest.raises(ValueError, match=message):
        resources.discover_gpus(spec)


def _fake_pynvml(names: list[str] | None):
    class NVMLError(Exception):
        pass

    mod = types.ModuleType("pynvml")
    mod.NVMLError = NVMLError
    calls = []

    def init():
        if names is None:
            raise NVMLError("Driver Not Loaded")
        calls.append("init")

    mod.nvmlInit = init
    mod.nvmlShutdown = lambda: calls.append("shutdown")
    mod.nvmlDeviceGetCount = lambda: len(names)
    mod.nvmlDeviceGetHandleByIndex = lambda i: i
    mod.nvmlDeviceGetName = lambda h: names[h].encode() if h % 2 else names[h]
    return mod, calls


def test_auto_uses_nvml_models_in_index_order(monkeypatch):
    fake, calls = _fake_pynvml(["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert resources.discover_gpus("auto") == (("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"), "nvml")
    assert calls == ["init", "shutdown"]


@pytest.mark.parametrize("names", [None, []])
def test_auto_without_gpus_says_how_to_declare_virtual_ones(monkeypatch, names):
    fake, _ = _fake_pynvml(names)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    with pytest.raises(ValueError, match="--gpus N"):
        resources.discover_gpus("auto")


def test_memory_is_read_from_meminfo(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16384000 kB\nMemFree: 1 kB\n")
    assert resources.detect_mem_gb(meminfo) == 16.8
    assert resources.detect_mem_gb(tmp_path / "missing") == 0.0


def test_declared_cpus_and_memory_override_detection():
    r = resources.discover("2", cpus=8.0, mem_gb=64.0)
    assert (r.gpus, r.cpus, r.mem_gb, r.gpu_source) == (2, 8.0, 64.0, "virtual")
