package azlease

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"

	"github.com/azlease/azlease/internal/azname"
	"github.com/azlease/azlease/internal/timing"
)

// holdState is what a Lease knows about its lease.
type holdState int

const (
	notHeld holdState = iota
	held
	// stale: l.id may still hold the lease without a term (a term ran out
	// without a definitive loss, or a release or hand-off failed): release
	// it at the next chance, never use it for a term again.
	stale
)

// Lease is a lease on one lock blob: the low-level building block of
// [Elector], [Mutex] and [DoOnce], for callers that renew and release
// themselves (or let [Lease.Hold] renew).
//
// Each acquisition starts a term with a fresh lease ID and a larger fencing
// epoch, and a request applied late, after its sender gave up, can never act
// on a newer term: a term's lease ID is proposed by one answered request
// only (docs/design/terms-and-fencing.md has the argument). Each operation
// is one request or a few; a bare Lease records no clean release and
// reports no terms in its metrics.
//
// A Lease is safe for concurrent use; its lease operations run one at a time.
// A zero or nil Lease is not usable: its methods return [ErrNotInitialized]
// (or a zero result: not held, no token, duration 0).
type Lease struct {
	t   target
	cfg leaseConfig
	bc  *blob.Client
	bbc *blockblob.Client

	opMu sync.Mutex // serialises operations that use or change the lease ID
	// grantTag is the ETag the answer that granted the latest acquisition
	// carried ("" when none did); under opMu.
	grantTag azcore.ETag

	mu    sync.Mutex
	id    string // the lease ID of the term, or of a stale holding
	state holdState
	// nextID is the lease ID the next Acquire proposes, when chosen ahead
	// (NextLeaseID) or kept from a call whose every request was answered.
	nextID         string
	lastSend       time.Time // send instant of the last successful acquire or renew
	validUntil     time.Time
	token          Token
	md             map[string]*string // the metadata as this holder last wrote it
	etag           azcore.ETag        // the ETag after this holder's last write
	prevUnreleased bool               // a previous term exists and did not end with a clean release
	// created is when this Lease's own create of the blob (HoldAfter) was
	// answered: a release soon after marks itself (see release).
	created time.Time
	// heldEpoch and heldAt are this Lease's last look that saw the lease
	// held, and the epoch of the record it read (termchange.go).
	heldEpoch uint64
	heldAt    time.Time
	// onLost, set by the keeper of the term whose lease ID is onLostID,
	// ends that term at once when any operation learns from Azure that
	// the lease of that ID is gone. It is bound to the ID so that an
	// older term's keeper, stopping late, never removes a newer term's.
	onLost   func(cause error)
	onLostID string
	// seen is the highest epoch this holder (or the Mutex it belongs to)
	// has seen on the lock blob; the next epoch is always above it.
	seen *atomic.Uint64
	// health follows whether requests reach storage (shared by the Locks
	// of a Mutex); tm records metrics.
	health *storageHealth
	tm     *telemetry
}

// NewLease returns a Lease on the blob blobName in the container cc points at.
// It makes no request: the container and the zero-byte lock blob are created
// on first use (unless LeaseOptions.NoCreate is set).
func NewLease(cc *container.Client, blobName string, opts *LeaseOptions) (*Lease, error) {
	t, err := newTarget(cc, blobName, "blobName")
	if err != nil {
		return nil, err
	}
	cfg, err := opts.config("LeaseOptions.")
	if err != nil {
		return nil, err
	}
	return newLease(t, cfg), nil
}

func newLease(t target, cfg leaseConfig) *Lease {
	cfg.log = cfg.log.With(slog.String("container", t.container), slog.String("blob", t.blob))
	return &Lease{
		t: t, cfg: cfg, bc: t.cc.NewBlobClient(t.blob), bbc: t.cc.NewBlockBlobClient(t.blob),
		seen: new(atomic.Uint64), health: new(storageHealth),
		tm: newTelemetry(cfg.meters, t.container, t.blob, cfg.role, cfg.noLockName),
	}
}

// initErr is ErrNotInitialized, naming the constructor, for a zero or nil
// Lease. Every exported method checks it (or returns a zero result)
// before touching anything NewLease sets up.
func (l *Lease) initErr() error {
	if l == nil || l.bc == nil {
		return fmt.Errorf("%w: a zero or nil azlease.Lease cannot be used; use NewLease", ErrNotInitialized)
	}
	return nil
}

// see records that epoch was seen on the lock blob.
func (l *Lease) see(epoch uint64) {
	for {
		cur := l.seen.Load()
		if epoch <= cur || l.seen.CompareAndSwap(cur, epoch) {
			return
		}
	}
}

// Duration returns the lease duration Azure enforces (0 for a Lease not
// created with NewLease).
func (l *Lease) Duration() time.Duration {
	if l == nil {
		return 0
	}
	return l.cfg.duration
}

// ValidUntil returns the instant until which the lease is certainly held (on
// the local monotonic clock), or the zero time when it is not held.
func (l *Lease) ValidUntil() time.Time {
	if l == nil {
		return time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.termStarted() {
		return time.Time{}
	}
	return l.validUntil
}

// Held reports whether the lease is certainly held now.
func (l *Lease) Held() bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.termStarted() && time.Now().Before(l.validUntil)
}

// Token returns the current term's fencing token; ok is false when the lease
// is not certainly held.
func (l *Lease) Token() (tok Token, ok bool) {
	if l == nil {
		return Token{}, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.termStarted() || !time.Now().Before(l.validUntil) {
		return Token{}, false
	}
	return l.token, true
}

// termStarted reports, under l.mu, whether the lease is held and its term
// has started: between a granted acquire and the epoch write the lease is
// held but no term (and no token) exists yet.
func (l *Lease) termStarted() bool {
	return l.state == held && l.token.LeaseID != "" && l.token.LeaseID == l.id
}

// Acquire takes the lease and starts a term: it acquires the lease with a
// fresh lease ID, then writes the next epoch (with this holder's identity and
// history) into the lock blob under the new lease.
//
// When another holder has the lease, Acquire returns an error that wraps
// [ErrLeaseHeld] after one request: that is a normal outcome. Transient
// failures are retried, with the same lease ID, until ctx ends or one lease
// duration has passed. If an attempt may have been granted although Acquire
// fails (its answer was lost), Acquire spends one more attempt giving that
// lease back, so it does not block everyone until it expires: at most
// AttemptTimeout and never past ctx's deadline; if ctx has ended, none (the
// lease frees itself within its duration).
// A Lease that still holds a valid lease returns [ErrAlreadyHeld].
func (l *Lease) Acquire(ctx context.Context) (Token, error) {
	if err := l.initErr(); err != nil {
		return Token{}, err
	}
	return l.acquireWithin(ctx, l.cfg.duration, nil)
}

// acquireWithin is Acquire retrying transient failures for at most budget.
// seen, when not nil, is the lock blob as a look just before found it free:
// the epoch write then starts from it instead of reading (see bumpEpoch).
func (l *Lease) acquireWithin(ctx context.Context, budget time.Duration, seen *Status) (Token, error) {
	return l.begin(ctx, budget, seen, false, l.acquire)
}

// grantFunc obtains the lease for a new term, proposing id first, within
// budget: it returns the granted lease ID and the send instant its validity
// starts from, or an error and the IDs that may hold the lease although no
// answer said so (see acquire, and takeHandOff in succession.go). A zero
// send means the lease was taken by Change Lease and not renewed yet:
// begin renews it, beside the epoch write.
type grantFunc func(ctx context.Context, id string, budget time.Duration) (granted string, send time.Time, unsure []string, err error)

// begin starts a term: it obtains the lease with grant (an acquisition, or
// the take-over of a lease handed to this Lease: handed), then writes the
// next epoch under it.
func (l *Lease) begin(ctx context.Context, budget time.Duration, seen *Status, handed bool, grant grantFunc) (Token, error) {
	l.opMu.Lock()
	defer l.opMu.Unlock()

	l.mu.Lock()
	if l.state == held && time.Now().Before(l.validUntil) {
		l.mu.Unlock()
		return Token{}, ErrAlreadyHeld
	}
	if l.state == held {
		l.state = stale // a term that ran out without a renewal
	}
	l.mu.Unlock()
	l.releaseStale(ctx)

	l.mu.Lock()
	id := l.nextID
	if id == "" {
		id = newLeaseID()
	}
	l.nextID = ""
	l.id, l.state, l.token = id, notHeld, Token{}
	l.mu.Unlock()

	start := time.Now()
	granted, send, unsure, err := grant(ctx, id, budget)
	var (
		prev, next record
		md         map[string]*string
		etag       azcore.ETag
		werr       error
		written    bool
	)
	if err == nil && send.IsZero() {
		send, prev, next, md, etag, werr, err = l.renewBeside(ctx, granted, start.Add(budget), seen, handed)
		written = true
		if err != nil {
			unsure = append(unsure, granted)
		}
	}
	if err != nil {
		l.mu.Lock()
		l.id = ""
		if len(unsure) == 0 && l.nextID == "" {
			l.nextID = id // every request with it was answered: nothing can land later
		}
		l.mu.Unlock()
		// Each may have been granted: give it back. None is ever
		// proposed again, since this Release, or an acquire still on its
		// way, may be applied after a later term began.
		l.giveBack(ctx, unsure)
		return Token{}, err
	}
	validUntil := timing.ValidUntil(send, l.cfg.duration, l.cfg.margin)
	l.mu.Lock()
	id = granted
	l.id, l.state, l.lastSend, l.validUntil = id, held, send, validUntil
	l.mu.Unlock()
	// IDs proposed by attempts whose answers were lost, other than the one
	// granted, hold nothing now (the lease is under id); one may still be
	// granted later by its request applied late, which only delays the
	// next holder until that lease expires.

	// The epoch write leaves time for a renewal attempt before the
	// deadline, so a term never starts with its validity used up.
	if !written {
		prev, next, md, etag, werr = l.bumpEpoch(ctx, id, validUntil.Add(-l.cfg.attemptTimeout), seen, handed)
	}
	if err = werr; err != nil {
		// The lease is ours but no term could start: give it back now
		// rather than leave it to expire, even if ctx has ended.
		l.cfg.log.Debug("azlease: epoch write failed after acquiring; releasing", slog.Any("error", err))
		if cctx, cancel, ok := l.cleanupContext(ctx); ok {
			_ = l.release(cctx, false)
			cancel()
		}
		if errors.Is(err, ErrLeaseLost) && !errors.Is(err, ErrDeadlinePassed) {
			// Broken or taken between the acquire and the epoch write:
			// for the caller, the lease is held elsewhere.
			return Token{}, asHeld(err)
		}
		return Token{}, err
	}
	l.mu.Lock()
	l.token = Token{LeaseID: id, Epoch: next.epoch}
	l.md, l.etag = md, etag
	l.prevUnreleased = prev.epoch > 0 && !prev.released
	tok := l.token
	l.mu.Unlock()
	l.cfg.log.Log(ctx, l.cfg.transitions(), "azlease: acquired", slog.Uint64("epoch", tok.Epoch), slog.String("previous", prev.holder))
	return tok, nil
}

// renewBeside renews a lease taken by Change Lease under id (a hand-off:
// its validity is not known until a renewal) and writes the next epoch
// under it at the same time, a round trip sooner than one after the other.
// The write is conditional on id, so it lands only while this Lease holds
// the lease; its deadline is the validity a renewal sent now gives; and the
// term starts only once the renewal is granted (err nil; send, its send
// instant, is the validity's start). When the renewal fails the write may
// have landed: the record then names a term that never began, which a
// later holder reads as one not released. werr is the write's failure.
func (l *Lease) renewBeside(ctx context.Context, id string, limit time.Time, seen *Status, handed bool) (send time.Time, prev, next record, md map[string]*string, etag azcore.ETag, werr, err error) {
	l.mu.Lock()
	l.id = id
	l.mu.Unlock()
	sent := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		send, err = l.renewFound(ctx, id, limit)
	}()
	var removed chan struct{}
	r, ok := ctx.Value(besideTakeKey{}).(*besideTake)
	if ok && handed {
		removed = make(chan struct{})
		go func() {
			defer close(removed)
			r.run()
		}()
	}
	prev, next, md, etag, werr = l.bumpEpoch(ctx, id, timing.ValidUntil(sent, l.cfg.duration, l.cfg.margin).Add(-l.cfg.attemptTimeout), seen, handed)
	<-done
	if removed != nil {
		<-removed
		if err != nil || werr != nil {
			r.fail()
		}
	}
	return send, prev, next, md, etag, werr, err
}

// cleanupContext is the context of a clean-up request (giving back a lease
// that may have been granted) made on behalf of a caller whose operation
// failed: at most AttemptTimeout, never past ctx's deadline, and none at all
// (ok false) once ctx has ended. A clean-up is never worth overrunning the
// caller's deadline: what it would free expires on its own within a lease
// duration.
func (l *Lease) cleanupContext(ctx context.Context) (context.Context, context.CancelFunc, bool) {
	if ctx.Value(giveBackKey{}) != nil {
		// A fair lock's waiter: its queue waits for what it would free.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.attemptTimeout)
		return cctx, cancel, true
	}
	if ctx.Err() != nil {
		if ctx.Value(cleanUpAfterCancelKey{}) == nil {
			return nil, nil, false
		}
		// The caller is an Elector stopping: releasing is part of a
		// graceful stop, which Stop's own context bounds.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.attemptTimeout)
		return cctx, cancel, true
	}
	limit := time.Now().Add(l.cfg.attemptTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(limit) {
		limit = d
	}
	cctx, cancel := context.WithDeadline(ctx, limit)
	return cctx, cancel, true
}

// answerGuard is how long before the validity deadline a renewal's last
// attempt gives up waiting for its answer.
const answerGuard = time.Millisecond

// cleanUpAfterCancelKey marks a context whose cancellation means "stop
// gracefully": clean-up requests are still made, bounded by AttemptTimeout.
type cleanUpAfterCancelKey struct{}

// giveBackKey marks the context of a fair lock's waiter: a lease it may
// hold without a term when its operation fails (a take-over whose Change
// Lease was applied, an acquisition whose epoch write failed) is given back
// within one AttemptTimeout, even when its ctx has ended or is about to,
// rather than left to block the queue until it expires.
type giveBackKey struct{}

// releaseStale releases a stale lease ID, one that may hold the lease
// without a term, within what the caller's context leaves
// (cleanupContext). The ID is dropped whatever the outcome (the lease
// expires on its own).
func (l *Lease) releaseStale(ctx context.Context) {
	l.mu.Lock()
	id, state := l.id, l.state
	if state == stale {
		l.state, l.id = notHeld, ""
	}
	l.mu.Unlock()
	if state != stale || id == "" {
		return
	}
	if cctx, cancel, ok := l.cleanupContext(ctx); ok {
		_ = l.releaseID(cctx, id, time.Now().Add(l.cfg.attemptTimeout), true)
		cancel()
	}
}

// ensure creates what a failed acquire found missing: the container (when
// Azure said ContainerNotFound) and the zero-byte lock blob, with
// If-None-Match: * so an existing blob is never overwritten.
func (l *Lease) ensure(ctx, actx context.Context, notFound error) error {
	if bloberror.HasCode(notFound, bloberror.ContainerNotFound) {
		_, err := l.t.cc.Create(actx, nil)
		if c := classify(ctx, err); c != classOK && c != classExists {
			return err
		}
		l.cfg.log.Info("azlease: created the container")
	}
	_, err := l.bbc.Upload(actx, streaming.NopCloser(bytes.NewReader(nil)), &blockblob.UploadOptions{
		AccessConditions: &blob.AccessConditions{
			ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: to.Ptr(azcore.ETagAny)},
		},
	})
	switch classify(ctx, err) {
	case classOK:
		l.cfg.log.Info("azlease: created the lock blob")
		return nil
	case classExists, classConflict:
		return nil // created meanwhile by someone else
	case classLost:
		// Azure answers 412 LeaseIdMissing when the blob exists and is
		// leased (Azurite answers 409 BlobAlreadyExists): it exists.
		return nil
	}
	return err
}

// Renew renews the lease. Transient failures are retried until the lease's
// validity deadline; after it, Renew returns an error wrapping
// [ErrDeadlinePassed] and the lease is no longer held. Azure's refusal of the
// lease ID returns an error wrapping [ErrLeaseLost] (or [ErrLeaseBroken]) at
// once.
func (l *Lease) Renew(ctx context.Context) error {
	if err := l.initErr(); err != nil {
		return err
	}
	return l.renewID(ctx, "")
}

// renewID is Renew for the term whose lease ID is id ("" for whatever
// term the Lease holds now): a keeper renews only its own term's lease, and
// once the Lease has moved on to another ID it gets ErrNotHeld without a
// request.
func (l *Lease) renewID(ctx context.Context, want string) error {
	l.opMu.Lock()
	defer l.opMu.Unlock()
	l.mu.Lock()
	id, state, validUntil := l.id, l.state, l.validUntil
	l.mu.Unlock()
	if state != held || (want != "" && want != id) {
		return ErrNotHeld
	}
	if !time.Now().Before(validUntil) {
		l.markStale(id)
		return l.errorf("renew", ErrDeadlinePassed, errors.New("the validity deadline had passed before Renew was called"))
	}
	// The attempts end just before the deadline: an answer that arrives on
	// the deadline itself comes too late to extend the term (Term.extend),
	// so no attempt should wait for one.
	err := l.loop(ctx, "renew", validUntil.Add(-answerGuard), func(actx context.Context, now time.Time) (bool, error) {
		resp, err := l.leaseClient(id).RenewLease(actx, nil)
		switch c := classify(ctx, err); c {
		case classOK:
			if resp.LeaseID != nil && !strings.EqualFold(*resp.LeaseID, id) {
				// A renewal that answers with someone else's lease ID
				// (Azurite revives an expired lease for any ID) is not ours.
				lost := l.errorf("renew", ErrLeaseLost, fmt.Errorf("renewal answered with a different lease ID"))
				l.markLost(id, lost)
				return true, lost
			}
			l.mu.Lock()
			renewed := l.state == held && l.id == id
			if renewed {
				l.lastSend, l.validUntil = now, timing.ValidUntil(now, l.cfg.duration, l.cfg.margin)
			}
			l.mu.Unlock()
			if renewed {
				// The safety slack: how much validity was left when the
				// answer arrived.
				l.tm.renewed(time.Until(validUntil))
			}
			return true, nil
		case classLost, classNotFound:
			lost := l.errorf("renew", ErrLeaseLost, err)
			l.markLost(id, lost)
			return true, lost
		case classBroken:
			lost := l.errorf("renew", ErrLeaseBroken, err)
			l.markLost(id, lost)
			return true, lost
		case classCanceled:
			return true, err
		default:
			// Transient, or a refusal that is not about the lease (a 403 from
			// an expiring role assignment, say): keep trying until the
			// deadline, so that a term only ever ends by a stop or a loss.
			kind := ErrTransient
			if c == classPermanent {
				kind = ErrPermanent
			}
			return false, l.errorf("renew", kind, err) // loop logs it
		}
	})
	if err != nil && ctx.Err() == nil && !errors.Is(err, ErrLeaseLost) {
		// The loop ran out of validity. (A cancelled renewal also wraps its
		// last failure, but says nothing about the lease.) The renewals
		// may have landed: the ID is stale, released but never reused.
		l.markStale(id)
		var e *Error
		errors.As(err, &e)
		return l.errorf("renew", ErrDeadlinePassed, e.Err)
	}
	return err
}

// Release releases the lease so another holder can acquire it at once. The
// lease stops being held before the request is sent. Releasing a Lease that
// holds nothing returns nil. If Azure says the lease ID is no longer the
// lease's, Release returns an error wrapping [ErrLeaseLost] (the lease was
// lost before it was released; a newer holder is unaffected), unless an
// earlier attempt of this call may have released it already. If the release
// fails otherwise (ctx ended, or transient failures until the lease's
// deadline), a later Release (or Acquire) tries again; meanwhile the lease
// is not held, and it frees itself when it expires.
func (l *Lease) Release(ctx context.Context) error {
	if err := l.initErr(); err != nil {
		return err
	}
	l.opMu.Lock()
	defer l.opMu.Unlock()
	return l.release(ctx, l.cfg.markRelease)
}

// errStopBound is the cause of a stopping holder's release that used up its
// one AttemptTimeout.
var errStopBound = errors.New("a stopping holder's release gets one AttemptTimeout")

// releaseStopping releases as Release does, for a holder that is stopping:
// within one AttemptTimeout in all, the clean-release marker included,
// rather than retrying until the lease's validity deadline. Whoever stops a
// process gives it a grace period (Kubernetes, systemd and podman 10 s,
// which the command's documentation counts as --kill-after + 3 s + a
// margin), and a lease that is not released frees itself when it expires.
func (l *Lease) releaseStopping() error {
	ctx, cancel := context.WithTimeoutCause(context.Background(), l.cfg.attemptTimeout, errStopBound)
	defer cancel()
	return l.Release(ctx)
}

func (l *Lease) release(ctx context.Context, mark bool) error {
	l.mu.Lock()
	id, state, validUntil, md, etag, created := l.id, l.state, l.validUntil, l.md, l.etag, l.created
	l.state, l.id, l.md = notHeld, "", nil
	l.mu.Unlock()
	if state == notHeld || id == "" {
		return nil
	}
	now := time.Now()
	// A blob this Lease created and never wrote since looks, released,
	// like one whose creator is still acquiring it, and HoldAfter refuses
	// it for AttemptTimeout after its creation (creatorAcquiring): the
	// marker tells the others it was held and let go. Any write would;
	// counting from the answer keeps a margin over storage's clock.
	mark = mark || (!created.IsZero() && now.Sub(created) <= 2*l.cfg.attemptTimeout)
	if mark && state == held && now.Before(validUntil) && md != nil {
		l.markReleased(ctx, id, validUntil, md, etag)
	}
	limit := now.Add(max(validUntil.Sub(now), l.cfg.attemptTimeout))
	if state != held {
		limit = now.Add(l.cfg.attemptTimeout)
	}
	err := l.releaseID(ctx, id, limit, state != held)
	switch {
	case err == nil && state == held:
		l.cfg.log.Log(ctx, l.cfg.releasedLevel(), "azlease: released")
	case err != nil && !errors.Is(err, ErrLeaseLost):
		// The lease may still be held under id: keep it, never for a
		// term, so that a later Release or Acquire gives it back.
		l.mu.Lock()
		if l.state == notHeld && l.id == "" {
			l.state, l.id = stale, id
		}
		l.mu.Unlock()
	}
	return err
}

// releaseID sends Release Lease with id until limit. Azure's answer that id
// is not the lease's means it was already released, or lost: nil when
// unsure is true (the ID may never have been granted, or an earlier attempt
// may have released it), an error wrapping ErrLeaseLost otherwise.
func (l *Lease) releaseID(ctx context.Context, id string, limit time.Time, unsure bool) error {
	return l.loop(ctx, "release", limit, func(actx context.Context, _ time.Time) (bool, error) {
		_, err := l.leaseClient(id).ReleaseLease(actx, nil)
		switch c := classify(ctx, err); c {
		case classOK:
			return true, nil
		case classLost, classNotFound:
			if unsure {
				return true, nil
			}
			return true, l.errorf("release", ErrLeaseLost, err)
		case classTransient, classConflict:
			unsure = unsure || ambiguous(err)
			return false, l.errorf("release", ErrTransient, err)
		case classCanceled:
			return true, err
		default:
			return true, l.errorf("release", ErrPermanent, err)
		}
	})
}

// Break breaks the lease, whoever holds it, so it can be acquired again after
// period (whole seconds, 0 to 60 s; Azure uses the lease's remaining time if
// that is shorter). It needs no lease ID: this is the operator's tool for a
// stuck holder. It returns how long until the lease can be acquired. If this
// Lease held the lease, it no longer does. Breaking a blob that has no lease
// returns 0 and nil.
func (l *Lease) Break(ctx context.Context, period time.Duration) (time.Duration, error) {
	if err := l.initErr(); err != nil {
		return 0, err
	}
	if period < 0 || period > MaxDuration || period%time.Second != 0 {
		return 0, optionErr("period", "%v: must be whole seconds from 0s to 60s", period)
	}
	l.opMu.Lock()
	defer l.opMu.Unlock()
	var remaining time.Duration
	err := l.loop(ctx, "break", time.Now().Add(l.cfg.duration), func(actx context.Context, _ time.Time) (bool, error) {
		lc := l.leaseClient(newLeaseID()) // Break sends no lease ID
		resp, err := lc.BreakLease(actx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr(int32(period / time.Second))})
		switch c := classify(ctx, err); c {
		case classOK:
			if resp.LeaseTime != nil {
				remaining = time.Duration(*resp.LeaseTime) * time.Second
			}
			return true, nil
		case classLost:
			return true, nil // LeaseNotPresentWithLeaseOperation: nothing to break
		case classTransient, classConflict:
			return false, l.errorf("break", ErrTransient, err)
		case classCanceled:
			return true, err
		default:
			return true, l.errorf("break", ErrPermanent, err)
		}
	})
	if err == nil {
		l.mu.Lock()
		id := l.id
		l.mu.Unlock()
		l.markLost(id, l.errorf("break", ErrLeaseBroken, errors.New("broken by this Lease's own Break")))
		l.cfg.log.Log(ctx, l.cfg.transitions(), "azlease: broke the lease", slog.Duration("acquirable_in", remaining))
	}
	return remaining, err
}

// NextLeaseID returns the lease ID the next Acquire will propose, choosing
// it now if it has not been chosen. It is how a process receives a lease by
// hand-off: it gives this ID to the holder, the holder calls
// [Lease.HandOff] with it, and this Lease's next Acquire is then granted at
// once (Azure grants an acquisition to the lease's own ID). The ID is kept
// until an Acquire call uses it, and after a failed call only if every
// request carrying it was answered; otherwise (a lost answer, a cancelled
// request) it is never proposed again, and NextLeaseID returns a new one.
// Treat it as a secret: whoever knows it can hold the lease. A Lease not
// created with NewLease returns "".
func (l *Lease) NextLeaseID() string {
	if l.initErr() != nil {
		return "" // a Lease not created with NewLease acquires nothing
	}
	l.opMu.Lock()
	defer l.opMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.nextID == "" {
		l.nextID = newLeaseID()
	}
	return l.nextID
}

// HandOff gives the held lease to whoever holds the lease ID proposedID (a
// GUID, typically another Lease's [Lease.NextLeaseID]), without a moment
// when the lease is free. This Lease stops holding before the request is
// sent, as with Release: Held turns false, Token fails, and it never renews
// the lease again. The receiver starts its own term, with a larger epoch,
// when it acquires the lease with that ID.
//
// If Azure says the lease is no longer this Lease's, HandOff returns an
// error wrapping [ErrLeaseLost]. If the hand-off fails otherwise (ctx ended,
// transient failures until the validity deadline), it may or may not have
// happened; this Lease gives its old lease ID back at its next Release or
// Acquire, and the lease otherwise expires on its own.
func (l *Lease) HandOff(ctx context.Context, proposedID string) error {
	if err := l.initErr(); err != nil {
		return err
	}
	canon, ok := azname.GUID(proposedID)
	if !ok {
		return optionErr("proposedID", "%q: must be a GUID", proposedID)
	}
	return l.handOff(ctx, "", canon)
}

// handOff is HandOff of the term whose lease ID is want ("" for whatever
// term the Lease holds now) to canon, a canonical GUID: a Lock hands off
// only its own term's lease, never a newer term's.
func (l *Lease) handOff(ctx context.Context, want, canon string) error {
	l.opMu.Lock()
	defer l.opMu.Unlock()
	l.mu.Lock()
	id, state, validUntil := l.id, l.state, l.validUntil
	if state != held || !time.Now().Before(validUntil) || !l.termStarted() || (want != "" && want != id) {
		l.mu.Unlock()
		return ErrNotHeld
	}
	if strings.EqualFold(canon, id) {
		l.mu.Unlock()
		return optionErr("proposedID", "is this Lease's own lease ID")
	}
	l.state, l.id, l.md, l.token = notHeld, "", nil, Token{}
	notify := l.hookFor(id)
	l.mu.Unlock()
	if notify != nil {
		notify(ErrStopped)
	}
	err := l.changeID(ctx, id, canon, validUntil)
	switch {
	case err == nil:
		l.cfg.log.Log(ctx, l.cfg.transitions(), "azlease: handed the lease off")
	case !errors.Is(err, ErrLeaseLost):
		l.mu.Lock()
		if l.state == notHeld && l.id == "" {
			l.state, l.id = stale, id
		}
		l.mu.Unlock()
	}
	return err
}

// markLost records Azure's word that the lease of id is gone, and ends the
// current term at once if it is that lease's.
func (l *Lease) markLost(id string, cause error) {
	l.mu.Lock()
	if l.id != id || (l.state != held && l.state != stale) {
		l.mu.Unlock()
		return
	}
	l.state = notHeld
	notify := l.hookFor(id)
	l.mu.Unlock()
	if notify != nil {
		notify(cause)
	}
}

// hookFor returns the loss hook of the term whose lease ID is id, or nil;
// l.mu is held.
func (l *Lease) hookFor(id string) func(error) {
	if id == "" || l.onLostID != id {
		return nil
	}
	return l.onLost
}

// markStale records that the term of id ran out of validity without a
// definitive loss: the lease may still be held, so it is released, but the
// ID is never used for another term.
func (l *Lease) markStale(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.id == id && l.state == held {
		l.state = stale
	}
}

// forget drops id, a lease ID known to be dead (Azure released it, or said
// it is not the lease's): there is nothing left to release under it.
func (l *Lease) forget(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.id == id {
		l.state, l.id, l.md = notHeld, "", nil
	}
}

// currentID returns the lease ID of the current term, or "".
func (l *Lease) currentID() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.id
}

// termValid reports whether id is the current term's lease ID and the term
// is certainly valid, and returns its deadline.
func (l *Lease) termValid(id string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.validUntil, id != "" && l.id == id && l.termStarted() && time.Now().Before(l.validUntil)
}

// setOnLost installs the loss hook of the term whose lease ID is id.
func (l *Lease) setOnLost(id string, f func(error)) {
	l.mu.Lock()
	l.onLost, l.onLostID = f, id
	l.mu.Unlock()
}

// clearOnLost removes the loss hook of the term whose lease ID is id, if it
// is still installed: a newer term's hook stays.
func (l *Lease) clearOnLost(id string) {
	l.mu.Lock()
	if l.onLostID == id {
		l.onLost, l.onLostID = nil, ""
	}
	l.mu.Unlock()
}

// snapshot returns what the timing core needs about the term whose lease ID
// is id: ok is false once the Lease holds no lease under id.
func (l *Lease) snapshot(id string) (lastSend, validUntil time.Time, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastSend, l.validUntil, l.state == held && l.id == id
}

// releaseTerm is Release for a Lock of the term whose lease ID is id: it
// releases only that ID, while the Lease still has it (held, or stale: a
// term that ran out and is yet to be given back). Once the Lease has moved
// on (its next Acquire gave the ID back, or it was handed off or lost),
// there is nothing of this term's to release: it sends nothing and
// reports gone.
func (l *Lease) releaseTerm(ctx context.Context, id string) (gone bool, err error) {
	l.opMu.Lock()
	defer l.opMu.Unlock()
	l.mu.Lock()
	mine := id != "" && l.id == id && l.state != notHeld
	l.mu.Unlock()
	if !mine {
		return true, nil
	}
	return false, l.release(ctx, l.cfg.markRelease)
}

func (l *Lease) leaseClient(id string) *lease.BlobClient {
	lc, err := lease.NewBlobClient(l.bc, &lease.BlobClientOptions{LeaseID: to.Ptr(id)})
	if err != nil {
		panic("azlease: lease.NewBlobClient: " + err.Error()) // only fails for a nil client
	}
	return lc
}

// newLeaseID returns a random version-4 UUID in lower case, the form both
// Azure and Azurite compare without surprises.
func newLeaseID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return formatGUID(b)
}

// formatGUID formats b as a version-4 UUID in lower case, setting its
// version and variant bits.
func formatGUID(b [16]byte) string {
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
