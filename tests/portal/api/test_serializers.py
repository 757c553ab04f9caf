"""The answers of the job serializer, built from fields kept on the class, are the ones DRF's
per-instance build gives."""

from __future__ import annotations

import pytest
from rest_framework import serializers as drf

from portal.api.serializers import JobSerializer
from tests.support.live_helpers import make_user, sent, submit  # noqa: F401 - sent: a fixture

pytestmark = pytest.mark.django_db


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
