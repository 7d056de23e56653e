package main

// azlease's fair Mutex (issue 25, fair by default), on the same loopback
// emulator and clients as the unordered one (azlease.go).

import (
	"context"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/azlease/azlease"
)

// newFairLocker returns the fair lock on the lock blob name in cc's
// container, with its default options (the first in line from every 5 ms
// as a hold begins to every 200 ms, then by the hold's age up to 1 s; 1 s
// polls behind it; a 15 s lease).
func newFairLocker(cc *container.Client, name string) (locker, error) {
	return newMutexLocker(cc, name, nil)
}

// newMutexLocker is a Mutex with opts as a locker.
func newMutexLocker(cc *container.Client, name string, opts *azlease.MutexOptions) (locker, error) {
	m, err := azlease.NewMutex(cc, name, opts)
	if err != nil {
		return nil, err
	}
	return lockerFunc(func(ctx context.Context) (func(context.Context) error, error) {
		l, err := m.Lock(ctx)
		if err != nil {
			return nil, err
		}
		return l.Unlock, nil
	}), nil
}

// startFair serves a fresh emulator for the fair lock.
func startFair(context.Context, params) (backend, error) {
	return startAzlease(newFairLocker)
}
