//go:build linux

package main

// --health-addr as Kubernetes probes and an operator see it.

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// freeAddr returns a loopback address with a port free now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// get fetches a health endpoint: status and body.
func get(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitGet polls an endpoint until it answers want, within limit.
func waitGet(t *testing.T, addr, path string, want int, limit time.Duration) string {
	t.Helper()
	var code int
	var body string
	for end := time.Now().Add(limit); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if code, body = get(t, addr, path); code == want {
			return body
		}
	}
	t.Fatalf("GET %s%s: %d %q, want %d within %v", addr, path, code, body, want, limit)
	return ""
}

// ranWithin reports whether a line of path contains want within limit,
// and false at once if p exits first.
func ranWithin(path, want string, p *proc, limit time.Duration) bool {
	for end := time.Now().Add(limit); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), want) {
			return true
		}
		select {
		case <-p.done:
			return false
		default:
		}
	}
	return false
}

// TestHealthEndpoints: two 'azlease lead' with --health-addr and
// --ready-when-leading: both live, only the leader ready, both name the
// leader on /leader.
func TestHealthEndpoints(t *testing.T) {
	t.Parallel()
	w := newWorld(t, emulatorConn(t))
	log := w.path("log")
	addrA, addrB := freeAddr(t), freeAddr(t)
	for try := 0; ; try++ {
		a := w.az("lead", fast, "--identity", "A", "--health-addr", addrA, "--ready-when-leading", "svc", "--", "sh", "-c", "echo A >> "+log+"; sleep 1000")
		if ranWithin(log, "A", a, 20*time.Second) {
			break
		}
		// freeAddr's port may be taken by another test before azlease
		// binds it (a CI run failed so, its log empty): once, new ports.
		if try > 0 || !strings.Contains(a.stderr(), "address already in use") {
			t.Fatalf("A's command did not run within 20 s; azlease's stderr:\n%s", a.stderr())
		}
		addrA, addrB = freeAddr(t), freeAddr(t)
	}
	w.az("lead", fast, "--identity", "B", "--health-addr", addrB, "--ready-when-leading", "svc", "--", "sh", "-c", "echo B >> "+log+"; sleep 1000")

	assert.Contains(t, waitGet(t, addrA, "/healthz", 200, 10*time.Second), "ok: holding svc")
	assert.Contains(t, waitGet(t, addrB, "/healthz", 200, 10*time.Second), "ok: waiting for svc")
	waitGet(t, addrA, "/readyz", 200, 10*time.Second)
	code, body := get(t, addrB, "/readyz")
	assert.Equal(t, 503, code, body)
	for _, addr := range []string{addrA, addrB} {
		var l leaderJSON
		_, body := get(t, addr, "/leader")
		require.NoError(t, json.Unmarshal([]byte(body), &l), body)
		assert.Equal(t, "A", l.Holder, body)
		assert.True(t, l.Leased)
		assert.NotZero(t, l.Epoch)
		assert.NotNil(t, l.Since)
		assert.Equal(t, addr == addrA, l.Self)
	}
}

// TestLivenessFailsWhenStorageIsGone: a leader whose storage stops
// answering fails /healthz once requests have failed for longer than the
// lease, and says why.
func TestLivenessFailsWhenStorageIsGone(t *testing.T) {
	t.Parallel()
	emu, conn, err := startEmulator()
	require.NoError(t, err)
	t.Cleanup(func() { _ = emu.Process.Kill(); _ = emu.Wait() })
	w := newWorld(t, conn)
	log, addr := w.path("log"), freeAddr(t)
	w.az("lead", "--health-addr", addr, "svc", "--", "sh", "-c", "echo ran >> "+log+"; sleep 1000")
	waitLine(t, log, "ran", 20*time.Second)
	waitGet(t, addr, "/healthz", 200, 10*time.Second)
	require.NoError(t, emu.Process.Kill())
	_ = emu.Wait()
	body := waitGet(t, addr, "/healthz", 503, 40*time.Second) // the lease duration (15 s) and a poll
	assert.True(t, strings.Contains(body, "storage unreachable") || strings.Contains(body, "every request to storage has failed"), body)
}
