//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fast makes waiters poll often, so the scenarios take seconds.
const fast = "--poll-interval=200ms"

// TestUsageErrors: mistakes a user makes before anything runs are reported
// in one line with the documented status, within a second. It does not run
// in parallel with this binary's other tests. On a machine busy with other
// work, starting a race-detector binary alone can take longer than that, so
// the second is counted on top of what a run that succeeds takes just
// before (azlease help, or a status read with the right key): a mistake
// costs no more than a second beyond that, so it is never retried.
func TestUsageErrors(t *testing.T) {
	noConn := &world{t: t, conn: "", container: "usage", dir: t.TempDir()}
	conn := emulatorConn(t)
	for _, tc := range []struct {
		name string
		w    *world
		args []string
		want int
		says string
	}{
		{"unknown flag", noConn, []string{"lock", "--bogus", "x", "--", "true"}, exitUsage, "unknown flag: --bogus"},
		{"no dash", noConn, []string{"lock", "x", "true"}, exitUsage, "put -- between"},
		{"no command", noConn, []string{"lock", "x", "--"}, exitUsage, "no command"},
		{"two names", noConn, []string{"lead", "x", "y", "--", "true"}, exitUsage, "exactly one"},
		{"unknown command", noConn, []string{"frobnicate"}, exitUsage, "unknown command"},
		{"bad duration", noConn, []string{"lock", "--timeout", "soon", "x", "--", "true"}, exitUsage, "invalid argument"},
		{"bad log level", noConn, []string{"status", "--log-level", "loud", "x"}, exitUsage, "--log-level"},
		{"no connection settings", noConn, []string{"lock", "x", "--", "true"}, exitUsage, "AZURE_STORAGE_CONNECTION_STRING"},
		{"two sources", noConn, []string{"status", "--connection-string", "UseDevelopmentStorage=true", "--sas-url", "https://a.blob.core.windows.net/c?sig=x", "x"}, exitUsage, "only one of"},
		{"lease too short", &world{t: t, conn: conn, container: "usage", dir: t.TempDir()}, []string{"lock", "--lease-duration", "5s", "x", "--", "true"}, exitUsage, "invalid --lease-duration 5s"},
		{"bad lock name", &world{t: t, conn: conn, container: "usage", dir: t.TempDir()}, []string{"lock", "x/", "--", "true"}, exitUsage, "invalid NAME"},
		{"kill-after too long", noConn, []string{"lead", "--kill-after", "10s", "x", "--", "true"}, exitUsage, "invalid --kill-after 10s with --lease-duration 15s: at most 4.25s"},
		{"kill-after fits a longer lease", noConn, []string{"lead", "--kill-after", "10s", "--lease-duration", "30s", "x", "--", "true"}, exitUsage, "AZURE_STORAGE_CONNECTION_STRING"},
		// shards' own lease default is 60 s; a --lease-duration given on its
		// line is the one its stop timing is checked against.
		{"shards kill-after too long for its lease", noConn, []string{"shards", "--kill-after", "10s", "--lease-duration", "15s", "x", "--count", "1", "--", "true"}, exitUsage, "invalid --kill-after 10s with --lease-duration 15s: at most 4.25s"},
		{"shards kill-after fits its 60s default", noConn, []string{"shards", "--kill-after", "20s", "x", "--count", "1", "--", "true"}, exitUsage, "AZURE_STORAGE_CONNECTION_STRING"},
		{"poll interval zero", noConn, []string{"lock", "--poll-interval", "0s", "x", "--", "true"}, exitUsage, "invalid --poll-interval 0s"},
		{"timeout zero", noConn, []string{"lock", "--timeout", "0s", "x", "--", "true"}, exitUsage, "invalid --timeout 0s"},
		{"no slots", noConn, []string{"lock", "-n", "0", "x", "--", "true"}, exitUsage, "invalid -n 0"},
		{"no attempts", noConn, []string{"once", "--max-attempts", "0", "x", "--", "true"}, exitUsage, "invalid --max-attempts 0"},
		{"per not whole seconds", noConn, []string{"once", "--per", "1500ms", "x", "--", "true"}, exitUsage, "invalid --per 1.5s"},
		{"keep without per", noConn, []string{"once", "--keep", "1h", "x", "--", "true"}, exitUsage, "--keep needs --per"},
		{"keep shorter than two periods", noConn, []string{"once", "--per", "24h", "--keep", "24h", "x", "--", "true"}, exitUsage, "invalid --keep 24h0m0s"},
		{"account URL typo", noConn, []string{"status", "--account-url", "htp://a.blob.core.windows.net/", "x"}, exitUsage, "invalid --account-url"},
		{"no such host", &world{t: t, conn: "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=" + keyOf(conn) + ";BlobEndpoint=http://azlease-test.invalid/devstoreaccount1;", container: "usage", dir: t.TempDir()}, []string{"lock", "x", "--", "true"}, exitUnavailable, "no such host azlease-test.invalid"},
		{"non-loopback emulator", noConn, []string{"emulator", "--addr", "10.1.2.3:0"}, exitUsage, "not a loopback address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.w.t = t
			base := timed(t, tc.w, 0, "help")
			start := time.Now()
			p := tc.w.run(30*time.Second, tc.args...)
			took := time.Since(start)
			assert.Equal(t, tc.want, p.status(), "stderr: %s", p.stderr())
			msg := oneLine(t, p)
			assert.Contains(t, msg, tc.says)
			assert.Less(t, took, base+time.Second, "within a second (beyond the %v 'azlease help' took)", base)
		})
	}

	// A wrong account key, on both backends: refused with 77 in one line,
	// and the key appears nowhere.
	for _, b := range backends {
		t.Run("wrong key/"+b.name, func(t *testing.T) {
			good := b.conn(t)
			key := keyOf(good)
			bad := strings.Replace(good, key, "QUJD"+key[4:], 1)
			w := &world{t: t, conn: bad, container: "usage", dir: t.TempDir()}
			right := &world{t: t, conn: good, container: "usage", dir: t.TempDir()}
			for _, args := range [][]string{
				{"lock", "x", "--", "true"},
				{"status", "x"},
			} {
				base := timed(t, right, 0, "status", "x")
				start := time.Now()
				p := w.run(30*time.Second, args...)
				took := time.Since(start)
				assert.Equal(t, exitRefused, p.status(), "stderr: %s", p.stderr())
				msg := oneLine(t, p)
				// Azure and the emulator answer 403 AuthenticationFailed;
				// Azurite answers 403 AuthorizationFailure.
				assert.Contains(t, msg, "403")
				assert.Regexp(t, `check the account (name and )?key`, msg)
				assert.NotContains(t, msg, key[4:12], "the key is never printed")
				assert.Less(t, took, base+time.Second, "within a second (beyond the %v a status read with the right key took)", base)
			}
		})
	}
}

// timed runs azlease to completion, expecting status want, and returns how
// long it took.
func timed(t *testing.T, w *world, want int, args ...string) time.Duration {
	t.Helper()
	start := time.Now()
	w.run(30*time.Second, args...).expect(want, time.Second)
	return time.Since(start)
}

func keyOf(conn string) string {
	for _, part := range strings.Split(conn, ";") {
		if k, v, _ := strings.Cut(part, "="); k == "AccountKey" {
			return v
		}
	}
	return ""
}

// TestLockExclusion: three concurrent 'azlease lock' runs of a script that
// writes start and end stamps never overlap, and each later holder has a
// higher epoch.
func TestLockExclusion(t *testing.T) {
	onBoth(t, func(t *testing.T, w *world) {
		log := w.path("log")
		script := fmt.Sprintf(`echo "start $AZLEASE_IDENTITY $AZLEASE_EPOCH $AZLEASE_NAME" >> %[1]s; sleep 0.5; echo "end $AZLEASE_IDENTITY" >> %[1]s`, log)
		var ps []*proc
		for i := range 3 {
			ps = append(ps, w.az("lock", fast, "--identity", fmt.Sprintf("p%d", i), "critical", "--", "sh", "-c", script))
		}
		for _, p := range ps {
			p.expect(0, 30*time.Second)
		}
		ls := lines(t, log)
		require.Len(t, ls, 6, "%v", ls)
		var last uint64
		for i := 0; i < len(ls); i += 2 {
			start, end := strings.Fields(ls[i]), strings.Fields(ls[i+1])
			require.Equal(t, "start", start[0], "%v", ls)
			require.Equal(t, []string{"end", start[1]}, end, "a holder's end follows its start: no overlap\n%v", ls)
			assert.Equal(t, "critical", start[3])
			epoch, err := strconv.ParseUint(start[2], 10, 64)
			require.NoError(t, err)
			assert.Greater(t, epoch, last, "epochs grow")
			last = epoch
		}
	})
}

// TestLockSemaphore: with -n 2, four runs go two at a time, never three.
func TestLockSemaphore(t *testing.T) {
	onBoth(t, func(t *testing.T, w *world) {
		log := w.path("log")
		// Each holder waits (up to 20 s) until two have started, so that
		// the first two are inside together however busy the machine is;
		// a semaphore that admitted one would make the first wait it out.
		script := fmt.Sprintf(`echo "start $AZLEASE_IDENTITY $AZLEASE_SLOT" >> %[1]s
			n=0; while [ "$(grep -c ^start %[1]s)" -lt 2 ] && [ $n -lt 400 ]; do sleep 0.05; n=$((n+1)); done
			sleep 0.5; echo "end $AZLEASE_IDENTITY" >> %[1]s`, log)
		var ps []*proc
		for i := range 4 {
			ps = append(ps, w.az("lock", fast, "-n", "2", "--identity", fmt.Sprintf("p%d", i), "pool", "--", "sh", "-c", script))
		}
		for _, p := range ps {
			p.expect(0, 40*time.Second)
		}
		inside, most := 0, 0
		for _, l := range lines(t, log) {
			f := strings.Fields(l)
			switch f[0] {
			case "start":
				inside++
				require.Len(t, f, 3, "AZLEASE_SLOT is set: %q", l)
				assert.Contains(t, []string{"0", "1"}, f[2])
			case "end":
				inside--
			}
			most = max(most, inside)
		}
		assert.Equal(t, 2, most, "exactly two at a time:\n%s", strings.Join(lines(t, log), "\n"))
	})
}

// TestLockBrokenByOperator: an operator breaks the lease of a running lock
// with 'azlease break' from another process; the holder's command gets
// SIGTERM before the next holder's command starts, and the holder exits 79.
func TestLockBrokenByOperator(t *testing.T) {
	onBoth(t, func(t *testing.T, w *world) {
		log := w.path("log")
		a := w.az("lock", "--identity", "A", "m", "--", "sh", "-c",
			fmt.Sprintf(`trap 'echo "term A" >> %[1]s; exit 0' TERM; echo "start A $AZLEASE_EPOCH" >> %[1]s; while :; do sleep 0.1; done`, log))
		waitLine(t, log, "start A", 20*time.Second)
		b := w.az("lock", fast, "--identity", "B", "m", "--", "sh", "-c",
			fmt.Sprintf(`echo "start B $AZLEASE_EPOCH" >> %s`, log))
		time.Sleep(500 * time.Millisecond) // B is waiting
		brk := w.run(20*time.Second, "break", "m")
		require.Equal(t, 0, brk.status(), brk.stderr())
		assert.Contains(t, brk.stdout(), "broke the lease on m")

		a.expect(exitLost, 30*time.Second)
		assert.Contains(t, oneLineAfterLogs(a), "lost while the command ran")
		b.expect(0, 40*time.Second)
		ls := lines(t, log)
		require.Len(t, ls, 3, "%v", ls)
		assert.True(t, strings.HasPrefix(ls[0], "start A"), "%v", ls)
		assert.Equal(t, "term A", ls[1], "A's command is told before B's starts: %v", ls)
		assert.True(t, strings.HasPrefix(ls[2], "start B"), "%v", ls)
	})
}

// oneLineAfterLogs returns the last line of stderr: azlease's own error, after
// any Warn log lines.
func oneLineAfterLogs(p *proc) string {
	ls := strings.Split(strings.TrimSpace(p.stderr()), "\n")
	return ls[len(ls)-1]
}

// TestLeadCrashFailover: the leader's azlease is killed with SIGKILL; its
// command and the command's own child die with it, and a standby's command
// starts within the lease duration plus a poll interval.
func TestLeadCrashFailover(t *testing.T) {
	onBoth(t, func(t *testing.T, w *world) {
		log, pids := w.path("log"), w.path("pids")
		script := fmt.Sprintf(`sleep 1000 & echo "$$ $!" >> %[2]s; echo "lead $AZLEASE_IDENTITY $AZLEASE_EPOCH" >> %[1]s; wait`, log, pids)
		a := w.az("lead", "--poll-interval=1s", "--identity", "A", "svc", "--", "sh", "-c", script)
		waitLine(t, log, "lead A", 20*time.Second)
		b := w.az("lead", "--poll-interval=1s", "--identity", "B", "svc", "--", "sh", "-c", script)
		time.Sleep(1500 * time.Millisecond) // B stands by, polling
		require.Len(t, lines(t, log), 1, "B does not lead while A does")
		var sh, sleep int
		_, err := fmt.Sscan(lines(t, pids)[0], &sh, &sleep)
		require.NoError(t, err)
		require.True(t, alive(sh) && alive(sleep))

		a.signal(syscall.SIGKILL)
		killed := time.Now()
		a.wait(5 * time.Second)
		waitDead(t, 3*time.Second, sh, sleep) // the command and its child die with azlease

		at := waitLine(t, log, "lead B", 30*time.Second)
		took := at.Sub(killed)
		t.Logf("standby's command started %v after the leader was killed", took.Round(time.Millisecond))
		assert.LessOrEqual(t, took, 15*time.Second+1200*time.Millisecond+4*time.Second, "lease duration + poll interval (with jitter), + 4 s for process start-up on a busy machine")
		ls := lines(t, log)
		require.Len(t, ls, 2)
		require.True(t, strings.HasPrefix(ls[1], "lead B "), ls[1])
		assert.Greater(t, lastNumber(t, ls[1]), lastNumber(t, ls[0]), "the next term's epoch is larger")

		b.signal(syscall.SIGTERM) // forwarded: the shell dies of it, and so does B with its status
		b.expect(128+int(syscall.SIGTERM), 20*time.Second)
		_, err = fmt.Sscan(lines(t, pids)[1], &sh, &sleep)
		require.NoError(t, err)
		waitDead(t, 3*time.Second, sh, sleep)
	})
}

// TestLeadLossRestartsCommand: the leader's lease is broken; its command is
// stopped, and it runs anew in the next term with a higher epoch.
func TestLeadLossRestartsCommand(t *testing.T) {
	onBoth(t, func(t *testing.T, w *world) {
		log := w.path("log")
		p := w.az("lead", "--poll-interval=300ms", "svc", "--", "sh", "-c",
			fmt.Sprintf(`trap 'echo term >> %[1]s; exit 0' TERM; echo "run $AZLEASE_EPOCH" >> %[1]s; while :; do sleep 0.1; done`, log))
		first := waitLines(t, log, "run ", 1, 20*time.Second)[0]
		brk := w.run(20*time.Second, "break", "--period", "0", "svc")
		require.Equal(t, 0, brk.status(), brk.stderr())
		second := waitLines(t, log, "run ", 2, 20*time.Second)[1]
		assert.Greater(t, lastNumber(t, second), lastNumber(t, first), "a new term, a larger epoch")
		assert.Equal(t, []string{first, "term", second}, lines(t, log))
		p.signal(syscall.SIGTERM)
		p.expect(0, 20*time.Second) // the command exits 0 on SIGTERM: passed through
		assert.Equal(t, []string{first, "term", second, "term"}, lines(t, log))
	})
}

// TestLeadExitAndRestart: when the command exits, lead exits with its status
// and releases; with --restart it runs it again, in a new term each time.
func TestLeadExitAndRestart(t *testing.T) {
	onBoth(t, func(t *testing.T, w *world) {
		w.run(20*time.Second, "lead", "svc", "--", "sh", "-c", "exit 5").expect(5, time.Second)
		st := w.run(20*time.Second, "status", "--json", "svc")
		var s statusJSON
		require.NoError(t, json.Unmarshal([]byte(st.stdout()), &s), st.stdout())
		assert.False(t, s.Leased, "released after the command exited")

		log := w.path("log")
		p := w.az("lead", "--restart", "--poll-interval=300ms", "svc", "--", "sh", "-c",
			fmt.Sprintf(`echo "run $AZLEASE_EPOCH" >> %s; sleep 1`, log)) // long enough that SIGTERM meets a running command
		waitLines(t, log, "run ", 3, 20*time.Second)
		p.signal(syscall.SIGTERM)
		p.expect(128+int(syscall.SIGTERM), 20*time.Second)
		ls := lines(t, log)
		for i := 1; i < len(ls); i++ {
			assert.Greater(t, lastNumber(t, ls[i]), lastNumber(t, ls[i-1]), "a new term, with a larger epoch, for each run")
		}
	})
}

// TestSignalForwarding: SIGTERM and SIGHUP to azlease reach the command,
// whose status passes through; the lock is released after it exits.
func TestSignalForwarding(t *testing.T) {
	onBoth(t, func(t *testing.T, w *world) {
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT} {
			log := w.path("log-" + strconv.Itoa(int(sig)))
			p := w.az("lock", "m", "--", "sh", "-c",
				fmt.Sprintf(`trap 'echo got %[2]d >> %[1]s; exit 7' %[2]d; echo ready >> %[1]s; while :; do sleep 0.1; done`, log, int(sig)))
			waitLine(t, log, "ready", 20*time.Second)
			p.signal(sig)
			p.expect(7, 10*time.Second)
			assert.Equal(t, []string{"ready", fmt.Sprintf("got %d", sig)}, lines(t, log))
			assert.NotContains(t, p.stderr(), "azlease:", "azlease prints nothing when the command's status passes through")
			w.run(60*time.Second, "lock", "--log-level", "debug", "--no-wait", "m", "--", "true").expect(0, time.Second)
		}
	})
}

// TestExitStatuses: the command's status passes through (128+N for a
// signal), and a command that cannot run has the shell's 126 or 127.
func TestExitStatuses(t *testing.T) {
	onBoth(t, func(t *testing.T, w *world) {
		notExec := w.path("not-executable")
		require.NoError(t, os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644))
		for i, tc := range []struct {
			cmd  []string
			want int
		}{
			{[]string{"true"}, 0},
			{[]string{"sh", "-c", "exit 42"}, 42},
			{[]string{"sh", "-c", "kill -KILL $$"}, 128 + 9},
			{[]string{"sh", "-c", "kill -TERM $$"}, 128 + 15},
			{[]string{w.path("no-such-command")}, exitNotFound},
			{[]string{"no-such-command-on-path"}, exitNotFound},
			{[]string{notExec}, exitNoExec},
		} {
			// A lock each: a release lost on a busy machine must not make
			// the next case wait for the lease to expire.
			p := w.run(60*time.Second, append([]string{"lock", "m" + strconv.Itoa(i), "--"}, tc.cmd...)...)
			assert.Equal(t, tc.want, p.status(), "%v: %s", tc.cmd, p.stderr())
			if tc.want >= exitNoExec && tc.want < 128 {
				oneLine(t, p)
			}
		}
		for _, tc := range []struct {
			cmd  []string
			want int
		}{
			{[]string{"sh", "-c", "exit 3"}, 3},
			{[]string{"no-such-command-on-path"}, exitNotFound},
		} {
			p := w.run(60*time.Second, append([]string{"lead", "svc", "--"}, tc.cmd...)...)
			assert.Equal(t, tc.want, p.status(), "lead %v: %s", tc.cmd, p.stderr())
		}
	})
}

// TestNoWaitAndTimeout: a held lock makes --no-wait exit 75 at once and
// --timeout exit 75 when it passes, saying who holds it; a signal to a
// waiting azlease makes it exit at once.
func TestNoWaitAndTimeout(t *testing.T) {
	onBoth(t, func(t *testing.T, w *world) {
		log := w.path("log")
		holder := w.az("lock", "--identity", "holder-1", "m", "--", "sh", "-c",
			fmt.Sprintf(`trap 'exit 0' TERM; echo ready >> %s; while :; do sleep 0.1; done`, log))
		waitLine(t, log, "ready", 20*time.Second)

		start := time.Now()
		p := w.run(10*time.Second, "lock", "--no-wait", "m", "--", "sh", "-c", "echo ran >> "+log)
		assert.Equal(t, exitNotAcquired, p.status(), p.stderr())
		assert.Less(t, time.Since(start), 5*time.Second)
		assert.Regexp(t, `held by holder-1 \(epoch \d+\)`, oneLine(t, p))

		start = time.Now()
		p = w.run(20*time.Second, "lock", fast, "--timeout", "2s", "m", "--", "sh", "-c", "echo ran >> "+log)
		took := time.Since(start)
		assert.Equal(t, exitNotAcquired, p.status(), p.stderr())
		assert.Contains(t, oneLine(t, p), "not acquired within 2s")
		assert.GreaterOrEqual(t, took, 2*time.Second)
		assert.Less(t, took, 20*time.Second, "gives up at the timeout (plus start-up and a read of who holds it)")

		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
			waiter := w.az("lock", "--log-level", "debug", "m", "--", "sh", "-c", "echo ran >> "+log)
			waitStderr(t, waiter, "waiting for the lock", 20*time.Second)
			time.Sleep(300 * time.Millisecond)
			sent := time.Now()
			waiter.signal(sig)
			waiter.expect(128+int(sig), 10*time.Second)
			assert.Less(t, time.Since(sent), 3*time.Second, "a waiting azlease exits promptly on %v", sig)
			assert.Contains(t, oneLineAfterLogs(waiter), "interrupted by "+signalName(sig))
		}

		holder.signal(syscall.SIGTERM)
		holder.expect(0, 10*time.Second)
		assert.Equal(t, []string{"ready"}, lines(t, log), "no waiter ran its command")
	})
}

// TestPausedAzleaseCannotOutliveItsLease: azlease is paused (SIGSTOP) while
// its command runs. The guardian stops the command at the lease's validity
// deadline, before another holder can take the lease: SIGTERM, which the
// command ignores, then SIGKILL after --kill-after. Resumed, azlease exits 79.
func TestPausedAzleaseCannotOutliveItsLease(t *testing.T) {
	onBoth(t, func(t *testing.T, w *world) {
		log, pids := w.path("log"), w.path("pids")
		a := w.az("lock", "--kill-after", "3s", "m", "--", "sh", "-c",
			fmt.Sprintf(`trap 'echo term A >> %[1]s' TERM; echo $$ > %[2]s; echo start A >> %[1]s; while :; do sleep 0.1; done`, log, pids))
		waitLine(t, log, "start A", 20*time.Second)
		var sh int
		_, err := fmt.Sscan(lines(t, pids)[0], &sh)
		require.NoError(t, err)
		a.signal(syscall.SIGSTOP)
		stopped := time.Now()
		t.Cleanup(func() { _ = a.cmd.Process.Signal(syscall.SIGCONT) })
		b := w.az("lock", fast, "--identity", "B", "m", "--", "sh", "-c", "echo start B >> "+log)

		at := waitLine(t, log, "term A", 20*time.Second)
		after := at.Sub(stopped)
		t.Logf("the guardian stopped the command %v after azlease was paused", after.Round(time.Millisecond))
		assert.Greater(t, after, 8*time.Second, "not before the validity deadline (a renewal is due every 5 s)")
		waitDead(t, 8*time.Second, sh) // SIGKILL after --kill-after
		b.expect(0, 30*time.Second)
		assert.Equal(t, []string{"start A", "term A", "start B"}, lines(t, log))

		a.signal(syscall.SIGCONT)
		a.expect(exitLost, 20*time.Second)
		assert.Contains(t, oneLineAfterLogs(a), "lost while the command ran")
	})
}

// TestOnceFromFiveProcesses: five 'azlease once' at once: the command runs
// exactly once, and all five exit 0, the waiters saying who did it.
func TestOnceFromFiveProcesses(t *testing.T) {
	onBoth(t, func(t *testing.T, w *world) {
		log := w.path("log")
		var ps []*proc
		for i := range 5 {
			ps = append(ps, w.az("once", fast, "--identity", fmt.Sprintf("p%d", i), "migrate-1", "--", "sh", "-c",
				fmt.Sprintf(`echo "ran $AZLEASE_IDENTITY $AZLEASE_NAME $AZLEASE_EPOCH" >> %s; sleep 1`, log)))
		}
		waiters := 0
		for _, p := range ps {
			p.expect(0, 30*time.Second)
			if strings.Contains(p.stderr(), "done by") {
				waiters++
			}
		}
		ls := lines(t, log)
		require.Len(t, ls, 1, "ran exactly once: %v", ls)
		assert.Equal(t, 4, waiters, "the four others said who did it")
		runner := strings.Fields(ls[0])[1]
		f := strings.Fields(ls[0])
		require.Len(t, f, 4, ls[0])
		assert.Equal(t, []string{"ran", runner, "migrate-1"}, f[:3])
		assert.NotZero(t, lastNumber(t, ls[0]), "the fencing epoch reaches the command")
		for _, p := range ps {
			if s := p.stderr(); s != "" {
				assert.Contains(t, s, "done by "+runner)
			}
		}
		// Later callers find it done at once.
		p := w.run(10*time.Second, "once", "migrate-1", "--", "sh", "-c", "echo again >> "+log)
		assert.Equal(t, 0, p.status())
		assert.Len(t, lines(t, log), 1)

		st := w.run(10*time.Second, "status", "--json", "migrate-1")
		var s statusJSON
		require.NoError(t, json.Unmarshal([]byte(st.stdout()), &s), st.stdout())
		require.NotNil(t, s.Once)
		assert.Equal(t, "done", s.Once.State)
		assert.Equal(t, runner, s.Once.Holder)
	})
}

// TestOnceFailureAndReset: a failing command uses up its attempts, every
// caller exits non-zero (the runners with the command's status, the others
// 80), and reset-once lets it run again.
func TestOnceFailureAndReset(t *testing.T) {
	onBoth(t, func(t *testing.T, w *world) {
		log := w.path("log")
		var ps []*proc
		for i := range 3 {
			ps = append(ps, w.az("once", fast, "--max-attempts", "2", "--identity", fmt.Sprintf("p%d", i), "seed", "--", "sh", "-c",
				fmt.Sprintf(`echo "ran $AZLEASE_IDENTITY" >> %s; sleep 0.3; exit 3`, log)))
		}
		codes := map[int]int{}
		for _, p := range ps {
			p.wait(30 * time.Second)
			codes[p.status()]++
			if p.status() == exitOnceFailed {
				assert.Contains(t, oneLineAfterLogs(p), "failed for good after 2 attempts")
				assert.Contains(t, oneLineAfterLogs(p), "the command exited with status 3")
			}
		}
		assert.Equal(t, map[int]int{3: 2, exitOnceFailed: 1}, codes)
		assert.Len(t, lines(t, log), 2, "two attempts")

		// Every caller must use the same --max-attempts: this one would
		// otherwise make a third attempt.
		late := w.run(10*time.Second, "once", "--max-attempts", "2", "seed", "--", "sh", "-c", "echo ran late >> "+log)
		assert.Equal(t, exitOnceFailed, late.status(), late.stderr())

		st := w.run(10*time.Second, "status", "seed")
		assert.Contains(t, st.stdout(), "seed: failed")
		assert.Contains(t, st.stdout(), "the command exited with status 3")

		reset := w.run(20*time.Second, "reset-once", "seed")
		require.Equal(t, 0, reset.status(), reset.stderr())
		w.run(20*time.Second, "once", "seed", "--", "sh", "-c", "echo ran again >> "+log).expect(0, time.Second)
		assert.Equal(t, "ran again", lines(t, log)[2])
	})
}

// TestEmulatorCommand: 'azlease emulator' serves, prints its connection
// string first, and stops cleanly on SIGTERM and SIGINT.
func TestEmulatorCommand(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		w := newWorld(t, "")
		p := w.az("emulator", "--addr", "127.0.0.1:0")
		var conn string
		for end := time.Now().Add(20 * time.Second); conn == "" && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if first, _, ok := strings.Cut(p.stdout(), "\n"); ok {
				conn = first
			}
		}
		require.Contains(t, conn, "BlobEndpoint=http://127.0.0.1:")
		w.conn = conn
		w.run(20*time.Second, "lock", "m", "--", "true").expect(0, time.Second)
		st := w.run(10*time.Second, "status", "m")
		assert.Contains(t, st.stdout(), "epoch")
		p.signal(sig)
		p.expect(0, 5*time.Second)
		assert.Contains(t, p.stderr(), "emulator stopped")
	}
}

// TestUnreachableStorageRespectsTimeouts: on storage that refuses
// connections, --timeout and --no-wait bound the whole run, first contact
// included, and break gives up as soon as the other commands do.
func TestUnreachableStorageRespectsTimeouts(t *testing.T) {
	t.Parallel()
	dead := freeAddr(t) // nothing listens there
	conn := "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=" + keyOf(emulatorConn(t)) + ";BlobEndpoint=http://" + dead + "/devstoreaccount1;"
	w := &world{t: t, conn: conn, container: "dead", dir: t.TempDir()}
	base := timed(t, w, 0, "help")
	for _, tc := range []struct {
		args  []string
		bound time.Duration
	}{
		{[]string{"lock", "--timeout", "2s", "x", "--", "true"}, 2 * time.Second},
		{[]string{"lock", "--no-wait", "x", "--", "true"}, noWaitBudget},
		{[]string{"break", "x"}, 2 * attemptTimeout},
		{[]string{"status", "x"}, 2 * attemptTimeout},
	} {
		start := time.Now()
		p := w.run(30*time.Second, tc.args...)
		took := time.Since(start)
		assert.Equal(t, exitUnavailable, p.status(), "%v: %s", tc.args, p.stderr())
		assert.Less(t, took, base+tc.bound+2*time.Second, "%v gives up within its bound (%v) and start-up (%v)", tc.args, tc.bound, base)
		assert.Contains(t, oneLineAfterLogs(p), "storage", "%v", tc.args)
	}
}

// TestOnceRecordsStderr: a failed attempt records the end of the command's
// stderr, which still reaches azlease's; status and later callers show it;
// the last allowed attempt says the key failed for good.
func TestOnceRecordsStderr(t *testing.T) {
	t.Parallel()
	w := newWorld(t, emulatorConn(t))
	script := `echo "step 1 of 2" >&2; echo "boom: disk full" >&2; exit 3`
	first := w.run(20*time.Second, "once", "--max-attempts", "2", "migrate", "--", "sh", "-c", script)
	assert.Equal(t, 3, first.status())
	assert.Contains(t, first.stderr(), "boom: disk full", "CMD's stderr still reaches the terminal")
	assert.Contains(t, oneLineAfterLogs(first), "attempt 1 of 2 is recorded as failed, and another caller may try again")

	st := w.run(10*time.Second, "status", "migrate")
	assert.Contains(t, st.stdout(), "boom: disk full", "status shows why it failed")
	assert.NotContains(t, st.stdout(), "never used", "no lock line above a once marker")

	second := w.run(20*time.Second, "once", "--max-attempts", "2", "migrate", "--", "sh", "-c", script)
	assert.Equal(t, 3, second.status())
	assert.Contains(t, oneLineAfterLogs(second), "that was attempt 2 of 2, so the key has failed for good")

	later := w.run(20*time.Second, "once", "--max-attempts", "2", "migrate", "--", "true")
	assert.Equal(t, exitOnceFailed, later.status())
	msg := oneLine(t, later)
	assert.Contains(t, msg, "failed for good after 2 attempts")
	assert.Contains(t, msg, "boom: disk full")

	off := w.run(20*time.Second, "once", "--stderr-tail", "0", "other", "--", "sh", "-c", script)
	assert.Equal(t, 3, off.status())
	st = w.run(10*time.Second, "status", "other")
	assert.Contains(t, st.stdout(), "the command exited with status 3")
	assert.NotContains(t, st.stdout(), "boom", "--stderr-tail 0 records no stderr")
}

// TestResetOnceOfANeverUsedKey: reset-once says there was nothing to reset,
// and creates nothing.
func TestResetOnceOfANeverUsedKey(t *testing.T) {
	t.Parallel()
	w := newWorld(t, emulatorConn(t))
	p := w.run(20*time.Second, "reset-once", "never-used")
	assert.Equal(t, 0, p.status(), p.stderr())
	assert.Contains(t, p.stdout(), "nothing to reset")
	st := w.run(10*time.Second, "status", "--json", "once/never-used")
	var s statusJSON
	require.NoError(t, json.Unmarshal([]byte(st.stdout()), &s), st.stdout())
	assert.False(t, s.Exists, "no marker blob was created")
}

// TestOnceFirstMaxAttemptsWins: a later caller with a larger --max-attempts
// does not rerun a key that failed for good under the first caller's limit,
// and says which limit applied.
func TestOnceFirstMaxAttemptsWins(t *testing.T) {
	t.Parallel()
	w := newWorld(t, emulatorConn(t))
	log := w.path("log")
	first := w.run(20*time.Second, "once", "--max-attempts", "1", "seed", "--", "sh", "-c", "echo ran >> "+log+"; exit 3")
	assert.Equal(t, 3, first.status())
	assert.Contains(t, oneLineAfterLogs(first), "that was attempt 1 of 1, so the key has failed for good")
	later := w.run(20*time.Second, "once", "--max-attempts", "5", "seed", "--", "sh", "-c", "echo ran again >> "+log)
	assert.Equal(t, exitOnceFailed, later.status(), later.stderr())
	assert.Contains(t, oneLineAfterLogs(later), "failed for good after 1 attempt (--max-attempts 1, recorded by the key's first caller; this one's 5 does not apply)")
	assert.Equal(t, []string{"ran"}, lines(t, log))
}

// TestShardsCommand: two 'azlease shards' share four shards, two each, each
// shard's command seeing its shard and epoch; 'status --shards' shows the
// assignment; SIGTERM stops the commands and releases the shards (128+15).
func TestShardsCommand(t *testing.T) {
	t.Parallel()
	w := newWorld(t, emulatorConn(t))
	log := w.path("log")
	script := fmt.Sprintf(`echo "$AZLEASE_IDENTITY $AZLEASE_SHARD $AZLEASE_EPOCH" >> %s; trap 'exit 0' TERM; while :; do sleep 0.1; done`, log)
	a := w.az("shards", "--identity", "a", "--poll-interval", "200ms", "grp", "--count", "4", "--", "sh", "-c", script)
	b := w.az("shards", "--identity", "b", "--poll-interval", "200ms", "grp", "--count", "4", "--", "sh", "-c", script)
	var s assignmentJSON
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		st := w.run(10*time.Second, "status", "--json", "--shards", "--count", "4", "grp")
		s = assignmentJSON{}
		require.NoError(t, json.Unmarshal([]byte(st.stdout()), &s), st.stdout())
		if s.Balanced && len(s.Members) == 2 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("not balanced: %s", st.stdout())
		}
	}
	for _, m := range s.Members {
		assert.Equal(t, 2, m.Owns, "%+v", m)
		assert.Equal(t, 2, m.Share)
	}
	seen := map[string]bool{}
	for _, sh := range s.Shards {
		assert.Contains(t, []string{"a", "b"}, sh.Owner)
		assert.NotZero(t, sh.Epoch)
		seen[sh.Name] = true
	}
	assert.Len(t, seen, 4)
	text := w.run(10*time.Second, "status", "--shards", "grp")
	assert.Contains(t, text.stdout(), "2 members, 4 shards, balanced")
	waitLines(t, log, "", 4, 10*time.Second)
	for _, l := range lines(t, log) {
		f := strings.Fields(l)
		require.Len(t, f, 3, l)
		assert.NotZero(t, lastNumber(t, l), "the shard's epoch reaches the command")
	}
	a.signal(syscall.SIGTERM)
	b.signal(syscall.SIGTERM)
	a.expect(128+int(syscall.SIGTERM), 20*time.Second)
	b.expect(128+int(syscall.SIGTERM), 20*time.Second)
	st := w.run(10*time.Second, "status", "--json", "--shards", "grp")
	var left assignmentJSON
	require.NoError(t, json.Unmarshal([]byte(st.stdout()), &left), st.stdout())
	assert.Empty(t, left.Members, "both left")
	for _, sh := range left.Shards {
		assert.Empty(t, sh.Owner, "released: %+v", sh)
	}

	p := w.run(10*time.Second, "shards", "grp", "--", "true")
	assert.Equal(t, exitUsage, p.status())
	assert.Contains(t, oneLine(t, p), "count")
}
