// Command otelcol is an OpenTelemetry Collector for kprofd's integration
// tests, built from the Collector's own modules: the OTLP receiver, the
// debug exporter and jsonlines (jsonlines.go), which writes every batch of
// profiles it receives as one line of OTLP JSON that the tests read back.
//
// It lives in a module of its own, so that kprofd's go.mod does not carry
// the Collector. The tests build it (internal/otelcoltest, make otelcol);
// by hand:
//
//	cd test/otelcol && go build -o bin/otelcol . && bin/otelcol --config config.yaml --feature-gates=service.profilesSupport
package main

import (
	"log"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/envprovider"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/debugexporter"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry/otelconftelemetry"
)

func main() {
	set := otelcol.CollectorSettings{
		BuildInfo: component.BuildInfo{Command: "otelcol", Description: "OpenTelemetry Collector for kprofd's tests", Version: "0.165.0"},
		Factories: components,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{
			ResolverSettings: confmap.ResolverSettings{ProviderFactories: []confmap.ProviderFactory{fileprovider.NewFactory(), envprovider.NewFactory()}},
		},
	}
	if err := otelcol.NewCommand(set).Execute(); err != nil {
		log.Fatal(err)
	}
}

func components() (otelcol.Factories, error) {
	f := otelcol.Factories{Telemetry: otelconftelemetry.NewFactory()}
	var err error
	if f.Receivers, err = otelcol.MakeFactoryMap[receiver.Factory](otlpreceiver.NewFactory()); err != nil {
		return f, err
	}
	f.Exporters, err = otelcol.MakeFactoryMap[exporter.Factory](debugexporter.NewFactory(), newJSONLinesFactory())
	return f, err
}
