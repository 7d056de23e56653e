//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Planned succession with real 'azlease lead' processes: a SIGTERM hands
// leadership straight to a standby, 'azlease yield' moves it from anywhere,
// 'azlease status' shows the candidates, and a rolling deploy moves it once.

// stamperEnv, when set in the environment of the test binary, makes it the
// command under the lease (runStamper): its value is the file to append to.
const stamperEnv = "AZLEASE_TEST_STAMPER"

// runStamper is the command of the succession tests: it appends "start
// IDENTITY EPOCH MONO" when it starts and "stop IDENTITY EPOCH MONO" when
// SIGTERM or SIGINT comes, and exits 0; MONO is CLOCK_MONOTONIC in
// nanoseconds, one clock for every process of the machine.
func runStamper(path string) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		os.Exit(3)
	}
	stamp := func(what string) {
		if _, err := fmt.Fprintf(f, "%s %s %s %d\n", what, os.Getenv("AZLEASE_IDENTITY"), os.Getenv("AZLEASE_EPOCH"), monoNow()); err != nil {
			os.Exit(4)
		}
	}
	stamp("start")
	<-sigs
	stamp("stop")
	os.Exit(0)
}

// stampLine is one line of the stamper.
type stampLine struct {
	what, id string
	epoch    uint64
	mono     int64
}

func readStamps(t *testing.T, path string) []stampLine {
	t.Helper()
	var out []stampLine
	for _, l := range lines(t, path) {
		f := strings.Fields(l)
		require.Len(t, f, 4, "line %q", l)
		e, err1 := strconv.ParseUint(f[2], 10, 64)
		m, err2 := strconv.ParseInt(f[3], 10, 64)
		require.NoError(t, err1)
		require.NoError(t, err2)
		out = append(out, stampLine{what: f[0], id: f[1], epoch: e, mono: m})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].mono < out[j].mono })
	return out
}

// leaderTerms reads the stamps as terms: who ran CMD, from when to when.
type stampTerm struct {
	id          string
	epoch       uint64
	start, stop int64 // stop 0 while running
}

func stampTerms(t *testing.T, path string) []stampTerm {
	var terms []stampTerm
	open := map[string]int{}
	for _, s := range readStamps(t, path) {
		key := s.id + " " + strconv.FormatUint(s.epoch, 10)
		switch s.what {
		case "start":
			open[key] = len(terms)
			terms = append(terms, stampTerm{id: s.id, epoch: s.epoch, start: s.mono})
		case "stop":
			if i, ok := open[key]; ok {
				terms[i].stop = s.mono
			}
		}
	}
	return terms
}

// TestLeadSuccessionCLI: three 'azlease lead' processes. 'azlease status'
// lists the candidates; 'azlease yield --to' moves leadership to the one
// named (exit 0); a SIGTERM to the leader hands leadership to the most
// recently started standby, whose CMD starts a fraction of a second after
// the old one stopped; a yield nobody can satisfy is declined (exit 75).
// No two CMDs ever run at once.
func TestLeadSuccessionCLI(t *testing.T) {
	onBoth(t, func(t *testing.T, w *world) {
		stamps := w.path("stamps")
		env := append(w.env(), stamperEnv+"="+stamps)
		self, err := os.Executable()
		require.NoError(t, err)
		lead := func(id string) *proc {
			return startProc(t, env, "lead", "--container", w.container, "--identity", id, "--poll-interval", "1s", "--label", "zone=z-"+id, "job", "--", self)
		}
		a := lead("a")
		waitLine(t, stamps, "start a", 30*time.Second)
		b := lead("b")
		time.Sleep(500 * time.Millisecond)
		c := lead("c")
		time.Sleep(3 * time.Second)

		st := w.run(20*time.Second, "status", "job")
		require.Zero(t, st.status(), st.stderr())
		for _, id := range []string{"a", "b", "c"} {
			assert.Contains(t, st.stdout(), id+"  priority 0  ready", st.stdout())
			assert.Contains(t, st.stdout(), "zone=z-"+id)
		}

		y := w.run(60*time.Second, "yield", "job", "--to", "b")
		require.Zero(t, y.status(), "stdout:\n%s\nstderr:\n%s", y.stdout(), y.stderr())
		assert.Contains(t, y.stdout(), "leadership moved from a to b")
		// yield reports the move once b holds the lease; b's CMD starts
		// a moment later. A SIGTERM before that would stop b without
		// running it (as it should), so wait for it.
		waitLine(t, stamps, "start b", 10*time.Second)

		stopped := monoNow()
		b.signal(syscall.SIGTERM)
		b.expect(0, 30*time.Second)
		waitLine(t, stamps, "start c", 10*time.Second)

		no := w.run(60*time.Second, "yield", "job", "--to", "nobody")
		assert.Equal(t, exitNotAcquired, no.status(), "stdout:\n%s\nstderr:\n%s", no.stdout(), no.stderr())
		assert.Contains(t, no.stderr(), "declined")

		// c leads: its CMD's status (0); a stands by: 128+15, as a standby
		// that a signal stops.
		for _, p := range []*proc{a, c} {
			p.signal(syscall.SIGTERM)
		}
		a.expect(128+15, 30*time.Second)
		c.expect(0, 30*time.Second)

		terms := stampTerms(t, stamps)
		var ids []string
		for i, tm := range terms {
			ids = append(ids, tm.id)
			require.NotZero(t, tm.stop, "%s's CMD stopped", tm.id)
			if i > 0 {
				require.Greater(t, tm.start, terms[i-1].stop, "CMDs never overlap")
				require.Greater(t, tm.epoch, terms[i-1].epoch)
			}
		}
		require.Equal(t, []string{"a", "b", "c"}, ids)
		yieldGap := time.Duration(terms[1].start - terms[0].stop)
		stopGap := time.Duration(terms[2].start - terms[1].stop)
		t.Logf("yield: %v without a leader; SIGTERM: %v from the signal to c's start, %v without a leader", yieldGap, time.Duration(terms[2].start-stopped), stopGap)
		assert.Less(t, stopGap, 2*time.Second, "a hand-off, not a poll (generous: race build, shared CPUs)")
		assert.Less(t, yieldGap, 2*time.Second)
	})
}

// rollingDeploy replaces n 'azlease lead' replicas one by one, new process
// first (as a Deployment with maxSurge 1 does): the new replica starts
// 1.5–4 s before the old one gets SIGTERM, with the default poll interval.
// With priorities, the new generation has the higher one. It returns the
// leader changes after the deploy began and the total leaderless time
// between them, from the CMDs' monotonic stamps.
func rollingDeploy(t *testing.T, w *world, n int, priorities bool, seed uint64) (changes int, leaderless time.Duration, gaps []time.Duration, finalNew bool) {
	stamps := w.path("stamps")
	env := append(w.env(), stamperEnv+"="+stamps)
	self, err := os.Executable()
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(seed, 0xd3910))
	start := func(id string, gen int) *proc {
		args := []string{"lead", "--container", w.container, "--identity", id, "--label", "version=" + strconv.Itoa(gen)}
		if priorities {
			args = append(args, "--priority", strconv.Itoa(gen))
		}
		return startProc(t, env, append(args, "svc", "--", self)...)
	}
	old := make([]*proc, n)
	for i := range old {
		old[i] = start(fmt.Sprintf("old-%d", i), 1)
	}
	waitLine(t, stamps, "start old-", 60*time.Second)
	time.Sleep(6 * time.Second) // every replica has polled and published its candidacy
	began := monoNow()
	news := make([]*proc, n)
	for i, j := range rng.Perm(n) {
		news[i] = start(fmt.Sprintf("new-%d", i), 2)
		time.Sleep(1500*time.Millisecond + time.Duration(rng.Int64N(int64(2500*time.Millisecond))))
		old[j].signal(syscall.SIGTERM)
		stopped(t, old[j])
	}
	time.Sleep(2 * time.Second)
	terms := stampTerms(t, stamps)
	last := terms[len(terms)-1]
	require.Zero(t, last.stop, "someone leads at the end")
	finalNew = strings.HasPrefix(last.id, "new-")
	for i := 1; i < len(terms); i++ {
		require.Greater(t, terms[i].start, terms[i-1].stop, "CMDs never overlap: %+v", terms)
		if terms[i].start > began {
			changes++
			g := time.Duration(terms[i].start - terms[i-1].stop)
			gaps = append(gaps, g)
			leaderless += g
		}
	}
	for _, p := range news {
		p.signal(syscall.SIGTERM)
	}
	for _, p := range news {
		stopped(t, p)
	}
	return changes, leaderless, gaps, finalNew
}

// stopped waits for a replica that got SIGTERM to exit: 0 (the leader: its
// CMD's status) or 128+15 (a standby).
func stopped(t *testing.T, p *proc) {
	t.Helper()
	p.wait(60 * time.Second)
	if st := p.status(); st != 0 && st != 128+15 {
		t.Fatalf("azlease %v exited %d after SIGTERM, want 0 or 143; stderr:\n%s", p.args, st, p.stderr())
	}
}

// TestLeadRollingDeploy: a rolling deploy of five 'azlease lead' replicas
// with the priority taken from the version moves leadership exactly once, to
// the new generation, with a fraction of a second without a leader; without
// priorities, a stopping leader still hands over to a standby that is not
// stopping (the most recently started: the new generation). The leaderless
// time is a benchmark figure (bench/results.md); only generous bounds are
// asserted here.
func TestLeadRollingDeploy(t *testing.T) {
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("-short: a rolling deploy of five replicas takes about a minute")
	}
	t.Parallel()
	for _, priorities := range []bool{true, false} {
		t.Run(map[bool]string{true: "priority-from-version", false: "no-priorities"}[priorities], func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, emulatorConn(t))
			changes, leaderless, gaps, finalNew := rollingDeploy(t, w, 5, priorities, 1)
			t.Logf("rolling deploy of 5: %d leader changes, %v without a leader in all %v", changes, leaderless, gaps)
			if report := os.Getenv("AZLEASE_ROLLING_REPORT"); report != "" {
				f, err := os.OpenFile(report, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
				require.NoError(t, err)
				fmt.Fprintf(f, "| 'azlease lead' processes, emulator over loopback HTTP, %s | %d | %v |\n", map[bool]string{true: "priority from the version", false: "no priorities"}[priorities], changes, leaderless.Round(time.Millisecond))
				require.NoError(t, f.Close())
			}
			require.True(t, finalNew, "a new-generation replica leads at the end")
			require.Equal(t, 1, changes, "leadership moved once")
			require.Less(t, leaderless, 3*time.Second, "generous: race build, shared CPUs")
		})
	}
}

// TestTermReasonsCLI: 'azlease watch' and 'azlease status' say how each
// term began and ended: a free lease, a yield ('azlease yield'), a planned
// stop (SIGTERM with a standby), and a crash (SIGKILL, nobody standing by:
// the lease expires, and the next leader took it over expired), with the
// instant each planned end happened and, for the expiry, only the bound the
// next holder knows.
//
// The yield is handed over when b takes the hand-off within its poll and a
// margin. b starved of CPU past that (2 cores shared with the race-built
// simulations) finds the lease released instead, a documented outcome: then
// what yield said and what the record says are checked to agree, and the
// scenario runs again in a fresh container, three times at most.
func TestTermReasonsCLI(t *testing.T) {
	t.Parallel()
	for attempt := 1; !termReasons(t, attempt); attempt++ {
		require.Less(t, attempt, 3, "the yield was released rather than handed over %d times", attempt)
	}
}

// termReasons is TestTermReasonsCLI's scenario; false when the yield was
// not handed over (checked, and the scenario stopped there).
func termReasons(t *testing.T, attempt int) bool {
	w := newWorld(t, emulatorConn(t))
	lead := func(id string) *proc {
		return w.az("lead", "--identity", id, "--poll-interval", "500ms", "job", "--", "sleep", "600")
	}
	watch := w.az("watch", "--json", "--poll-interval", "200ms", "job")
	waitLine(t, watch.outPath, `"state":"free"`, 30*time.Second)
	a := lead("a")
	waitLine(t, watch.outPath, `"holder":"a"`, 30*time.Second)
	b := lead("b")
	waitStandby(t, w, "job", "b", 30*time.Second) // as a user checks before 'yield --to b'
	y := w.run(60*time.Second, "yield", "job", "--to", "b")
	if !strings.Contains(y.stdout(), "leadership moved from a to b (epoch ") || !strings.Contains(y.stdout(), "): handed over") {
		t.Logf("attempt %d: the yield was not handed over; yield said:\n%s%s", attempt, y.stdout(), y.stderr())
		st := statusOf(t, w, "job")
		if strings.Contains(y.stderr(), "declined") {
			// b did not acknowledge within its poll and a margin: a
			// leads on, its term unchanged.
			assert.Equal(t, exitNotAcquired, y.status())
			assert.Equal(t, "a", st.Holder, "the record agrees")
			assert.Equal(t, "free", st.Began, "the record agrees")
		} else {
			assert.Contains(t, y.stdout()+y.stderr(), "not handed over", "yield says so")
			require.GreaterOrEqual(t, len(st.History), 2, "%+v", st)
			first, next := st.History[len(st.History)-1], st.History[len(st.History)-2] // newest first
			require.Equal(t, "a", first.Holder)
			assert.NotEqual(t, "yield", first.EndedBy, "the record agrees")
			assert.NotEqual(t, "yield", next.Began, "the record agrees")
		}
		for _, p := range []*proc{a, b, watch} {
			require.NoError(t, p.cmd.Process.Kill())
			p.wait(10 * time.Second)
		}
		return false
	}
	require.Zero(t, y.status(), "stdout:\n%s\nstderr:\n%s", y.stdout(), y.stderr())
	waitLine(t, watch.outPath, `"state":"leased","holder":"b"`, 30*time.Second)
	time.Sleep(2 * time.Second)
	signalled := time.Now()
	b.signal(syscall.SIGTERM)
	stopped(t, b) // its CMD's status: sleep's 143
	waitLine(t, watch.outPath, `"began":"stop"`, 30*time.Second)
	time.Sleep(2 * time.Second)
	require.NoError(t, a.cmd.Process.Kill())
	a.wait(10 * time.Second)
	waitLine(t, watch.outPath, `"state":"expired"`, 30*time.Second)
	c := lead("c")
	waitLine(t, watch.outPath, `"holder":"c"`, 30*time.Second)

	type line struct {
		State, Holder, Began, EndedBy string
		Ended, AtOrBefore             bool
	}
	var got []line
	for _, l := range lines(t, watch.outPath) {
		var e watchEvent
		require.NoError(t, json.Unmarshal([]byte(l), &e), l)
		got = append(got, line{e.State, e.Holder, e.Began, e.EndedBy, e.Ended != nil, e.EndedAtOrBefore != nil})
	}
	assert.Equal(t, []line{
		{"free", "", "", "", false, false},
		{"leased", "a", "free", "", false, false},
		{"ended", "a", "free", "yield", true, false},
		{"leased", "b", "yield", "", false, false},
		{"ended", "b", "yield", "stop", true, false},
		{"leased", "a", "stop", "", false, false},
		{"expired", "a", "stop", "expired", false, false}, // when is not known yet
		{"leased", "c", "expired", "", false, false},
	}, got, watch.stdout())

	js := w.run(20*time.Second, "status", "--json", "job")
	require.Zero(t, js.status(), js.stderr())
	var st statusJSON
	require.NoError(t, json.Unmarshal([]byte(js.stdout()), &st))
	assert.Equal(t, "expired", st.Began)
	require.Len(t, st.History, 4)
	var reasons []string
	for _, h := range st.History {
		reasons = append(reasons, h.Began+">"+h.EndedBy)
	}
	assert.Equal(t, []string{"expired>", "stop>expired", "yield>stop", "free>yield"}, reasons)
	crashed := st.History[1]
	require.NotNil(t, crashed.EndedAtOrBefore, "an expiry: a bound")
	assert.Nil(t, crashed.Ended, "never an exact instant for an expiry")
	assert.Equal(t, 15, crashed.LeaseSeconds)
	assert.False(t, crashed.EndedAtOrBefore.After(*st.Acquired), "at or before the next term")
	handed := st.History[2]
	require.NotNil(t, handed.Ended)
	assert.WithinDuration(t, signalled, *handed.Ended, 5*time.Second, "b stopped its work after its SIGTERM")
	assert.False(t, handed.Ended.After(*st.History[1].Acquired), "before a's term began")

	text := w.run(20*time.Second, "status", "job")
	require.Zero(t, text.status(), text.stderr())
	assert.Contains(t, text.stdout(), "took over after the previous holder's lease expired", text.stdout())
	assert.Contains(t, text.stdout(), "began: stop; ended: its lease expired at or before", text.stdout())
	assert.Contains(t, text.stdout(), "began: yield; ended: handed over (planned stop) at", text.stdout())
	c.signal(syscall.SIGTERM)
	stopped(t, c)
	watch.signal(syscall.SIGTERM)
	watch.expect(0, 10*time.Second)
	return true
}

// TestYieldReleasedIsReported: a successor that does not take a yield's
// hand-off over in time (here paused with SIGSTOP; on a loaded host,
// starved of CPU) finds the lease released, as documented; 'azlease yield'
// reports what the record says rather than a hand-over: here the old
// leader took the lease back, so leadership did not move (exit 75), and
// the record shows the release.
func TestYieldReleasedIsReported(t *testing.T) {
	t.Parallel()
	w := newWorld(t, emulatorConn(t))
	// a's command takes a second to stop: the test pauses b in between,
	// after b acknowledged and before the hand-off names it.
	slowStop := `trap "sleep 1; exit 0" TERM; while :; do sleep 0.1; done`
	a := w.az("lead", "--log-level", "info", "--identity", "a", "--poll-interval", "500ms", "job", "--", "sh", "-c", slowStop)
	waitStandby(t, w, "job", "", 30*time.Second) // a leads
	b := w.az("lead", "--identity", "b", "--poll-interval", "500ms", "job", "--", "sleep", "600")
	waitStandby(t, w, "job", "b", 30*time.Second)
	y := w.az("yield", "job", "--to", "b")
	waitLine(t, a.errPath, "azlease: handing leadership over", 30*time.Second)
	b.signal(syscall.SIGSTOP)
	y.wait(60 * time.Second)
	b.signal(syscall.SIGCONT)
	assert.Equal(t, exitNotAcquired, y.status(), "stdout:\n%s\nstderr:\n%s", y.stdout(), y.stderr())
	assert.Contains(t, y.stderr(), "leadership did not move: a leads again", y.stderr())
	assert.Contains(t, y.stderr(), "the lease was not handed over; a took the lease after the previous holder released it", y.stderr())
	assert.NotContains(t, y.stdout(), "leadership moved", y.stdout())

	st := statusOf(t, w, "job")
	require.GreaterOrEqual(t, len(st.History), 2)
	assert.Equal(t, "a", st.History[0].Holder)
	assert.Equal(t, "released", st.History[0].Began, "the record agrees with what yield said")
	assert.Equal(t, "released", st.History[1].EndedBy)
	a.signal(syscall.SIGTERM)
	b.signal(syscall.SIGTERM)
	stopped(t, a)
	stopped(t, b)
}

// waitStandby waits until 'azlease status --json' shows name led and, if
// id is not "", id a ready standby (the leader keeps it ready to take
// over): what to check before 'azlease yield --to id'.
func waitStandby(t *testing.T, w *world, name, id string, limit time.Duration) {
	t.Helper()
	end := time.Now().Add(limit)
	for {
		s := statusOf(t, w, name)
		c, ok := candidateIn(s, id)
		if s.Leased && s.Holder != "" && (id == "" || ok && c.Ready && c.Standby) {
			return
		}
		require.True(t, time.Now().Before(end), "%s: no leader with %q a ready standby within %v: %+v", name, id, limit, s)
		time.Sleep(100 * time.Millisecond)
	}
}

// statusOf runs 'azlease status --json name' and parses it.
func statusOf(t *testing.T, w *world, name string) statusJSON {
	t.Helper()
	p := w.run(20*time.Second, "status", "--json", name)
	require.Zero(t, p.status(), p.stderr())
	var s statusJSON
	require.NoError(t, json.Unmarshal([]byte(p.stdout()), &s), p.stdout())
	return s
}

// candidateIn finds the candidate id in s.
func candidateIn(s statusJSON, id string) (candidateJSON, bool) {
	for _, c := range s.Candidates {
		if c.Identity == id {
			return c, true
		}
	}
	return candidateJSON{}, false
}

// TestLeadKilledStandbyShownGone: a standby 'azlease lead' of priority 5
// killed with SIGKILL (it cannot take its candidacy back) is shown gone, not
// ready, by 'azlease status' and 'azlease watch --candidates' within a lease
// duration and a poll of its death (and a second: storage's clock counts
// whole seconds), not listed as a ready standby for half an hour; a stopping
// leader then hands over to the live standby.
func TestLeadKilledStandbyShownGone(t *testing.T) {
	onBoth(t, func(t *testing.T, w *world) {
		stamps := w.path("stamps")
		env := append(w.env(), stamperEnv+"="+stamps)
		self, err := os.Executable()
		require.NoError(t, err)
		lead := func(id string, extra ...string) *proc {
			args := append([]string{"lead", "--container", w.container, "--identity", id}, extra...)
			return startProc(t, env, append(args, "job", "--", self)...)
		}
		a := lead("a")
		waitLine(t, stamps, "start a", 30*time.Second)
		watch := w.az("watch", "--candidates", "--json", "--poll-interval", "500ms", "job")
		b := lead("b", "--priority", "5")
		c := lead("c")
		for start := time.Now(); ; time.Sleep(500 * time.Millisecond) {
			s := statusOf(t, w, "job")
			bc, okb := candidateIn(s, "b")
			_, okc := candidateIn(s, "c")
			if okb && okc && bc.Ready {
				break
			}
			require.Less(t, time.Since(start), 30*time.Second, "b and c listed, b ready: %+v", s.Candidates)
		}

		b.signal(syscall.SIGKILL)
		killed := time.Now()
		b.wait(10 * time.Second)
		var goneAfter time.Duration
		for goneAfter == 0 {
			s := statusOf(t, w, "job")
			bc, ok := candidateIn(s, "b")
			require.True(t, ok, "still listed (as gone) for a while")
			if bc.Gone {
				require.False(t, bc.Ready, "a gone candidate is not ready")
				require.NotNil(t, bc.Refreshed)
				goneAfter = time.Since(killed)
			} else {
				require.Less(t, time.Since(killed), time.Minute, "b shown gone")
				time.Sleep(500 * time.Millisecond)
			}
		}
		t.Logf("status shows the killed standby gone %v after SIGKILL", goneAfter.Round(time.Millisecond))
		bound := 15*time.Second + time.Second + time.Second + 4*time.Second
		assert.LessOrEqual(t, goneAfter, bound, "lease duration, storage's second, status's own cadence, + 4 s for process start-up on a busy machine")
		text := w.run(20*time.Second, "status", "job")
		assert.Contains(t, text.stdout(), "b  priority 5  gone (last seen ")
		assert.NotContains(t, text.stdout(), "b  priority 5  ready")

		// The watch printed b's change once, when it turned gone.
		var goneLines []watchEvent
		end := time.Now().Add(10 * time.Second)
		for len(goneLines) == 0 && time.Now().Before(end) {
			for _, l := range lines(t, watch.outPath) {
				var e watchEvent
				require.NoError(t, json.Unmarshal([]byte(l), &e), l)
				if e.Candidate != nil && e.Candidate.Identity == "b" && e.Candidate.Gone {
					goneLines = append(goneLines, e)
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
		require.Len(t, goneLines, 1, "watch:\n%s", watch.stdout())
		assert.Equal(t, watchCandidateChanged, goneLines[0].State)
		assert.LessOrEqual(t, goneLines[0].Time.Sub(killed), 15*time.Second+time.Second+500*time.Millisecond+4*time.Second)

		// A stop hands over to c, never to the dead b.
		a.signal(syscall.SIGTERM)
		a.expect(0, 30*time.Second)
		waitLine(t, stamps, "start c", 15*time.Second)
		c.signal(syscall.SIGTERM)
		c.expect(0, 30*time.Second)
		watch.signal(syscall.SIGTERM)
		watch.expect(0, 10*time.Second)
	})
}

// TestLeadYieldIsQuick: 'azlease yield' with the default poll interval (5 s)
// returns within about a second: the leader looks for the request every
// second, and its standby polls every second. Each yield's time is logged;
// the bound asserted is generous (race build, shared CPUs).
func TestLeadYieldIsQuick(t *testing.T) {
	onBoth(t, func(t *testing.T, w *world) {
		stamps := w.path("stamps")
		env := append(w.env(), stamperEnv+"="+stamps)
		self, err := os.Executable()
		require.NoError(t, err)
		lead := func(id string) *proc {
			return startProc(t, env, "lead", "--container", w.container, "--identity", id, "job", "--", self)
		}
		a := lead("a")
		waitLine(t, stamps, "start a", 30*time.Second)
		b := lead("b")
		c := lead("c")
		time.Sleep(12 * time.Second) // both polled; the leader's listing named its standby, which polled since
		var took []time.Duration
		for i := range 3 {
			start := time.Now()
			y := w.run(60*time.Second, "yield", "job")
			d := time.Since(start)
			require.Zero(t, y.status(), "yield %d: stdout:\n%s\nstderr:\n%s", i, y.stdout(), y.stderr())
			assert.Contains(t, y.stdout(), "leadership moved from ")
			took = append(took, d)
			time.Sleep(8 * time.Second) // the new leader names its standby, which polls since
		}
		t.Logf("azlease yield took %v (the command's own start-up included)", took)
		for _, d := range took {
			assert.Less(t, d, 5*time.Second, "about a second, not the leader's poll and then the successor's (generous: race build, shared CPUs)")
		}
		for _, p := range []*proc{a, b, c} {
			p.signal(syscall.SIGTERM)
		}
		for _, p := range []*proc{a, b, c} {
			stopped(t, p)
		}
		terms := stampTerms(t, stamps)
		for i := 1; i < len(terms); i++ {
			require.Greater(t, terms[i].start, terms[i-1].stop, "CMDs never overlap: %+v", terms)
		}
	})
}
