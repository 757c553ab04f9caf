"""The response serializers build their fields once per class: each instance still gets field objects
of its own, and the answers are the ones DRF's per-instance build gives."""

from __future__ import annotations

import pytest
from rest_framework import serializers as drf

from portal.api.serializers import AttemptSerializer, JobEventSerializer, JobSerializer
from tests.support.live_helpers import make_user, sent, submit  # noqa: F401 - sent: a fixture

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("cls", [JobSerializer, AttemptSerializer, JobEventSerializer])
def test_instances_never_share_a_field_object(cls: type) -> None:
    first, second = cls(), cls()
    assert list(first.fields) == list(second.fields) and first.fields
    for name in first.fields:
        assert first.fields[name] is not second.fields[name]
        assert first.fields[name].parent is first and second.fields[name].parent is second


def test_the_answer_is_the_one_drfs_own_build_gives(sent) -> None:  # noqa: ANN001
    job = submit(make_user("alice"), "j1")

    class RebuiltEveryTime(drf.ModelSerializer):  # JobSerializer's fields, built by DRF for each instance
        get_priority_factors = JobSerializer.get_priority_factors
        get_forecast = JobSerializer.get_forecast

        class Meta(JobSerializer.Meta):
            pass

    RebuiltEveryTime._declared_fields = dict(JobSerializer._declared_fields)
    for _ in range(2):  # the second answer comes from the fields kept on the class
        assert JobSerializer(job).data == RebuiltEveryTime(job).data
