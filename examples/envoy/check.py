#!/usr/bin/env python3
"""Checks the Envoy quick start beside this file.

    python3 check.py                  # envoy.yaml against Envoy's own schema
    python3 check.py --grpc HOST:PORT # and its descriptors against a ratekeeper

The schema is Envoy's generated protobuf (the xds-protos package):
envoy.yaml, and its TLS variant uncommented, must parse strictly into an
envoy.config.bootstrap.v3.Bootstrap, every typed_config resolved. Then
the route's rate_limits actions are applied, as Envoy applies them, to
sample requests, and the descriptors they make are sent with Envoy's own
generated RLS stubs to a `ratekeeper serve` on ratekeeper.toml.

The RLS sequence expects the example's numbers per day instead of per
second (the environment overrides below), so that it checks the same
limits and cannot depend on how fast this machine is:

    RATEKEEPER_LIMITS__OVERALL__RATE=1000/day \
    RATEKEEPER_LIMITS__PER_API_KEY__RATE=10/day \
    ratekeeper serve --config ratekeeper.toml

Needs: pip install xds-protos grpcio pyyaml. Exits 1 naming what failed.
"""

import argparse
import os
import sys

import grpc
import yaml
from google.protobuf import json_format

# Imported for the typed_config messages they register: ParseDict resolves
# each "@type" in the default descriptor pool.
from envoy.config.bootstrap.v3 import bootstrap_pb2
from envoy.extensions.filters.http.ratelimit.v3 import rate_limit_pb2  # noqa: F401
from envoy.extensions.filters.http.router.v3 import router_pb2  # noqa: F401
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2,
)
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2  # noqa: F401
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2  # noqa: F401
from envoy.extensions.filters.http.ratelimit.v3.rate_limit_pb2 import RateLimit
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc

HERE = os.path.dirname(os.path.abspath(__file__))
OK = rls_pb2.RateLimitResponse.OK
OVER = rls_pb2.RateLimitResponse.OVER_LIMIT
DAY = rls_pb2.RateLimitResponse.RateLimit.DAY


class CheckFailed(Exception):
    """What did not hold, said to the user."""


def expect(condition, message):
    if not condition:
        raise CheckFailed(message)


def with_tls(text):
    """The file with the lines between BEGIN TLS and END TLS uncommented."""
    out, inside, seen = [], False, False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped == "# BEGIN TLS":
            inside, seen = True, True
        elif stripped == "# END TLS":
            inside = False
        elif inside:
            line = line.replace("# ", "", 1)
        out.append(line)
    expect(seen and not inside, "envoy.yaml has no complete BEGIN TLS ... END TLS block")
    return "\n".join(out)


def parse_bootstrap(text, what):
    """`text` as a Bootstrap, refusing any field Envoy would not know."""
    try:
        return json_format.ParseDict(
            yaml.safe_load(text), bootstrap_pb2.Bootstrap(), ignore_unknown_fields=False
        )
    except (json_format.ParseError, yaml.YAMLError, TypeError) as error:
        raise CheckFailed(f"{what} is not a valid Envoy bootstrap: {error}") from error


def unpack(any_message, message_type, what):
    message = message_type()
    expect(any_message.Unpack(message), f"{what} is not a {message_type.DESCRIPTOR.full_name}")
    return message


def rate_limit_setup(bootstrap):
    """The rate limit filter's domain, and the route's rate_limits."""
    listener = bootstrap.static_resources.listeners[0]
    manager = unpack(
        listener.filter_chains[0].filters[0].typed_config,
        http_connection_manager_pb2.HttpConnectionManager,
        "the listener's filter",
    )
    filters = {f.name: f for f in manager.http_filters}
    expect("envoy.filters.http.ratelimit" in filters, "no envoy.filters.http.ratelimit filter")
    config = unpack(filters["envoy.filters.http.ratelimit"].typed_config, RateLimit, "ratelimit")
    cluster = config.rate_limit_service.grpc_service.envoy_grpc.cluster_name
    clusters = {c.name: c for c in bootstrap.static_resources.clusters}
    expect(cluster in clusters, f"the rate limit service's cluster {cluster!r} is not defined")
    options = clusters[cluster].typed_extension_protocol_options
    http = unpack(
        options["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"],
        http_protocol_options_pb2.HttpProtocolOptions,
        "the cluster's protocol options",
    )
    expect(
        http.explicit_http_config.HasField("http2_protocol_options"),
        f"cluster {cluster!r} does not speak HTTP/2, which gRPC needs",
    )
    route = manager.route_config.virtual_hosts[0].routes[0].route
    expect(len(route.rate_limits) > 0, "the route has no rate_limits")
    return config.domain, route.rate_limits


def descriptors(rate_limits, headers):
    """The descriptors Envoy makes of a request with `headers` (lower-case
    names): one per rate_limits entry, in order; an entry whose header is
    missing makes none (Envoy's default, skip_if_absent false)."""
    made = []
    for rate_limit in rate_limits:
        entries, complete = [], True
        for action in rate_limit.actions:
            kind = action.WhichOneof("action_specifier")
            if kind == "generic_key":
                key = action.generic_key.descriptor_key or "generic_key"
                entries.append((key, action.generic_key.descriptor_value))
            elif kind == "request_headers":
                value = headers.get(action.request_headers.header_name.lower())
                if value is None:
                    if not action.request_headers.skip_if_absent:
                        complete = False
                    continue
                entries.append((action.request_headers.descriptor_key, value))
            else:
                raise CheckFailed(f"check.py does not model the {kind} action")
        if complete and entries:
            made.append(entries)
    return made


def request_for(domain, rate_limits, headers):
    """The call Envoy's filter makes for a request with `headers`."""
    request = rls_pb2.RateLimitRequest(domain=domain, hits_addend=1)
    for entries in descriptors(rate_limits, headers):
        descriptor = request.descriptors.add()
        for key, value in entries:
            descriptor.entries.add(key=key, value=value)
    return request


def ask(stub, domain, rate_limits, headers):
    return stub.ShouldRateLimit(request_for(domain, rate_limits, headers), timeout=10)


def codes(response):
    return [status.code for status in response.statuses]


def check_rls(address, domain, rate_limits):
    with grpc.insecure_channel(address) as channel:
        stub = rls_pb2_grpc.RateLimitServiceStub(channel)

        # A request without the header sends the overall descriptor alone.
        answer = ask(stub, domain, rate_limits, {})
        expect(codes(answer) == [OK], f"no x-api-key: {answer}")
        overall = answer.statuses[0].current_limit
        expect(
            (overall.requests_per_unit, overall.unit) == (1000, DAY),
            f"the overall limit is not 1000 a day (see the docstring): {overall}",
        )
        used = 1

        # One key: 10 allowed, the 11th refused by the per-key limit only.
        for n in range(10):
            answer = ask(stub, domain, rate_limits, {"x-api-key": "alice"})
            expect(answer.overall_code == OK, f"alice's call {n + 1} of 10 refused: {answer}")
            expect(codes(answer) == [OK, OK], f"alice's call {n + 1}: {answer}")
            expect(answer.statuses[1].limit_remaining == 9 - n, f"alice's call {n + 1}: {answer}")
            used += 1
        per_key = answer.statuses[1].current_limit
        expect(
            (per_key.requests_per_unit, per_key.unit) == (10, DAY),
            f"the per-key limit is not 10 a day (see the docstring): {per_key}",
        )
        answer = ask(stub, domain, rate_limits, {"x-api-key": "alice"})
        expect(answer.overall_code == OVER, f"alice's 11th call allowed: {answer}")
        expect(codes(answer) == [OK, OVER], f"alice's 11th call: {answer}")
        # Another key has its own 10.
        answer = ask(stub, domain, rate_limits, {"x-api-key": "bob"})
        expect(codes(answer) == [OK, OK], f"bob, after alice was refused: {answer}")
        used += 1

        # The overall limit: many keys, each under its own limit, spend the
        # 1000 together (a refused call took nothing: all or nothing).
        futures = []
        for n in range(1000 - used):
            request = request_for(domain, rate_limits, {"x-api-key": f"key-{n // 10}"})
            futures.append(stub.ShouldRateLimit.future(request, timeout=30))
            if len(futures) >= 64:
                for future in futures:
                    result = future.result()
                    expect(codes(result) == [OK, OK], f"under the overall limit: {result}")
                futures.clear()
        for future in futures:
            result = future.result()
            expect(codes(result) == [OK, OK], f"under the overall limit: {result}")
        answer = ask(stub, domain, rate_limits, {"x-api-key": "carol"})
        expect(codes(answer) == [OVER, OK], f"the 1001st call, a fresh key: {answer}")
        answer = ask(stub, domain, rate_limits, {})
        expect(codes(answer) == [OVER], f"the 1001st call, no key: {answer}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envoy", default=os.path.join(HERE, "envoy.yaml"))
    parser.add_argument("--grpc", metavar="HOST:PORT", help="a ratekeeper's gRPC door")
    args = parser.parse_args()
    try:
        with open(args.envoy, encoding="utf-8") as file:
            text = file.read()
        bootstrap = parse_bootstrap(text, args.envoy)
        tls = parse_bootstrap(with_tls(text), args.envoy + " with TLS uncommented")
        clusters = {c.name: c for c in tls.static_resources.clusters}
        expect(
            clusters["ratekeeper"].transport_socket.name == "envoy.transport_sockets.tls",
            "the TLS variant has no transport_socket on the ratekeeper cluster",
        )
        unpack(
            clusters["ratekeeper"].transport_socket.typed_config,
            tls_pb2.UpstreamTlsContext,
            "the TLS transport socket",
        )
        domain, rate_limits = rate_limit_setup(bootstrap)
        print(f"ok: {args.envoy} (and its TLS variant) is a valid Envoy bootstrap")
        if args.grpc:
            check_rls(args.grpc, domain, rate_limits)
            print(f"ok: ratekeeper at {args.grpc} decides the route's descriptors as expected")
    except CheckFailed as error:
        print(f"FAILED: {error}", file=sys.stderr)
        return 1
    except grpc.RpcError as error:
        print(f"FAILED: the gRPC call: {error.code()} {error.details()}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
