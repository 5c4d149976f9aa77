package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// defaultServiceConfig is Loom's one gRPC service config, relative to the repository root.
const defaultServiceConfig = "clients/service_config.json"

// usageError is a failure before any call: a bad flag value, an unreadable file.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// loadServiceConfig returns the JSON of the service config at path ("" for "none"). A
// relative path is looked up in the working directory and then in each parent, so the
// default works from the repository root, from clients/go and below.
func loadServiceConfig(path string) (string, error) {
	if path == "none" || path == "" {
		return "", nil
	}
	found, err := locate(path)
	if err != nil {
		return "", &usageError{fmt.Errorf("service config: %w", err)}
	}
	data, err := os.ReadFile(found)
	if err != nil {
		return "", &usageError{fmt.Errorf("service config: %w", err)}
	}
	var parsed map[string]any
	if err := json.Unmarshal(data, &parsed); err != nil {
		return "", &usageError{fmt.Errorf("service config %s: not a JSON object: %w", found, err)}
	}
	return string(data), nil
}

func locate(path string) (string, error) {
	if filepath.IsAbs(path) {
		return path, nil
	}
	start, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := start; ; {
		candidate := filepath.Join(dir, path)
		if _, err := os.Stat(candidate); err == nil {
			return candidate, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("%s: not found in %s or any directory above it", path, start)
		}
		dir = parent
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

func dialOptions(token, tlsCA, serviceConfig string) ([]grpc.DialOption, error) {
	transport := insecure.NewCredentials()
	if tlsCA != "" {
		tlsCredentials, err := credentials.NewClientTLSFromFile(tlsCA, "")
		if err != nil {
			return nil, &usageError{fmt.Errorf("ca %s: %w", tlsCA, err)}
		}
		transport = tlsCredentials
	}
	options := []grpc.DialOption{grpc.WithTransportCredentials(transport)}
	if token != "" {
		options = append(options, grpc.WithPerRPCCredentials(bearer{token, tlsCA != ""}))
	}
	if serviceConfig != "" {
		// Timeouts, wait-for-ready and retries per method; grpc-go has retries on by default.
		options = append(options, grpc.WithDefaultServiceConfig(serviceConfig))
	}
	return options, nil
}
