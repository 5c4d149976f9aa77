/**
 * Following one inbox with WatchInbox, resumed rather than restarted: what every TypeScript
 * caller of WatchInbox needs around the generated InboxClient.watchInbox.
 *
 * - UNAVAILABLE (reason RESUME: the server drains or this reader is too slow; or the
 *   connection dropped): reconnect with the resume_token of the last event received, after a
 *   short jittered pause. The server replays exactly the events after it.
 * - FAILED_PRECONDITION with reason RESYNC_REQUIRED: the token is older than the server's
 *   change log keeps, so list the inbox again and watch from the new sync_token.
 * - Anything else (RESOURCE_EXHAUSTED: the server holds its maximum of streams;
 *   INVALID_ARGUMENT: a malformed token) rejects.
 *
 * The service config retries WatchInbox only before its first event (with the same token);
 * after that, resuming is this loop's job.
 */
import * as grpc from "@grpc/grpc-js";

import { type Connection, errorReason, isServiceError } from "./client";
import {
  type InboxClient,
  type InboxEvent,
  ListInboxRequest,
  type ListInboxResponse,
  WatchInboxRequest,
} from "./gen/loom/v1/inbox";

/** Pauses before a reconnect: at most 100 ms doubling to 2 s (full jitter). */
const INITIAL_BACKOFF_MS = 100;
const MAX_BACKOFF_MS = 2000;
/** Reconnects in a row that receive nothing before giving up. */
const MAX_RECONNECTS = 9;

export interface WatchHandlers {
  /** The first page of the inbox, listed before watching and again after a resync. */
  onList(page: ListInboxResponse): void;
  /** Each change, in the order the store applied them, with no gap and no duplicate. */
  onEvent(event: InboxEvent): void;
}

/**
 * Lists `inboxId`, then follows its changes from the listing's sync_token until `signal`
 * aborts (resolves) or a failure that a reconnect cannot cure (rejects with its ServiceError).
 */
export async function watchInbox(
  loom: Connection,
  inbox: InboxClient,
  inboxId: string,
  handlers: WatchHandlers,
  signal: AbortSignal,
): Promise<void> {
  let token = "";
  let mustList = true;
  let failures = 0;
  while (!signal.aborted) {
    if (mustList) {
      const listing = ListInboxRequest.fromPartial({ inboxId });
      const page = await loom.unary(inbox, inbox.listInbox, listing);
      handlers.onList(page);
      token = page.syncToken;
      mustList = false;
    }
    try {
      const request = WatchInboxRequest.fromPartial({ inboxId, resumeToken: token });
      await follow(loom, inbox, request, signal, (event) => {
        failures = 0;
        if (event.resumeToken) token = event.resumeToken;
        handlers.onEvent(event);
      });
      return; // the server ended the stream
    } catch (error) {
      if (signal.aborted) return;
      if (!isServiceError(error)) throw error;
      if (error.code === grpc.status.UNAVAILABLE) {
        failures += 1;
        if (failures > MAX_RECONNECTS) throw error;
        const boundMs = Math.min(MAX_BACKOFF_MS, INITIAL_BACKOFF_MS * 2 ** (failures - 1));
        await new Promise((resolve) => setTimeout(resolve, Math.random() * boundMs));
      } else if (
        error.code === grpc.status.FAILED_PRECONDITION &&
        errorReason(error) === "RESYNC_REQUIRED"
      ) {
        console.log(`resync: ${error.details}`);
        mustList = true;
      } else {
        throw error;
      }
    }
  }
}

/** Reads one WatchInbox stream until it ends (resolves) or fails (rejects); `signal`
 * cancels it, which also ends the stream on the server. */
function follow(
  loom: Connection,
  inbox: InboxClient,
  request: WatchInboxRequest,
  signal: AbortSignal,
  onEvent: (event: InboxEvent) => void,
): Promise<void> {
  return new Promise((resolve, reject) => {
    const call = inbox.watchInbox(request, loom.metadata());
    const cancel = (): void => call.cancel();
    signal.addEventListener("abort", cancel, { once: true });
    const settle = (error?: Error): void => {
      signal.removeEventListener("abort", cancel);
      if (error) reject(error);
      else resolve();
    };
    call.on("data", onEvent);
    call.on("error", settle); // a failed status: emitted before "end"
    call.on("end", () => settle());
  });
}
