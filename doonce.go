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
	// Epoch is the fencing epoch of the term that wrote the marker.
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

// ErrOnceCorrupt means a DoOnce marker's state or attempt count is not one
// azlease writes (foreign or damaged metadata). Guessing could run fn more
// often than MaxAttempts allows, so every DoOnce and InspectOnce on the key
// fails with a permanent [*Error] wrapping ErrOnceCorrupt until an operator
// clears the marker with [ResetOnce] (fn then runs again).
var ErrOnceCorrupt = errors.New("azlease: corrupt DoOnce marker")

// OnceFailedError means a DoOnce key has used up its attempts: every caller
// gets it until the marker is reset ([ResetOnce]).
type OnceFailedError struct {
	Key       string
	Attempts  int
	Holder    string // who made the last attempt
	LastError string
}

func (e *OnceFailedError) Error() string {
	return fmt.Sprintf("azlease: once %q failed after %d attempts (last by %s: %s)", e.Key, e.Attempts, e.Holder, e.LastError)
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
)

var onceKeys = []string{metaOnceState, metaOnceHolder, metaOnceAttempts, metaOnceEpoch, metaOnceTime, metaOnceError}

// maxErrorText bounds the error text kept in the marker, in bytes (metadata
// is 8 KiB in all).
const maxErrorText = 1024

// maxMarkerAttempts bounds the attempt count a valid marker records.
// MaxAttempts is at most 1000, so a larger count never came from azlease;
// the bound keeps Attempts+1 far from overflowing.
const maxMarkerAttempts = 1_000_000

// parseMarker reads a DoOnce marker from metadata. The control fields, which
// decide whether fn may run (state and attempts), must both be present and
// valid, or both absent (no marker: pending); anything else is corrupt, an
// error wrapping ErrOnceCorrupt. The informational fields (holder, epoch,
// time, error text) read as absent when malformed. A pending marker with no
// attempts and no error reads as no marker, as withMarker writes it, so that
// parseMarker(withMarker(md, st)) == st for every st parseMarker returns.
func parseMarker(md map[string]*string) (OnceStatus, error) {
	st := OnceStatus{State: OncePending}
	state, hasState := lookup(md, metaOnceState)
	attempts, hasAttempts := lookup(md, metaOnceAttempts)
	if hasState || hasAttempts {
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
	if st.State == OncePending && st.Attempts == 0 && st.LastError == "" {
		return OnceStatus{State: OncePending}, nil // a reset marker is no marker
	}
	return st, nil
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
	if st.State == OncePending && st.Attempts == 0 && st.LastError == "" {
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
	return out
}

// DoOnce runs fn so that, across every process calling DoOnce with the same
// key, fn completes successfully once: the first caller to take the key's
// lease runs it, and the others wait (polling, bounded by their ctx) until it
// is done, then learn by whom and when. Use a key per deployment, such as
// "migrate-" + version: a key that is done stays done (until [ResetOnce]).
//
// fn gets a context that ends if the lease is lost (or ctx ends), and the
// fencing [Token] of its term. The guarantee is at-least-once with exclusion:
// no two runs of fn overlap while the timing assumptions in the package
// documentation hold, but fn may run more than once if a runner dies (or
// loses its lease) after its side effects and before it marks the key done.
// Make fn's side effects idempotent, or guard them with the token's epoch.
//
// If a runner dies, its lease expires and a waiting caller takes over; the
// attempt counts. If fn returns an error, the caller that ran it gets the
// error, the marker records the failure, and another waiting caller retries,
// until MaxAttempts attempts have been made: then every caller gets a
// [*OnceFailedError]. The marker is written only under the lease, so a
// runner that lost its lease cannot mark the key done. The caller whose fn
// failed gets, along with fn's error, the marker as it recorded the failure
// (OnceResult.Status).
func DoOnce(ctx context.Context, cc *container.Client, key string, opts *DoOnceOptions, fn func(ctx context.Context, tok Token) error) (OnceResult, error) {
	o, err := newOnce(cc, key, opts)
	if err != nil {
		return OnceResult{}, err
	}
	if fn == nil {
		return OnceResult{}, optionErr("fn", "nil function")
	}
	res, err := o.do(ctx, fn)
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
	case errors.Is(err, ErrOnceFailed):
		return "exhausted"
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
				return OnceResult{}, err
			}
			if !errors.Is(err, ErrTransient) {
				return OnceResult{}, err
			}
			last = err
			o.log.Debug("azlease: once: poll failed", slog.Any("error", err))
		case st.State == OnceDone:
			return OnceResult{Status: st}, nil
		case (st.State == OnceFailed || st.State == OncePending) && st.Attempts >= o.cfg.maxAttempts:
			return OnceResult{}, o.failed(st)
		case !st.Locked:
			if res, done, err := o.run(ctx, fn); done {
				return res, err
			}
		}
		if !sleepCtx(ctx, timing.Jitter(o.cfg.poll, o.cfg.jitter, mrand.Float64())) {
			if last != nil {
				return OnceResult{}, fmt.Errorf("azlease: once %q: %w; last attempt: %w", o.key, context.Cause(ctx), last)
			}
			return OnceResult{}, fmt.Errorf("azlease: once %q: %w", o.key, context.Cause(ctx))
		}
	}
}

type once struct {
	key   string
	t     target
	cfg   onceConfig
	lease *Lease
	log   *slog.Logger
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
	l := newLease(t, cfg.lease)
	return &once{key: key, t: t, cfg: cfg, lease: l, log: l.cfg.log.With(slog.String("key", key))}, nil
}

func (o *once) status(ctx context.Context, limit time.Time) (OnceStatus, error) {
	st, err := o.lease.inspect(ctx, limit)
	if err != nil {
		return OnceStatus{}, err
	}
	m, err := parseMarker(st.raw)
	if err != nil {
		return OnceStatus{}, opError("read", o.t.container, o.t.blob, ErrPermanent, err)
	}
	m.Locked = st.Leased
	return m, nil
}

func (o *once) failed(st OnceStatus) error {
	return &OnceFailedError{Key: o.key, Attempts: st.Attempts, Holder: st.Holder, LastError: st.LastError}
}

// run tries to take the key's lease and, if it gets it, runs fn under it. done
// is false when the caller should go on waiting.
func (o *once) run(ctx context.Context, fn func(context.Context, Token) error) (res OnceResult, done bool, err error) {
	tok, err := o.lease.Acquire(ctx)
	switch {
	case errors.Is(err, ErrLeaseHeld), errors.Is(err, ErrTransient) && ctx.Err() == nil:
		return OnceResult{}, false, nil
	case err != nil:
		return OnceResult{}, true, err
	}
	bg := context.WithoutCancel(ctx) // to release even if ctx has ended
	defer func() { _ = o.lease.Release(bg) }()

	m, err := parseMarker(o.lease.metadata())
	switch {
	case err != nil:
		return OnceResult{}, true, opError("read", o.t.container, o.t.blob, ErrPermanent, err)
	case m.State == OnceDone:
		return OnceResult{Status: m}, true, nil
	case (m.State == OnceFailed || m.State == OncePending) && m.Attempts >= o.cfg.maxAttempts:
		return OnceResult{}, true, o.failed(m)
	case m.State == OnceRunning && m.Attempts >= o.cfg.maxAttempts:
		// The last allowed attempt's runner died or lost its lease.
		m.State, m.Epoch, m.Time = OnceFailed, tok.Epoch, markerTime()
		m.LastError = fmt.Sprintf("the runner %s did not finish attempt %d (it died or lost its lease)", m.Holder, m.Attempts)
		if err := o.lease.updateMetadata(ctx, func(md map[string]*string) map[string]*string { return withMarker(md, m) }); err != nil {
			return OnceResult{}, false, nil
		}
		return OnceResult{}, true, o.failed(m)
	}

	attempt := m.Attempts + 1
	running := OnceStatus{State: OnceRunning, Holder: o.cfg.lease.identity, Attempts: attempt, Epoch: tok.Epoch, Time: markerTime()}
	if err := o.lease.updateMetadata(ctx, func(md map[string]*string) map[string]*string { return withMarker(md, running) }); err != nil {
		if errors.Is(err, ErrPermanent) {
			return OnceResult{}, true, err
		}
		return OnceResult{}, false, nil // lost or out of time: look again
	}
	o.log.Info("azlease: once: running", slog.Int("attempt", attempt), slog.Uint64("epoch", tok.Epoch))

	k := hold(ctx, o.lease, tok, o.cfg.renewEvery, nil)
	defer k.stop(ErrStopped) // also if fn panics; stop is idempotent
	ferr := fn(k.term.Context(), tok)
	cause := k.term.Err() // nil while the term lasts
	k.stop(ErrStopped)

	lost := cause != nil && errors.Is(cause, ErrLeaseLost)
	switch {
	case lost && ferr == nil:
		return OnceResult{}, true, fmt.Errorf("azlease: once %q: fn completed but its lease was lost before completion could be recorded; another process may run it again: %w", o.key, cause)
	case lost:
		return OnceResult{}, true, ferr
	case ferr != nil && ctx.Err() != nil:
		// The caller gave up mid-run. That is not a failure of fn: put the
		// marker back as it was, so the attempt does not count, and say
		// what happened. (If that write fails, the marker says "running"
		// and the next runner counts the attempt as one whose runner died.
		// A run that completed despite the cancellation is recorded below.)
		back := m
		back.LastError = fmt.Sprintf("attempt %d by %s was abandoned by its caller", attempt, o.cfg.lease.identity)
		if err := o.lease.updateMetadata(bg, func(md map[string]*string) map[string]*string { return withMarker(md, back) }); err != nil {
			o.log.Warn("azlease: once: could not undo an abandoned attempt", slog.Any("error", err))
		}
		return OnceResult{}, true, fmt.Errorf("azlease: once %q: attempt %d abandoned by its caller: %w", o.key, attempt, errors.Join(context.Cause(ctx), ferr))
	case ferr != nil:
		failed := running
		failed.State, failed.Time, failed.LastError = OnceFailed, markerTime(), clipError(ferr.Error())
		if err := o.lease.updateMetadata(bg, func(md map[string]*string) map[string]*string { return withMarker(md, failed) }); err != nil {
			o.log.Warn("azlease: once: could not record the failure", slog.Any("error", err))
		}
		o.log.Info("azlease: once: attempt failed", slog.Int("attempt", attempt), slog.Any("error", ferr))
		return OnceResult{Status: failed}, true, ferr
	}
	doneSt := running
	doneSt.State, doneSt.Time = OnceDone, markerTime()
	if err := o.lease.updateMetadata(bg, func(md map[string]*string) map[string]*string { return withMarker(md, doneSt) }); err != nil {
		return OnceResult{}, true, fmt.Errorf("azlease: once %q: fn completed but completion could not be recorded; another process may run it again: %w", o.key, err)
	}
	o.log.Info("azlease: once: done", slog.Int("attempt", attempt), slog.Uint64("epoch", tok.Epoch))
	return OnceResult{Ran: true, Status: doneSt}, true, nil
}

// InspectOnce reads the marker of a DoOnce key. It needs only read access.
func InspectOnce(ctx context.Context, cc *container.Client, key string, opts *DoOnceOptions) (OnceStatus, error) {
	o, err := newOnce(cc, key, opts)
	if err != nil {
		return OnceStatus{}, err
	}
	return o.status(ctx, time.Now().Add(2*o.cfg.lease.attemptTimeout))
}

// ResetOnce clears the marker of a DoOnce key, so that the next DoOnce call
// runs fn again: an operator re-running a migration, or clearing a corrupt
// marker ([ErrOnceCorrupt]). It takes the key's lease to do so, and returns
// an error wrapping [ErrLeaseHeld] while a runner holds it.
func ResetOnce(ctx context.Context, cc *container.Client, key string, opts *DoOnceOptions) error {
	o, err := newOnce(cc, key, opts)
	if err != nil {
		return err
	}
	if _, err := o.lease.Acquire(ctx); err != nil {
		return err
	}
	defer func() { _ = o.lease.Release(context.WithoutCancel(ctx)) }()
	if err := o.lease.updateMetadata(ctx, func(md map[string]*string) map[string]*string {
		return withMarker(md, OnceStatus{State: OncePending})
	}); err != nil {
		return err
	}
	o.log.Info("azlease: once: reset")
	return nil
}
