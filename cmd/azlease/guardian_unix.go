//go:build unix

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// guardianCaught are the signals the guardian catches rather than dies of:
// a terminal's signals reach azlease's whole process group, guardian
// included, and azlease forwards them itself. Catching (not ignoring) them
// leaves CMD with the default dispositions. Any of them, the parent-death
// signal among them, arriving after the guardian's parent changed means
// azlease is gone.
var guardianCaught = []os.Signal{
	syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGALRM, syscall.SIGPIPE,
}

// leftoverGiveUp bounds how long the guardian waits for processes of CMD's
// group that survive SIGKILL (stuck in the kernel) before it reports anyway.
const leftoverGiveUp = 10 * time.Second

// guardianMain is the hidden mode azlease re-executes itself in to supervise
// a command: see child_unix.go. It returns the guardian's exit status, which
// azlease does not use (the report pipe says how CMD ended).
func guardianMain(args []string) int {
	killAfter, argv, err := guardianArgs(args)
	if err != nil || !isPipe(ctlFD) || !isPipe(reportFD) {
		fmt.Fprintln(os.Stderr, "azlease: "+guardianArg+" is azlease's internal mode for supervising a command; run 'azlease --help'")
		return exitUsage
	}
	syscall.CloseOnExec(ctlFD) // CMD must not hold the pipes: their end-of-file is a signal
	syscall.CloseOnExec(reportFD)
	ppid := os.Getppid()
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, guardianCaught...)
	g := &guardian{
		ppid: ppid, killAfter: killAfter,
		report: os.NewFile(reportFD, "report"),
		lines:  make(chan string, 16),
		sigs:   sigs,
	}
	go g.read(os.NewFile(ctlFD, "control"))
	g.run(argv)
	return 0
}

func guardianArgs(args []string) (time.Duration, []string, error) {
	if len(args) < 4 || args[0] != "--kill-after" || args[2] != "--" {
		return 0, nil, errors.New("bad arguments")
	}
	d, err := time.ParseDuration(args[1])
	if err != nil || d < 0 {
		return 0, nil, errors.New("bad --kill-after")
	}
	return d, args[3:], nil
}

func isPipe(fd int) bool {
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO
}

type guardian struct {
	ppid      int
	killAfter time.Duration
	report    *os.File
	lines     chan string // control lines; closed at end-of-file
	sigs      chan os.Signal

	pgid        int
	deadline    int64 // CLOCK_MONOTONIC ns
	killTimer   <-chan time.Time
	terminating bool
	killed      bool
	parentGone  bool
}

// read forwards control lines until azlease closes the pipe or dies.
func (g *guardian) read(ctl *os.File) {
	defer close(g.lines)
	sc := bufio.NewScanner(ctl)
	for sc.Scan() {
		g.lines <- sc.Text()
	}
}

func (g *guardian) say(format string, args ...any) {
	_, _ = fmt.Fprintf(g.report, format+"\n", args...)
}

func monoNow() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

func (g *guardian) run(argv []string) {
	// CMD starts only under a deadline that has not passed, and only if
	// azlease has not said stop meanwhile.
	if l, ok := <-g.lines; !ok || !g.handle(l) {
		return // azlease died (or misspoke) before it could say
	}
	g.catchUp()
	if g.lines == nil || g.terminating || g.untilDeadline() <= 0 {
		g.say("expired")
		g.say("noexec %d the lease ended before the command could start", exitLost)
		return
	}
	cmd, err := g.start(argv)
	if err != nil {
		code := exitNoExec
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			code = exitNotFound
		}
		g.say("noexec %d cannot run %s: %s", code, strconv.Quote(argv[0]), line(err))
		return
	}
	g.pgid = cmd.Process.Pid
	g.say("started %d", g.pgid)
	foreground := cmd.SysProcAttr.Foreground

	exited := make(chan struct{})
	go func() { waitExited(cmd); close(exited) }()

	deadline := time.NewTimer(g.untilDeadline())
	defer deadline.Stop()
	var poll, giveUp <-chan time.Time
	leaderExited := false
loop:
	for !leaderExited || groupLeftovers(g.pgid) {
		before := g.deadline
		select {
		case l, ok := <-g.lines:
			if !ok {
				g.lines = nil
				g.parentLost()
				continue
			}
			g.handle(l)
		case <-deadline.C:
			// Decide on everything azlease has sent: lines may be
			// waiting behind the timer on a busy machine.
			g.catchUp()
			if left := g.untilDeadline(); left > 0 {
				deadline.Reset(left)
				continue
			}
			if !g.terminating && !g.killed {
				g.say("expired")
				fmt.Fprintln(os.Stderr, "azlease: the lease's validity deadline passed with no renewal from azlease; stopping the command")
			}
			g.terminate()
			continue // the deadline no longer matters
		case <-g.killTimer:
			g.killTimer = nil
			g.killAll()
		case <-g.sigs:
			if os.Getppid() != g.ppid {
				g.parentLost()
			}
		case <-exited:
			exited = nil
			leaderExited = true
			if foreground {
				restoreForeground()
			}
			if groupLeftovers(g.pgid) {
				// CMD left processes running in its group: they stop
				// before the lease is released.
				g.terminate()
				t := time.NewTicker(50 * time.Millisecond)
				defer t.Stop()
				poll = t.C
			}
		case <-poll:
			if g.killed {
				g.kill(syscall.SIGKILL) // also any process forked since
				if giveUp == nil {
					giveUp = time.After(leftoverGiveUp)
				}
			}
		case <-giveUp:
			fmt.Fprintln(os.Stderr, "azlease: processes of the command's group survived SIGKILL; giving up on them")
			break loop
		}
		if g.deadline != before {
			deadline.Reset(g.untilDeadline())
		}
	}
	_ = cmd.Wait() // reaps CMD if waitExited left it a zombie
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	code := ws.ExitStatus()
	if ws.Signaled() {
		code = exitSignalBase + int(ws.Signal())
	}
	g.say("exit %d", code)
}

// handle applies one control line from azlease and reports whether it was
// understood.
func (g *guardian) handle(l string) bool {
	word, v, _ := strings.Cut(l, " ")
	switch word {
	case "deadline":
		d, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return false
		}
		g.deadline = max(g.deadline, d)
	case "signal":
		n, err := strconv.Atoi(v)
		if err != nil {
			return false
		}
		g.kill(syscall.Signal(n))
	case "stop":
		g.terminate()
	default:
		return false
	}
	return true
}

// catchUp applies every control line azlease has already sent: those read
// but not yet handled, and those still in the pipe, which it gives the
// reader up to 100 ms to bring in. It never waits when the pipe is empty,
// so a deadline that really passed is acted on at once.
func (g *guardian) catchUp() {
	giveUp := time.Now().Add(100 * time.Millisecond)
	for g.lines != nil {
		select {
		case l, ok := <-g.lines:
			if !ok {
				g.lines = nil
				g.parentLost()
				return
			}
			g.handle(l)
			continue
		default:
		}
		if !pipeHasData(ctlFD) || time.Now().After(giveUp) {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// pipeHasData reports whether fd has bytes to read now.
func pipeHasData(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0 && fds[0].Revents&unix.POLLIN != 0
}

func (g *guardian) untilDeadline() time.Duration {
	return time.Duration(g.deadline - monoNow())
}

// start runs argv as the leader of a new process group, in the terminal's
// foreground if azlease was in it, so that an interactive command can read
// the terminal and gets Ctrl-C itself.
func (g *guardian) start(argv []string) (*exec.Cmd, error) {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = commandAttr(inForeground())
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return cmd, nil
}

// kill sends s to CMD's process group.
func (g *guardian) kill(s syscall.Signal) {
	if g.pgid > 0 {
		_ = syscall.Kill(-g.pgid, s)
	}
}

// terminate sends SIGTERM to the group, once, and sets the timer that sends
// SIGKILL after kill-after.
func (g *guardian) terminate() {
	if g.terminating || g.killed {
		return
	}
	g.terminating = true
	g.kill(syscall.SIGTERM)
	g.killTimer = time.After(g.killAfter)
}

func (g *guardian) killAll() {
	g.killed = true
	g.kill(syscall.SIGKILL)
}

// parentLost: azlease died (or closed the control pipe without a word, which
// it never does while CMD runs): nobody holds the lease for CMD any more.
func (g *guardian) parentLost() {
	if !g.parentGone {
		g.parentGone = true
		g.killAll()
	}
}

// inForeground reports whether standard input is a terminal whose
// foreground process group is this one (azlease's).
func inForeground() bool {
	pg, err := unix.IoctlGetInt(0, unix.TIOCGPGRP)
	return err == nil && pg == syscall.Getpgrp()
}

// restoreForeground gives the terminal back to azlease's process group once
// CMD, which had it, has exited. SIGTTOU is ignored for the call, as a
// background process must; the guardian starts nothing after this.
func restoreForeground() {
	signal.Ignore(syscall.SIGTTOU)
	_ = unix.IoctlSetPointerInt(0, unix.TIOCSPGRP, syscall.Getpgrp())
}
