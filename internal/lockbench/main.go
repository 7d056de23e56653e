// Command lockbench measures issue 25's fair locks side by side, in one run
// on one machine: azlease's fair Mutex (the default) and the Mutex with
// MutexOptions.Unordered (the waiting before issue 25) on the azleasetest
// emulator served over loopback HTTP, and etcd's concurrency.Mutex on an
// embedded single-node etcd. Four scenarios: the order in which W queued
// waiters are served, with the hand-off gaps; what 50 waiters cost behind
// a holder that keeps the lock, once they have settled; throughput with 50
// contenders and zero-length holds; and what a waiter that dies in the
// queue costs the next one. It writes a markdown report (without a top-level heading:
// `make bench` folds it into bench/results.md through internal/bench).
//
// It is a module of its own so that etcd never reaches azlease's go.mod:
//
//	go -C internal/lockbench run . -out FILE
//
// Everything listens on and talks to loopback addresses only.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"
)

func main() {
	var p params
	out := flag.String("out", "", "write the markdown report to this file (default: standard output)")
	waiters := flag.String("waiters", "8,16,50", "the order scenario's numbers of waiters W, comma-separated")
	only := flag.String("only", "", "contenders to run, comma-separated: fair, unordered, etcd, etcd-nofsync (default all)")
	flag.DurationVar(&p.spacing, "spacing", 150*time.Millisecond, "time between two waiters' asking")
	flag.DurationVar(&p.hold, "hold", 300*time.Millisecond, "how long each waiter keeps the lock in the order scenario")
	flag.IntVar(&p.costWaiters, "cost-waiters", 50, "waiters behind a holder that keeps the lock, in the cost scenario")
	windows := flag.String("cost-windows", "1m+1m,5m+2m", "cost scenario: windows START+LENGTH after the last waiter asked, in which every client's requests are counted")
	flag.IntVar(&p.costReps, "cost-reps", 1, "repetitions of the cost scenario (at most -reps; each lasts until its last window ends)")
	flag.IntVar(&p.contenders, "contenders", 50, "contenders in the throughput scenario")
	flag.DurationVar(&p.window, "window", 10*time.Second, "duration of the throughput scenario")
	flag.IntVar(&p.reps, "reps", 3, "repetitions of every scenario")
	flag.DurationVar(&p.etcdTTL, "etcd-ttl", 15*time.Second, "etcd sessions' TTL, whole seconds (azlease's default lease duration; etcd's default is 60 s)")
	scenarios := flag.String("scenarios", "order,cost,throughput,dead", "scenarios to run, comma-separated (the others' tables show \"not run\")")
	trace := flag.Bool("trace", false, "write every azlease request and each scenario's events to standard error")
	flag.Parse()
	if *trace {
		tracing = time.Now()
	}
	if err := parseScenarios(&p, *scenarios); err != nil {
		fmt.Fprintln(os.Stderr, "lockbench:", err)
		os.Exit(2)
	}
	if err := parseWindows(&p, *windows); err != nil {
		fmt.Fprintln(os.Stderr, "lockbench:", err)
		os.Exit(2)
	}
	if err := mainErr(&p, *out, *waiters, *only); err != nil {
		fmt.Fprintln(os.Stderr, "lockbench:", err)
		os.Exit(1)
	}
}

func mainErr(p *params, out, waiters, only string) error {
	for _, f := range strings.Split(waiters, ",") {
		w, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || w < 1 {
			return fmt.Errorf("-waiters: %q is not a positive number", f)
		}
		p.waiters = append(p.waiters, w)
	}
	if err := p.validate(); err != nil {
		return err
	}
	var keys []string
	if only != "" {
		keys = strings.Split(only, ",")
	}
	cs, err := selectContenders(keys)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	r, runErr := run(ctx, *p, cs, os.Stderr)
	report := render(r)
	if out == "" {
		_, err = os.Stdout.WriteString(report)
	} else {
		err = os.WriteFile(out, []byte(report), 0o644)
	}
	return errors.Join(runErr, err)
}

// parseScenarios reads -scenarios.
func parseScenarios(p *params, spec string) error {
	p.scenarios = map[string]bool{}
	for _, f := range strings.Split(spec, ",") {
		switch f = strings.TrimSpace(f); f {
		case "order", "cost", "throughput", "dead":
			p.scenarios[f] = true
		default:
			return fmt.Errorf("-scenarios: %q is none of order, cost, throughput, dead", f)
		}
	}
	return nil
}

// parseWindows reads -cost-windows: START+LENGTH pairs, in order, not
// overlapping.
func parseWindows(p *params, spec string) error {
	var end time.Duration
	for _, f := range strings.Split(spec, ",") {
		a, b, ok := strings.Cut(strings.TrimSpace(f), "+")
		start, err1 := time.ParseDuration(a)
		length, err2 := time.ParseDuration(b)
		if !ok || err1 != nil || err2 != nil || start < end || length <= 0 {
			return fmt.Errorf("-cost-windows: %q is not START+LENGTH after the window before (1m+1m)", f)
		}
		p.costWindows = append(p.costWindows, costWindow{start, length})
		end = start + length
	}
	return nil
}

func (p params) validate() error {
	switch {
	case len(p.waiters) == 0:
		return errors.New("-waiters: none")
	case p.spacing <= 0 || p.hold < 0 || p.window <= 0:
		return errors.New("-spacing and -window must be positive, -hold not negative")
	case len(p.costWindows) == 0:
		return errors.New("-cost-windows: none")
	case p.contenders < 1 || p.reps < 1 || p.costWaiters < 1 || p.costReps < 1:
		return errors.New("-contenders, -cost-waiters, -reps and -cost-reps must be at least 1")
	case p.etcdTTL < time.Second || p.etcdTTL%time.Second != 0:
		return errors.New("-etcd-ttl: whole seconds, at least 1 s")
	}
	return nil
}

// run starts every contender's service and runs each scenario's
// repetitions, contenders interleaved. A failing cell records its error and
// runs no further repetition; the others go on, and run returns the errors
// joined with the results.
func run(ctx context.Context, p params, cs []contender, log io.Writer) (*results, error) {
	r := &results{p: p, contenders: cs, notBuilt: map[string]bool{}, cells: map[string]*cell{},
		start: time.Now(), loadStart: loadAverage()}
	defer func() { r.end, r.loadEnd = time.Now(), loadAverage() }()
	backends := map[string]backend{}
	defer func() {
		for _, be := range backends {
			be.close()
		}
	}()
	var errs []error
	for _, c := range cs {
		be, err := c.start(ctx, p)
		switch {
		case errors.Is(err, errNotBuilt):
			fmt.Fprintf(log, "%s: not built yet\n", c.name)
			r.notBuilt[c.key] = true
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", c.name, err))
			for _, k := range r.keys(c.key) {
				r.cells[k] = &cell{err: err}
			}
		default:
			backends[c.key] = be
		}
	}
	// each runs one repetition of a cell on every contender that has a
	// service and has not failed that cell yet.
	each := func(key func(c string) string, what string, rep int, f func(be backend, c *cell, name string) error) {
		for _, c := range cs {
			be, ok := backends[c.key]
			if !ok || ctx.Err() != nil {
				continue
			}
			k := key(c.key)
			ce := r.cells[k]
			if ce == nil {
				ce = &cell{}
				r.cells[k] = ce
			}
			if ce.err != nil {
				continue
			}
			fmt.Fprintf(log, "%s: %s, repetition %d of %d…\n", c.name, what, rep+1, p.reps)
			name := strings.NewReplacer("/", "-").Replace(fmt.Sprintf("%s-r%d", k, rep))
			if err := f(be, ce, name); err != nil {
				ce.err = err
				errs = append(errs, fmt.Errorf("%s, %s: %w", c.name, what, err))
			}
		}
	}
	for rep := range p.reps {
		for _, w := range p.waiters {
			if !p.runs("order") {
				break
			}
			each(func(c string) string { return orderKey(c, w) }, fmt.Sprintf("order, W = %d", w), rep,
				func(be backend, ce *cell, name string) error {
					o, err := runOrder(ctx, be, name, w, p)
					if err == nil {
						ce.orders = append(ce.orders, o)
					}
					return err
				})
		}
		if rep < p.costReps && p.runs("cost") {
			each(costKey, fmt.Sprintf("cost, %d waiters", p.costWaiters), rep,
				func(be backend, ce *cell, name string) error {
					c, err := runCost(ctx, be, name, p.costWaiters, p)
					if err == nil {
						ce.costs = append(ce.costs, c)
					}
					return err
				})
		}
		if p.runs("throughput") {
			each(throughputKey, fmt.Sprintf("throughput, %d contenders", p.contenders), rep,
				func(be backend, ce *cell, name string) error {
					t, err := runThroughput(ctx, be, name, p.contenders, p.window)
					if err == nil {
						ce.tps = append(ce.tps, t)
					}
					return err
				})
		}
		for _, how := range []string{deadNone, deadCanceled, deadKilled} {
			if !p.runs("dead") {
				break
			}
			each(func(c string) string { return deadKey(c, how) }, "dead waiter, "+how, rep,
				func(be backend, ce *cell, name string) error {
					g, called, err := runDead(ctx, be, name, how, p)
					if err == nil {
						ce.gaps = append(ce.gaps, g)
						ce.deadCalled = append(ce.deadCalled, called)
					}
					return err
				})
		}
	}
	return r, errors.Join(append(errs, ctx.Err())...)
}

// keys are every cell key of contender c.
func (r *results) keys(c string) []string {
	var ks []string
	for _, w := range r.p.waiters {
		ks = append(ks, orderKey(c, w))
	}
	ks = append(ks, costKey(c), throughputKey(c))
	for _, how := range []string{deadNone, deadCanceled, deadKilled} {
		ks = append(ks, deadKey(c, how))
	}
	return ks
}
