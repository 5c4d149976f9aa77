// Command example shows the Loom Go client: it weaves one email as seen from two mailboxes,
// prints the unified thread that joins them, and then reads the google.rpc.BadRequest field
// violations that an INVALID_ARGUMENT error carries.
//
//	go run ./cmd/example -target 127.0.0.1:50051
//
// Against a server with auth on, pass a bearer token (`loom token --scope threadweaver:write`)
// with -token or $LOOM_TOKEN; against a TLS server, its CA with -tls-ca (and the name the
// certificate holds, e.g. localhost:50051, as -target).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/loom/loom/clients/go/loomv1"
)

func main() {
	target := flag.String("target", "127.0.0.1:50051", "Loom server address (host:port)")
	timeout := flag.Duration("timeout", 10*time.Second, "deadline of each call")
	token := flag.String("token", os.Getenv("LOOM_TOKEN"), "bearer token (default $LOOM_TOKEN)")
	tlsCA := flag.String("tls-ca", "", "PEM CA of the server's certificate: connect with TLS")
	flag.Parse()
	options, err := dialOptions(*token, *tlsCA)
	if err != nil {
		log.Printf("example failed: %v", err)
		os.Exit(1)
	}
	if err := run(*target, *timeout, options); err != nil {
		log.Printf("example failed: %v", err)
		os.Exit(1)
	}
}

// bearer sends `authorization: Bearer <token>` with every call.
type bearer struct {
	token  string
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

// RequireTransportSecurity lets a token travel in plaintext only to a plaintext (local) server.
func (b bearer) RequireTransportSecurity() bool { return b.secure }

func dialOptions(token, tlsCA string) ([]grpc.DialOption, error) {
	transport := insecure.NewCredentials()
	if tlsCA != "" {
		tlsCredentials, err := credentials.NewClientTLSFromFile(tlsCA, "")
		if err != nil {
			return nil, fmt.Errorf("tls-ca %s: %w", tlsCA, err)
		}
		transport = tlsCredentials
	}
	options := []grpc.DialOption{grpc.WithTransportCredentials(transport)}
	if token != "" {
		options = append(options, grpc.WithPerRPCCredentials(bearer{token, tlsCA != ""}))
	}
	return options, nil
}

func run(target string, timeout time.Duration, options []grpc.DialOption) error {
	conn, err := grpc.NewClient(target, options...)
	if err != nil {
		return fmt.Errorf("connect %s: %w", target, err)
	}
	defer conn.Close()
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
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		woven, err := weaver.WeaveMessage(ctx, &loomv1.WeaveMessageRequest{Message: message})
		cancel()
		if err != nil {
			return fmt.Errorf("weave %s/%s: %w", message.Gid, message.ThreadId, err)
		}
		fmt.Printf("woven %s/%s -> %s (merged=%v)\n",
			message.Gid, message.ThreadId, woven.UnifiedThreadId, woven.Merged)
	}

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
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
