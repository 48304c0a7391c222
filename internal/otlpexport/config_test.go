package otlpexport

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kprofd/kprofd/internal/otlp"
)

func TestFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name               string
		endpoint, protocol string // the flags
		env                map[string]string
		off                bool
		want               Config // Headers nil: none
		err                string
	}{
		{name: "nothing given", off: true},
		{
			name: "the flag is a generic endpoint", endpoint: "http://127.0.0.1:4318",
			want: Config{Protocol: HTTPProtobuf, URL: "http://127.0.0.1:4318/v1development/profiles"},
		},
		{
			name: "a generic endpoint with a path and a slash", endpoint: "https://gw.example:443/otlp/",
			want: Config{Protocol: HTTPProtobuf, URL: "https://gw.example:443/otlp/v1development/profiles"},
		},
		{
			name: "OTEL_EXPORTER_OTLP_ENDPOINT", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"},
			want: Config{Protocol: HTTPProtobuf, URL: "http://c:4318/v1development/profiles"},
		},
		{
			name: "the profiles' own endpoint is taken as it is, and wins",
			env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
				"OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT": "http://p:9999/custom/path"},
			want: Config{Protocol: HTTPProtobuf, URL: "http://p:9999/custom/path"},
		},
		{
			name: "the flag wins over the environment", endpoint: "http://flag:4318",
			env:  map[string]string{"OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT": "http://p:9999/x"},
			want: Config{Protocol: HTTPProtobuf, URL: "http://flag:4318/v1development/profiles"},
		},
		{
			name: "grpc over http", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			want: Config{Protocol: GRPC, Target: "127.0.0.1:4317", Insecure: true},
		},
		{
			name: "grpc over https", endpoint: "https://collector:4317", protocol: "grpc",
			want: Config{Protocol: GRPC, Target: "collector:4317"},
		},
		{
			name: "grpc to a bare host:port, insecure as the environment says", endpoint: "localhost:4317",
			env:  map[string]string{"OTEL_EXPORTER_OTLP_PROFILES_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_INSECURE": "true"},
			want: Config{Protocol: GRPC, Target: "localhost:4317", Insecure: true},
		},
		{
			name: "the flag's protocol wins", endpoint: "http://c:4317", protocol: "grpc",
			env:  map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
			want: Config{Protocol: GRPC, Target: "c:4317", Insecure: true},
		},
		{
			name: "headers, timeout, service name and resource attributes", endpoint: "http://c:4318",
			env: map[string]string{
				"OTEL_EXPORTER_OTLP_HEADERS":          "Authorization=Bearer%20abc, x-tenant=a",
				"OTEL_EXPORTER_OTLP_PROFILES_HEADERS": "x-tenant=b",
				"OTEL_EXPORTER_OTLP_TIMEOUT":          "2500",
				"OTEL_SERVICE_NAME":                   "checkout",
				"OTEL_RESOURCE_ATTRIBUTES":            "deployment.environment.name=prod,team=a%2Cb",
			},
			want: Config{Protocol: HTTPProtobuf, URL: "http://c:4318/v1development/profiles",
				Headers: map[string]string{"Authorization": "Bearer abc", "x-tenant": "b"}, Timeout: 2500 * time.Millisecond,
				ServiceName: "checkout", Attributes: []otlp.Attribute{{Key: "deployment.environment.name", Value: "prod"}, {Key: "team", Value: "a,b"}}},
		},
		{name: "http/json", endpoint: "http://c:4318", protocol: "http/json", err: "http/json is not supported"},
		{name: "an unknown protocol", endpoint: "http://c:4318", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "thrift"}, err: `unknown OTLP protocol "thrift"`},
		{name: "an http endpoint without a scheme", endpoint: "c:4318", err: "want a URL such as http://collector:4318"},
		{name: "a bad grpc endpoint", endpoint: "collector", protocol: "grpc", err: "want a URL such as http://collector:4317"},
		{name: "a bad header", endpoint: "http://c:4318", env: map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "novalue"}, err: "OTEL_EXPORTER_OTLP_HEADERS: \"novalue\" is no key=value pair"},
		{name: "a bad timeout", endpoint: "http://c:4318", env: map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "10s"}, err: "a timeout in milliseconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, on, err := FromEnv(tc.endpoint, tc.protocol, func(k string) string { return tc.env[k] })
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if on == tc.off {
				t.Fatalf("on %v, want %v", on, !tc.off)
			}
			if tc.off {
				return
			}
			want := tc.want
			if want.Timeout == 0 {
				want.Timeout = DefaultTimeout
			}
			if want.Headers == nil {
				want.Headers = map[string]string{}
			}
			if !maps.Equal(cfg.Headers, want.Headers) || !slices.Equal(cfg.Attributes, want.Attributes) {
				t.Errorf("headers %v and attributes %v, want %v and %v", cfg.Headers, cfg.Attributes, want.Headers, want.Attributes)
			}
			cfg.Headers, cfg.Attributes, want.Headers, want.Attributes = nil, nil, nil, nil
			if cfg.Protocol != want.Protocol || cfg.URL != want.URL || cfg.Target != want.Target || cfg.Insecure != want.Insecure ||
				cfg.Timeout != want.Timeout || cfg.ServiceName != want.ServiceName {
				t.Errorf("config %+v, want %+v", cfg, want)
			}
		})
	}
}
