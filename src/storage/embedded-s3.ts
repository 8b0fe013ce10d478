// The embedded default: an in-process s3rver on a folder, so a service (or a
// test) without S3 configured still has real presigned URLs to hand out.
import { mkdir } from "node:fs/promises";
import type { Server } from "node:http";
import S3rver from "s3rver";

/** The one access key s3rver knows (it does not verify SigV4 signatures). */
export const EMBEDDED_CREDENTIALS = { accessKeyId: "S3RVER", secretAccessKey: "S3RVER" } as const;

export interface EmbeddedS3Options {
  /** Folder that holds the buckets (created when missing). */
  readonly directory: string;
  /** Bucket to create on start (kept when it exists already). */
  readonly bucket: string;
  /** Interface to bind; loopback by default because s3rver checks no signatures. */
  readonly host?: string;
  /** 0 (the default) picks a free port. */
  readonly port?: number;
}

// The explorer (served by the service on a loopback port) uploads through
// presigned URLs straight to this server, another origin: pages on loopback
// may PUT and GET, pages on any other site may not. A real bucket's CORS is
// its operator's to set (README).
const LOOPBACK_CORS = `<CORSConfiguration>
  <CORSRule>
    <AllowedOrigin>http://127.0.0.1:*</AllowedOrigin>
    <AllowedOrigin>http://localhost:*</AllowedOrigin>
    <AllowedMethod>GET</AllowedMethod>
    <AllowedMethod>HEAD</AllowedMethod>
    <AllowedMethod>PUT</AllowedMethod>
    <AllowedHeader>*</AllowedHeader>
    <ExposeHeader>ETag</ExposeHeader>
    <MaxAgeSeconds>3600</MaxAgeSeconds>
  </CORSRule>
</CORSConfiguration>`;

export interface EmbeddedS3 {
  /** `http://host:port`, path-style. */
  readonly endpoint: string;
  close(): Promise<void>;
}

export async function startEmbeddedS3(options: EmbeddedS3Options): Promise<EmbeddedS3> {
  const host = options.host ?? "127.0.0.1";
  await mkdir(options.directory, { recursive: true });
  const server = new S3rver({
    address: host,
    port: options.port ?? 0,
    directory: options.directory,
    silent: true,
    // Path-style only: a bucket name in the Host header would need DNS.
    vhostBuckets: false,
    configureBuckets: [{ name: options.bucket, configs: [LOOPBACK_CORS] }],
  });
  const address = await server.run();
  // Node closes idle keep-alive sockets after 5 s, about when clients reuse
  // them, and a reused socket that the server just closed fails with
  // ECONNRESET (seen under load). Outliving the clients' idle timeout avoids
  // the race. s3rver keeps its server on an untyped field.
  const http = (server as unknown as { httpServer?: Server }).httpServer;
  if (http !== undefined) {
    http.keepAliveTimeout = 65_000;
    http.headersTimeout = 66_000;
  }
  let closed = false;
  return {
    endpoint: `http://${host}:${address.port}`,
    async close() {
      if (closed) return;
      closed = true;
      await server.close();
    },
  };
}
