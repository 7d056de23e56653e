package main

// The holds scenario (issue 35): W+1 contenders, each on a client of its
// own, lock, hold for H, unlock and lock again, so that W wait behind every
// holder. Per hold length H and W it measures what issue 35 asks: the
// requests the waiters send while they wait (over the last minute of each
// hold, so that long holds show the rate they settle at, not the joining),
// requests and failed requests per acquisition, and the gap from one
// holder's Unlock call to the next holder's Lock returning.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// maxWaitWindow is the most of a hold's end over which the waiters'
// requests are counted: the last minute, as issue 35 states its targets.
const maxWaitWindow = time.Minute

// holdsSettle is how long after the start the waiters' requests are not
// counted: the W+1 contenders all ask at once, and the queue forms.
const holdsSettle = 5 * time.Second

// holdsRun is one repetition of the holds scenario, for one H and W.
type holdsRun struct {
	hold         time.Duration
	waiters      int
	elapsed      time.Duration // from the start to the last acquisition
	acquisitions int
	requests     counts          // every client's, from the start to the last acquisition
	gaps         []time.Duration // each Unlock call → the next Lock returned
	waitSent     int64           // the waiters' requests in the counted ends of the holds
	waitFailed   int64
	waitTime     time.Duration // the counted ends' total length
}

// waitRate is the waiters' requests per second in the counted ends of the
// holds (all waiters), or NaN when no hold had a counted end.
func (r holdsRun) waitRate() float64 {
	if r.waitTime <= 0 {
		return math.NaN()
	}
	return float64(r.waitSent) / r.waitTime.Seconds()
}

// holdsAcq is one acquisition of a holds run.
type holdsAcq struct {
	got, called time.Time // Lock returned; Unlock called (zero: the last, not held)
}

// holdsGaps is each Unlock call → the next Lock returned, acquisitions in
// the order they happened.
func holdsGaps(acqs []holdsAcq) []time.Duration {
	var gaps []time.Duration
	for k := 0; k+1 < len(acqs); k++ {
		if !acqs[k].called.IsZero() {
			gaps = append(gaps, acqs[k+1].got.Sub(acqs[k].called))
		}
	}
	return gaps
}

// waitWindow is the part of a hold taken at got, for hold, in which the
// waiters' requests are counted: its last minute, and nothing before
// settled.
func waitWindow(got time.Time, hold time.Duration, settled time.Time) (from time.Time, length time.Duration) {
	end := got.Add(hold)
	from = end.Add(-min(hold, maxWaitWindow))
	if from.Before(settled) {
		from = settled
	}
	if !from.Before(end) {
		return end, 0
	}
	return from, end.Sub(from)
}

// runHolds: w+1 contenders lock, hold for hold, unlock and lock again, until
// p.window has passed and p.handoffsFor(hold) hand-offs happened; the acquisition
// that meets both ends the run (it is counted, and its gap, but not held).
func runHolds(ctx context.Context, be backend, name string, hold time.Duration, w int, p params) (holdsRun, error) {
	handoffs := p.handoffsFor(hold)
	span := max(p.window, time.Duration(handoffs+1)*hold)
	ctx, cancel := context.WithTimeout(ctx, span+hold+3*time.Minute)
	defer cancel()
	n := w + 1
	ws, closeAll, err := newWaiters(ctx, be, name, n)
	if err != nil {
		return holdsRun{}, err
	}
	defer closeAll()
	run := holdsRun{hold: hold, waiters: w}
	var (
		x             exclusion
		mu            sync.Mutex
		acqs          []holdsAcq
		end           counts
		ended         time.Time
		errs          = make([]error, n)
		wg            sync.WaitGroup
		c0            = be.requests()
		start         = time.Now()
		settled       = start.Add(holdsSettle)
		live, stopAll = context.WithCancel(ctx)
	)
	defer stopAll()
	for i := range n {
		wg.Go(func() {
			for {
				unlock, err := ws[i].Lock(live)
				if err != nil {
					if live.Err() == nil {
						errs[i] = fmt.Errorf("contender %d: %w", i, err)
						stopAll()
					}
					return
				}
				got := time.Now()
				x.enter()
				mu.Lock()
				k, over := len(acqs), live.Err() != nil // over: taken as the run ended, not counted
				last := !over && got.Sub(start) >= p.window && k >= handoffs
				if !over {
					acqs = append(acqs, holdsAcq{got: got})
				}
				if last {
					ended, end, run.acquisitions = got, be.requests(), k+1
				}
				mu.Unlock()
				if over || last {
					x.leave()
					stopAll()
					if err := unlock(ctx); err != nil {
						errs[i] = fmt.Errorf("contender %d: unlock: %w", i, err)
					}
					return
				}
				from, length := waitWindow(got, hold, settled)
				_ = sleepCtx(live, time.Until(from))
				var c1, o1 counts
				if length > 0 {
					c1, o1 = be.requests(), ws[i].requests()
				}
				_ = sleepCtx(live, time.Until(got.Add(hold)))
				x.leave()
				called := time.Now()
				mu.Lock()
				acqs[k].called = called
				if length > 0 && live.Err() == nil {
					c2, o2 := be.requests(), ws[i].requests()
					waiting := c2.minus(c1).minus(o2.minus(o1))
					run.waitSent += waiting.sent
					run.waitFailed += waiting.failed
					run.waitTime += length
				}
				mu.Unlock()
				if err := unlock(ctx); err != nil {
					errs[i] = fmt.Errorf("contender %d: unlock: %w", i, err)
					stopAll()
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(append(errs, x.err(), ctx.Err())...); err != nil {
		return holdsRun{}, err
	}
	if ended.IsZero() {
		return holdsRun{}, errors.New("the run ended without its last acquisition")
	}
	run.elapsed = ended.Sub(start)
	run.requests = end.minus(c0)
	run.gaps = holdsGaps(acqs[:run.acquisitions])
	return run, nil
}
