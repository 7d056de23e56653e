package main

// The azlease contenders' service: the azleasetest emulator served over
// real HTTP on a loopback port, each waiter on a container client of its own
// (its own connections), whose requests a transport counts and, to play a
// killed process, stops.

import (
	"context"
	"errors"
	"flag"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

// lockContainer is the container the locks' blobs live in.
const lockContainer = "lockbench"

// azleaseBackend is one emulator and a way to make a lock on it.
type azleaseBackend struct {
	emu       *azleasetest.Server
	ep        *azleasetest.Endpoint
	newLocker func(cc *container.Client, name string) (locker, error)
	sent      atomic.Int64
	failed    atomic.Int64
}

// emuRTT is -rtt: how long the emulator holds every request before it
// answers, a round trip to a storage account farther than loopback (the
// azlease contenders only; etcd stays on loopback).
var emuRTT = flag.Duration("rtt", 0, "azlease contenders: the emulator answers every request this much later (a round trip farther than loopback; etcd is not delayed)")

// startAzlease serves a fresh emulator on loopback for locks made by
// newLocker.
func startAzlease(newLocker func(cc *container.Client, name string) (locker, error)) (*azleaseBackend, error) {
	emu := azleasetest.New(nil)
	if rtt := *emuRTT; rtt > 0 {
		emu.SetFaults(func(azleasetest.Request) azleasetest.Fault { return azleasetest.Fault{Delay: rtt} })
	}
	ep, err := emu.Listen("127.0.0.1:0")
	if err != nil {
		emu.Close()
		return nil, err
	}
	return &azleaseBackend{emu: emu, ep: ep, newLocker: newLocker}, nil
}

// startUnordered is azlease.Mutex with MutexOptions.Unordered, the waiting
// before issue 25: every waiter polls every 1 s (± 20 %), and the first to
// try after a release gets the lock; a 15 s lease.
func startUnordered(context.Context, params) (backend, error) {
	return startAzlease(func(cc *container.Client, name string) (locker, error) {
		return newMutexLocker(cc, name, &azlease.MutexOptions{Unordered: true})
	})
}

func (b *azleaseBackend) requests() counts {
	return counts{b.sent.Load(), b.failed.Load()}
}

func (b *azleaseBackend) close() {
	_ = b.ep.Close()
	b.emu.Close()
}

// errCrashed is what a killed waiter's transport answers.
var errCrashed = errors.New("lockbench: this waiter's process was killed")

// errCut is what a request sent while its waiter is cut off answers when
// its caller gives up first.
var errCut = errors.New("lockbench: this waiter is cut off")

// countingTransport counts a waiter's requests, into its own totals and its
// backend's, fails every request once dead, and holds every request sent
// while it is cut off until the cut ends (then sends it) or its caller gives
// up (then it never reached the service, and failed).
type countingTransport struct {
	b            *azleaseBackend
	next         *http.Transport
	dead         atomic.Bool
	cutUntil     atomic.Int64 // unix nanoseconds; zero: not cut
	sent, failed atomic.Int64
}

func (c *countingTransport) Do(req *http.Request) (*http.Response, error) {
	if c.dead.Load() {
		return nil, errCrashed
	}
	c.b.sent.Add(1)
	c.sent.Add(1)
	sent := time.Now()
	if err := c.awaitCut(req.Context()); err != nil {
		c.b.failed.Add(1)
		c.failed.Add(1)
		return nil, err
	}
	resp, err := c.next.RoundTrip(req)
	traceRequest(c, sent, req, resp)
	if (err != nil || resp.StatusCode >= 400) && !cutByWindow(req.Context()) {
		c.b.failed.Add(1)
		c.failed.Add(1)
	}
	return resp, err
}

// awaitCut returns when no cut is in force, or an error when ctx ends first.
func (c *countingTransport) awaitCut(ctx context.Context) error {
	for {
		left := time.Until(time.Unix(0, c.cutUntil.Load()))
		if left <= 0 {
			return nil
		}
		t := time.NewTimer(left)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return errors.Join(errCut, ctx.Err())
		}
	}
}

func (b *azleaseBackend) newWaiter(_ context.Context, name string) (*waiter, error) {
	// A transport of its own, as azlease installs by default (a clone of
	// http.DefaultTransport keeping 64 idle connections per host), so that
	// no two waiters share a connection.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	ct := &countingTransport{b: b, next: tr}
	cc, err := azlease.ContainerClientFromConnectionString(b.ep.ConnectionString(), lockContainer,
		&container.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: ct}})
	if err != nil {
		return nil, err
	}
	l, err := b.newLocker(cc, name)
	if err != nil {
		return nil, err
	}
	dead, kill := context.WithCancel(context.Background())
	return &waiter{
		locker: crashable{locker: l, dead: dead},
		crash: func() {
			ct.dead.Store(true) // first, so that nothing it does on the way out reaches storage
			kill()
			tr.CloseIdleConnections()
		},
		cut: func(d time.Duration) {
			ct.cutUntil.Store(time.Now().Add(d).UnixNano())
			tracef("a waiter is cut off for %v", d)
		},
		requests: func() counts { return counts{ct.sent.Load(), ct.failed.Load()} },
		close: func() {
			kill()
			tr.CloseIdleConnections()
		},
	}, nil
}
