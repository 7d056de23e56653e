// Command bench measures azlease on the wire and writes bench/results.md:
// round trips on the emulator (in process and over loopback HTTP) and on the
// pinned Azurite, DoOnce latency, graceful handoff and crash failover on
// Azurite, and the client-side cost of holding 1,000 mutexes. It folds in the
// simulation report, the waiters' costs before and after they looked first
// (TestWaiterCosts), the shard balancers side by side (internal/shardbench),
// fair locks beside etcd's (internal/lockbench), planned succession
// (TestSuccessionBench, with the multi-process rolling deploys) and `go test -bench` output
// that `make bench` produces first. Everything talks to loopback addresses
// only.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/internal/azurite"
	"github.com/azlease/azlease/internal/hostinfo"
)

func main() {
	out := flag.String("out", "bench/results.md", "results file")
	sim := flag.String("sim", "", "simulation report to include")
	wait := flag.String("wait", "", "report of TestWaiterCosts (waiters before and after looking first) to include")
	gobench := flag.String("gobench", "", "`go test -bench` output to include")
	many := flag.String("many", "", "table of internal/manybench (holding many leases) to include")
	shards := flag.String("shards", "", "table of internal/shardbench (shard balancers side by side) to include")
	locks := flag.String("locks", "", "report of internal/lockbench (fair locks beside etcd's) to include")
	succession := flag.String("succession", "", "report of TestSuccessionBench (planned succession, rolling deploys) to include")
	locks35 := flag.String("locks35", "", "the fair locks before and after issue 35 (bench/locks-35.md, kept by hand) to include")
	n := flag.Int("n", 500, "round trips per measurement")
	quick := flag.Bool("quick", false, "fewer repetitions (for trying the command out)")
	flag.Parse()
	if err := run(*out, *sim, *wait, *gobench, *many, *shards, *locks, *locks35, *succession, *n, *quick); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// counting is a transport that counts requests and can be switched off to
// play a crashed process.
type counting struct {
	next     http.RoundTripper
	requests atomic.Int64
	dead     atomic.Bool
}

func (c *counting) Do(req *http.Request) (*http.Response, error) {
	if c.dead.Load() {
		return nil, errors.New("crashed")
	}
	c.requests.Add(1)
	return c.next.RoundTrip(req)
}

// backend is a place to run measurements.
type backend struct {
	name string
	// client returns a container client with its own transport.
	client func(container string) (*container.Client, *counting)
}

func run(out, sim, wait, gobench, many, shards, locks, locks35, succession string, n int, quick bool) error {
	ctx := context.Background()
	var b strings.Builder
	fmt.Fprintf(&b, "# azlease benchmark results\n\n")
	fmt.Fprintf(&b, "Written by `make bench` on %s. Medians are the figures to quote; p99 over a few hundred loopback round\n", time.Now().UTC().Format("2006-01-02"))
	fmt.Fprintf(&b, "trips mostly shows the machine's scheduling noise. Real Azure adds network latency (a few ms in-region) to every round trip.\n\n")
	machine(&b)

	tr := &http.Transport{MaxIdleConnsPerHost: 200}
	defer tr.CloseIdleConnections()
	fmt.Fprintln(os.Stderr, "starting Azurite…")
	az, err := azurite.Start(ctx)
	if err != nil {
		return err
	}
	defer az.Stop()
	emu := azleasetest.New(nil)
	defer emu.Close()
	ep, err := emu.Listen("127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ep.Close()

	shared := func(url string) func(string) (*container.Client, *counting) {
		return func(name string) (*container.Client, *counting) {
			c := &counting{next: tr}
			cred, _ := container.NewSharedKeyCredential(azurite.Account, azurite.Key)
			cc, err := container.NewClientWithSharedKeyCredential(url+"/"+name, cred, &container.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: c}})
			if err != nil {
				panic(err)
			}
			return cc, c
		}
	}
	backends := []backend{
		{name: "emulator, in process", client: func(name string) (*container.Client, *counting) {
			c := &counting{next: roundTripper{emu.Transport("")}}
			cc, err := emu.ContainerClient(name, "")
			if err != nil {
				panic(err)
			}
			cred, _ := container.NewSharedKeyCredential(azurite.Account, azurite.Key)
			cc, _ = container.NewClientWithSharedKeyCredential(cc.URL(), cred, &container.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: c}})
			return cc, c
		}},
		{name: "emulator, loopback HTTP", client: shared(ep.URL)},
		{name: "Azurite 3.35.0, loopback HTTP", client: shared(az.URL)},
	}

	reps := n
	if quick {
		reps = 50
	}
	fmt.Fprintf(&b, "## Round trips\n\n%d sequential operations each after 20 warm-up ones, one client, keep-alive connections.\n", reps)
	fmt.Fprintf(&b, "`Acquire+Release` is azlease's: acquire, read the record, write the next epoch under the lease, release (4 requests);\n")
	fmt.Fprintf(&b, "`raw acquire+release` is the two bare azblob calls, for comparison. `Renew` is one request; `Lock+Unlock` is a Mutex\n")
	fmt.Fprintf(&b, "(like Acquire+Release, plus arming and stopping the lease's renewal and deadline timers).\n\n")
	fmt.Fprintf(&b, "| backend | operation | median | p90 | p99 | n |\n|---|---|---:|---:|---:|---:|\n")
	for _, be := range backends {
		fmt.Fprintf(os.Stderr, "round trips on %s…\n", be.name)
		rows, err := roundTrips(ctx, be, reps)
		if err != nil {
			return fmt.Errorf("%s: %w", be.name, err)
		}
		for _, r := range rows {
			fmt.Fprintf(&b, "| %s | %s | %s |\n", be.name, r.op, r.s)
		}
	}

	fmt.Fprintf(&b, "\n## DoOnce end-to-end latency\n\nFrom the start of the calls until every caller has returned; fn does nothing. Waiting callers poll every\n")
	fmt.Fprintf(&b, "PollInterval (default 2 s, ± 20 %%), which dominates the 50-caller figure: it is a cost/latency knob.\n\n")
	fmt.Fprintf(&b, "| backend | callers | PollInterval | median | p90 | max | runs |\n|---|---:|---:|---:|---:|---:|---:|\n")
	onceRuns := 10
	if quick {
		onceRuns = 3
	}
	for _, be := range backends[1:] {
		for _, tc := range []struct {
			callers int
			poll    time.Duration
		}{{1, 0}, {50, 0}, {50, 200 * time.Millisecond}} {
			fmt.Fprintf(os.Stderr, "DoOnce ×%d on %s…\n", tc.callers, be.name)
			s, err := doOnceLatency(ctx, be, tc.callers, tc.poll, onceRuns)
			if err != nil {
				return err
			}
			poll := "2s (default)"
			if tc.poll > 0 {
				poll = tc.poll.String()
			}
			fmt.Fprintf(&b, "| %s | %d | %s | %s |\n", be.name, tc.callers, poll, s.rowMax())
		}
	}

	azb := backends[2]
	fmt.Fprintf(&b, "\n## Handoff and failover on Azurite (real time)\n\n")
	fmt.Fprintf(&b, "Two electors with default settings (15 s lease, renew every 5 s, poll every 5 s ± 20 %%) unless stated. Handoff: from\n")
	fmt.Fprintf(&b, "Stop() on the leader to the follower's IsLeader(). Failover: from the leader's crash (every request fails from then on,\n")
	fmt.Fprintf(&b, "so it neither renews nor releases) to the follower's IsLeader(). Stops and crashes happen at a random phase.\n\n")
	fmt.Fprintf(&b, "| measurement | PollInterval | median | p99 | min | max | runs |\n|---|---:|---:|---:|---:|---:|---:|\n")
	handoffRuns, failoverRuns := 20, 20
	if quick {
		handoffRuns, failoverRuns = 3, 3
	}
	for _, poll := range []time.Duration{5 * time.Second, time.Second} {
		fmt.Fprintf(os.Stderr, "handoffs (poll %v)…\n", poll)
		s, err := transitions(ctx, azb, false, poll, handoffRuns)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "| graceful handoff | %v | %s |\n", poll, s.rowFull())
	}
	fmt.Fprintf(os.Stderr, "failovers…\n")
	s, err := transitions(ctx, azb, true, 5*time.Second, failoverRuns)
	if err != nil {
		return err
	}
	fmt.Fprintf(&b, "| crash failover | 5s | %s |\n", s.rowFull())

	fmt.Fprintf(&b, "\n## Holding many mutexes\n\n")
	held := 1000
	hold := 60 * time.Second
	if quick {
		held, hold = 100, 15*time.Second
	}
	fmt.Fprintf(os.Stderr, "holding %d mutexes for %v…\n", held, hold)
	if err := manyHeld(ctx, &b, azb, held, hold); err != nil {
		return err
	}

	if many != "" {
		// Written by internal/manybench with its own "Holding many leases" heading.
		body, err := os.ReadFile(many)
		if err != nil {
			return err
		}
		b.WriteString("\n")
		b.Write(body)
	}

	for _, inc := range []struct{ title, path string }{
		{"Waiting: requests while the lock is held, before and after waiters looked first", wait},
		{"Simulation: azlease and a naive acquire-renew loop side by side", sim},
		{"Shard balancers side by side: azlease and the Event Hubs algorithm", shards},
		{"Fair locks side by side: azlease and etcd's concurrency.Mutex", locks},
		{"Fair locks before and after issue 35", locks35},
		{"Planned succession: leaderless time, leader changes in rolling deploys, preferred leaders", succession},
		{"go test -bench", gobench},
	} {
		if inc.path == "" {
			continue
		}
		body, err := os.ReadFile(inc.path)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "\n## %s\n\n", inc.title)
		if strings.HasSuffix(inc.path, ".txt") {
			fmt.Fprintf(&b, "```\n%s```\n", body)
		} else {
			b.Write(body)
		}
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return os.WriteFile(out, []byte(b.String()), 0o644)
}

// roundTripper adapts an azcore transporter for counting.
type roundTripper struct{ policy.Transporter }

func (r roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return r.Do(req) }

func machine(b *strings.Builder) {
	cpu := hostinfo.CPUModel()
	mem := ""
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		line := strings.SplitN(string(data), "\n", 2)[0]
		mem = strings.Join(strings.Fields(line)[1:], " ")
	}
	node, _ := exec.Command("node", "--version").Output()
	fmt.Fprintf(b, "Machine: %s, %d logical CPUs, %s memory, %s/%s, %s, Node.js %s, azblob v1.8.1, Azurite 3.35.0 (in-memory).\n\n",
		cpu, runtime.NumCPU(), mem, runtime.GOOS, runtime.GOARCH, runtime.Version(), strings.TrimSpace(string(node)))
}

type stats []time.Duration

func (s stats) q(p float64) time.Duration {
	c := append(stats(nil), s...)
	sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
	return c[min(len(c)-1, int(p*float64(len(c))))]
}

func round(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(10 * time.Millisecond).String()
}

func (s stats) row() string {
	return fmt.Sprintf("%s | %s | %s | %d", round(s.q(0.5)), round(s.q(0.9)), round(s.q(0.99)), len(s))
}

func (s stats) rowMax() string {
	return fmt.Sprintf("%s | %s | %s | %d", round(s.q(0.5)), round(s.q(0.9)), round(s.q(1)), len(s))
}

func (s stats) rowFull() string {
	return fmt.Sprintf("%s | %s | %s | %s | %d", round(s.q(0.5)), round(s.q(0.99)), round(s.q(0)), round(s.q(1)), len(s))
}

type rtRow struct {
	op string
	s  string
}

func roundTrips(ctx context.Context, be backend, n int) ([]rtRow, error) {
	cname := fmt.Sprintf("rt-%d", time.Now().UnixNano())
	cc, _ := be.client(cname)
	measure := func(f func() error) (stats, error) {
		var s stats
		for i := range n + 20 {
			t := time.Now()
			if err := f(); err != nil {
				return nil, err
			}
			if i >= 20 {
				s = append(s, time.Since(t))
			}
		}
		return s, nil
	}
	var rows []rtRow
	l, _ := azlease.NewLease(cc, "acquire-release", nil)
	s, err := measure(func() error {
		if _, err := l.Acquire(ctx); err != nil {
			return err
		}
		return l.Release(ctx)
	})
	if err != nil {
		return nil, err
	}
	rows = append(rows, rtRow{"Acquire+Release", s.row()})

	raw, _ := lease.NewBlobClient(cc.NewBlobClient("acquire-release"), nil)
	noRetry := policy.WithRetryOptions(ctx, policy.RetryOptions{MaxRetries: -1})
	s, err = measure(func() error {
		if _, err := raw.AcquireLease(noRetry, 15, nil); err != nil {
			return err
		}
		_, err := raw.ReleaseLease(noRetry, nil)
		return err
	})
	if err != nil {
		return nil, err
	}
	rows = append(rows, rtRow{"raw acquire+release", s.row()})

	if _, err := l.Acquire(ctx); err != nil {
		return nil, err
	}
	s, err = measure(func() error { return l.Renew(ctx) })
	if err != nil {
		return nil, err
	}
	_ = l.Release(ctx)
	rows = append(rows, rtRow{"Renew", s.row()})

	m, _ := azlease.NewMutex(cc, "lock-unlock", nil)
	s, err = measure(func() error {
		lock, err := m.Lock(ctx)
		if err != nil {
			return err
		}
		return lock.Unlock(ctx)
	})
	if err != nil {
		return nil, err
	}
	rows = append(rows, rtRow{"Lock+Unlock", s.row()})
	return rows, nil
}

func doOnceLatency(ctx context.Context, be backend, callers int, poll time.Duration, runs int) (stats, error) {
	cname := fmt.Sprintf("once-%d", time.Now().UnixNano())
	clients := make([]*container.Client, callers)
	for i := range clients {
		clients[i], _ = be.client(cname)
	}
	var s stats
	for r := range runs {
		key := fmt.Sprintf("key-%d", r)
		start := time.Now()
		var wg sync.WaitGroup
		var ran atomic.Int32
		errs := make([]error, callers)
		for i := range callers {
			wg.Go(func() {
				_, errs[i] = azlease.DoOnce(ctx, clients[i], key,

					&azlease.DoOnceOptions{PollInterval: poll}, func(context.Context, azlease.Token) error {
						ran.Add(1)
						return nil
					})

			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		if ran.Load() != 1 {
			return nil, fmt.Errorf("DoOnce ran %d times", ran.Load())
		}
		s = append(s, time.Since(start))
	}
	return s, nil
}

// transitions measures handoffs (crash=false) or failovers between two
// electors, several at a time on separate lock blobs.
func transitions(ctx context.Context, be backend, crash bool, poll time.Duration, runs int) (stats, error) {
	cname := fmt.Sprintf("transitions-%d", time.Now().UnixNano())
	var mu sync.Mutex
	var s stats
	var errs []error
	parallel := 5
	var wg sync.WaitGroup
	for i := range runs {
		if i%parallel == 0 {
			wg.Wait()
		}
		wg.Go(func() {
			d, err := transition(ctx, be, cname, fmt.Sprintf("blob-%d", i), crash, poll)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			s = append(s, d)
		})
	}
	wg.Wait()
	return s, errors.Join(errs...)
}

func transition(ctx context.Context, be backend, cname, blob string, crash bool, poll time.Duration) (time.Duration, error) {
	cca, ta := be.client(cname)
	ccb, _ := be.client(cname)
	opts := &azlease.ElectorOptions{PollInterval: poll}
	a, err := azlease.NewElector(cca, blob, opts)
	if err != nil {
		return 0, err
	}
	b, err := azlease.NewElector(ccb, blob, opts)
	if err != nil {
		return 0, err
	}
	if err := a.Start(ctx, nil); err != nil {
		return 0, err
	}
	defer a.Stop(ctx)
	if err := waitFor(a.IsLeader, time.Minute); err != nil {
		return 0, err
	}
	if err := b.Start(ctx, nil); err != nil {
		return 0, err
	}
	defer b.Stop(ctx)
	// A random phase relative to renewals and polls.
	time.Sleep(3*time.Second + time.Duration(time.Now().UnixNano()%int64(5*time.Second)))
	start := time.Now()
	if crash {
		ta.dead.Store(true)
	} else if err := a.Stop(ctx); err != nil {
		return 0, err
	}
	if err := waitFor(b.IsLeader, 2*time.Minute); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

func waitFor(cond func() bool, limit time.Duration) error {
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if cond() {
			return nil
		}
	}
	return errors.New("timed out")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// manyHeld locks n mutexes over one client (shared connections) and holds
// them, measuring this process's CPU, requests, goroutines and memory.
func manyHeld(ctx context.Context, b *strings.Builder, be backend, n int, hold time.Duration) error {
	cc, counter := be.client(fmt.Sprintf("held-%d", time.Now().UnixNano()))
	g0 := runtime.NumGoroutine()
	var ms0 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	locks := make([]*azlease.Lock, 0, n)
	for i := range n {
		m, err := azlease.NewMutex(cc, fmt.Sprintf("m-%04d", i), nil)
		if err != nil {
			return err
		}
		l, err := m.Lock(ctx)
		if err != nil {
			return err
		}
		locks = append(locks, l)
	}
	time.Sleep(5 * time.Second) // let the renewals spread out
	var ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	g1 := runtime.NumGoroutine()
	r0, c0, t0 := counter.requests.Load(), cpuTime(), time.Now()
	time.Sleep(hold)
	r1, c1, elapsed := counter.requests.Load(), cpuTime(), time.Since(t0)
	lost := 0
	for _, l := range locks {
		if !l.Valid() {
			lost++
		}
		if err := l.Unlock(ctx); err != nil {
			lost++
		}
	}
	perHour := float64(time.Hour) / float64(elapsed)
	reqs := float64(r1-r0) * perHour
	cpu := time.Duration(float64(c1-c0) * perHour)
	fmt.Fprintf(b, "%d mutexes held at once over one container client (shared connections) on Azurite for %v, default settings\n", n, hold.Round(time.Second))
	fmt.Fprintf(b, "(renew every 5 s, each renewal up to 10 %% early so that they do not fall in step). Figures are this process's\n")
	fmt.Fprintf(b, "(azlease, azblob, net/http); Azurite's own CPU is not included.\n\n")
	fmt.Fprintf(b, "| measure | per hour, %d held | per held mutex per hour |\n|---|---:|---:|\n", n)
	fmt.Fprintf(b, "| requests | %.0f | %.0f |\n", reqs, reqs/float64(n))
	fmt.Fprintf(b, "| client CPU | %v | %v |\n", cpu.Round(time.Millisecond), (cpu / time.Duration(n)).Round(time.Microsecond))
	fmt.Fprintf(b, "\nGoroutines while held: %d more than before (none per held lock: each lock has two timers, and a renewal runs\n", g1-g0)
	fmt.Fprintf(b, "on the goroutine of the timer that fired; the count is the renewals in flight at that instant and the\n")
	fmt.Fprintf(b, "connections' own goroutines). Heap and stacks: %.1f MiB more (%.1f KiB per held lock). Locks lost: %d.\n",
		float64(int64(ms1.HeapInuse+ms1.StackInuse)-int64(ms0.HeapInuse+ms0.StackInuse))/(1<<20),
		float64(int64(ms1.HeapInuse+ms1.StackInuse)-int64(ms0.HeapInuse+ms0.StackInuse))/1024/float64(n), lost)
	if lost > 0 {
		return fmt.Errorf("%d of %d held mutexes were lost", lost, n)
	}
	return nil
}
