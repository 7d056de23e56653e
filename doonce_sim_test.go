package azlease_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

// The DoOnce simulation (issue 19 item 1): callers on several machines call
// DoOnce on a few keys, again and again, while requests fail, hang, lose
// their answers or are applied late, machines are cut off from storage,
// storage has outages and an operator breaks the leases. fn works for a
// while under its term's context and sometimes fails. The checker asserts,
// per key:
//   - whenever the final marker says done, exactly one call returned Ran
//     true, and it ran in the marker's term; none when it is not done (a
//     call that said its completion "may not have been recorded" may stand
//     for the missing one: it could not know);
//   - no two runs of fn overlap, and each lies inside a lease the server
//     granted to its term's lease ID (azleasetest.CheckIntervals against the
//     server's grants), with epochs growing from run to run;
//   - the runs of fn that counted (all but those abandoned by their caller,
//     which do not count) never exceed the key's limit (the MaxAttempts
//     recorded with its first attempt), nor does the marker's count;
//   - every call whose fn returned nil returned Ran true or an error
//     wrapping ErrOnceUnrecorded (issue 24): its completion is never
//     hidden as "done elsewhere" or a bare loss.

// onceScenario is one seed's world.
type onceScenario struct {
	seed      uint64
	callers   int
	keys      int
	faultRate float64
	clockRate float64
	failRate  float64 // share of fn runs that return an error
	// limits are the callers' MaxAttempts: one value, or (a third of the
	// seeds) a different one per caller, so that the first recorded wins.
	limits   []int
	opts     azlease.DoOnceOptions
	events   []event // crash (a caller cut off for dur), outage, break
	length   time.Duration
	badStart time.Duration
	badLen   time.Duration
	// markerTrouble, in half the seeds, is the share of writes of a DoOnce
	// marker (running, done, failed) whose answer is lost (applied, then
	// the connection drops or hangs, or applied only after the writer gave
	// up), half of them followed by cutting the writer off for 5 to 40 s:
	// the runner then cannot tell whether its marker was recorded, issue
	// 19's scenario.
	markerTrouble float64
}

func newOnceScenario(seed uint64) onceScenario {
	rng := rand.New(rand.NewPCG(seed, 0x0dce))
	sc := onceScenario{
		seed:      seed,
		callers:   2 + rng.IntN(5),
		keys:      1 + rng.IntN(3),
		faultRate: rng.Float64() * 0.3,
		clockRate: []float64{1, 1, 1.01, 0.99, 1.04}[rng.IntN(5)],
		failRate:  []float64{0, 0.2, 0.5, 0.8}[rng.IntN(4)],
		length:    5 * time.Minute,
	}
	sc.opts.LeaseDuration = time.Duration([]int{15, 15, 20, 30}[rng.IntN(4)]) * time.Second
	sc.opts.PollInterval = time.Duration([]int{1, 2, 2, 5}[rng.IntN(4)]) * time.Second
	sc.limits = []int{1 + rng.IntN(4)}
	if rng.IntN(3) == 0 {
		for range sc.callers - 1 {
			sc.limits = append(sc.limits, 1+rng.IntN(4))
		}
	}
	for at := 20 * time.Second; at < sc.length-30*time.Second; at += time.Duration(15+rng.IntN(30)) * time.Second {
		kind := []string{"crash", "crash", "outage", "break"}[rng.IntN(4)]
		sc.events = append(sc.events, event{at: at, kind: kind, node: rng.IntN(sc.callers), dur: time.Duration(1+rng.IntN(40)) * time.Second})
	}
	if rng.IntN(3) == 0 {
		sc.badStart = time.Duration(20+rng.IntN(int(sc.length/time.Second)-140)) * time.Second
		sc.badLen = time.Duration(30+rng.IntN(90)) * time.Second
	}
	if rng.IntN(2) == 0 {
		sc.markerTrouble = 0.2 + 0.6*rng.Float64()
	}
	return sc
}

func (sc onceScenario) limit(caller int) int { return sc.limits[caller%len(sc.limits)] }

func (sc onceScenario) String() string {
	bad := "none"
	if sc.badLen > 0 {
		bad = fmt.Sprintf("%v+%v", sc.badStart, sc.badLen)
	}
	return fmt.Sprintf("seed %d: %d callers, %d keys, faults %.0f%%, marker writes lost %.0f%%, server clock ×%.2f, fn fails %.0f%%, MaxAttempts %v, lease %v, poll %v, %d events, bad period %s",
		sc.seed, sc.callers, sc.keys, sc.faultRate*100, sc.markerTrouble*100, sc.clockRate, sc.failRate*100, sc.limits, sc.opts.LeaseDuration, sc.opts.PollInterval, len(sc.events), bad)
}

// onceCall is what one DoOnce call did and returned.
type onceCall struct {
	caller  string
	key     int
	ran     bool   // fn ran in this call
	done    bool   // fn returned nil in this call
	epoch   uint64 // the term fn ran in
	res     azlease.OnceResult
	err     error
	outcome string
}

// outcomeOf names what a DoOnce call returned, for the statistics and the
// checker.
func outcomeOf(res azlease.OnceResult, err error) string {
	var fe *azlease.OnceFailedError
	switch {
	case err == nil && res.Ran:
		return "ran"
	case err == nil:
		return "done elsewhere"
	case errors.Is(err, azlease.ErrOnceUnrecorded) && strings.Contains(err.Error(), "ran twice"):
		return "overtaken"
	case errors.Is(err, errFnFailed):
		return "fn failed"
	case errors.As(err, &fe):
		return "exhausted"
	case strings.Contains(err.Error(), "abandoned by its caller"):
		return "abandoned"
	case strings.Contains(err.Error(), "may not have been recorded"):
		return "unknown"
	case strings.Contains(err.Error(), "could not be recorded"):
		return "not recorded"
	case errors.Is(err, azlease.ErrUnreachable):
		return "unreachable"
	case errors.Is(err, context.DeadlineExceeded):
		return "gave up"
	case errors.Is(err, azlease.ErrLeaseLost):
		return "lost"
	}
	return "other: " + err.Error()
}

var errFnFailed = errors.New("fn failed on purpose")

// onceStats is what one run of a scenario measured.
type onceStats struct {
	calls    map[string]int // by outcome
	fnRuns   int
	outside  int // fn runs outside their lease
	overlaps int // pairs of overlapping fn runs
	epochs   int // fn runs whose epoch did not grow over an earlier one's
	twice    int // keys with more than one Ran true
	wrong    int // keys whose final marker disagrees with the Ran answers
	tooMany  int // keys with more counted runs (or recorded attempts) than their limit
	hidden   int // calls whose fn returned nil that returned neither Ran true nor ErrOnceUnrecorded
	finals   map[azlease.OnceState]int
	requests int
	late     map[azleasetest.Op]int
	breaks   int
	logged   map[string]int // Warn lines, and settled completions, by message
}

func (s *onceStats) add(o onceStats) {
	if s.calls == nil {
		s.calls, s.finals, s.late, s.logged = map[string]int{}, map[azlease.OnceState]int{}, map[azleasetest.Op]int{}, map[string]int{}
	}
	for k, v := range o.logged {
		s.logged[k] += v
	}
	for k, v := range o.calls {
		s.calls[k] += v
	}
	for k, v := range o.finals {
		s.finals[k] += v
	}
	for k, v := range o.late {
		s.late[k] += v
	}
	s.fnRuns += o.fnRuns
	s.outside += o.outside
	s.overlaps += o.overlaps
	s.epochs += o.epochs
	s.twice += o.twice
	s.wrong += o.wrong
	s.tooMany += o.tooMany
	s.hidden += o.hidden
	s.requests += o.requests
	s.breaks += o.breaks
}

func (s onceStats) violations() int {
	return s.outside + s.overlaps + s.epochs + s.twice + s.wrong + s.tooMany + s.hidden
}

// runOnceScenario plays sc. It must run inside a synctest bubble.
func runOnceScenario(t *testing.T, sc onceScenario) onceStats {
	c := newCluster(t, azlease.ElectorOptions{})
	c.emu.SetClockRate(sc.clockRate)
	mix := newFaultMix(sc.seed, sc.faultRate, sc.opts.LeaseDuration, false)
	t0 := time.Now()
	if sc.badLen > 0 {
		mix.bad = badPeriod(mix, t0.Add(sc.badStart), t0.Add(sc.badStart+sc.badLen))
	}
	var outage atomic.Bool
	var healers sync.WaitGroup // ends the cut-offs markerTrouble starts
	var troubleMu sync.Mutex
	trouble := rand.New(rand.NewPCG(sc.seed, 0x7b1e))
	c.setFaults(func(r azleasetest.Request) azleasetest.Fault {
		if r.Client == "observer" {
			return azleasetest.Fault{}
		}
		if outage.Load() {
			return azleasetest.Fault{Action: azleasetest.Fail}
		}
		if r.Op == azleasetest.OpSetMetadata && r.Header.Get("X-Ms-Meta-Azleaseoncestate") != "" && sc.markerTrouble > 0 {
			troubleMu.Lock()
			lose, cut := trouble.Float64() < sc.markerTrouble, trouble.IntN(2) == 0
			f := []azleasetest.Fault{
				{Action: azleasetest.ApplyThenDrop},
				{Action: azleasetest.ApplyThenHang},
				{Action: azleasetest.ApplyLate, LateBy: time.Duration(trouble.Int64N(int64(2 * sc.opts.LeaseDuration)))},
			}[trouble.IntN(3)]
			d := time.Duration(5+trouble.IntN(36)) * time.Second
			troubleMu.Unlock()
			if lose {
				if cut {
					c.partition(r.Client, azleasetest.Hang)
					healers.Go(func() {
						time.Sleep(d)
						c.heal(r.Client)
					})
				}
				return f
			}
		}
		return mix.draw(r)
	})
	keyName := func(k int) string { return "k" + strconv.Itoa(k) }
	blobOf := func(k int) string { return "once/" + keyName(k) }

	logs := &countingHandler{counts: map[string]int{}}
	var mu sync.Mutex
	var calls []onceCall
	runs := make([][]believed, sc.keys) // fn's runs, by key
	var callers sync.WaitGroup
	for i := range sc.callers {
		name := fmt.Sprintf("c%d", i)
		opts := sc.opts
		opts.Identity, opts.MaxAttempts, opts.Logger = name, sc.limit(i), slog.New(logs)
		rng := rand.New(rand.NewPCG(sc.seed, uint64(i)))
		callers.Go(func() {
			for time.Since(t0) < sc.length {
				k := rng.IntN(sc.keys)
				// Most callers wait minutes; some give up soon, abandoning
				// a run in progress.
				patience := time.Duration(30+rng.IntN(150)) * time.Second
				if rng.IntN(5) == 0 {
					patience = time.Duration(1+rng.IntN(20)) * time.Second
				}
				call := onceCall{caller: name, key: k}
				work := time.Duration(rng.Int64N(int64(2 * sc.opts.LeaseDuration)))
				fail := rng.Float64() < sc.failRate
				ctx, cancel := context.WithTimeout(context.Background(), patience)
				call.res, call.err = azlease.DoOnce(ctx, c.emu.client(name), keyName(k), &opts, func(ctx context.Context, tok azlease.Token) error {
					call.ran, call.epoch = true, tok.Epoch
					if ctx.Err() != nil { // the term ended before fn began
						return context.Cause(ctx)
					}
					b := believed{node: name, epoch: tok.Epoch, leaseID: tok.LeaseID, start: time.Now()}
					b.end = b.start
					defer func() {
						mu.Lock()
						runs[k] = append(runs[k], b)
						mu.Unlock()
					}()
					// Work in steps, checking the term's context before
					// each: the run lasts until the last check that found
					// the term valid.
					for until := time.Now().Add(work); time.Now().Before(until); {
						select {
						case <-ctx.Done():
							return context.Cause(ctx)
						case <-time.After(time.Duration(200+rng.IntN(1800)) * time.Millisecond):
						}
						if ctx.Err() != nil {
							return context.Cause(ctx)
						}
						b.end = time.Now()
					}
					if fail {
						return errFnFailed
					}
					call.done = true
					return nil
				})
				cancel()
				call.outcome = outcomeOf(call.res, call.err)
				mu.Lock()
				calls = append(calls, call)
				mu.Unlock()
				time.Sleep(time.Duration(rng.IntN(5000)) * time.Millisecond)
			}
		})
	}

	var st onceStats
	var pending sync.WaitGroup
	brk := rand.New(rand.NewPCG(sc.seed, 0xb4e))
	for _, ev := range sc.events {
		time.Sleep(time.Until(t0.Add(ev.at)))
		switch ev.kind {
		case "crash":
			c.cutOffFor(&pending, fmt.Sprintf("c%d", ev.node), ev.dur)
		case "outage":
			outage.Store(true)
			time.Sleep(min(ev.dur, 10*time.Second))
			outage.Store(false)
		case "break":
			st.breaks++
			operator, err := azlease.NewLease(c.emu.client("operator"), blobOf(brk.IntN(sc.keys)), &azlease.LeaseOptions{LeaseDuration: sc.opts.LeaseDuration})
			require.NoError(t, err)
			// A break period of at least the lease duration, as in the
			// other simulations: a shorter one ends the lease before its
			// holder's validity deadline, which only fencing covers.
			period := sc.opts.LeaseDuration + time.Duration(brk.IntN(int((60*time.Second-sc.opts.LeaseDuration)/time.Second)+1))*time.Second
			pending.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_, _ = operator.Break(ctx, period)
			})
		}
	}
	pending.Wait()
	callers.Wait()
	healers.Wait()
	c.stopAll() // heals, and clears the faults
	// Requests applied late land at most two lease durations after their
	// senders gave up: let them, before reading the final markers.
	time.Sleep(3 * sc.opts.LeaseDuration)

	mix.mu.Lock()
	st.requests, st.late = mix.requests, mix.late
	faultLog := mix.log
	mix.mu.Unlock()
	st.calls = map[string]int{}
	st.finals = map[azlease.OnceState]int{}
	st.logged = logs.snapshot()
	for _, cl := range calls {
		st.calls[cl.outcome]++
		if cl.ran {
			st.fnRuns++
		}
	}
	var report []string
	for k := range sc.keys {
		final, err := azlease.InspectOnce(context.Background(), c.emu.client("observer"), keyName(k), nil)
		require.NoError(t, err)
		st.finals[final.State]++
		problems := checkOnceKey(sc, k, final, calls)
		if err := azleasetest.CheckIntervals(c.emu.Grants(testContainer, blobOf(k)), intervalsOf(runs[k])); err != nil {
			var ee *azleasetest.ExclusionError
			require.ErrorAs(t, err, &ee)
			st.outside += ee.Count(azleasetest.OutsideGrant) + ee.Count(azleasetest.EndsBeforeStart)
			st.overlaps += ee.Count(azleasetest.Overlap)
			st.epochs += ee.Count(azleasetest.EpochBackwards)
			problems = append(problems, err.Error())
		}
		for _, p := range problems {
			switch {
			case strings.HasPrefix(p, "twice"):
				st.twice++
			case strings.HasPrefix(p, "wrong"):
				st.wrong++
			case strings.HasPrefix(p, "too many"):
				st.tooMany++
			case strings.HasPrefix(p, "hidden"):
				st.hidden++
			}
			report = append(report, fmt.Sprintf("key %d (final %+v): %s", k, final, p))
		}
	}
	if len(report) > 0 {
		t.Logf("%v:\n%s", sc, strings.Join(report, "\n"))
		if debugSim {
			t.Logf("calls:\n%s", describeCalls(calls))
			t.Logf("faults injected:\n%s", strings.Join(faultLog, "\n"))
		}
	}
	return st
}

// checkOnceKey checks the answers of the calls on key k against its final
// marker, and the count of runs against the key's limit. Each problem
// starts with its kind: "twice", "wrong" or "too many".
func checkOnceKey(sc onceScenario, k int, final azlease.OnceStatus, calls []onceCall) []string {
	var problems []string
	var ran, unknownInFinal []onceCall
	counted := 0
	for _, cl := range calls {
		if cl.key != k {
			continue
		}
		if cl.res.Ran {
			ran = append(ran, cl)
			if cl.res.Status.Epoch != cl.epoch || !cl.ran {
				problems = append(problems, fmt.Sprintf("wrong: %s returned Ran true with the marker of epoch %d, its fn ran in %d", cl.caller, cl.res.Status.Epoch, cl.epoch))
			}
		}
		if cl.outcome == "unknown" && cl.ran && cl.epoch == final.Epoch {
			unknownInFinal = append(unknownInFinal, cl)
		}
		if cl.ran && cl.outcome != "abandoned" {
			counted++
		}
		if cl.done && !cl.res.Ran && !errors.Is(cl.err, azlease.ErrOnceUnrecorded) {
			problems = append(problems, fmt.Sprintf("hidden: %s's fn completed (epoch %d), and it returned Ran false with %v", cl.caller, cl.epoch, cl.err))
		}
	}
	switch {
	case len(ran) > 1:
		problems = append(problems, fmt.Sprintf("twice: %d calls returned Ran true", len(ran)))
	case final.State == azlease.OnceDone && len(ran) == 0 && len(unknownInFinal) == 0:
		problems = append(problems, fmt.Sprintf("wrong: the marker says done in epoch %d, and no call returned Ran true (or said it could not know)", final.Epoch))
	case final.State == azlease.OnceDone && len(ran) == 1 && ran[0].epoch != final.Epoch:
		problems = append(problems, fmt.Sprintf("wrong: the marker says done in epoch %d, the call that returned Ran true ran in %d", final.Epoch, ran[0].epoch))
	case final.State != azlease.OnceDone && len(ran) > 0:
		problems = append(problems, fmt.Sprintf("wrong: %s returned Ran true, and the marker says %s", ran[0].caller, final.State))
	}
	limit := final.MaxAttempts
	if limit == 0 { // no attempt was ever recorded
		limit = 1000
	}
	if counted > limit || final.Attempts > limit {
		problems = append(problems, fmt.Sprintf("too many: %d runs of fn counted, the marker counts %d attempts, the limit is %d", counted, final.Attempts, limit))
	}
	return problems
}

func describeCalls(calls []onceCall) string {
	sorted := append([]onceCall(nil), calls...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].key < sorted[j].key })
	var b strings.Builder
	for _, cl := range sorted {
		fmt.Fprintf(&b, "  key %d %s: ran %v (epoch %d), Ran %v, status %+v, %s: %v\n", cl.key, cl.caller, cl.ran, cl.epoch, cl.res.Ran, cl.res.Status, cl.outcome, cl.err)
	}
	return b.String()
}

// onceSeeds is how many seeds the DoOnce simulation runs: -seeds, else a
// fifth of simSeeds (make test: 40, about 10 s with -race on two cores; 20
// without AZLEASE_SEEDS), at least 10.
func onceSeeds() int { return partSeeds(5, 10) }

// TestDoOnceSimulation plays random DoOnce scenarios in fake time; see the
// top of this file for what it asserts. More seeds (about 20 s per 500
// without -race):
//
//	go test -run TestDoOnceSimulation . -seeds 3000
//	AZLEASE_DEBUG_SIM=1 go test -run 'TestDoOnceSimulation/^17$' -seeds 18 -count 50 .  # with every call and fault of a failing run
func TestDoOnceSimulation(t *testing.T) {
	n := onceSeeds()
	var total onceStats
	simulation[onceScenario, onceStats]{
		seeds:    n,
		scenario: newOnceScenario,
		play:     runOnceScenario,
		check: func(t *testing.T, sc onceScenario, st onceStats) {
			if st.violations() > 0 {
				t.Errorf("%v: %d keys answered Ran true twice, %d keys whose answers disagree with the marker, %d keys with more runs than their limit, %d completions hidden from their caller, %d runs outside their lease, %d overlapping pairs, %d epochs that did not grow",
					sc, st.twice, st.wrong, st.tooMany, st.hidden, st.outside, st.overlaps, st.epochs)
			}
		},
		add: func(_ onceScenario, st onceStats) { total.add(st) },
	}.run(t)
	t.Logf("%d seeds: %d fn runs; calls %v; final markers %v; logged %v; %d keys answered Ran true twice, %d disagreeing with the marker, %d over their limit, %d completions hidden, %d runs outside their lease, %d overlapping pairs, %d epochs that did not grow; %d requests, applied late %v; %d operator breaks",
		n, total.fnRuns, total.calls, total.finals, total.logged, total.twice, total.wrong, total.tooMany, total.hidden, total.outside, total.overlaps, total.epochs, total.requests, total.late, total.breaks)
}

// countingHandler counts the DoOnce callers' Warn lines by message, and the
// completions found recorded by settling: evidence that the simulation
// reaches the paths it checks.
type countingHandler struct {
	mu     sync.Mutex
	counts map[string]int
}

func (h *countingHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn || strings.Contains(r.Message, "had been applied") {
		h.mu.Lock()
		h.counts[strings.TrimPrefix(r.Message, "azlease: ")]++
		h.mu.Unlock()
	}
	return nil
}

func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

func (h *countingHandler) snapshot() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.counts)
}
