//go:build linux

package main

// azlease as PID 1 of a PID namespace (a container's command) reaps the
// orphans its command leaves, and passes the command's status through.

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// requireUnshare fails (in CI) or skips (elsewhere, saying why) when this
// machine cannot make a PID namespace.
func requireUnshare(t *testing.T) {
	t.Helper()
	out, err := exec.Command("unshare", "--fork", "--pid", "--mount-proc", "true").CombinedOutput()
	if err == nil {
		return
	}
	msg := "cannot make a PID namespace with unshare (util-linux, as root): " + err.Error() + ": " + string(out)
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// zombiesOf counts the zombie children of pid, from /proc.
func zombiesOf(pid int) (n int) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		f := bytes.Fields(b[i+1:])
		if len(f) > 1 && string(f[0]) == "Z" && string(f[1]) == strconv.Itoa(pid) {
			n++
		}
	}
	return n
}

// childOf is the first child of pid, from /proc.
func childOf(t *testing.T, pid int) int {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/children")
		if f := strings.Fields(string(b)); len(f) > 0 {
			n, _ := strconv.Atoi(f[0])
			return n
		}
	}
	t.Fatalf("process %d started no child", pid)
	return 0
}

// TestPID1ReapsOrphans: the command starts three background processes in
// subshells that exit at once, so they are orphaned to PID 1 and exit
// 200 ms later. As PID 1, azlease reaps them; with its init turned off
// (the marker its own child gets), they stay zombies: the control.
func TestPID1ReapsOrphans(t *testing.T) {
	t.Parallel()
	requireUnshare(t)
	w := newWorld(t, emulatorConn(t))
	run := func(t *testing.T, extraEnv ...string) (zombies, status int) {
		started := filepath.Join(t.TempDir(), "started")
		cmd := exec.Command("unshare", "--fork", "--pid", "--mount-proc", "--kill-child",
			bin, "lock", "--container", w.container, "reap", "--", "sh", "-c",
			"(sleep 0.2 &); (sleep 0.2 &); (sleep 0.2 &); : > "+started+"; sleep 3; exit 3")
		cmd.Env = append(w.env(), extraEnv...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		require.NoError(t, cmd.Start())
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
		init := childOf(t, cmd.Process.Pid) // PID 1 inside, azlease
		// Once the command runs (it took the lock, which on a loaded
		// machine can take more than a second), the orphans exit within
		// 200 ms; the command still sleeps.
		for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(started); err == nil {
				break
			}
		}
		time.Sleep(time.Second)
		zombies = zombiesOf(init)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("azlease as PID 1 did not exit")
		}
		return zombies, cmd.ProcessState.ExitCode()
	}
	t.Run("init", func(t *testing.T) {
		zombies, status := run(t)
		assert.Zero(t, zombies, "PID 1 reaped the orphans")
		assert.Equal(t, 3, status, "the command's status passes through")
	})
	t.Run("control", func(t *testing.T) {
		zombies, _ := run(t, initChildEnv+"=1")
		assert.Equal(t, 3, zombies, "without the init, the orphans stay zombies: the test sees them")
	})
}
