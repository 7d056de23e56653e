package azlease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"

	"github.com/azlease/azlease/internal/timing"
)

// How azlease sends requests: every attempt under a deadline it chose, with
// the SDK's own retries turned off, and retries paced here, within the time
// the lease leaves.

// Retry pacing between attempts of one operation.
const (
	retryBase = 100 * time.Millisecond
	retryMax  = 2 * time.Second
)

// loop runs try until it reports done, ctx ends, or limit passes. Each
// attempt gets a deadline of AttemptTimeout, never after limit, and runs with
// the SDK's retries turned off: retries happen here, where their timing is
// known. Between attempts it waits a jittered, growing backoff. It returns
// the last attempt's error when time runs out.
func (l *Lease) loop(ctx context.Context, op string, limit time.Time, try func(actx context.Context, send time.Time) (bool, error)) error {
	return l.loopOn(ctx, op, l.t.blob, limit, try)
}

// loopOn is loop for an operation on something other than the lease's lock
// blob: a listing names its prefix as what, and its own errors name what
// where an operation on the lock blob names the blob.
func (l *Lease) loopOn(ctx context.Context, op, what string, limit time.Time, try func(actx context.Context, send time.Time) (bool, error)) error {
	var last error
	for n := 1; ; n++ {
		now := time.Now()
		deadline, ok := timing.AttemptDeadline(now, limit, l.cfg.attemptTimeout)
		if !ok {
			if last == nil {
				last = opError(op, l.t.container, what, ErrTransient, errors.New("no time left for an attempt"))
			}
			return last
		}
		actx, cancel := context.WithDeadline(noRetry(ctx), deadline)
		done, err := try(actx, now)
		cancel()
		l.tm.request(ctx, op, time.Since(now), err)
		l.health.record(ctx, l.cfg.log, op, err)
		switch {
		case done && err == nil:
			return nil // a success stands even if ctx ended meanwhile
		case ctx.Err() != nil:
			return l.canceled(ctx, op, what, last)
		case done:
			return err
		}
		last = err
		wait := timing.Sleep(time.Now(), time.Now().Add(timing.Backoff(n, retryBase, retryMax, mrand.Float64())), limit)
		l.cfg.log.Debug("azlease: retrying", slog.String("op", op), slog.Int("attempt", n), slog.Duration("wait", wait), slog.Any("error", err))
		if !sleepCtx(ctx, wait) {
			return l.canceled(ctx, op, what, last)
		}
	}
}

// canceled is the error of an operation whose caller's context ended. It
// wraps the context's cause and, when there was one, the last attempt's
// *Error, whose text is safe to log. The raw error of the attempt cut short
// is dropped: it may quote a URL with a SAS token.
func (l *Lease) canceled(ctx context.Context, op, what string, last error) error {
	if last == nil {
		return fmt.Errorf("azlease: %s %s/%s: %w", op, l.t.container, what, context.Cause(ctx))
	}
	return fmt.Errorf("azlease: %s %s/%s: %w; last attempt: %w", op, l.t.container, what, context.Cause(ctx), last)
}

// errorf builds the *Error of a failed operation on this lease.
func (l *Lease) errorf(op string, kind, err error) error {
	return opError(op, l.t.container, l.t.blob, kind, err)
}

// noRetry turns the SDK's retries off for one call: azlease retries itself,
// within deadlines it knows.
func noRetry(ctx context.Context) context.Context {
	return policy.WithRetryOptions(ctx, policy.RetryOptions{MaxRetries: -1})
}

// sleepCtx waits d or until ctx ends; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// setMetadataIf writes md onto the blob name, which no lease guards (a fair
// lock's queue entry, an election's yield request), conditional on etag
// when it is not empty, within one AttemptTimeout: transient failures are
// retried; any other ends it at once, with the error storage gave (a blob
// written since answers ConditionNotMet, which callers test for).
func (l *Lease) setMetadataIf(ctx context.Context, name string, md map[string]*string, etag azcore.ETag) error {
	bc := l.t.cc.NewBlobClient(name)
	var cond *blob.AccessConditions
	if etag != "" {
		cond = &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: to.Ptr(etag)}}
	}
	return l.loopOn(ctx, "write", name, time.Now().Add(l.cfg.attemptTimeout), func(actx context.Context, _ time.Time) (bool, error) {
		_, err := bc.SetMetadata(actx, md, &blob.SetMetadataOptions{AccessConditions: cond})
		if c := classify(ctx, err); c != classOK {
			return l.attemptEnd("write", c, err)
		}
		return true, nil
	})
}

// attemptEnd ends an attempt of a loop (loop, loopOn) on an answer of class
// c that its caller does not treat specially: retried when transient;
// stopped with err when the caller's ctx ended; stopped with the error of
// c's kind ([kindOf]) otherwise.
func (l *Lease) attemptEnd(op string, c class, err error) (bool, error) {
	switch c {
	case classTransient:
		return false, l.errorf(op, ErrTransient, err)
	case classCanceled:
		return true, err
	default:
		return true, l.errorf(op, kindOf(c), err)
	}
}
