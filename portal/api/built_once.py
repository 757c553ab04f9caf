"""Serializers whose fields are built once per class: the REST API renders and parses jobs
without rebuilding the same field objects on every request."""

from __future__ import annotations

import copy

from rest_framework import serializers


class FieldsBuiltOnce:
    """A serializer whose fields are built once per class, not per instance.

    DRF rebuilds a ModelSerializer's fields from the model's meta data for every instance, which was
    a sixth of the portal's CPU per job submission, and deep-copies a serializer's declared fields
    for every instance. The first instance's fields are kept on the class
    and every instance gets its own copies to bind, so nothing an instance binds is shared.

    A field that holds no other field is copied shallowly: binding only assigns the copy's own
    attributes (name, parent, label, source), and what the copy shares with the kept field
    (options, error messages, choices) is only read. DRF's deep copy of a field builds it again
    from its arguments, which cost a submission about as much as a SQL statement. Fields holding
    others (nested serializers, list and dict fields, many-related fields) are deep-copied, so their
    children are bound per instance too.
    """

    def get_fields(self) -> dict:
        cls = type(self)
        built = cls.__dict__.get("_fields_built_once")
        if built is None:
            built = super().get_fields()  # type: ignore[misc]
            cls._fields_built_once = built
        return {name: _own_copy(field) for name, field in built.items()}


def _own_copy(field: serializers.Field) -> serializers.Field:
    """A copy of an unbound field that can be bound without touching ``field`` (see ``FieldsBuiltOnce``)."""
    if isinstance(field, serializers.BaseSerializer) or hasattr(field, "child") or hasattr(field, "child_relation"):
        return copy.deepcopy(field)
    return copy.copy(field)
