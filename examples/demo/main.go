// Command demo shows azlease's leader election at work: several electors in
// one process, a live timeline of who leads, and each way leadership
// moves: a planned stop (the leader hands the lease straight to a ready
// standby), a yield, a candidate of higher priority, and a crash (the lease
// must expire). Each is measured (how long the call took, how long no one
// led) and told as the lock blob's record tells it.
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

// The demo's timing. Only the poll interval, the stability window and the
// cooldown differ from the defaults (5 s, 30 s and 1 min), so that the
// demo takes about half a minute; every expectation printed is derived
// from these.
const (
	successorPoll = 200 * time.Millisecond // ElectorOptions.SuccessorPollInterval's default
	window        = 3 * time.Second        // StabilityWindow
	cooldown      = 5 * time.Second        // Cooldown
)

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	var (
		connStr   = fs.String("connection-string", os.Getenv("AZURE_STORAGE_CONNECTION_STRING"), "Azure Storage connection string (default: the embedded emulator)")
		container = fs.String("container", "azlease-demo", "container for the lock blob")
		n         = fs.Int("electors", 3, "number of electors at the start (one more joins with a higher priority)")
		poll      = fs.Duration("poll", time.Second, "follower poll interval")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *n < 2 || *n > 20 {
		return errors.New("-electors must be from 2 to 20")
	}
	if *poll < successorPoll || *poll > 5*time.Second {
		return errors.New("-poll must be from 200ms to 5s")
	}

	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	where, connect, stop, err := backend(*connStr, transport)
	if err != nil {
		return err
	}
	defer stop()

	d := &demo{out: out, start: time.Now(), container: *container, connect: connect, poll: *poll, transport: transport}
	d.blob = fmt.Sprintf("leader-%d", time.Now().UnixNano()) // a fresh election each run
	lease := azlease.DefaultDuration
	fmt.Fprintf(out, "azlease demo: %d electors on %s, container %q, blob %q\n", *n, where, *container, d.blob)
	fmt.Fprintf(out, "lease %v, renewed every %v; followers poll every %v ± 20 %%, a designated successor every %v;\n",
		lease, lease/3, *poll, successorPoll)
	fmt.Fprintf(out, "a candidate of higher priority is preferred once ready for %v and the leader's term is %v old\n\n", window, cooldown)

	for i := 1; i <= *n; i++ {
		if _, err := d.add(fmt.Sprintf("worker-%d", i), 0); err != nil {
			return err
		}
	}
	defer d.stopAll()

	first := d.waitLeader(nil, 30*time.Second)
	if first == nil {
		return errors.New("no leader after 30s")
	}
	d.note(first)
	// Standbys publish their candidacy as they start; the leader lists
	// them at each poll. Give them a few polls, and a random phase, as a
	// real shutdown would come.
	time.Sleep(3**poll + time.Duration(rand.Int64N(int64(*poll))))

	// 1. A planned stop: the leader designates the best ready standby,
	// waits for it to acknowledge (at its next poll), stops its work, and
	// hands the lease over; the standby polls every successorPoll then.
	d.logf("", "▶ stopping %s gracefully (Stop: get a standby ready, stop the work, hand the lease over)", first.name)
	t0 := time.Now()
	if err := first.e.Stop(context.Background()); err != nil {
		return err
	}
	took := time.Since(t0)
	second := d.waitLeader(first, 30*time.Second)
	if second == nil {
		return errors.New("no new leader after the planned stop")
	}
	d.change("planned stop", first, second, took,
		fmt.Sprintf("Stop: up to a standby's poll (%v ± 20 %%) for it to acknowledge, plus the hand-over", *poll),
		fmt.Sprintf("up to the successor's poll (%v) and a few requests", successorPoll))
	time.Sleep(2 * time.Second)

	// 2. A yield: the leader hands leadership to the best ready candidate
	// without stopping.
	d.logf("", "▶ %s yields (Yield: hand leadership to the best ready candidate, keep running)", second.name)
	t0 = time.Now()
	to, err := second.e.Yield(context.Background())
	if err != nil {
		return fmt.Errorf("yield: %w", err)
	}
	took = time.Since(t0)
	third := d.waitLeader(second, 30*time.Second)
	if third == nil || third.name != to {
		return fmt.Errorf("leadership did not move to %s after the yield", to)
	}
	d.change("yield", second, third, took,
		fmt.Sprintf("Yield: up to %s's poll (%v ± 20 %%) to acknowledge, plus the hand-over", to, *poll),
		fmt.Sprintf("up to the successor's poll (%v) and a few requests", successorPoll))
	time.Sleep(time.Second)

	// 3. A candidate of higher priority joins: the leader moves leadership
	// to it once it has been ready for the stability window, counted from
	// the leader's first listing of it, and the leader's own term is at
	// least the cooldown old.
	joined := time.Now()
	age := joined.Sub(d.started(third))
	fourth, err := d.add(fmt.Sprintf("worker-%d", *n+1), 1)
	if err != nil {
		return err
	}
	d.logf("", "▶ %s starts with priority 1 (the others have 0)", fourth.name)
	if w := d.waitLeader(third, 30*time.Second); w != fourth {
		return errors.New("the candidate of higher priority did not lead")
	}
	// It may move once both hold: the candidate has been ready for the
	// window (as the leader's listing, once a poll, first shows it) and
	// the leader's term is the cooldown old; then the candidate
	// acknowledges at its next poll.
	jitter := *poll * 6 / 5
	earliest := max(window, cooldown-age)
	latest := max(window+jitter, cooldown-age) + jitter + time.Second
	d.change("priority", third, fourth, time.Since(joined),
		fmt.Sprintf("%v to %v from its start: once it has been ready for the stability window (%v) and %s's term is the cooldown (%v) old (it was %v old), plus up to a poll to list it and one to acknowledge",
			earliest.Round(100*time.Millisecond), latest.Round(100*time.Millisecond), window, third.name, cooldown, age.Round(100*time.Millisecond)),
		fmt.Sprintf("up to the successor's poll (%v) and a few requests", successorPoll))
	time.Sleep(2 * time.Second)

	// 4. A crash: the leader's network goes dead. Nobody can hand anything
	// over: the lease must expire, a lease duration after the last
	// renewal, and a standby takes it at its next poll. The cut-off leader
	// goes on working until its validity deadline, the safety margin
	// before the expiry (a dead process would stop at once).
	d.logf("", "▶ crashing %s: its network goes dead; it cannot renew, release or hand over, and works on until its validity deadline", fourth.name)
	t0 = time.Now()
	fourth.kill.killed.Store(true)
	fifth := d.waitLeader(fourth, 2*time.Minute)
	if fifth == nil {
		return errors.New("no new leader after the crash")
	}
	renew, margin := lease/3, lease/20
	d.change("crash", fourth, fifth, time.Since(t0),
		fmt.Sprintf("from the crash: the lease expires %v after its last renewal (one every %v: %v to %v after the crash), then a standby's poll (%v ± 20 %%)",
			lease, renew, lease-renew, lease, *poll),
		fmt.Sprintf("the safety margin (%v: the cut-off leader stopped at its validity deadline, that long before its lease expired) plus up to a standby's poll", margin))
	time.Sleep(time.Second)

	d.stopAll()
	d.wg.Wait()
	st, err := azlease.Inspect(context.Background(), mustConnect(connect, *container), d.blob)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nsummary (measured here; see README's \"Leader election\")\n")
	for _, s := range d.summary {
		fmt.Fprintf(out, "  %-12s %s\n", s[0]+":", s[1])
	}
	fmt.Fprintf(out, "  terms, newest first, as the lock blob's record has them:\n")
	for _, h := range st.History {
		fmt.Fprintf(out, "    epoch %d  %-9s began: %-9s ended: %s\n", h.Epoch, h.Holder, h.Began, ended(h))
	}
	if d.overlap.Load() {
		return errors.New("two electors believed they led at the same time")
	}
	fmt.Fprintf(out, "  at no sampled instant did two electors believe they led\n")
	return nil
}

// ended says how a recorded term ended, as the record says it.
func ended(h azlease.HistoryEntry) string {
	switch {
	case h.EndedBy == azlease.ChangeUnknown:
		return "(held)"
	case h.Ended.IsZero():
		return h.EndedBy.String()
	case h.EndedBy.Planned():
		return h.EndedBy.String() + " at " + h.Ended.Format("15:04:05.000")
	}
	return h.EndedBy.String() + " at or before " + h.Ended.Format("15:04:05.000")
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
	out       io.Writer
	start     time.Time
	container string
	blob      string
	poll      time.Duration
	transport http.RoundTripper
	connect   func(string, *killSwitch) (*container.Client, error)
	mu        sync.Mutex
	workers   []*worker
	work      map[uint64][2]time.Time // each term's work: when it started and stopped
	summary   [][2]string
	wg        sync.WaitGroup
	overlap   atomic.Bool
	stopped   atomic.Bool
}

func (d *demo) logf(who, format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, "%8.3fs  %-9s %s\n", time.Since(d.start).Seconds(), who, fmt.Sprintf(format, args...))
}

// add starts an elector called name with the demo's options and priority.
func (d *demo) add(name string, priority int) (*worker, error) {
	w := &worker{name: name, kill: &killSwitch{next: d.transport}}
	cc, err := d.connect(d.container, w.kill)
	if err != nil {
		return nil, err
	}
	if w.e, err = azlease.NewElector(cc, d.blob, &azlease.ElectorOptions{
		Identity: name, PollInterval: d.poll, Priority: priority, StabilityWindow: window, Cooldown: cooldown,
	}); err != nil {
		return nil, err
	}
	if err := w.e.Start(context.Background(), d.task(w)); err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.workers = append(d.workers, w)
	d.mu.Unlock()
	d.wg.Go(func() { d.watch(w) })
	return w, nil
}

// task is the leader's work: housekeeping once a second, with the term's
// fencing epoch, until the term ends. It stamps when the work starts and
// stops: the time between one term's stop and the next one's start is
// the time nobody led.
func (d *demo) task(w *worker) azlease.Task {
	return func(ctx context.Context, term *azlease.Term) error {
		d.stamp(term.Epoch(), 0)
		d.logf(w.name, "LEADER, epoch %d", term.Epoch())
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				d.stamp(term.Epoch(), 1)
				cause := context.Cause(ctx)
				switch {
				case errors.Is(cause, azlease.ErrYielded):
					d.logf(w.name, "yielded (epoch %d): work stopped, handing over", term.Epoch())
				case errors.Is(cause, azlease.ErrStopped):
					d.logf(w.name, "stepped down (epoch %d): work stopped", term.Epoch())
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

func (d *demo) stamp(epoch uint64, i int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.work == nil {
		d.work = map[uint64][2]time.Time{}
	}
	s := d.work[epoch]
	s[i] = time.Now()
	d.work[epoch] = s
}

// note prints how the current term began, as the record says.
func (d *demo) note(w *worker) {
	st, err := azlease.Inspect(context.Background(), mustConnect(d.connect, d.container), d.blob)
	if err == nil {
		d.logf(w.name, "record: epoch %d began: %s", st.Epoch, st.Began)
	}
}

// change reports a move of leadership from old to next: what it cost
// (took, with what to expect), the time nobody led as measured (from the
// old term's work stopping to the new one's starting) and as the record
// says it, and how the record says the term began.
func (d *demo) change(what string, old, next *worker, took time.Duration, expectTook, expectGap string) {
	st, err := azlease.Inspect(context.Background(), mustConnect(d.connect, d.container), d.blob)
	if err != nil || len(st.History) < 2 {
		d.logf("", "  could not read the record: %v", err)
		return
	}
	cur, prev := st.History[0], st.History[1]
	d.mu.Lock()
	stoppedAt, startedAt := d.work[prev.Epoch][1], d.work[cur.Epoch][0]
	d.mu.Unlock()
	gap := startedAt.Sub(stoppedAt).Round(time.Millisecond)
	d.logf("", "  %s: took %v (expect %s)", what, took.Round(time.Millisecond), expectTook)
	d.logf("", "  no leader for %v, from %s's work stopping to %s's starting (expect %s)", gap, old.name, next.name, expectGap)
	rec := "record: epoch " + fmt.Sprint(cur.Epoch) + " began: " + cur.Began.String() + "; epoch " + fmt.Sprint(prev.Epoch) + " ended: " + ended(prev)
	if prev.EndedBy.Planned() && !prev.Ended.IsZero() {
		rec += fmt.Sprintf(" (%v before the new term's start)", cur.Acquired.Sub(prev.Ended).Round(time.Millisecond))
	} else if prev.LeaseDuration > 0 && !prev.Ended.IsZero() {
		rec += fmt.Sprintf(", last renewed at or before %s", prev.Ended.Add(-prev.LeaseDuration).Format("15:04:05.000"))
	}
	d.logf("", "  %s", rec)
	sum := fmt.Sprintf("took %v, no leader for %v; the record says: began %s", took.Round(time.Millisecond), gap, cur.Began)
	if what == "crash" {
		sum = fmt.Sprintf("took %v; no leader for %v after the cut-off leader stopped at its deadline (had its process died, none for up to %v); the record says: began %s",
			took.Round(time.Millisecond), gap, took.Round(time.Millisecond), cur.Began)
	}
	d.mu.Lock()
	d.summary = append(d.summary, [2]string{what, sum})
	d.mu.Unlock()
}

// started is when w's current term's work started.
func (d *demo) started(w *worker) time.Time {
	term := w.e.Term()
	if term == nil {
		return time.Now()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.work[term.Epoch()][0]
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
		d.mu.Lock()
		workers := append([]*worker(nil), d.workers...)
		d.mu.Unlock()
		var leaders []*worker
		for _, w := range workers {
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
	d.mu.Lock()
	workers := append([]*worker(nil), d.workers...)
	d.mu.Unlock()
	// Followers first, then the leader: a leader stopped while others
	// still run would hand over once more.
	for _, leader := range []bool{false, true} {
		for _, w := range workers {
			if w.e.IsLeader() == leader {
				_ = w.e.Stop(context.Background())
			}
		}
	}
}
