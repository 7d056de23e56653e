//go:build linux

package azlease_test

// The multi-process layer of fair locks (issue 25): waiters are real OS
// processes (this test binary run again, as multiprocess_test.go's
// electors), queued on one fair Mutex on the emulator served on loopback;
// the test pauses one with SIGSTOP and kills one with SIGKILL while they
// wait in the queue. Holders stamp their actions with CLOCK_MONOTONIC; the
// check: no two terms' actions overlap, the waiters that were neither
// paused nor killed are served in the order they asked, the paused one is
// served after it resumes, the killed one never, and neither holds the
// queue up for anything near a lease duration.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

// mpHoldEnv is how long a fair lock child keeps the lock: a duration, or
// "signal" (until SIGTERM).
const mpHoldEnv = "AZLEASE_MP_HOLD"

// mpFairChild is a waiter on a fair Mutex: it waits for the lock (until
// SIGTERM or SIGINT), then appends an action line every mpActEvery while it
// holds it, for its hold, unlocks, and exits 0.
func mpFairChild() int {
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
	hold := os.Getenv(mpHoldEnv)
	var holdFor time.Duration
	if hold != "signal" {
		if holdFor, err = time.ParseDuration(hold); err != nil {
			return setupFailed("hold", err)
		}
	}
	cc, err := azlease.ContainerClientFromConnectionString(os.Getenv(mpConnEnv), os.Getenv(mpContainerEnv), nil)
	if err != nil {
		return setupFailed("container client", err)
	}
	m, err := azlease.NewMutex(cc, os.Getenv(mpBlobEnv), &azlease.MutexOptions{Identity: id, Logger: log})
	if err != nil {
		return setupFailed("mutex", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeoutCause(ctx, mpChildLimit, errMPChildLimit)
	defer cancel()
	log.Info("mp child: waiting", slog.Int("pid", os.Getpid()))
	lk, err := m.Lock(ctx)
	if err != nil {
		log.Error("mp child: lock", slog.Any("error", err))
		fmt.Fprintln(os.Stderr, "mp child: lock:", err)
		return mpStatusRunFailed
	}
	epoch := lk.Epoch()
	log.Info("mp child: locked", slog.Uint64("epoch", epoch))
	until := time.Now().Add(holdFor)
	line := make([]byte, 0, 64)
	for hold == "signal" || time.Now().Before(until) {
		// Stamp, check, act: see mpElectorChild.
		t0 := monoNow()
		if ctx.Err() != nil || lk.Context().Err() != nil {
			break
		}
		line = fmt.Appendf(line[:0], "%s %d %d\n", id, epoch, t0)
		if _, err := actions.Write(line); err != nil {
			log.Error("mp child: append action", slog.Any("error", err))
			return mpStatusWriteFailed
		}
		select {
		case <-ctx.Done():
		case <-lk.Context().Done():
		case <-time.After(mpActEvery):
		}
	}
	lost := context.Cause(lk.Context())
	uctx, ucancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ucancel()
	if err := lk.Unlock(uctx); err != nil {
		log.Error("mp child: unlock", slog.Any("error", err))
		fmt.Fprintln(os.Stderr, "mp child: unlock:", err)
		return mpStatusRunFailed
	}
	switch {
	case errors.Is(context.Cause(ctx), errMPChildLimit):
		return mpStatusOverLimit
	case lost != nil && !errors.Is(lost, azlease.ErrStopped):
		log.Error("mp child: lost the lock", slog.Any("cause", lost))
		return mpStatusRunFailed
	}
	log.Info("mp child: unlocked; exiting")
	return 0
}

// TestMultiProcessFairLock: a holder process, then five waiter processes
// a to e, each queued before the next asks; b is stopped (SIGSTOP) and d
// killed (SIGKILL) while they wait; the holder unlocks; b is resumed after
// the others are done. See the top of this file for the check.
func TestMultiProcessFairLock(t *testing.T) {
	if testing.Short() && os.Getenv("CI") != "true" {
		t.Skip("-short: the multi-process test starts processes and waits in real time")
	}
	t.Parallel()
	exe, err := os.Executable()
	require.NoError(t, err)
	srv := azleasetest.New(nil)
	t.Cleanup(srv.Close)
	ep, err := srv.Listen("127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := ep.Close(); err != nil {
			t.Errorf("closing the emulator's endpoint: %v", err)
		}
	})
	const containerName, blob = "fairmp", "queue-lock"
	cc, err := azlease.ContainerClientFromConnectionString(ep.ConnectionString(), containerName, nil)
	require.NoError(t, err)
	r := newMPFairRun(t, exe, ep.ConnectionString(), containerName, blob)
	ctx := context.Background()
	queued := func() []azlease.Waiter {
		t.Helper()
		q, err := azlease.InspectQueue(ctx, cc, blob)
		require.NoError(t, err)
		return q
	}

	r.start("holder", "signal")
	r.waitAction("the holder acts", 30*time.Second, func(a mpAction) bool { return a.id == "holder" })
	waiters := []string{"a", "b", "c", "d", "e"}
	for i, id := range waiters {
		r.start(id, "300ms")
		deadline := time.Now().Add(30 * time.Second)
		for len(queued()) < i+1 {
			if time.Now().After(deadline) {
				r.fatalf("%s not in the queue within 30 s", id)
			}
			time.Sleep(20 * time.Millisecond)
		}
		r.event("%s queued", id)
	}
	q := queued()
	var order []string
	for _, w := range q {
		order = append(order, w.Holder)
	}
	require.Equal(t, waiters, order, "queued in the order they asked")

	r.signal("b", syscall.SIGSTOP)
	r.waitStopped("b")
	r.signal("d", syscall.SIGKILL)
	r.waitExit("d", mpExit)
	unlocked := r.signal("holder", syscall.SIGTERM)
	if st := r.waitExit("holder", mpExit); st.ExitCode() != 0 {
		r.fatalf("the holder exited with %v after SIGTERM, want status 0", st)
	}
	for _, id := range []string{"a", "c", "e"} {
		if st := r.waitExit(id, mpTakeover); st.ExitCode() != 0 {
			r.fatalf("%s exited with %v, want status 0", id, st)
		}
	}
	resumed := r.signal("b", syscall.SIGCONT)
	if st := r.waitExit("b", mpTakeover); st.ExitCode() != 0 {
		r.fatalf("b exited with %v after SIGCONT, want status 0", st)
	}
	r.readActions()

	terms, shared := r.terms()
	if len(shared) > 0 {
		r.errorf("an epoch belongs to more than one identity:\n  %s", strings.Join(shared, "\n  "))
	}
	var served []string
	for i, tm := range terms {
		served = append(served, tm.id)
		if i == 0 {
			continue
		}
		prev := terms[i-1]
		if tm.epoch <= prev.epoch {
			r.errorf("epoch %d (%s) began acting after epoch %d (%s)", tm.epoch, tm.id, prev.epoch, prev.id)
		}
		if prev.last >= tm.first {
			r.errorf("OVERLAP: epoch %d (%s) acted at %s, after epoch %d's (%s) first action at %s", prev.epoch, prev.id, r.offset(prev.last), tm.epoch, tm.id, r.offset(tm.first))
		}
	}
	assert.NotContains(t, served, "d", "the killed waiter is never served")
	var unpaused []string
	for _, id := range served {
		if id != "b" && id != "holder" {
			unpaused = append(unpaused, id)
		}
	}
	assert.Equal(t, []string{"a", "c", "e"}, unpaused, "the waiters never paused or killed are served in the order they asked")
	bi := slices.IndexFunc(terms, func(tm *mpTerm) bool { return tm.id == "b" })
	if assert.GreaterOrEqual(t, bi, 0, "b is served once resumed") {
		assert.Greater(t, terms[bi].first, resumed, "b acts only after it was resumed")
	}

	// Nobody holds the queue up for a lease duration: from the holder's
	// Unlock to e's first action (a's, c's and e's holds of 300 ms, and b
	// and d passed over meanwhile), and between any two terms but b's.
	var gaps []string
	prevLast := unlocked
	for _, tm := range terms[1:] {
		if tm.id == "b" {
			continue
		}
		gap := time.Duration(tm.first - prevLast)
		gaps = append(gaps, fmt.Sprintf("%s %v", tm.id, gap.Round(time.Millisecond)))
		assert.Less(t, gap, 15*time.Second, "%s waited less than a lease duration after the term before", tm.id)
		prevLast = tm.last
	}
	rest := queued()
	require.Len(t, rest, 1, "only the killed waiter's entry is left")
	assert.Equal(t, "d", rest[0].Holder)
	assert.True(t, rest[0].Missed, "the killed waiter was passed over")
	if t.Failed() {
		t.Log(r.report())
		return
	}
	t.Logf("served %v; gaps from the term before (paused b and killed d passed over on the way): %s\n%s", served, strings.Join(gaps, ", "), r.termTable(terms))
}

// newMPFairRun prepares a run of fair lock children (started one by one
// with start) on blob.
func newMPFairRun(t *testing.T, exe, conn, containerName, blob string) *mpFairRun {
	dir := t.TempDir()
	actionsPath := filepath.Join(dir, "actions")
	f, err := os.Create(actionsPath)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	af, err := os.Open(actionsPath)
	require.NoError(t, err)
	t.Cleanup(func() { _ = af.Close() })
	r := &mpFairRun{
		mpRun: &mpRun{t: t, base: monoNow(), children: map[string]*mpChild{}, af: af, stopped: map[string][2]int64{}},
		exe:   exe, conn: conn, container: containerName, blob: blob, dir: dir, actions: actionsPath,
	}
	t.Cleanup(func() {
		for _, id := range r.ids {
			c := r.children[id]
			if c == nil || c.exited() {
				continue
			}
			_ = c.cmd.Process.Signal(syscall.SIGKILL)
			select {
			case <-c.done:
			case <-time.After(30 * time.Second):
				t.Errorf("child %s (pid %d) did not die after SIGKILL", id, c.cmd.Process.Pid)
			}
		}
	})
	return r
}

type mpFairRun struct {
	*mpRun
	exe, conn, container, blob, dir, actions string
}

// start starts a fair lock child id that keeps the lock for hold.
func (r *mpFairRun) start(id, hold string) {
	r.t.Helper()
	c := &mpChild{id: id, log: filepath.Join(r.dir, id+".log"), out: filepath.Join(r.dir, id+".out"), done: make(chan struct{})}
	out, err := os.Create(c.out)
	require.NoError(r.t, err)
	c.cmd = exec.Command(r.exe, "-test.run=^$")
	c.cmd.Env = append(os.Environ(),
		mpChildEnv+"=fairlock",
		mpConnEnv+"="+r.conn,
		mpContainerEnv+"="+r.container,
		mpBlobEnv+"="+r.blob,
		mpIdentityEnv+"="+id,
		mpActionsEnv+"="+r.actions,
		mpLogEnv+"="+c.log,
		mpHoldEnv+"="+hold,
	)
	c.cmd.Stdout, c.cmd.Stderr = out, out
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = c.cmd.Start()
	_ = out.Close()
	require.NoError(r.t, err)
	go func() { _ = c.cmd.Wait(); close(c.done) }() // reaped by the cleanup at the latest
	r.ids = append(r.ids, id)
	r.children[id] = c
	r.event("started %s (pid %d)", id, c.cmd.Process.Pid)
}
