"""Watches the change feed with Python grpcio at its default limits (docs/events.md).

Usage: watch_grpcio.py HOST:PORT SINCE UNTIL

Opens EventService.Watch with since=SINCE and include_resources, on a channel
with no options at all (so grpcio's default 4 MiB receive limit applies),
reads until a message that is not partial has at >= UNTIL, and prints one
JSON line: what arrived, or the gRPC status the call ended with. Exits 0 in
both cases; the caller judges the figures.

No generated stubs: the call is grpcio's generic unary_stream with raw
bytes, and the few fields needed are read straight from the protobuf wire
format (resourcestore/type/v1/event.proto: WatchRequest, WatchResponse,
Event), so the only requirement is Debian's python3-grpcio.
"""
import json
import sys

import grpc

METHOD = "/resourcestore.v2.EventService/Watch"


def varint(buf, i):
    shift = 0
    value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def fields(buf):
    """Yields (field number, wire type, value) of one message; length-delimited values as bytes."""
    i = 0
    n = len(buf)
    while i < n:
        key, i = varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(buf, i)
        elif wire == 2:
            length, i = varint(buf, i)
            value = buf[i:i + length]
            i += length
        elif wire == 1:
            value = buf[i:i + 8]
            i += 8
        elif wire == 5:
            value = buf[i:i + 4]
            i += 4
        else:
            raise ValueError(f"wire type {wire} at byte {i}")
        yield number, wire, value


def string_field(number, text):
    data = text.encode()
    return bytes([number << 3 | 2]) + encode_varint(len(data)) + data


def encode_varint(value):
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def watch_request(since):
    # since = 1 (string), include_resources = 4 (bool)
    return string_field(1, since) + bytes([4 << 3 | 0, 1])


def main(target, since, until):
    summary = {
        "status": "OK",
        "messages": 0,
        "partial": 0,
        "partialAtBeforeUntil": 0,
        "events": 0,
        "identifiers": 0,
        "deleted": 0,
        "withResource": 0,
        "atUntil": 0,
        "largestMessage": 0,
    }
    seen = set()
    with grpc.insecure_channel(target) as channel:
        call = channel.unary_stream(METHOD, request_serializer=None, response_deserializer=None)(watch_request(since))
        try:
            for raw in call:
                summary["messages"] += 1
                summary["largestMessage"] = max(summary["largestMessage"], len(raw))
                at, partial = "", False
                for number, _, value in fields(raw):
                    if number == 1:
                        at = value.decode()
                    elif number == 3:
                        partial = value != 0
                    elif number == 2:
                        summary["events"] += 1
                        kind = identifier = event_at = None
                        has_resource = False
                        for n, _, v in fields(value):
                            if n == 1:
                                event_at = v.decode()
                            elif n == 2:
                                identifier = v.decode()
                            elif n == 4:
                                kind = v.decode()
                            elif n == 6:
                                has_resource = len(v) > 0
                        seen.add(identifier)
                        summary["deleted"] += kind == "deleted"
                        summary["withResource"] += has_resource
                        summary["atUntil"] += event_at == until
                if partial:
                    summary["partial"] += 1
                    summary["partialAtBeforeUntil"] += at < until
                elif at >= until:
                    call.cancel()
                    break
        except grpc.RpcError as err:
            summary["status"] = err.code().name
            summary["detail"] = err.details()
    summary["identifiers"] = len(seen)
    print(json.dumps(summary))


if __name__ == "__main__":
    main(*sys.argv[1:4])
