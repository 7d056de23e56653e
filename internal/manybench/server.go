package main

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/azlease/azlease/azleasetest"
)

// The server process serves the emulator on loopback, over plain HTTP or
// TLS, and watches what arrives: new connections, and renewals that come
// late. Its own CPU is not the client's, which is why it is a process of its
// own.

// serverInfo is the first line the server prints: where to reach it.
type serverInfo struct {
	URL   string `json:"url"`   // Blob service URL, with the account
	Stats string `json:"stats"` // GET it for a serverStats (plain HTTP, separate port)
}

// serverStats are counts since the server started; the client reads them at
// both ends of its window and subtracts.
type serverStats struct {
	NewConns int64 `json:"new_conns"` // connections opened to the emulator's port
	Requests int64 `json:"requests"`
	Renewals int64 `json:"renewals"` // successful renewals
	// Late counts renewals that arrived more than the late threshold
	// (renew interval + 1 s) after the lease's previous grant or renewal.
	Late int64 `json:"late"`
	// Lapsed counts renewals that arrived after the lease had expired (a
	// lease duration or more after its previous grant or renewal): Azure
	// grants those too if nobody took the lease meanwhile, but the lease was
	// free in between, so the holder had lost it.
	Lapsed int64 `json:"lapsed"`
	// MaxGap is the longest time between a lease's grant or renewal and its
	// next renewal request, in milliseconds.
	MaxGap float64 `json:"max_gap_ms"`
}

// watch wraps the emulator's handler to count renewals and their lateness.
type watch struct {
	next     http.Handler
	late     time.Duration
	expiry   time.Duration // the lease duration
	newConns atomic.Int64
	requests atomic.Int64
	renewals atomic.Int64
	lateN    atomic.Int64
	lapsed   atomic.Int64

	mu     sync.Mutex
	last   map[string]time.Time // by blob path: arrival of its last successful grant or renewal
	maxGap time.Duration
}

func (w *watch) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	w.requests.Add(1)
	action := ""
	if r.Method == http.MethodPut && r.URL.Query().Get("comp") == "lease" {
		action = strings.ToLower(r.Header.Get("x-ms-lease-action"))
	}
	if action == "renew" {
		w.mu.Lock()
		if prev, ok := w.last[r.URL.Path]; ok {
			gap := arrived.Sub(prev)
			if gap > w.maxGap {
				w.maxGap = gap
			}
			if gap > w.late {
				w.lateN.Add(1)
			}
			if gap >= w.expiry {
				w.lapsed.Add(1)
			}
		}
		w.mu.Unlock()
	}
	sw := &statusWriter{ResponseWriter: rw}
	w.next.ServeHTTP(sw, r)
	if (action == "renew" || action == "acquire") && sw.status/100 == 2 {
		if action == "renew" {
			w.renewals.Add(1)
		}
		w.mu.Lock()
		if prev, ok := w.last[r.URL.Path]; !ok || arrived.After(prev) {
			w.last[r.URL.Path] = arrived
		}
		w.mu.Unlock()
	}
}

func (w *watch) stats() serverStats {
	w.mu.Lock()
	gap := w.maxGap
	w.mu.Unlock()
	return serverStats{
		NewConns: w.newConns.Load(), Requests: w.requests.Load(), Renewals: w.renewals.Load(),
		Late: w.lateN.Load(), Lapsed: w.lapsed.Load(), MaxGap: float64(gap) / float64(time.Millisecond),
	}
}

// statusWriter remembers the status the emulator answered with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// serve runs the server until its standard input closes (the orchestrator
// ending, or dying), printing a serverInfo line first. With useTLS it serves
// HTTPS with a fresh self-signed certificate, written as PEM to certFile,
// and HTTP/1.1 only, as Blob Storage does.
func serve(useTLS bool, certFile string, late, expiry time.Duration) error {
	emu := azleasetest.New(nil)
	defer emu.Close()
	w := &watch{next: emu, late: late, expiry: expiry, last: make(map[string]time.Time)}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	scheme := "http"
	srv := &http.Server{
		Handler:           w,
		ReadHeaderTimeout: 10 * time.Second,
		// Handshakes cut short by a client giving up are part of what is
		// measured (as new connections), not news.
		ErrorLog: log.New(io.Discard, "", 0),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				w.newConns.Add(1)
			}
		},
		// No HTTP/2, over TLS too: Blob Storage speaks HTTP/1.1, so a client
		// needs a connection per request in flight, as it would with Azure.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
	if useTLS {
		cert, pemBytes, err := selfSigned()
		if err != nil {
			return err
		}
		if err := os.WriteFile(certFile, pemBytes, 0o600); err != nil {
			return err
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12}
		ln = tls.NewListener(ln, srv.TLSConfig)
		scheme = "https"
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()

	statsLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	statsSrv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(rw).Encode(w.stats())
	})}
	statsDone := make(chan error, 1)
	go func() { statsDone <- statsSrv.Serve(statsLn) }()

	info := serverInfo{
		URL:   fmt.Sprintf("%s://%s/%s", scheme, ln.Addr(), azleasetest.Account),
		Stats: fmt.Sprintf("http://%s/stats", statsLn.Addr()),
	}
	if err := json.NewEncoder(os.Stdout).Encode(info); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, os.Stdin) // until the orchestrator closes it
	_ = srv.Close()
	_ = statsSrv.Close()
	<-done
	<-statsDone
	return nil
}
