//go:build unix

package main

// The guardian: the hidden mode azlease re-executes itself in to run CMD and
// stop it on time, even when azlease itself cannot act (see child_unix.go
// for the whole arrangement and stoptiming.go for when it stops CMD).

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
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

// tailDrain bounds how long the guardian waits, once CMD's group is gone,
// for the end of CMD's standard error (a process that left the group may
// still hold it open).
const tailDrain = 200 * time.Millisecond

// guardianConfig is what azlease passes the guardian on its command line.
type guardianConfig struct {
	stop     stopTiming
	tail     int // bytes of CMD's stderr to report at the end; 0: none (stderr is inherited)
	testHook string
}

// guardianMain is the hidden mode azlease re-executes itself in to supervise
// a command: see child_unix.go. It returns the guardian's exit status, which
// azlease does not use (the report pipe says how CMD ended).
func guardianMain(args []string) int {
	cfg, argv, err := guardianArgs(args)
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
		ppid: ppid, cfg: cfg,
		report: os.NewFile(reportFD, "report"),
		lines:  make(chan string, 16),
		sigs:   sigs,
	}
	go g.read(os.NewFile(ctlFD, "control"))
	g.run(argv)
	return 0
}

// guardianArgs parses "--kill-after D --margin D --tail N [--hook H] -- CMD...".
func guardianArgs(args []string) (guardianConfig, []string, error) {
	var cfg guardianConfig
	for len(args) > 0 && args[0] != "--" {
		if len(args) < 2 {
			return cfg, nil, errors.New("bad arguments")
		}
		name, v := args[0], args[1]
		args = args[2:]
		var err error
		switch name {
		case "--kill-after":
			cfg.stop.killAfter, err = time.ParseDuration(v)
		case "--margin":
			cfg.stop.margin, err = time.ParseDuration(v)
		case "--tail":
			cfg.tail, err = strconv.Atoi(v)
		case "--hook":
			cfg.testHook = v
		default:
			err = errors.New("unknown argument " + name)
		}
		if err != nil {
			return cfg, nil, err
		}
	}
	if len(args) < 2 || cfg.stop.killAfter < 0 || cfg.stop.margin < 0 || cfg.tail < 0 {
		return cfg, nil, errors.New("bad arguments")
	}
	return cfg, args[1:], nil
}

func isPipe(fd int) bool {
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO
}

type guardian struct {
	ppid   int
	cfg    guardianConfig
	report *os.File
	lines  chan string // control lines; closed at end-of-file
	sigs   chan os.Signal

	pgid     int              // CMD's process group, once started
	deadline int64            // the lease's validity deadline, CLOCK_MONOTONIC ns
	pending  []syscall.Signal // signals azlease forwarded before CMD started
	mayStart bool             // azlease said "start": it has sent every signal it received before

	// The stop under way, if any: SIGTERM went to the group (termSent),
	// and SIGKILL goes at killBy (CLOCK_MONOTONIC ns; 0 while no stop is
	// under way). killBy only ever moves earlier.
	termSent   bool
	killBy     int64
	killed     bool
	expired    bool // the guardian stopped CMD on its own, for the deadline
	parentGone bool

	tail *tailBuffer // CMD's stderr tail, when cfg.tail > 0
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
	// CMD starts only under a deadline whose stop point has not passed,
	// and only if azlease has not said stop, nor forwarded a signal.
	if l, ok := <-g.lines; !ok || !g.handle(l) {
		return // azlease died (or misspoke) before it could say
	}
	// Then azlease says "start" once it has passed on every signal it
	// received before it attached this guardian: such a signal is always
	// here first, and CMD does not start.
	for !g.mayStart {
		if l, ok := <-g.lines; !ok || !g.handle(l) {
			return
		}
	}
	g.catchUp()
	if hook, shard, _ := strings.Cut(g.cfg.testHook, "@"); hook == "guardian-before-start" && (shard == "" || shard == os.Getenv("AZLEASE_SHARD")) {
		g.waitForSignalLine()
	}
	switch {
	case g.lines == nil || g.killBy != 0 || monoNow() >= g.cfg.stop.termAt(g.deadline):
		g.say("noexec %d the lease ended before the command could start", exitLost)
		return
	case len(g.pending) > 0:
		g.say("nostart %d", int(g.pending[0]))
		return
	}
	cmd, tailDone, err := g.start(argv)
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
	for _, s := range g.pending { // forwarded while CMD was starting
		g.forward(s)
	}
	g.pending = nil
	foreground := cmd.SysProcAttr.Foreground

	exited := make(chan struct{})
	go func() { waitExited(cmd); close(exited) }()

	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	var poll, giveUp <-chan time.Time
	leaderExited := false
loop:
	for !leaderExited || groupLeftovers(g.pgid) {
		g.act()
		resetTimer(wake, g.nextWake())
		select {
		case l, ok := <-g.lines:
			if !ok {
				g.lines = nil
				g.parentLost()
				continue
			}
			g.handle(l)
		case <-wake.C:
			// Decide on everything azlease has sent: lines may be
			// waiting behind the timer on a busy machine.
			g.catchUp()
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
	}
	g.say("gone")  // from here on, CMD's group number may be reused
	_ = cmd.Wait() // reaps CMD if waitExited left it a zombie
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	code := ws.ExitStatus()
	if ws.Signaled() {
		code = exitSignalBase + int(ws.Signal())
	}
	if tailDone != nil {
		select {
		case <-tailDone:
		case <-time.After(tailDrain):
		}
		if t := g.tail.String(); t != "" {
			g.say("stderr %s", strconv.Quote(t))
		}
	}
	if g.expired {
		g.say("expired")
	}
	g.say("exit %d", code)
}

// act does what is due now: SIGTERM at the deadline's stop point, and
// SIGKILL at killBy.
func (g *guardian) act() {
	if g.pgid == 0 {
		return
	}
	now := monoNow()
	if !g.termSent && !g.killed && now >= g.cfg.stop.termAt(g.deadline) {
		if g.killBy == 0 {
			g.expired = true
			fmt.Fprintln(os.Stderr, "azlease: no renewal from azlease in time (the lease's validity deadline is near); stopping the command")
		}
		g.terminate()
	}
	if g.killBy != 0 && !g.killed && now >= g.killBy {
		g.killAll()
	}
}

// nextWake is how long until act has something to do.
func (g *guardian) nextWake() time.Duration {
	if g.pgid == 0 || g.killed {
		return time.Hour
	}
	next := g.killBy
	if !g.termSent {
		if at := g.cfg.stop.termAt(g.deadline); next == 0 || at < next {
			next = at
		}
	}
	if next == 0 {
		return time.Hour
	}
	return max(time.Duration(next-monoNow()), 0)
}

func resetTimer(t *time.Timer, d time.Duration) {
	t.Stop()
	select {
	case <-t.C:
	default:
	}
	t.Reset(d)
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
		if err != nil || n <= 0 {
			return false
		}
		g.forward(syscall.Signal(n))
	case "stop":
		g.terminate()
	case "start":
		g.mayStart = true
	default:
		return false
	}
	return true
}

// forward passes a signal azlease received on to CMD's group, or keeps it
// for CMD's start. A signal that asks to stop (SIGINT, SIGTERM, SIGHUP: what
// azlease forwards) is escalated: SIGKILL follows after kill-after, and never
// later than the deadline's kill point.
func (g *guardian) forward(s syscall.Signal) {
	if g.pgid == 0 {
		g.pending = append(g.pending, s)
		return
	}
	g.kill(s)
	if s == syscall.SIGINT || s == syscall.SIGTERM || s == syscall.SIGHUP {
		g.killNoLaterThan(g.cfg.stop.killAfterStop(monoNow(), g.deadline))
	}
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

// start runs argv as the leader of a new process group, in the terminal's
// foreground if azlease was in it, so that an interactive command can read
// the terminal and gets Ctrl-C itself. With a tail to keep, CMD's stderr is
// a pipe the guardian copies to its own stderr; tailDone is closed at the
// pipe's end.
func (g *guardian) start(argv []string) (cmd *exec.Cmd, tailDone chan struct{}, err error) {
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return nil, nil, err
	}
	cmd = exec.Command(path, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = commandAttr(inForeground())
	var r, w *os.File
	if g.cfg.tail > 0 {
		if r, w, err = os.Pipe(); err != nil {
			return nil, nil, err
		}
		cmd.Stderr = w
	}
	err = cmd.Start()
	if w != nil {
		w.Close()
	}
	if err != nil {
		if r != nil {
			r.Close()
		}
		return nil, nil, err
	}
	if r != nil {
		g.tail = &tailBuffer{max: g.cfg.tail}
		tailDone = make(chan struct{})
		go func() {
			defer close(tailDone)
			defer r.Close()
			_, _ = io.Copy(io.MultiWriter(os.Stderr, g.tail), r)
		}()
	}
	return cmd, tailDone, nil
}

// kill sends s to CMD's process group.
func (g *guardian) kill(s syscall.Signal) {
	if g.pgid > 0 {
		_ = syscall.Kill(-g.pgid, s)
	}
}

// terminate stops the group: SIGTERM now (once), SIGKILL after kill-after,
// and never later than the deadline's kill point.
func (g *guardian) terminate() {
	if !g.termSent && !g.killed {
		g.termSent = true
		g.kill(syscall.SIGTERM)
	}
	g.killNoLaterThan(g.cfg.stop.killAfterStop(monoNow(), g.deadline))
}

// killNoLaterThan brings the SIGKILL forward to t if it was due later (or
// not due at all).
func (g *guardian) killNoLaterThan(t int64) {
	if g.killBy == 0 || t < g.killBy {
		g.killBy = t
	}
	if g.pgid > 0 && !g.killed && monoNow() >= g.killBy {
		g.killAll()
	}
}

func (g *guardian) killAll() {
	g.killed = true
	if g.killBy == 0 {
		g.killBy = monoNow()
	}
	g.kill(syscall.SIGKILL)
}

// parentLost: azlease died (or closed the control pipe without a word, which
// it never does while CMD runs): nobody holds the lease for CMD any more.
func (g *guardian) parentLost() {
	if !g.parentGone {
		g.parentGone = true
		g.killNoLaterThan(monoNow())
	}
}

// waitForSignalLine is a test hook (AZLEASE_TEST_HOOK): it announces that
// CMD is about to start and waits, at most 10 s, until azlease has
// forwarded a signal or said stop (the lease lost, or a shard moving), so
// that a test can deliver one at exactly this point. "guardian-before-
// start@S" waits only in the guardian of shard S of 'azlease shards'.
func (g *guardian) waitForSignalLine() {
	fmt.Fprintln(os.Stderr, "azlease: test hook guardian-before-start")
	for end := time.Now().Add(10 * time.Second); len(g.pending) == 0 && g.killBy == 0 && g.lines != nil && time.Now().Before(end); {
		select {
		case l, ok := <-g.lines:
			if !ok {
				g.lines = nil
				return
			}
			g.handle(l)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// String is the tail, cut to start at a line where it can, without a
// trailing newline.
func (t *tailBuffer) String() string {
	if t == nil {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return cleanTail(t.buf, len(t.buf) == t.max)
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
