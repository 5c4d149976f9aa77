package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loom/loom/clients/go/loomv1"
)

// How watchInbox reconnects: a pause of at most 0.1s doubling to 2s (full jitter), and it
// gives up after this many reconnects in a row that receive nothing.
const (
	watchInitialBackoff = 100 * time.Millisecond
	watchMaxBackoff     = 2 * time.Second
	watchMaxReconnects  = 9
)

// watch prints every change to inboxID until ctx ends (Ctrl-C): `-watch INBOX`.
func watch(ctx context.Context, conn *grpc.ClientConn, inboxID string, timeout time.Duration) error {
	err := watchInbox(ctx, loomv1.NewInboxClient(conn), inboxID, timeout,
		func(page *loomv1.ListInboxResponse) {
			fmt.Printf("listed %s: %d threads\n", inboxID, len(page.GetEntries()))
		},
		func(event *loomv1.InboxEvent) {
			fmt.Printf("%s threads=%v message=%d unread=%d\n", event.GetKind(), event.GetThreadIds(),
				event.GetMessageId(), event.GetUnreadCount())
		})
	if ctx.Err() != nil {
		return nil // interrupted: the normal end of a watch
	}
	return err
}

// watchInbox lists inboxID, then follows its changes from the listing's sync_token, so no
// change between the two is missed. The stream is resumed, not restarted:
//
//   - UNAVAILABLE (reason RESUME: the server drains or this reader is too slow; or the
//     connection dropped): reconnect with the resume_token of the last event received, after
//     a short jittered pause. The server replays exactly the events after it.
//   - FAILED_PRECONDITION with reason RESYNC_REQUIRED: the token is older than the server's
//     change log keeps, so list again and watch from the new sync_token.
//   - anything else (RESOURCE_EXHAUSTED: the server holds its maximum of streams;
//     INVALID_ARGUMENT: a malformed token; the end of ctx) is returned.
//
// The service config retries WatchInbox only before its first event (with the same token);
// after that, resuming is this loop's job.
func watchInbox(ctx context.Context, inbox loomv1.InboxClient, inboxID string, timeout time.Duration,
	onList func(*loomv1.ListInboxResponse), onEvent func(*loomv1.InboxEvent)) error {
	token := ""
	mustList := true
	failures := 0
	for {
		if mustList {
			listCtx, cancel := within(ctx, timeout)
			page, err := inbox.ListInbox(listCtx, &loomv1.ListInboxRequest{InboxId: inboxID})
			cancel()
			if err != nil {
				return fmt.Errorf("list %s: %w", inboxID, err)
			}
			onList(page)
			token, mustList = page.GetSyncToken(), false
		}

		err := follow(ctx, inbox, inboxID, &token, func(event *loomv1.InboxEvent) {
			failures = 0
			onEvent(event)
		})
		st := status.Convert(err)
		switch {
		case errors.Is(err, io.EOF):
			return nil // the server ended the stream
		case st.Code() == codes.Unavailable && ctx.Err() == nil:
			failures++
			if failures > watchMaxReconnects {
				return fmt.Errorf("watch %s: %d reconnects failed: %w", inboxID, failures-1, err)
			}
			bound := min(watchMaxBackoff, watchInitialBackoff<<(failures-1))
			select {
			case <-time.After(rand.N(bound)):
			case <-ctx.Done():
				return ctx.Err()
			}
		case st.Code() == codes.FailedPrecondition && errorReason(st) == "RESYNC_REQUIRED":
			fmt.Printf("resync: %s\n", st.Message())
			mustList = true
		default:
			return fmt.Errorf("watch %s: %w", inboxID, err)
		}
	}
}

// follow reads one WatchInbox stream from *token until it fails, keeping *token at the last
// event received. It returns io.EOF when the server ends the stream normally.
func follow(ctx context.Context, inbox loomv1.InboxClient, inboxID string, token *string,
	onEvent func(*loomv1.InboxEvent)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream on the server when this reader stops
	stream, err := inbox.WatchInbox(ctx, &loomv1.WatchInboxRequest{InboxId: inboxID, ResumeToken: *token})
	if err != nil {
		return err
	}
	for {
		event, err := stream.Recv()
		if err != nil {
			return err
		}
		if next := event.GetResumeToken(); next != "" {
			*token = next
		}
		onEvent(event)
	}
}

// within bounds a unary call by timeout; with 0, the service config's timeout applies.
func within(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout == 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, timeout)
}

// errorReason is the google.rpc.ErrorInfo reason of a status ("" without one).
func errorReason(st *status.Status) string {
	for _, detail := range st.Details() {
		if info, ok := detail.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}
