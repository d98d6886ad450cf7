"""Shared by the control-plane benchmarks (scripts/bench-fleet, scripts/bench-scale): a keep-alive HTTP/1.1
client on asyncio (the standard library has none), percentiles, and onboarding N tenants with POST /v1/import."""

import asyncio
import json
import time


class Connection:
    """One keep-alive HTTP/1.1 connection to the control plane on 127.0.0.1:`port`."""

    def __init__(self, port):
        self.port = port

    async def open(self):
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        return self

    async def call(self, method, path, token, body=None):
        """Returns (status, body bytes); raises on an error status (304 is not one)."""
        data = b"" if body is None else json.dumps(body).encode()
        head = (f"{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {token}\r\n"
                f"content-type: application/json\r\ncontent-length: {len(data)}\r\n\r\n")
        self.writer.write(head.encode() + data)
        await self.writer.drain()
        status = int((await self.reader.readline()).split()[1])
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        body = await self.reader.readexactly(length)
        if status >= 300 and status != 304:
            raise RuntimeError(f"{method} {path}: {status} {body[:300]!r}")
        return status, body


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))]


def tenant_name(n):
    return f"t{n}"


def password(n):
    """The password imported for tenant n (AUTH t{n} with it)."""
    return f"password-of-tenant-{n:08d}"


async def import_tenants(conn, admin, count, route, batch=5000):
    """Onboards tenants t0..t{count-1}, each with one imported password and `route`; returns the seconds taken."""
    started = time.monotonic()
    for first in range(0, count, batch):
        body = {"tenants": [{"tenant": {"name": tenant_name(n)}, "credentials": [{"password": password(n)}],
                             "route": route} for n in range(first, min(first + batch, count))]}
        await conn.call("POST", "/v1/import", admin, body)
    return time.monotonic() - started


async def one_change_to_many(port, admin, gateway, count, tenant, route):
    """Opens `count` long-polls as gateways holding the current snapshot (asking for deltas), changes `tenant`'s
    route, and returns the seconds from the PUT returning to each answer, and the size of each answer's body."""
    conn = await Connection(port).open()
    _, body = await conn.call("GET", "/v1/snapshot", gateway)
    snapshot = json.loads(body)
    ask = f"/v1/snapshot?after={snapshot['revision']}&epoch={snapshot['epoch']}&wait=60s"
    polls = [await Connection(port).open() for _ in range(count)]
    received = []

    async def follow(poll):
        status, body = await poll.call("GET", ask, gateway)
        received.append((time.monotonic(), status, len(body)))

    waiting = [asyncio.create_task(follow(poll)) for poll in polls]
    await asyncio.sleep(2)  # every poll is waiting by now (the control plane answers "not changed" only at 60 s)
    # Forced: what is measured is the change reaching the gateways, not the guard's probes of the new resource.
    await conn.call("PUT", f"/v1/tenants/{tenant}/route", admin,
                    {"route": route, "comment": "bench", "force": True})
    changed = time.monotonic()
    await asyncio.gather(*waiting)
    if any(status != 200 for _, status, _ in received):
        raise RuntimeError("a long-poll was not answered with the change")
    return [at - changed for at, _, _ in received], [size for _, _, size in received]
