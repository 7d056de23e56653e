package main

// The three scenarios of issue 25, each one repetition on one backend: the
// served order of W queued waiters, throughput under constant contention,
// and what a waiter that dies in the queue costs the next one. Every
// scenario also checks exclusion from the harness's side: no two of its
// waiters' Lock calls hold at once.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// params are the scenarios' settings.
type params struct {
	waiters     []int         // W of the order scenario
	spacing     time.Duration // between two waiters' asking
	hold        time.Duration // how long each waiter holds the lock
	costWindows []costWindow  // cost scenario: when requests are counted, from the last waiter's asking
	costWaiters int           // cost scenario: waiters behind the holder
	costReps    int           // cost scenario: repetitions (the first costReps of reps)
	contenders  int           // throughput scenario
	window      time.Duration // throughput scenario's duration
	reps        int
	etcdTTL     time.Duration   // etcd sessions' TTL (whole seconds)
	scenarios   map[string]bool // the scenarios to run (-scenarios); nil: all

	// The holds scenario (holds.go).
	holds        []time.Duration // hold lengths H
	holdWaiters  []int           // W: waiters behind each holder (W+1 contenders)
	handoffs     int             // the least hand-offs of a run, holds under a minute
	longHandoffs int             // the same for holds of a minute or more
	longReps     int             // repetitions of holds of a minute or more (the first longReps of reps)

	// The pass-over scenario (passover.go).
	standStill      time.Duration // how long the holder keeps the lock first
	passoverWaiters int           // N: waiters queued during the stand-still
	passoverSpacing time.Duration // between two of them asking
	passoverHold    time.Duration // each hold after the stand-still

	// The dead-waiters scenario (deadqueue.go).
	deadWaiters int           // W: the queue (at least 5)
	deadSpacing time.Duration // between two waiters asking
	deadHold    time.Duration // each waiter's hold once served
	deadCut     time.Duration // how long the third victim is cut off
}

// handoffsFor is the least number of hand-offs a holds run of hold waits for.
func (p params) handoffsFor(hold time.Duration) int {
	if hold >= maxWaitWindow {
		return p.longHandoffs
	}
	return p.handoffs
}

// runs says whether scenario s is to run.
func (p params) runs(s string) bool { return p.scenarios == nil || p.scenarios[s] }

// exclusion counts holders from the harness's side.
type exclusion struct {
	inside   atomic.Int32
	violated atomic.Bool
}

func (x *exclusion) enter() {
	if x.inside.Add(1) > 1 {
		x.violated.Store(true)
	}
}

func (x *exclusion) leave() { x.inside.Add(-1) }

func (x *exclusion) err() error {
	if x.violated.Load() {
		return errors.New("exclusion violated: two waiters held the lock at once")
	}
	return nil
}

// sleepCtx sleeps d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// newWaiters makes n waiters on name, closing them all if one fails; the
// returned function closes them.
func newWaiters(ctx context.Context, be backend, name string, n int) ([]*waiter, func(), error) {
	ws := make([]*waiter, 0, n)
	closeAll := func() {
		for _, w := range ws {
			w.close()
		}
	}
	for range n {
		w, err := be.newWaiter(ctx, name)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		ws = append(ws, w)
	}
	return ws, closeAll, nil
}

// orderRun is one repetition of the order scenario.
type orderRun struct {
	served []int // waiters (numbered in asking order) in the order they got the lock
	// gaps are the hand-off gaps as issue 25 defines them: each Unlock
	// returned → the next Lock returned (negative when the next Lock
	// returns first: a fair Unlock waits until the next holder's term
	// shows); called the same from the Unlock call, the latency a waiter
	// sees.
	gaps, called []time.Duration
	requests     counts // every client's, from the first waiter's asking to the last Unlock
	elapsed      time.Duration
}

// overtakes counts pairs served out of asking order.
func (r orderRun) overtakes() int {
	n := 0
	for i := range r.served {
		for j := i + 1; j < len(r.served); j++ {
			if r.served[i] > r.served[j] {
				n++
			}
		}
	}
	return n
}

// runOrder (issue 25's measurement): one holder takes the lock; w waiters,
// each on a client of its own, ask spacing apart, the first at the start;
// every holder keeps the lock for hold, the first one too, from the start.
func runOrder(ctx context.Context, be backend, name string, w int, p params) (orderRun, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(w)*(p.spacing+p.hold+10*time.Second)+time.Minute)
	defer cancel()
	ws, closeAll, err := newWaiters(ctx, be, name, w+1)
	if err != nil {
		return orderRun{}, err
	}
	defer closeAll()
	holder, ws := ws[0], ws[1:]

	var x exclusion
	unlockHolder, err := holder.Lock(ctx)
	if err != nil {
		return orderRun{}, fmt.Errorf("holder: %w", err)
	}
	x.enter()
	var (
		mu       sync.Mutex
		served   []int
		got      = make([]time.Time, w)
		calling  = make([]time.Time, w) // Unlock called
		released = make([]time.Time, w) // Unlock returned
		errs     = make([]error, w+1)
		wg       sync.WaitGroup
	)
	c0 := be.requests()
	start := time.Now()
	for i := range w {
		wg.Go(func() {
			if errs[i] = sleepCtx(ctx, time.Until(start.Add(time.Duration(i)*p.spacing))); errs[i] != nil {
				return
			}
			unlock, err := ws[i].Lock(ctx)
			if err != nil {
				errs[i] = fmt.Errorf("waiter %d: %w", i, err)
				return
			}
			got[i] = time.Now()
			tracef("waiter %d got the lock", i)
			x.enter()
			mu.Lock()
			served = append(served, i)
			mu.Unlock()
			_ = sleepCtx(ctx, p.hold)
			x.leave()
			calling[i] = time.Now()
			tracef("waiter %d unlocks", i)
			if err := unlock(ctx); err != nil {
				errs[i] = fmt.Errorf("waiter %d: unlock: %w", i, err)
			}
			released[i] = time.Now()
		})
	}
	var run orderRun
	_ = sleepCtx(ctx, time.Until(start.Add(p.hold)))
	x.leave()
	holderCalled := time.Now()
	if err := unlockHolder(ctx); err != nil {
		errs[w] = fmt.Errorf("holder: unlock: %w", err)
	}
	holderReleased := time.Now()
	wg.Wait()
	run.elapsed = time.Since(start)
	run.requests = be.requests().minus(c0)
	if err := errors.Join(append(errs, x.err(), ctx.Err())...); err != nil {
		return orderRun{}, err
	}
	run.served = served
	prevCalled, prevReleased := holderCalled, holderReleased
	for _, i := range served {
		run.gaps = append(run.gaps, got[i].Sub(prevReleased))
		run.called = append(run.called, got[i].Sub(prevCalled))
		prevCalled, prevReleased = calling[i], released[i]
	}
	return run, nil
}

// costWindow is a window of the cost scenario: from start after the last
// waiter asked, for length.
type costWindow struct{ start, length time.Duration }

func (w costWindow) String() string { return fmt.Sprintf("%v+%v", w.start, w.length) }

// costRun is one repetition of the cost scenario.
type costRun struct {
	waiters  int
	windows  []costWindow
	requests []counts // every client's in each window, the holder's renewals included
}

// runCost: a holder takes the lock and keeps it; n waiters, each on a
// client of its own, ask spacing apart; in each window after the last has
// asked (the waiters far back look less and less often, the longer the
// queue stands still), every client's requests are counted.
func runCost(ctx context.Context, be backend, name string, n int, p params) (costRun, error) {
	last := p.costWindows[len(p.costWindows)-1]
	ctx, cancel := context.WithTimeout(ctx, time.Duration(n)*p.spacing+last.start+last.length+2*time.Minute)
	defer cancel()
	ws, closeAll, err := newWaiters(ctx, be, name, n+1)
	if err != nil {
		return costRun{}, err
	}
	defer closeAll()
	holder, ws := ws[0], ws[1:]
	unlockHolder, err := holder.Lock(ctx)
	if err != nil {
		return costRun{}, fmt.Errorf("holder: %w", err)
	}
	wctx, stop := context.WithCancel(ctx)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range ws {
		if err := sleepCtx(ctx, p.spacing); err != nil {
			break
		}
		wg.Go(func() {
			if unlock, err := ws[i].Lock(wctx); err == nil {
				_ = unlock(ctx)
				errs[i] = fmt.Errorf("waiter %d got the lock its holder keeps", i)
			}
		})
	}
	asked := time.Now()
	run := costRun{waiters: n, windows: p.costWindows}
	for _, w := range p.costWindows {
		if err := sleepCtx(ctx, time.Until(asked.Add(w.start))); err != nil {
			break
		}
		c0 := be.requests()
		if err := sleepCtx(ctx, w.length); err != nil {
			break
		}
		run.requests = append(run.requests, be.requests().minus(c0))
	}
	stop()
	wg.Wait()
	err = unlockHolder(ctx)
	if err == nil && len(run.requests) < len(run.windows) {
		err = errors.New("a cost window did not end")
	}
	return run, errors.Join(append(errs, err, ctx.Err())...)
}

// throughputRun is one repetition of the throughput scenario.
type throughputRun struct {
	elapsed      time.Duration
	acquisitions []int // per contender
	requests     counts
	// warmAcquisitions and warmRequests are the acquisitions and requests
	// after throughputWarmUp: without the first-use races (every contender
	// finds the lock blob missing or free at once and races to create and
	// acquire it), the steady state.
	warmAcquisitions int
	warmRequests     counts
}

// errWindowEnd is the cause of the throughput window's end. A request
// that the end cuts off (a waiter's listing or look in flight) fails
// because the benchmark stopped, not the lock: it is not counted failed
// (cutByWindow).
var errWindowEnd = errors.New("lockbench: the window ended")

// cutByWindow reports whether ctx ended with the throughput window.
func cutByWindow(ctx context.Context) bool {
	return ctx.Err() != nil && errors.Is(context.Cause(ctx), errWindowEnd)
}

// throughputWarmUp is the start of the throughput scenario's window left
// out of its steady-state counts.
const throughputWarmUp = time.Second

func (r throughputRun) total() int {
	n := 0
	for _, a := range r.acquisitions {
		n += a
	}
	return n
}

// runThroughput: n contenders lock and unlock at once (zero-length holds),
// each again as soon as it has unlocked, for window.
func runThroughput(ctx context.Context, be backend, name string, n int, window time.Duration) (throughputRun, error) {
	ctx, cancel := context.WithTimeout(ctx, window+2*time.Minute)
	defer cancel()
	ws, closeAll, err := newWaiters(ctx, be, name, n)
	if err != nil {
		return throughputRun{}, err
	}
	defer closeAll()
	var x exclusion
	var total atomic.Int64
	run := throughputRun{acquisitions: make([]int, n)}
	errs := make([]error, n)
	var wg sync.WaitGroup
	c0 := be.requests()
	start := time.Now()
	timed, stop := context.WithDeadlineCause(ctx, start.Add(window), errWindowEnd)
	defer stop()
	for i := range n {
		wg.Go(func() {
			for {
				unlock, err := ws[i].Lock(timed)
				if err != nil {
					if timed.Err() == nil {
						errs[i] = fmt.Errorf("contender %d: %w", i, err)
					}
					return
				}
				x.enter()
				run.acquisitions[i]++
				total.Add(1)
				x.leave()
				if err := unlock(ctx); err != nil {
					errs[i] = fmt.Errorf("contender %d: unlock: %w", i, err)
					return
				}
				if timed.Err() != nil { // whatever the lock does with an ended ctx
					return
				}
			}
		})
	}
	var warmAcq int64
	var warmReq counts
	warm := sleepCtx(timed, throughputWarmUp) == nil
	if warm {
		warmAcq, warmReq = total.Load(), be.requests()
	}
	<-timed.Done()
	run.elapsed = time.Since(start)
	end := be.requests()
	run.requests = end.minus(c0)
	if warm {
		run.warmAcquisitions, run.warmRequests = int(total.Load()-warmAcq), end.minus(warmReq)
	}
	wg.Wait()
	return run, errors.Join(append(errs, x.err(), ctx.Err())...)
}

// How the waiter ahead of the next one goes away in the dead-waiter
// scenario.
const (
	deadNone     = "none"      // no waiter ahead: the baseline
	deadCanceled = "cancelled" // its Lock's ctx is cancelled (it gives up, and may clean up)
	deadKilled   = "killed"    // its process dies: no request of it reaches the service any more
)

// deadHows are the dead-waiter scenario's ways, in table order.
var deadHows = []string{deadNone, deadCanceled, deadKilled}

// runDead: a holder takes the lock; a victim asks, spacing later the next
// waiter asks, spacing later the victim goes away (unless how is deadNone,
// when there is no victim), and hold later the holder unlocks. The result is
// the gap from the holder's Unlock returning to the next waiter's Lock
// returning, and from the Unlock call.
func runDead(ctx context.Context, be backend, name, how string, p params) (returned, called time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*p.etcdTTL+2*time.Minute)
	defer cancel()
	ws, closeAll, err := newWaiters(ctx, be, name, 3)
	if err != nil {
		return 0, 0, err
	}
	defer closeAll()
	holder, victim, next := ws[0], ws[1], ws[2]
	var x exclusion
	unlockHolder, err := holder.Lock(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("holder: %w", err)
	}
	x.enter()

	var wg sync.WaitGroup
	// Runs first on the way out: on the early returns ctx has ended, so the
	// waiters' Locks return.
	defer wg.Wait()
	var victimErr error
	victimCtx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	if how != deadNone {
		wg.Go(func() {
			if unlock, err := victim.Lock(victimCtx); err == nil {
				_ = unlock(ctx)
				victimErr = errors.New("the victim got the lock before it went away")
			}
		})
		if err := sleepCtx(ctx, p.spacing); err != nil {
			return 0, 0, err
		}
	}
	var got time.Time
	var nextErr error
	wg.Go(func() {
		unlock, err := next.Lock(ctx)
		if err != nil {
			nextErr = fmt.Errorf("next waiter: %w", err)
			return
		}
		got = time.Now()
		x.enter()
		x.leave()
		if err := unlock(ctx); err != nil {
			nextErr = fmt.Errorf("next waiter: unlock: %w", err)
		}
	})
	if err := sleepCtx(ctx, p.spacing); err != nil {
		return 0, 0, err
	}
	switch how {
	case deadCanceled:
		giveUp()
	case deadKilled:
		victim.crash()
	}
	_ = sleepCtx(ctx, p.hold)
	x.leave()
	calledAt := time.Now()
	tracef("the holder unlocks")
	err = unlockHolder(ctx)
	released := time.Now()
	wg.Wait()
	if err := errors.Join(err, victimErr, nextErr, x.err(), ctx.Err()); err != nil {
		return 0, 0, err
	}
	return got.Sub(released), got.Sub(calledAt), nil
}
