//go:build linux

package gocronlock

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

// The multi-process test: each scheduler is a real process (this test
// binary run again), with a clock of its own, on the emulator served over
// loopback. One is killed with SIGKILL while it runs a tick, and started
// again later; another is paused with SIGSTOP for longer than a lease and
// resumed. Every run is stamped with CLOCK_MONOTONIC in a shared file.

// Environment of a child.
const (
	mpChildEnv  = "GOCRONLOCK_MP_CHILD" // the child's identity; set: run as a child
	mpConnEnv   = "GOCRONLOCK_MP_CONN"
	mpSkewEnv   = "GOCRONLOCK_MP_SKEW"   // its clock's skew
	mpPeriodEnv = "GOCRONLOCK_MP_PERIOD" // the report job's period
	mpSlowEnv   = "GOCRONLOCK_MP_SLOW"   // the slow job's period and offset: "40s,17s"
	mpRunsEnv   = "GOCRONLOCK_MP_RUNS"   // the shared file of runs
	mpKilledEnv = "GOCRONLOCK_MP_KILLED" // exists once the test killed the slow job's first runner
)

const mpContainer = "gocronlock"

// mpPeriod is the report job's period in the multi-process test; the clocks'
// skews scale with it (±0.3 periods: ±1.5 s for 5 s).
var mpPeriod = flag.Duration("gocronlock.mp-period", 2*time.Second, "the report job's period in TestMultiProcessOncePerTick (whole seconds, at most 8s)")

func init() {
	runChild = func() (int, bool) {
		if os.Getenv(mpChildEnv) == "" {
			return 0, false
		}
		return mpChild(), true
	}
}

// monoNow reads CLOCK_MONOTONIC: one clock for all processes on the
// machine, which keeps running while a process is stopped.
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err) // cannot fail on Linux
	}
	return ts.Nano()
}

// mpChild is a replica: a gocron scheduler with two jobs under Lockers,
// "report" every GOCRONLOCK_MP_PERIOD (10 ms of work) and "slow" every
// GOCRONLOCK_MP_SLOW, whose first runner works until it is killed. Each run
// appends "start|end JOB ID TICK MONO" lines to the shared file. It stops
// on SIGTERM, and returns its exit status.
func mpChild() int {
	fail := func(what string, err error) int {
		fmt.Fprintf(os.Stderr, "child %s: %s: %v\n", os.Getenv(mpChildEnv), what, err)
		return 2
	}
	id := os.Getenv(mpChildEnv)
	skew, err := time.ParseDuration(os.Getenv(mpSkewEnv))
	if err != nil {
		return fail("skew", err)
	}
	period, err := time.ParseDuration(os.Getenv(mpPeriodEnv))
	if err != nil {
		return fail("period", err)
	}
	slow := strings.Split(os.Getenv(mpSlowEnv), ",")
	slowPeriod, err1 := time.ParseDuration(slow[0])
	slowOffset, err2 := time.ParseDuration(slow[len(slow)-1])
	if err := errors.Join(err1, err2); err != nil {
		return fail("slow", err)
	}
	runs, err := os.OpenFile(os.Getenv(mpRunsEnv), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fail("runs file", err)
	}
	defer runs.Close()
	cc, err := azlease.ContainerClientFromConnectionString(os.Getenv(mpConnEnv), mpContainer, nil)
	if err != nil {
		return fail("client", err)
	}
	clock := skewedClock{Clock: clockwork.NewRealClock(), skew: skew}
	once := &azlease.DoOnceOptions{Identity: id, PollInterval: 200 * time.Millisecond}
	report, err := NewLocker(cc, &Options{Period: period, Once: once})
	if err != nil {
		return fail("locker", err)
	}
	slowLocker, err := NewLocker(cc, &Options{Period: slowPeriod, Offset: slowOffset, Once: once})
	if err != nil {
		return fail("locker", err)
	}
	report.now, slowLocker.now = clock.Now, clock.Now
	s, err := gocron.NewScheduler(gocron.WithClock(clock), gocron.WithStopTimeout(30*time.Second))
	if err != nil {
		return fail("scheduler", err)
	}
	line := func(what, job string, tick time.Time) {
		_, _ = fmt.Fprintf(runs, "%s %s %s %d %d\n", what, job, id, tick.Unix(), monoNow())
	}
	_, err1 = s.NewJob(gocron.DurationJob(period), gocron.NewTask(func() {
		tick := report.Tick(clock.Now())
		line("start", "report", tick)
		time.Sleep(10 * time.Millisecond)
		line("end", "report", tick)
	}), gocron.WithName("report"), report.StartAt(), gocron.WithDistributedJobLocker(report))
	_, err2 = s.NewJob(gocron.DurationJob(slowPeriod), gocron.NewTask(func() {
		tick := slowLocker.Tick(clock.Now())
		line("start", "slow", tick)
		if _, err := os.Stat(os.Getenv(mpKilledEnv)); err != nil {
			time.Sleep(time.Minute) // killed meanwhile
		}
		time.Sleep(10 * time.Millisecond)
		line("end", "slow", tick)
	}), gocron.WithName("slow"), slowLocker.StartAt(), gocron.WithDistributedJobLocker(slowLocker))
	if err := errors.Join(err1, err2); err != nil {
		return fail("jobs", err)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	s.Start()
	select {
	case <-stop:
	case <-time.After(5 * time.Minute):
		return fail("limit", errors.New("not stopped within 5 minutes"))
	}
	if err := s.Shutdown(); err != nil {
		return fail("shutdown", err)
	}
	return 0
}

// mpRun is a line of the runs file.
type mpRun struct {
	what, job, id string
	tick          int64 // Unix seconds
	mono          int64
}

func readRuns(t *testing.T, path string) []mpRun {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []mpRun
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r mpRun
		_, err := fmt.Sscanf(sc.Text(), "%s %s %s %d %d", &r.what, &r.job, &r.id, &r.tick, &r.mono)
		require.NoError(t, err, "line %q", sc.Text())
		out = append(out, r)
	}
	require.NoError(t, sc.Err())
	return out
}

// mpProc is a running child.
type mpProc struct {
	id     string
	skew   time.Duration
	cmd    *exec.Cmd
	exited chan struct{} // closed when it has exited; err is then its Wait's
	err    error
}

// TestMultiProcessOncePerTick: five schedulers as processes, clocks skewed
// by up to ±0.6 s and started 0.6 s apart from first to last, run "report"
// every 2 s (the 5 s and ±1.5 s of the fake-time test, scaled so that a run
// sees many ticks: what matters is the skew's share of the period;
// -gocronlock.mp-period 5s runs it unscaled) and "slow" every 40 s. The
// first runner of the slow job's tick is killed (SIGKILL) mid-run: a
// survivor takes the tick over when its lease expires and runs it. Another
// is stopped (SIGSTOP) for 20 s, longer than a lease, and resumed; the
// killed one is started again. Every report tick from the first to the last
// runs exactly once, none missed; the slow tick runs twice (the killed run
// and the takeover), the takeover after the kill, by another replica.
func TestMultiProcessOncePerTick(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of real time; -short skips it")
	}
	srv := azleasetest.New(nil)
	ep, err := srv.Listen("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ep.Close(); srv.Close() })
	dir := t.TempDir()
	runsPath, killedPath := filepath.Join(dir, "runs"), filepath.Join(dir, "killed")
	require.NoError(t, os.WriteFile(runsPath, nil, 0o644))
	exe, err := os.Executable()
	require.NoError(t, err)

	period := *mpPeriod
	require.True(t, period >= time.Second && period <= 8*time.Second && period%time.Second == 0, "-gocronlock.mp-period %v", period)
	const slowPeriod = 40 * time.Second
	// The slow job's tick comes 8 s from now or so, half a period after a
	// report tick, so that the kill cuts no report run short.
	slowTick := time.Now().Add(8 * time.Second).Truncate(period).Add(period / 2).Truncate(time.Second)
	slowOffset := time.Duration(slowTick.Unix()%int64(slowPeriod/time.Second)) * time.Second
	start := func(id string, skew time.Duration) *mpProc {
		p := &mpProc{id: id, skew: skew, exited: make(chan struct{})}
		p.cmd = exec.Command(exe, "-test.run=^$")
		p.cmd.Env = append(os.Environ(), mpChildEnv+"="+id, mpConnEnv+"="+ep.ConnectionString(), mpSkewEnv+"="+skew.String(),
			mpPeriodEnv+"="+period.String(), mpSlowEnv+"="+slowPeriod.String()+","+slowOffset.String(),
			mpRunsEnv+"="+runsPath, mpKilledEnv+"="+killedPath, "GORACE=atexit_sleep_ms=0")
		p.cmd.Stderr = os.Stderr
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		require.NoError(t, p.cmd.Start())
		go func() {
			p.err = p.cmd.Wait()
			close(p.exited)
		}()
		t.Cleanup(func() {
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			_ = p.cmd.Process.Kill()
			<-p.exited
		})
		return p
	}
	procs := map[string]*mpProc{}
	for _, h := range fleetHosts { // their skews scaled to the period; started 0.15 s apart
		time.Sleep(150 * time.Millisecond)
		procs[h.name] = start(h.name, h.skew*period/(5*time.Second))
	}
	began := time.Now()

	// Kill the slow tick's first runner as soon as it starts it.
	var victim *mpProc
	waitFor(t, 20*time.Second, func() bool {
		for _, r := range readRuns(t, runsPath) {
			if r.job == "slow" && r.what == "start" {
				victim = procs[r.id]
				return true
			}
		}
		return false
	}, "the slow tick's first run")
	require.NoError(t, victim.cmd.Process.Kill())
	killed := monoNow()
	<-victim.exited
	require.NoError(t, os.WriteFile(killedPath, nil, 0o644))
	t.Logf("killed %s running the slow tick", victim.id)

	// Stop the replica that fires last (its clock the slowest) among the
	// others, mid-period, for 20 s.
	var stopped *mpProc
	for _, p := range procs {
		if p != victim && (stopped == nil || p.skew < stopped.skew) {
			stopped = p
		}
	}
	sleepUntilMidPeriod(period)
	require.NoError(t, stopped.cmd.Process.Signal(syscall.SIGSTOP))
	t.Logf("stopped %s", stopped.id)
	time.Sleep(20 * time.Second)
	require.NoError(t, stopped.cmd.Process.Signal(syscall.SIGCONT))
	restarted := start(victim.id+"-again", victim.skew)
	time.Sleep(16 * time.Second)

	// Stop everyone, mid-period.
	sleepUntilMidPeriod(period)
	stoppedAt := time.Now()
	for _, p := range append(mapValues(procs), restarted) {
		if p == victim {
			continue
		}
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	}
	for _, p := range append(mapValues(procs), restarted) {
		if p == victim {
			continue
		}
		select {
		case <-p.exited:
			require.NoError(t, p.err, "%s exits 0 on SIGTERM", p.id)
		case <-time.After(40 * time.Second):
			t.Fatalf("%s did not exit on SIGTERM", p.id)
		}
	}

	runs := readRuns(t, runsPath)
	byTick := map[string][]mpRun{} // "job tick"
	for _, r := range runs {
		k := fmt.Sprintf("%s %d", r.job, r.tick)
		byTick[k] = append(byTick[k], r)
	}
	// The report ticks from 4 s after the last start (a process with the
	// race detector takes a while to start) to a period before the stop.
	first := began.Add(4 * time.Second).Truncate(period).Add(period)
	last := stoppedAt.Add(-period).Truncate(period)
	n := 0
	for tk := first; !tk.After(last); tk = tk.Add(period) {
		rs := byTick[fmt.Sprintf("report %d", tk.Unix())]
		assert.Equal(t, []string{"end", "start"}, whats(rs), "report tick %s: one run, completed: %v", tk.Format("15:04:05"), rs)
		n++
	}
	for k, rs := range byTick {
		if strings.HasPrefix(k, "report ") {
			assert.LessOrEqual(t, len(rs), 2, "%s: %v", k, rs)
		}
	}
	slow := byTick[fmt.Sprintf("slow %d", slowTick.Unix())]
	require.Equal(t, []string{"end", "start", "start"}, whats(slow), "the slow tick: the killed run and the takeover: %v", slow)
	var takeover mpRun
	for _, r := range slow {
		if r.what == "end" {
			takeover = r
		}
	}
	assert.NotEqual(t, victim.id, takeover.id)
	for _, r := range slow {
		if r.what == "start" && r.id == takeover.id {
			assert.Greater(t, r.mono, killed, "the takeover started after the kill")
			t.Logf("report: %d ticks, one run each; slow tick taken over by %s %.1f s after the kill", n, takeover.id, float64(r.mono-killed)/1e9)
		}
	}
	require.GreaterOrEqual(t, n, int(36*time.Second/period))
}

func whats(rs []mpRun) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.what
	}
	slices.Sort(out)
	return out
}

func mapValues(m map[string]*mpProc) []*mpProc {
	out := make([]*mpProc, 0, len(m))
	for _, p := range m {
		out = append(out, p)
	}
	return out
}

// sleepUntilMidPeriod sleeps until half a period after a tick, when no
// replica fires.
func sleepUntilMidPeriod(period time.Duration) {
	now := time.Now()
	mid := now.Truncate(period).Add(period / 2)
	if mid.Before(now) {
		mid = mid.Add(period)
	}
	time.Sleep(time.Until(mid))
}

// waitFor polls cond every 20 ms until it holds, or fails the test after
// limit.
func waitFor(t *testing.T, limit time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
