"""The confinement fields of the launch contract (run_as, limits, image) and the exit reasons they bring."""

from __future__ import annotations

import json

import pytest

from cluster import protocol

DIGEST = "sha256:" + "ab" * 32
BASE = {"job_id": "j", "attempt": 1, "command": "true"}


def test_confinement_fields_round_trip_through_json_kwargs():
    cmd = protocol.LaunchCommand(job_id=7, attempt=0, command="python t.py", run_as="alice", cpus=2.5,
                                 mem_bytes=4 << 30, image="pytorch:2.3", image_uri="/images/pytorch.tar",
                                 image_digest=DIGEST)
    assert protocol.LaunchCommand.from_kwargs(json.loads(json.dumps(cmd.to_kwargs()))) == cmd


def test_a_launch_without_the_confinement_fields_gets_the_defaults():
    cmd = protocol.LaunchCommand.from_kwargs(BASE)
    assert (cmd.run_as, cmd.cpus, cmd.mem_bytes, cmd.image, cmd.image_uri, cmd.image_digest) == ("", 0.0, 0, "", "", "")


def test_integer_cpus_are_accepted_as_a_float():
    assert protocol.LaunchCommand.from_kwargs({**BASE, "cpus": 3}).cpus == 3.0


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"run_as": "root user"}, "run_as"),
        ({"run_as": "Alice"}, "run_as"),
        ({"run_as": "-alice"}, "run_as"),
        ({"run_as": "a" * 33}, "run_as"),
        ({"run_as": "al/ice"}, "run_as"),
        ({"run_as": 1000}, "run_as"),
        ({"cpus": -1}, "cpus"),
        ({"cpus": float("inf")}, "cpus"),
        ({"cpus": "2"}, "cpus"),
        ({"cpus": True}, "cpus"),
        ({"mem_bytes": -1}, "mem_bytes"),
        ({"mem_bytes": 1.5}, "mem_bytes"),
        ({"mem_bytes": "1G"}, "mem_bytes"),
        ({"image": "bad image", "image_uri": "/i.tar", "image_digest": DIGEST}, "image"),
        ({"image": "x", "image_uri": "relative.tar", "image_digest": DIGEST}, "image_uri"),
        ({"image": "x", "image_uri": "/i\x00.tar", "image_digest": DIGEST}, "image_uri"),
        ({"image": "x", "image_uri": "/i.tar", "image_digest": "md5:abc"}, "image_digest"),
        ({"image": "x", "image_uri": "/i.tar", "image_digest": "sha256:" + "AB" * 32}, "image_digest"),
        ({"image": "x"}, "image_uri"),
        ({"image": "x", "image_uri": "/i.tar"}, "image_digest"),
        ({"image_uri": "/i.tar", "image_digest": DIGEST}, "image"),
    ],
)
def test_bad_confinement_fields_are_rejected_by_name(change, field):
    with pytest.raises(protocol.ProtocolError) as err:
        protocol.LaunchCommand.from_kwargs({**BASE, **change})
    assert err.value.field == field
    assert str(err.value).startswith(f"{field}: ")


@pytest.mark.parametrize("name", ["alice", "gpusched-test-a", "_svc", "a.b", "u1000"])
def test_posix_user_names_are_accepted(name):
    assert protocol.LaunchCommand.from_kwargs({**BASE, "run_as": name}).run_as == name


def test_the_new_exit_reasons_are_distinct_short_words():
    reasons = {protocol.EXIT_OUT_OF_MEMORY, protocol.EXIT_IMAGE_UNAVAILABLE}
    assert len(reasons) == 2
    others = {protocol.EXIT_PREEMPT, protocol.EXIT_CANCEL, protocol.EXIT_TIMEOUT, protocol.EXIT_STALE,
              protocol.EXIT_LOST, protocol.EXIT_AGENT_STOP, protocol.EXIT_LAUNCH_FAILED}
    assert not reasons & others
