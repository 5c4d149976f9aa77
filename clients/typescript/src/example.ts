/**
 * Loom from TypeScript: weaves one email as seen from two mailboxes, prints the unified
 * thread that joins them, then reads the google.rpc.BadRequest field violations that an
 * INVALID_ARGUMENT error carries. Every call has a deadline and goes through the generated,
 * typed ThreadWeaverClient (src/gen).
 *
 *   node dist/example.js [--ca FILE] [--timeout SECONDS] [--service-config FILE |
 *                         --no-service-config] [--watch INBOX] [TARGET]
 *
 * With --watch INBOX it instead lists that inbox and prints every change to it until
 * interrupted (Ctrl-C), resuming the WatchInbox stream with its last token (src/watch.ts).
 *
 * TARGET (or --target, or $LOOM_TARGET) defaults to 127.0.0.1:50051. $LOOM_TOKEN is the
 * bearer token of a server with auth on (`loom token --scope threadweaver:write`); --ca (or
 * $LOOM_TLS_CA) the PEM CA of a TLS server's certificate. The channel loads
 * clients/service_config.json (or --service-config / $LOOM_SERVICE_CONFIG): per-method
 * timeouts, wait-for-ready and retries of UNAVAILABLE / RESOURCE_EXHAUSTED.
 *
 * A failure is one line on stderr, `loom: CODE: message`, and an exit code: 2 bad flag or
 * file, 3 UNAUTHENTICATED, 4 PERMISSION_DENIED, 5 UNAVAILABLE, 6 DEADLINE_EXCEEDED, 1 other.
 */
import * as path from "node:path";
import { parseArgs } from "node:util";

import * as grpc from "@grpc/grpc-js";

import {
  Connection,
  type ConnectOptions,
  describeFailure,
  EXIT_CODES,
  EXIT_USAGE,
  fieldViolations,
  isServiceError,
  loadServiceConfig,
  UsageError,
} from "./client";
import {
  GetUnifiedThreadRequest,
  ThreadWeaverClient,
  WeaveMessageRequest,
  WovenMessage,
} from "./gen/loom/v1/threadweaver";
import { InboxClient, inboxEventKindToJSON } from "./gen/loom/v1/inbox";
import { watchInbox } from "./watch";

/** clients/service_config.json; src/ and dist/ both sit one level below clients/typescript. */
const SERVICE_CONFIG = path.resolve(__dirname, "..", "..", "service_config.json");

const USAGE =
  "usage: example [--target HOST:PORT] [--ca FILE] [--timeout SECONDS] " +
  "[--service-config FILE | --no-service-config] [--watch INBOX] [TARGET]";

/** The command line and environment, as ConnectOptions (and the inbox to watch, if any). */
function parseOptions(argv: string[]): ConnectOptions & { watch?: string } {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        target: { type: "string" },
        ca: { type: "string" },
        timeout: { type: "string", default: "10" },
        "service-config": { type: "string" },
        "no-service-config": { type: "boolean", default: false },
        watch: { type: "string" },
      },
    });
  } catch (error) {
    throw new UsageError(`${error instanceof Error ? error.message : String(error)}; ${USAGE}`);
  }
  const { values, positionals } = parsed;
  if (positionals.length > 1) throw new UsageError(`one target at most; ${USAGE}`);
  const timeoutS = Number(values.timeout);
  if (!Number.isFinite(timeoutS) || timeoutS <= 0) {
    throw new UsageError(`--timeout must be a positive number of seconds, not ${values.timeout}`);
  }
  const env = process.env;
  const configFile = values["service-config"] ?? env.LOOM_SERVICE_CONFIG ?? SERVICE_CONFIG;
  return {
    target: values.target ?? positionals[0] ?? env.LOOM_TARGET ?? "127.0.0.1:50051",
    caFile: values.ca ?? (env.LOOM_TLS_CA || undefined),
    serviceConfig: values["no-service-config"] ? undefined : loadServiceConfig(configFile),
    token: env.LOOM_TOKEN || undefined,
    timeoutMs: timeoutS * 1000,
    watch: values.watch,
  };
}

/** Lists `inboxId` and prints every change to it until Ctrl-C. */
async function watch(options: ConnectOptions, inboxId: string): Promise<void> {
  const loom = new Connection(options);
  const inbox = loom.client(InboxClient);
  const stop = new AbortController();
  process.once("SIGINT", () => stop.abort());
  try {
    await watchInbox(
      loom,
      inbox,
      inboxId,
      {
        onList: (page) => console.log(`listed ${inboxId}: ${page.entries.length} threads`),
        onEvent: (event) =>
          console.log(
            `${inboxEventKindToJSON(event.kind)} threads=${event.threadIds.join(",")} ` +
              `message=${event.messageId} unread=${event.unreadCount}`,
          ),
      },
      stop.signal,
    );
  } finally {
    inbox.close();
  }
}

async function main(options: ConnectOptions): Promise<void> {
  const loom = new Connection(options);
  const weaver = loom.client(ThreadWeaverClient);

  // One email, as seen in the sender's and in the recipient's mailbox: different threads, one
  // RFC 822 Message-ID, which is what unifies them.
  const suffix = `${Date.now()}-${process.pid}`;
  const messageId = `<ts-example-${suffix}@example.com>`;
  const copy = (gid: string, threadId: string): WovenMessage =>
    WovenMessage.fromPartial({
      gid,
      threadId,
      rfcMessageId: messageId,
      sentAt: new Date(1_700_000_000_000),
    });
  const copies = [copy("alice", `a-${suffix}`), copy("bob", `b-${suffix}`)];
  try {
    for (const message of copies) {
      const request = WeaveMessageRequest.fromPartial({ message });
      const woven = await loom.unary(weaver, weaver.weaveMessage, request);
      console.log(
        `woven ${message.gid}/${message.threadId} -> ${woven.unifiedThreadId} ` +
          `(merged=${woven.merged})`,
      );
    }

    const { gid, threadId } = copies[0];
    const read = GetUnifiedThreadRequest.fromPartial({ gid, threadId });
    const unified = await loom.unary(weaver, weaver.getUnifiedThread, read);
    console.log(
      `unified thread ${unified.unifiedThreadIds[0]}: ${unified.threads.length} threads, ` +
        `${unified.stats?.messageCount ?? "0"} messages`,
    );
    for (const thread of unified.threads) console.log(`  thread ${thread.gid}/${thread.threadId}`);

    // A message without a mailbox owner is invalid: the error names the field.
    try {
      const invalid = WeaveMessageRequest.fromPartial({ message: copy("", "t") });
      await loom.unary(weaver, weaver.weaveMessage, invalid);
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

/** Every failure ends as one line on stderr and an exit code, never a stack trace. */
function fail(error: unknown): never {
  if (isServiceError(error)) {
    console.error(describeFailure(error));
    process.exit(EXIT_CODES[error.code] ?? 1);
  }
  const message = error instanceof Error ? error.message : String(error);
  console.error(`loom: ${message}`);
  process.exit(error instanceof UsageError ? EXIT_USAGE : 1);
}

try {
  const options = parseOptions(process.argv.slice(2));
  (options.watch ? watch(options, options.watch) : main(options)).catch(fail);
} catch (error) {
  fail(error);
}
