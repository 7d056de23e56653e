//go:build unix

package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A command runs under a lease in three processes:
//
//	azlease (holds and renews the lease)
//	└── azlease guardian (re-executed in a hidden mode; same process group as azlease)
//	    └── CMD, the leader of a new process group, and whatever CMD starts
//
// azlease talks to the guardian over two pipes. On the control pipe it sends
// the lease's validity deadline as an absolute CLOCK_MONOTONIC instant after
// every renewal, signals to forward, "start" once it has sent the signals it
// received before the guardian was attached (CMD starts only after it), and
// "stop" when the lease is lost. On the report pipe the guardian answers
// with CMD's process ID and, at the end, how CMD ended.
//
// The guardian is a separate process so that the lease's deadline is
// enforced even when azlease itself cannot act (stoptiming.go has the
// arithmetic):
//   - unless a renewal moves the deadline D on (azlease paused by SIGSTOP, a
//     frozen VM slice, or hung, or renewals failing), the guardian sends
//     SIGTERM to CMD's group at D − --kill-after − 1 s and SIGKILL at
//     D − 1 s, before the lease can pass to another holder;
//   - a stop azlease asks for (the lease lost) or a signal it forwards
//     (SIGINT, SIGTERM, SIGHUP) is followed by SIGKILL after --kill-after,
//     and never later than D − 1 s;
//   - if azlease dies (SIGKILL, the OOM killer), the control pipe reaches
//     end-of-file and, on Linux, the parent-death signal arrives: the
//     guardian sends SIGKILL to CMD's group at once;
//   - if the guardian dies, azlease kills CMD's group itself, and CMD (on
//     Linux) gets SIGKILL as its own parent-death signal; if the guardian is
//     stopped, azlease (when it runs) kills CMD's group at D − 1 s itself.
//
// A signal azlease forwards before CMD started stops the guardian from
// starting it ("nostart"): always so for one azlease received before it
// attached the guardian, which it sends before "start". One that reaches the
// guardian while CMD starts is delivered to CMD right after the start.
//
// Signalling the whole group reaches a shell script's own children too, as
// long as they stay in the group (processes that call setsid or setpgid
// leave it, and are not tracked). When CMD exits, whatever it left running
// in its group gets SIGTERM, then SIGKILL after --kill-after, before the
// lease is released.

// The control and report pipes are the guardian's file descriptors 3 and 4.
const (
	guardianArg = "__guardian" // argv[1] of the hidden mode
	ctlFD       = 3
	reportFD    = 4
)

// child is a command running under a guardian, seen from azlease.
type child struct {
	guardian *exec.Cmd

	wmu sync.Mutex // serialises writes to ctl
	ctl *os.File

	mu     sync.Mutex
	pid    int  // CMD's process group, once started
	closed bool // the guardian reported how CMD ended (the group may be reused)

	done chan struct{} // closed when the guardian has exited and res is set
	res  childResult
}

// childResult is how a command ended.
type childResult struct {
	code    int        // CMD's exit status, or 128+N if signal N killed it
	started bool       // CMD ran
	expired bool       // the guardian stopped CMD because the deadline's stop point passed
	nostart os.Signal  // a signal forwarded before CMD started: it was not started
	stderr  string     // the tail of CMD's stderr, when asked for
	err     *exitError // CMD could not be run (126, 127), or the guardian failed (70)
}

// childOptions configure a guardian.
type childOptions struct {
	stop     stopTiming
	tail     int    // bytes of CMD's stderr to report; 0 leaves stderr alone
	testHook string // AZLEASE_TEST_HOOK, for the guardian's own hook
}

// startChild starts argv under a guardian with the extra environment env.
// deadline is the lease's validity deadline: CMD does not start after its
// stop point.
func startChild(argv, env []string, opts childOptions, deadline time.Time) (*child, error) {
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return nil, err
	}
	exe, err := selfExecutable()
	if err != nil {
		return nil, err
	}
	args := []string{guardianArg, "--kill-after", opts.stop.killAfter.String(), "--margin", opts.stop.margin.String(),
		"--tail", strconv.Itoa(opts.tail)}
	if opts.testHook != "" {
		args = append(args, "--hook", opts.testHook)
	}
	args = append(append(args, "--"), argv...)
	g := exec.Command(exe, args...)
	g.Args[0] = "azlease-guardian"
	g.Env = append(os.Environ(), env...)
	g.Stdin, g.Stdout, g.Stderr = os.Stdin, os.Stdout, os.Stderr
	g.ExtraFiles = []*os.File{ctlR, repW} // fds 3 and 4
	g.SysProcAttr = guardianAttr()
	// On Linux the parent-death signal comes when the thread that started
	// the guardian ends, which in Go can happen before the process ends (a
	// goroutine that exits locked to its thread takes the thread with it):
	// the guardian therefore acts on it only if its parent has changed.
	err = g.Start()
	ctlR.Close()
	repW.Close()
	if err != nil {
		ctlW.Close()
		repR.Close()
		return nil, fmt.Errorf("start the guardian process: %w", err)
	}
	c := &child{guardian: g, ctl: ctlW, done: make(chan struct{})}
	c.setDeadline(deadline)
	go c.watch(repR)
	return c, nil
}

// watch reads the guardian's reports until it exits, then records how CMD
// ended. If the guardian died without saying, CMD's group is killed here.
func (c *child) watch(rep *os.File) {
	defer close(c.done)
	defer rep.Close()
	var pid int
	final := false
	sc := bufio.NewScanner(rep)
	for sc.Scan() {
		word, rest, _ := strings.Cut(sc.Text(), " ")
		switch word {
		case "started":
			pid, _ = strconv.Atoi(rest)
			c.mu.Lock()
			c.pid = pid
			c.mu.Unlock()
			c.res.started = true
		case "expired":
			c.res.expired = true
		case "stderr":
			c.res.stderr, _ = strconv.Unquote(rest)
		case "nostart":
			n, _ := strconv.Atoi(rest)
			c.res.nostart = syscall.Signal(n)
			final = true
		case "gone":
			c.mu.Lock()
			c.closed = true
			c.mu.Unlock()
		case "exit":
			c.res.code, _ = strconv.Atoi(rest)
			final = true
		case "noexec":
			code, msg, _ := strings.Cut(rest, " ")
			n, _ := strconv.Atoi(code)
			c.res.err = exitf(n, "%s", msg)
			final = true
		}
	}
	_ = c.guardian.Wait()
	c.closeCtl()
	if !final {
		if pid > 0 {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
		c.res.err = exitf(exitInternal, "the guardian process that supervised the command died (%v); the command's process group was killed", c.guardian.ProcessState)
	}
}

// send writes one control line; errors mean the guardian is gone, which
// watch reports.
func (c *child) send(format string, args ...any) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.ctl == nil {
		return
	}
	_, _ = fmt.Fprintf(c.ctl, format+"\n", args...)
}

func (c *child) closeCtl() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.ctl != nil {
		c.ctl.Close()
		c.ctl = nil
	}
}

// setDeadline tells the guardian the lease's validity deadline, converted to
// an absolute CLOCK_MONOTONIC instant. The clock is read before the time
// left is measured, so the instant sent is never later than the deadline.
func (c *child) setDeadline(t time.Time) {
	c.send("deadline %d", monoDeadline(t))
}

func monoDeadline(t time.Time) int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0 // cannot happen; 0 is in the past: the guardian stops CMD
	}
	return ts.Nano() + int64(time.Until(t))
}

// mayStart tells the guardian that it may start CMD: every signal azlease
// received before has been sent (signal), so the guardian does not start
// CMD after one of them. The guardian waits for it.
func (c *child) mayStart() { c.send("start") }

// signal forwards s to CMD's process group.
func (c *child) signal(s os.Signal) {
	if n, ok := s.(syscall.Signal); ok {
		c.send("signal %d", int(n))
	}
}

// started reports whether the guardian has reported CMD's start.
func (c *child) started() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pid > 0
}

// stop stops CMD because the lease is gone: SIGTERM to its group now,
// SIGKILL after --kill-after (never after the deadline's kill point).
func (c *child) stop() { c.send("stop") }

// killGroup sends SIGKILL to CMD's process group from azlease itself: the
// backstop for a guardian that cannot act (stopped) at the kill point. It
// does nothing once the guardian has reported CMD's end, after which the
// group's number may belong to someone else, and reports whether it found
// the group alive and killed it.
func (c *child) killGroup() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pid <= 0 || c.closed || syscall.Kill(-c.pid, 0) != nil {
		return false // not started, or gone already
	}
	return syscall.Kill(-c.pid, syscall.SIGKILL) == nil
}

// wait returns how CMD ended, once the guardian has exited.
func (c *child) wait() childResult {
	<-c.done
	return c.res
}

// selfExecutable is this program, to re-execute as the guardian. On Linux
// /proc/self/exe works even if the file was replaced since azlease started.
func selfExecutable() (string, error) {
	if _, err := os.Stat("/proc/self/exe"); err == nil {
		return "/proc/self/exe", nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", errors.New("cannot find azlease's own executable to start the guardian process")
	}
	return exe, nil
}
