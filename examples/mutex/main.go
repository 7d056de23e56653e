// Command mutex runs a critical section under an azlease Mutex: several
// workers append to a shared report kept in the lock blob itself, one at a
// time. The report is read and written under the lock's lease, so Azure
// rejects the write of a worker that lost the lock; the lock's context ends
// if that happens.
//
//	go run ./examples/mutex
//	AZURE_STORAGE_CONNECTION_STRING=... go run ./examples/mutex
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "mutex:", err)
		os.Exit(1)
	}
}

func run(out io.Writer) error {
	ctx := context.Background()
	cc, closeStore, err := containerClient("locks")
	if err != nil {
		return err
	}
	defer closeStore()

	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := 1; w <= 4; w++ {
		// Each worker has its own Mutex, as separate processes would.
		m, err := azlease.NewMutex(cc, "daily-report", &azlease.MutexOptions{Identity: fmt.Sprintf("worker-%d", w)})
		if err != nil {
			return err
		}
		wg.Go(func() {
			for i := 1; i <= 3; i++ {
				if err := appendLine(ctx, m, fmt.Sprintf("worker-%d entry %d", w, i)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}

	// Read the result under the lock too.
	m, err := azlease.NewMutex(cc, "daily-report", nil)
	if err != nil {
		return err
	}
	var report []byte
	err = m.Do(ctx, func(ctx context.Context, lock *azlease.Lock) error {
		report, err = lock.Read(ctx)
		return err
	})
	if err != nil {
		return err
	}
	lines := strings.Split(strings.TrimSpace(string(report)), "\n")
	fmt.Fprintf(out, "%d entries, none lost:\n%s", len(lines), report)
	return nil
}

// appendLine is the critical section: read, modify, write. Without the lock,
// two workers could read the same report and one entry would be lost. Do
// waits while another worker holds the lock, and always unlocks.
func appendLine(ctx context.Context, m *azlease.Mutex, line string) error {
	return m.Do(ctx, func(ctx context.Context, lock *azlease.Lock) error {
		report, err := lock.Read(ctx)
		if err != nil {
			return err
		}
		return lock.Write(ctx, append(report, line+"\n"...))
	})
}

// containerClient connects to AZURE_STORAGE_CONNECTION_STRING, or to an
// embedded emulator when it is not set.
func containerClient(name string) (*container.Client, func(), error) {
	if cs := os.Getenv("AZURE_STORAGE_CONNECTION_STRING"); cs != "" {
		cc, err := azlease.ContainerClientFromConnectionString(cs, name, nil)
		return cc, func() {}, err
	}
	srv := azleasetest.New(nil)
	cc, err := srv.ContainerClient(name, "")
	return cc, srv.Close, err
}
