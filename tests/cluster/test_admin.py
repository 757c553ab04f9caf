"""The GPU admin pages: who may see them, the return-to-service action (audited), the policy's bad input."""

from __future__ import annotations

import pytest

from audit.models import AuditEntry
from cluster import gpu_health
from cluster.models import Gpu, GpuPolicy

pytestmark = pytest.mark.django_db


@pytest.fixture
def sick(roles, make_node, no_triggers):  # noqa: ANN001, ANN201
    from django.utils import timezone

    make_node("n1", 2)
    gpu_health.mark_unhealthy("n1", 1, "Xid 79", timezone.now())
    return roles


@pytest.mark.parametrize("role, expected", [("anonymous", 302), ("owner", 302), ("other", 302), ("staff", 200)])
@pytest.mark.parametrize("path", ["/admin/cluster/gpu/", "/admin/cluster/gpupolicy/", "/admin/cluster/gpupolicy/add/"])
def test_only_staff_see_the_gpu_pages(sick, browser_as, role, expected, path) -> None:  # noqa: ANN001
    client = browser_as(None if role == "anonymous" else getattr(sick, role))
    assert client.get(path).status_code == expected


@pytest.mark.parametrize("role, returned", [("owner", False), ("staff", True)])
def test_staff_return_a_gpu_to_service_and_it_is_audited(sick, browser_as, role, returned) -> None:  # noqa: ANN001
    pk = Gpu.objects.get(node__name="n1", index=1).pk
    browser_as(getattr(sick, role)).post("/admin/cluster/gpu/", {"action": "return_to_service",
                                                                 "_selected_action": [pk]})
    assert Gpu.objects.get(pk=pk).healthy is returned
    assert AuditEntry.objects.filter(target="GPU n1:1").exists() is returned


@pytest.mark.parametrize("field, value", [("unhealthy_xids", "79; rm -rf /"), ("idle_util_threshold", "150")])
def test_a_bad_policy_is_refused_naming_the_field(sick, browser_as, field, value) -> None:  # noqa: ANN001
    form = {"unhealthy_xids": "79", "launch_failure_limit": "3", "idle_util_threshold": "5", "idle_after_s": "0",
            "idle_grace_s": "600", field: value}
    answer = browser_as(sick.staff).post("/admin/cluster/gpupolicy/add/", form)
    assert answer.status_code == 200 and field in answer.content.decode()
    assert not GpuPolicy.objects.exists()
    form[field] = "79, 48" if field == "unhealthy_xids" else "10"
    assert browser_as(sick.staff).post("/admin/cluster/gpupolicy/add/", form).status_code == 302
    assert GpuPolicy.objects.get().xids() == ({79, 48} if field == "unhealthy_xids" else {79})
