package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

// A holder takes one lease and keeps it, the way one variant does.
type holder interface {
	// take acquires the i-th lease and starts keeping it.
	take(ctx context.Context, i int) error
	// lost says how many leases were lost so far.
	lost() int
	// stop ends the renewals this holder started and waits for them.
	stop()
}

// Variants, as named on the command line and in the table.
const (
	variantAzlease = "azlease"
	variantRaw     = "raw"
	variantRaw64   = "raw64"
	variantHTTP    = "http"
)

var variants = []string{variantAzlease, variantRaw, variantRaw64, variantHTTP}

func blobName(i int) string { return fmt.Sprintf("lease-%06d", i) }

func newHolder(variant string, cc *container.Client, n int, leaseDuration, renew time.Duration) (holder, error) {
	switch variant {
	case variantAzlease:
		return &mutexHolder{cc: cc, locks: make([]*azlease.Lock, n),
			opts: &azlease.MutexOptions{LeaseDuration: leaseDuration, RenewInterval: renew, MetricsWithoutLockName: true}}, nil
	case variantRaw, variantRaw64:
		return &loopHolder{cc: cc, duration: leaseDuration, renew: renew, stopCh: make(chan struct{}),
			renewOne: func(ctx context.Context, lc *lease.BlobClient, _, _ string) error {
				_, err := lc.RenewLease(ctx, nil)
				return err
			}}, nil
	case variantHTTP:
		key, err := newSharedKey(azleasetest.Account, azleasetest.AccountKey)
		if err != nil {
			return nil, err
		}
		hc := &http.Client{} // http.DefaultTransport, as a bare program would use
		h := &loopHolder{cc: cc, duration: leaseDuration, renew: renew, stopCh: make(chan struct{})}
		h.renewOne = func(ctx context.Context, _ *lease.BlobClient, url, id string) error {
			return renewBare(ctx, hc, key, url, id)
		}
		return h, nil
	}
	return nil, fmt.Errorf("unknown variant %q (want azlease, raw, raw64 or http)", variant)
}

// mutexHolder holds azlease Mutex locks.
type mutexHolder struct {
	cc    *container.Client
	opts  *azlease.MutexOptions
	locks []*azlease.Lock // index i written once by take(i)
}

func (h *mutexHolder) take(ctx context.Context, i int) error {
	m, err := azlease.NewMutex(h.cc, blobName(i), h.opts)
	if err != nil {
		return err
	}
	// Lock, not TryLock: it retries transient failures, proposing the same
	// lease ID again, so an acquire that succeeded after its attempt timed
	// out is not mistaken for someone else's lease.
	lctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	lk, err := m.Lock(lctx)
	if err != nil {
		return err
	}
	h.locks[i] = lk
	return nil
}

func (h *mutexHolder) lost() int {
	n := 0
	for _, lk := range h.locks {
		if lk == nil || !lk.Valid() {
			n++
		}
	}
	return n
}

// stop leaves the locks held: the process exits next, and releasing
// thousands of leases would only add requests nobody measures.
func (h *mutexHolder) stop() {}

// loopHolder holds leases taken with azblob's lease client and renews each
// from a goroutine of its own on a ticker, as a program would without
// azlease: the raw variant renews with the SDK, the http variant with a bare
// signed request.
type loopHolder struct {
	cc       *container.Client
	duration time.Duration
	renew    time.Duration
	// renewOne renews one lease; url is its blob's.
	renewOne func(ctx context.Context, lc *lease.BlobClient, url, id string) error

	lostN  atomic.Int64
	stopCh chan struct{}
	wg     sync.WaitGroup
}

func (h *loopHolder) take(ctx context.Context, i int) error {
	bc := h.cc.NewBlockBlobClient(blobName(i))
	// LeaseIdMissing: an earlier try acquired the lease and timed out.
	if _, err := bc.UploadBuffer(ctx, nil, nil); err != nil && !bloberror.HasCode(err, bloberror.LeaseIDMissing) {
		return err
	}
	id := newLeaseID(i)
	lc, err := lease.NewBlobClient(bc, &lease.BlobClientOptions{LeaseID: to.Ptr(id)})
	if err != nil {
		return err
	}
	if _, err := lc.AcquireLease(ctx, int32(h.duration/time.Second), nil); err != nil {
		return err
	}
	h.wg.Go(func() {
		t := time.NewTicker(h.renew)
		defer t.Stop()
		for {
			select {
			case <-h.stopCh:
				return
			case <-t.C:
			}
			// A deadline per renewal, as a careful program has: a renewal
			// that hangs must not keep stop (and the client) waiting.
			rctx, cancel := context.WithTimeout(ctx, h.renew)
			err := h.renewOne(rctx, lc, bc.URL(), id)
			cancel()
			if err != nil {
				h.lostN.Add(1)
				return
			}
		}
	})
	return nil
}

func (h *loopHolder) lost() int { return int(h.lostN.Load()) }

func (h *loopHolder) stop() {
	close(h.stopCh)
	h.wg.Wait()
}

// newLeaseID is a GUID unique to lease i in this process, the same at
// every try, so a retried acquire that had succeeded succeeds again.
func newLeaseID(i int) string {
	return fmt.Sprintf("%08x-0000-4000-8000-%012x", i, processStamp)
}

var processStamp = time.Now().UnixNano() & 0xffffffffffff

// renewBare renews a lease with one signed PUT, reading the whole answer so
// the connection can be reused.
func renewBare(ctx context.Context, hc *http.Client, key *sharedKey, blobURL, id string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, blobURL+"?comp=lease", http.NoBody)
	if err != nil {
		return err
	}
	req.Header.Set("x-ms-date", time.Now().UTC().Format(http.TimeFormat))
	req.Header.Set("x-ms-version", "2025-11-05")
	req.Header.Set("x-ms-lease-action", "renew")
	req.Header.Set("x-ms-lease-id", id)
	key.sign(req)
	res, err := hc.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("renew: %s (%s)", res.Status, res.Header.Get("x-ms-error-code"))
	}
	return nil
}
