package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// syncBuffer is a log sink safe for the server's and the test's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestMetricsEndpoint starts the example on the emulator (on a loopback
// port, through a connection string like real storage), scrapes /metrics
// until azlease reports leadership, and checks the traces of its requests.
func TestMetricsEndpoint(t *testing.T) {
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncBuffer
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-trace"}, &logs, ready) }()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("run: %v\n%s", err, logs.String())
	case <-time.After(10 * time.Second):
		t.Fatal("not serving after 10 s")
	}

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := client.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var body string
	for range 100 { // at most 10 s
		_, body = get("/metrics")
		if strings.Contains(body, "\nazlease_elector_leader{") && strings.Contains(body, "} 1\n") && leading(body) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !leading(body) {
		t.Fatalf("never reported leading:\n%s\nlogs:\n%s", body, logs.String())
	}
	for _, want := range []string{
		"# TYPE azlease_request_duration_seconds histogram",
		`azlease_request_duration_seconds_count{azlease_lock="locks/metrics-example",azlease_operation="acquire",azlease_outcome="ok"`,
		"# TYPE azlease_term_starts_total counter",
		`azlease_term_starts_total{azlease_lock="locks/metrics-example",azlease_role="elector"`,
		"# TYPE azlease_failures_consecutive gauge",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
	if code, health := get("/healthz"); code != http.StatusOK || !strings.Contains(health, "lead") {
		t.Errorf("/healthz: %d %s", code, health)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v\n%s", err, logs.String())
	}
	for _, want := range []string{
		`msg=span name="azblob lease acquire" kind=internal`,
		`msg=span name="HTTP PUT" kind=client`,
		`msg=span name="azblob lease release"`,
		"azlease: stepping down",
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %q:\n%s", want, logs.String())
		}
	}
}

// leading reports whether a scrape shows the Elector leading.
func leading(body string) bool {
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "azlease_elector_leader{") && strings.HasSuffix(line, " 1") {
			return true
		}
	}
	return false
}
