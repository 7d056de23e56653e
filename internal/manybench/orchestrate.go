package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The orchestrator runs one server and one client process per cell (N,
// transport, variant, repetition), one cell at a time, and collects the
// client's figures. It runs this same executable in its other modes.

// runConfig is the whole run.
type runConfig struct {
	ns       []int
	tls      []bool // transports: false is plain HTTP
	reps     int
	window   time.Duration
	renew    time.Duration
	settle   time.Duration
	lease    time.Duration
	parallel int
	burst    bool     // take every lease at once (default: spread over a renew interval)
	variants []string // which to run, in this order
	heading  string   // when set, the table's heading, and the report is brief (a further table of the same benchmark)
}

// cell is one measurement.
type cell struct {
	TLS bool `json:"tls"`
	Rep int  `json:"rep"`
	clientResult
	Err string `json:"error,omitempty"`
}

// orchestrate runs every cell, calling done with the cells so far after
// each one (the figures are only handed out that way), so that a run
// stopped part way still leaves its figures.
func orchestrate(cfg runConfig, progress io.Writer, done func(cells []cell, total int)) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "manybench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var cells []cell
	var errs []error
	total := cfg.reps * len(cfg.ns) * len(cfg.tls) * len(cfg.variants)
	for rep := range cfg.reps {
		for _, n := range cfg.ns {
			for _, useTLS := range cfg.tls {
				for _, v := range cfg.variants {
					fmt.Fprintf(progress, "manybench: [%d/%d] N=%d %s %s, rep %d…\n", len(cells)+1, total, n, transportName(useTLS), v, rep+1)
					res, err := runCell(self, filepath.Join(dir, "cert.pem"), cfg, n, useTLS, v)
					c := cell{TLS: useTLS, Rep: rep + 1, clientResult: res}
					c.N, c.Variant = n, v
					if err != nil {
						c.Err = err.Error()
						errs = append(errs, fmt.Errorf("cell N=%d %s %s rep %d: %w", n, transportName(useTLS), v, rep+1, err))
					}
					cells = append(cells, c)
					done(cells, total)
				}
			}
		}
	}
	return errors.Join(errs...)
}

func transportName(useTLS bool) string {
	if useTLS {
		return "TLS"
	}
	return "HTTP"
}

// runCell starts a server, runs a client against it to the end of its
// window, and stops the server.
func runCell(self, certFile string, cfg runConfig, n int, useTLS bool, variant string) (clientResult, error) {
	var res clientResult
	// Setup takes well under a millisecond per lease on loopback when the
	// client keeps up; allow far more for when it does not.
	limit := cfg.settle + cfg.window + 2*time.Minute + time.Duration(n)*30*time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()

	late := cfg.renew + time.Second
	srv := exec.CommandContext(ctx, self, "-mode", "server", "-tls", strings.ToLower(transportName(useTLS)), "-cert", certFile, "-late", late.String(), "-lease", cfg.lease.String())
	srv.Stderr = os.Stderr
	stdin, err := srv.StdinPipe()
	if err != nil {
		return res, err
	}
	out, err := srv.StdoutPipe()
	if err != nil {
		return res, err
	}
	if err := srv.Start(); err != nil {
		return res, err
	}
	defer func() {
		_ = stdin.Close() // the server stops when its input ends
		_ = srv.Wait()
	}()
	line, err := bufio.NewReader(out).ReadBytes('\n')
	if err != nil {
		return res, fmt.Errorf("server: %w", err)
	}
	var info serverInfo
	if err := json.Unmarshal(line, &info); err != nil {
		return res, fmt.Errorf("server said %q: %w", line, err)
	}

	cl := exec.CommandContext(ctx, self, "-mode", "client", "-variant", variant, "-n", strconv.Itoa(n),
		"-url", info.URL, "-stats", info.Stats, "-lease", cfg.lease.String(), "-renew", cfg.renew.String(),
		"-settle", cfg.settle.String(), "-dur", cfg.window.String(), "-parallel", strconv.Itoa(cfg.parallel),
		"-burst="+strconv.FormatBool(cfg.burst))
	var stderr tail
	cl.Stderr = io.MultiWriter(os.Stderr, &stderr)
	cl.Env = os.Environ()
	if useTLS {
		cl.Env = append(cl.Env, "SSL_CERT_FILE="+certFile) // the client's only trusted root
	}
	got, err := cl.Output()
	if err != nil {
		return res, fmt.Errorf("client: %w: %s", err, stderr.last())
	}
	lines := strings.Split(strings.TrimSpace(string(got)), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		return res, fmt.Errorf("client said %q: %w", got, err)
	}
	return res, nil
}

// tail keeps the end of what a process wrote, for its error.
type tail struct{ b []byte }

func (t *tail) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 4096 {
		t.b = append([]byte(nil), t.b[len(t.b)-4096:]...)
	}
	return len(p), nil
}

// last is the last non-empty line, at most 160 bytes of it.
func (t *tail) last() string {
	lines := strings.Split(strings.TrimSpace(string(t.b)), "\n")
	l := lines[len(lines)-1]
	if len(l) > 160 {
		l = l[:160] + "…"
	}
	return l
}
