package azlease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/azlease/azlease/internal/timing"
)

// OnceState is the state of a [DoOnce] marker.
type OnceState string

// The states of a DoOnce marker.
const (
	OncePending OnceState = "pending" // nobody has run it yet (or it was reset)
	OnceRunning OnceState = "running" // a runner holds the lease and runs fn
	OnceDone    OnceState = "done"    // fn completed successfully, once
	OnceFailed  OnceState = "failed"  // the last attempt failed
)

// OnceStatus is a DoOnce marker as anyone can read it.
type OnceStatus struct {
	State OnceState
	// Holder is who runs it (running), completed it (done) or failed it.
	Holder string
	// Attempts counts the attempts made so far, including ones whose runner
	// died: from 0 to 1,000,000. A marker whose count is outside that range
	// (or not a number), or whose state is unknown, is corrupt: DoOnce and
	// InspectOnce then fail with an error wrapping [ErrOnceCorrupt] until
	// [ResetOnce] clears it.
	Attempts int
	// MaxAttempts is the attempt limit recorded with the key's first attempt
	// (that call's MaxAttempts, 1 to 1000): every later DoOnce on the key
	// uses it instead of its own (logging a warning when they differ), until
	// [ResetOnce]. Zero: none recorded (never attempted, or an older azlease;
	// the next attempt records its caller's). Outside 1 to 1000: corrupt.
	MaxAttempts int
	// Epoch is the fencing epoch of the term that wrote the marker. Epochs
	// count per lock blob: this one is the marker blob's, comparable only
	// with other epochs of the same key (see [Token]).
	Epoch uint64
	// Time is when the marker was written, by the writer's wall clock.
	Time time.Time
	// LastError is the failure of the last failed attempt.
	LastError string
	// Locked is true while some runner holds the marker's lease.
	Locked bool
}

// OnceResult is what a DoOnce call learns.
type OnceResult struct {
	// Ran is true for the one call whose fn completed it.
	Ran bool
	// Status is the marker after completion: who completed it, when, in
	// which term, after how many attempts.
	Status OnceStatus
}

// ErrOnceFailed is wrapped by [*OnceFailedError].
var ErrOnceFailed = errors.New("azlease: once failed")

// ErrOnceUnrecorded is wrapped by the error of a DoOnce call whose fn
// returned nil but whose completion is not known to be recorded: the
// marker does not say done in this call's term, so another process may run
// fn again (or has: a call whose completion was overtaken by another
// runner's gets the marker of that run in OnceResult.Status). The error's
// text says which case it is: the term was lost before the completion
// could be recorded, the marker shows it was not recorded, another runner
// completed the key, or storage did not answer (it may have been recorded
// after all). A call whose fn returned nil returns either Ran true or an
// error wrapping ErrOnceUnrecorded, never a plain "done elsewhere".
var ErrOnceUnrecorded = errors.New("azlease: fn completed, but its completion is not known to be recorded")

// ErrOnceCorrupt means a DoOnce marker's state or attempt count is not one
// azlease writes (foreign or damaged metadata). Guessing could run fn more
// often than MaxAttempts allows, so every DoOnce and InspectOnce on the key
// fails with a permanent [*Error] wrapping ErrOnceCorrupt until an operator
// clears the marker with [ResetOnce] (fn then runs again).
var ErrOnceCorrupt = errors.New("azlease: corrupt DoOnce marker")

// OnceFailedError means a DoOnce key has used up its attempts: every caller
// gets it until the marker is reset ([ResetOnce]).
type OnceFailedError struct {
	Key      string
	Attempts int
	// MaxAttempts is the limit that applied: the one recorded with the
	// key's first attempt ([OnceStatus.MaxAttempts]), or, when none is
	// recorded, this caller's DoOnceOptions.MaxAttempts.
	MaxAttempts int
	// CallerMaxAttempts is this caller's DoOnceOptions.MaxAttempts (3 when
	// zero); the error's text says so when it is not the limit that
	// applied.
	CallerMaxAttempts int
	Holder            string // who made the last attempt
	LastError         string
}

func (e *OnceFailedError) Error() string {
	if e == nil {
		return "<nil>"
	}
	attempts := "attempts"
	if e.Attempts == 1 {
		attempts = "attempt"
	}
	limit := ""
	switch {
	case e.MaxAttempts > 0 && e.CallerMaxAttempts > 0 && e.CallerMaxAttempts != e.MaxAttempts:
		limit = fmt.Sprintf(" (MaxAttempts %d, recorded with the key's first attempt; this caller's %d does not apply)", e.MaxAttempts, e.CallerMaxAttempts)
	case e.MaxAttempts > 0:
		limit = fmt.Sprintf(" (MaxAttempts %d)", e.MaxAttempts)
	}
	return fmt.Sprintf("azlease: once %q failed after %d %s%s; last by %s: %s", e.Key, e.Attempts, attempts, limit, e.Holder, e.LastError)
}

// Unwrap returns ErrOnceFailed.
func (e *OnceFailedError) Unwrap() error { return ErrOnceFailed }

// Marker metadata keys. They start with "azlease", so user metadata cannot
// collide with them, and the epoch record leaves them alone.
const (
	metaOnceState    = "azleaseoncestate"
	metaOnceHolder   = "azleaseonceholder"
	metaOnceAttempts = "azleaseonceattempts"
	metaOnceEpoch    = "azleaseonceepoch"
	metaOnceTime     = "azleaseoncetime"
	metaOnceError    = "azleaseonceerror"
	metaOnceLimit    = "azleaseoncemaxattempts"
)

var onceKeys = []string{metaOnceState, metaOnceHolder, metaOnceAttempts, metaOnceEpoch, metaOnceTime, metaOnceError, metaOnceLimit}

// maxOnceAttempts is the largest DoOnceOptions.MaxAttempts, and so the
// largest limit a valid marker records.
const maxOnceAttempts = 1000

// maxErrorText bounds the error text kept in the marker, in bytes (metadata
// is 8 KiB in all).
const maxErrorText = 1024

// maxMarkerAttempts bounds the attempt count a valid marker records.
// MaxAttempts is at most 1000, so a larger count never came from azlease;
// the bound keeps Attempts+1 far from overflowing.
const maxMarkerAttempts = 1_000_000

// parseMarker reads a DoOnce marker from metadata. The control fields, which
// decide whether fn may run (state, attempts and the recorded limit), are
// checked: state and attempts must both be present and valid, or, with the
// limit, all absent (no marker: pending); the limit is optional (markers of
// older versions lack it) but valid when present. Anything else is corrupt,
// an error wrapping ErrOnceCorrupt. The informational fields (holder,
// epoch, time, error text) read as absent when malformed. A pending marker
// with no attempts, no error and no limit reads as no marker, as withMarker
// writes it, so that parseMarker(withMarker(md, st)) == st for every st
// parseMarker returns.
func parseMarker(md map[string]*string) (OnceStatus, error) {
	st := OnceStatus{State: OncePending}
	state, hasState := lookup(md, metaOnceState)
	attempts, hasAttempts := lookup(md, metaOnceAttempts)
	limit, hasLimit := lookup(md, metaOnceLimit)
	if hasState || hasAttempts || hasLimit {
		switch s := OnceState(state); {
		case !hasState:
			return OnceStatus{}, corruptMarker(metaOnceState, "is missing")
		case s == OncePending, s == OnceRunning, s == OnceDone, s == OnceFailed:
			st.State = s
		default:
			return OnceStatus{}, corruptMarker(metaOnceState, fmt.Sprintf("is %q, not pending, running, done or failed", echo(state)))
		}
		n, err := strconv.Atoi(attempts)
		switch {
		case !hasAttempts:
			return OnceStatus{}, corruptMarker(metaOnceAttempts, "is missing")
		case err != nil || n < 0 || n > maxMarkerAttempts:
			return OnceStatus{}, corruptMarker(metaOnceAttempts, fmt.Sprintf("is %q, not a whole number from 0 to %d", echo(attempts), maxMarkerAttempts))
		}
		st.Attempts = n
		if hasLimit {
			n, err := strconv.Atoi(limit)
			if err != nil || n < 1 || n > maxOnceAttempts {
				return OnceStatus{}, corruptMarker(metaOnceLimit, fmt.Sprintf("is %q, not a whole number from 1 to %d", echo(limit), maxOnceAttempts))
			}
			st.MaxAttempts = n
		}
	}
	if v, ok := lookup(md, metaOnceHolder); ok {
		st.Holder, _ = url.QueryUnescape(v)
	}
	if v, ok := lookup(md, metaOnceEpoch); ok {
		st.Epoch, _ = strconv.ParseUint(v, 10, 64)
	}
	if v, ok := lookup(md, metaOnceTime); ok {
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
			st.Time = time.UnixMilli(ms).UTC()
		}
	}
	if v, ok := lookup(md, metaOnceError); ok {
		e, _ := url.QueryUnescape(v)
		st.LastError = clipError(e)
	}
	if noMarker(st) {
		return OnceStatus{State: OncePending}, nil // a reset marker is no marker
	}
	return st, nil
}

// noMarker reports whether st records nothing: pending, no attempts, no
// error and no limit. withMarker writes no marker keys for it.
func noMarker(st OnceStatus) bool {
	return st.State == OncePending && st.Attempts == 0 && st.LastError == "" && st.MaxAttempts == 0
}

// corruptMarker is the error for a marker whose control field name has
// problem.
func corruptMarker(name, problem string) error {
	return fmt.Errorf("%w: its %s metadata %s; clear the marker with ResetOnce (fn then runs again)", ErrOnceCorrupt, name, problem)
}

// markerTime is the time written into a marker: UTC, to the millisecond the
// marker keeps, with no monotonic reading, so that the runner's copy equals
// what waiters read back.
func markerTime() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

// clipError shortens an error text to at most maxErrorText bytes, marking
// the cut; clipping a clipped text changes nothing.
func clipError(e string) string {
	const more = "…"
	if len(e) <= maxErrorText {
		return e
	}
	return strings.ToValidUTF8(e[:maxErrorText-len(more)], "") + more
}

// withMarker returns a copy of md with the marker replaced by st.
func withMarker(md map[string]*string, st OnceStatus) map[string]*string {
	out := make(map[string]*string, len(md)+len(onceKeys))
	for k, v := range md {
		keep := true
		for _, ok := range onceKeys {
			keep = keep && !strings.EqualFold(k, ok)
		}
		if keep {
			out[k] = v
		}
	}
	if noMarker(st) {
		return out // a reset marker is no marker
	}
	set := func(k, v string) { out[k] = &v }
	set(metaOnceState, string(st.State))
	set(metaOnceHolder, url.QueryEscape(st.Holder))
	set(metaOnceAttempts, strconv.Itoa(st.Attempts))
	set(metaOnceEpoch, strconv.FormatUint(st.Epoch, 10))
	set(metaOnceTime, strconv.FormatInt(st.Time.UnixMilli(), 10))
	if st.LastError != "" {
		set(metaOnceError, url.QueryEscape(clipError(st.LastError)))
	}
	if st.MaxAttempts > 0 {
		set(metaOnceLimit, strconv.Itoa(st.MaxAttempts))
	}
	return out
}

// DoOnce runs fn so that, across every process calling DoOnce with the same
// key, fn completes successfully once: the first caller to take the key's
// lease runs it (fn gets a context that ends if the lease is lost, and the
// term's fencing [Token]); the others wait until it is done, then learn by
// whom and when. A key that is done stays done until [ResetOnce]: use one per
// deployment, such as "migrate-" + version.
//
// At least once, with exclusion: no two runs of fn overlap, but fn runs again
// if a runner dies (or loses its lease) before it marks the key done, so make
// fn idempotent or fence it with the token's epoch. A failed fn is retried by a
// waiting caller, up to MaxAttempts in all (the first caller's limit); then
// every later caller gets a [*OnceFailedError]. A call whose fn failed returns
// fn's error as it is (the last attempt's too) and, once recorded, the failed
// marker as Status. A call whose fn returned nil returns Ran true, or an error
// wrapping [ErrOnceUnrecorded] when the completion is not known to be recorded
// (it settles a lost answer first). With Retention, a call not taken within
// Retention/2 of its start returns [ErrOnceTooLate] without running fn. Waiting
// is bounded by ctx and UnreachableTimeout; after ctx ends, finishing takes at
// most 2 × AttemptTimeout. docs/design/run-once.md has the mechanism.
func DoOnce(ctx context.Context, cc *container.Client, key string, opts *DoOnceOptions, fn func(ctx context.Context, tok Token) error) (OnceResult, error) {
	o, err := newOnce(cc, key, opts)
	if err != nil {
		return OnceResult{}, err
	}
	if fn == nil {
		return OnceResult{}, optionErr("fn", "nil function")
	}
	res, err := o.do(ctx, fn)
	if o.ran {
		o.sweep(ctx) // DoOnceOptions.Retention: this runner's share of the deletes
	}
	o.lease.tm.onceCall(onceOutcome(res, err))
	return res, err
}

// onceOutcome names the outcome of a DoOnce call for metrics.
func onceOutcome(res OnceResult, err error) string {
	switch {
	case err == nil && res.Ran:
		return "ran"
	case err == nil:
		return "done_elsewhere"
	case errors.Is(err, ErrOnceUnrecorded):
		return "unrecorded"
	case errors.Is(err, ErrOnceFailed):
		return "exhausted"
	case errors.Is(err, ErrOnceTooLate):
		return "too_late"
	case res.Status.State == OnceFailed:
		return "failed" // fn returned an error
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	case errors.Is(err, ErrLeaseLost):
		return "lost"
	}
	return "error"
}

// do is DoOnce's loop, after validation.
func (o *once) do(ctx context.Context, fn func(ctx context.Context, tok Token) error) (OnceResult, error) {
	var last error // the last failed poll, kept for the final error
	for {
		st, err := o.status(ctx, time.Now().Add(o.cfg.lease.attemptTimeout))
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return OnceResult{}, o.ended(ctx, err)
			}
			if !errors.Is(err, ErrTransient) {
				return OnceResult{}, err
			}
			last = err
			o.log.Debug("azlease: once: poll failed", slog.Any("error", err))
		case st.State == OnceDone:
			return OnceResult{Status: st}, nil
		case (st.State == OnceFailed || st.State == OncePending) && st.Attempts >= o.limit(st):
			return OnceResult{}, o.failed(st)
		case o.late() != nil:
			return OnceResult{}, o.late()
		case !st.Locked:
			if res, done, err := o.run(ctx, fn); done {
				return res, err
			}
		}
		if err := o.lease.health.unreachable(time.Now(), o.cfg.unreachable, o.t.endpoint()); err != nil {
			return OnceResult{}, fmt.Errorf("azlease: once %q: %w", o.key, err)
		}
		if !sleepCtx(ctx, timing.Jitter(o.cfg.poll, o.cfg.jitter, mrand.Float64())) {
			return OnceResult{}, o.ended(ctx, last)
		}
	}
}

// ended is the error of a call whose ctx ended: its cause, and the last
// failed attempt if there was one (last may be nil).
func (o *once) ended(ctx context.Context, last error) error {
	if last != nil {
		return fmt.Errorf("azlease: once %q: %w; last attempt: %w", o.key, context.Cause(ctx), lastAttempt(last))
	}
	return fmt.Errorf("azlease: once %q: %w", o.key, context.Cause(ctx))
}

// once is one DoOnce, InspectOnce or ResetOnce call on a key.
type once struct {
	key   string
	t     target
	cfg   onceConfig
	lease *Lease
	log   *slog.Logger

	// unstarted is this call's own claim of an attempt whose "running"
	// write failed without a definitive answer, so that fn never ran: if
	// the call later finds that claim in the marker, it is not an attempt
	// whose runner died, and does not count.
	unstarted *claim
	warned    bool      // the recorded limit's mismatch with this caller's was logged
	start     time.Time // when the call began, for Retention's bound (late)
	ran       bool      // fn was called: this call sweeps (Retention)
}

// claim is a "running" marker a call wrote (or may have written) over prev.
type claim struct {
	prev    OnceStatus
	epoch   uint64
	attempt int
}

func newOnce(cc *container.Client, key string, opts *DoOnceOptions) (*once, error) {
	cfg, err := opts.config()
	if err != nil {
		return nil, err
	}
	if key == "" {
		return nil, optionErr("key", "empty")
	}
	t, err := newTarget(cc, cfg.prefix+key, "key")
	if err != nil {
		return nil, err
	}
	if _, ok := retentionScope(cfg.prefix, key); cfg.retention != 0 && !ok {
		return nil, optionErr("key", "%q: DoOnceOptions.Retention needs a key with a \"/\": it deletes the records that share the key's name up to its last \"/\"", key)
	}
	l := newLease(t, cfg.lease)
	return &once{key: key, t: t, cfg: cfg, lease: l, log: l.cfg.log.With(slog.String("key", key)), start: time.Now()}, nil
}

func (o *once) status(ctx context.Context, limit time.Time) (OnceStatus, error) {
	m, _, err := o.read(ctx, limit)
	return m, err
}

// read reads the marker and the lock blob's epoch (the latest term's), with
// no lease, retrying transient failures until limit.
func (o *once) read(ctx context.Context, limit time.Time) (OnceStatus, uint64, error) {
	st, err := o.lease.inspect(ctx, limit)
	if err != nil {
		return OnceStatus{}, 0, err
	}
	m, err := parseMarker(st.raw)
	if err != nil {
		return OnceStatus{}, 0, opError("read", o.t.container, o.t.blob, ErrPermanent, err)
	}
	m.Locked = st.Leased
	return m, st.Epoch, nil
}

// limit is the attempt limit that applies to the key whose marker is st:
// the one recorded with its first attempt, else this caller's. A mismatch
// is logged once per call.
func (o *once) limit(st OnceStatus) int {
	if st.MaxAttempts == 0 {
		return o.cfg.maxAttempts
	}
	if st.MaxAttempts != o.cfg.maxAttempts && !o.warned {
		o.warned = true
		o.log.Warn("azlease: once: the key's MaxAttempts, recorded with its first attempt, differs from this caller's; the recorded one applies",
			slog.Int("recorded", st.MaxAttempts), slog.Int("caller", o.cfg.maxAttempts))
	}
	return st.MaxAttempts
}

func (o *once) failed(st OnceStatus) error {
	return &OnceFailedError{Key: o.key, Attempts: st.Attempts, MaxAttempts: o.limit(st), CallerMaxAttempts: o.cfg.maxAttempts,
		Holder: st.Holder, LastError: st.LastError}
}

// run tries to take the key's lease and, if it gets it, runs fn under it. done
// is false when the caller should go on waiting.
func (o *once) run(ctx context.Context, fn func(context.Context, Token) error) (res OnceResult, done bool, err error) {
	if onceBeforeAcquire != nil {
		onceBeforeAcquire(o.key)
	}
	tok, err := o.lease.Acquire(ctx)
	switch {
	case errors.Is(err, ErrLeaseHeld), errors.Is(err, ErrTransient) && ctx.Err() == nil:
		return OnceResult{}, false, nil
	case err != nil && ctx.Err() != nil:
		return OnceResult{}, true, o.ended(ctx, err)
	case err != nil:
		return OnceResult{}, true, err
	}
	bg := context.WithoutCancel(ctx) // to release even if ctx has ended
	// post bounds what follows fn (afterFn), the final release included.
	var (
		post       = bg
		cancelPost = func() {}
	)
	defer func() {
		defer cancelPost()
		_ = o.lease.Release(post)
	}()
	write := func(ctx context.Context, st OnceStatus) error {
		return o.lease.updateMetadata(ctx, func(md map[string]*string) map[string]*string { return withMarker(md, st) })
	}

	m, err := parseMarker(o.lease.metadata())
	if err != nil {
		return OnceResult{}, true, opError("read", o.t.container, o.t.blob, ErrPermanent, err)
	}
	if u := o.unstarted; u != nil && m.State == OnceRunning && m.Epoch == u.epoch && m.Attempts == u.attempt {
		m = u.prev // this call's own claim, whose fn never ran: not an attempt
	}
	o.unstarted = nil
	limit := o.limit(m)
	switch {
	case m.State == OnceDone:
		return OnceResult{Status: m}, true, nil
	case (m.State == OnceFailed || m.State == OncePending) && m.Attempts >= limit:
		return OnceResult{}, true, o.failed(m)
	case m.State == OnceRunning && m.Attempts >= limit:
		// The last allowed attempt's runner died or lost its lease.
		m.State, m.Epoch, m.Time, m.MaxAttempts = OnceFailed, tok.Epoch, markerTime(), limit
		m.LastError = fmt.Sprintf("the runner %s did not finish attempt %d (it died or lost its lease)", m.Holder, m.Attempts)
		if err := write(ctx, m); err != nil {
			return OnceResult{}, false, nil
		}
		return OnceResult{}, true, o.failed(m)
	}

	if err := o.late(); err != nil {
		// The lease is held: the record cannot be deleted from here on, but
		// it may have been already, and recreated by this acquisition.
		return OnceResult{}, true, err
	}
	attempt := m.Attempts + 1
	running := OnceStatus{State: OnceRunning, Holder: o.cfg.lease.identity, Attempts: attempt, MaxAttempts: limit, Epoch: tok.Epoch, Time: markerTime()}
	if err := write(ctx, running); err != nil {
		if errors.Is(err, ErrPermanent) {
			return OnceResult{}, true, err
		}
		// The claim may have been recorded although fn will not run.
		o.unstarted = &claim{prev: m, epoch: tok.Epoch, attempt: attempt}
		return OnceResult{}, false, nil // lost or out of time: look again
	}
	o.log.Info("azlease: once: running", slog.Int("attempt", attempt), slog.Uint64("epoch", tok.Epoch))
	o.ran = true

	k := hold(ctx, o.lease, tok, o.cfg.renewEvery, nil)
	defer k.stop(ErrStopped) // also if fn panics; stop is idempotent
	ferr := fn(k.term.Context(), tok)
	cause := k.term.Err() // nil while the term lasts
	k.stop(ErrStopped)
	post, cancelPost = o.afterFn(ctx, bg)

	lost := cause != nil && errors.Is(cause, ErrLeaseLost)
	switch {
	case lost && ferr == nil:
		return OnceResult{}, true, fmt.Errorf("%w: once %q: its lease was lost before completion could be recorded; another process may run it again: %w", ErrOnceUnrecorded, o.key, cause)
	case lost:
		return OnceResult{}, true, ferr
	case ferr != nil && ctx.Err() != nil:
		// The caller gave up mid-run. That is not a failure of fn: put the
		// marker back as it was, so the attempt does not count, and say
		// what happened. (If that write fails, the marker says "running"
		// and the next runner counts the attempt as one whose runner died.
		// A run that completed despite the cancellation is recorded below.)
		back := m
		back.MaxAttempts = limit // recorded with this attempt: it stays the key's
		back.LastError = fmt.Sprintf("attempt %d by %s was abandoned by its caller", attempt, o.cfg.lease.identity)
		if err := write(post, back); err != nil {
			o.log.Warn("azlease: once: could not undo an abandoned attempt", slog.Any("error", err))
		}
		return OnceResult{}, true, fmt.Errorf("azlease: once %q: attempt %d abandoned by its caller: %w", o.key, attempt, errors.Join(context.Cause(ctx), ferr))
	case ferr != nil:
		failed := running
		failed.State, failed.Time, failed.LastError = OnceFailed, markerTime(), clipError(ferr.Error())
		o.log.Info("azlease: once: attempt failed", slog.Int("attempt", attempt), slog.Any("error", ferr))
		if err := write(post, failed); err != nil {
			// Whether it was recorded is unknown: do not claim it was.
			o.log.Warn("azlease: once: could not record the failure; the next runner counts the attempt as one whose runner died", slog.Any("error", err))
			return OnceResult{}, true, ferr
		}
		return OnceResult{Status: failed}, true, ferr
	}
	doneSt := running
	doneSt.State, doneSt.Time = OnceDone, markerTime()
	if err := write(post, doneSt); err != nil {
		return o.settle(ctx, post, tok, err)
	}
	o.log.Info("azlease: once: done", slog.Int("attempt", attempt), slog.Uint64("epoch", tok.Epoch))
	return OnceResult{Ran: true, Status: doneSt}, true, nil
}

// afterFn is the context of what DoOnce does after fn returned (record the
// outcome, settle it, release): bg, which ctx's end does not cut short,
// while ctx lasts; once ctx has ended (the caller gave up, or is stopping:
// a signal), 2 × AttemptTimeout in all, so that a caller that stops while
// storage does not answer is not held for the rest of the lease's validity
// and of UnreachableTimeout.
func (o *once) afterFn(ctx, bg context.Context) (context.Context, context.CancelFunc) {
	if ctx.Err() == nil {
		return bg, func() {}
	}
	return context.WithTimeout(bg, 2*o.cfg.lease.attemptTimeout)
}

// settle finds out whether the "done" marker of the term tok, whose write
// failed with werr, was recorded. The write may have been applied although
// its answer was lost, or be applied later: a write carrying tok's lease ID
// can land only while that ID is the lock blob's lease, and Azure renews
// even an expired lease for its ID if nobody leased the blob since. So the
// marker read is final only once that ID is known to be dead: Azure
// released it (or said it is not the lease's), or the blob shows a later
// term's epoch. Until then settle retries, releasing and reading, until ctx
// ends or storage has been unreachable for UnreachableTimeout; a ctx that
// has ended already leaves one round, within what afterFn's bound leaves.
// The done marker of this term is the
// answer as soon as it is read: nothing of this runner's can undo it. Once
// released, the ID can never be granted again: the term's lease ID was
// proposed by one request only, which was answered (see acquire.go), so no
// acquisition carrying it can be applied late.
func (o *once) settle(ctx, post context.Context, tok Token, werr error) (OnceResult, bool, error) {
	o.log.Warn("azlease: once: fn completed but marking the key done failed; finding out whether it was recorded", slog.Any("error", werr))
	sctx, rounds := ctx, 0
	if ctx.Err() != nil {
		// The caller has stopped: what is left of afterFn's bound.
		sctx, rounds = post, 1
	}
	unknown := func(why error) (OnceResult, bool, error) {
		// No release after this: it would overrun the caller's ctx or the
		// bound, and the lease, no longer renewed, frees itself.
		o.lease.forget(tok.LeaseID)
		return OnceResult{}, true, fmt.Errorf("%w: once %q: fn completed but its completion may not have been recorded (%w); if it was not, another process may run it again; marking it done failed: %w", ErrOnceUnrecorded, o.key, why, lastAttempt(werr))
	}
	released := false
	var last error
	for n := 1; ; n++ {
		if !released {
			// unsure: Azure's "not the lease's" means dead too.
			if err := o.lease.releaseID(sctx, tok.LeaseID, time.Now().Add(o.cfg.lease.attemptTimeout), true); err == nil {
				released = true
				o.lease.forget(tok.LeaseID)
			} else {
				last = err
			}
		}
		st, epoch, err := o.read(sctx, time.Now().Add(o.cfg.lease.attemptTimeout))
		switch {
		case err != nil && errors.Is(err, ErrPermanent):
			return unknown(err)
		case err != nil:
			last = err
		case st.State == OnceDone && st.Epoch == tok.Epoch:
			o.log.Info("azlease: once: done (marking it done had been applied)", slog.Int("attempt", st.Attempts), slog.Uint64("epoch", tok.Epoch))
			return OnceResult{Ran: true, Status: st}, true, nil
		case st.State == OnceDone:
			// Not "done elsewhere": this call's fn completed too, and the
			// caller must learn that its completion was not the one
			// recorded (fn ran twice).
			o.log.Warn("azlease: once: fn completed, but another runner completed the key after this one's lease ended",
				slog.String("holder", st.Holder), slog.Uint64("epoch", st.Epoch))
			return OnceResult{Status: st}, true, fmt.Errorf("%w: once %q: fn completed, but its completion could not be recorded: %s completed the key after this run's lease ended (epoch %d, this run's %d), so fn ran twice: %w", ErrOnceUnrecorded, o.key, st.Holder, st.Epoch, tok.Epoch, werr)
		case released || epoch > tok.Epoch || st.Epoch > tok.Epoch:
			return OnceResult{}, true, fmt.Errorf("%w: once %q: fn completed but its completion could not be recorded (the marker says %s, epoch %d); another process may run it again: %w", ErrOnceUnrecorded, o.key, st.State, st.Epoch, werr)
		}
		ended := func(cause error) (OnceResult, bool, error) {
			if last != nil {
				return unknown(fmt.Errorf("%w; last attempt: %w", cause, lastAttempt(last)))
			}
			return unknown(cause)
		}
		switch {
		case sctx.Err() != nil:
			return ended(context.Cause(sctx))
		case n == rounds:
			return ended(errors.New("the caller's context had ended before fn returned"))
		}
		if err := o.lease.health.unreachable(time.Now(), o.cfg.unreachable, o.t.endpoint()); err != nil {
			return unknown(err)
		}
		if !sleepCtx(sctx, timing.Backoff(n, retryBase, retryMax, mrand.Float64())) {
			return ended(context.Cause(sctx))
		}
	}
}

// InspectOnce reads the marker of a DoOnce key. It needs only read access.
func InspectOnce(ctx context.Context, cc *container.Client, key string, opts *DoOnceOptions) (OnceStatus, error) {
	o, err := newOnce(cc, key, opts)
	if err != nil {
		return OnceStatus{}, err
	}
	return o.status(ctx, time.Now().Add(2*o.cfg.lease.attemptTimeout))
}

// OnceMarker reads the [DoOnce] marker that st's blob carries, from the
// metadata [Inspect] or [InspectPrefix] read: ok is false when the blob
// carries none (it is not a DoOnce key, or the key was reset or never
// attempted), and the error is one wrapping [ErrOnceCorrupt] when the marker
// is corrupt, as [InspectOnce] would report it. Locked is st.Leased. It makes
// no request: with InspectPrefix it reads every key under a prefix ("once/"
// by default) with one List Blobs request per 5,000 blobs. The zero Status
// carries no marker.
func (st Status) OnceMarker() (m OnceStatus, ok bool, err error) {
	if !hasMarker(st.raw) {
		return OnceStatus{State: OncePending}, false, nil
	}
	m, err = parseMarker(st.raw)
	if err != nil {
		return OnceStatus{}, true, err
	}
	m.Locked = st.Leased
	return m, true, nil
}

// ErrNothingToReset is what [ResetOnce] returns for a key that has no
// marker: never used (its marker blob does not exist, and ResetOnce does
// not create it), or already reset. Nothing was written. Treat it as
// success where "the key runs again next time" is all that matters, and
// as a mistake (a misspelt key, a wrong Prefix or container) where the key
// was meant to exist.
var ErrNothingToReset = errors.New("azlease: nothing to reset: the key has no DoOnce marker (never used, or already reset)")

// ResetOnce clears the marker of a DoOnce key, so that the next DoOnce call
// runs fn again: an operator re-running a migration, or clearing a corrupt
// marker ([ErrOnceCorrupt]). It also clears the recorded MaxAttempts: the
// next attempt records its caller's. It takes the key's lease to do so,
// and returns an error wrapping [ErrLeaseHeld] while a runner holds it.
// When the key has no marker it returns [ErrNothingToReset] and creates
// nothing (no container, no blob).
func ResetOnce(ctx context.Context, cc *container.Client, key string, opts *DoOnceOptions) error {
	o, err := newOnce(cc, key, opts)
	if err != nil {
		return err
	}
	o.lease.cfg.create = false // a key never used stays so
	if _, err := o.lease.Acquire(ctx); err != nil {
		if bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ContainerNotFound) {
			return fmt.Errorf("%w: %s", ErrNothingToReset, o.key)
		}
		return err
	}
	defer func() { _ = o.lease.Release(context.WithoutCancel(ctx)) }()
	if !hasMarker(o.lease.metadata()) {
		return fmt.Errorf("%w: %s", ErrNothingToReset, o.key)
	}
	if err := o.lease.updateMetadata(ctx, func(md map[string]*string) map[string]*string {
		return withMarker(md, OnceStatus{State: OncePending})
	}); err != nil {
		return err
	}
	o.log.Info("azlease: once: reset")
	return nil
}

// hasMarker reports whether md holds any of the marker's keys.
func hasMarker(md map[string]*string) bool {
	for _, k := range onceKeys {
		if _, ok := lookup(md, k); ok {
			return true
		}
	}
	return false
}
