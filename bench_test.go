package azlease_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

// Benchmarks of azlease's operations. On the in-process emulator they
// measure azlease's and azblob's own CPU cost per operation; on Azurite they
// include loopback HTTP and Azurite. `make bench` also runs internal/bench,
// which reports medians and percentiles.

// eachBackend runs f on the in-process emulator and on Azurite.
func eachBackend(b *testing.B, f func(b *testing.B, cc *container.Client)) {
	b.Run("emulator", func(b *testing.B) {
		cc, err := azleasetest.New(nil).ContainerClient("bench", "")
		if err != nil {
			b.Fatal(err)
		}
		f(b, cc)
	})
	b.Run("azurite", func(b *testing.B) { f(b, azuriteClient(b, unique("bench"))) })
}

func BenchmarkLeaseAcquireRelease(b *testing.B) {
	eachBackend(b, func(b *testing.B, cc *container.Client) {
		l, _ := azlease.NewLease(cc, "x", nil)
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := l.Acquire(ctx); err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkLeaseRenew(b *testing.B) {
	eachBackend(b, func(b *testing.B, cc *container.Client) {
		l, _ := azlease.NewLease(cc, "x", nil)
		ctx := context.Background()
		if _, err := l.Acquire(ctx); err != nil {
			b.Fatal(err)
		}
		defer l.Release(ctx)
		b.ReportAllocs()
		for b.Loop() {
			if err := l.Renew(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRawRenewLease is BenchmarkLeaseRenew's baseline: azblob's own
// RenewLease on a lease client kept from the acquire, with no deadline, no
// classification and no metrics. The difference is what azlease adds to each
// renewal.
func BenchmarkRawRenewLease(b *testing.B) {
	eachBackend(b, func(b *testing.B, cc *container.Client) {
		lc, err := lease.NewBlobClient(cc.NewBlobClient("raw"), nil)
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		if _, err := cc.Create(ctx, nil); err != nil && !bloberror.HasCode(err, bloberror.ContainerAlreadyExists) {
			b.Fatal(err)
		}
		if _, err := cc.NewBlockBlobClient("raw").UploadBuffer(ctx, nil, nil); err != nil {
			b.Fatal(err)
		}
		if _, err := lc.AcquireLease(ctx, 60, nil); err != nil {
			b.Fatal(err)
		}
		defer lc.ReleaseLease(ctx, nil)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := lc.RenewLease(ctx, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkMutexLockUnlock(b *testing.B) {
	eachBackend(b, func(b *testing.B, cc *container.Client) {
		m, _ := azlease.NewMutex(cc, "m", nil)
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			lock, err := m.Lock(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := lock.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDoOnceSingleCaller is one caller completing a fresh key.
func BenchmarkDoOnceSingleCaller(b *testing.B) {
	eachBackend(b, func(b *testing.B, cc *container.Client) {
		ctx := context.Background()
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			i++
			if _, err := azlease.DoOnce(ctx, cc, fmt.Sprintf("k-%d", i), nil, func(context.Context, azlease.Token) error { return nil }); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDoOnceAlreadyDone is a caller finding its key done: one read.
func BenchmarkDoOnceAlreadyDone(b *testing.B) {
	eachBackend(b, func(b *testing.B, cc *container.Client) {
		ctx := context.Background()
		fn := func(context.Context, azlease.Token) error { return nil }
		if _, err := azlease.DoOnce(ctx, cc, "done", nil, fn); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := azlease.DoOnce(ctx, cc, "done", nil, fn); err != nil {
				b.Fatal(err)
			}
		}
	})
}
