package otlpexport

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// grpcSender pushes over OTLP/gRPC, with pprofileotlp's client.
type grpcSender struct {
	conn    *grpc.ClientConn
	client  pprofileotlp.GRPCClient
	headers metadata.MD
}

func newGRPC(cfg Config) (*grpcSender, error) {
	creds := credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
	if cfg.Insecure {
		creds = insecure.NewCredentials()
	}
	conn, err := grpc.NewClient(cfg.Target, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("OTLP/gRPC endpoint %s: %w", cfg.Target, err)
	}
	md := metadata.MD{}
	for k, v := range cfg.Headers {
		md.Append(strings.ToLower(k), v)
	}
	return &grpcSender{conn: conn, client: pprofileotlp.NewGRPCClient(conn), headers: md}, nil
}

func (g *grpcSender) send(ctx context.Context, pd pprofile.Profiles) error {
	if len(g.headers) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, g.headers.Copy())
	}
	resp, err := g.client.Export(ctx, pprofileotlp.NewExportRequestFromProfiles(pd))
	if err != nil {
		switch status.Code(err) {
		case codes.Canceled, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted, codes.OutOfRange,
			codes.Unavailable, codes.DataLoss:
			return err
		}
		return permanentError{err}
	}
	return rejected(resp)
}

func (g *grpcSender) close() error { return g.conn.Close() }

// rejected returns the profiles a collector took only in part as a
// permanent error.
func rejected(resp pprofileotlp.ExportResponse) error {
	if ps := resp.PartialSuccess(); ps.RejectedProfiles() > 0 {
		return permanentError{fmt.Errorf("the collector rejected %d profiles: %s", ps.RejectedProfiles(), ps.ErrorMessage())}
	}
	return nil
}

// httpSender pushes over OTLP/HTTP, the request marshalled by
// pprofileotlp.
type httpSender struct {
	url     string
	headers map[string]string
	client  *http.Client
}

func newHTTP(cfg Config) *httpSender {
	return &httpSender{url: cfg.URL, headers: cfg.Headers, client: &http.Client{}}
}

// maxResponse bounds the response body read.
const maxResponse = 64 << 10

func (h *httpSender) send(ctx context.Context, pd pprofile.Profiles) error {
	body, err := pprofileotlp.NewExportRequestFromProfiles(pd).MarshalProto()
	if err != nil {
		return permanentError{fmt.Errorf("encoding profiles: %w", err)}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return permanentError{err}
	}
	for k, v := range h.headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set(pprofileotlp.DevelopmentVersionHeader, pprofileotlp.DevelopmentVersion)
	resp, err := h.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	switch {
	case resp.StatusCode == http.StatusOK:
		r := pprofileotlp.NewExportResponse()
		if r.UnmarshalProto(b) != nil {
			return nil // taken; an answer it cannot read says nothing more
		}
		return rejected(r)
	case resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode == http.StatusBadGateway,
		resp.StatusCode == http.StatusServiceUnavailable, resp.StatusCode == http.StatusGatewayTimeout:
		return fmt.Errorf("%s: %s", h.url, resp.Status)
	}
	return permanentError{fmt.Errorf("%s: %s", h.url, resp.Status)}
}

func (h *httpSender) close() error {
	h.client.CloseIdleConnections()
	return nil
}
