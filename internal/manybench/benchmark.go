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
func benchmark(out, rawOut, ns, only string, reps int, tlsMode string, quick, burst bool, window, renew, lease, settle time.Duration, parallel int, heading string) error {
	cfg := runConfig{reps: reps, window: window, renew: renew, settle: settle, lease: lease, parallel: parallel, burst: burst, heading: heading}
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
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	// The table and the raw figures are rewritten after every cell: a run
	// stopped part way (a cell that outgrows the machine, an impatient
	// operator) keeps what it measured, marked as incomplete.
	var writeErr error
	write := func(cells []cell, total int) {
		var b strings.Builder
		report(&b, cfg, cells, machine)
		if len(cells) < total {
			fmt.Fprintf(&b, "\nIncomplete: %d of %d cells measured after %v.\n", len(cells), total, time.Since(start).Round(time.Second))
		} else {
			fmt.Fprintf(&b, "\nThe whole run took %v.\n", time.Since(start).Round(time.Second))
		}
		if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
			writeErr = err
			return
		}
		if rawOut != "" {
			data, err := json.MarshalIndent(cells, "", "  ")
			if err == nil {
				err = os.WriteFile(rawOut, data, 0o644)
			}
			if err != nil {
				writeErr = err
			}
		}
	}
	runErr := orchestrate(cfg, os.Stderr, write)
	if writeErr != nil {
		return writeErr
	}
	if runErr != nil {
		fmt.Fprintf(os.Stderr, "manybench: some cells failed:\n%v\n", runErr)
	}
	return nil
}
