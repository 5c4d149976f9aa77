/**
 * A channel to Loom and typed calls over it: TLS with a CA file, the bearer token, the shared
 * gRPC service config (per-method timeouts, wait-for-ready, retries), a deadline on every call,
 * and the google.rpc.BadRequest field violations of an INVALID_ARGUMENT error.
 *
 * The messages and clients are generated (src/gen, ./generate.sh): a request or response field
 * that is not in the .proto is a compile error.
 */
import * as fs from "node:fs";

import * as grpc from "@grpc/grpc-js";

import {
  BadRequest,
  type BadRequest_FieldViolation,
  ErrorInfo,
} from "./gen/google/rpc/error_details";
import { Status } from "./gen/google/rpc/status";

/** How to reach Loom. */
export interface ConnectOptions {
  /** host:port of the server. */
  target: string;
  /** PEM file of the CA that issued the server's certificate; plaintext when absent. */
  caFile?: string;
  /** The service config JSON (clients/service_config.json), or none. */
  serviceConfig?: string;
  /** Bearer token sent as `authorization` metadata on every call. */
  token?: string;
  /** Deadline of each call, in milliseconds. */
  timeoutMs: number;
}

/** A bad flag, file or setting: the caller's to fix, reported without a stack trace. */
export class UsageError extends Error {}

/** A generated client's constructor, e.g. ThreadWeaverClient. */
type ClientConstructor<C extends grpc.Client> = new (
  address: string,
  credentials: grpc.ChannelCredentials,
  options?: Partial<grpc.ClientOptions>,
) => C;

/** The four-argument overload every generated unary method has. */
type UnaryMethod<Req, Res> = (
  request: Req,
  metadata: grpc.Metadata,
  options: Partial<grpc.CallOptions>,
  callback: (error: grpc.ServiceError | null, response: Res) => void,
) => grpc.ClientUnaryCall;

/** One channel's settings, shared by every client made from it. */
export class Connection {
  private readonly credentials: grpc.ChannelCredentials;
  private readonly channelOptions: Partial<grpc.ClientOptions>;

  constructor(private readonly options: ConnectOptions) {
    this.credentials = options.caFile
      ? grpc.credentials.createSsl(readFile(options.caFile, "CA file"))
      : grpc.credentials.createInsecure();
    this.channelOptions = options.serviceConfig
      ? { "grpc.service_config": options.serviceConfig }
      : {};
  }

  /** A generated client (ThreadWeaverClient, InboxClient, ...) on this connection. */
  client<C extends grpc.Client>(Client: ClientConstructor<C>): C {
    try {
      return new Client(this.options.target, this.credentials, this.channelOptions);
    } catch (error) {
      // grpc-js validates the target and the service config here.
      const reason = error instanceof Error ? error.message : String(error);
      throw new UsageError(`cannot open a channel to ${this.options.target}: ${reason}`);
    }
  }

  /** Calls one unary method with the token and a deadline; rejects with its ServiceError. */
  unary<C extends grpc.Client, Req, Res>(
    client: C,
    method: UnaryMethod<Req, Res>,
    request: Req,
  ): Promise<Res> {
    const metadata = this.metadata();
    const deadline = new Date(Date.now() + this.options.timeoutMs);
    return new Promise((resolve, reject) => {
      method.call(client, request, metadata, { deadline }, (error, response) => {
        if (error) reject(this.explained(client, error));
        else resolve(response);
      });
    });
  }

  /** What every call sends: the bearer token as `authorization`, when there is one. */
  metadata(): grpc.Metadata {
    const metadata = new grpc.Metadata();
    if (this.options.token) metadata.set("authorization", `Bearer ${this.options.token}`);
    return metadata;
  }

  /** A deadline missed while waiting for a connection says so (grpc-js's message does not). */
  private explained(client: grpc.Client, error: grpc.ServiceError): grpc.ServiceError {
    const state = client.getChannel().getConnectivityState(false);
    if (error.code === grpc.status.DEADLINE_EXCEEDED && state !== grpc.connectivityState.READY) {
      const name = grpc.connectivityState[state];
      error.details = `${error.details}; not connected to ${this.options.target} (${name})`;
    }
    return error;
  }
}

/** Reads a file the user named, as a UsageError naming it when it cannot be read. */
export function readFile(file: string, what: string): Buffer {
  try {
    return fs.readFileSync(file);
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new UsageError(`cannot read the ${what} ${file}: ${reason}`);
  }
}

/** The service config file as grpc-js takes it (one JSON string), checked to be JSON. */
export function loadServiceConfig(file: string): string {
  const text = readFile(file, "service config").toString("utf8");
  try {
    return JSON.stringify(JSON.parse(text));
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new UsageError(`the service config ${file} is not JSON: ${reason}`);
  }
}

export function isServiceError(error: unknown): error is grpc.ServiceError {
  return error instanceof Error && "code" in error && "metadata" in error;
}

/** The BadRequest field violations carried in the error's grpc-status-details-bin trailer. */
export function fieldViolations(error: grpc.ServiceError): BadRequest_FieldViolation[] {
  const [details] = error.metadata.get("grpc-status-details-bin");
  if (details === undefined || typeof details === "string") return [];
  return Status.decode(details)
    .details.filter((any) => any.typeUrl.endsWith("/google.rpc.BadRequest"))
    .flatMap((any) => BadRequest.decode(any.value).fieldViolations);
}

/** The google.rpc.ErrorInfo reason in the error's grpc-status-details-bin trailer, e.g.
 * "RESYNC_REQUIRED" (WatchInbox); undefined without one. */
export function errorReason(error: grpc.ServiceError): string | undefined {
  const [details] = error.metadata.get("grpc-status-details-bin");
  if (details === undefined || typeof details === "string") return undefined;
  const info = Status.decode(details).details.find((any) =>
    any.typeUrl.endsWith("/google.rpc.ErrorInfo"),
  );
  return info === undefined ? undefined : ErrorInfo.decode(info.value).reason;
}

/** The process exit code of each failure a user can fix; anything else exits 1. */
export const EXIT_CODES: Readonly<Partial<Record<grpc.status, number>>> = {
  [grpc.status.UNAUTHENTICATED]: 3,
  [grpc.status.PERMISSION_DENIED]: 4,
  [grpc.status.UNAVAILABLE]: 5,
  [grpc.status.DEADLINE_EXCEEDED]: 6,
};
export const EXIT_USAGE = 2;

/** One line for a failed call: `loom: CODE: message`, with what to do for the common ones. */
export function describeFailure(error: grpc.ServiceError): string {
  const tls = /certificate|ssl|tls/i.test(error.details);
  const hint: Partial<Record<grpc.status, string>> = {
    [grpc.status.UNAUTHENTICATED]: "set LOOM_TOKEN to a valid bearer token (`loom token`)",
    [grpc.status.UNAVAILABLE]: tls
      ? "does --ca name the CA that issued the server's certificate?"
      : "is the server up at that address?",
    [grpc.status.DEADLINE_EXCEEDED]:
      "no answer within the deadline; the service config waits for the server to be ready, " +
      "--no-service-config fails at once with the connection error",
  };
  const name = grpc.status[error.code] ?? `code ${error.code}`;
  const extra = hint[error.code as grpc.status];
  return `loom: ${name}: ${error.details}${extra ? ` (${extra})` : ""}`;
}
