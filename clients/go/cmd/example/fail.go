package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"unicode"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Exit codes: what kind of failure stopped the example.
const (
	exitFailure     = 1 // anything else (an unexpected status, a server-side error)
	exitUsage       = 2 // bad flags, an unreadable CA or service config
	exitAuth        = 3 // UNAUTHENTICATED or PERMISSION_DENIED: the token is missing, expired or lacks a scope
	exitUnreachable = 4 // UNAVAILABLE or DEADLINE_EXCEEDED: no server answered (down, wrong address, TLS refused)
)

// fail prints err as one line, `loom: <CODE>: <message>`, on stderr and returns the exit code.
func fail(err error) int {
	var usage *usageError
	if errors.As(err, &usage) {
		fmt.Fprintf(os.Stderr, "loom: %v\n", usage)
		return exitUsage
	}
	var withStatus interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &withStatus) {
		fmt.Fprintf(os.Stderr, "loom: %v\n", err)
		return exitFailure
	}
	// Under wait-for-ready an unreachable server ends in DEADLINE_EXCEEDED, whose message
	// grpc-go completes with the channel's last connection error (refused, TLS handshake).
	st := withStatus.GRPCStatus()
	fmt.Fprintf(os.Stderr, "loom: %s: %s\n", codeName(st.Code()), oneLine(st.Message()))
	switch st.Code() {
	case codes.Unauthenticated, codes.PermissionDenied:
		return exitAuth
	case codes.Unavailable, codes.DeadlineExceeded:
		return exitUnreachable
	default:
		return exitFailure
	}
}

// codeName is the canonical name of a gRPC code: DeadlineExceeded -> DEADLINE_EXCEEDED.
func codeName(code codes.Code) string {
	var name strings.Builder
	previous := rune(0)
	for _, r := range code.String() {
		if unicode.IsUpper(r) && unicode.IsLower(previous) {
			name.WriteRune('_')
		}
		name.WriteRune(unicode.ToUpper(r))
		previous = r
	}
	return name.String()
}

func oneLine(text string) string {
	return strings.Join(strings.Fields(text), " ")
}
