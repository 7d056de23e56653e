package main

// azlease's fair Mutex (issue 25), on the same loopback emulator and
// clients as today's (azlease.go). A placeholder until its API lands: fill
// in newFairLocker and the contender's cells measure it; nothing else in the
// harness changes.

import (
	"context"
	"errors"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
)

// newFairLocker returns the fair lock on the lock blob name in cc's
// container, with its default options, or errNotBuilt while there is none.
// When the API lands it becomes, for example:
//
//	m, err := azlease.NewMutex(cc, name, nil) // fair by default
//	if err != nil {
//		return nil, err
//	}
//	return lockerFunc(func(ctx context.Context) (func(context.Context) error, error) {
//		l, err := m.Lock(ctx)
//		if err != nil {
//			return nil, err
//		}
//		return l.Unlock, nil
//	}), nil
//
// and startUnordered (azlease.go) sets the option that restores today's
// behaviour.
func newFairLocker(cc *container.Client, name string) (locker, error) {
	_, _ = cc, name
	return nil, errNotBuilt
}

// startFair serves a fresh emulator for the fair lock; errNotBuilt while
// newFairLocker is the placeholder.
func startFair(context.Context, params) (backend, error) {
	// The probe's nil client makes a real constructor fail with an error
	// of its own; only the placeholder answers errNotBuilt.
	if _, err := newFairLocker(nil, "probe"); errors.Is(err, errNotBuilt) {
		return nil, err
	}
	return startAzlease(newFairLocker)
}
