#!/usr/bin/env python3
"""Checks the Envoy LLM quick start beside this file (a token budget,
and generations in flight).

    python3 check.py                  # envoy.yaml against Envoy's own schema
    python3 check.py --grpc HOST:PORT # and its two calls against a ratekeeper

envoy.yaml must parse strictly into an envoy.config.bootstrap.v3.Bootstrap
(the schema check is the Envoy quick start's, ../envoy/check.py). Then the
route's rate_limits are applied, as Envoy applies them, to requests with a
token count in their metadata: the request-phase call and the stream-done
call are sent with Envoy's own generated RLS stubs to a `ratekeeper serve`
on ratekeeper.toml, the answer's request_headers_to_add (the slot token)
added to the request between them as Envoy adds them.

The sequence expects the example's budget per day instead of per minute
(the environment override below), so that no token comes back while it
runs however slow the machine:

    RATEKEEPER_LIMITS__TOKENS_PER_API_KEY__RATE=10000/day \
    ratekeeper serve --config ratekeeper.toml

Needs: pip install xds-protos grpcio pyyaml. Exits 1 naming what failed.
"""

import argparse
import os
import re
import sys

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "envoy"))
sys.dont_write_bytecode = True  # no __pycache__ left in examples/envoy

# The Envoy quick start's checker: the schema, and the route's descriptors.
import check as quickstart  # noqa: E402
from check import CheckFailed, expect  # noqa: E402
from envoy.extensions.filters.http.header_mutation.v3 import header_mutation_pb2  # noqa: E402
from envoy.extensions.filters.network.http_connection_manager.v3 import (  # noqa: E402
    http_connection_manager_pb2,
)
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc  # noqa: E402
from google.protobuf.wrappers_pb2 import UInt64Value  # noqa: E402

OK = rls_pb2.RateLimitResponse.OK
OVER = rls_pb2.RateLimitResponse.OVER_LIMIT
SLOT_HEADER = "x-ratekeeper-slot"
METADATA = re.compile(r"^%DYNAMIC_METADATA\(([^:)]+):([^:)]+)\)%$")


def hits_addend(rate_limit, metadata):
    """The descriptor's hits_addend Envoy sends, or None when the entry
    sets none. `metadata` maps (namespace, key) to the number a filter
    wrote."""
    if not rate_limit.HasField("hits_addend"):
        return None
    addend = rate_limit.hits_addend
    # Envoy takes one of the two: a fixed number, or a format string.
    if not addend.format:
        return addend.number.value
    found = METADATA.match(addend.format)
    expect(found, f"check.py does not model the hits_addend format {addend.format!r}")
    namespace, key = found.groups()
    expect((namespace, key) in metadata, f"no metadata {namespace}:{key} in the sample")
    return metadata[(namespace, key)]


def call(domain, rate_limits, headers, metadata, stream_done):
    """The call Envoy's filter makes for a request (stream_done false) or
    when its stream ends (true): the entries of that phase, each with its
    hits_addend."""
    request = rls_pb2.RateLimitRequest(domain=domain)
    for rate_limit in rate_limits:
        if rate_limit.apply_on_stream_done != stream_done:
            continue
        for entries in quickstart.descriptors([rate_limit], headers):
            descriptor = request.descriptors.add()
            for key, value in entries:
                descriptor.entries.add(key=key, value=value)
            addend = hits_addend(rate_limit, metadata)
            if addend is not None:
                # Set even when 0: a descriptor's 0 is not the request's
                # default of 1.
                descriptor.hits_addend.CopyFrom(UInt64Value(value=addend))
    return request


def strips_slot_header(bootstrap):
    """Whether a header_mutation filter before the rate limit filter
    removes the client's own x-ratekeeper-slot."""
    listener = bootstrap.static_resources.listeners[0]
    manager = quickstart.unpack(
        listener.filter_chains[0].filters[0].typed_config,
        http_connection_manager_pb2.HttpConnectionManager,
        "the listener's filter",
    )
    for http_filter in manager.http_filters:
        if http_filter.name == "envoy.filters.http.ratelimit":
            return False
        if http_filter.name != "envoy.filters.http.header_mutation":
            continue
        mutation = quickstart.unpack(
            http_filter.typed_config, header_mutation_pb2.HeaderMutation, "header_mutation"
        )
        removed = {m.remove.lower() for m in mutation.mutations.request_mutations}
        if SLOT_HEADER in removed:
            return True
    return False


def after_answer(answer, headers):
    """The request's headers once Envoy applied the answer's
    request_headers_to_add. Envoy appends them, and a request_headers
    action reads a header's first value: a client's own would win, which
    is why the header_mutation filter removed it before."""
    after = dict(headers)
    for header in answer.request_headers_to_add:
        after.setdefault(header.key.lower(), header.value)
    return after


def check_rls(address, domain, rate_limits):
    def used(tokens):
        return {("io.envoy.ai_gateway", "llm_total_token"): tokens}

    with grpc.insecure_channel(address) as channel:
        stub = rls_pb2_grpc.RateLimitServiceStub(channel)

        def request(key, sent=None):
            """A request with `x-api-key: key` (and the client's `sent`
            headers): its call's answer, and the request's headers after
            the header_mutation filter and the answer."""
            headers = {"x-api-key": key, **(sent or {})}
            headers.pop(SLOT_HEADER, None)  # the header_mutation filter
            call_ = call(domain, rate_limits, headers, used(0), False)
            expect(len(call_.descriptors) == 2, f"not two descriptors: {call_}")
            answer = stub.ShouldRateLimit(call_, timeout=10)
            return answer, after_answer(answer, headers)

        def done(headers, tokens):
            """The stream-done call of a request with `headers`."""
            call_ = call(domain, rate_limits, headers, used(tokens), True)
            return call_, stub.ShouldRateLimit(call_, timeout=10)

        # The request: 0 tokens, the key is not over; a slot of its 4.
        answer, alice = request("alice")
        expect(answer.overall_code == OK, f"alice's first request: {answer}")
        expect(answer.statuses[0].limit_remaining == 10000, f"alice's first request: {answer}")
        expect(answer.statuses[1].limit_remaining == 3, f"alice's slots: {answer}")
        expect(SLOT_HEADER in alice, f"no slot token for an allowed request: {answer}")
        # Its answer used 4,000 tokens: charged, 6,000 left; the slot goes back.
        sent, answer = done(alice, 4000)
        expect(len(sent.descriptors) == 2, f"the stream-done call: {sent}")
        expect(answer.statuses[0].limit_remaining == 6000, f"4,000 tokens charged: {answer}")
        # The next request passes; its answer used 8,000: charged whole,
        # 2,000 past the budget (Envoy ignores this OVER_LIMIT).
        answer, alice = request("alice")
        expect(answer.overall_code == OK, f"alice's second request: {answer}")
        expect(answer.statuses[1].limit_remaining == 3, f"the first slot came back: {answer}")
        _, answer = done(alice, 8000)
        expect(answer.overall_code == OVER, f"8,000 tokens with 6,000 left: {answer}")
        # Now the key is in debt: its requests are refused, and hold no slot.
        answer, alice = request("alice")
        expect(answer.overall_code == OVER, f"alice in debt, a request allowed: {answer}")
        expect(SLOT_HEADER not in alice, f"a slot token for a refused request: {answer}")
        sent, _ = done(alice, 0)
        expect(len(sent.descriptors) == 1, f"a refused request gave a slot back: {sent}")

        # Bob runs 4 generations at once; the fifth is refused.
        running = [request("bob") for _ in range(4)]
        for answer, _ in running:
            expect(answer.overall_code == OK, f"bob's generations: {answer}")
        answer, refused = request("bob")
        expect(answer.overall_code == OVER, f"a fifth generation: {answer}")
        cap = answer.statuses[1]
        expect(cap.code == OVER, f"a fifth generation: {answer}")
        expect(cap.current_limit.name == "generations-per-api-key", f"the cap: {answer}")
        expect(SLOT_HEADER not in refused, f"a slot token for a refused request: {answer}")
        # One ends: its slot is free for the next.
        done(running[0][1], 100)
        answer, _ = request("bob")
        expect(answer.overall_code == OK, f"bob after a generation ended: {answer}")
        # A client's own slot header is gone before the call: the request
        # carries the token ratekeeper answered.
        answer, carol = request("carol", {SLOT_HEADER: "rk1_forged"})
        expect(carol[SLOT_HEADER] != "rk1_forged", f"the client's slot header won: {carol}")
        # A request without the header sends nothing.
        call_ = call(domain, rate_limits, {}, used(0), False)
        expect(len(call_.descriptors) == 0, f"no x-api-key, a descriptor: {call_}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envoy", default=os.path.join(HERE, "envoy.yaml"))
    parser.add_argument("--grpc", metavar="HOST:PORT", help="a ratekeeper's gRPC door")
    args = parser.parse_args()
    try:
        with open(args.envoy, encoding="utf-8") as file:
            bootstrap = quickstart.parse_bootstrap(file.read(), args.envoy)
        domain, rate_limits = quickstart.rate_limit_setup(bootstrap)
        phases = sorted({rate_limit.apply_on_stream_done for rate_limit in rate_limits})
        expect(phases == [False, True], "the route needs a request entry and a stream-done entry")
        expect(
            strips_slot_header(bootstrap),
            f"no header_mutation filter before the rate limit filter removes {SLOT_HEADER}",
        )
        print(f"ok: {args.envoy} is a valid Envoy bootstrap")
        if args.grpc:
            check_rls(args.grpc, domain, rate_limits)
            print(
                f"ok: ratekeeper at {args.grpc} charges the stream-done counts "
                "and frees the slots as expected"
            )
    except CheckFailed as error:
        print(f"FAILED: {error}", file=sys.stderr)
        return 1
    except grpc.RpcError as error:
        print(f"FAILED: the gRPC call: {error.code()} {error.details()}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
