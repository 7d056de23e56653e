package gocronlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
)

// The harness of the fleet tests: several gocron schedulers, each on a
// client of its own (a host), with a clock of its own (skewed), started at
// times of their own, running the same job.

// skewedClock is a host's clock for gocron: the real (or synctest) clock
// plus skew. Durations (timers, sleeps) are the real clock's: a host whose
// clock is ahead by skew fires skew early.
type skewedClock struct {
	clockwork.Clock
	skew time.Duration
}

func (c skewedClock) Now() time.Time                  { return c.Clock.Now().Add(c.skew) }
func (c skewedClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c skewedClock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }

// host is one replica: its name (its storage client's), clock skew, and
// start, relative to the fleet's start.
type host struct {
	name        string
	skew, start time.Duration
}

// runRecord is one run of the job: the host, the tick by that host's clock,
// and when it ran by the real clock.
type runRecord struct {
	host       string
	tick       time.Time
	start, end time.Time
	// recorded is false for a run whose Unlock reported that it may not be
	// recorded (its lease was lost mid-run).
	recorded bool
}

// recorder collects runs and lock refusals, safe for concurrent use.
type recorder struct {
	mu      sync.Mutex
	runs    []runRecord
	skipped map[string]int // why Lock refused, by reason
}

func (r *recorder) add(rec runRecord) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs = append(r.runs, rec)
	return len(r.runs) - 1
}

func (r *recorder) finish(i int, end time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs[i].end = end
}

func (r *recorder) skip(err error) {
	reason := "other"
	switch {
	case errors.Is(err, ErrTickDone):
		reason = "done"
	case errors.Is(err, ErrTickBusy):
		reason = "busy"
	case errors.Is(err, azlease.ErrLeaseHeld):
		reason = "held"
	case errors.Is(err, azlease.ErrOnceTooLate):
		reason = "too late"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.skipped == nil {
		r.skipped = map[string]int{}
	}
	r.skipped[reason]++
}

// byTick returns the runs grouped by tick, and the ticks in order.
func (r *recorder) byTick() (map[time.Time][]runRecord, []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[time.Time][]runRecord{}
	for _, rec := range r.runs {
		m[rec.tick] = append(m[rec.tick], rec)
	}
	ticks := make([]time.Time, 0, len(m))
	for t := range m {
		ticks = append(ticks, t)
	}
	sort.Slice(ticks, func(i, j int) bool { return ticks[i].Before(ticks[j]) })
	return m, ticks
}

// recordingLocker wraps a gocron.Locker to count refusals and to learn
// whether each run's Unlock said it was recorded.
type recordingLocker struct {
	gocron.Locker
	rec *recorder
}

func (l recordingLocker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	lk, err := l.Locker.Lock(ctx, key)
	if err != nil {
		l.rec.skip(err)
	}
	return lk, err
}

// scheduler starts h's gocron scheduler with one job, "report", every
// period from StartAt's aligned start (or from start + period when align
// is nil), using locker or elector, and returns it running. job gets the
// host's clock.
func scheduler(t *testing.T, h host, period time.Duration, align func(clock clockwork.Clock) gocron.JobOption,
	opt gocron.SchedulerOption, job func(clock clockwork.Clock)) gocron.Scheduler {
	t.Helper()
	clock := skewedClock{Clock: clockwork.NewRealClock(), skew: h.skew}
	s, err := gocron.NewScheduler(gocron.WithClock(clock), opt, gocron.WithStopTimeout(time.Minute))
	require.NoError(t, err)
	jobOpts := []gocron.JobOption{gocron.WithName("report")}
	if align != nil {
		jobOpts = append(jobOpts, align(clock))
	}
	_, err = s.NewJob(gocron.DurationJob(period), gocron.NewTask(func() { job(clock) }), jobOpts...)
	require.NoError(t, err)
	s.Start()
	return s
}

// checkOncePerTick checks that every tick from first to last ran exactly
// once, and that no tick ran more than once, and returns a summary.
func checkOncePerTick(t *testing.T, r *recorder, first, last time.Time, period time.Duration) string {
	t.Helper()
	runs, ticks := r.byTick()
	var problems []string
	for _, tk := range ticks {
		if n := len(runs[tk]); n > 1 {
			problems = append(problems, fmt.Sprintf("tick %s ran %d times: %v", tk.Format("15:04:05"), n, hostsOf(runs[tk])))
		}
	}
	missed := 0
	for tk := first; !tk.After(last); tk = tk.Add(period) {
		if len(runs[tk]) == 0 {
			missed++
			problems = append(problems, "tick "+tk.Format("15:04:05")+" did not run")
		}
	}
	require.Empty(t, problems, "%d problems", len(problems))
	hosts := map[string]int{}
	for _, rec := range r.runs {
		hosts[rec.host]++
	}
	return fmt.Sprintf("%d ticks, %d runs, 0 missed, runs per host %v, refusals %v", int(last.Sub(first)/period)+1, len(r.runs), hosts, r.skipped)
}

func hostsOf(rs []runRecord) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.host)
	}
	slices.Sort(out)
	return out
}

// fleetHosts are five hosts whose clocks and start times are skewed by up
// to ±1.5 s, the extremes included.
var fleetHosts = []host{
	{"h0", -1500 * time.Millisecond, 1200 * time.Millisecond},
	{"h1", -700 * time.Millisecond, -1500 * time.Millisecond},
	{"h2", 0, 300 * time.Millisecond},
	{"h3", 800 * time.Millisecond, 1500 * time.Millisecond},
	{"h4", 1500 * time.Millisecond, -600 * time.Millisecond},
}

func hostNames(hs []host) string {
	var b strings.Builder
	for _, h := range hs {
		fmt.Fprintf(&b, "%s(clock %+v, start %+v) ", h.name, h.skew, h.start)
	}
	return b.String()
}
