"""A Python client generated from the resource store's .proto files.

It creates, reads and queries resources over gRPC and exits non-zero on any
mismatch, proving that the protos stand on their own for other languages.
"""
import sys
import uuid
from datetime import datetime, timezone

import grpc
from google.protobuf import struct_pb2

from resourcestore.type.v1 import event_pb2, payloads_pb2, query_pb2, resource_pb2
from resourcestore.v2 import event_service_pb2_grpc, query_service_pb2_grpc, resource_service_pb2_grpc

failures = []


def check(what, got, want):
    if got != want:
        failures.append(f"{what}: got {got!r}, want {want!r}")
    else:
        print(f"ok   {what}")


def main(target):
    run = uuid.uuid4().hex[:8]
    ds, st = f"py-ds-{run}", f"py-st-{run}"
    with grpc.insecure_channel(target) as channel:
        resources = resource_service_pb2_grpc.ResourceServiceStub(channel)
        query = query_service_pb2_grpc.QueryServiceStub(channel)

        created = resources.Create(resource_pb2.CreateRequest(resources=[
            resource_pb2.Resource(
                identifier=st, parent_identifier=ds,
                study=payloads_pb2.Study(modality="CT", study_date="2024-02-29")),
            resource_pb2.Resource(
                identifier=ds, license="CC-BY-4.0",
                datasource=payloads_pb2.Datasource(name="Python hospital", country="NL")),
        ]))
        check("created", created.created, 2)

        read = resources.Read(resource_pb2.ReadRequest(identifiers=[ds, st, "missing"]))
        check("read identifiers", [r.identifier for r in read.resources], [ds, st])
        check("payload oneof", [r.WhichOneof("payload") for r in read.resources], ["datasource", "study"])
        check("datasource name", read.resources[0].datasource.name, "Python hospital")
        check("children of datasource", list(read.resources[0].children), [st])
        check("study parent", read.resources[1].parent_identifier, ds)
        check("version", read.resources[0].version, 1)
        check("access_level default", read.resources[0].access_level, "internal")
        check("timestamp has microseconds", len(read.resources[0].created_at), len("2026-01-01T00:00:00.000000Z"))
        # datetime holds microseconds exactly (docs/clients.md); fromisoformat reads the Z from Python 3.11 on.
        created = datetime.fromisoformat(read.resources[0].created_at)
        check("created_at round-trips with microseconds",
              created.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"), read.resources[0].created_at)

        as_of = read.resources[1].created_at
        updated = resources.Update(resource_pb2.UpdateRequest(updates={
            st: resource_pb2.ResourceUpdate(study=payloads_pb2.Study(modality="MR"),
                                            update_mask={"paths": ["modality"]}),
        }))
        check("updated", updated.updated, 1)
        now = resources.Read(resource_pb2.ReadRequest(identifiers=[st]))
        then = resources.Read(resource_pb2.ReadRequest(identifiers=[st], as_of=as_of))
        check("modality now", now.resources[0].study.modality, "MR")
        check("modality as_of creation", then.resources[0].study.modality, "CT")

        page = query.Query(query_pb2.QueryRequest(
            payload_type="study", parent_identifier=ds,
            filters=[query_pb2.Condition(field="modality", op="eq",
                                         value=struct_pb2.Value(string_value="MR"))]))
        check("query results", [r.identifier for r in page.results], [st])
        check("query next_cursor", page.HasField("next_cursor"), False)
        count = query.Count(query_pb2.QueryRequest(payload_type="study", parent_identifier=ds))
        check("count", count.count, 1)

        # The change feed: replay this run's commits (since = before the
        # first), filtered to its subtree; whole commits in commit order.
        events = event_service_pb2_grpc.EventServiceStub(channel)
        stream = events.Watch(event_pb2.WatchRequest(since="2000-01-01T00:00:00Z", root_identifier=ds,
                                                     include_resources=True), timeout=30)
        seen = []
        for message in stream:
            seen.extend((e.identifier, e.kind, e.version) for e in message.events)
            if message.events and message.at != message.events[-1].at:
                failures.append("a message's at is not its last commit's")
            if len(seen) >= 3:
                stream.cancel()
                break
        check("events", seen, [(ds, "created", 1), (st, "created", 1), (st, "updated", 2)])

        try:
            resources.Create(resource_pb2.CreateRequest(resources=[
                resource_pb2.Resource(identifier="bad id!", study=payloads_pb2.Study())]))
            failures.append("invalid identifier was accepted")
        except grpc.RpcError as err:
            check("invalid identifier status", err.code(), grpc.StatusCode.INVALID_ARGUMENT)

    if failures:
        for f in failures:
            print("FAIL", f)
        sys.exit(1)
    print("polyglot client: all checks passed")


if __name__ == "__main__":
    main(sys.argv[1])
