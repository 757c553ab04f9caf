"""manage.py gpu_health: list, mark and return GPUs; bad input names the problem and changes nothing."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from audit.models import Action, AuditEntry
from cluster.models import Gpu
from tests.support.live_helpers import make_node

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = StringIO()
    call_command("gpu_health", *args, stdout=out)
    return out.getvalue()


def test_mark_list_and_return(no_triggers) -> None:  # noqa: ANN001
    make_node("n1", 2)
    assert run("list") == "every GPU is healthy\n"
    assert "out of service: bad fan" in run("mark", "n1:1", "--reason", "bad fan")
    assert "n1:1" in run("list") and "bad fan" in run("list")
    assert "back in service" in run("return", "n1:1")
    assert Gpu.objects.get(node__name="n1", index=1).healthy is True
    assert AuditEntry.objects.filter(action=Action.GPU_RETURNED, target="GPU n1:1").exists()


@pytest.mark.parametrize("args, problem", [
    (("return",), "needs a GPU"), (("return", "n1"), "NODE:INDEX"), (("return", "n1:x"), "NODE:INDEX"),
    (("return", "n9:0"), "no GPU n9:0"), (("return", "n1:0"), "not unhealthy"),
])
def test_bad_input_is_refused_by_name(args, problem, no_triggers) -> None:  # noqa: ANN001
    make_node("n1", 1)
    with pytest.raises(CommandError, match=problem):
        run(*args)
    assert Gpu.objects.get(node__name="n1", index=0).healthy is True
