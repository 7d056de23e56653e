package main

// What a contender is: a lock implementation on its own service, seen by
// the scenarios only through waiters, each with a client of its own (as a
// separate process would have), and a count of the requests its clients
// sent. The three contenders live in azlease.go, fair.go and etcd.go.

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// locker is one waiter's lock: Lock waits until it holds the lock or ctx
// ends, and returns the function that releases it.
type locker interface {
	Lock(ctx context.Context) (unlock func(context.Context) error, err error)
}

// lockerFunc adapts a function to locker.
type lockerFunc func(ctx context.Context) (func(context.Context) error, error)

func (f lockerFunc) Lock(ctx context.Context) (func(context.Context) error, error) { return f(ctx) }

// waiter is a locker with a client of its own.
type waiter struct {
	locker
	// crash plays the process being killed (SIGKILL): from then on none of
	// its requests reaches the service and it gives nothing back (no
	// unlock, no lease or session revoked); a Lock in progress returns an
	// error soon after.
	crash func()
	// cut cuts the waiter off from the service for d, as a network that
	// drops everything would (its process goes on): what it sends meanwhile
	// is lost, or arrives once the cut ends.
	cut func(d time.Duration)
	// requests is what this waiter's client has sent so far.
	requests func() counts
	// close ends the client cleanly once its Locks have returned.
	close func()
}

// counts are requests the clients of a backend sent so far, and how many of
// them failed (no answer, or an error answer: for azlease a 4xx or 5xx, a
// lease held elsewhere included; for etcd an RPC that returned an error).
type counts struct{ sent, failed int64 }

func (c counts) minus(o counts) counts { return counts{c.sent - o.sent, c.failed - o.failed} }

// backend is a contender's service with its lock implementation.
type backend interface {
	// newWaiter returns a waiter on the lock named name (a fresh name per
	// repetition, so that no state carries over), with a client of its own.
	newWaiter(ctx context.Context, name string) (*waiter, error)
	// requests is what every client of this backend has sent so far.
	requests() counts
	// close stops the service.
	close()
}

// contender is one column of the comparison.
type contender struct {
	key  string // -only's name for it
	name string // in the tables
	// start starts the service; errNotBuilt means the contender does not
	// exist yet and its cells say so.
	start func(ctx context.Context, p params) (backend, error)
}

// errNotBuilt is what a contender that does not exist yet returns from
// start: its cells say "not built yet" instead of failing the run.
var errNotBuilt = errors.New("not built yet")

// contenders are the three of issue 25, in table order, and etcd once more
// without fsync: the emulator keeps everything in memory, so that row
// compares the algorithms, the one with fsync what etcd costs as it runs.
func contenders() []contender {
	return []contender{
		{key: "fair", name: "azlease fair Mutex", start: startFair},
		{key: "unordered", name: "azlease Mutex, Unordered", start: startUnordered},
		{key: "etcd", name: "etcd concurrency.Mutex", start: startEtcd(false)},
		{key: "etcd-nofsync", name: "etcd concurrency.Mutex, no fsync", start: startEtcd(true)},
	}
}

// selectContenders returns the contenders named in keys (all when keys is
// empty), in table order.
func selectContenders(keys []string) ([]contender, error) {
	all := contenders()
	if len(keys) == 0 {
		return all, nil
	}
	want := map[string]bool{}
	for _, k := range keys {
		found := false
		for _, c := range all {
			found = found || c.key == k
		}
		if !found {
			return nil, fmt.Errorf("-only: unknown contender %q (fair, unordered, etcd, etcd-nofsync)", k)
		}
		want[k] = true
	}
	var out []contender
	for _, c := range all {
		if want[c.key] {
			out = append(out, c)
		}
	}
	return out, nil
}

// crashable gives a locker the process's death: once dead is cancelled, a
// Lock in progress has its ctx cancelled (a killed process's goroutines do
// not go on waiting) and new ones fail.
type crashable struct {
	locker
	dead context.Context
}

func (c crashable) Lock(ctx context.Context) (func(context.Context) error, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.dead, cancel)
	defer stop()
	return c.locker.Lock(ctx)
}
