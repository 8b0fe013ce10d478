// A Java client generated from the resource store's .proto files with
// Debian's protoc and grpc_java_plugin, compiled and run against Debian's
// grpc-java and protobuf-java jars (no Maven repository). It runs the calls a
// client needs against a live server and exits non-zero on any mismatch.
// Usage: java Client HOST:PORT

import com.google.api.HttpBody;
import com.google.protobuf.Any;
import com.google.protobuf.FieldMask;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.protobuf.Value;
import com.google.rpc.ErrorInfo;
import io.grpc.Context;
import io.grpc.ManagedChannel;
import io.grpc.ManagedChannelBuilder;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.health.v1.HealthCheckRequest;
import io.grpc.health.v1.HealthCheckResponse;
import io.grpc.health.v1.HealthGrpc;
import io.grpc.protobuf.StatusProto;
import io.grpc.reflection.v1.ServerReflectionGrpc;
import io.grpc.reflection.v1.ServerReflectionRequest;
import io.grpc.reflection.v1.ServerReflectionResponse;
import io.grpc.reflection.v1.ServiceResponse;
import io.grpc.stub.StreamObserver;
import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Objects;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import resourcestore.type.v1.Condition;
import resourcestore.type.v1.CreateRequest;
import resourcestore.type.v1.Datasource;
import resourcestore.type.v1.Event;
import resourcestore.type.v1.QueryRequest;
import resourcestore.type.v1.QueryResponse;
import resourcestore.type.v1.ReadRequest;
import resourcestore.type.v1.ReadResponse;
import resourcestore.type.v1.Resource;
import resourcestore.type.v1.ResourceUpdate;
import resourcestore.type.v1.Study;
import resourcestore.type.v1.UpdateRequest;
import resourcestore.type.v1.WatchRequest;
import resourcestore.type.v1.WatchResponse;
import resourcestore.v2.EventServiceGrpc;
import resourcestore.v2.QueryServiceGrpc;
import resourcestore.v2.ResourceServiceGrpc;

public final class Client {
  private static final List<String> failures = new ArrayList<>();

  private static void check(String what, Object got, Object want) {
    if (Objects.equals(got, want)) {
      System.out.println("ok   " + what);
    } else {
      failures.add(what + ": got " + got + ", want " + want);
    }
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 1) {
      System.err.println("usage: Client HOST:PORT");
      System.exit(2);
    }
    ManagedChannel channel = ManagedChannelBuilder.forTarget(args[0]).usePlaintext().build();
    try {
      run(channel);
    } catch (StatusRuntimeException e) {
      failures.add("unexpected " + e.getStatus());
    } finally {
      channel.shutdownNow().awaitTermination(10, TimeUnit.SECONDS);
    }
    if (!failures.isEmpty()) {
      for (String f : failures) System.out.println("FAIL " + f);
      System.exit(1);
    }
    System.out.println("java client: all checks passed");
  }

  private static void run(ManagedChannel channel) throws Exception {
    String run = UUID.randomUUID().toString().substring(0, 8);
    String ds = "java-ds-" + run;
    List<String> studies = List.of("java-st-" + run + "-a", "java-st-" + run + "-b", "java-st-" + run + "-c");
    ResourceServiceGrpc.ResourceServiceBlockingStub resources =
        ResourceServiceGrpc.newBlockingStub(channel).withDeadlineAfter(60, TimeUnit.SECONDS);
    QueryServiceGrpc.QueryServiceBlockingStub query =
        QueryServiceGrpc.newBlockingStub(channel).withDeadlineAfter(60, TimeUnit.SECONDS);

    // Create: a datasource and three studies under it, each payload a member
    // of the Resource oneof.
    CreateRequest.Builder create = CreateRequest.newBuilder()
        .addResources(Resource.newBuilder().setIdentifier(ds).setLicense("CC-BY-4.0")
            .setDatasource(Datasource.newBuilder().setName("Java hospital").setCountry("NL")));
    for (String st : studies) {
      create.addResources(Resource.newBuilder().setIdentifier(st).setParentIdentifier(ds)
          .setStudy(Study.newBuilder().setModality("CT").setStudyDate("2024-02-29")));
    }
    check("created", resources.create(create.build()).getCreated(), 4L);

    ReadResponse read = resources.read(ReadRequest.newBuilder().addIdentifiers(ds).addIdentifiers(studies.get(0)).addIdentifiers("missing").build());
    List<String> ids = new ArrayList<>();
    for (Resource r : read.getResourcesList()) ids.add(r.getIdentifier());
    check("read identifiers", ids, List.of(ds, studies.get(0)));
    if (read.getResourcesCount() != 2) return;
    check("payload oneof", List.of(read.getResources(0).getPayloadCase(), read.getResources(1).getPayloadCase()),
        List.of(Resource.PayloadCase.DATASOURCE, Resource.PayloadCase.STUDY));
    check("datasource name", read.getResources(0).getDatasource().getName(), "Java hospital");
    check("version", read.getResources(0).getVersion(), 1L);

    // Timestamps are RFC 3339 strings with microseconds (docs/clients.md):
    // Instant keeps nanoseconds, so all six digits survive.
    String createdAt = read.getResources(1).getCreatedAt();
    Instant at = Instant.parse(createdAt);
    DateTimeFormatter micros = DateTimeFormatter.ofPattern("yyyy-MM-dd'T'HH:mm:ss.SSSSSSX").withZone(ZoneOffset.UTC);
    check("created_at round-trips with microseconds", micros.format(at), createdAt);

    // Read at an as_of: the study as it was when created, after an update.
    long updated = resources.update(UpdateRequest.newBuilder().putUpdates(studies.get(0), ResourceUpdate.newBuilder()
        .setStudy(Study.newBuilder().setModality("MR")).setUpdateMask(FieldMask.newBuilder().addPaths("modality")).build()).build()).getUpdated();
    check("updated", updated, 1L);
    Resource now = resources.read(ReadRequest.newBuilder().addIdentifiers(studies.get(0)).build()).getResources(0);
    Resource then = resources.read(ReadRequest.newBuilder().addIdentifiers(studies.get(0)).setAsOf(createdAt).build()).getResources(0);
    check("modality now", now.getStudy().getModality(), "MR");
    check("version now", now.getVersion(), 2L);
    check("modality as_of creation", then.getStudy().getModality(), "CT");

    // A query paged by cursor: two pages of the three studies.
    QueryRequest selection = QueryRequest.newBuilder().setPayloadType("study").setParentIdentifier(ds)
        .setSortBy("identifier").setSortOrder("asc").build();
    QueryResponse page1 = query.query(selection.toBuilder().setLimit(2).build());
    check("page 1 has a next_cursor", page1.hasNextCursor(), true);
    QueryResponse page2 = query.query(selection.toBuilder().setLimit(2).setCursor(page1.getNextCursor()).build());
    List<String> paged = new ArrayList<>();
    for (Resource r : page1.getResultsList()) paged.add(r.getIdentifier());
    for (Resource r : page2.getResultsList()) paged.add(r.getIdentifier());
    check("pages in order", paged, studies);
    check("page 2 is the last", page2.hasNextCursor(), false);

    long count = query.count(selection.toBuilder().addFilters(Condition.newBuilder().setField("modality").setOp("eq")
        .setValue(Value.newBuilder().setStringValue("CT"))).build()).getCount();
    check("count of CT studies", count, 2L);

    // QueryParquet: the file arrives in HttpBody chunks.
    ByteArrayOutputStream file = new ByteArrayOutputStream();
    String contentType = "";
    for (Iterator<HttpBody> it = query.queryParquet(selection); it.hasNext(); ) {
      HttpBody chunk = it.next();
      if (contentType.isEmpty()) contentType = chunk.getContentType();
      chunk.getData().writeTo(file);
    }
    checkParquet(file.toByteArray(), contentType);

    // Watch: the first event of this run's subtree, then cancel the stream.
    Context.CancellableContext watching = Context.current().withCancellation();
    try {
      WatchResponse first = watching.call(() -> EventServiceGrpc.newBlockingStub(channel).withDeadlineAfter(30, TimeUnit.SECONDS)
          .watch(WatchRequest.newBuilder().setSince("2000-01-01T00:00:00Z").setRootIdentifier(ds).build()).next());
      if (first.getEventsCount() == 0) {
        failures.add("watch: a message without events");
      } else {
        Event e = first.getEvents(0);
        check("first event", List.of(e.getIdentifier(), e.getKind(), e.getVersion()), List.of(ds, "created", 1L));
      }
    } finally {
      watching.cancel(null);
    }

    // An error's reason, from its google.rpc.ErrorInfo detail.
    try {
      resources.read(ReadRequest.newBuilder().addIdentifiers(ds).setAsOf("yesterday").build());
      failures.add("a bad as_of was accepted");
    } catch (StatusRuntimeException e) {
      check("bad as_of code", e.getStatus().getCode(), Status.Code.INVALID_ARGUMENT);
      check("bad as_of reason", errorInfo(e), List.of("INVALID_AS_OF", "resourcestore"));
    }

    // Health.
    HealthCheckResponse health = HealthGrpc.newBlockingStub(channel).withDeadlineAfter(30, TimeUnit.SECONDS)
        .check(HealthCheckRequest.getDefaultInstance());
    check("health", health.getStatus(), HealthCheckResponse.ServingStatus.SERVING);

    // Reflection (v1): list the services.
    CompletableFuture<ServerReflectionResponse> answer = new CompletableFuture<>();
    CompletableFuture<Void> ended = new CompletableFuture<>();
    StreamObserver<ServerReflectionRequest> requests = ServerReflectionGrpc.newStub(channel).withDeadlineAfter(30, TimeUnit.SECONDS)
        .serverReflectionInfo(new StreamObserver<ServerReflectionResponse>() {
          @Override public void onNext(ServerReflectionResponse r) { answer.complete(r); }
          @Override public void onError(Throwable t) { answer.completeExceptionally(t); ended.completeExceptionally(t); }
          @Override public void onCompleted() { answer.completeExceptionally(new IllegalStateException("no answer")); ended.complete(null); }
        });
    requests.onNext(ServerReflectionRequest.newBuilder().setListServices("").build());
    List<String> services = new ArrayList<>();
    for (ServiceResponse s : answer.get(30, TimeUnit.SECONDS).getListServicesResponse().getServiceList()) services.add(s.getName());
    // Half-close and wait for the end, so the server ends the stream itself.
    requests.onCompleted();
    ended.get(30, TimeUnit.SECONDS);
    check("reflection lists the v2 ResourceService", services.contains("resourcestore.v2.ResourceService"), true);
    check("reflection lists grpc.health.v1.Health", services.contains("grpc.health.v1.Health"), true);
  }

  /** The reason and domain of the error's google.rpc.ErrorInfo detail. */
  private static List<String> errorInfo(StatusRuntimeException e) throws InvalidProtocolBufferException {
    com.google.rpc.Status status = StatusProto.fromThrowable(e);
    if (status == null) return List.of();
    for (Any detail : status.getDetailsList()) {
      if (detail.is(ErrorInfo.class)) {
        ErrorInfo info = detail.unpack(ErrorInfo.class);
        return List.of(info.getReason(), info.getDomain());
      }
    }
    return List.of();
  }

  /** The frame of a parquet file: the magic at both ends, a footer length that fits, the columns in the footer. */
  private static void checkParquet(byte[] file, String contentType) {
    check("parquet content type", contentType.isEmpty(), false);
    if (file.length < 12) {
      failures.add("parquet: " + file.length + " bytes");
      return;
    }
    String head = new String(file, 0, 4, StandardCharsets.US_ASCII);
    String tail = new String(file, file.length - 4, 4, StandardCharsets.US_ASCII);
    check("parquet magic", List.of(head, tail), List.of("PAR1", "PAR1"));
    int footer = ByteBuffer.wrap(file, file.length - 8, 4).order(ByteOrder.LITTLE_ENDIAN).getInt();
    boolean fits = footer > 0 && footer + 12 <= file.length;
    check("parquet footer fits", fits, true);
    if (fits) {
      String meta = new String(file, file.length - 8 - footer, footer, StandardCharsets.ISO_8859_1);
      check("parquet columns", List.of(meta.contains("identifier"), meta.contains("modality")), List.of(true, true));
    }
  }
}
