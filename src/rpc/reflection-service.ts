// grpc.reflection.v1.ServerReflection, answered from the descriptors that
// protoc-gen-es embeds in the generated code: no hand-written descriptors.
// grpc.reflection.v1alpha (which many tools still speak) is the same service
// under its older package name, served by the same code.
import {
  clone,
  create,
  createFileRegistry,
  fromBinary,
  toBinary,
  type DescFile,
  type DescMessage,
  type DescService,
} from "@bufbuild/protobuf";
import type { GenService } from "@bufbuild/protobuf/codegenv2";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import {
  file_grpc_reflection_v1_reflection,
  ServerReflectionRequestSchema,
  ServerReflectionResponseSchema,
  type ServerReflection,
  type ServerReflectionRequest,
  type ServerReflectionResponse,
} from "../../gen/grpc/reflection/v1/reflection_pb.js";
import { canceled } from "../errors.js";

interface Index {
  readonly files: Map<string, DescFile>;
  readonly symbols: Map<string, DescFile>;
  readonly services: readonly string[];
}

function indexMessage(symbols: Map<string, DescFile>, file: DescFile, m: DescMessage): void {
  symbols.set(m.typeName, file);
  for (const f of m.fields) symbols.set(`${m.typeName}.${f.name}`, file);
  for (const e of m.nestedEnums) symbols.set(e.typeName, file);
  for (const n of m.nestedMessages) indexMessage(symbols, file, n);
  for (const x of m.nestedExtensions) symbols.set(x.typeName, file);
}

function buildIndex(services: readonly DescService[]): Index {
  const files = new Map<string, DescFile>();
  const symbols = new Map<string, DescFile>();
  const visit = (file: DescFile): void => {
    if (files.has(file.proto.name)) return;
    files.set(file.proto.name, file);
    for (const s of file.services) {
      symbols.set(s.typeName, file);
      for (const m of s.methods) symbols.set(`${s.typeName}.${m.name}`, file);
    }
    for (const m of file.messages) indexMessage(symbols, file, m);
    for (const e of file.enums) symbols.set(e.typeName, file);
    for (const x of file.extensions) symbols.set(x.typeName, file);
    for (const d of file.dependencies) visit(d);
  };
  for (const s of services) visit(s.file);
  return { files, symbols, services: [...new Set(services.map((s) => s.typeName))] };
}

/** The file first, then its transitive dependencies, each once. */
function withDependencies(file: DescFile): Uint8Array[] {
  const seen = new Set<string>();
  const out: Uint8Array[] = [];
  const add = (f: DescFile): void => {
    if (seen.has(f.proto.name)) return;
    seen.add(f.proto.name);
    out.push(toBinary(FileDescriptorProtoSchema, f.proto));
    for (const d of f.dependencies) add(d);
  };
  add(file);
  return out;
}

export function createReflectionService(services: readonly DescService[]): ServiceImpl<typeof ServerReflection> {
  const index = buildIndex(services);
  const notFoundResponse = (message: string): ServerReflectionResponse["messageResponse"] => ({
    case: "errorResponse",
    value: { $typeName: "grpc.reflection.v1.ErrorResponse", errorCode: Code.NotFound, errorMessage: message },
  });
  const files = (file: DescFile | undefined, what: string): ServerReflectionResponse["messageResponse"] =>
    file === undefined
      ? notFoundResponse(`${what} not found`)
      : {
          case: "fileDescriptorResponse",
          value: {
            $typeName: "grpc.reflection.v1.FileDescriptorResponse",
            fileDescriptorProto: withDependencies(file),
          },
        };
  /**
   * The requests, where the stream breaking under them (a tool that cuts
   * the connection when done, as `buf` does, never half-closing) is the
   * client going away: `canceled`, not an internal error with a stack.
   */
  async function* clientMayLeave(
    requests: AsyncIterable<ServerReflectionRequest>,
  ): AsyncIterable<ServerReflectionRequest> {
    try {
      yield* requests;
    } catch (err) {
      if (err instanceof ConnectError && err.code !== Code.Internal && err.code !== Code.Unknown) throw err;
      throw canceled("the client went away", err);
    }
  }
  return {
    async *serverReflectionInfo(requests) {
      for await (const req of clientMayLeave(requests)) {
        let messageResponse: ServerReflectionResponse["messageResponse"];
        const r = req.messageRequest;
        switch (r.case) {
          case "listServices":
            messageResponse = {
              case: "listServicesResponse",
              value: {
                $typeName: "grpc.reflection.v1.ListServiceResponse",
                service: index.services.map((name) => ({ $typeName: "grpc.reflection.v1.ServiceResponse", name })),
              },
            };
            break;
          case "fileByFilename":
            messageResponse = files(index.files.get(r.value), `file ${r.value}`);
            break;
          case "fileContainingSymbol":
            messageResponse = files(index.symbols.get(r.value), `symbol ${r.value}`);
            break;
          default:
            messageResponse = {
              case: "errorResponse",
              value: {
                $typeName: "grpc.reflection.v1.ErrorResponse",
                errorCode: Code.Unimplemented,
                errorMessage: "extensions are not served by reflection here",
              },
            };
        }
        yield {
          validHost: req.host,
          originalRequest: req,
          messageResponse,
        };
      }
    },
  };
}

type ServerReflectionV1alpha = GenService<{
  serverReflectionInfo: { methodKind: "bidi_streaming"; input: DescMessage; output: DescMessage };
}>;

/**
 * grpc.reflection.v1alpha.ServerReflection, built from v1's descriptor: v1
 * was published as v1alpha under a new package name, with the same messages
 * and field numbers, so renaming the package (and the type references) gives
 * v1alpha's wire format exactly.
 */
function v1alphaService(): ServerReflectionV1alpha {
  const v1 = file_grpc_reflection_v1_reflection.proto;
  const proto = clone(FileDescriptorProtoSchema, v1);
  const from = `.${v1.package}.`;
  const to = ".grpc.reflection.v1alpha.";
  const rename = (typeName: string): string =>
    typeName.startsWith(from) ? to + typeName.slice(from.length) : typeName;
  proto.name = "grpc/reflection/v1alpha/reflection.proto";
  proto.package = "grpc.reflection.v1alpha";
  // v1's language options name v1's packages; v1alpha is deprecated in favour of v1.
  proto.options = undefined;
  for (const m of proto.messageType) for (const f of m.field) f.typeName = rename(f.typeName);
  for (const svc of proto.service) {
    for (const m of svc.method) {
      m.inputType = rename(m.inputType);
      m.outputType = rename(m.outputType);
    }
  }
  const file = createFileRegistry(proto, () => undefined).getFile(proto.name);
  const service = file?.services[0];
  if (service === undefined) throw new Error("grpc.reflection.v1alpha: no service in the derived descriptor");
  return service as ServerReflectionV1alpha;
}

export const ServerReflectionV1alpha: ServerReflectionV1alpha = v1alphaService();

/** v1alpha's handler: each message crosses to v1 and back through its bytes, which the two share. */
export function createReflectionServiceV1alpha(
  v1: ServiceImpl<typeof ServerReflection>,
): ServiceImpl<ServerReflectionV1alpha> {
  const method = ServerReflectionV1alpha.method.serverReflectionInfo;
  return {
    async *serverReflectionInfo(requests, context: HandlerContext) {
      async function* asV1(): AsyncIterable<ServerReflectionRequest> {
        for await (const req of requests) yield fromBinary(ServerReflectionRequestSchema, toBinary(method.input, req));
      }
      for await (const res of v1.serverReflectionInfo(asV1(), context)) {
        yield fromBinary(
          method.output,
          toBinary(ServerReflectionResponseSchema, create(ServerReflectionResponseSchema, res)),
        );
      }
    },
  };
}
