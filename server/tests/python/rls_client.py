"""An independent client of the service: Envoy's RLS v3 through the stubs the PyPI package
envoy-data-plane generates from Envoy's own protos, sync (grpcio) and async (grpclib).

usage: rls_client.py HOST:PORT   (exits non-zero with the failed check on stderr)
"""

import asyncio
import sys

import grpc
from grpclib.client import Channel

from envoy_data_plane.envoy.extensions.common.ratelimit.v3 import (
    RateLimitDescriptor,
    RateLimitDescriptorEntry,
    RateLimitDescriptorRateLimitOverride,
)
from envoy_data_plane.envoy.service.ratelimit.v3 import (
    RateLimitRequest,
    RateLimitResponseCode,
    RateLimitResponseRateLimitUnit,
    RateLimitServiceAsyncStub,
    RateLimitServiceSyncStub,
)
from envoy_data_plane.envoy.type.v3 import RateLimitUnit


def descriptor(*entries, hits=None, limit=None):
    return RateLimitDescriptor(
        entries=[RateLimitDescriptorEntry(key=k, value=v) for k, v in entries],
        hits_addend=hits,
        limit=limit,
    )


def request(*descriptors, hits=0):
    return RateLimitRequest(domain="py", descriptors=list(descriptors), hits_addend=hits)


def expect(condition, what):
    if not condition:
        raise AssertionError(what)


def sync_checks(address):
    with grpc.insecure_channel(address) as channel:
        stub = RateLimitServiceSyncStub(channel)
        codes = [stub.should_rate_limit(request(descriptor(("user", "alice")))) for _ in range(4)]
        expect([c.overall_code for c in codes] == [RateLimitResponseCode.OK] * 3 + [RateLimitResponseCode.OVER_LIMIT],
               f"3 of 4 admitted: {[c.overall_code for c in codes]}")
        first, denied = codes[0].statuses[0], codes[3].statuses[0]
        expect(first.current_limit.name == "per-user", f"the limit's name: {first.current_limit}")
        expect(first.current_limit.requests_per_unit == 3, "requests_per_unit")
        expect(first.current_limit.unit == RateLimitResponseRateLimitUnit.MINUTE, "unit")
        expect(first.limit_remaining == 2, f"remaining: {first.limit_remaining}")
        expect(denied.code == RateLimitResponseCode.OVER_LIMIT, "the denying status")
        headers = {h.key: h.value for h in codes[3].response_headers_to_add}
        expect("retry-after" in headers and headers["ratelimit-policy"] == '"per-user";q=3;w=60', f"headers: {headers}")

        # A denial charges no other descriptor.
        for _ in range(3):
            both = stub.should_rate_limit(request(descriptor(("user", "alice")), descriptor(("team", "t1"))))
            expect(both.overall_code == RateLimitResponseCode.OVER_LIMIT, "denied as a whole")
        probe = stub.should_rate_limit(request(descriptor(("team", "t1"), hits=0)))
        expect(probe.statuses[0].limit_remaining == 10, f"team untouched: {probe.statuses[0].limit_remaining}")

        # The descriptor's own hits (the UInt64Value wrapper) and the limit override.
        costly = stub.should_rate_limit(request(descriptor(("team", "t1"), hits=4), hits=1))
        expect(costly.statuses[0].limit_remaining == 6, f"hits 4: {costly.statuses[0].limit_remaining}")
        override = RateLimitDescriptorRateLimitOverride(requests_per_unit=1, unit=RateLimitUnit.HOUR)
        once = [stub.should_rate_limit(request(descriptor(("user", "bob"), limit=override))).overall_code for _ in range(2)]
        expect(once == [RateLimitResponseCode.OK, RateLimitResponseCode.OVER_LIMIT], f"override: {once}")

        raw = channel.unary_unary(
            "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
            request_serializer=lambda body: body,
            response_deserializer=lambda body: body,
        )
        try:
            raw(b"\xff\xff\xff\xff")
            expect(False, "a malformed message is refused")
        except grpc.RpcError as error:
            expect(error.code() == grpc.StatusCode.INVALID_ARGUMENT, f"malformed protobuf: {error.code()}")

        try:
            stub.should_rate_limit(RateLimitRequest(domain="nope", descriptors=[descriptor(("user", "x"))]))
            expect(False, "an unknown domain is refused")
        except grpc.RpcError as error:
            expect(error.code() == grpc.StatusCode.INVALID_ARGUMENT, f"code: {error.code()}")
            expect("unknown domain" in error.details(), error.details())


async def async_checks(host, port):
    channel = Channel(host, port)
    try:
        stub = RateLimitServiceAsyncStub(channel)
        three = request(descriptor(("user", "carol")), descriptor(("team", "t2")), descriptor(("route", "r")))

        async def client():
            admitted = 0
            for _ in range(5):
                response = await stub.should_rate_limit(three)
                admitted += response.overall_code == RateLimitResponseCode.OK
            return admitted

        admitted = sum(await asyncio.gather(*(client() for _ in range(16))))
        # user: 3 a minute binds; team (10) and route (100) are charged only when admitted.
        expect(admitted == 3, f"16 async clients: {admitted} admitted")
        team = await stub.should_rate_limit(request(descriptor(("team", "t2"), hits=0)))
        expect(team.statuses[0].limit_remaining == 7, f"team charged only 3: {team.statuses[0].limit_remaining}")
    finally:
        channel.close()


def main():
    address = sys.argv[1]
    host, port = address.rsplit(":", 1)
    sync_checks(address)
    asyncio.run(async_checks(host, int(port)))
    print("python client: all checks passed")


if __name__ == "__main__":
    main()
