/**
 * Loom from TypeScript: weaves one email as seen from two mailboxes, prints the unified
 * thread that joins them, then reads the google.rpc.BadRequest field violations that an
 * INVALID_ARGUMENT error carries.
 *
 * The .proto files are loaded at runtime with @grpc/proto-loader (no generated code):
 *
 *   npx tsx src/example.ts 127.0.0.1:50051
 *
 * Against a server with auth on, set LOOM_TOKEN to a bearer token (`loom token --scope
 * threadweaver:write`); against a TLS server, LOOM_TLS_CA to the PEM CA of its certificate.
 */
import * as fs from "node:fs";
import * as path from "node:path";

import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import * as protobuf from "protobufjs";

/** protos/ at the repository root; src/ and dist/ both sit one level below clients/typescript. */
const PROTOS = path.resolve(__dirname, "..", "..", "..", "protos");

/** Field names stay as in the .proto files (snake_case); int64 arrives as a string. */
const LOADER_OPTIONS: protoLoader.Options = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
  includeDirs: [PROTOS],
};

interface Timestamp {
  seconds: string | number;
  nanos?: number;
}

interface WovenMessage {
  gid: string;
  thread_id: string;
  rfc_message_id: string;
  sent_at?: Timestamp;
}

interface WeaveMessageResponse {
  unified_thread_id: string;
  merged: boolean;
}

interface GetUnifiedThreadResponse {
  unified_thread_ids: string[];
  threads: { gid: string; thread_id: string }[];
  stats: { message_count: string; last_message_at: Timestamp | null } | null;
  oversized: boolean;
}

type Unary<Req, Res> = (
  request: Req,
  metadata: grpc.Metadata,
  options: grpc.CallOptions,
  callback: (error: grpc.ServiceError | null, response?: Res) => void,
) => grpc.ClientUnaryCall;

/** The ThreadWeaver methods this example calls, as proto-loader builds them. */
interface ThreadWeaverClient extends grpc.Client {
  WeaveMessage: Unary<{ message: WovenMessage }, WeaveMessageResponse>;
  GetUnifiedThread: Unary<{ gid: string; thread_id: string }, GetUnifiedThreadResponse>;
}

type ClientConstructor<T> = new (
  address: string,
  credentials: grpc.ChannelCredentials,
) => T;

/** google.rpc.Status and BadRequest, declared inline: they are not part of Loom's protos. */
const RPC_TYPES = protobuf.parse(
  `syntax = "proto3";
   package google.rpc;
   message Any { string type_url = 1; bytes value = 2; }
   message Status { int32 code = 1; string message = 2; repeated Any details = 3; }
   message BadRequest {
     message FieldViolation { string field = 1; string description = 2; }
     repeated FieldViolation field_violations = 1;
   }`,
  { keepCase: true },
).root;

interface FieldViolation {
  field: string;
  description: string;
}

/** The bearer token of every call ($LOOM_TOKEN), as `authorization` metadata. */
function callMetadata(): grpc.Metadata {
  const metadata = new grpc.Metadata();
  const token = process.env.LOOM_TOKEN;
  if (token) metadata.set("authorization", `Bearer ${token}`);
  return metadata;
}

/** TLS when $LOOM_TLS_CA names the server's CA, plaintext otherwise (local development). */
function channelCredentials(): grpc.ChannelCredentials {
  const ca = process.env.LOOM_TLS_CA;
  return ca ? grpc.credentials.createSsl(fs.readFileSync(ca)) : grpc.credentials.createInsecure();
}

/** Promisifies one unary call with a deadline. */
function call<Req, Res>(method: Unary<Req, Res>, client: grpc.Client, request: Req): Promise<Res> {
  const deadline = new Date(Date.now() + 10_000);
  return new Promise((resolve, reject) => {
    method.call(client, request, callMetadata(), { deadline }, (error, response) => {
      if (error) reject(error);
      else resolve(response as Res);
    });
  });
}

/** The BadRequest field violations carried in the error's grpc-status-details-bin trailer. */
function fieldViolations(error: grpc.ServiceError): FieldViolation[] {
  const [details] = error.metadata.get("grpc-status-details-bin");
  if (details === undefined || typeof details === "string") return [];
  const status = RPC_TYPES.lookupType("google.rpc.Status").decode(details) as unknown as {
    details: { type_url: string; value: Uint8Array }[];
  };
  const badRequest = RPC_TYPES.lookupType("google.rpc.BadRequest");
  return status.details
    .filter((any) => any.type_url.endsWith("/google.rpc.BadRequest"))
    .flatMap(
      (any) =>
        (badRequest.decode(any.value) as unknown as { field_violations: FieldViolation[] })
          .field_violations,
    );
}

function isServiceError(error: unknown): error is grpc.ServiceError {
  return error instanceof Error && "code" in error && "metadata" in error;
}

async function main(target: string): Promise<void> {
  const definition = protoLoader.loadSync(
    path.join(PROTOS, "loom", "v1", "threadweaver.proto"),
    LOADER_OPTIONS,
  );
  const loom = grpc.loadPackageDefinition(definition) as unknown as {
    loom: { v1: { ThreadWeaver: ClientConstructor<ThreadWeaverClient> } };
  };
  const weaver = new loom.loom.v1.ThreadWeaver(target, channelCredentials());

  // One email, as seen in the sender's and in the recipient's mailbox: different threads, one
  // RFC 822 Message-ID, which is what unifies them.
  const suffix = `${Date.now()}-${process.pid}`;
  const messageId = `<ts-example-${suffix}@example.com>`;
  const sentAt: Timestamp = { seconds: 1_700_000_000, nanos: 0 };
  const copies: WovenMessage[] = [
    { gid: "alice", thread_id: `a-${suffix}`, rfc_message_id: messageId, sent_at: sentAt },
    { gid: "bob", thread_id: `b-${suffix}`, rfc_message_id: messageId, sent_at: sentAt },
  ];
  try {
    for (const message of copies) {
      const woven = await call(weaver.WeaveMessage, weaver, { message });
      console.log(
        `woven ${message.gid}/${message.thread_id} -> ${woven.unified_thread_id} ` +
          `(merged=${woven.merged})`,
      );
    }

    const unified = await call(weaver.GetUnifiedThread, weaver, {
      gid: copies[0].gid,
      thread_id: copies[0].thread_id,
    });
    console.log(
      `unified thread ${unified.unified_thread_ids[0]}: ${unified.threads.length} threads, ` +
        `${unified.stats?.message_count ?? 0} messages`,
    );
    for (const thread of unified.threads) console.log(`  thread ${thread.gid}/${thread.thread_id}`);

    // A message without a mailbox owner is invalid: the error names the field.
    try {
      await call(weaver.WeaveMessage, weaver, {
        message: { gid: "", thread_id: "t", rfc_message_id: messageId, sent_at: sentAt },
      });
      throw new Error("invalid request was accepted");
    } catch (error) {
      if (!isServiceError(error) || error.code !== grpc.status.INVALID_ARGUMENT) throw error;
      console.log(`rejected: INVALID_ARGUMENT: ${error.details}`);
      for (const violation of fieldViolations(error)) {
        console.log(`  field violation ${violation.field}: ${violation.description}`);
      }
    }
  } finally {
    weaver.close();
  }
}

main(process.argv[2] ?? "127.0.0.1:50051").catch((error: unknown) => {
  console.error(`example failed: ${error instanceof Error ? error.message : String(error)}`);
  process.exit(1);
});
