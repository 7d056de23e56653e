//go:build linux

package main

// Signals that race the start of the command, delivered deterministically:
// azlease (or its guardian) waits at a named point of the start until it
// has received the signal (AZLEASE_TEST_HOOK). A signal before the command
// runs stops azlease with 128+N and the command never runs; one after it
// started reaches the command. Never lost, never reported as a lost lease.

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startScript is a command that says when it runs and exits 7 on a signal.
// It waits for its sleep with the wait builtin, which a trapped signal
// interrupts: a shell runs a trap only once its foreground command ends, so
// a signal that came while it started a foreground sleep (after "ran", as
// the group's signal reached the shell but not the sleep, not yet forked)
// would wait the sleep out and meet the guardian's SIGKILL (exit 137; seen
// in make test under load).
func startScript(log string) string {
	return fmt.Sprintf(`trap 'echo got >> %[1]s; exit 7' TERM INT HUP; echo ran >> %[1]s; sleep 20 & wait $!; echo finished >> %[1]s`, log)
}

func TestSignalWhileTheCommandStarts(t *testing.T) {
	t.Parallel()
	conn := emulatorConn(t)
	sigs := []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP}
	atPoint := func(kind, point string, sig syscall.Signal) {
		t.Run(kind+"/"+point+"/"+signalName(sig), func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, conn)
			log := w.path("log")
			env := append(w.env(), hookEnv+"="+point)
			p := startProc(t, env, kind, "--container", w.container, fast, "job", "--", "sh", "-c", startScript(log))
			waitStderr(t, p, "azlease: test hook "+point, 20*time.Second)
			p.signal(sig)
			p.expect(128+int(sig), 20*time.Second)
			assert.Empty(t, lines(t, log), "the command did not run")
			assert.Contains(t, oneLineAfterLogs(p), signalName(sig))
			assert.NotContains(t, p.stderr(), "lost", "a signal is not a lost lease")

			// The lease was given back, and a once attempt does not count.
			blob := "job"
			if kind == "once" {
				blob = "once/job"
			}
			st := w.run(10*time.Second, "status", "--json", blob)
			var s statusJSON
			require.NoError(t, json.Unmarshal([]byte(st.stdout()), &s), st.stdout())
			assert.False(t, s.Leased, "the lease was released")
			if kind == "once" && s.Once != nil {
				assert.Zero(t, s.Once.Attempts, "an interrupted attempt does not count")
			}
		})
	}
	for _, kind := range []string{"lock", "once", "lead"} {
		// guardian-started: the guardian runs, not yet attached (it waits
		// for azlease's "start", sent after the signals received before).
		for i, point := range []string{"acquired", "begun", "guardian-before-start", "guardian-started"} {
			sig := sigs[i%3] // each point with another signal; each signal at every point across the kinds
			if kind == "once" {
				sig = sigs[(i+1)%3]
			}
			atPoint(kind, point, sig)
		}
		if kind == "lead" {
			// A leader gets a successor ready on SIGTERM or SIGINT, but only
			// once its command has started: here the guardian is attached
			// and the command not yet started.
			atPoint(kind, "guardian-before-start", syscall.SIGTERM)
		}
		t.Run(kind+"/running", func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, conn)
			log := w.path("log")
			args := []string{kind, fast, "job", "--", "sh", "-c", startScript(log)}
			if kind == "lead" {
				args = append([]string{kind, "--restart"}, args[1:]...) // the signal is not replayed to a next term
			}
			p := w.az(args...)
			waitLine(t, log, "ran", 20*time.Second)
			p.signal(syscall.SIGTERM)
			p.expect(7, 20*time.Second) // the command's own status
			assert.Equal(t, []string{"ran", "got"}, lines(t, log))
		})
	}
}

// TestLeaderSignalledBeforeItsCommandHandsOver: a leader that a SIGTERM
// reaches after it took the lease but before its command started does not
// run the command (128+15), and still stops as a leader does: the ready
// standby is handed the lease, rather than left to find it at its next
// poll. At each point where the command has not started: before the run
// began (the signal stops the session), once it began, once its guardian
// runs, and once the guardian is attached.
func TestLeaderSignalledBeforeItsCommandHandsOver(t *testing.T) {
	t.Parallel()
	conn := emulatorConn(t)
	for _, point := range []string{"acquired", "begun", "guardian-started", "guardian-before-start"} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, conn)
			logA, logB := w.path("a"), w.path("b")
			lead := func(id, log string, env []string) *proc {
				return startProc(t, env, "lead", "--container", w.container, "--identity", id, "--poll-interval", "1s", "--log-level", "info",
					"job", "--", "sh", "-c", startScript(log))
			}
			a := lead("a", logA, append(w.env(), hookEnv+"="+point))
			waitStderr(t, a, "azlease: test hook "+point, 20*time.Second)
			b := lead("b", logB, w.env())
			// a waits at the hook (10 s at most) until b is a ready candidate.
			end := time.Now().Add(8 * time.Second)
			for {
				st := w.run(5*time.Second, "status", "job")
				if strings.Contains(st.stdout(), "b  priority 0  ready") {
					break
				}
				require.True(t, time.Now().Before(end), "b is not a ready candidate:\n%s", st.stdout())
				time.Sleep(100 * time.Millisecond)
			}
			a.signal(syscall.SIGTERM)
			a.expect(128+int(syscall.SIGTERM), 20*time.Second)
			assert.Empty(t, lines(t, logA), "a's command did not run")
			assert.Contains(t, oneLineAfterLogs(a), "SIGTERM before the command ran")
			assert.Contains(t, a.stderr(), "successor ready for a planned stop", "a handed the lease to b")
			assert.NotContains(t, a.stderr(), "lost", "a signal is not a lost lease")
			waitLine(t, logB, "ran", 10*time.Second)
			b.signal(syscall.SIGTERM)
			b.expect(7, 20*time.Second) // its command's own status
		})
	}
}

// TestForwardedSignalEscalates: a command that ignores the SIGTERM azlease
// forwards gets SIGKILL --kill-after later; the lease is then released.
func TestForwardedSignalEscalates(t *testing.T) {
	onBoth(t, func(t *testing.T, w *world) {
		log := w.path("log")
		p := w.az("lock", "--kill-after", "2s", "held", "--", "sh", "-c",
			fmt.Sprintf(`trap 'echo ignored >> %[1]s' TERM; echo ran >> %[1]s; while :; do sleep 0.1; done`, log))
		waitLine(t, log, "ran", 20*time.Second)
		sent := time.Now()
		p.signal(syscall.SIGTERM)
		p.expect(128+int(syscall.SIGKILL), 20*time.Second)
		took := time.Since(sent)
		assert.GreaterOrEqual(t, took, 2*time.Second, "SIGKILL only after --kill-after")
		assert.Equal(t, []string{"ran", "ignored"}, lines(t, log))
		// Released: another holder gets it at once.
		q := w.run(10*time.Second, "lock", "--no-wait", "held", "--", "true")
		assert.Equal(t, 0, q.status(), q.stderr())
	})
}

// TestRestartBacksOff: with --restart, a command that keeps exiting at once
// is restarted after pauses that double, each logged at the default level
// (Warn); SIGTERM while standing by ends azlease at once.
func TestRestartBacksOff(t *testing.T) {
	t.Parallel()
	w := newWorld(t, emulatorConn(t))
	log := w.path("log")
	p := w.az("lead", "--restart", "--poll-interval", "100ms", "flappy", "--", "sh", "-c", "echo run >> "+log+"; exit 3")
	// The pauses: 1.4 poll intervals (140 ms), then 280 ms, 560 ms, 1.12 s,
	// 2.24 s: signal in the last, while standing by.
	waitStderr(t, p, "pause=2.24s", 30*time.Second)
	p.signal(syscall.SIGTERM)
	p.expect(128+int(syscall.SIGTERM), 20*time.Second)
	var pauses []time.Duration
	for _, m := range regexp.MustCompile(`contending again after a pause.* pause=(\S+)`).FindAllStringSubmatch(p.stderr(), -1) {
		d, err := time.ParseDuration(m[1])
		require.NoError(t, err)
		pauses = append(pauses, d)
	}
	require.GreaterOrEqual(t, len(pauses), 3, "pauses logged at Warn:\n%s", p.stderr())
	for i := 1; i < len(pauses); i++ {
		assert.Equal(t, 2*pauses[i-1], pauses[i], "each pause doubles: %v", pauses)
	}
	assert.True(t, strings.Contains(p.stderr(), "status=3"), "the log says how the command exited")
}
