package shards_test

// The world of a shards simulation: an emulator, replicas (shards.Group)
// that start, stop, crash, are cut off and paused, a fault hook that does
// all of that to their requests, a transport that counts every answer by
// status, and an observer that reads the assignment with shards.Inspect.

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/shards"
)

// observer is the client name of the test's own reads (Inspect, the final
// content): no fault ever strikes it, and its answers are not counted.
const observer = "observer"

var debugSim = os.Getenv("AZLEASE_DEBUG_SIM") != ""

// simReplica is one process running a replica of the group. A replica
// restarted with the same identity is a new simReplica with a client name
// of its own ("r03#2"), so faults that strike the old process (a crash is
// a partition for good) leave the new one alone.
type simReplica struct {
	id, client string
	weight     int
	g          *shards.Group
	dead       bool // crashed: cut off from storage for good
	stopping   bool // Stop was called
}

// simWorld is one simulated deployment of a group.
type simWorld struct {
	t     *testing.T
	srv   *azleasetest.Server
	obs   *container.Client
	group string
	names []string
	lease time.Duration // the replicas' lease duration (15 s, the default, unless a test sets it)
	// The shard set's changes (AddShards, RemoveShards), the shards' loads
	// (nil: none reported) and the replicas' zones, when a scenario has
	// them; mu guards them.
	added, removed []string
	loads          map[string]float64
	zoned          bool
	rec            *simRecorder
	resp           *statusCounter

	mu           sync.Mutex
	cut          map[string]azleasetest.Action // by client: crashed or partitioned, and how its requests die
	pausedUntil  map[string]time.Time          // by client: its process is paused until then
	outage       bool
	extra        azleasetest.FaultFunc // the seed's per-request faults
	reps         []*simReplica
	incarnations map[string]int
	rng          *rand.Rand // for choices that need no reproducibility (how a paused request waits)
	events       []string   // what happened, for AZLEASE_DEBUG_SIM
	stops        sync.WaitGroup
}

func newSimWorld(t *testing.T, k int, seed uint64) *simWorld {
	srv := azleasetest.NewServer(t, nil)
	w := &simWorld{
		t: t, srv: srv, group: "g", names: shards.Numbered(k), lease: 15 * time.Second, rec: newSimRecorder(), resp: newStatusCounter(),
		cut: map[string]azleasetest.Action{}, pausedUntil: map[string]time.Time{}, incarnations: map[string]int{},
		rng: rand.New(rand.NewPCG(seed, 0x9a05e)),
	}
	w.obs = srv.Client(observer) // also creates the container
	srv.SetFaults(w.faults)
	w.rec.loadOf = w.loadOf
	t.Cleanup(w.shutdown) // also when the test fails early: every goroutine of the bubble must end
	return w
}

// faults is the server's fault hook: crashes and partitions, pauses, the
// outage, then the seed's per-request faults.
func (w *simWorld) faults(r azleasetest.Request) azleasetest.Fault {
	if r.Client == observer {
		return azleasetest.Fault{}
	}
	w.mu.Lock()
	a, cut := w.cut[r.Client]
	until := w.pausedUntil[r.Client]
	outage, extra := w.outage, w.extra
	delayAnswer := w.rng.IntN(2) == 0
	w.mu.Unlock()
	if cut {
		return azleasetest.Fault{Action: a}
	}
	if d := time.Until(until); d > 0 {
		// The process is paused: a request it sends (or had sent) is held
		// until it resumes, or is applied now and its answer read only when
		// it resumes. Its own deadlines still run, as the timers of a
		// process that resumes fire at once.
		if delayAnswer {
			return azleasetest.Fault{DelayResponse: d}
		}
		return azleasetest.Fault{Delay: d}
	}
	if outage {
		return azleasetest.Fault{Action: azleasetest.Fail}
	}
	if extra != nil {
		return extra(r)
	}
	return azleasetest.Fault{}
}

func (w *simWorld) logf(format string, args ...any) {
	if !debugSim {
		return
	}
	w.mu.Lock()
	w.events = append(w.events, time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
	w.mu.Unlock()
}

// client returns a container client for a replica's process, through a
// transport that counts the answers it gets by status.
func (w *simWorld) client(name string) *container.Client {
	cred, err := container.NewSharedKeyCredential(azleasetest.Account, azleasetest.AccountKey)
	require.NoError(w.t, err)
	cc, err := container.NewClientWithSharedKeyCredential(
		"http://127.0.0.1:10000/"+azleasetest.Account+"/"+azleasetest.Container, cred,
		&container.ClientOptions{ClientOptions: azcore.ClientOptions{
			Transport: &countingTransport{next: w.srv.Transport(name), c: w.resp, client: name},
		}})
	require.NoError(w.t, err)
	return cc
}

// start starts a replica with identity id, its work taking drain to return
// once its context ends.
func (w *simWorld) start(id string, o shards.Options, drain time.Duration) *simReplica {
	w.t.Helper()
	w.mu.Lock()
	w.incarnations[id]++
	client := fmt.Sprintf("%s#%d", id, w.incarnations[id])
	w.mu.Unlock()
	o.Identity = id
	if o.LeaseDuration == 0 {
		o.LeaseDuration = w.lease
	}
	if o.Logger == nil {
		o.Logger = simLogger(client)
	}
	g, err := shards.New(w.client(client), w.group, w.names, &o)
	require.NoError(w.t, err)
	r := &simReplica{id: id, client: client, weight: max(o.Weight, 1), g: g}
	require.NoError(w.t, g.Start(context.Background(), w.rec.work(client, drain)))
	w.mu.Lock()
	w.reps = append(w.reps, r)
	w.mu.Unlock()
	w.logf("start %s (drain %v)", client, drain)
	return r
}

// startAlone starts the first replica with the default options and waits
// until it works on every shard.
func (w *simWorld) startAlone(id string) *simReplica {
	w.t.Helper()
	r := w.start(id, shards.Options{}, 0)
	_, ok, why := w.waitBalanced(w.liveIDs(), 10*time.Second, 100*time.Millisecond)
	require.True(w.t, ok, why)
	return r
}

// requireSafe checks every run of the work against its shard's grants and
// every checkpoint read (simRecorder.check).
func (w *simWorld) requireSafe() {
	w.t.Helper()
	s := w.rec.check(w.srv, w.obs, w.group, w.names, nil)
	require.True(w.t, s.ok(), "%v\n%s", s, strings.Join(s.report, "\n"))
}

// stop stops a replica cleanly, in a goroutine the world waits for.
func (w *simWorld) stop(r *simReplica) {
	w.mu.Lock()
	r.stopping = true
	w.mu.Unlock()
	w.logf("stop %s", r.client)
	w.stops.Go(func() { require.NoError(w.t, r.g.Stop(context.Background())) })
}

// stopNow stops a replica cleanly and waits for it.
func (w *simWorld) stopNow(r *simReplica) {
	w.mu.Lock()
	r.stopping = true
	w.mu.Unlock()
	w.logf("stop %s", r.client)
	require.NoError(w.t, r.g.Stop(context.Background()))
}

// crash cuts a replica's process off from storage for good: as far as
// storage and the others can tell, it died.
func (w *simWorld) crash(r *simReplica, how azleasetest.Action) {
	w.mu.Lock()
	r.dead = true
	w.cut[r.client] = how
	w.mu.Unlock()
	w.logf("crash %s (%v)", r.client, how)
}

func (w *simWorld) partition(r *simReplica, how azleasetest.Action) {
	w.mu.Lock()
	w.cut[r.client] = how
	w.mu.Unlock()
	w.logf("partition %s (%v)", r.client, how)
}

func (w *simWorld) heal(r *simReplica) {
	w.mu.Lock()
	if !r.dead {
		delete(w.cut, r.client)
	}
	w.mu.Unlock()
	w.logf("heal %s", r.client)
}

func (w *simWorld) pause(r *simReplica, d time.Duration) {
	w.mu.Lock()
	w.pausedUntil[r.client] = time.Now().Add(d)
	w.mu.Unlock()
	w.logf("pause %s for %v", r.client, d)
}

func (w *simWorld) setOutage(on bool) {
	w.mu.Lock()
	w.outage = on
	w.mu.Unlock()
	w.logf("outage %v", on)
}

func (w *simWorld) setFaults(f azleasetest.FaultFunc) {
	w.mu.Lock()
	w.extra = f
	w.mu.Unlock()
}

// breakLease breaks a shard's lease as an operator would, with the given
// break period, in a goroutine the world waits for; its outcome does not
// matter.
func (w *simWorld) breakLease(shard string, period time.Duration) {
	w.logf("break shard %s (period %v)", shard, period)
	l, err := azlease.NewLease(w.obs, w.group+"/shards/"+shard, nil)
	require.NoError(w.t, err)
	w.stops.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = l.Break(ctx, period)
	})
}

// calm ends every fault but the crashes: partitions heal, pauses and the
// outage end, the per-request faults stop.
func (w *simWorld) calm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.extra, w.outage = nil, false
	w.pausedUntil = map[string]time.Time{}
	for _, r := range w.reps {
		if !r.dead {
			delete(w.cut, r.client)
		}
	}
	w.events = append(w.events, time.Now().Format("15:04:05.000")+" calm")
}

// live returns the replicas that run and are not stopping or dead.
func (w *simWorld) live() []*simReplica {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []*simReplica
	for _, r := range w.reps {
		if !r.dead && !r.stopping {
			out = append(out, r)
		}
	}
	return out
}

// liveIDs returns the live replicas by identity.
func (w *simWorld) liveIDs() map[string]*simReplica {
	out := map[string]*simReplica{}
	for _, r := range w.live() {
		out[r.id] = r
	}
	return out
}

// shutdown stops everything: the live replicas cleanly (healed first), the
// dead ones while still cut off (their process ends without ever reaching
// storage again), and waits for every Stop.
func (w *simWorld) shutdown() {
	w.calm()
	w.mu.Lock()
	reps := append([]*simReplica(nil), w.reps...)
	w.mu.Unlock()
	for _, r := range reps {
		if !r.dead && !r.stopping {
			w.stop(r)
		}
	}
	w.stops.Wait()
	var wg sync.WaitGroup
	for _, r := range reps {
		if r.dead {
			wg.Go(func() { require.NoError(w.t, r.g.Stop(context.Background())) })
		}
	}
	wg.Wait()
	w.mu.Lock()
	w.cut = map[string]azleasetest.Action{}
	w.mu.Unlock()
}

// current is the group's set now: the static list, plus the shards added,
// minus those removed.
func (w *simWorld) current() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, s := range append(slices.Clone(w.names), w.added...) {
		if !slices.Contains(w.removed, s) {
			out = append(out, s)
		}
	}
	return out
}

// allNames is every shard the group ever had.
func (w *simWorld) allNames() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append(slices.Clone(w.names), w.added...)
}

// removedSet is the shards removed.
func (w *simWorld) removedSet() map[string]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]bool{}
	for _, s := range w.removed {
		out[s] = true
	}
	return out
}

// loadOf is a shard's load for its work to report; false when the
// scenario reports none.
func (w *simWorld) loadOf(s string) (float64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.loads == nil {
		return 0, false
	}
	v, ok := w.loads[s]
	if !ok {
		v = 1
	}
	return v, true
}

// byCount reports whether the group balances by shard counts alone: no
// load, no zone, no change of the set.
func (w *simWorld) byCount() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.loads == nil && !w.zoned && len(w.added)+len(w.removed) == 0
}

// maybeBalanced is a necessary condition for balance, from the work that
// runs, without a request: every shard's work runs at a live replica, each
// running floor(K·w/W) or one more when the group balances by count.
func (w *simWorld) maybeBalanced(want map[string]*simReplica) (bool, string) {
	running := w.rec.running()
	if len(want) == 0 {
		return false, "no live replica"
	}
	names := w.current()
	for _, s := range names {
		if running[s] == "" {
			return false, fmt.Sprintf("no work runs for shard %s", s)
		}
	}
	// A term whose validity deadline is near, although healthy terms are
	// renewed every third of the lease duration: one cut off until the
	// calm, whose renewals did not get through in time. It is about to be
	// lost and taken again.
	if s := w.rec.ending(w.lease / 3); s != "" {
		return false, fmt.Sprintf("the term of shard %s ends within %v", s, w.lease/3)
	}
	count := map[string]int{}
	for s, c := range running {
		r := want[replicaOf(c)]
		if r == nil || r.client != c {
			return false, fmt.Sprintf("the work of shard %s runs at %s, not live", s, c)
		}
		if !slices.Contains(names, s) {
			return false, fmt.Sprintf("the work of shard %s, removed, still runs at %s", s, c)
		}
		count[r.id]++
	}
	if !w.byCount() {
		return true, ""
	}
	total := 0
	for _, r := range want {
		total += r.weight
	}
	for id, r := range want {
		floor := len(names) * r.weight / total
		if count[id] < floor || count[id] > floor+1 {
			return false, fmt.Sprintf("%s (weight %d of %d) runs %d shards", id, r.weight, total, count[id])
		}
	}
	return true, ""
}

// balance is what the observer sees: whether the group is balanced for the
// live replicas in want (by identity), with each shard's work running at
// its owner, and if not, why.
func (w *simWorld) balance(want map[string]*simReplica) (bool, string) {
	if ok, why := w.maybeBalanced(want); !ok {
		return false, why
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := shards.Inspect(ctx, w.obs, w.group, w.names)
	if err != nil {
		return false, err.Error()
	}
	if a.Misplaced != 0 {
		return false, fmt.Sprintf("%d misplaced", a.Misplaced)
	}
	if a.Waiting != 0 {
		return false, fmt.Sprintf("%d shards wait for their cooldown to move", a.Waiting)
	}
	seen := 0
	for _, m := range a.Members {
		switch {
		case want[m.Name] != nil:
			seen++
			if m.Owns != m.Share {
				return false, fmt.Sprintf("%s owns %d, share %d", m.Name, m.Owns, m.Share)
			}
		case m.Owns != 0 || m.Share != 0:
			return false, fmt.Sprintf("%s (not live) owns %d, share %d", m.Name, m.Owns, m.Share)
		}
	}
	if seen != len(want) {
		return false, fmt.Sprintf("%d of %d live replicas are members", seen, len(want))
	}
	running := w.rec.running()
	for _, s := range a.Shards {
		switch {
		case s.HandingTo != "":
			return false, fmt.Sprintf("shard %s being handed to %s", s.Name, s.HandingTo)
		case want[s.Owner] == nil:
			return false, fmt.Sprintf("shard %s owned by %q", s.Name, s.Owner)
		case running[s.Name] != want[s.Owner].client:
			return false, fmt.Sprintf("shard %s owned by %s, work running at %q", s.Name, s.Owner, running[s.Name])
		}
	}
	return true, ""
}

// replicaOf returns the identity of a client name ("r03#2" → "r03").
func replicaOf(client string) string {
	id, _, _ := strings.Cut(client, "#")
	return id
}

// waitBalanced polls the observer every step until the group is balanced
// for want, and returns how long that took, or false after limit.
func (w *simWorld) waitBalanced(want map[string]*simReplica, limit, step time.Duration) (time.Duration, bool, string) {
	start := time.Now()
	why := ""
	for time.Since(start) <= limit {
		var ok bool
		if ok, why = w.balance(want); ok {
			return time.Since(start), true, ""
		}
		time.Sleep(step)
	}
	return 0, false, why
}

// simLogger logs a replica's group at Debug when AZLEASE_DEBUG_SHARDS is
// set.
func simLogger(client string) *slog.Logger {
	if os.Getenv("AZLEASE_DEBUG_SHARDS") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("replica", client)
}

// statusCounter counts the answers replicas got, by status, and keeps the
// first failures (4xx) with what they answered.
type statusCounter struct {
	mu       sync.Mutex
	byStatus map[int]int
	failures []string // the first 4xx answers
	total    int
	byClient map[string]int
	work     map[string]int // by client: the work's content reads and writes (Get, Put, Get Properties of a shard)
}

func newStatusCounter() *statusCounter {
	return &statusCounter{byStatus: map[int]int{}, byClient: map[string]int{}, work: map[string]int{}}
}

func (c *statusCounter) add(client, what string, work bool, status int, code string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if work {
		c.work[client]++
	}
	c.byStatus[status]++
	c.byClient[client]++
	c.total++
	if status >= 400 && status < 500 && len(c.failures) < 50 {
		c.failures = append(c.failures, fmt.Sprintf("%s %s %s: %d %s", time.Now().Format("15:04:05.000"), client, what, status, code))
	}
}

// snapshot returns the requests answered so far: in total, 4xx, and by
// client.
func (c *statusCounter) snapshot() (total, failed int, byClient map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for s, n := range c.byStatus {
		if s >= 400 && s < 500 {
			failed += n
		}
	}
	byClient = make(map[string]int, len(c.byClient))
	for k, v := range c.byClient {
		byClient[k] = v
	}
	return c.total, failed, byClient
}

// workRequests returns, by client, the requests of the work's content
// reads and writes answered so far.
func (c *statusCounter) workRequests() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.work)
}

func (c *statusCounter) failureLog() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.failures, "\n")
}

// countingTransport counts the answers of one client's requests by status.
type countingTransport struct {
	next   policy.Transporter
	c      *statusCounter
	client string
}

func (t *countingTransport) Do(req *http.Request) (*http.Response, error) {
	resp, err := t.next.Do(req)
	if err == nil {
		what := req.Method + " " + req.URL.Path
		comp := req.URL.Query().Get("comp")
		if comp != "" {
			what += "?comp=" + comp
		}
		if a := req.Header.Get("x-ms-lease-action"); a != "" {
			what += " " + a
		}
		work := comp == "" && req.Method != http.MethodDelete && strings.Contains(req.URL.Path, "/shards/")
		t.c.add(t.client, what, work, resp.StatusCode, resp.Header.Get("x-ms-error-code"))
	}
	return resp, err
}

// durations formats the p50, p90 and max of ds.
func durations(ds []time.Duration) string {
	if len(ds) == 0 {
		return "no samples"
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	q := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return fmt.Sprintf("p50 %v, p90 %v, max %v (n=%d)",
		q(0.5).Round(time.Millisecond), q(0.9).Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond), len(s))
}
