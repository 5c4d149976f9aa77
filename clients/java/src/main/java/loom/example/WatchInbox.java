package loom.example;

import com.google.protobuf.Any;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.rpc.ErrorInfo;
import io.grpc.ManagedChannel;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.time.Duration;
import java.util.Iterator;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import loom.v1.InboxOuterClass.InboxEvent;
import loom.v1.InboxOuterClass.ListInboxRequest;
import loom.v1.InboxOuterClass.ListInboxResponse;
import loom.v1.InboxOuterClass.WatchInboxRequest;
import loom.v1.InboxGrpc;

/**
 * Follows one inbox with WatchInbox ({@code --watch INBOX}), resumed rather than restarted:
 * it lists the inbox, then watches from the listing's sync_token, so no change between the two
 * is missed, and prints every change until interrupted.
 *
 * <ul>
 *   <li>UNAVAILABLE (reason RESUME: the server drains or this reader is too slow; or the
 *       connection dropped): reconnect with the resume_token of the last event received, after
 *       a short jittered pause. The server replays exactly the events after it.
 *   <li>FAILED_PRECONDITION with reason RESYNC_REQUIRED: the token is older than the server's
 *       change log keeps, so list the inbox again and watch from the new sync_token.
 *   <li>Anything else (RESOURCE_EXHAUSTED: the server holds its maximum of streams;
 *       INVALID_ARGUMENT: a malformed token) is thrown.
 * </ul>
 *
 * <p>The service config retries WatchInbox only before its first event (with the same token);
 * after that, resuming is this loop's job.
 */
final class WatchInbox {
  private static final long INITIAL_BACKOFF_MS = 100;
  private static final long MAX_BACKOFF_MS = 2_000;
  /** Reconnects in a row that receive nothing before giving up. */
  private static final int MAX_RECONNECTS = 9;

  private final InboxGrpc.InboxBlockingStub inbox;
  private final Duration timeout;

  WatchInbox(ManagedChannel channel, Duration timeout) {
    this.inbox = InboxGrpc.newBlockingStub(channel);
    this.timeout = timeout;
  }

  /** Prints every change to {@code inboxId} until a failure a reconnect cannot cure. */
  void run(String inboxId) throws InterruptedException {
    String token = "";
    boolean mustList = true;
    int failures = 0;
    while (true) {
      if (mustList) {
        ListInboxResponse page =
            inbox
                .withDeadlineAfter(timeout.toMillis(), TimeUnit.MILLISECONDS)
                .listInbox(ListInboxRequest.newBuilder().setInboxId(inboxId).build());
        System.out.printf("listed %s: %d threads%n", inboxId, page.getEntriesCount());
        token = page.getSyncToken();
        mustList = false;
      }
      WatchInboxRequest request =
          WatchInboxRequest.newBuilder().setInboxId(inboxId).setResumeToken(token).build();
      // No deadline: a watch runs until it fails or the process ends.
      try {
        Iterator<InboxEvent> events = inbox.watchInbox(request);
        while (events.hasNext()) {
          InboxEvent event = events.next();
          failures = 0;
          if (!event.getResumeToken().isEmpty()) {
            token = event.getResumeToken();
          }
          System.out.printf(
              "%s threads=%s message=%d unread=%d%n",
              event.getKind(),
              String.join(",", event.getThreadIdsList()),
              event.getMessageId(),
              event.getUnreadCount());
        }
        return; // the server ended the stream
      } catch (StatusRuntimeException e) {
        Status.Code code = e.getStatus().getCode();
        if (code == Status.Code.UNAVAILABLE) {
          failures++;
          if (failures > MAX_RECONNECTS) {
            throw e;
          }
          long bound = Math.min(MAX_BACKOFF_MS, INITIAL_BACKOFF_MS << (failures - 1));
          Thread.sleep(ThreadLocalRandom.current().nextLong(bound + 1));
        } else if (code == Status.Code.FAILED_PRECONDITION
            && "RESYNC_REQUIRED".equals(reason(e))) {
          System.out.println("resync: " + e.getStatus().getDescription());
          mustList = true;
        } else {
          throw e;
        }
      }
    }
  }

  /** The google.rpc.ErrorInfo reason of a failed call, or null without one. */
  static String reason(StatusRuntimeException error) {
    com.google.rpc.Status status = StatusProto.fromThrowable(error);
    if (status == null) {
      return null;
    }
    for (Any detail : status.getDetailsList()) {
      if (detail.is(ErrorInfo.class)) {
        try {
          return detail.unpack(ErrorInfo.class).getReason();
        } catch (InvalidProtocolBufferException e) {
          throw new IllegalStateException("undecodable google.rpc.ErrorInfo detail", e);
        }
      }
    }
    return null;
  }
}
