package loom.example;

import com.google.protobuf.Any;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.protobuf.Timestamp;
import com.google.rpc.BadRequest;
import io.grpc.ConnectivityState;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import io.grpc.stub.StreamObserver;
import java.io.IOException;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.TimeUnit;
import java.util.logging.Level;
import java.util.logging.Logger;
import loom.v1.Common.ThreadRef;
import loom.v1.ThreadWeaverGrpc;
import loom.v1.Threadweaver.GetUnifiedThreadRequest;
import loom.v1.Threadweaver.GetUnifiedThreadResponse;
import loom.v1.Threadweaver.ResolveThreadsRequest;
import loom.v1.Threadweaver.ResolveThreadsResponse;
import loom.v1.Threadweaver.ResolvedThread;
import loom.v1.Threadweaver.WeaveMessageRequest;
import loom.v1.Threadweaver.WeaveMessageResponse;
import loom.v1.Threadweaver.WovenMessage;

/**
 * The Loom Java client example: weaves one email as seen from two mailboxes (blocking stub),
 * prints the unified thread that joins them, resolves both threads with the async stub, and
 * reads the google.rpc.BadRequest field violations of an INVALID_ARGUMENT error. Every call
 * has a deadline ({@code withDeadlineAfter}). With {@code --watch INBOX} it instead follows
 * that inbox with WatchInbox, resuming the stream with its last token ({@link WatchInbox}).
 *
 * <p>A failure prints one line on stderr, {@code loom: CODE: ...}, and exits with: 1 any other
 * failure, 2 a bad command line or unreadable file, 3 UNAUTHENTICATED, 4 PERMISSION_DENIED,
 * 5 UNAVAILABLE, 6 DEADLINE_EXCEEDED.
 */
public final class Example {
  static final int EXIT_FAILED = 1;
  static final int EXIT_USAGE = 2;
  static final int EXIT_UNAUTHENTICATED = 3;
  static final int EXIT_PERMISSION_DENIED = 4;
  static final int EXIT_UNAVAILABLE = 5;
  static final int EXIT_DEADLINE_EXCEEDED = 6;

  private static final Metadata.Key<String> REQUEST_ID =
      Metadata.Key.of("x-request-id", Metadata.ASCII_STRING_MARSHALLER);

  /**
   * grpc-java logs a failed name resolution or connection as a WARNING with the cause's stack
   * trace; the example reports each failed call itself in one line, so only SEVERE is kept.
   * Held here because java.util.logging keeps loggers weakly.
   */
  private static final Logger GRPC_LOGGER = Logger.getLogger("io.grpc");

  private final ThreadWeaverGrpc.ThreadWeaverBlockingStub blocking;
  private final ThreadWeaverGrpc.ThreadWeaverStub async;
  private final Duration timeout;

  private Example(ManagedChannel channel, Duration timeout) {
    this.blocking = ThreadWeaverGrpc.newBlockingStub(channel);
    this.async = ThreadWeaverGrpc.newStub(channel);
    this.timeout = timeout;
  }

  public static void main(String[] args) {
    GRPC_LOGGER.setLevel(Level.SEVERE);
    System.exit(run(args));
  }

  static int run(String[] args) {
    Options options;
    try {
      options = Options.parse(args, System.getenv("LOOM_TOKEN"));
    } catch (Options.UsageException e) {
      if (e.getMessage().isEmpty()) {
        System.out.println(Options.USAGE);
        return 0;
      }
      System.err.println("loom: " + e.getMessage() + "\n" + Options.USAGE);
      return EXIT_USAGE;
    }
    ManagedChannel channel;
    try {
      channel = Channels.open(options);
    } catch (IOException | IllegalArgumentException e) {
      System.err.println("loom: " + e.getMessage());
      return EXIT_USAGE;
    }
    try {
      if (options.watch() != null) {
        new WatchInbox(channel, options.timeout()).run(options.watch());
      } else {
        new Example(channel, options.timeout()).weaveAndRead();
      }
      return 0;
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return EXIT_FAILED;
    } catch (StatusRuntimeException e) {
      return report(e, options, channel);
    } catch (IllegalStateException e) {
      System.err.println("loom: " + e.getMessage());
      return EXIT_FAILED;
    } finally {
      channel.shutdownNow();
      try {
        channel.awaitTermination(5, TimeUnit.SECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
  }

  private void weaveAndRead() {
    // One email, as seen in the sender's and in the recipient's mailbox: the two copies live
    // in different threads but share the RFC 822 Message-ID, which is what unifies them.
    Instant now = Instant.now();
    long suffix = now.getEpochSecond() * 1_000_000_000L + now.getNano();
    String messageId = "<java-example-" + suffix + "@example.com>";
    Timestamp sentAt = Timestamp.newBuilder().setSeconds(1_700_000_000L).build();
    List<WovenMessage> copies =
        List.of(
            woven("alice", "a-" + suffix, messageId, sentAt),
            woven("bob", "b-" + suffix, messageId, sentAt));

    // Blocking stub: each call waits for its answer, bounded by its own deadline.
    for (WovenMessage message : copies) {
      WeaveMessageResponse woven =
          blocking
              .withDeadlineAfter(timeout.toMillis(), TimeUnit.MILLISECONDS)
              .weaveMessage(WeaveMessageRequest.newBuilder().setMessage(message).build());
      System.out.printf(
          "woven %s/%s -> %s (merged=%s)%n",
          message.getGid(), message.getThreadId(), woven.getUnifiedThreadId(), woven.getMerged());
    }

    GetUnifiedThreadResponse unified =
        blocking
            .withDeadlineAfter(timeout.toMillis(), TimeUnit.MILLISECONDS)
            .getUnifiedThread(
                GetUnifiedThreadRequest.newBuilder()
                    .setGid(copies.get(0).getGid())
                    .setThreadId(copies.get(0).getThreadId())
                    .build());
    System.out.printf(
        "unified thread %s: %d threads, %d messages%n",
        unified.getUnifiedThreadIds(0),
        unified.getThreadsCount(),
        unified.getStats().getMessageCount());
    for (ThreadRef thread : unified.getThreadsList()) {
      System.out.printf("  thread %s/%s%n", thread.getGid(), thread.getThreadId());
    }

    // Async stub: the call returns at once; the answer arrives on a StreamObserver.
    ResolveThreadsRequest.Builder resolve = ResolveThreadsRequest.newBuilder();
    for (WovenMessage message : copies) {
      resolve.addThreads(
          ThreadRef.newBuilder().setGid(message.getGid()).setThreadId(message.getThreadId()));
    }
    CompletableFuture<ResolveThreadsResponse> resolved = new CompletableFuture<>();
    async
        .withDeadlineAfter(timeout.toMillis(), TimeUnit.MILLISECONDS)
        .resolveThreads(resolve.build(), completing(resolved));
    for (ResolvedThread thread : await(resolved).getThreadsList()) {
      System.out.printf(
          "resolved %s/%s -> %s%n",
          thread.getThread().getGid(),
          thread.getThread().getThreadId(),
          thread.getUnifiedThreadId());
    }

    // A message without a mailbox owner is invalid: the error names the field.
    WovenMessage ownerless = copies.get(0).toBuilder().clearGid().build();
    try {
      blocking
          .withDeadlineAfter(timeout.toMillis(), TimeUnit.MILLISECONDS)
          .weaveMessage(WeaveMessageRequest.newBuilder().setMessage(ownerless).build());
    } catch (StatusRuntimeException e) {
      if (e.getStatus().getCode() != Status.Code.INVALID_ARGUMENT) {
        throw e;
      }
      printViolations(e);
      return;
    }
    throw new IllegalStateException("the invalid request (no gid) was accepted");
  }

  private static WovenMessage woven(String gid, String threadId, String rfc, Timestamp sentAt) {
    return WovenMessage.newBuilder()
        .setGid(gid)
        .setThreadId(threadId)
        .setRfcMessageId(rfc)
        .setSentAt(sentAt)
        .build();
  }

  /** An observer of a unary call that completes {@code future} with its answer or error. */
  private static <T> StreamObserver<T> completing(CompletableFuture<T> future) {
    return new StreamObserver<>() {
      @Override
      public void onNext(T value) {
        future.complete(value);
      }

      @Override
      public void onError(Throwable error) {
        future.completeExceptionally(error);
      }

      @Override
      public void onCompleted() {}
    };
  }

  /** The future's value; its gRPC error is rethrown as it came, not wrapped. */
  private static <T> T await(CompletableFuture<T> future) {
    try {
      return future.join();
    } catch (CompletionException e) {
      if (e.getCause() instanceof StatusRuntimeException status) {
        throw status;
      }
      throw e;
    }
  }

  /** The google.rpc.BadRequest field violations carried in the error's status details. */
  private static void printViolations(StatusRuntimeException error) {
    System.out.printf(
        "rejected: %s: %s%n", error.getStatus().getCode(), error.getStatus().getDescription());
    com.google.rpc.Status status = StatusProto.fromThrowable(error);
    if (status == null) {
      return;
    }
    for (Any detail : status.getDetailsList()) {
      if (!detail.is(BadRequest.class)) {
        continue;
      }
      try {
        for (BadRequest.FieldViolation violation :
            detail.unpack(BadRequest.class).getFieldViolationsList()) {
          System.out.printf(
              "  field violation %s: %s%n", violation.getField(), violation.getDescription());
        }
      } catch (InvalidProtocolBufferException e) {
        throw new IllegalStateException("undecodable google.rpc.BadRequest detail", e);
      }
    }
  }

  /** One line on stderr saying what failed, and the exit code of that failure. */
  private static int report(StatusRuntimeException error, Options options, ManagedChannel channel) {
    Status status = error.getStatus();
    // grpc-java's own descriptions may run over several lines ("io exception\nChannel
    // Pipeline: ..."): the first says what happened.
    String description = firstLine(status.getDescription());
    String target = options.target();
    Metadata trailers = error.getTrailers();
    String requestId = trailers == null ? null : trailers.get(REQUEST_ID);
    String suffix = requestId == null ? "" : " (request id " + requestId + ")";
    String line;
    int exit;
    switch (status.getCode()) {
      case UNAUTHENTICATED -> {
        String hint =
            options.token() == null ? "no token sent: set $LOOM_TOKEN" : "check $LOOM_TOKEN";
        line = description + "; " + hint + suffix;
        exit = EXIT_UNAUTHENTICATED;
      }
      case PERMISSION_DENIED -> {
        line = description + suffix;
        exit = EXIT_PERMISSION_DENIED;
      }
      case UNAVAILABLE -> {
        // A cause means the call never reached the server (refused, TLS handshake, DNS...);
        // without one, the server itself answered UNAVAILABLE.
        line =
            status.getCause() == null
                ? description + suffix
                : "cannot reach %s: %s: %s"
                    .formatted(target, description, rootMessage(status.getCause()));
        exit = EXIT_UNAVAILABLE;
      }
      case DEADLINE_EXCEEDED -> {
        ConnectivityState state = channel.getState(false);
        line =
            state == ConnectivityState.READY
                ? target + " did not answer before the call's deadline" + suffix
                : "cannot reach "
                    + target
                    + " before the call's deadline (connection "
                    + state
                    + "; the service config waits for the server to be ready:"
                    + " --no-service-config fails at once, saying why)";
        exit = EXIT_DEADLINE_EXCEEDED;
      }
      default -> {
        line = description + suffix;
        exit = EXIT_FAILED;
      }
    }
    System.err.println("loom: " + status.getCode() + ": " + line);
    return exit;
  }

  static String firstLine(String text) {
    if (text == null) {
      return "";
    }
    int newline = text.indexOf('\n');
    return (newline < 0 ? text : text.substring(0, newline)).strip();
  }

  /** The innermost cause's message: "Connection refused", "unable to find valid ..."... */
  static String rootMessage(Throwable error) {
    Throwable root = error;
    while (root.getCause() != null && root.getCause() != root) {
      root = root.getCause();
    }
    String message = firstLine(root.getMessage());
    return message.isEmpty() ? root.getClass().getSimpleName() : message;
  }
}
