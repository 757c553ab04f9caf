"""GPU and job telemetry kept in Redis as fixed-size rings: bounded memory per GPU, history downsampled.

Each GPU has one Redis string of ``RING_BYTES`` bytes holding three tiers of
16-byte records (``RECORD``: time, utilisation, temperature, power,
framebuffer used, process memory)::

    tier   step    slots   covers
    0      5 s     180     the last 15 minutes
    1      60 s    360     the last 6 hours
    2      600 s   144     the last 24 hours

A sample at time ``t`` is written into slot ``(t // step) % slots`` of every
tier (``SETRANGE``, all of a report's writes in one Lua script: ``write_report``),
overwriting what that slot held one lap ago; a coarser
tier thus keeps the newest sample of each of its steps (decimation). Nothing
is ever appended, so the memory is ``RING_BYTES`` per GPU however long a node
runs, and a write needs no read. A reader drops records older than one lap.
An attempt's job-level series (the mean utilisation of its GPUs, their memory
summed, its processes' memory) is a ring of the same shape.

The latest full reading of each GPU (with UUID, ECC totals) is a field of one
hash per node, read by ``/metrics``; the last Xid per GPU is another hash,
written only when an Xid arrives. Every key expires ``TTL_S`` after the last
write that renewed it, so a node or job that is gone leaves nothing behind.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from dataclasses import dataclass

import redis

from cluster.telemetry_schema import GpuSample

PREFIX = "gpusched:telemetry"
RECORD = struct.Struct("<IBBHII")  # t (s), util (%), temp (C), power (W), fb_used (MiB), proc_mem (MiB)
TIERS: tuple[tuple[int, int], ...] = ((5, 180), (60, 360), (600, 144))  # (step s, slots)
_TIER_OFFSET = tuple(sum(n for _, n in TIERS[:k]) * RECORD.size for k in range(len(TIERS)))
RING_BYTES = sum(n for _, n in TIERS) * RECORD.size
TTL_S = 2 * 24 * 3600
#: GPU rings have their expiry renewed once per this many seconds of samples (an EXPIRE per sample
#: would be a quarter of the writes); job rings, short-lived, on every write.
RENEW_EVERY_S = 300


def gpu_key(node: str, index: int) -> str:
    return f"{PREFIX}:gpu:{node}:{index}"


def job_key(job_id: int, attempt: int) -> str:
    return f"{PREFIX}:job:{job_id}:{attempt}"


def latest_key(node: str) -> str:
    return f"{PREFIX}:latest:{node}"


def xid_key(node: str) -> str:
    return f"{PREFIX}:xid:{node}"


@dataclass(frozen=True, slots=True)
class Point:
    t: int
    util: int
    temp: int
    power: int
    fb_used: int
    proc_mem: int


def _clamp(value: float, high: int) -> int:
    return max(0, min(high, int(round(value))))


def pack(t: float, util: float, temp: float, power: float, fb_used: int, proc_mem: int = 0) -> bytes:
    """One record; values are clamped to their fields (power to 65535 W, memory to 2^32 MiB)."""
    return RECORD.pack(int(t), _clamp(util, 100), _clamp(temp, 255), _clamp(power, 0xFFFF),
                       _clamp(fb_used, 0xFFFFFFFF), _clamp(proc_mem, 0xFFFFFFFF))


def latest_value(g: GpuSample, t: float) -> str:
    """The latest-reading field of one GPU (a JSON list; ``LATEST_FIELDS`` names its items)."""
    return json.dumps([g.uuid, g.util, g.fb_used, g.fb_total, g.temp, g.power, g.ecc_sbe, g.ecc_dbe, t],
                      separators=(",", ":"))


LATEST_FIELDS = ("uuid", "util", "fb_used", "fb_total", "temp", "power", "ecc_sbe", "ecc_dbe", "sampled_at")


# One report's writes as one Redis command: the ring writes, the latest readings and the last Xids.
# A pipeline of the same ~30 commands cost the worker several times the CPU (each command is built
# and parsed in Python); the script's work is done by Redis. Ring keys are KEYS[1..gpus+jobs], then
# the latest hash and the Xid hash; ARGV: t, renew GPU rings (0/1), TTL, GPU ring count, then one
# record per ring, the latest fields (index, value pairs, one per GPU ring) and the Xid pairs.
_WRITE_LUA = """
local t, renew, ttl, gpus = tonumber(ARGV[1]), ARGV[2] == '1', tonumber(ARGV[3]), tonumber(ARGV[4])
local rings = #KEYS - 2
for r = 1, rings do
  local key, record = KEYS[r], ARGV[4 + r]
  -- A new ring is made at its full size at once: grown write by write, Redis would over-allocate it.
  if redis.call('STRLEN', key) == 0 then redis.call('SETRANGE', key, %(last)d, '\\0') end
%(tiers)s
  if r > gpus or renew then redis.call('EXPIRE', key, ttl) end
end
local at = 5 + rings
if gpus > 0 then
  redis.call('HSET', KEYS[rings + 1], unpack(ARGV, at, at + 2 * gpus - 1))
  redis.call('EXPIRE', KEYS[rings + 1], ttl)
end
at = at + 2 * gpus
if #ARGV >= at then
  redis.call('HSET', KEYS[rings + 2], unpack(ARGV, at, #ARGV))
  redis.call('EXPIRE', KEYS[rings + 2], ttl)
end
return rings
""" % {"last": RING_BYTES - 1, "tiers": "\n".join(
    f"  redis.call('SETRANGE', key, {base} + (math.floor(t / {step}) % {slots}) * {RECORD.size}, record)"
    for (step, slots), base in zip(TIERS, _TIER_OFFSET))}

_scripts: dict[int, object] = {}


def _write_script(conn: redis.Redis):  # noqa: ANN202 - a redis Script, registered once per client
    script = _scripts.get(id(conn))
    if script is None:
        script = _scripts[id(conn)] = conn.register_script(_WRITE_LUA)
    return script


def write_report(conn: redis.Redis, node: str, t: float, gpus: Iterable[GpuSample],
                 proc_mem: dict[int, int], jobs: list[tuple[int, int, bytes]],
                 pipe: redis.client.Pipeline | None = None) -> int:
    """Write one node report: every GPU's ring and latest reading, the last Xids, each job's ring.

    ``proc_mem``: MiB of job processes per GPU index; ``jobs``: (job id, attempt, record).
    With ``pipe`` (a pipeline of ``conn``), the write is queued on it rather than sent. Returns the
    number of rings written.
    """
    gpus = list(gpus)
    keys = [gpu_key(node, g.index) for g in gpus] + [job_key(j, a) for j, a, _ in jobs]
    records = [pack(t, g.util, g.temp, g.power, g.fb_used, proc_mem.get(g.index, 0)) for g in gpus]
    records += [record for _, _, record in jobs]
    latest = [x for g in gpus for x in (g.index, latest_value(g, t))]
    xids = [x for g in gpus if g.xids for x in (g.index, g.xids[-1])]
    renew = 1 if int(t) % RENEW_EVERY_S < TIERS[0][0] else 0
    _write_script(conn)(keys=[*keys, latest_key(node), xid_key(node)],
                        args=[int(t), renew, TTL_S, len(gpus), *records, *latest, *xids], client=pipe or conn)
    return len(keys)


def unpack(blob: bytes | None, now: float, tier: int) -> list[Point]:
    """The points of one tier of a ring, oldest first, none older than one lap before ``now``."""
    if not blob:
        return []
    step, slots = TIERS[tier]
    base = _TIER_OFFSET[tier]
    oldest = now - step * slots
    chunk = blob[base:base + slots * RECORD.size]
    chunk = chunk[:len(chunk) - len(chunk) % RECORD.size]
    points = [Point(*r) for r in RECORD.iter_unpack(chunk) if r[0] > oldest]
    return sorted(points, key=lambda p: p.t)


def tier_for(seconds: float) -> int:
    """The finest tier that covers the last ``seconds``."""
    for k, (step, slots) in enumerate(TIERS):
        if step * slots >= seconds:
            return k
    return len(TIERS) - 1


def read_latest(client: redis.Redis, nodes: list[str]) -> dict[str, tuple[dict[bytes, bytes], dict[bytes, bytes]]]:
    """Per node: (latest readings by GPU index, last Xid by GPU index), two hashes read in one round trip."""
    pipe = client.pipeline(transaction=False)
    for node in nodes:
        pipe.hgetall(latest_key(node))
        pipe.hgetall(xid_key(node))
    found = pipe.execute()
    return {node: (found[2 * k], found[2 * k + 1]) for k, node in enumerate(nodes)}
