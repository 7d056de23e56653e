package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// benchmark parses the orchestrator's flags, runs every cell and writes the
// table (and the raw figures). A cell that produced no figures (a process
// failed) shows as failed in the table and is reported on standard error,
// but does not fail the run: the other cells still count. Leases lost are
// figures like the others.
func benchmark(out, rawOut, ns, only string, reps int, tlsMode string, quick, burst bool, window, renew, lease, settle time.Duration, parallel int) error {
	cfg := runConfig{reps: reps, window: window, renew: renew, settle: settle, lease: lease, parallel: parallel, burst: burst}
	if quick {
		ns, tlsMode = "50", "both"
		cfg.reps, cfg.window, cfg.renew, cfg.settle = 1, 2*time.Second, time.Second, time.Second
	}
	for _, f := range strings.Split(ns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("-n: %q is not a positive number", f)
		}
		cfg.ns = append(cfg.ns, n)
	}
	for _, v := range strings.Split(only, ",") {
		if !slices.Contains(variants, v) {
			return fmt.Errorf("-variants: %q is not azlease, raw or http", v)
		}
		cfg.variants = append(cfg.variants, v)
	}
	switch tlsMode {
	case "http":
		cfg.tls = []bool{false}
	case "tls":
		cfg.tls = []bool{true}
	case "both":
		cfg.tls = []bool{false, true}
	default:
		return fmt.Errorf("-tls: %q is not http, tls or both", tlsMode)
	}
	if cfg.reps < 1 {
		return fmt.Errorf("-reps: %d: at least 1", cfg.reps)
	}
	start := time.Now()
	machine := machineInfo(start)
	cells, runErr := orchestrate(cfg, os.Stderr)
	var b strings.Builder
	report(&b, cfg, cells, machine)
	fmt.Fprintf(&b, "\nThe whole run took %v.\n", time.Since(start).Round(time.Second))
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
		return err
	}
	if rawOut != "" {
		data, err := json.MarshalIndent(cells, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(rawOut, data, 0o644); err != nil {
			return err
		}
	}
	if runErr != nil {
		fmt.Fprintf(os.Stderr, "manybench: some cells failed:\n%v\n", runErr)
	}
	return nil
}
