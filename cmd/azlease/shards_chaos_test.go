//go:build linux

package main

// The multi-process proof for azlease shards: replica processes with
// default timing flags, each running a command per owned shard that ignores
// SIGTERM and stamps its actions with CLOCK_MONOTONIC; a seeded schedule
// pauses replicas past their leases, kills them, stops them with SIGTERM
// and starts new ones. No two commands of one shard may act at once, and
// each shard's epochs grow.

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestShardsChaosNoOverlap(t *testing.T) {
	t.Parallel()
	for seed := range *chaosSeeds {
		t.Run(strconv.Itoa(seed), func(t *testing.T) {
			t.Parallel()
			shardsChaosRun(t, uint64(seed))
		})
	}
}

func shardsChaosRun(t *testing.T, seed uint64) {
	const k = 6
	w := newWorld(t, emulatorConn(t))
	actions := w.path("actions")
	self, err := os.Executable()
	require.NoError(t, err)
	env := append(w.env(), workerEnv+"="+actions)
	rng := rand.New(rand.NewPCG(seed, 0x5ba4d5))
	t.Logf("seed %d: reproduce with -run 'TestShardsChaosNoOverlap/^%d$' -chaos.seeds %d", seed, seed, seed+1)
	procs := map[string]*proc{}
	next := 0
	start := func() {
		id := fmt.Sprintf("r%d", next)
		next++
		procs[id] = startProc(t, env, "shards", "--container", w.container, "--identity", id, "--lease-duration", "15s", "grp", "--count", strconv.Itoa(k), "--", self)
	}
	for range 3 {
		start()
	}
	// owners waits until every shard's latest action is recent, and returns
	// the replicas that own shards.
	owners := func(limit time.Duration) []string {
		t.Helper()
		for end := time.Now().Add(limit); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
			latest := map[string]action{}
			for _, a := range readActions(t, actions) {
				latest[a.shard] = a
			}
			now := monoNow()
			var ids []string
			fresh := 0
			for _, a := range latest {
				if now-a.mono < int64(time.Second) {
					fresh++
					if !slices.Contains(ids, a.identity) {
						ids = append(ids, a.identity)
					}
				}
			}
			if fresh == k {
				slices.Sort(ids)
				return ids
			}
		}
		t.Fatalf("the %d shards did not all run within %v", k, limit)
		return nil
	}
	ids := owners(40 * time.Second)
	for ev := range *chaosEvents {
		id := ids[rng.IntN(len(ids))]
		p := procs[id]
		switch rng.IntN(4) {
		case 0, 3:
			d := 16*time.Second + time.Duration(rng.IntN(10_000))*time.Millisecond
			t.Logf("event %d: pause %s for %v", ev, id, d.Round(time.Millisecond))
			p.signal(syscall.SIGSTOP)
			time.Sleep(d)
			p.signal(syscall.SIGCONT)
		case 1:
			t.Logf("event %d: SIGKILL %s", ev, id)
			p.signal(syscall.SIGKILL)
			p.wait(10 * time.Second)
			delete(procs, id)
			start()
		case 2:
			t.Logf("event %d: SIGTERM %s", ev, id)
			p.signal(syscall.SIGTERM)
			p.expect(128+int(syscall.SIGTERM), 30*time.Second)
			delete(procs, id)
			start()
		}
		time.Sleep(2 * time.Second)
		ids = owners(60 * time.Second)
	}
	for _, p := range procs {
		p.signal(syscall.SIGKILL)
		p.wait(10 * time.Second)
	}
	byShard := map[string][]action{}
	for _, a := range readActions(t, actions) {
		byShard[a.shard] = append(byShard[a.shard], a)
	}
	require.Len(t, byShard, k)
	for s, as := range byShard {
		ins := incarnations(as)
		t.Logf("shard %s: %d owners in turn", s, len(ins))
		checkNoOverlap(t, ins)
	}
}

// TestShardsMultiProcessLoads (issue 33 item 10): four 'azlease shards'
// processes whose commands report their shard's load (shard 0 a hundred
// times the others'), then a shard added and one removed, one replica
// paused past its leases (SIGSTOP) and another killed (SIGKILL): no two
// commands of one shard ever act at once (CLOCK_MONOTONIC stamps), epochs
// grow, and the group is balanced again, shard 0 alone on its replica.
func TestShardsMultiProcessLoads(t *testing.T) {
	t.Parallel()
	w := newWorld(t, emulatorConn(t))
	actions := w.path("actions")
	self, err := os.Executable()
	require.NoError(t, err)
	env := append(w.env(), workerEnv+"="+actions, "AZLEASE_TEST_WORKER_LOADS=0=100")
	procs := map[string]*proc{}
	for i := range 4 {
		id := fmt.Sprintf("r%d", i)
		procs[id] = startProc(t, env, "shards", "--container", w.container, "--identity", id, fast, "--lease-duration", "15s", "grp", "--count", "8", "--", self)
	}
	status := func() assignmentJSON {
		st := w.run(10*time.Second, "status", "--json", "--shards", "grp")
		var a assignmentJSON
		require.NoError(t, json.Unmarshal([]byte(st.stdout()), &a), st.stdout())
		return a
	}
	// recent reports the shards whose latest action is under a second old.
	recent := func() map[string]string {
		latest := map[string]action{}
		for _, a := range readActions(t, actions) {
			latest[a.shard] = a
		}
		out := map[string]string{}
		for s, a := range latest {
			if monoNow()-a.mono < int64(time.Second) {
				out[s] = a.identity
			}
		}
		return out
	}
	balanced := func(want []string, limit time.Duration) assignmentJSON {
		t.Helper()
		var a assignmentJSON
		for end := time.Now().Add(limit); ; time.Sleep(time.Second) {
			a = status()
			owns := map[string]int{}
			host := ""
			for _, s := range a.Shards {
				owns[s.Owner]++
				if s.Name == "0" {
					host = s.Owner
				}
			}
			r := recent()
			running := 0
			for _, s := range want {
				if r[s] != "" {
					running++
				}
			}
			if a.Balanced && a.ByLoad && slices.Equal(a.Hot, []string{"0"}) && owns[host] == 1 && running == len(want) && len(r) == len(want) {
				return a
			}
			require.True(t, time.Now().Before(end), "not balanced after %v: %+v; running %v", limit, a, r)
		}
	}
	names := []string{"0", "1", "2", "3", "4", "5", "6", "7"}
	a := balanced(names, 90*time.Second)
	t.Logf("balanced by load, level %.2f", a.Level)

	add := w.run(30*time.Second, "shards-add", "grp", "x1")
	require.Equal(t, 0, add.status(), add.stderr())
	rm := w.run(30*time.Second, "shards-remove", "grp", "7")
	require.Equal(t, 0, rm.status(), rm.stderr())
	names = []string{"0", "1", "2", "3", "4", "5", "6", "x1"}
	a = balanced(names, 60*time.Second)

	// Pause a replica that does not host shard 0 past its leases, and kill
	// another.
	host := ""
	for _, s := range a.Shards {
		if s.Name == "0" {
			host = s.Owner
		}
	}
	var others []string
	for id := range procs {
		if id != host {
			others = append(others, id)
		}
	}
	slices.Sort(others)
	paused, killed := others[0], others[1]
	t.Logf("pause %s for 20 s, kill %s", paused, killed)
	procs[paused].signal(syscall.SIGSTOP)
	procs[killed].signal(syscall.SIGKILL)
	procs[killed].wait(10 * time.Second)
	delete(procs, killed)
	time.Sleep(20 * time.Second)
	procs[paused].signal(syscall.SIGCONT)
	a = balanced(names, 2*time.Minute)
	t.Logf("balanced again: %d members", len(a.Members))

	for _, p := range procs {
		p.signal(syscall.SIGKILL)
		p.wait(10 * time.Second)
	}
	byShard := map[string][]action{}
	for _, a := range readActions(t, actions) {
		byShard[a.shard] = append(byShard[a.shard], a)
	}
	for s, as := range byShard {
		ins := incarnations(as)
		t.Logf("shard %s: %d owners in turn", s, len(ins))
		checkNoOverlap(t, ins)
	}
}
