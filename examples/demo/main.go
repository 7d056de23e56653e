// Command demo shows azlease's leader election at work: several electors in
// one process, a live timeline of who leads, a leader stopped gracefully and
// another crashed, with the handoff and failover times measured.
//
// With no connection string it runs on azlease's embedded emulator, served on
// a loopback port: no Azure account needed. Given one (-connection-string or
// AZURE_STORAGE_CONNECTION_STRING; "UseDevelopmentStorage=true" means a local
// Azurite) it runs the same script against that account.
//
//	go run ./examples/demo
//	go run ./examples/demo -connection-string "UseDevelopmentStorage=true"
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	var (
		connStr   = fs.String("connection-string", os.Getenv("AZURE_STORAGE_CONNECTION_STRING"), "Azure Storage connection string (default: the embedded emulator)")
		container = fs.String("container", "azlease-demo", "container for the lock blob")
		n         = fs.Int("electors", 3, "number of electors")
		poll      = fs.Duration("poll", time.Second, "follower poll interval")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *n < 2 || *n > 20 {
		return errors.New("-electors must be from 2 to 20")
	}

	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	where, connect, stop, err := backend(*connStr, transport)
	if err != nil {
		return err
	}
	defer stop()

	d := &demo{out: out, start: time.Now()}
	blob := fmt.Sprintf("leader-%d", time.Now().UnixNano()) // a fresh election each run
	opts := azlease.ElectorOptions{PollInterval: *poll}
	fmt.Fprintf(out, "azlease demo: %d electors on %s, container %q, blob %q\n", *n, where, *container, blob)
	fmt.Fprintf(out, "lease %v, renewed every %v, trusted for %v after each send; followers poll every %v ± 20 %%\n\n",
		azlease.DefaultDuration, azlease.DefaultDuration/3, azlease.DefaultDuration-azlease.DefaultDuration/20, *poll)

	for i := 1; i <= *n; i++ {
		name := fmt.Sprintf("worker-%d", i)
		w := &worker{name: name, kill: &killSwitch{next: transport}}
		cc, err := connect(*container, w.kill)
		if err != nil {
			return err
		}
		o := opts
		o.Identity = name
		if w.e, err = azlease.NewElector(cc, blob, &o); err != nil {
			return err
		}
		d.workers = append(d.workers, w)
	}
	for _, w := range d.workers {
		if err := w.e.Start(context.Background(), d.task(w)); err != nil {
			return err
		}
		d.wg.Go(func() { d.watch(w) })
	}
	defer d.stopAll()

	first := d.waitLeader(nil, 30*time.Second)
	if first == nil {
		return errors.New("no leader after 30s")
	}
	// Stop at a random phase of the followers' polls and the leader's
	// renewals, as a real shutdown would come: a stop that falls just
	// before a poll would show a handoff far shorter than users will see.
	time.Sleep(4*time.Second + time.Duration(rand.Int64N(int64(*poll))))

	d.logf("", "▶ stopping %s gracefully (Stop: cancel its work, wait for it, release)", first.name)
	stopped := time.Now()
	if err := first.e.Stop(context.Background()); err != nil {
		return err
	}
	second := d.waitLeader(first, 30*time.Second)
	if second == nil {
		return errors.New("no new leader after the graceful stop")
	}
	handoff := time.Since(stopped)
	d.logf("", "  handoff took %v (expect up to one poll interval: %v here, %v ± 20 %% with the defaults)",
		handoff.Round(time.Millisecond), *poll, 5*time.Second)
	time.Sleep(4*time.Second + time.Duration(rand.Int64N(int64(5*time.Second))))

	d.logf("", "▶ crashing %s: its network goes dead, it cannot renew or release", second.name)
	crashed := time.Now()
	second.kill.killed.Store(true)
	third := d.waitLeader(second, 2*time.Minute)
	if third == nil {
		return errors.New("no new leader after the crash")
	}
	failover := time.Since(crashed)
	d.logf("", "  failover took %v (expect up to a lease duration plus a poll interval: %v here, %v with the defaults)",
		failover.Round(time.Millisecond), azlease.DefaultDuration+*poll, azlease.DefaultDuration+5*time.Second)
	time.Sleep(2 * time.Second)

	d.stopAll()
	d.wg.Wait()
	st, err := azlease.Inspect(context.Background(), mustConnect(connect, *container), blob)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nsummary\n")
	fmt.Fprintf(out, "  graceful handoff: %v (bounded by the poll interval)\n", handoff.Round(time.Millisecond))
	fmt.Fprintf(out, "  crash failover:   %v (bounded by lease duration + poll interval)\n", failover.Round(time.Millisecond))
	fmt.Fprintf(out, "  terms (newest first, from the lock blob's history):\n")
	for _, h := range st.History {
		fmt.Fprintf(out, "    epoch %d  %s\n", h.Epoch, h.Holder)
	}
	if d.overlap.Load() {
		return errors.New("two electors believed they led at the same time")
	}
	fmt.Fprintf(out, "  at no sampled instant did two electors believe they led\n")
	return nil
}

// backend returns where the demo runs and how to connect to it.
func backend(connStr string, transport *http.Transport) (where string, connect func(string, *killSwitch) (*container.Client, error), stop func(), err error) {
	if connStr == "" {
		srv := azleasetest.New(nil)
		ep, err := srv.Listen("127.0.0.1:0")
		if err != nil {
			return "", nil, nil, err
		}
		connStr = ep.ConnectionString()
		where = "the embedded emulator at " + ep.URL
		stop = func() { srv.Close(); _ = ep.Close() }
	} else {
		where = "the account of the connection string"
		stop = func() {}
	}
	connect = func(name string, ks *killSwitch) (*container.Client, error) {
		if ks == nil {
			ks = &killSwitch{next: transport}
		}
		opts := &container.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: ks}}
		return azlease.ContainerClientFromConnectionString(connStr, name, opts)
	}
	return where, connect, stop, nil
}

func mustConnect(connect func(string, *killSwitch) (*container.Client, error), name string) *container.Client {
	cc, err := connect(name, nil)
	if err != nil {
		panic(err)
	}
	return cc
}

type worker struct {
	name string
	e    *azlease.Elector
	kill *killSwitch
}

// killSwitch makes a worker's requests fail once killed: to everyone else,
// the worker has crashed.
type killSwitch struct {
	next   http.RoundTripper
	killed atomic.Bool
}

func (k *killSwitch) Do(req *http.Request) (*http.Response, error) {
	if k.killed.Load() {
		return nil, errors.New("crashed")
	}
	return k.next.RoundTrip(req)
}

type demo struct {
	out     io.Writer
	start   time.Time
	mu      sync.Mutex
	workers []*worker
	wg      sync.WaitGroup
	overlap atomic.Bool
	stopped atomic.Bool
}

func (d *demo) logf(who, format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, "%8.3fs  %-9s %s\n", time.Since(d.start).Seconds(), who, fmt.Sprintf(format, args...))
}

// task is the leader's work: housekeeping once a second, with the term's
// fencing epoch, until the term ends.
func (d *demo) task(w *worker) azlease.Task {
	return func(ctx context.Context, term *azlease.Term) error {
		d.logf(w.name, "LEADER, epoch %d", term.Epoch())
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				cause := context.Cause(ctx)
				switch {
				case errors.Is(cause, azlease.ErrStopped):
					d.logf(w.name, "stepped down (epoch %d): work stopped, now releasing", term.Epoch())
				case errors.Is(cause, azlease.ErrDeadlinePassed):
					d.logf(w.name, "lost leadership (epoch %d): no renewal before its validity deadline; stopped trusting the lease", term.Epoch())
				default:
					d.logf(w.name, "lost leadership (epoch %d): %v", term.Epoch(), cause)
				}
				return nil
			case <-tick.C:
				term.Heartbeat() // housekeeping would go here, fenced by term.Epoch()
			}
		}
	}
}

// watch prints what w observes about the leader.
func (d *demo) watch(w *worker) {
	for info := range w.e.Changes() {
		if !info.Self && info.Leased && !w.kill.killed.Load() {
			d.logf(w.name, "follows %s (epoch %d)", info.Holder, info.Epoch)
		}
	}
}

// waitLeader waits until a worker other than old leads, checking meanwhile
// that no two workers believe they lead at once.
func (d *demo) waitLeader(old *worker, limit time.Duration) *worker {
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		var leaders []*worker
		for _, w := range d.workers {
			if w.e.IsLeader() {
				leaders = append(leaders, w)
			}
		}
		if len(leaders) > 1 {
			d.overlap.Store(true)
			names := make([]string, len(leaders))
			for i, l := range leaders {
				names[i] = l.name
			}
			d.logf("", "!! two leaders: %s", strings.Join(names, ", "))
		}
		if len(leaders) == 1 && leaders[0] != old {
			return leaders[0]
		}
	}
	return nil
}

func (d *demo) stopAll() {
	if d.stopped.Swap(true) {
		return
	}
	for _, w := range d.workers {
		_ = w.e.Stop(context.Background())
	}
}
