"""A live page whose state is longer than one WebSocket message may be (daphne sends at most 1 MiB; a
1,000-node cluster's state is 1.7 MB) gets it in parts and shows it whole, in a real browser: here a
portal whose limit is 400 characters, so that every cluster push is split."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.browser.conftest import UI_WAIT_MS, WebServer, assert_not_reloaded, no_reload_marker, running_web

pytestmark = [pytest.mark.browser, pytest.mark.postgres, pytest.mark.redis]


@pytest.fixture(scope="module")
def web(django_db_setup, e2e_redis_url, tmp_path_factory) -> Iterator[WebServer]:  # noqa: ANN001
    with running_web(e2e_redis_url, tmp_path_factory, LIVE_MESSAGE_MAX_CHARS="400") as server:
        yield server


def test_the_cluster_page_joins_a_state_sent_in_parts_and_shows_each_change(browser_page, user_factory,
                                                                              screens) -> None:
    from django.db import transaction

    from cluster.models import Gpu, Node

    page = browser_page(user_factory("parts"))
    parts: list[str] = []
    page.on("websocket", lambda ws: ws.on("framereceived", lambda frame: parts.append(str(frame)[:40])))
    page.goto("/cluster/")
    no_reload_marker(page)
    page.wait_for_selector("#live-status[data-state=live]")
    with transaction.atomic():  # the node's hint goes out on commit, with its GPUs stored
        node = Node.objects.create(name="sent-in-parts", gpus=3)
        Gpu.objects.bulk_create(Gpu(node=node, index=i, model_name="Virtual GPU") for i in range(3))
    page.wait_for_selector('#grid .node[data-node="sent-in-parts"]', timeout=UI_WAIT_MS)
    assert page.locator('#grid .node[data-node="sent-in-parts"] .gpu').count() == 3
    assert any('"type": "part"' in frame for frame in parts)  # it came in parts
    Node.objects.filter(name="sent-in-parts").delete()
    page.wait_for_selector('#grid .node[data-node="sent-in-parts"]', state="detached", timeout=UI_WAIT_MS)
    screens.shot(page, "after-parts")
    assert page.text_content("#live-status") == "live"
    assert_not_reloaded(page)
