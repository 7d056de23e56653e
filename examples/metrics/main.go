// Command metrics is a leader-elected worker that exports azlease's
// OpenTelemetry metrics for Prometheus on /metrics, serves its health check
// on /healthz, and traces its storage requests with OpenTelemetry.
//
//	AZURE_STORAGE_CONNECTION_STRING=... go run . -addr 127.0.0.1:9464
//	curl -s 127.0.0.1:9464/metrics | grep azlease_
//
// Without a connection string it starts azlease's emulator on a loopback
// port and connects to it like to any storage account. -trace logs each
// span; a real service would export them (OTLP, say) instead.
//
// This is a separate Go module so that the OpenTelemetry SDK, the Prometheus
// exporter and the Azure SDK's OpenTelemetry adapter stay out of azlease's
// own dependencies: the library needs only the OpenTelemetry metric API.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	azruntime "github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/tracing"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/tracing/azotel"
	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "metrics:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends. ready, if not nil, receives the address
// /metrics is served on once it listens.
func run(ctx context.Context, args []string, logTo io.Writer, ready chan<- string) error {
	fs := flag.NewFlagSet("metrics", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:9464", "serve /metrics and /healthz on this address")
	trace := fs.Bool("trace", false, "log a line for each span (storage calls and their HTTP requests)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(logTo, nil))

	// Metrics: an OpenTelemetry SDK MeterProvider whose reader is the
	// Prometheus exporter, registered in a registry of our own.
	reg := promclient.NewRegistry()
	exporter, err := prometheus.New(prometheus.WithRegisterer(reg))
	if err != nil {
		return err
	}
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer func() { _ = meters.Shutdown(context.Background()) }()
	// (Alternatively otel.SetMeterProvider(meters): azlease uses the global
	// provider when its options leave MeterProvider nil.)

	// Tracing: an OpenTelemetry SDK TracerProvider, connected to the Azure
	// SDK's client through azotel.
	var spans []sdktrace.TracerProviderOption
	if *trace {
		spans = append(spans, sdktrace.WithSpanProcessor(logSpans{log}))
	}
	tracer := sdktrace.NewTracerProvider(spans...)
	defer func() { _ = tracer.Shutdown(context.Background()) }()

	// One HTTP transport for storage, closed at the end.
	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	cc, closeStore, err := containerClient("locks", &container.ClientOptions{ClientOptions: azcore.ClientOptions{
		Transport:       &http.Client{Transport: transport},
		TracingProvider: azotel.NewTracingProvider(tracer, nil),
		PerCallPolicies: []policy.Policy{traceCalls{azotel.NewTracingProvider(tracer, nil).NewTracer("azlease", "")}},
	}})
	if err != nil {
		return err
	}
	defer closeStore()

	elector, err := azlease.NewElector(cc, "metrics-example", &azlease.ElectorOptions{
		Logger:        log,
		MeterProvider: meters,
	})
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/healthz", elector.HealthHandler())
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(ln) })
	defer wg.Wait()   // runs second: the server goroutine has returned
	defer srv.Close() // runs first
	log.Info("serving /metrics and /healthz", "addr", ln.Addr().String())
	if ready != nil {
		ready <- ln.Addr().String()
	}

	return elector.Run(ctx, func(ctx context.Context, term *azlease.Term) error {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
				term.Heartbeat() // the work the leader does goes here
			}
		}
	})
}

// containerClient connects to AZURE_STORAGE_CONNECTION_STRING or, when it
// is not set, to an emulator it starts on a loopback port.
func containerClient(name string, opts *container.ClientOptions) (*container.Client, func(), error) {
	if cs := os.Getenv("AZURE_STORAGE_CONNECTION_STRING"); cs != "" {
		cc, err := azlease.ContainerClientFromConnectionString(cs, name, opts)
		return cc, func() {}, err
	}
	emu := azleasetest.New(nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		emu.Close()
		return nil, nil, err
	}
	srv := &http.Server{Handler: emu, ReadHeaderTimeout: 5 * time.Second}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(ln) })
	stop := func() {
		_ = srv.Close()
		wg.Wait()
		emu.Close()
	}
	cs := fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;BlobEndpoint=http://%s/%s;",
		azleasetest.Account, azleasetest.AccountKey, ln.Addr(), azleasetest.Account)
	cc, err := azlease.ContainerClientFromConnectionString(cs, name, opts)
	if err != nil {
		stop()
		return nil, nil, err
	}
	return cc, stop, nil
}

// traceCalls starts a span for each call of the Blob client. azblob v1.8.1
// starts none itself, and the Azure SDK's HTTP span (one per request, with
// method, URL without secrets, status and request IDs) is recorded only
// under a call's span: without this policy, TracingProvider alone records
// nothing. Install it with azcore.ClientOptions.PerCallPolicies.
type traceCalls struct{ tracer tracing.Tracer }

func (p traceCalls) Do(req *policy.Request) (*http.Response, error) {
	ctx, end := azruntime.StartSpan(req.Raw().Context(), "azblob "+callName(req.Raw()), p.tracer, nil)
	resp, err := req.WithContext(ctx).Next()
	spanErr := err
	if err == nil && resp.StatusCode >= 400 {
		spanErr = errors.New(resp.Status) // marks the span failed; the caller still gets the response
	}
	end(spanErr)
	return resp, err
}

// callName names a Blob call from its request: the lease action, or the
// comp parameter, or the method.
func callName(r *http.Request) string {
	// azblob sets the header in lower case, outside http.Header's canonical
	// form, so Header.Get would miss it: match the name in any case.
	for k, v := range r.Header {
		if strings.EqualFold(k, "x-ms-lease-action") && len(v) > 0 {
			return "lease " + v[0]
		}
	}
	if c := r.URL.Query().Get("comp"); c != "" {
		return r.Method + " " + c
	}
	return r.Method
}

// logSpans logs each span as it ends.
type logSpans struct{ log *slog.Logger }

func (l logSpans) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (l logSpans) OnEnd(s sdktrace.ReadOnlySpan) {
	l.log.Info("span", "name", s.Name(), "kind", s.SpanKind().String(), "took", s.EndTime().Sub(s.StartTime()),
		"status", s.Status().Code.String(), "trace", s.SpanContext().TraceID().String(), "parent", s.Parent().SpanID().String())
}
func (l logSpans) Shutdown(context.Context) error   { return nil }
func (l logSpans) ForceFlush(context.Context) error { return nil }
