package main

// The pass-over scenario (issue 35, "no pass-over runs"): a holder keeps
// the lock for a stand-still of 15 s (or dies, and its lease runs out after
// azlease's default lease duration, etcd's session after -etcd-ttl, 15 s
// too), with N waiters queued behind it; then the queue moves fast: each
// waiter, once served, holds for a moment, unlocks and asks again at once.
// A live waiter far back that looks rarely after the stand-still may miss
// its turn and be passed over while the others go round; the scenario
// counts, for each waiter queued during the stand-still, the acquisitions
// by waiters that asked after it, before it was served.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// How the stand-still of the pass-over scenario ends.
const (
	standHeld   = "held"   // the holder unlocks after the stand-still
	standKilled = "killed" // the holder dies at once; its lease (etcd: session) runs out after params.etcdTTL
)

// standHows are the pass-over scenario's stand-stills, in table order.
var standHows = []string{standHeld, standKilled}

// passoverRun is one repetition of the pass-over scenario.
type passoverRun struct {
	waiters      int
	passedOver   []int           // per waiter queued during the stand-still
	waitedAfter  []time.Duration // per waiter: from the stand-still's end to its first acquisition
	acquisitions int             // from the stand-still's end to the last first acquisition
	unserved     int             // waiters not served within passoverBound of the stand-still's end
}

// passoverBound is how long after the stand-still the scenario waits for
// every waiter's first acquisition; one not served by then is counted as
// such, with the acquisitions until then as its pass-overs.
const passoverBound = 2 * time.Minute

// passAcq is one acquisition: who took it, when its Lock call began, and
// when it returned.
type passAcq struct {
	who       int
	call, got time.Time
}

// passOvers counts, for each of n waiters whose first Lock call began at
// asked[i], the acquisitions before its first one (served[i]) by a Lock call
// that began after asked[i].
func passOvers(asked, served []time.Time, acqs []passAcq) []int {
	out := make([]int, len(asked))
	for i := range asked {
		for _, a := range acqs {
			if a.who != i && a.got.Before(served[i]) && a.call.After(asked[i]) {
				out[i]++
			}
		}
	}
	return out
}

// runPassover: see the top of this file. how is standHeld or standKilled.
func runPassover(ctx context.Context, be backend, name, how string, p params) (passoverRun, error) {
	ctx, cancel := context.WithTimeout(ctx, p.standStill+p.etcdTTL+3*time.Minute)
	defer cancel()
	n := p.passoverWaiters
	ws, closeAll, err := newWaiters(ctx, be, name, n+1)
	if err != nil {
		return passoverRun{}, err
	}
	defer closeAll()
	holder, ws := ws[0], ws[1:]
	var x exclusion
	unlockHolder, err := holder.Lock(ctx)
	if err != nil {
		return passoverRun{}, fmt.Errorf("holder: %w", err)
	}
	t0 := time.Now()
	x.enter()
	if how == standKilled {
		holder.crash()
		x.leave() // a dead holder holds nothing from the harness's side; its lease keeps the others out
	}
	var (
		mu            sync.Mutex
		acqs          []passAcq
		asked         = make([]time.Time, n)
		served        = make([]time.Time, n)
		left          = n // waiters not served yet
		errs          = make([]error, n+1)
		wg            sync.WaitGroup
		live, stopAll = context.WithCancel(ctx)
	)
	defer stopAll()
	bound := time.AfterFunc(time.Until(t0.Add(p.standStill+passoverBound)), stopAll)
	defer bound.Stop()
	for i := range n {
		wg.Go(func() {
			if sleepCtx(live, time.Until(t0.Add(time.Duration(i+1)*p.passoverSpacing))) != nil {
				return
			}
			for round := 0; ; round++ {
				call := time.Now()
				if round == 0 {
					asked[i] = call
				}
				unlock, err := ws[i].Lock(live)
				if err != nil {
					if live.Err() == nil {
						errs[i] = fmt.Errorf("waiter %d: %w", i, err)
						stopAll()
					}
					return
				}
				got := time.Now()
				x.enter()
				mu.Lock()
				over := live.Err() != nil
				if !over {
					acqs = append(acqs, passAcq{who: i, call: call, got: got})
					if round == 0 {
						served[i] = got
						left--
					}
				}
				last := !over && left == 0
				mu.Unlock()
				if !over && !last {
					_ = sleepCtx(live, p.passoverHold)
				}
				x.leave()
				if last {
					stopAll()
				}
				if err := unlock(ctx); err != nil {
					errs[i] = fmt.Errorf("waiter %d: unlock: %w", i, err)
					stopAll()
					return
				}
				if live.Err() != nil {
					return
				}
			}
		})
	}
	end := t0.Add(p.etcdTTL) // killed: about when the lease (session) runs out: azlease's default lease, etcd's TTL
	if how == standHeld {
		_ = sleepCtx(live, p.standStill)
		x.leave()
		end = time.Now()
		if err := unlockHolder(ctx); err != nil {
			errs[n] = fmt.Errorf("holder: unlock: %w", err)
		}
	}
	wg.Wait()
	stopped := time.Now()
	if how == standKilled {
		// Its client is dead: the Unlock fails, and stops what it left.
		uctx, cancel := context.WithTimeout(ctx, time.Second)
		_ = unlockHolder(uctx)
		cancel()
	}
	if err := errors.Join(append(errs, x.err(), ctx.Err())...); err != nil {
		return passoverRun{}, err
	}
	run := passoverRun{waiters: n}
	for i := range n {
		if served[i].IsZero() {
			served[i] = stopped
			run.unserved++
		}
	}
	run.passedOver = passOvers(asked, served, acqs)
	for i := range n {
		run.waitedAfter = append(run.waitedAfter, served[i].Sub(end))
	}
	for _, a := range acqs {
		if a.got.After(end) {
			run.acquisitions++
		}
	}
	return run, nil
}
