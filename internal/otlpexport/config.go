package otlpexport

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/kprofd/kprofd/internal/otlp"
)

// Protocols.
const (
	GRPC         = "grpc"
	HTTPProtobuf = "http/protobuf"
)

// ProfilesPath is the profiles signal's path under an OTLP/HTTP endpoint.
const ProfilesPath = "/v1development/profiles"

// DefaultTimeout bounds one attempt of a push, as the SDKs' default
// OTEL_EXPORTER_OTLP_TIMEOUT.
const DefaultTimeout = 10 * time.Second

// Config says where and how to push.
type Config struct {
	// Protocol is GRPC or HTTPProtobuf.
	Protocol string
	// URL is where an OTLP/HTTP push goes, the signal's path included;
	// Target the host:port of an OTLP/gRPC one, Insecure whether that
	// goes without TLS.
	URL      string
	Target   string
	Insecure bool
	// Headers go with every push (gRPC metadata or HTTP headers).
	Headers map[string]string
	// Timeout bounds one attempt.
	Timeout time.Duration
	// ServiceName (OTEL_SERVICE_NAME) and Attributes
	// (OTEL_RESOURCE_ATTRIBUTES) go into every profile's resource.
	ServiceName string
	Attributes  []otlp.Attribute
}

// Endpoint names where pushes go, for messages.
func (c Config) Endpoint() string {
	if c.Protocol == GRPC {
		return c.Target
	}
	return c.URL
}

// FromEnv returns the configuration that endpoint and protocol (the
// flags, "" when not given) and the environment (getenv) give, as the
// SDKs read OTEL_EXPORTER_OTLP_*: the flag's endpoint, else
// OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT, else OTEL_EXPORTER_OTLP_ENDPOINT.
// Over OTLP/HTTP the signal's path (ProfilesPath) is added to a generic
// endpoint (the flag's or OTEL_EXPORTER_OTLP_ENDPOINT), not to the
// profiles' own. The protocol is the flag's, else
// OTEL_EXPORTER_OTLP_PROFILES_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL,
// else http/protobuf. Headers and timeout have the same two variables
// each, the profiles' own winning. on is false when no endpoint is
// given: no push.
func FromEnv(endpoint, protocol string, getenv func(string) string) (cfg Config, on bool, err error) {
	generic := true
	switch {
	case endpoint != "":
	case getenv("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT") != "":
		endpoint, generic = getenv("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT"), false
	case getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "":
		endpoint = getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	default:
		return cfg, false, nil
	}
	cfg.Protocol = first(protocol, getenv("OTEL_EXPORTER_OTLP_PROFILES_PROTOCOL"), getenv("OTEL_EXPORTER_OTLP_PROTOCOL"), HTTPProtobuf)
	switch cfg.Protocol {
	case GRPC:
		insecure := first(getenv("OTEL_EXPORTER_OTLP_PROFILES_INSECURE"), getenv("OTEL_EXPORTER_OTLP_INSECURE"))
		if cfg.Target, cfg.Insecure, err = grpcTarget(endpoint, strings.EqualFold(insecure, "true")); err != nil {
			return cfg, false, err
		}
	case HTTPProtobuf:
		if cfg.URL, err = httpURL(endpoint, generic); err != nil {
			return cfg, false, err
		}
	case "http/json":
		return cfg, false, fmt.Errorf("OTLP protocol http/json is not supported: use grpc or http/protobuf")
	default:
		return cfg, false, fmt.Errorf("unknown OTLP protocol %q: use grpc or http/protobuf", cfg.Protocol)
	}
	cfg.Headers = map[string]string{}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_PROFILES_HEADERS"} {
		kvs, err := parseList(getenv(v))
		if err != nil {
			return cfg, false, fmt.Errorf("%s: %w", v, err)
		}
		for _, kv := range kvs {
			cfg.Headers[kv.Key] = kv.Value
		}
	}
	cfg.Timeout = DefaultTimeout
	for _, v := range []string{"OTEL_EXPORTER_OTLP_PROFILES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"} {
		if s := getenv(v); s != "" {
			ms, err := strconv.ParseUint(s, 10, 32)
			if err != nil || ms == 0 {
				return cfg, false, fmt.Errorf("%s: a timeout in milliseconds, not %q", v, s)
			}
			cfg.Timeout = time.Duration(ms) * time.Millisecond
			break
		}
	}
	cfg.ServiceName = getenv("OTEL_SERVICE_NAME")
	if cfg.Attributes, err = parseList(getenv("OTEL_RESOURCE_ATTRIBUTES")); err != nil {
		return cfg, false, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	return cfg, true, nil
}

func first(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

// httpURL returns where OTLP/HTTP pushes to endpoint go: a generic
// endpoint gets the signal's path.
func httpURL(endpoint string, generic bool) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("OTLP/HTTP endpoint %q: want a URL such as http://collector:4318", endpoint)
	}
	if generic {
		u.Path = strings.TrimSuffix(u.Path, "/") + ProfilesPath
	}
	return u.String(), nil
}

// grpcTarget returns the host:port of an OTLP/gRPC endpoint and whether
// it goes without TLS: an http URL does, an https one does not, a bare
// host:port as insecure says.
func grpcTarget(endpoint string, insecure bool) (string, bool, error) {
	if u, err := url.Parse(endpoint); err == nil && (u.Scheme == "http" || u.Scheme == "https") {
		if u.Host == "" {
			return "", false, fmt.Errorf("OTLP/gRPC endpoint %q has no host", endpoint)
		}
		return u.Host, u.Scheme == "http", nil
	}
	if !strings.Contains(endpoint, ":") || strings.Contains(endpoint, "/") {
		return "", false, fmt.Errorf("OTLP/gRPC endpoint %q: want a URL such as http://collector:4317, or host:port", endpoint)
	}
	return endpoint, insecure, nil
}

// parseList parses a W3C-baggage-like list, key=value pairs separated by
// commas with their values percent-encoded, as OTEL_EXPORTER_OTLP_HEADERS
// and OTEL_RESOURCE_ATTRIBUTES give them.
func parseList(s string) ([]otlp.Attribute, error) {
	var out []otlp.Attribute
	for item := range strings.SplitSeq(s, ",") {
		if strings.TrimSpace(item) == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is no key=value pair", item)
		}
		value, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("%q: %w", item, err)
		}
		out = append(out, otlp.Attribute{Key: k, Value: value})
	}
	return out, nil
}
