package azlease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/azlease/azlease/internal/timing"
)

// Task is leader work: it runs while this instance leads and must return
// when ctx is done. ctx is the term's context ([Term.Context]); term carries
// the fencing token to pass to everything the task writes.
//
// The Elector runs the task in a goroutine of its own. If the task panics,
// the Elector recovers the panic there rather than let it crash the
// process, logs it at Error with the stack, and treats it as the task
// returning a [*PanicError]: the term ends with that error as its cause,
// the lease is released (the task has stopped), and then, as for any task
// that returns, Run returns the error with AfterTask StopElecting, or the
// Elector contends again with ReleaseAndContend. A task that ends its
// goroutine with runtime.Goexit is treated as returning an error too.
type Task func(ctx context.Context, term *Term) error

// Errors of the Elector's life cycle.
var (
	ErrAlreadyStarted = errors.New("azlease: elector already started")
	ErrNotStarted     = errors.New("azlease: elector not started")
)

// LeaderInfo describes the leader of an election as the lock blob shows it.
type LeaderInfo struct {
	// Leased is true while some instance holds the lease. Holder, Epoch and
	// Acquired then describe its term; otherwise they describe the last term.
	Leased bool
	// Holder is the leader's identity (ElectorOptions.Identity).
	Holder string
	// Epoch is the term's fencing epoch, the Elector's lock blob's (see
	// [Token]: epochs of different lock blobs do not compare).
	Epoch uint64
	// Acquired is when the term began, by the holder's wall clock; for
	// display only.
	Acquired time.Time
	// Self is true when this Elector holds the term.
	Self bool
}

// Elector elects one leader among the instances that contend for the same
// lock blob: the one that holds the lease leads and runs the leader [Task]
// under its term's context; the others follow and take over when it stops
// or fails.
//
// At most one instance believes it leads at any instant (under the package's
// timing assumptions: [Elector.IsLeader] turns false at the deadline by
// itself), and each term has a larger epoch. A crashed leader is replaced
// within LeaseDuration and a poll (15 to 21 s by default); a planned stop or
// yield hands the lease straight to a ready standby, never free in between.
//
// Cost: a leader renews, a follower polls and each publishes its candidacy
// every 5 s by default; the leader and its standby also look every second
// (about 7,000 requests an hour more: docs/design/succession.md). Watch
// for: the goroutine [Elector.Start] starts runs until [Elector.Stop]
// ([Elector.Run] does both); a task must return when its context ends; an
// Elector runs once.
// It is safe for concurrent use.
type Elector struct {
	t     target
	cfg   electorConfig
	lease *Lease
	log   *slog.Logger

	mu           sync.Mutex
	started      bool
	stop         context.CancelCauseFunc
	done         chan struct{}
	holding      *keeper   // from acquisition until release
	leading      *Term     // while leading: after any takeover delay, until the term is wound up
	lastProgress time.Time // the loop's last turn, to tell a wedged loop
	leader       LeaderInfo
	runErr       error
	changes      chan LeaderInfo

	// taskGoroutine is the id of the goroutine running the leader task
	// (goroutineID), or 0: Stop called on it must not wait for the task.
	taskGoroutine atomic.Uint64

	// succ is planned succession (elector_succession.go); nil with
	// NoSuccession.
	succ *succession

	// beforeRenew is a test hook: see keeper.beforeRenew.
	beforeRenew func()
}

// NewElector returns an Elector for the lock blob blobName in the container cc
// points at. It makes no request until started.
func NewElector(cc *container.Client, blobName string, opts *ElectorOptions) (*Elector, error) {
	t, err := newTarget(cc, blobName, "blobName")
	if err != nil {
		return nil, err
	}
	cfg, err := opts.config()
	if err != nil {
		return nil, err
	}
	l := newLease(t, cfg.lease)
	e := &Elector{
		t: t, cfg: cfg, lease: l, log: l.cfg.log,
		done:    make(chan struct{}),
		changes: make(chan LeaderInfo, 1),
	}
	if !cfg.succession.off {
		e.succ = newSuccession(e)
	}
	return e, nil
}

// Identity returns this instance's identity ("" for an Elector not created
// with NewElector).
func (e *Elector) Identity() string {
	if e == nil {
		return ""
	}
	return e.cfg.lease.identity
}

// initErr is ErrNotInitialized, naming the constructor, for a zero or nil
// Elector. Every method checks it (or is safe without it) before touching
// anything NewElector sets up.
func (e *Elector) initErr() error {
	if e == nil || e.lease == nil {
		return fmt.Errorf("%w: a zero or nil azlease.Elector cannot be used; use NewElector", ErrNotInitialized)
	}
	return nil
}

// closedDone and closedChanges are what Done and Changes return for an
// Elector not created with NewElector: closed, as for an Elector that has
// stopped, so nobody waits on them for ever.
var (
	closedDone    = func() chan struct{} { c := make(chan struct{}); close(c); return c }()
	closedChanges = func() chan LeaderInfo { c := make(chan LeaderInfo); close(c); return c }()
)

// Start starts contending for leadership in a goroutine the Elector owns, and
// returns at once. While this instance leads, task (which may be nil) runs
// under the term's context. Cancelling ctx stops the Elector as Stop does;
// ctx's values reach the task. Starting twice is an error.
func (e *Elector) Start(ctx context.Context, task Task) error {
	if err := e.initErr(); err != nil {
		return err
	}
	e.mu.Lock()
	if e.started {
		e.mu.Unlock()
		return ErrAlreadyStarted
	}
	e.started = true
	e.lastProgress = time.Now()
	// Every term's context, and so the task's, derives from runCtx and
	// carries the mark by which Stop knows it is called from the task.
	parent, _ := ctx.Value(taskMarkKey{}).(*taskMark)
	runCtx, stop := context.WithCancelCause(context.WithValue(ctx, taskMarkKey{}, &taskMark{e: e, parent: parent}))
	e.stop = stop
	if e.succ != nil {
		e.succ.started()
	}
	e.mu.Unlock()
	// The metric callbacks are registered without e.mu held: the SDK runs
	// them under its own lock, which registering takes too, and they take
	// e.mu (IsLeader). Holding e.mu here would let a collection that is
	// inside one callback and this registration wait for each other for
	// ever (a scrape hung, and so did Start).
	unregister := e.lease.tm.observe(e.IsLeader, e.lease.health.consecutive)
	unregisterSuccession := func() {}
	if e.succ != nil {
		unregisterSuccession = e.lease.tm.observeSuccession(int64(e.cfg.succession.priority), e.succ.successionCandidates)
	}
	go func() {
		// Unregistered before run closes Done: once Stop returns, the
		// Elector is no longer reported.
		e.run(runCtx, task, func() {
			unregisterSuccession()
			unregister()
		})
	}()
	return nil
}

// Stop stops the Elector gracefully and waits for its goroutine. If it
// leads, it first gets a successor ready while still leading (at most
// HandOffWait; no wait without another candidate), then ends the term
// (cause [ErrStopped]), waits up to DrainTimeout for the task while still
// renewing, and hands the lease to the successor, which leads within its
// SuccessorPollInterval; without one it releases the lease for a follower's
// next poll. The hand-off or release gets a bounded number of attempts (when
// storage does not answer, the lease is left to expire), so that a stop fits
// a process manager's grace period: docs/design/succession.md has the
// timing. It returns ctx's error if ctx ends first (the Elector goes on
// stopping; call Stop again to wait). Stopping a stopped Elector returns nil.
//
// Called from inside the leader task (ctx is the task's context or derived
// from it, or the call runs on the task's goroutine), Stop does not wait for
// the task, its own caller: it returns nil at once and the Elector finishes
// stopping once the task returns. A goroutine the task started should pass
// the task's context: with an unrelated ctx, Stop waits for the task.
func (e *Elector) Stop(ctx context.Context) error {
	if err := e.initErr(); err != nil {
		return err
	}
	e.mu.Lock()
	if !e.started {
		e.mu.Unlock()
		return ErrNotStarted
	}
	e.stop(ErrStopped)
	e.mu.Unlock()
	if e.calledFromTask(ctx) {
		return nil // the Elector stops once the task returns
	}
	select {
	case <-e.done:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// taskMark marks the contexts an Elector hands its task (see Start), so that
// Stop can tell a call from inside the task. parent is the mark of an
// enclosing Elector whose task started this one, which stays recognisable.
type taskMark struct {
	e      *Elector
	parent *taskMark
}

type taskMarkKey struct{}

// calledFromTask reports whether Stop is called from inside e's leader task:
// with a context derived from the task's, or on the task's goroutine.
func (e *Elector) calledFromTask(ctx context.Context) bool {
	for m, _ := ctx.Value(taskMarkKey{}).(*taskMark); m != nil; m = m.parent {
		if m.e == e {
			return true
		}
	}
	id := e.taskGoroutine.Load()
	return id != 0 && id == goroutineID()
}

// Run starts the Elector, runs task in each term while this instance leads, and
// returns nil after ctx is done and the Elector has stopped gracefully (see
// Stop). With AfterTask StopElecting it also returns when the task returns,
// with the task's error.
//
// Run returns an error wrapping [ErrPermanent] at once if storage refuses the
// Elector's first requests for a reason retrying will not fix (a wrong key, a
// missing role, a missing container with NoCreate, a host name that does not
// exist), or refuses its first acquisition while it may read (a role that can
// read blobs but not lease or write them, such as Storage Blob Data Reader): a
// misconfigured fleet fails at start-up, loudly. Once an operation has
// succeeded, later failures of any kind are retried (logged at Warn, or at
// Error once until the operation succeeds again, and reported by
// [Elector.Check]). If ctx ends before storage ever answered, Run returns an
// error saying so, with the last failure. The task must return when its context
// is done: Run waits for it. The task may end the election itself by calling
// Stop, with its context: Stop then returns at once, and Run returns once the
// task has returned and the lease is released.
func (e *Elector) Run(ctx context.Context, task Task) error {
	if err := e.Start(ctx, task); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-e.done:
	}
	_ = e.Stop(context.WithoutCancel(ctx))
	return e.Err()
}

// Err returns why the Elector stopped on its own: storage refused its first
// requests (see Run), or the leader task's error with AfterTask
// StopElecting; or, once it has stopped, that storage never answered. It
// returns nil while the Elector runs and after a stop that went as usual.
func (e *Elector) Err() error {
	if err := e.initErr(); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.runErr
}

// Done is closed when the Elector's goroutine has ended (at once for an
// Elector not created with NewElector).
func (e *Elector) Done() <-chan struct{} {
	if e.initErr() != nil {
		return closedDone
	}
	return e.done
}

// IsLeader reports whether this instance certainly leads now. It turns false
// at the validity deadline by itself, even if a renewal hangs or the renewing
// goroutine is starved.
func (e *Elector) IsLeader() bool {
	if e == nil {
		return false
	}
	e.mu.Lock()
	t := e.leading
	e.mu.Unlock()
	return t != nil && t.Valid()
}

// Term returns the current term while this instance leads, or nil. Its
// context ends with the term.
func (e *Elector) Term() *Term {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.leading == nil || !e.leading.Valid() {
		return nil
	}
	return e.leading
}

// Changes delivers leader changes as this instance observes them: the start
// of each of its own terms (Self true), the end of each (Self and Leased
// false: the new leader is not known yet), and what its polls see while it
// follows. It never blocks the Elector: it holds only the latest change,
// replacing one not yet received. It is closed when the Elector stops. For
// whether this instance leads right now, ask [Elector.IsLeader]. For an
// Elector not created with NewElector it is a closed channel.
func (e *Elector) Changes() <-chan LeaderInfo {
	if e.initErr() != nil {
		return closedChanges
	}
	return e.changes
}

// Leader reads who leads now from the lock blob. Any process can do this,
// elected or not: see also [Inspect] for the history of terms.
func (e *Elector) Leader(ctx context.Context) (LeaderInfo, error) {
	if err := e.initErr(); err != nil {
		return LeaderInfo{}, err
	}
	st, err := e.lease.Inspect(ctx)
	if err != nil {
		return LeaderInfo{}, err
	}
	info := leaderInfo(st)
	if t := e.Term(); t != nil && st.Leased && t.Epoch() == st.Epoch {
		info.Self = true
	}
	return info, nil
}

func leaderInfo(st Status) LeaderInfo {
	return LeaderInfo{Leased: st.Leased, Holder: st.Holder, Epoch: st.Epoch, Acquired: st.Acquired}
}

// Check reports the Elector's health, for liveness probes. It passes while
// the Elector starts, before any request has reached storage, for up to a
// lease duration (see [Elector.HealthHandler]: "starting"). It fails:
//   - when the Elector is not running (with the reason it stopped, if any);
//   - when, following, every request to storage has failed for longer than
//     the lease duration (a wrong key, a firewall, an outage), with the
//     last error;
//   - when this instance believes it leads but has not renewed within the
//     lease duration (its loop is wedged, or its work has not returned after
//     the lease was lost);
//   - when the loop has made no progress for two lease durations plus two
//     poll intervals;
//   - with HeartbeatTimeout, when the leader task has not called
//     [Term.Heartbeat] in time.
func (e *Elector) Check() error {
	if err := e.initErr(); err != nil {
		return err
	}
	e.mu.Lock()
	started, holding, leading, progress, runErr := e.started, e.holding, e.leading, e.lastProgress, e.runErr
	e.mu.Unlock()
	select {
	case <-e.done:
		if runErr != nil {
			return fmt.Errorf("azlease: elector has stopped: %w", runErr)
		}
		return errors.New("azlease: elector has stopped")
	default:
	}
	if !started {
		return ErrNotStarted
	}
	now := time.Now()
	if holding == nil {
		if h := e.lease.health.snapshot(); h.streak > 0 && now.Sub(h.since) > e.cfg.lease.duration {
			return fmt.Errorf("azlease: every request to storage has failed for %v (%d in a row); last error: %w",
				now.Sub(h.since).Round(time.Millisecond), h.streak, h.last)
		}
		if stall := 2*e.cfg.lease.duration + 2*e.cfg.poll; now.Sub(progress) > stall {
			return fmt.Errorf("azlease: elector loop made no progress for %v", now.Sub(progress).Round(time.Millisecond))
		}
		return nil
	}
	t := holding.term
	if since := now.Sub(t.renewedAt()); since > e.cfg.lease.duration {
		if err := t.Err(); err != nil {
			return fmt.Errorf("azlease: leader work still running %v after its last renewal; its term ended (%w)", since.Round(time.Millisecond), err)
		}
		return fmt.Errorf("azlease: leader has not renewed for %v, more than the lease duration", since.Round(time.Millisecond))
	}
	if hb := e.cfg.heartbeatTimeout; hb > 0 && leading != nil && leading.Err() == nil {
		if since := now.Sub(leading.lastHeartbeat()); since > hb {
			return fmt.Errorf("azlease: leader work has not sent a heartbeat for %v (HeartbeatTimeout %v)", since.Round(time.Millisecond), hb)
		}
	}
	return nil
}

// HealthHandler returns an http.Handler for liveness probes: 200 with a
// one-line state while [Elector.Check] passes ("ok: leading, epoch N", or
// "ok: following worker-2 (epoch N)"), 503 with the reason otherwise.
//
// Until some request has reached storage it answers 200 "starting: has not
// reached storage yet", with the failures so far: not "ok", since nothing
// is known to work, but not a failure either, so that a liveness probe
// does not restart a fresh instance while it starts. That lasts at most a
// lease duration of failures: then Check fails and the handler answers
// 503, as for an instance that lost storage later. A readiness probe that
// must wait for storage should test the body's "ok:" prefix, or
// [Elector.IsLeader] for "ready only while leading".
func (e *Elector) HealthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if err := e.Check(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if t := e.Term(); t != nil {
			fmt.Fprintf(w, "ok: leading, epoch %d\n", t.Epoch())
			return
		}
		if h := e.lease.health.snapshot(); !h.reached {
			if h.streak > 0 {
				requests := "requests"
				if h.streak == 1 {
					requests = "request"
				}
				fmt.Fprintf(w, "starting: has not reached storage yet (%d %s failed; last: %v)\n", h.streak, requests, h.last)
				return
			}
			fmt.Fprintln(w, "starting: has not reached storage yet")
			return
		}
		e.mu.Lock()
		info := e.leader
		e.mu.Unlock()
		if info.Leased && !info.Self {
			fmt.Fprintf(w, "ok: following %s (epoch %d)\n", info.Holder, info.Epoch)
			return
		}
		fmt.Fprintln(w, "ok: following (no leader seen yet)")
	})
}

// run is the Elector's loop: follow until the lease is acquired, lead until
// the term ends, and again, until stopped. unregister takes its metrics
// away, before Done is closed.
func (e *Elector) run(ctx context.Context, task Task, unregister func()) {
	defer close(e.done)
	defer unregister()
	defer close(e.changes)
	if e.succ != nil {
		defer e.succ.remove(ctx) // part of stopping: the candidacy goes with the Elector
		e.succ.cand.startRefresh(ctx)
	}
	defer func() {
		if h := e.lease.health.snapshot(); !h.reached && h.last != nil {
			e.mu.Lock()
			if e.runErr == nil {
				e.runErr = fmt.Errorf("azlease: elector stopped without ever reaching storage: %w", h.last)
			}
			e.mu.Unlock()
		}
	}()
	for ctx.Err() == nil {
		if e.succ != nil {
			e.succ.goOn() // contending again: whatever stop was prepared did not happen
		}
		tok, ok := e.contend(ctx)
		if !ok {
			return
		}
		stop, yield := e.lead(ctx, tok, task)
		if stop {
			return
		}
		if yield && !e.sleepFollowing(ctx, e.yieldWait()) {
			return // the task returned or stalled: let another instance take over first
		}
	}
}

// contend polls the lock blob until this instance acquires the lease or ctx
// ends. Each poll is one read; the lease is acquired only when it is free.
func (e *Elector) contend(ctx context.Context) (Token, bool) {
	for {
		e.progress()
		st, err := e.lease.inspect(ctx, time.Now().Add(e.cfg.lease.attemptTimeout))
		if e.succ != nil && err == nil && !st.Leased {
			e.succ.standby = false // nobody leads: nobody's standby
		}
		switch {
		case err != nil:
			if e.refused(ctx, err) {
				return Token{}, false
			}
			e.log.Debug("azlease: poll failed", slog.Any("error", err))
		case st.Leased:
			e.observe(leaderInfo(st))
			if e.succ != nil {
				if tok, ok := e.succ.onLeased(ctx, &st); ok {
					return tok, true // handed over to this instance
				}
			}
		case e.succ != nil && e.succ.holdBack(ctx, &st):
			// Leave the free lease to a candidate of higher priority,
			// for one of its polls at most.
		default:
			// Stopping cancels ctx; a lease granted meanwhile is still
			// given back, as part of the graceful stop.
			// The epoch write starts from what the poll read (one
			// request fewer), unless the blob was written since.
			tok, err := e.lease.acquireWithin(context.WithValue(ctx, cleanUpAfterCancelKey{}, true), e.lease.cfg.duration, &st)
			if err == nil {
				return tok, true
			}
			if e.refused(ctx, err) {
				return Token{}, false
			}
			if !errors.Is(err, ErrLeaseHeld) && ctx.Err() == nil {
				e.log.Debug("azlease: acquire failed", slog.Any("error", err))
			}
		}
		wait := e.pollWait()
		if e.succ != nil {
			if err == nil {
				e.succ.syncCandidacy(ctx)
			}
			wait = e.succ.pollWait()
		}
		if !e.sleepFollowing(ctx, wait) {
			return Token{}, false
		}
	}
}

// refused reports whether err is a permanent failure of an operation that
// has never succeeded for this Elector: before storage ever answered (a
// wrong key, a host that does not exist), or the first acquisition refused
// while reads succeed (a role that may read but not lease or write). That
// is a misconfiguration to report at once rather than retry for ever: it
// is then recorded as the reason the Elector stops. An operation that has
// succeeded before and is refused later (a role assignment removed) is
// retried, and logged at Error once. (Failures are logged by the Lease as
// they happen.)
func (e *Elector) refused(ctx context.Context, err error) bool {
	if ctx.Err() != nil || !errors.Is(err, ErrPermanent) {
		return false
	}
	var ae *Error
	if e.lease.health.snapshot().reached && (!errors.As(err, &ae) || e.lease.health.everSucceeded(ae.Op)) {
		return false
	}
	e.mu.Lock()
	e.runErr = err
	e.mu.Unlock()
	msg := "azlease: storage refused the elector's first requests; stopping"
	if ae != nil && e.lease.health.snapshot().reached {
		msg = "azlease: storage refuses to let the elector " + ae.Op + " (it can read: a role without write access?); stopping"
	}
	if errors.Is(err, ErrEndpointNotFound) {
		msg = "azlease: the storage endpoint's host name does not resolve; stopping"
	}
	e.log.Error(msg, slog.Any("error", err))
	return true
}

// lead holds the term that begins with tok: it waits out any takeover delay,
// runs the task, and winds the term up when it ends, the task returns, or ctx
// ends. It reports whether the Elector should stop, and whether it should
// wait a poll interval before contending again.
func (e *Elector) lead(ctx context.Context, tok Token, task Task) (stop, yield bool) {
	// The term's context keeps ctx's values but ends only when the loop
	// ends it, so that its cause says why.
	k := hold(context.WithoutCancel(ctx), e.lease, tok, e.cfg.renewEvery, e.beforeRenew)
	term := k.term
	e.mu.Lock()
	e.holding = k
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.holding, e.leading = nil, nil
		e.mu.Unlock()
		if !stop {
			// This instance no longer leads; who does is unknown until
			// the next poll observes it.
			e.observe(LeaderInfo{Epoch: tok.Epoch})
		}
	}()

	if e.cfg.takeoverDelay > 0 && e.lease.prevUnreleased {
		e.log.Info("azlease: took over a lease that was not released; waiting before leading",
			slog.Uint64("epoch", tok.Epoch), slog.Duration("delay", e.cfg.takeoverDelay))
		select {
		case <-time.After(e.cfg.takeoverDelay):
		case <-term.Done():
		case <-ctx.Done():
		}
	}
	if ctx.Err() != nil || term.Err() != nil {
		e.windUp(k, nil, ErrStopped, ctx.Err() != nil, nil, "")
		return ctx.Err() != nil, false
	}

	e.mu.Lock()
	e.leading = term
	e.mu.Unlock()
	e.log.Info("azlease: became leader", slog.Uint64("epoch", tok.Epoch))
	e.observe(LeaderInfo{Leased: true, Holder: e.cfg.lease.identity, Epoch: tok.Epoch, Acquired: time.Now().UTC().Truncate(time.Millisecond), Self: true})

	var taskDone chan error
	if task != nil {
		taskDone = e.startTask(term, task) // joined in every branch below
	}
	// With succession, a watcher lists the candidates while leading.
	e.succ.beginTerm(tok.Epoch)
	w := e.succ.watch(term)
	defer func() { w.stop() }()
	// With StepDownOnStall, a timer checks the task's heartbeats.
	var (
		stalled <-chan time.Time
		timer   *time.Timer
	)
	if e.cfg.stepDownOnStall {
		timer = time.NewTimer(e.cfg.heartbeatTimeout)
		defer timer.Stop()
		stalled = timer.C
	}
	for {
		done, stop, yield, fired := e.leadStep(ctx, k, taskDone, &w, stalled)
		if done {
			return stop, yield
		}
		if !fired {
			continue
		}
		if left := e.cfg.heartbeatTimeout - time.Since(term.lastHeartbeat()); left > 0 {
			timer.Reset(left)
			continue
		}
		w.stop()
		w = nil
		term.end(ErrStalled)
		e.log.Warn("azlease: the leader's work sent no heartbeat within HeartbeatTimeout; stepping down",
			slog.Uint64("epoch", tok.Epoch), slog.Duration("heartbeat_timeout", e.cfg.heartbeatTimeout))
		e.windUp(k, taskDone, ErrStalled, false, nil, "")
		return false, true // let a healthy instance take over first
	}
}

// leadStep waits for the next event of a term and handles it: the term's
// end, a stop, the task's return, a hand-off asked for or planned. done is
// false when the term goes on (a hand-off called off), or when stalled
// fired (fired: the caller checks the heartbeat).
func (e *Elector) leadStep(ctx context.Context, k *keeper, taskDone chan error, w **watcher, stalled <-chan time.Time) (done, stop, yield, fired bool) {
	term := k.term
	tok := term.Token()
	var calls chan *handOverCall
	if e.succ != nil {
		calls = e.succ.calls
	}
	var c *handOverCall
	select {
	case <-stalled:
		return false, false, false, true
	case <-term.Done():
		(*w).stop()
		*w = nil
		e.log.Warn("azlease: lost leadership", slog.Uint64("epoch", tok.Epoch), slog.Any("cause", term.Err()))
		e.windUp(k, taskDone, term.Err(), false, nil, "")
		return true, false, false, false
	case <-ctx.Done():
		(*w).stop()
		*w = nil
		// A planned stop: with succession, the successor gets ready
		// while this instance still leads.
		succs := e.stopSuccessors(ctx, term)
		term.end(ErrStopped)
		e.log.Info("azlease: stepping down", slog.Uint64("epoch", tok.Epoch))
		e.windUp(k, taskDone, ErrStopped, true, succs, reasonStop)
		return true, true, false, false
	case err := <-taskDone:
		(*w).stop()
		*w = nil
		stop, yield := e.taskReturned(k, err)
		return true, stop, yield, false
	case c = <-calls:
	case c = <-(*w).planC():
	}
	// A hand-off: Yield, YieldTo, PrepareStop, a yield request, a
	// candidate of higher priority. The watcher stops meanwhile.
	(*w).stop()
	*w = nil
	done, stop, yield = e.handOver(ctx, k, taskDone, c)
	if !done {
		*w = e.succ.watch(term)
	}
	return done, stop, yield, false
}

// taskReturned winds up a term whose task returned err.
func (e *Elector) taskReturned(k *keeper, err error) (stop, yield bool) {
	cause := ErrStopped
	if pe, ok := err.(*PanicError); ok {
		cause = pe // the term ended because its work crashed
	}
	k.term.end(cause)
	// After PrepareStop, the successor it got ready takes over.
	var succs []successor
	if p := e.succ.takePrepared(k.term); p != nil {
		succs = p.succs
	}
	e.windUp(k, nil, cause, e.cfg.afterTask == StopElecting, succs, reasonStop)
	if e.cfg.afterTask == StopElecting {
		e.mu.Lock()
		e.runErr = err
		e.mu.Unlock()
		e.log.Info("azlease: leader task returned; stopping", errAttr(err)...)
		return true, false
	}
	e.log.Info("azlease: leader task returned; contending again after a poll interval", errAttr(err)...)
	return false, true
}

// errAttr is the error attribute of a log line about err: none for nil.
func errAttr(err error) []any {
	if err == nil {
		return nil
	}
	return []any{slog.Any("error", err)}
}

// errTaskExited is what a task that called runtime.Goexit returns.
var errTaskExited = errors.New("azlease: leader task ended its goroutine (runtime.Goexit) without returning")

// startTask runs task in a goroutine of its own and returns the channel that
// delivers what it returned; the caller must receive from it. Nothing the
// task does ends the goroutine without a delivery: a panic becomes a
// *PanicError, runtime.Goexit errTaskExited.
func (e *Elector) startTask(term *Term, task Task) chan error {
	done := make(chan error, 1)
	go func() {
		err := errTaskExited
		defer func() { done <- err }()
		e.taskGoroutine.Store(goroutineID())
		defer e.taskGoroutine.Store(0)
		err = e.runTask(term, task)
	}()
	return done
}

// runTask calls task, turning a panic into a *PanicError that it logs.
func (e *Elector) runTask(term *Term, task Task) (err error) {
	defer func() {
		if v := recover(); v != nil {
			pe := &PanicError{Value: v, Stack: debug.Stack()}
			e.log.Error("azlease: leader task panicked; ending its term",
				slog.Uint64("epoch", term.Epoch()), slog.Any("panic", v), slog.String("stack", string(pe.Stack)))
			err = pe
		}
	}()
	return task(term.Context(), term)
}

// windUp ends a term in the only safe order: the work stops first, then the
// lease is released. It waits for the task (if taskDone is not nil) up to
// DrainTimeout while the keeper goes on renewing; a task that is slower gets
// its lease left to expire rather than released under it, and windUp goes on
// waiting for it, logging while it does. An Elector that is stopping (asked
// to, or its task returned with StopElecting) gives the release one
// AttemptTimeout (Lease.releaseStopping); otherwise the release retries
// until the lease's validity deadline.
//
// With successors (succs, planned succession), a term whose work stopped in
// time hands the lease to them instead of releasing it (handLeaseOn), and
// the outcome says who took it.
func (e *Elector) windUp(k *keeper, taskDone chan error, cause error, stopping bool, succs []successor, reason string) handOnOutcome {
	k.term.end(cause)
	drained := taskDone == nil
	if !drained {
		t := time.NewTimer(e.cfg.drainTimeout)
		select {
		case <-taskDone:
			drained = true
		case <-t.C:
		}
		t.Stop()
	}
	k.stop(cause)
	release := func() error { return e.lease.Release(context.Background()) }
	if stopping {
		release = e.lease.releaseStopping
	}
	if drained && len(succs) > 0 {
		return e.handLeaseOn(k.term.Token().LeaseID, succs, reason, stopping)
	}
	if drained {
		if err := release(); err != nil && !errors.Is(err, ErrLeaseLost) {
			e.log.Warn("azlease: release failed; the lease will expire", slog.Any("error", err))
			if e.succ != nil && stopping {
				e.succ.unanswered.Store(true)
			}
		}
		return handOnOutcome{released: true}
	}
	e.log.Error("azlease: leader task did not return within DrainTimeout; leaving the lease to expire",
		slog.Duration("drain_timeout", e.cfg.drainTimeout), slog.Uint64("epoch", k.term.Epoch()))
	for {
		t := time.NewTimer(e.cfg.lease.duration)
		select {
		case <-taskDone:
			t.Stop()
			// The work has stopped at last: release what may still be
			// held, rather than let it expire.
			_ = release()
			return handOnOutcome{}
		case <-t.C:
			e.log.Error("azlease: leader task still running after its term ended", slog.Uint64("epoch", k.term.Epoch()))
		}
	}
}

// observe records a leader change and offers it on Changes, replacing one
// not yet received. Only the loop goroutine calls it.
func (e *Elector) observe(info LeaderInfo) {
	e.mu.Lock()
	same := info.Leased == e.leader.Leased && info.Holder == e.leader.Holder && info.Epoch == e.leader.Epoch && info.Self == e.leader.Self
	e.leader = info
	e.mu.Unlock()
	if same {
		return
	}
	if !info.Self {
		e.log.Info("azlease: following", slog.String("leader", info.Holder), slog.Uint64("epoch", info.Epoch))
	}
	select {
	case e.changes <- info:
	default:
		select {
		case <-e.changes:
		default:
		}
		e.changes <- info // cannot block: only this goroutine sends
	}
}

// sleepFollowing waits d or until ctx ends, as sleepCtx, while this
// instance does not lead: a Yield, YieldTo or PrepareStop that arrives
// meanwhile gets ErrNotLeader.
func (e *Elector) sleepFollowing(ctx context.Context, d time.Duration) bool {
	if e.succ == nil {
		return sleepCtx(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return true
		case <-ctx.Done():
			return false
		case c := <-e.succ.calls:
			c.reply <- handOverReply{err: ErrNotLeader}
		}
	}
}

func (e *Elector) progress() {
	e.mu.Lock()
	e.lastProgress = time.Now()
	e.mu.Unlock()
}

// yieldWait is how long an instance that let go (its task returned, or it
// stepped down on a stall) waits before contending again: the longest poll
// interval a follower can draw, plus a fifth of the poll interval for its
// request to arrive, so that every follower polls at least once meanwhile
// and a healthy one takes over. A plain poll interval with jitter was not
// enough: a yielding instance that drew a shorter wait than the follower
// re-acquired first now and then.
func (e *Elector) yieldWait() time.Duration {
	return timing.MaxJittered(e.cfg.poll, e.cfg.jitter) + e.cfg.poll/5
}

func (e *Elector) pollWait() time.Duration {
	return timing.Jitter(e.cfg.poll, e.cfg.jitter, mrand.Float64())
}
