// grpc.reflection.v1.ServerReflection, answered from the descriptors that
// protoc-gen-es embeds in the generated code: no hand-written descriptors.
import { toBinary, type DescFile, type DescMessage, type DescService } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { Code, type ServiceImpl } from "@connectrpc/connect";
import {
  type ServerReflection,
  type ServerReflectionResponse,
} from "../../gen/grpc/reflection/v1/reflection_pb.js";

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
          value: { $typeName: "grpc.reflection.v1.FileDescriptorResponse", fileDescriptorProto: withDependencies(file) },
        };
  return {
    async *serverReflectionInfo(requests) {
      for await (const req of requests) {
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
