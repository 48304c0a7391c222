package main

import (
	"context"
	"errors"
	"os"
	"sync"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/collector/exporter/exporterhelper/xexporterhelper"
	"go.opentelemetry.io/collector/exporter/xexporter"
	"go.opentelemetry.io/collector/pdata/pprofile"
)

// jsonLinesConfig is the jsonlines exporter's configuration: the file it
// appends to.
type jsonLinesConfig struct {
	Path string `mapstructure:"path"`
}

func (c *jsonLinesConfig) Validate() error {
	if c.Path == "" {
		return errors.New("jsonlines: path is required")
	}
	return nil
}

// newJSONLinesFactory makes the jsonlines exporter: each batch of
// profiles it receives becomes one line of OTLP JSON (pprofile's
// JSONMarshaler), written and synced before the push is acknowledged, so
// that a test reads back exactly what the collector took.
func newJSONLinesFactory() exporter.Factory {
	return xexporter.NewFactory(component.MustNewType("jsonlines"),
		func() component.Config { return &jsonLinesConfig{} },
		xexporter.WithProfiles(createJSONLines, component.StabilityLevelDevelopment))
}

func createJSONLines(ctx context.Context, set exporter.Settings, cfg component.Config) (xexporter.Profiles, error) {
	w := &jsonLinesWriter{path: cfg.(*jsonLinesConfig).Path}
	return xexporterhelper.NewProfiles(ctx, set, cfg, w.push,
		exporterhelper.WithCapabilities(consumer.Capabilities{MutatesData: false}),
		exporterhelper.WithStart(w.start),
		exporterhelper.WithShutdown(w.shutdown))
}

type jsonLinesWriter struct {
	path string
	mu   sync.Mutex
	f    *os.File
}

func (w *jsonLinesWriter) start(context.Context, component.Host) error {
	f, err := os.OpenFile(w.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	w.f = f
	return err
}

func (w *jsonLinesWriter) push(_ context.Context, pd pprofile.Profiles) error {
	b, err := (&pprofile.JSONMarshaler{}).MarshalProfiles(pd)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, err := w.f.Write(append(b, '\n')); err != nil {
		return err
	}
	return w.f.Sync()
}

func (w *jsonLinesWriter) shutdown(context.Context) error {
	if w.f == nil {
		return nil
	}
	return w.f.Close()
}
