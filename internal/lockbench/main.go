// Command lockbench measures issue 25's fair locks side by side, in one run
// on one machine: azlease's fair Mutex (the default) and the Mutex with
// MutexOptions.Unordered (the waiting before issue 25) on the azleasetest
// emulator served over loopback HTTP, and etcd's concurrency.Mutex on an
// embedded single-node etcd. Issue 25's four scenarios: the order in which
// W queued waiters are served, with the hand-off gaps; what 50 waiters cost
// behind a holder that keeps the lock, once they have settled; throughput
// with 50 contenders and zero-length holds; and what a waiter that dies in
// the queue costs the next one. Issue 35's three: holds of every length
// (-holds: 0 to 10 min) with 1 and 50 waiters behind each holder (requests
// while waiting, per acquisition, and the gap from the Unlock call);
// pass-over runs after a stand-still; and dead waiters anywhere in a queue
// of 50. It writes a markdown report (without a top-level heading:
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
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() { os.Exit(lockbench()) }

// lockbench is the command; it returns the exit code, so that the CPU
// profile is flushed on every path.
func lockbench() int {
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
	scenarios := flag.String("scenarios", strings.Join(allScenarios, ","), "scenarios to run, comma-separated (the others' tables show \"not run\")")
	holds := flag.String("holds", "0,10ms,100ms,1s,1m", "holds scenario: hold lengths, comma-separated (10m: about 10 minutes per contender and W)")
	holdWaiters := flag.String("hold-waiters", "1,50", "holds scenario: waiters W behind each holder (W+1 contenders), comma-separated")
	flag.IntVar(&p.handoffs, "handoffs", 3, "holds scenario: a run lasts -window and at least this many hand-offs (holds under a minute)")
	flag.IntVar(&p.longHandoffs, "long-handoffs", 2, "holds scenario: the same for holds of a minute or more")
	flag.IntVar(&p.longReps, "long-reps", 1, "holds scenario: repetitions of holds of a minute or more (at most -reps)")
	flag.DurationVar(&p.standStill, "stand-still", 15*time.Second, "pass-over scenario: how long the first holder keeps the lock (or how long its lease outlives it)")
	flag.IntVar(&p.passoverWaiters, "passover-waiters", 10, "pass-over scenario: waiters queued during the stand-still")
	flag.DurationVar(&p.passoverSpacing, "passover-spacing", 100*time.Millisecond, "pass-over scenario: time between two waiters' asking")
	flag.DurationVar(&p.passoverHold, "passover-hold", 10*time.Millisecond, "pass-over scenario: each hold after the stand-still")
	flag.IntVar(&p.deadWaiters, "dead-waiters", 50, "dead-waiters scenario: the queue's length (at least 5)")
	flag.DurationVar(&p.deadSpacing, "dead-spacing", 20*time.Millisecond, "dead-waiters scenario: time between two waiters' asking")
	flag.DurationVar(&p.deadHold, "dead-hold", 10*time.Millisecond, "dead-waiters scenario: each waiter's hold once served")
	flag.DurationVar(&p.deadCut, "dead-cut", 8*time.Second, "dead-waiters scenario: how long the third victim is cut off (less than -etcd-ttl)")
	trace := flag.Bool("trace", false, "write every azlease request and each scenario's events to standard error")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof)")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "lockbench:", err)
			return 2
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	if *trace {
		tracing = time.Now()
	}
	if err := parseScenarios(&p, *scenarios); err != nil {
		fmt.Fprintln(os.Stderr, "lockbench:", err)
		return 2
	}
	if err := parseWindows(&p, *windows); err != nil {
		fmt.Fprintln(os.Stderr, "lockbench:", err)
		return 2
	}
	if err := parseHolds(&p, *holds, *holdWaiters); err != nil {
		fmt.Fprintln(os.Stderr, "lockbench:", err)
		return 2
	}
	if err := mainErr(&p, *out, *waiters, *only); err != nil {
		fmt.Fprintln(os.Stderr, "lockbench:", err)
		return 1
	}
	return 0
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

// allScenarios are -scenarios' names, in the order they run.
var allScenarios = []string{"order", "cost", "throughput", "dead", "holds", "passover", "deadq"}

// parseScenarios reads -scenarios.
func parseScenarios(p *params, spec string) error {
	p.scenarios = map[string]bool{}
	for _, f := range strings.Split(spec, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(allScenarios, f) {
			return fmt.Errorf("-scenarios: %q is none of %s", f, strings.Join(allScenarios, ", "))
		}
		p.scenarios[f] = true
	}
	return nil
}

// parseHolds reads -holds and -hold-waiters.
func parseHolds(p *params, holds, waiters string) error {
	for _, f := range strings.Split(holds, ",") {
		f = strings.TrimSpace(f)
		if f == "0" {
			f = "0s"
		}
		d, err := time.ParseDuration(f)
		if err != nil || d < 0 {
			return fmt.Errorf("-holds: %q is not a hold length (0, 10ms, 1m)", f)
		}
		p.holds = append(p.holds, d)
	}
	for _, f := range strings.Split(waiters, ",") {
		w, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || w < 1 {
			return fmt.Errorf("-hold-waiters: %q is not a positive number", f)
		}
		p.holdWaiters = append(p.holdWaiters, w)
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
	case len(p.holds) == 0 || len(p.holdWaiters) == 0:
		return errors.New("-holds, -hold-waiters: none")
	case p.handoffs < 1 || p.longHandoffs < 1 || p.longReps < 1:
		return errors.New("-handoffs, -long-handoffs and -long-reps must be at least 1")
	case p.standStill <= 0 || p.passoverWaiters < 1 || p.passoverSpacing <= 0 || p.passoverHold < 0:
		return errors.New("-stand-still, -passover-waiters and -passover-spacing must be positive, -passover-hold not negative")
	case p.deadWaiters < 5 || p.deadSpacing <= 0 || p.deadHold < 0 || p.deadCut <= 0 || p.deadCut >= p.etcdTTL:
		return errors.New("-dead-waiters must be at least 5, -dead-spacing and -dead-cut positive, -dead-cut under -etcd-ttl, -dead-hold not negative")
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
		for _, how := range deadHows {
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
		for _, h := range p.holds {
			if !p.runs("holds") || (h >= maxWaitWindow && rep >= p.longReps) {
				continue
			}
			for _, w := range p.holdWaiters {
				each(func(c string) string { return holdsKey(c, h, w) }, fmt.Sprintf("holds of %v, %d waiting", h, w), rep,
					func(be backend, ce *cell, name string) error {
						hr, err := runHolds(ctx, be, name, h, w, p)
						if err == nil {
							ce.holds = append(ce.holds, hr)
						}
						return err
					})
			}
		}
		for _, how := range standHows {
			if !p.runs("passover") {
				break
			}
			each(func(c string) string { return passoverKey(c, how) }, "pass-over, stand-still "+how, rep,
				func(be backend, ce *cell, name string) error {
					pr, err := runPassover(ctx, be, name, how, p)
					if err == nil {
						ce.passovers = append(ce.passovers, pr)
					}
					return err
				})
		}
		for _, v := range queueVariants {
			if !p.runs("deadq") {
				break
			}
			each(func(c string) string { return deadQueueKey(c, v) }, fmt.Sprintf("%d waiters, victims: %s", p.deadWaiters, v), rep,
				func(be backend, ce *cell, name string) error {
					dr, err := runDeadQueue(ctx, be, name, v, p)
					if err == nil {
						ce.deadQueues = append(ce.deadQueues, dr)
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
	for _, how := range deadHows {
		ks = append(ks, deadKey(c, how))
	}
	for _, h := range r.p.holds {
		for _, w := range r.p.holdWaiters {
			ks = append(ks, holdsKey(c, h, w))
		}
	}
	for _, how := range standHows {
		ks = append(ks, passoverKey(c, how))
	}
	for _, v := range queueVariants {
		ks = append(ks, deadQueueKey(c, v))
	}
	return ks
}
