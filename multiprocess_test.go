//go:build linux

package azlease_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/internal/azurite"
)

// The multi-process layer. The in-process simulation runs every contender in
// one Go runtime, so it cannot pause all of one contender's goroutines at
// once. Here each contender is a real OS process (this test binary run again
// as a child) holding an Elector, and the test pauses one with SIGSTOP past
// its validity deadline and resumes it with SIGCONT, kills one with SIGKILL
// and stops one with SIGTERM. While a child believes it leads, it appends
// "identity epoch t_ns" lines to a shared file, stamped with the system-wide
// monotonic clock; afterwards the test checks that no term acted after
// another term's first action.

// Environment of a child: mpChildEnv selects the child's role; the others
// are its parameters.
const (
	mpChildEnv     = "AZLEASE_MP_CHILD" // "elector", "fairlock"
	mpConnEnv      = "AZLEASE_MP_CONN"
	mpContainerEnv = "AZLEASE_MP_CONTAINER"
	mpBlobEnv      = "AZLEASE_MP_BLOB"
	mpIdentityEnv  = "AZLEASE_MP_IDENTITY"
	mpActionsEnv   = "AZLEASE_MP_ACTIONS"  // the shared action file, created by the test
	mpLogEnv       = "AZLEASE_MP_LOG"      // the child's own JSON log
	mpPriorityEnv  = "AZLEASE_MP_PRIORITY" // optional: ElectorOptions.Priority
	mpPollEnv      = "AZLEASE_MP_POLL"     // optional: PollInterval, "default" for the library's (5 s)
)

const (
	// mpChildLimit bounds a child's life if the test never stops it (the
	// test also kills its children when it ends, and Pdeathsig when the
	// test process dies).
	mpChildLimit = 5 * time.Minute
	// mpActEvery is how often a leading child acts.
	mpActEvery = 10 * time.Millisecond
	// mpPoll is the children's PollInterval; their lease is 15 s (the
	// default, and Azure's minimum).
	mpPoll = time.Second
	// mpTakeover bounds a failover after a pause or a crash on a loaded
	// machine: the 15 s lease, a poll with jitter, and generous slack.
	mpTakeover = 45 * time.Second
	// mpExit bounds a graceful exit: the task returns at once, then one
	// release.
	mpExit = 30 * time.Second
)

// Child exit statuses other than 0.
const (
	mpStatusRunFailed   = 1
	mpStatusSetup       = 2
	mpStatusWriteFailed = 3
	mpStatusOverLimit   = 4
)

var errMPChildLimit = errors.New("mp child: ran for mpChildLimit without being stopped")

func init() {
	runChild = func() (int, bool) {
		switch role := os.Getenv(mpChildEnv); role {
		case "":
			return 0, false
		case "elector":
			return mpElectorChild(), true
		case "fairlock":
			return mpFairChild(), true // multiprocess_fair_test.go
		default:
			fmt.Fprintf(os.Stderr, "%s=%q: unknown child role\n", mpChildEnv, role)
			return mpStatusSetup, true
		}
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

// mpElectorChild is a contender: an Elector whose task appends an action line
// every mpActEvery while it leads. It stops gracefully on SIGTERM or SIGINT
// and returns its exit status.
func mpElectorChild() int {
	logf, err := os.OpenFile(os.Getenv(mpLogEnv), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mp child: open log:", err)
		return mpStatusSetup
	}
	defer logf.Close()
	log := slog.New(slog.NewJSONHandler(logf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	setupFailed := func(what string, err error) int {
		log.Error("mp child: "+what, slog.Any("error", err))
		fmt.Fprintf(os.Stderr, "mp child: %s: %v\n", what, err)
		return mpStatusSetup
	}
	actions, err := os.OpenFile(os.Getenv(mpActionsEnv), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return setupFailed("open action file", err)
	}
	defer actions.Close()
	id := os.Getenv(mpIdentityEnv)
	cc, err := azlease.ContainerClientFromConnectionString(os.Getenv(mpConnEnv), os.Getenv(mpContainerEnv), nil)
	if err != nil {
		return setupFailed("container client", err)
	}
	opts := &azlease.ElectorOptions{Identity: id, PollInterval: mpPoll, Logger: log}
	if v := os.Getenv(mpPriorityEnv); v != "" {
		if opts.Priority, err = strconv.Atoi(v); err != nil {
			return setupFailed("priority", err)
		}
	}
	switch v := os.Getenv(mpPollEnv); v {
	case "":
	case "default":
		opts.PollInterval = 0
	default:
		if opts.PollInterval, err = time.ParseDuration(v); err != nil {
			return setupFailed("poll interval", err)
		}
	}
	e, err := azlease.NewElector(cc, os.Getenv(mpBlobEnv), opts)
	if err != nil {
		return setupFailed("elector", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeoutCause(ctx, mpChildLimit, errMPChildLimit)
	defer cancel()
	var writeFailed atomic.Bool
	log.Info("mp child: contending", slog.Int("pid", os.Getpid()))
	err = e.Run(ctx, func(ctx context.Context, term *azlease.Term) error {
		epoch := term.Epoch()
		log.Info("mp child: task started", slog.Uint64("epoch", epoch))
		line := make([]byte, 0, 64)
		tick := time.NewTimer(0)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
			// Stamp, then check, then act. The check happens at or after
			// the stamp, so when it passes, the stamp is an instant at
			// which this process provably still believed it held the
			// term. (Checking first and stamping after would let a pause
			// between the two stamp the action with a time after the term
			// had ended: the test's fault, not the library's.) The one
			// window left out is a pause between the check and the write:
			// the line then lands late but with its earlier stamp. That
			// window, between a check and an externally visible action,
			// is what the fencing epoch is for.
			t0 := monoNow()
			if ctx.Err() != nil {
				log.Info("mp child: task stopping", slog.Uint64("epoch", epoch), slog.Any("cause", context.Cause(ctx)))
				return nil
			}
			line = fmt.Appendf(line[:0], "%s %d %d\n", id, epoch, t0)
			if _, err := actions.Write(line); err != nil { // one write per line: O_APPEND keeps lines whole
				writeFailed.Store(true)
				log.Error("mp child: append action", slog.Any("error", err))
				return err
			}
			tick.Reset(mpActEvery)
		}
	})
	switch {
	case err != nil:
		log.Error("mp child: run failed", slog.Any("error", err))
		fmt.Fprintln(os.Stderr, "mp child: run:", err)
		return mpStatusRunFailed
	case writeFailed.Load():
		return mpStatusWriteFailed
	case errors.Is(context.Cause(ctx), errMPChildLimit):
		log.Error("mp child: never stopped by the test")
		return mpStatusOverLimit
	}
	log.Info("mp child: exiting", slog.Int("status", 0))
	return 0
}

// TestMultiProcessElection runs three contenders as separate OS processes on
// one lock blob, on the pinned Azurite and on the emulator served on
// loopback, and pauses, kills and stops their leaders (see mpScenario).
func TestMultiProcessElection(t *testing.T) {
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("-short: the multi-process test waits for real lease expiries (about a minute)")
	}
	t.Parallel()
	exe, err := os.Executable()
	require.NoError(t, err)
	t.Run("azurite", func(t *testing.T) {
		t.Parallel()
		az := azurite.Require(t)
		mpScenario(t, exe, az.ConnectionString(), unique("multiprocess"))
	})
	t.Run("emulator", func(t *testing.T) {
		t.Parallel()
		srv := azleasetest.New(nil)
		t.Cleanup(srv.Close)
		ep, err := srv.Listen("127.0.0.1:0")
		require.NoError(t, err)
		t.Cleanup(func() {
			if err := ep.Close(); err != nil {
				t.Errorf("closing the emulator's endpoint: %v", err)
			}
		})
		mpScenario(t, exe, ep.ConnectionString(), "multiprocess")
	})
}

// mpScenario starts contenders a, b and c and walks their leaders through a
// pause, a crash and a graceful stop, then checks the actions.
func mpScenario(t *testing.T, exe, conn, containerName string) {
	r := newMPRun(t, exe, conn, containerName, "leader", []string{"a", "b", "c"})

	// 1. Someone leads.
	l1 := r.waitAction("a first leader acts", mpTakeover, func(mpAction) bool { return true })
	r.event("%s leads (epoch %d)", l1.id, l1.epoch)

	// 2. Pause the leader past its validity; another takes over; resume
	// it. A resumed process that acts on its expired term does so in the
	// first moments after SIGCONT.
	r.signal(l1.id, syscall.SIGSTOP)
	r.waitStopped(l1.id)
	l2 := r.waitAction(fmt.Sprintf("another contender takes over from paused %s", l1.id), mpTakeover,
		func(a mpAction) bool { return a.id != l1.id && a.epoch > l1.epoch })
	r.event("%s leads (epoch %d) while %s is stopped", l2.id, l2.epoch, l1.id)
	time.Sleep(time.Second)
	r.signal(l1.id, syscall.SIGCONT)
	time.Sleep(2 * time.Second)

	// 3. Crash the leader.
	l2 = r.leader()
	r.signal(l2.id, syscall.SIGKILL)
	r.waitExit(l2.id, mpExit)
	l3 := r.waitAction(fmt.Sprintf("another contender takes over from killed %s", l2.id), mpTakeover,
		func(a mpAction) bool { return a.id != l2.id && a.epoch > l2.epoch })
	r.event("%s leads (epoch %d)", l3.id, l3.epoch)

	// 4. Stop the leader gracefully: it exits 0, and another takes over.
	l3 = r.leader()
	stopped := r.signal(l3.id, syscall.SIGTERM)
	if st := r.waitExit(l3.id, mpExit); st.ExitCode() != 0 {
		r.fatalf("%s exited with %v after SIGTERM, want status 0", l3.id, st)
	}
	l4 := r.waitAction(fmt.Sprintf("another contender takes over from stopped %s", l3.id), mpTakeover,
		func(a mpAction) bool { return a.id != l3.id && a.epoch > l3.epoch })
	r.event("%s leads (epoch %d)", l4.id, l4.epoch)
	t.Logf("graceful handoff after SIGTERM: %v", time.Duration(l4.t-stopped).Round(time.Millisecond))

	// 5. Stop everyone left; each exits 0.
	var left []string
	for _, id := range r.ids {
		if !r.children[id].exited() {
			r.signal(id, syscall.SIGTERM)
			left = append(left, id)
		}
	}
	for _, id := range left {
		if st := r.waitExit(id, mpExit); st.ExitCode() != 0 {
			r.errorf("%s exited with %v after SIGTERM, want status 0", id, st)
		}
	}

	r.readActions()
	r.analyse(l1)
}

// mpAction is one line of the action file.
type mpAction struct {
	id    string
	epoch uint64
	t     int64 // CLOCK_MONOTONIC, ns
}

// mpTerm is the actions of one epoch.
type mpTerm struct {
	epoch       uint64
	id          string
	first, last int64
	n           int
}

type mpChild struct {
	id       string
	cmd      *exec.Cmd
	log, out string        // its JSON log, its stdout and stderr
	done     chan struct{} // closed when cmd.Wait has returned
}

func (c *mpChild) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

type mpRun struct {
	t        *testing.T
	base     int64 // CLOCK_MONOTONIC at the start: offsets in reports are from here
	ids      []string
	children map[string]*mpChild
	events   []string // what the test did, with offsets, for reports

	// What spawn starts children with.
	exe, conn, containerName, blobName, dir, actionsPath string

	af      *os.File // the action file, read as it grows
	pending []byte   // a partial last line
	acts    []mpAction
	stopped map[string][2]int64 // SIGSTOP and SIGCONT instants by identity
}

func newMPRun(t *testing.T, exe, conn, containerName, blobName string, ids []string) *mpRun {
	dir := t.TempDir()
	actionsPath := filepath.Join(dir, "actions")
	f, err := os.Create(actionsPath)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	af, err := os.Open(actionsPath)
	require.NoError(t, err)
	t.Cleanup(func() { _ = af.Close() })
	r := &mpRun{t: t, base: monoNow(), ids: ids, children: map[string]*mpChild{}, af: af, stopped: map[string][2]int64{},
		exe: exe, conn: conn, containerName: containerName, blobName: blobName, dir: dir, actionsPath: actionsPath}

	// Whatever the test leaves running is killed and reaped (registered
	// after the caller's cleanups, so it runs before them: the children
	// are gone before the server they talk to stops).
	t.Cleanup(func() {
		for _, id := range r.ids {
			c := r.children[id]
			if c == nil || c.exited() {
				continue
			}
			_ = c.cmd.Process.Signal(syscall.SIGKILL) // also ends a stopped process
			select {
			case <-c.done:
			case <-time.After(30 * time.Second):
				t.Errorf("child %s (pid %d) did not die after SIGKILL", id, c.cmd.Process.Pid)
			}
		}
	})
	for _, id := range ids {
		r.spawn(id)
	}
	return r
}

// spawn starts the child id, with env added to its environment.
func (r *mpRun) spawn(id string, env ...string) {
	t := r.t
	t.Helper()
	c := &mpChild{id: id, log: filepath.Join(r.dir, id+".log"), out: filepath.Join(r.dir, id+".out"), done: make(chan struct{})}
	out, err := os.Create(c.out)
	require.NoError(t, err)
	c.cmd = exec.Command(r.exe, "-test.run=^$")
	c.cmd.Env = append(append(os.Environ(),
		mpChildEnv+"=elector",
		mpConnEnv+"="+r.conn,
		mpContainerEnv+"="+r.containerName,
		mpBlobEnv+"="+r.blobName,
		mpIdentityEnv+"="+id,
		mpActionsEnv+"="+r.actionsPath,
		mpLogEnv+"="+c.log,
	), env...)
	c.cmd.Stdout, c.cmd.Stderr = out, out // a file: os/exec starts no copying goroutines
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = c.cmd.Start()
	_ = out.Close() // the child has its own descriptor
	require.NoError(t, err)
	go func() { _ = c.cmd.Wait(); close(c.done) }() // reaped by the cleanup in newMPRun at the latest
	r.children[id] = c
	if !slices.Contains(r.ids, id) {
		r.ids = append(r.ids, id)
	}
	r.event("started %s (pid %d)", id, c.cmd.Process.Pid)
}

func (r *mpRun) offset(t int64) string {
	return fmt.Sprintf("%+10.3f ms", float64(t-r.base)/1e6)
}

func (r *mpRun) event(format string, args ...any) {
	r.events = append(r.events, r.offset(monoNow())+"  "+fmt.Sprintf(format, args...))
}

// signal sends sig to child id and returns the instant just before it was
// sent: whatever the child does after receiving it comes later.
func (r *mpRun) signal(id string, sig syscall.Signal) int64 {
	r.t.Helper()
	c := r.children[id]
	now := monoNow()
	if err := c.cmd.Process.Signal(sig); err != nil {
		r.fatalf("%s to %s: %v", unix.SignalName(sig), id, err)
	}
	r.events = append(r.events, fmt.Sprintf("%s  %s sent to %s", r.offset(now), unix.SignalName(sig), id))
	switch sig {
	case syscall.SIGSTOP:
		r.stopped[id] = [2]int64{now, 0}
	case syscall.SIGCONT:
		s := r.stopped[id]
		s[1] = now
		r.stopped[id] = s
	}
	return now
}

// waitStopped waits until the kernel reports child id stopped.
func (r *mpRun) waitStopped(id string) {
	r.t.Helper()
	pid := r.children[id].cmd.Process.Pid
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err == nil {
			// The state follows the command name, which is in parentheses.
			if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'T' {
				return
			}
		}
		if time.Now().After(deadline) {
			r.fatalf("%s (pid %d) not stopped 10 s after SIGSTOP", id, pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitExit waits up to limit for child id to exit and returns its status.
func (r *mpRun) waitExit(id string, limit time.Duration) *os.ProcessState {
	r.t.Helper()
	c := r.children[id]
	select {
	case <-c.done:
	case <-time.After(limit):
		r.fatalf("%s did not exit within %v", id, limit)
	}
	st := c.cmd.ProcessState
	r.event("%s exited: %v", id, st)
	return st
}

// readActions parses the lines appended since the last call.
func (r *mpRun) readActions() {
	r.t.Helper()
	b, err := io.ReadAll(r.af)
	if err != nil {
		r.fatalf("reading the action file: %v", err)
	}
	r.pending = append(r.pending, b...)
	for {
		i := bytes.IndexByte(r.pending, '\n')
		if i < 0 {
			return
		}
		line := string(r.pending[:i])
		r.pending = r.pending[i+1:]
		f := strings.Fields(line)
		var a mpAction
		var err1, err2 error
		if len(f) == 3 {
			a.id = f[0]
			a.epoch, err1 = strconv.ParseUint(f[1], 10, 64)
			a.t, err2 = strconv.ParseInt(f[2], 10, 64)
		}
		if len(f) != 3 || err1 != nil || err2 != nil {
			r.fatalf("malformed action line %q", line)
		}
		r.acts = append(r.acts, a)
	}
}

// waitAction waits up to limit for an action that satisfies ok and returns
// the first one in the file.
func (r *mpRun) waitAction(what string, limit time.Duration, ok func(mpAction) bool) mpAction {
	r.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		r.readActions()
		for _, a := range r.acts {
			if ok(a) {
				return a
			}
		}
		if time.Now().After(deadline) {
			r.fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// leader returns the action of the newest term seen so far: its holder is
// the current leader.
func (r *mpRun) leader() mpAction {
	r.t.Helper()
	r.readActions()
	if len(r.acts) == 0 {
		r.fatalf("no actions yet")
	}
	return slices.MaxFunc(r.acts, func(a, b mpAction) int { return cmp.Compare(a.epoch, b.epoch) })
}

// terms groups the actions by epoch, ordered by their first action, and
// lists the epochs that more than one identity acted in.
func (r *mpRun) terms() (terms []*mpTerm, shared []string) {
	byEpoch := map[uint64]*mpTerm{}
	for _, a := range r.acts {
		tm := byEpoch[a.epoch]
		if tm == nil {
			tm = &mpTerm{epoch: a.epoch, id: a.id, first: a.t, last: a.t}
			byEpoch[a.epoch] = tm
			terms = append(terms, tm)
		}
		if a.id != tm.id {
			shared = append(shared, fmt.Sprintf("epoch %d: %s and %s (at %s)", a.epoch, tm.id, a.id, r.offset(a.t)))
		}
		tm.first, tm.last, tm.n = min(tm.first, a.t), max(tm.last, a.t), tm.n+1
	}
	slices.SortFunc(terms, func(a, b *mpTerm) int { return cmp.Compare(a.first, b.first) })
	return terms, shared
}

// analyse checks that the terms did not overlap: each term's last action
// precedes the next term's first one, and epochs grow in that order. paused
// is the first action of the term that was paused.
func (r *mpRun) analyse(paused mpAction) {
	r.t.Helper()
	terms, shared := r.terms()
	if len(shared) > 0 {
		r.errorf("an epoch belongs to more than one identity:\n  %s", strings.Join(shared, "\n  "))
	}
	for i := 1; i < len(terms); i++ {
		prev, next := terms[i-1], terms[i]
		if next.epoch <= prev.epoch {
			r.errorf("epoch %d (%s) began acting after epoch %d (%s): epochs went backwards", next.epoch, next.id, prev.epoch, prev.id)
		}
		if prev.last >= next.first {
			var lines []string
			for _, a := range r.acts {
				if a.epoch == prev.epoch && a.t >= next.first {
					lines = append(lines, fmt.Sprintf("  %s  %s %d", r.offset(a.t), a.id, a.epoch))
				}
			}
			if len(lines) > 20 {
				lines = append(lines[:20], fmt.Sprintf("  ... and %d more", len(lines)-20))
			}
			r.errorf("OVERLAP: epoch %d (%s) acted %d time(s) at or after epoch %d's (%s) first action at %s:\n%s",
				prev.epoch, prev.id, len(lines), next.epoch, next.id, r.offset(next.first), strings.Join(lines, "\n"))
		}
	}

	// The scenario happened: a pause that someone else took over during,
	// a crash and a graceful stop, hence four terms at least.
	if len(terms) < 4 {
		r.errorf("only %d terms acted, want at least 4 (pause, crash and graceful stop each hand over)", len(terms))
	}
	stop := r.stopped[paused.id]
	tookOver := false
	for _, tm := range terms {
		if tm.epoch > paused.epoch && tm.first > stop[0] && tm.first < stop[1] {
			tookOver = true
		}
	}
	if !tookOver {
		r.errorf("no term began acting while %s (epoch %d) was stopped", paused.id, paused.epoch)
	}
	if r.t.Failed() {
		r.t.Log(r.report())
		return
	}
	r.t.Logf("%d actions in %d terms, no overlap\n%s", len(r.acts), len(terms), r.termTable(terms))
}

func (r *mpRun) termTable(terms []*mpTerm) string {
	var b strings.Builder
	for _, tm := range terms {
		fmt.Fprintf(&b, "  epoch %-3d %s  %5d actions  first %s  last %s\n", tm.epoch, tm.id, tm.n, r.offset(tm.first), r.offset(tm.last))
	}
	return b.String()
}

// report is what a failure prints: the test's events, the terms, and the end
// of each child's log and output.
func (r *mpRun) report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "events (ms from the start, CLOCK_MONOTONIC):\n  %s\n", strings.Join(r.events, "\n  "))
	terms, _ := r.terms()
	fmt.Fprintf(&b, "terms by first action:\n%s", r.termTable(terms))
	for _, id := range r.ids {
		c := r.children[id]
		if c == nil {
			continue
		}
		fmt.Fprintf(&b, "--- %s: end of its log (%s)\n%s", id, c.log, mpTail(c.log, 25))
		if out := mpTail(c.out, 25); out != "" {
			fmt.Fprintf(&b, "--- %s: end of its output\n%s", id, out)
		}
	}
	return b.String()
}

func (r *mpRun) errorf(format string, args ...any) {
	r.t.Helper()
	r.t.Errorf(format, args...)
}

func (r *mpRun) fatalf(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("%s\n%s", fmt.Sprintf(format, args...), r.report())
}

// mpTail returns the last n lines of a file.
func mpTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)\n", err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "")
}

// TestMultiProcessRollingDeploy: a rolling deploy of five library Electors,
// each a process of its own with the default poll interval (5 s), on the
// emulator served on loopback: the replicas are replaced new process first,
// the new one started 1.5–4 s before the old one's SIGTERM, and the new
// generation has the higher priority. Leadership moves exactly once, to a
// new replica; no term acts after the next one's first action; the
// leaderless time (from the last action of one term to the first of the
// next, stamped with CLOCK_MONOTONIC every 10 ms) is reported, and bounded
// only generously.
func TestMultiProcessRollingDeploy(t *testing.T) {
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("-short: a rolling deploy of five processes takes about a minute")
	}
	t.Parallel()
	exe, err := os.Executable()
	require.NoError(t, err)
	srv := azleasetest.New(nil)
	t.Cleanup(srv.Close)
	ep, err := srv.Listen("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ep.Close() })
	r := newMPRun(t, exe, ep.ConnectionString(), "rolling", "leader", nil)
	gen := func(g int) []string { return []string{mpPriorityEnv + "=" + strconv.Itoa(g), mpPollEnv + "=default"} }
	const n = 5
	for i := range n {
		r.spawn(fmt.Sprintf("old-%d", i), gen(1)...)
	}
	first := r.waitAction("a first leader acts", mpTakeover, func(mpAction) bool { return true })
	r.event("%s leads (epoch %d)", first.id, first.epoch)
	time.Sleep(6 * time.Second) // every replica has polled and published its candidacy
	began := monoNow()
	rng := rand.New(rand.NewPCG(1, 0xd3910))
	for i, j := range rng.Perm(n) {
		r.spawn(fmt.Sprintf("new-%d", i), gen(2)...)
		time.Sleep(1500*time.Millisecond + time.Duration(rng.Int64N(int64(2500*time.Millisecond))))
		old := fmt.Sprintf("old-%d", j)
		r.signal(old, syscall.SIGTERM)
		if st := r.waitExit(old, mpExit); st.ExitCode() != 0 {
			r.fatalf("%s exited with %v after SIGTERM, want status 0", old, st)
		}
	}
	time.Sleep(2 * time.Second)
	ended := monoNow()
	for _, id := range r.ids {
		if !r.children[id].exited() {
			r.signal(id, syscall.SIGTERM)
		}
	}
	for _, id := range r.ids {
		if st := r.waitExit(id, mpExit); st.ExitCode() != 0 {
			r.errorf("%s exited with %v after SIGTERM, want status 0", id, st)
		}
	}
	r.readActions()
	terms, shared := r.terms()
	require.Empty(t, shared)
	changes, leaderless := 0, time.Duration(0)
	var gaps []time.Duration
	for i := 1; i < len(terms); i++ {
		prev, next := terms[i-1], terms[i]
		if prev.last >= next.first {
			r.fatalf("OVERLAP: epoch %d (%s) acted at or after epoch %d's (%s) first action", prev.epoch, prev.id, next.epoch, next.id)
		}
		require.Greater(t, next.epoch, prev.epoch)
		if next.first > began && next.first < ended {
			changes++
			g := time.Duration(next.first - prev.last)
			gaps = append(gaps, g)
			leaderless += g
		}
	}
	final := terms[0]
	for _, tm := range terms {
		if tm.first < ended {
			final = tm
		}
	}
	t.Logf("rolling deploy of 5 library processes: %d leader changes, %v without a leader in all %v\n%s", changes, leaderless, gaps, r.termTable(terms))
	if report := os.Getenv("AZLEASE_ROLLING_REPORT"); report != "" {
		f, err := os.OpenFile(report, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		require.NoError(t, err)
		fmt.Fprintf(f, "| library Electors, one process each, emulator over loopback HTTP, priority from the version | %d | %v |\n", changes, leaderless.Round(time.Millisecond))
		require.NoError(t, f.Close())
	}
	require.True(t, strings.HasPrefix(final.id, "new-"), "a new-generation replica led last")
	require.Equal(t, 1, changes, "leadership moved once during the deploy")
	require.Less(t, leaderless, 3*time.Second, "generous: shared CPUs")
}
