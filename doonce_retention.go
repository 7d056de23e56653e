package azlease

// The retention of DoOnce records (DoOnceOptions.Retention): a key made per
// period or per tick leaves a blob each, so a runner deletes its key's
// expired siblings as it goes (sweep: one List Blobs page and a few
// conditional deletes per call), and a call that has not taken its key
// within Retention/2 of its start gives up (ErrOnceTooLate), so that no
// caller runs a key again after its record was deleted. The derivation of
// the bounds is in docs/design/once-per-tick.md.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
)

const (
	// minRetention and maxRetention bound DoOnceOptions.Retention. The
	// lower bound keeps a record past the longest lease (60 s), so that an
	// expired runner's record is never in doubt when it is deleted.
	minRetention = time.Minute
	maxRetention = 87600 * time.Hour
	// retentionPage is how many blobs one sweep lists: one List Blobs
	// request, the oldest first when the keys are named oldest first.
	retentionPage = 100
	// retentionDeletes is the most records one sweep deletes: more than
	// one, so that a backlog (a Retention shortened, sweeps that failed)
	// drains while new keys keep coming.
	retentionDeletes = 4
	// retentionSlack is added to Retention before a record counts as
	// expired: Last-Modified and Date are whole seconds.
	retentionSlack = 2 * time.Second
)

// ErrOnceTooLate is wrapped by the error of a DoOnce call with a Retention
// that did not take its key within Retention/2 of its start (it waited, or
// was paused, that long). Records older than Retention are deleted, and a
// deleted key runs again, so such a call returns without running fn, and
// without waiting further; the key's record, if any, is untouched.
var ErrOnceTooLate = errors.New("azlease: once: the key was not taken within Retention/2 of the call's start (its record may have been deleted), so fn did not run")

// onceBeforeAcquire, when set (by the package's tests only), runs before a
// DoOnce call tries to take its key's lease: a test makes the caller pause
// there.
var onceBeforeAcquire func(key string)

// retentionScope returns the listing prefix of key's siblings: the marker
// blob's name up to and including the key's last "/". ok is false for a key
// without one.
func retentionScope(prefix, key string) (scope string, ok bool) {
	i := strings.LastIndexByte(key, '/')
	if i < 0 {
		return "", false
	}
	return prefix + key[:i+1], true
}

// late returns an error wrapping ErrOnceTooLate once Retention/2 has passed
// since the call began (by this process's monotonic clock), or nil.
func (o *once) late() error {
	if o.cfg.retention == 0 {
		return nil
	}
	if d := time.Since(o.start); d > o.cfg.retention/2 {
		return fmt.Errorf("%w: once %q: %v since the call began, Retention %v", ErrOnceTooLate, o.key, d.Round(time.Millisecond), o.cfg.retention)
	}
	return nil
}

// expired reports whether a blob listed under scope may be deleted: a
// sibling of this call's key (not the key, not a key further down, such as
// "job/a/b" for "job/x"), a DoOnce record (a valid marker, or none on a blob
// a DoOnce runner leased), not leased, and last written more than Retention
// (and the slack) before date, storage's clock when it listed it.
func (o *once) expired(st Status, scope string, date time.Time) bool {
	switch {
	case st.Name == o.t.blob, strings.Contains(strings.TrimPrefix(st.Name, scope), "/"):
		return false
	case st.Err != nil, st.etag == "", st.modified.IsZero():
		return false
	case st.State != "available" && st.State != "expired" && st.State != "broken":
		return false // leased, breaking, or not said
	case date.Sub(st.modified) <= o.cfg.retention+retentionSlack:
		return false
	}
	if hasMarker(st.raw) {
		_, err := parseMarker(st.raw)
		return err == nil // a corrupt marker is the operator's to see
	}
	return st.Role == "once"
}

// sweep deletes up to retentionDeletes expired siblings of the key, among
// the first retentionPage listed, each conditional on its ETag as listed (a
// record written since, or leased, is kept), within 2 × AttemptTimeout in
// all. It is best effort: a failure is logged, never returned to DoOnce's
// caller. It returns how many it deleted.
func (o *once) sweep(ctx context.Context) int {
	scope, ok := retentionScope(o.cfg.prefix, o.key)
	if !ok || o.cfg.retention == 0 || ctx.Err() != nil {
		return 0
	}
	l := o.lease
	limit := time.Now().Add(2 * o.cfg.lease.attemptTimeout)
	sctx, cancel := context.WithDeadline(ctx, limit)
	defer cancel()
	var (
		page []Status
		date time.Time
	)
	opts := &container.ListBlobsFlatOptions{
		Include:    container.ListBlobsInclude{Metadata: true},
		MaxResults: to.Ptr(int32(retentionPage)),
		Prefix:     &scope,
	}
	err := l.loopOn(sctx, "list", scope, limit, func(actx context.Context, _ time.Time) (bool, error) {
		resp, err := l.t.cc.NewListBlobsFlatPager(opts).NextPage(actx)
		switch c := classify(sctx, err); c {
		case classOK:
		case classNotFound:
			return true, nil
		case classTransient, classConflict:
			return false, opError("list", l.t.container, scope, ErrTransient, err)
		case classCanceled:
			return true, err
		default:
			return true, opError("list", l.t.container, scope, ErrPermanent, err)
		}
		if resp.Date != nil {
			date = *resp.Date
		}
		var items []*container.BlobItem
		if resp.Segment != nil {
			items = resp.Segment.BlobItems
		}
		page, err = statusesOf(l.t.container, scope, items)
		if err != nil {
			return true, opError("list", l.t.container, scope, ErrPermanent, err)
		}
		return true, nil
	})
	if err != nil {
		o.sweepFailed(err)
		return 0
	}
	if date.IsZero() {
		return 0 // no clock of storage's to tell an age by
	}
	deleted := 0
	for _, st := range page {
		if deleted == retentionDeletes || sctx.Err() != nil {
			break
		}
		if !o.expired(st, scope, date) {
			continue
		}
		bc := l.t.cc.NewBlobClient(st.Name)
		dopts := &blob.DeleteOptions{AccessConditions: &blob.AccessConditions{
			ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: to.Ptr(st.etag)}}}
		var refused error
		_ = l.loopOn(sctx, "write", st.Name, limit, func(actx context.Context, _ time.Time) (bool, error) {
			_, err := bc.Delete(actx, dopts)
			switch c := classify(sctx, err); c {
			case classOK:
				deleted++
			case classPermanent:
				refused = opError("write", l.t.container, st.Name, ErrPermanent, err)
			}
			// One attempt: written, leased or deleted since the listing
			// (412, 404), or no answer, it is left for a later sweep.
			return true, nil
		})
		if refused != nil {
			o.sweepFailed(refused)
			break
		}
	}
	if deleted > 0 {
		o.log.Debug("azlease: once: deleted expired records", slog.Int("deleted", deleted), slog.Int("listed", len(page)))
	}
	return deleted
}

// sweepFailed logs a sweep that could not list or delete: a refusal (a role
// or SAS without list or delete permission) at Warn, since records then
// pile up unseen; anything else at Debug, for the next sweep to retry.
func (o *once) sweepFailed(err error) {
	if errors.Is(err, ErrPermanent) {
		o.log.Warn("azlease: once: cannot delete expired records (Retention); they accumulate", slog.Any("error", err))
		return
	}
	o.log.Debug("azlease: once: sweeping expired records failed; the next runner retries", slog.Any("error", err))
}
