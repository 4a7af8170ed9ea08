"""Reads an Envoy bootstrap (examples/envoy/envoy.yaml) into Envoy's own v3 protos (the
envoy-data-plane package): an unknown field or a wrong type anywhere, typed_config included,
fails. The example cannot rot without the tests saying so.

usage: validate_envoy.py ENVOY_YAML
"""

import sys

import yaml

# Importing a package registers its messages, so that typed_config (Any) values resolve.
import envoy_data_plane.envoy.extensions.filters.http.ratelimit.v3 as ratelimit
import envoy_data_plane.envoy.extensions.filters.http.router.v3  # noqa: F401
import envoy_data_plane.envoy.extensions.filters.network.http_connection_manager.v3 as hcm
import envoy_data_plane.envoy.extensions.upstreams.http.v3  # noqa: F401
from envoy_data_plane.envoy.config.bootstrap.v3 import Bootstrap


def main():
    with open(sys.argv[1]) as file:
        bootstrap = Bootstrap.from_dict(yaml.safe_load(file))
    listener = bootstrap.static_resources.listeners[0]
    manager = listener.filter_chains[0].filters[0].typed_config.unpack()
    assert isinstance(manager, hcm.HttpConnectionManager), type(manager)
    limit = manager.http_filters[0].typed_config.unpack()
    assert isinstance(limit, ratelimit.RateLimit), type(limit)
    assert limit.domain == "edge", limit.domain
    cluster = limit.rate_limit_service.grpc_service.envoy_grpc.cluster_name
    names = [c.name for c in bootstrap.static_resources.clusters]
    assert cluster in names, (cluster, names)
    route = manager.route_config.virtual_hosts[0].routes[0].route
    assert len(route.rate_limits) == 4, route.rate_limits
    print("envoy config: a valid v3 bootstrap; the ratelimit filter asks domain", limit.domain)


if __name__ == "__main__":
    main()
