//go:build linux

package main

// The multi-process proof of the command's promise: three 'azlease lead'
// processes with default timing flags run a command that ignores SIGTERM and
// stamps every action with CLOCK_MONOTONIC; a seeded schedule pauses the
// leader's azlease past its lease, kills it, and stops it with SIGTERM. No
// two commands' actions may overlap, and every paused leader contends again.

import (
	"bufio"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

var (
	chaosSeeds  = flag.Int("chaos.seeds", 2, "seeded schedules of TestLeadChaosNoOverlap (run at once)")
	chaosEvents = flag.Int("chaos.events", 5, "events per schedule of TestLeadChaosNoOverlap")
)

// workerEnv, when set in the environment of the test binary, makes it the
// command under the lease (see runWorker) instead of running tests: its
// value is the file to append actions to.
const workerEnv = "AZLEASE_TEST_WORKER"

// runWorker is the command of the chaos tests: it ignores SIGTERM, SIGINT and
// SIGHUP, and every 20 ms appends "pid identity epoch mono shard" to the
// file, where mono is CLOCK_MONOTONIC in nanoseconds read just before the
// write, and shard is AZLEASE_SHARD ("-" outside azlease shards).
// One line is one write under O_APPEND, so lines of several workers never
// mix.
func runWorker(path string) {
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		os.Exit(3)
	}
	prefix := fmt.Sprintf("%d %s %s ", os.Getpid(), os.Getenv("AZLEASE_IDENTITY"), os.Getenv("AZLEASE_EPOCH"))
	shard := os.Getenv("AZLEASE_SHARD")
	if shard == "" {
		shard = "-"
	}
	// Under azlease shards with AZLEASE_TEST_WORKER_LOADS ("shard=load,…";
	// other shards 1), it reports its shard's load too.
	load, loadFile := "", os.Getenv("AZLEASE_LOAD_FILE")
	if spec := os.Getenv("AZLEASE_TEST_WORKER_LOADS"); spec != "" && loadFile != "" {
		load = "1"
		for _, item := range strings.Split(spec, ",") {
			if k, v, ok := strings.Cut(item, "="); ok && k == shard {
				load = v
			}
		}
	}
	for {
		if load != "" {
			_ = os.WriteFile(loadFile, []byte(load+"\n"), 0o644)
		}
		var ts unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
		if _, err := f.WriteString(prefix + strconv.FormatInt(ts.Nano(), 10) + " " + shard + "\n"); err != nil {
			os.Exit(4)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// action is one line of a worker.
type action struct {
	pid      int
	identity string
	epoch    uint64
	mono     int64
	shard    string
}

func readActions(t *testing.T, path string) []action {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	defer f.Close()
	var out []action
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var a action
		if _, err := fmt.Sscan(sc.Text(), &a.pid, &a.identity, &a.epoch, &a.mono, &a.shard); err != nil {
			continue // a line cut by a kill mid-write (cannot happen with O_APPEND, but the check must not)
		}
		out = append(out, a)
	}
	return out
}

// incarnation is one run of the worker: from its first action to its last.
type incarnation struct {
	pid         int
	identity    string
	shard       string
	epoch       uint64
	first, last int64
	n           int
}

func incarnations(as []action) []incarnation {
	by := map[int]*incarnation{}
	for _, a := range as {
		in := by[a.pid]
		if in == nil {
			in = &incarnation{pid: a.pid, identity: a.identity, shard: a.shard, epoch: a.epoch, first: a.mono, last: a.mono}
			by[a.pid] = in
		}
		in.first, in.last = min(in.first, a.mono), max(in.last, a.mono)
		in.n++
	}
	var out []incarnation
	for _, in := range by {
		out = append(out, *in)
	}
	slices.SortFunc(out, func(a, b incarnation) int { return int(a.first - b.first) })
	return out
}

// checkNoOverlap fails unless every incarnation's actions come after the
// previous one's last action, with epochs that grow from holder to holder
// (a command run again under the same term keeps its epoch).
func checkNoOverlap(t *testing.T, ins []incarnation) {
	t.Helper()
	for i := 1; i < len(ins); i++ {
		prev, cur := ins[i-1], ins[i]
		if cur.first <= prev.last {
			t.Errorf("two commands acted at once for %v: %s (pid %d, epoch %d) until %d and %s (pid %d, epoch %d) from %d",
				time.Duration(prev.last-cur.first), prev.identity, prev.pid, prev.epoch, prev.last, cur.identity, cur.pid, cur.epoch, cur.first)
		}
		if cur.epoch < prev.epoch || (cur.epoch == prev.epoch && cur.identity != prev.identity) {
			t.Errorf("epoch did not grow: %s %d then %s %d", prev.identity, prev.epoch, cur.identity, cur.epoch)
		}
	}
}

// TestLeadChaosNoOverlap runs the schedule of -chaos.seeds seeds (one by
// default, about a minute and a half of mostly waiting).
func TestLeadChaosNoOverlap(t *testing.T) {
	t.Parallel()
	for seed := range *chaosSeeds {
		t.Run(strconv.Itoa(seed), func(t *testing.T) {
			t.Parallel()
			chaosRun(t, uint64(seed))
		})
	}
}

func chaosRun(t *testing.T, seed uint64) {
	w := newWorld(t, emulatorConn(t))
	actions := w.path("actions")
	self, err := os.Executable()
	require.NoError(t, err)
	env := append(w.env(), workerEnv+"="+actions)
	rng := rand.New(rand.NewPCG(seed, 0xc4a05))
	t.Logf("seed %d: reproduce with -run 'TestLeadChaosNoOverlap/^%d$' -chaos.seeds %d", seed, seed, seed+1)

	procs := map[string]*proc{}
	next := 0
	start := func() {
		id := fmt.Sprintf("n%d", next)
		next++
		// Default timing flags: only the identity and the container.
		procs[id] = startProc(t, env, "lead", "--container", w.container, "--identity", id, "svc", "--", self)
	}
	for range 3 {
		start()
	}
	// leader waits for a worker of a running azlease that acts after
	// since, and returns its identity. A killed azlease's worker may still
	// act for a moment after since: its guardian kills it on noticing
	// (within the term it held, so it overlaps nobody), but it leads no
	// more.
	leader := func(since int64, limit time.Duration) string {
		t.Helper()
		for end := time.Now().Add(limit); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			as := readActions(t, actions)
			if len(as) > 0 && as[len(as)-1].mono > since && procs[as[len(as)-1].identity] != nil {
				return as[len(as)-1].identity
			}
		}
		t.Fatalf("no command acted within %v", limit)
		return ""
	}
	mono := func() int64 {
		var ts unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
		return ts.Nano()
	}
	// Generous bounds: a takeover after a crash needs the lease (15 s), up
	// to a minute more on Azure, and a poll (5 s + 20 %).
	const takeover = 45 * time.Second
	id := leader(0, 30*time.Second)
	var paused []string
	for ev := range *chaosEvents {
		p := procs[id]
		switch k := rng.IntN(4); k {
		case 0, 3: // pause past the lease, then resume (the likeliest to overlap: half the events)
			d := 16*time.Second + time.Duration(rng.IntN(10_000))*time.Millisecond
			t.Logf("event %d: pause %s for %v", ev, id, d.Round(time.Millisecond))
			p.signal(syscall.SIGSTOP)
			time.Sleep(d)
			p.signal(syscall.SIGCONT)
			paused = append(paused, id)
		case 1: // kill
			t.Logf("event %d: SIGKILL %s", ev, id)
			p.signal(syscall.SIGKILL)
			p.wait(10 * time.Second)
			delete(procs, id)
			start()
		case 2: // stop: SIGTERM, which the command ignores
			t.Logf("event %d: SIGTERM %s", ev, id)
			p.signal(syscall.SIGTERM)
			p.expect(128+int(syscall.SIGKILL), 20*time.Second) // CMD's status: killed after --kill-after
			delete(procs, id)
			start()
		}
		id = leader(mono(), takeover)
	}
	// Every paused leader contends again: it did not exit, and said so.
	for _, pid := range paused {
		p, ok := procs[pid]
		if !ok {
			continue // killed or stopped by a later event
		}
		select {
		case <-p.done:
			t.Errorf("%s exited after its pause (status %d); stderr:\n%s", pid, p.status(), p.stderr())
		default:
			waitStderr(t, p, "contending again", 20*time.Second)
		}
	}
	for _, p := range procs {
		p.signal(syscall.SIGKILL)
		p.wait(10 * time.Second)
	}
	ins := incarnations(readActions(t, actions))
	var summary []string
	for i, in := range ins {
		gap := ""
		if i > 0 {
			gap = fmt.Sprintf(" +%v", time.Duration(in.first-ins[i-1].last).Round(time.Millisecond))
		}
		summary = append(summary, fmt.Sprintf("%s %s epoch …%d (%d actions)", gap, in.identity, in.epoch%1000, in.n))
	}
	t.Logf("incarnations, with the gap before each: %s", strings.Join(summary, ", "))
	require.GreaterOrEqual(t, len(ins), 2, "the schedule changed the leader at least once")
	checkNoOverlap(t, ins)
}
