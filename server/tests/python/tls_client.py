"""Checks the service over TLS: gRPC (grpcio with the test CA) and the HTTP API (https).

usage: tls_client.py GRPC_HOST:PORT HTTP_HOST:PORT CA_PEM
"""

import http.client
import json
import ssl
import sys

import grpc

from envoy_data_plane.envoy.extensions.common.ratelimit.v3 import (
    RateLimitDescriptor,
    RateLimitDescriptorEntry,
)
from envoy_data_plane.envoy.service.ratelimit.v3 import (
    RateLimitRequest,
    RateLimitResponseCode,
    RateLimitServiceSyncStub,
)


def main():
    grpc_address, http_address, ca = sys.argv[1:4]
    with open(ca, "rb") as file:
        root = file.read()
    credentials = grpc.ssl_channel_credentials(root_certificates=root)
    with grpc.secure_channel(grpc_address, credentials) as channel:
        stub = RateLimitServiceSyncStub(channel)
        request = RateLimitRequest(
            domain="py",
            descriptors=[RateLimitDescriptor(entries=[RateLimitDescriptorEntry(key="user", value="tls")])],
        )
        response = stub.should_rate_limit(request)
        assert response.overall_code == RateLimitResponseCode.OK, response
        assert response.statuses[0].limit_remaining == 2, response

    host, port = http_address.rsplit(":", 1)
    context = ssl.create_default_context(cafile=ca)
    connection = http.client.HTTPSConnection(host, int(port), context=context, timeout=10)
    body = json.dumps({"domain": "py", "descriptors": [{"entries": [{"key": "user", "value": "tls"}]}]})
    connection.request("POST", "/v1/check", body=body, headers={"Content-Type": "application/json"})
    answer = json.loads(connection.getresponse().read())
    assert answer["allowed"] is True and answer["statuses"][0]["limitRemaining"] == 1, answer
    print("tls client: all checks passed")


if __name__ == "__main__":
    main()
