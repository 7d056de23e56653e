package azlease_test

// The retention simulation (issue 34 item 2, under faults): callers on
// several machines run a job once per tick with DoOnceOptions.Retention, as
// gocronlock and `azlease once --per` do, firing seconds apart, while
// requests fail, hang, lose their answers or are applied late, machines are
// cut off, storage has outages and callers pause. Records older than
// Retention are deleted by the callers as they go. The checker asserts, per
// tick:
//   - at most one call returned Ran true, and its fn ran in the term of the
//     final marker when one is left (a deleted key that ran again would
//     show as two);
//   - fn's runs lie inside leases the server granted to their terms, never
//     overlap, and their epochs grow (azleasetest.CheckIntervals);
//   - fn never begins later than Retention/2 plus a lease duration after its
//     call's start (the key is taken within Retention/2 or the call returns
//     ErrOnceTooLate; fn then starts within the lease it took);
// and at the end, the number of records left is bounded by Retention/period
// plus the deletes the faults made fail (counted, reported).

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

// retentionScenario is one seed's world.
type retentionScenario struct {
	seed      uint64
	callers   int
	period    time.Duration // between ticks
	ticks     int
	skew      time.Duration // callers fire up to this late after a tick
	retention time.Duration
	faultRate float64
	clockRate float64
	lease     time.Duration
	poll      time.Duration
	events    []event // crash (cut off for dur), outage, pause (a caller fires late by dur)
}

func newRetentionScenario(seed uint64) retentionScenario {
	rng := rand.New(rand.NewPCG(seed, 0x4e7e))
	sc := retentionScenario{
		seed:      seed,
		callers:   2 + rng.IntN(4),
		period:    time.Duration([]int{5, 10, 20}[rng.IntN(3)]) * time.Second,
		skew:      time.Duration(rng.IntN(2500)) * time.Millisecond,
		retention: time.Duration([]int{60, 60, 90, 180}[rng.IntN(4)]) * time.Second,
		faultRate: rng.Float64() * 0.3,
		clockRate: []float64{1, 1, 1.01, 0.99, 1.04}[rng.IntN(5)],
		lease:     time.Duration([]int{15, 15, 20, 30}[rng.IntN(4)]) * time.Second,
		poll:      time.Duration([]int{1, 2, 2, 5}[rng.IntN(4)]) * time.Second,
	}
	sc.ticks = int(8 * time.Minute / sc.period)
	for at := 20 * time.Second; at < 7*time.Minute; at += time.Duration(15+rng.IntN(40)) * time.Second {
		kind := []string{"crash", "crash", "outage", "pause"}[rng.IntN(4)]
		sc.events = append(sc.events, event{at: at, kind: kind, node: rng.IntN(sc.callers), dur: time.Duration(1+rng.IntN(120)) * time.Second})
	}
	return sc
}

func (sc retentionScenario) String() string {
	return fmt.Sprintf("seed %d: %d callers, a tick every %v (%d), skew %v, Retention %v, faults %.0f%%, server clock ×%.2f, lease %v, poll %v, %d events",
		sc.seed, sc.callers, sc.period, sc.ticks, sc.skew, sc.retention, sc.faultRate*100, sc.clockRate, sc.lease, sc.poll, len(sc.events))
}

// retentionStats is what one run measured.
type retentionStats struct {
	calls    map[string]int // by outcome
	fnRuns   int
	ticksRun int // ticks whose job ran and said so (Ran true)
	twice    int // ticks with more than one Ran true
	late     int // runs of fn begun more than Retention/2 + a lease duration after their call
	wrong    int // ticks whose Ran answer disagrees with a marker still there
	outside  int
	overlaps int
	epochs   int
	left     int // records left at the end
	bound    int // what left is checked against
}

func (s *retentionStats) add(o retentionStats) {
	if s.calls == nil {
		s.calls = map[string]int{}
	}
	for k, v := range o.calls {
		s.calls[k] += v
	}
	s.fnRuns += o.fnRuns
	s.ticksRun += o.ticksRun
	s.twice += o.twice
	s.late += o.late
	s.wrong += o.wrong
	s.outside += o.outside
	s.overlaps += o.overlaps
	s.epochs += o.epochs
	s.left = max(s.left, o.left)
}

func (s retentionStats) violations() int {
	n := s.twice + s.late + s.wrong + s.outside + s.overlaps + s.epochs
	if s.left > s.bound {
		n++
	}
	return n
}

// retentionCall is a DoOnce call and when it began.
type retentionCall struct {
	onceCall
	start time.Time
}

// runRetentionScenario plays sc. It must run inside a synctest bubble.
func runRetentionScenario(t *testing.T, sc retentionScenario) retentionStats {
	c := newCluster(t, azlease.ElectorOptions{})
	c.emu.SetClockRate(sc.clockRate)
	mix := newFaultMix(sc.seed, sc.faultRate, sc.lease, false)
	var outage atomic.Bool
	c.setFaults(func(r azleasetest.Request) azleasetest.Fault {
		if r.Client == "observer" {
			return azleasetest.Fault{}
		}
		if outage.Load() {
			return azleasetest.Fault{Action: azleasetest.Fail}
		}
		return mix.draw(r)
	})
	keyName := func(tick int) string { return fmt.Sprintf("tick/%06d", tick) }
	blobOf := func(tick int) string { return "once/" + keyName(tick) }

	t0 := time.Now()
	var (
		mu     sync.Mutex
		calls  []retentionCall
		runs   = make([][]believed, sc.ticks)
		paused = make([]atomic.Int64, sc.callers) // a caller fires this much later (ns), for a pause
		all    sync.WaitGroup
	)
	for i := range sc.callers {
		name := fmt.Sprintf("c%d", i)
		opts := azlease.DoOnceOptions{Identity: name, MaxAttempts: 1, LeaseDuration: sc.lease, PollInterval: sc.poll, Retention: sc.retention}
		rng := rand.New(rand.NewPCG(sc.seed, uint64(i)))
		all.Go(func() {
			last := -1
			for next := range sc.ticks {
				fire := t0.Add(time.Duration(next)*sc.period + time.Duration(rng.Int64N(int64(sc.skew)+1)))
				time.Sleep(time.Until(fire))
				if d := time.Duration(paused[i].Swap(0)); d > 0 {
					time.Sleep(d) // the caller was paused: it fires late
				}
				// The key is the tick the firing time is nearest to, as
				// gocronlock and `azlease once --per` key a run: a caller
				// that fires late after a pause runs the tick it is in,
				// and the ticks it slept through are not fired again
				// (gocron and cron skip missed runs).
				tick := int((time.Since(t0) + sc.period/2) / sc.period)
				if tick <= last || tick >= sc.ticks {
					continue
				}
				last = tick
				work := time.Duration(rng.IntN(3000)) * time.Millisecond
				// Most calls give up after two ticks; some wait minutes,
				// past Retention, through a cut-off or an outage.
				patience := 2*sc.period + sc.lease
				if rng.IntN(3) == 0 {
					patience = 5 * time.Minute
				}
				call := &onceCall{caller: name, key: tick}
				start := time.Now()
				all.Go(func() { // each tick's call on its own, as a scheduler's job
					ctx, cancel := context.WithTimeout(context.Background(), patience)
					defer cancel()
					call.res, call.err = azlease.DoOnce(ctx, c.emu.client(name), keyName(tick), &opts, func(ctx context.Context, tok azlease.Token) error {
						call.ran, call.epoch = true, tok.Epoch
						if ctx.Err() != nil {
							return context.Cause(ctx)
						}
						b := believed{node: name, epoch: tok.Epoch, leaseID: tok.LeaseID, start: time.Now()}
						b.end = b.start
						defer func() {
							mu.Lock()
							runs[tick] = append(runs[tick], b)
							mu.Unlock()
						}()
						for until := time.Now().Add(work); time.Now().Before(until); {
							select {
							case <-ctx.Done():
								return context.Cause(ctx)
							case <-time.After(100 * time.Millisecond):
							}
							if ctx.Err() != nil {
								return context.Cause(ctx)
							}
							b.end = time.Now()
						}
						call.done = true
						return nil
					})
					call.outcome = outcomeOf(call.res, call.err)
					if errors.Is(call.err, azlease.ErrOnceTooLate) {
						call.outcome = "too late"
					}
					mu.Lock()
					calls = append(calls, retentionCall{*call, start})
					mu.Unlock()
				})
			}
		})
	}

	var pending sync.WaitGroup
	for _, ev := range sc.events {
		time.Sleep(time.Until(t0.Add(ev.at)))
		switch ev.kind {
		case "crash":
			c.cutOffFor(&pending, fmt.Sprintf("c%d", ev.node), ev.dur)
		case "outage":
			outage.Store(true)
			time.Sleep(min(ev.dur, 10*time.Second))
			outage.Store(false)
		case "pause":
			paused[ev.node].Store(int64(ev.dur))
		}
	}
	pending.Wait()
	all.Wait()
	c.stopAll()
	time.Sleep(3 * sc.lease) // requests applied late land

	var st retentionStats
	st.calls = map[string]int{}
	ranBy := make([][]retentionCall, sc.ticks)
	for _, cl := range calls {
		st.calls[cl.outcome]++
		if cl.ran {
			st.fnRuns++
		}
		if cl.res.Ran {
			ranBy[cl.key] = append(ranBy[cl.key], cl)
		}
	}
	var report []string
	for tick := range sc.ticks {
		if len(ranBy[tick]) > 0 {
			st.ticksRun++
		}
		if len(ranBy[tick]) > 1 {
			st.twice++
			report = append(report, fmt.Sprintf("tick %d: %d calls returned Ran true", tick, len(ranBy[tick])))
		}
		for _, cl := range ranBy[tick] {
			if cl.res.Status.Epoch != cl.epoch || !cl.ran {
				st.wrong++
				report = append(report, fmt.Sprintf("tick %d: %s returned Ran true with the marker of epoch %d, its fn ran in %d", tick, cl.caller, cl.res.Status.Epoch, cl.epoch))
			}
		}
		if err := azleasetest.CheckIntervals(c.emu.Grants(testContainer, blobOf(tick)), intervalsOf(runs[tick])); err != nil {
			var ee *azleasetest.ExclusionError
			require.ErrorAs(t, err, &ee)
			st.outside += ee.Count(azleasetest.OutsideGrant) + ee.Count(azleasetest.EndsBeforeStart)
			st.overlaps += ee.Count(azleasetest.Overlap)
			st.epochs += ee.Count(azleasetest.EpochBackwards)
			report = append(report, fmt.Sprintf("tick %d: %v", tick, err))
		}
	}
	for _, cl := range calls {
		if !cl.ran {
			continue
		}
		// fn ran: its call took the key within Retention/2 of its start,
		// and fn began within the lease it took.
		for _, b := range runs[cl.key] {
			if b.node == cl.caller && b.epoch == cl.epoch && b.start.Sub(cl.start) > sc.retention/2+sc.lease {
				st.late++
				report = append(report, fmt.Sprintf("tick %d: %s's fn began %v after its call (Retention %v)", cl.key, cl.caller, b.start.Sub(cl.start), sc.retention))
			}
		}
	}
	st.left = len(blobNames(t, c.emu.client("observer"), "once/tick/"))
	// Records younger than Retention (plus its slack and the last ticks'
	// own) stay; a sweep deletes up to 4 per call, so older ones go within
	// a tick or two after storage answers again.
	st.bound = int((sc.retention+2*time.Second+3*sc.lease)/sc.period) + 4
	if st.left > st.bound {
		report = append(report, fmt.Sprintf("%d records left, more than %d", st.left, st.bound))
	}
	if len(report) > 0 {
		t.Logf("%v:\n%s", sc, strings.Join(report, "\n"))
	}
	return st
}

// retentionSeeds: -seeds, else a twentieth of simSeeds (make test: 10), at
// least 6.
func retentionSeeds() int { return partSeeds(20, 6) }

// TestDoOnceRetentionSimulation plays once-per-tick scenarios with a
// Retention in fake time; see the top of this file for what it asserts.
// More seeds:
//
//	go test -run TestDoOnceRetentionSimulation . -seeds 500
func TestDoOnceRetentionSimulation(t *testing.T) {
	n := retentionSeeds()
	var total retentionStats
	simulation[retentionScenario, retentionStats]{
		seeds:    n,
		scenario: newRetentionScenario,
		play:     runRetentionScenario,
		check: func(t *testing.T, sc retentionScenario, st retentionStats) {
			if st.violations() > 0 {
				t.Errorf("%v: %d ticks run twice, %d runs begun past Retention/2 + lease, %d answers disagreeing with the marker, %d runs outside their lease, %d overlapping pairs, %d epochs that did not grow, %d records left (bound %d)",
					sc, st.twice, st.late, st.wrong, st.outside, st.overlaps, st.epochs, st.left, st.bound)
			}
		},
		add: func(_ retentionScenario, st retentionStats) { total.add(st) },
	}.run(t)
	t.Logf("%d seeds: %d fn runs, %d ticks run; calls %v; at most %d records left; %d ticks run twice, %d runs begun past Retention/2 + lease, %d answers disagreeing, %d outside, %d overlaps, %d epochs",
		n, total.fnRuns, total.ticksRun, total.calls, total.left, total.twice, total.late, total.wrong, total.outside, total.overlaps, total.epochs)
}
