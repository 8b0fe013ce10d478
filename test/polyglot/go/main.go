// A Go client generated from the resource store's .proto files with Debian's
// protoc-gen-go and protoc-gen-go-grpc, built against Debian's grpc-go (no
// module proxy). It runs the calls a client needs against a live server and
// exits non-zero on any mismatch. Usage: client HOST:PORT
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/structpb"

	typev1 "resourcestore/type/v1"
	resourcestorev2 "resourcestore/v2"
)

var failures []string

func check(what string, got, want interface{}) {
	if !reflect.DeepEqual(got, want) {
		failures = append(failures, fmt.Sprintf("%s: got %#v, want %#v", what, got, want))
		return
	}
	fmt.Println("ok  ", what)
}

func fail(what string, err error) {
	failures = append(failures, fmt.Sprintf("%s: %v", what, err))
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: client HOST:PORT")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := grpc.DialContext(ctx, os.Args[1], grpc.WithInsecure(), grpc.WithBlock())
	if err != nil {
		fmt.Fprintln(os.Stderr, "dial:", err)
		os.Exit(1)
	}
	defer conn.Close()
	run(ctx, conn)
	if len(failures) > 0 {
		for _, f := range failures {
			fmt.Println("FAIL", f)
		}
		os.Exit(1)
	}
	fmt.Println("go client: all checks passed")
}

func run(ctx context.Context, conn *grpc.ClientConn) {
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	run := hex.EncodeToString(suffix)
	ds := "go-ds-" + run
	studies := []string{"go-st-" + run + "-a", "go-st-" + run + "-b", "go-st-" + run + "-c"}

	resources := resourcestorev2.NewResourceServiceClient(conn)
	query := resourcestorev2.NewQueryServiceClient(conn)
	events := resourcestorev2.NewEventServiceClient(conn)

	// Create: a datasource and three studies under it, each payload a
	// member of the Resource oneof.
	batch := []*typev1.Resource{{
		Identifier: ds,
		License:    proto.String("CC-BY-4.0"),
		Payload:    &typev1.Resource_Datasource{Datasource: &typev1.Datasource{Name: proto.String("Go hospital"), Country: proto.String("NL")}},
	}}
	for _, st := range studies {
		batch = append(batch, &typev1.Resource{
			Identifier:       st,
			ParentIdentifier: proto.String(ds),
			Payload:          &typev1.Resource_Study{Study: &typev1.Study{Modality: proto.String("CT"), StudyDate: proto.String("2024-02-29")}},
		})
	}
	created, err := resources.Create(ctx, &typev1.CreateRequest{Resources: batch})
	if err != nil {
		fail("create", err)
		return
	}
	check("created", created.GetCreated(), int64(4))

	read, err := resources.Read(ctx, &typev1.ReadRequest{Identifiers: []string{ds, studies[0], "missing"}})
	if err != nil {
		fail("read", err)
		return
	}
	ids := []string{}
	for _, r := range read.GetResources() {
		ids = append(ids, r.GetIdentifier())
	}
	check("read identifiers", ids, []string{ds, studies[0]})
	if len(read.GetResources()) != 2 {
		return
	}
	_, isDatasource := read.GetResources()[0].GetPayload().(*typev1.Resource_Datasource)
	_, isStudy := read.GetResources()[1].GetPayload().(*typev1.Resource_Study)
	check("payload oneof", []bool{isDatasource, isStudy}, []bool{true, true})
	check("datasource name", read.GetResources()[0].GetDatasource().GetName(), "Go hospital")
	check("version", read.GetResources()[0].GetVersion(), int64(1))

	// Timestamps are RFC 3339 strings with microseconds (docs/clients.md):
	// time.RFC3339Nano keeps all six digits.
	createdAt := read.GetResources()[1].GetCreatedAt()
	at, err := time.Parse(time.RFC3339Nano, createdAt)
	if err != nil {
		fail("created_at parses", err)
	} else {
		check("created_at round-trips with microseconds", at.UTC().Format("2006-01-02T15:04:05.000000Z07:00"), createdAt)
	}

	// Read at an as_of: the study as it was when created, after an update.
	updated, err := resources.Update(ctx, &typev1.UpdateRequest{Updates: map[string]*typev1.ResourceUpdate{
		studies[0]: {
			Payload:    &typev1.ResourceUpdate_Study{Study: &typev1.Study{Modality: proto.String("MR")}},
			UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"modality"}},
		},
	}})
	if err != nil {
		fail("update", err)
		return
	}
	check("updated", updated.GetUpdated(), int64(1))
	now, err := resources.Read(ctx, &typev1.ReadRequest{Identifiers: []string{studies[0]}})
	if err != nil {
		fail("read now", err)
		return
	}
	then, err := resources.Read(ctx, &typev1.ReadRequest{Identifiers: []string{studies[0]}, AsOf: proto.String(createdAt)})
	if err != nil {
		fail("read as_of", err)
		return
	}
	check("modality now", now.GetResources()[0].GetStudy().GetModality(), "MR")
	check("version now", now.GetResources()[0].GetVersion(), int64(2))
	check("modality as_of creation", then.GetResources()[0].GetStudy().GetModality(), "CT")

	// A query paged by cursor: two pages of the three studies.
	selection := func() *typev1.QueryRequest {
		return &typev1.QueryRequest{PayloadType: proto.String("study"), ParentIdentifier: proto.String(ds), SortBy: proto.String("identifier"), SortOrder: proto.String("asc")}
	}
	first := selection()
	first.Limit = proto.Int32(2)
	page1, err := query.Query(ctx, first)
	if err != nil {
		fail("query page 1", err)
		return
	}
	paged := []string{}
	for _, r := range page1.GetResults() {
		paged = append(paged, r.GetIdentifier())
	}
	check("page 1 has a next_cursor", page1.NextCursor != nil, true)
	second := selection()
	second.Limit = proto.Int32(2)
	second.Cursor = page1.NextCursor
	page2, err := query.Query(ctx, second)
	if err != nil {
		fail("query page 2", err)
		return
	}
	for _, r := range page2.GetResults() {
		paged = append(paged, r.GetIdentifier())
	}
	check("pages in order", paged, studies)
	check("page 2 is the last", page2.NextCursor == nil, true)

	filtered := selection()
	filtered.Filters = []*typev1.Condition{{Field: "modality", Op: "eq", Value: structpb.NewStringValue("CT")}}
	count, err := query.Count(ctx, filtered)
	if err != nil {
		fail("count", err)
		return
	}
	check("count of CT studies", count.GetCount(), int64(2))

	// QueryParquet: the file arrives in HttpBody chunks.
	parquet, err := query.QueryParquet(ctx, selection())
	if err != nil {
		fail("query parquet", err)
		return
	}
	var file bytes.Buffer
	contentType := ""
	for {
		chunk, err := parquet.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			fail("query parquet stream", err)
			return
		}
		if contentType == "" {
			contentType = chunk.GetContentType()
		}
		file.Write(chunk.GetData())
	}
	checkParquet(file.Bytes(), contentType)

	// Watch: the first event of this run's subtree, then stop.
	watchCtx, stopWatch := context.WithCancel(ctx)
	stream, err := events.Watch(watchCtx, &typev1.WatchRequest{Since: proto.String("2000-01-01T00:00:00Z"), RootIdentifier: proto.String(ds)})
	if err != nil {
		stopWatch()
		fail("watch", err)
		return
	}
	message, err := stream.Recv()
	stopWatch()
	if err != nil {
		fail("watch receive", err)
	} else if len(message.GetEvents()) == 0 {
		failures = append(failures, "watch: a message without events")
	} else {
		e := message.GetEvents()[0]
		check("first event", []interface{}{e.GetIdentifier(), e.GetKind(), e.GetVersion()}, []interface{}{ds, "created", int64(1)})
	}

	// An error's reason, from its google.rpc.ErrorInfo detail.
	_, err = resources.Read(ctx, &typev1.ReadRequest{Identifiers: []string{ds}, AsOf: proto.String("yesterday")})
	st := status.Convert(err)
	check("bad as_of code", st.Code(), codes.InvalidArgument)
	reason, domain := "", ""
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			reason, domain = info.GetReason(), info.GetDomain()
		}
	}
	check("bad as_of reason", []string{reason, domain}, []string{"INVALID_AS_OF", "resourcestore"})

	// Health.
	health, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		fail("health", err)
	} else {
		check("health", health.GetStatus(), healthpb.HealthCheckResponse_SERVING)
	}

	// Reflection: grpc-go 1.33 has a client for v1alpha only; the server
	// answers both v1 and v1alpha.
	refl, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		fail("reflection", err)
		return
	}
	if err := refl.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		fail("reflection send", err)
		return
	}
	answer, err := refl.Recv()
	if err != nil {
		fail("reflection receive", err)
		return
	}
	// Half-close and read to the end, so the server ends the stream itself.
	if err := refl.CloseSend(); err != nil {
		fail("reflection close", err)
	}
	if _, err := refl.Recv(); err != io.EOF {
		fail("reflection end", err)
	}
	services := map[string]bool{}
	for _, s := range answer.GetListServicesResponse().GetService() {
		services[s.GetName()] = true
	}
	check("reflection lists the v2 ResourceService", services["resourcestore.v2.ResourceService"], true)
	check("reflection lists grpc.health.v1.Health", services["grpc.health.v1.Health"], true)
}

// checkParquet checks the frame of a parquet file: the magic at both ends,
// a footer length that fits, and the selected columns named in the footer.
func checkParquet(file []byte, contentType string) {
	check("parquet content type", contentType != "", true)
	if len(file) < 12 {
		failures = append(failures, fmt.Sprintf("parquet: %d bytes", len(file)))
		return
	}
	check("parquet magic", []string{string(file[:4]), string(file[len(file)-4:])}, []string{"PAR1", "PAR1"})
	footer := int(binary.LittleEndian.Uint32(file[len(file)-8 : len(file)-4]))
	check("parquet footer fits", footer > 0 && footer+12 <= len(file), true)
	if footer > 0 && footer+12 <= len(file) {
		meta := string(file[len(file)-8-footer : len(file)-8])
		check("parquet columns", []bool{strings.Contains(meta, "identifier"), strings.Contains(meta, "modality")}, []bool{true, true})
	}
}
