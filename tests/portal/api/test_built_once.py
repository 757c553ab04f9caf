"""Serializers build their fields once per class: each instance still gets field objects of its own,
bound to it alone, and validates and renders as if DRF had built them for it."""

from __future__ import annotations

import pytest

from portal.api.serializers import AttemptSerializer, JobEventSerializer, JobSerializer, JobSubmitSerializer


@pytest.mark.parametrize("cls", [JobSerializer, AttemptSerializer, JobEventSerializer, JobSubmitSerializer])
def test_instances_never_share_a_field_object(cls: type) -> None:
    first, second = cls(), cls()
    assert list(first.fields) == list(second.fields) and first.fields
    for name in first.fields:
        assert first.fields[name] is not second.fields[name]
        assert first.fields[name].parent is first and second.fields[name].parent is second


def test_nested_fields_are_bound_per_instance_and_the_kept_ones_never() -> None:
    first, second = JobSerializer(), JobSerializer()
    for name in ("attempts", "events"):
        a, b = first.fields[name], second.fields[name]
        assert a.child is not b.child and a.child.parent is a and b.child.parent is b
        assert all(a.child.fields[f] is not b.child.fields[f] for f in a.child.fields) and a.child.fields
    node_names = first.fields["attempts"].child.fields["node_names"]
    assert node_names.child.parent is node_names  # a list field's child is its own
    kept = JobSerializer._fields_built_once
    assert all(field.field_name is None and field.parent is None for field in kept.values())


def test_submissions_validated_one_after_another_keep_their_own_errors_and_defaults() -> None:
    bad = JobSubmitSerializer(data={"name": "a", "command": "x", "num_gpus": 0, "allowed_plans": ["ga"]})
    good = JobSubmitSerializer(data={"name": "b", "command": "y"})
    assert not bad.is_valid() and set(bad.errors) == {"num_gpus"}
    assert good.is_valid(), good.errors
    assert good.validated_data["num_gpus"] == 1 and good.validated_data["allowed_plans"] == []
    good.validated_data["allowed_plans"].append("zero-dp")  # a default list is the instance's own
    again = JobSubmitSerializer(data={"name": "c", "command": "z"})
    assert again.is_valid() and again.validated_data["allowed_plans"] == []


def test_fields_holding_others_are_copied_deep_and_leaf_fields_shallow() -> None:
    from rest_framework import serializers as drf

    from portal.api.built_once import _own_copy

    leaf = drf.IntegerField(min_value=1)
    listed = drf.ListField(child=drf.CharField())
    many = drf.ManyRelatedField(child_relation=drf.StringRelatedField())
    assert _own_copy(leaf) is not leaf and _own_copy(leaf).validators is leaf.validators  # only read
    copied = _own_copy(listed)
    assert copied.child is not listed.child and copied.child.parent is copied
    assert _own_copy(many).child_relation is not many.child_relation
