// Command example shows the Loom Go client: it weaves one email as seen from two mailboxes,
// prints the unified thread that joins them, and then reads the google.rpc.BadRequest field
// violations that an INVALID_ARGUMENT error carries.
//
//	cd clients/go && go run ./cmd/example -target 127.0.0.1:50051
//
// The channel follows Loom's gRPC service config, clients/service_config.json (per-method
// timeouts, wait-for-ready, retries of the RPCs that are safe to repeat), found from the
// working directory upward; -service-config names another file, or "none".
//
// Against a server with auth on, pass a bearer token (`loom token --scope threadweaver:write`)
// with -token or $LOOM_TOKEN; against a TLS server, its CA with -ca (or -tls-ca), and the
// name the certificate holds, e.g. localhost:50051, as -target.
//
// With -watch INBOX it instead lists that inbox and prints every change to it until
// interrupted, resuming the WatchInbox stream with its last token (watch.go).
//
// A failure is one line on stderr, `loom: <CODE>: <message>`, and the exit code says which
// kind it was (see exitFailure and the constants after it).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom/loom/clients/go/loomv1"
)

func main() {
	target := flag.String("target", "127.0.0.1:50051", "Loom server address (host:port)")
	timeout := flag.Duration("timeout", 0,
		"deadline of each call (default: the service config's per-method timeout, or 10s without one)")
	token := flag.String("token", os.Getenv("LOOM_TOKEN"), "bearer token (default $LOOM_TOKEN)")
	var tlsCA string
	flag.StringVar(&tlsCA, "ca", "", "PEM CA of the server's certificate: connect with TLS")
	flag.StringVar(&tlsCA, "tls-ca", "", "same as -ca")
	configPath := flag.String("service-config", defaultServiceConfig,
		`gRPC service config JSON, looked up from the working directory upward ("none": no config)`)
	watchInboxID := flag.String("watch", "",
		"list this inbox, then print every change to it until interrupted (instead of weaving)")
	flag.Parse()

	config, err := loadServiceConfig(*configPath)
	if err != nil {
		os.Exit(fail(err))
	}
	if *timeout == 0 && config == "" {
		*timeout = 10 * time.Second
	}
	options, err := dialOptions(*token, tlsCA, config)
	if err != nil {
		os.Exit(fail(err))
	}
	conn, err := grpc.NewClient(*target, options...)
	if err != nil {
		os.Exit(fail(&usageError{fmt.Errorf("connect %s: %w", *target, err)}))
	}
	defer conn.Close()
	if *watchInboxID != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		err = watch(ctx, conn, *watchInboxID, *timeout)
		stop()
	} else {
		err = run(conn, *timeout)
	}
	if err != nil {
		code := fail(err)
		conn.Close()
		os.Exit(code)
	}
}

// callContext bounds one call by -timeout; with 0, the service config's timeout applies.
func callContext(timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout == 0 {
		return context.WithCancel(context.Background())
	}
	return context.WithTimeout(context.Background(), timeout)
}

func run(conn *grpc.ClientConn, timeout time.Duration) error {
	weaver := loomv1.NewThreadWeaverClient(conn)

	// One email, as seen in the sender's and in the recipient's mailbox: the two copies live
	// in different threads but share the RFC 822 Message-ID, which is what unifies them.
	suffix := time.Now().UnixNano()
	messageID := fmt.Sprintf("<go-example-%d@example.com>", suffix)
	sentAt := timestamppb.New(time.Unix(1_700_000_000, 0))
	copies := []*loomv1.WovenMessage{
		{Gid: "alice", ThreadId: fmt.Sprintf("a-%d", suffix), RfcMessageId: messageID, SentAt: sentAt},
		{Gid: "bob", ThreadId: fmt.Sprintf("b-%d", suffix), RfcMessageId: messageID, SentAt: sentAt},
	}
	for _, message := range copies {
		ctx, cancel := callContext(timeout)
		woven, err := weaver.WeaveMessage(ctx, &loomv1.WeaveMessageRequest{Message: message})
		cancel()
		if err != nil {
			return fmt.Errorf("weave %s/%s: %w", message.Gid, message.ThreadId, err)
		}
		fmt.Printf("woven %s/%s -> %s (merged=%v)\n",
			message.Gid, message.ThreadId, woven.UnifiedThreadId, woven.Merged)
	}

	ctx, cancel := callContext(timeout)
	defer cancel()
	unified, err := weaver.GetUnifiedThread(ctx, &loomv1.GetUnifiedThreadRequest{
		Gid: copies[0].Gid, ThreadId: copies[0].ThreadId,
	})
	if err != nil {
		return fmt.Errorf("get unified thread: %w", err)
	}
	fmt.Printf("unified thread %s: %d threads, %d messages\n",
		unified.UnifiedThreadIds[0], len(unified.Threads), unified.Stats.GetMessageCount())
	for _, thread := range unified.Threads {
		fmt.Printf("  thread %s/%s\n", thread.Gid, thread.ThreadId)
	}

	// A message without a mailbox owner is invalid: the error names the field.
	_, err = weaver.WeaveMessage(ctx, &loomv1.WeaveMessageRequest{Message: &loomv1.WovenMessage{
		ThreadId: "t", RfcMessageId: messageID, SentAt: sentAt,
	}})
	return printViolations(err)
}

// printViolations prints the field violations of an INVALID_ARGUMENT error; any other outcome
// is an error, since the request it answers was built to be invalid.
func printViolations(err error) error {
	if err == nil {
		return errors.New("invalid request was accepted")
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.InvalidArgument {
		return fmt.Errorf("want INVALID_ARGUMENT, got: %w", err)
	}
	fmt.Printf("rejected: %s: %s\n", st.Code(), st.Message())
	for _, detail := range st.Details() {
		if bad, ok := detail.(*errdetails.BadRequest); ok {
			for _, violation := range bad.GetFieldViolations() {
				fmt.Printf("  field violation %s: %s\n", violation.GetField(), violation.GetDescription())
			}
		}
	}
	return nil
}
