package azlease

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"

	"github.com/azlease/azlease/internal/azname"
	"github.com/azlease/azlease/internal/timing"
)

// The lock blob's state, written and read under the lease: the epoch record
// written at each acquisition, the clean-release marker, and the holder's own
// content and metadata (Lease.Write, SetMetadata, Term.Read). Azure checks
// every write against the lease ID, so a former holder cannot overwrite a
// newer one's state.

// bumpEpoch reads the lock blob's record and writes the next one under the
// lease, conditional on the ETag it read. Only the lease holder can write, so
// epochs grow strictly from one term to the next. A retried write after an
// ambiguous failure may skip an epoch; it never repeats one.
//
// seen, when not nil, is the blob as a read made just before the acquire
// found it (a waiter's look): its first write then starts from seen's
// record and is conditional on seen's ETag, which lease operations do not
// change, so it needs no read of its own. If anyone wrote the blob since,
// Azure refuses it (412 ConditionNotMet) and it reads and writes at once, as
// without seen.
//
// prev is the record as first read: after an ambiguous write, a retry reads
// this holder's own record, which says nothing about the previous term.
//
// A fresh seen (createWithRecord) holds this term's record already: when
// the acquisition's answer carried the ETag of that creation, nobody wrote
// the blob between the two (a write changes the ETag, a lease operation
// does not), so the record stands and nothing is written. Otherwise it
// reads and writes as without seen.
func (l *Lease) bumpEpoch(ctx context.Context, id string, limit time.Time, seen *Status, handed bool) (prev, next record, md map[string]*string, etag azcore.ETag, err error) {
	if seen != nil && seen.fresh {
		if !handed && seen.etag != "" && l.grantTag == seen.etag {
			if r, perr := parseRecord(seen.raw); perr == nil && r.epoch > l.seen.Load() && r.holder == l.cfg.identity {
				l.see(r.epoch)
				return record{}, r, seen.raw, seen.etag, nil
			}
		}
		seen = nil
	}
	read, warned := false, false
	known := seen != nil && seen.Exists && seen.Err == nil && seen.etag != "" && !alwaysReread.Load()
	err = l.loop(ctx, "write", limit, func(actx context.Context, _ time.Time) (bool, error) {
		for {
			var (
				meta    map[string]*string
				tag     azcore.ETag
				created time.Time
			)
			fromSeen := known
			known = false // a look is used for one write at most
			if fromSeen {
				meta, tag, created = seen.raw, seen.etag, seen.created
			} else {
				props, err := l.bc.GetProperties(actx, &blob.GetPropertiesOptions{AccessConditions: leaseAccess(id, nil)})
				if err != nil {
					return l.writeOutcome(ctx, id, "read", err)
				}
				meta = props.Metadata
				if props.ETag != nil {
					tag = *props.ETag
				}
				if props.CreationTime != nil {
					created = *props.CreationTime
				}
			}
			cur, err := parseRecord(meta)
			if err != nil {
				return true, l.errorf("write", ErrPermanent, err)
			}
			if !read {
				prev, read = cur, true
			}
			seenEpoch := l.seen.Load()
			if cur.epoch < seenEpoch && !warned {
				warned = true
				l.cfg.log.Warn("azlease: the lock blob's epoch is lower than one this process saw on it before (was it deleted and created again?); continuing above the highest",
					slog.Uint64("blob_epoch", cur.epoch), slog.Uint64("highest_seen", seenEpoch))
			}
			next = cur.next(nextEpoch(cur.epoch, created, seenEpoch), l.cfg.identity, time.Now(), l.cfg.history)
			next.role = l.cfg.role
			began, end := judgeChange(prev, handed, seen, l.seenHeld(prev.epoch), next.acquired)
			next.noteChange(began, l.cfg.duration, prev.epoch, end)
			if l.cfg.role == "elector" && cur.epoch == prev.epoch {
				// An Elector's term that ended without a clean release counts
				// against its holder (a retry that reads this write's own
				// record finds it counted already).
				next.fails = noteFailure(next.fails, prev, time.Now())
			}
			md = next.format(meta)
			var ifMatch *azcore.ETag
			if tag != "" {
				ifMatch = &tag
			}
			resp, err := l.bc.SetMetadata(actx, md, &blob.SetMetadataOptions{AccessConditions: leaseAccess(id, ifMatch)})
			if err != nil {
				if fromSeen && bloberror.HasCode(err, bloberror.ConditionNotMet) && ctx.Err() == nil && actx.Err() == nil {
					// Written since the look: nothing was applied (a 412
					// is definitive). Read, and write from what it says.
					read = false
					continue
				}
				return l.writeOutcome(ctx, id, "write", err)
			}
			etag = *resp.ETag
			l.see(next.epoch)
			return true, nil
		}
	})
	return prev, next, md, etag, err
}

// alwaysReread makes bumpEpoch ignore what a look saw, so that every
// acquisition reads the record again under its lease, as it did before
// waiters looked first. Only the benchmark that measures that change side
// by side sets it (export_test.go); the library never does.
var alwaysReread atomic.Bool

// writeOutcome classifies the failure of a read or write made under the
// lease ID id.
func (l *Lease) writeOutcome(ctx context.Context, id, op string, err error) (bool, error) {
	switch c := classify(ctx, err); c {
	case classTransient, classConflict:
		return false, l.errorf(op, ErrTransient, err)
	case classLost, classBroken, classNotFound:
		lost := l.errorf(op, ErrLeaseLost, err)
		l.markLost(id, lost)
		return true, lost
	case classCanceled:
		return true, err
	default:
		return true, l.errorf(op, ErrPermanent, err)
	}
}

// markReleased writes the clean-release marker under the lease in one
// attempt; a successor that finds it knows the previous holder stopped its
// work before releasing. Failure only costs the successor its takeover delay.
func (l *Lease) markReleased(ctx context.Context, id string, validUntil time.Time, md map[string]*string, etag azcore.ETag) {
	deadline, ok := timing.AttemptDeadline(time.Now(), validUntil, l.cfg.attemptTimeout)
	if !ok {
		return
	}
	actx, cancel := context.WithDeadline(noRetry(ctx), deadline)
	defer cancel()
	r, err := parseRecord(md)
	if err != nil {
		return
	}
	r.released = true
	end := r.cur
	end.endedBy, end.ended = ChangeReleased, time.Now().UTC()
	r.setCur(end)
	if _, err := l.bc.SetMetadata(actx, r.format(md), &blob.SetMetadataOptions{AccessConditions: leaseAccess(id, &etag)}); err != nil {
		l.cfg.log.Debug("azlease: could not mark the release as clean",
			slog.Any("error", l.errorf("write", kindOf(classify(ctx, err)), err)))
	}
}

// SetMetadata replaces the lock blob's user metadata with md, under the
// lease: Azure rejects the write (and SetMetadata returns an error wrapping
// [ErrLeaseLost]) if this holder's lease is gone, so a stale holder cannot
// overwrite a newer one's state. azlease's own keys are kept. Names must be
// C# identifiers and must not start with "azlease"; Azure stores names
// case-insensitively and returns them in changed case.
func (l *Lease) SetMetadata(ctx context.Context, md map[string]string) error {
	if err := l.initErr(); err != nil {
		return err
	}
	return l.setMetadataAs(ctx, l.currentID(), md)
}

func (l *Lease) setMetadataAs(ctx context.Context, id string, md map[string]string) error {
	for k := range md {
		if !azname.MetadataName(k) || strings.HasPrefix(strings.ToLower(k), metaPrefix) {
			return optionErr("metadata", "name %q: must be a C# identifier not starting with %q", k, metaPrefix)
		}
	}
	return l.updateMetadataAs(ctx, id, func(cur map[string]*string) map[string]*string {
		next := make(map[string]*string, len(md)+5)
		for k, v := range cur {
			if strings.HasPrefix(strings.ToLower(k), metaPrefix) {
				next[k] = v
			}
		}
		for k, v := range md {
			next[k] = to.Ptr(v)
		}
		return next
	})
}

// updateMetadata replaces the lock blob's metadata with change(current),
// under the lease and conditional on the ETag of this holder's last write.
func (l *Lease) updateMetadata(ctx context.Context, change func(map[string]*string) map[string]*string) error {
	return l.updateMetadataAs(ctx, l.currentID(), change)
}

func (l *Lease) updateMetadataAs(ctx context.Context, id string, change func(map[string]*string) map[string]*string) error {
	return l.fencedWrite(ctx, id, func(actx context.Context, id string, cur map[string]*string, etag azcore.ETag) (azcore.ETag, map[string]*string, error) {
		next := change(cur)
		resp, err := l.bc.SetMetadata(actx, next, &blob.SetMetadataOptions{AccessConditions: leaseAccess(id, &etag)})
		if err != nil {
			return "", nil, err
		}
		return *resp.ETag, next, nil
	})
}

// metadata returns the lock blob's metadata as this holder last wrote it.
func (l *Lease) metadata() map[string]*string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.md
}

// Write replaces the lock blob's content with content, under the lease, and
// keeps its metadata. Like [Lease.SetMetadata], it fails with
// [ErrLeaseLost] when this holder's lease is gone.
func (l *Lease) Write(ctx context.Context, content []byte) error {
	if err := l.initErr(); err != nil {
		return err
	}
	return l.writeAs(ctx, l.currentID(), content)
}

func (l *Lease) writeAs(ctx context.Context, id string, content []byte) error {
	return l.fencedWrite(ctx, id, func(actx context.Context, id string, cur map[string]*string, etag azcore.ETag) (azcore.ETag, map[string]*string, error) {
		resp, err := l.bbc.Upload(actx, streaming.NopCloser(bytes.NewReader(content)), &blockblob.UploadOptions{
			Metadata:         cur,
			AccessConditions: leaseAccess(id, &etag),
		})
		if err != nil {
			return "", nil, err
		}
		return *resp.ETag, cur, nil
	})
}

// readAs downloads the lock blob's content under the lease ID id, which must
// be the current term's, retrying transient failures until the validity
// deadline.
func (l *Lease) readAs(ctx context.Context, id string) ([]byte, error) {
	validUntil, ok := l.termValid(id)
	if !ok {
		return nil, ErrNotHeld
	}
	var content []byte
	err := l.loop(ctx, "read", validUntil, func(actx context.Context, _ time.Time) (bool, error) {
		resp, err := l.bc.DownloadStream(actx, &blob.DownloadStreamOptions{AccessConditions: leaseAccess(id, nil)})
		if err != nil {
			return l.writeOutcome(ctx, id, "read", err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxContent+1))
		if err != nil {
			return false, l.errorf("read", ErrTransient, err)
		}
		if len(b) > maxContent {
			return true, l.errorf("read", ErrPermanent, fmt.Errorf("the lock blob holds more than %d bytes", maxContent))
		}
		content = b
		return true, nil
	})
	return content, err
}

// maxContent bounds what Read loads: lock blobs hold small state.
const maxContent = 4 << 20

type writeFunc func(actx context.Context, id string, md map[string]*string, etag azcore.ETag) (azcore.ETag, map[string]*string, error)

// fencedWrite runs a write under the lease until the validity deadline. The
// cached metadata and ETag are this holder's own last write; when they are
// stale (another write by this process, a lost response), it reads them
// again and retries.
func (l *Lease) fencedWrite(ctx context.Context, id string, write writeFunc) error {
	validUntil, ok := l.termValid(id)
	if !ok {
		return ErrNotHeld
	}
	l.mu.Lock()
	md, etag := l.md, l.etag
	l.mu.Unlock()
	return l.loop(ctx, "write", validUntil, func(actx context.Context, _ time.Time) (bool, error) {
		if md == nil {
			props, err := l.bc.GetProperties(actx, &blob.GetPropertiesOptions{AccessConditions: leaseAccess(id, nil)})
			if err != nil {
				return l.writeOutcome(ctx, id, "read", err)
			}
			md, etag = props.Metadata, *props.ETag
		}
		newETag, newMD, err := write(actx, id, md, etag)
		if err != nil {
			md = nil // re-read before the next attempt
			return l.writeOutcome(ctx, id, "write", err)
		}
		l.mu.Lock()
		if l.id == id && l.state == held {
			l.md, l.etag = newMD, newETag
		}
		l.mu.Unlock()
		return true, nil
	})
}

func leaseAccess(id string, ifMatch *azcore.ETag) *blob.AccessConditions {
	ac := &blob.AccessConditions{LeaseAccessConditions: &blob.LeaseAccessConditions{LeaseID: to.Ptr(id)}}
	if ifMatch != nil {
		ac.ModifiedAccessConditions = &blob.ModifiedAccessConditions{IfMatch: ifMatch}
	}
	return ac
}

// createWithRecord creates the lock blob, which a listing did not show,
// with the record of the term an acquisition is about to begin (Put Blob,
// If-None-Match: *, one attempt), so that the acquisition needs no epoch
// write (see bumpEpoch). The epoch is what an epoch write would choose on
// a blob created now (nextEpoch), from this process's clock a second
// ahead; if storage's clock says the blob was created later than that,
// the record is not relied on. It returns the blob's status for the
// acquisition, or nil when the request failed (the acquisition then goes
// on as without a look).
//
// When storage answers that the blob exists, someone created it since the
// listing: another taker, about to acquire it with the record it wrote.
// It returns an error wrapping ErrLeaseHeld then, and the caller does not
// acquire: were it to win that race, its term would follow one that never
// began (the creator's record), and say so. A listing that was simply
// stale (the blob existed before it) costs a poll.
//
// A Put whose answer was lost, applied later, finds the blob existing and
// changes nothing.
func (l *Lease) createWithRecord(ctx context.Context) (*Status, error) {
	deadline, ok := timing.AttemptDeadline(time.Now(), time.Now().Add(l.cfg.duration), l.cfg.attemptTimeout)
	if !ok || ctx.Err() != nil {
		return nil, nil
	}
	now := time.Now()
	var none record
	r := none.next(nextEpoch(0, now.Add(time.Second), l.seen.Load()), l.cfg.identity, now, l.cfg.history)
	r.role = l.cfg.role
	began, end := judgeChange(none, false, nil, time.Time{}, r.acquired)
	r.noteChange(began, l.cfg.duration, 0, end)
	md := r.format(nil)
	actx, cancel := context.WithDeadline(noRetry(ctx), deadline)
	defer cancel()
	resp, err := l.bbc.Upload(actx, streaming.NopCloser(bytes.NewReader(nil)), &blockblob.UploadOptions{
		Metadata: md,
		AccessConditions: &blob.AccessConditions{
			ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: to.Ptr(azcore.ETagAny)},
		},
	})
	switch c := classify(ctx, err); {
	case c == classExists || c == classConflict || c == classLost:
		// 409 BlobAlreadyExists (Azure, Azurite), 412 ConditionNotMet,
		// or 412 LeaseIdMissing (Azure, when it is leased already).
		return nil, l.errorf("acquire", ErrLeaseHeld, fmt.Errorf("the blob was created since the listing (another taker is acquiring it): %w", err))
	case err != nil || resp.ETag == nil:
		return nil, nil
	}
	st := &Status{Name: l.t.blob, Exists: true, State: "available", raw: md, etag: *resp.ETag, readAt: time.Now()}
	l.mu.Lock()
	l.created = st.readAt
	l.mu.Unlock()
	if resp.LastModified != nil {
		st.created = *resp.LastModified
	}
	// When storage's clock is ahead, an epoch write chooses, starting
	// from this status (one request, conditional on the ETag).
	st.fresh = nextEpoch(0, st.created, 0) <= r.epoch
	return st, nil
}
