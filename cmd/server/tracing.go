package main

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// tracingConfig says whether the server exports spans (docs/observability.md). Tracing is
// on when the standard OpenTelemetry variables configure an OTLP exporter
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or
// OTEL_TRACES_EXPORTER=otlp) and off otherwise, or when OTEL_SDK_DISABLED=true or
// OTEL_TRACES_EXPORTER=none. The SDK reads the rest itself, as every OpenTelemetry SDK
// does: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER and its
// argument, OTEL_BSP_* (the batch span processor), OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT,
// _INSECURE and their _TRACES_ forms. The exporter speaks OTLP over HTTP (http/protobuf,
// the default) or over gRPC (grpc), as OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else
// OTEL_EXPORTER_OTLP_PROTOCOL, says; http/json is refused (the Go exporter has none).
type tracingConfig struct {
	Enabled bool
	// Protocol is the OTLP transport: "http/protobuf" (the default) or "grpc".
	Protocol string
	// ServiceName is the resource's service.name when OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES give none ("gendurable").
	ServiceName string
}

// loadTracingConfig reads the variables that turn tracing on or off.
func loadTracingConfig(getenv func(string) string) (tracingConfig, error) {
	c := tracingConfig{ServiceName: "gendurable", Protocol: "http/protobuf"}
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return c, nil
	}
	exporter := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")))
	switch exporter {
	case "none":
		return c, nil
	case "", "otlp":
	default:
		return c, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: gendurable exports spans over OTLP only (otlp or none)", exporter)
	}
	c.Enabled = exporter == "otlp" || getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" ||
		getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	if !c.Enabled {
		return c, nil
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := strings.TrimSpace(getenv(name)); p != "" {
			if p != "http/protobuf" && p != "grpc" {
				return c, fmt.Errorf("%s=%q: gendurable exports OTLP over http/protobuf or grpc", name, p)
			}
			c.Protocol = p
			break // the _TRACES_ form wins
		}
	}
	return c, nil
}

// newTracerProvider builds the SDK's tracer provider with a batching OTLP exporter (over
// HTTP or gRPC, c.Protocol); nil when tracing is off. Its Shutdown flushes the spans
// still batched. Both exporters read the endpoint, headers, timeout, TLS and compression
// from the OTEL_EXPORTER_OTLP_* variables themselves; the gRPC one connects lazily, so a
// collector that is down delays no start.
func newTracerProvider(ctx context.Context, c tracingConfig) (*sdktrace.TracerProvider, error) {
	if !c.Enabled {
		return nil, nil
	}
	var exporter sdktrace.SpanExporter
	var err error
	if c.Protocol == "grpc" {
		exporter, err = otlptracegrpc.New(ctx)
	} else {
		exporter, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("the OTLP trace exporter: %w", err)
	}
	res, err := resource.Merge(
		resource.NewSchemaless(attribute.String("service.name", c.ServiceName)),
		resource.Environment()) // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	if err != nil {
		return nil, fmt.Errorf("the trace resource: %w", err)
	}
	// The sampler is the SDK's default (parent-based, always on) unless
	// OTEL_TRACES_SAMPLER says otherwise: the SDK reads it.
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res)), nil
}
