//go:build linux

package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease/internal/azurite"
)

// These tests drive the azlease binary as a user would: they build it once
// (with the race detector), start it as separate processes against the
// emulator served by 'azlease emulator' and against Azurite, and look at
// exit statuses, stderr, and files the commands under the lease write.
//
// Every process they start dies with the test binary (Pdeathsig), every
// wait is bounded, and every test cleans up what it started.

var bin string // the built azlease

func TestMain(m *testing.M) {
	if path := os.Getenv(workerEnv); path != "" {
		runWorker(path) // the command under the lease of the chaos test
		return
	}
	if path := os.Getenv(stamperEnv); path != "" {
		runStamper(path) // the command under the lease of the succession tests
		return
	}
	// The scenarios mostly wait on real lease expiries in other processes,
	// so they run many at a time whatever the number of CPUs, unless
	// -parallel says otherwise.
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", "16")
	}
	dir, err := os.MkdirTemp("", "azlease-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	bin = filepath.Join(dir, "azlease")
	if err := build(bin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(2)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) {
		stopEmulator()
		azurite.StopShared()
		os.RemoveAll(dir)
	}))
}

// build compiles the command into out with the race detector, within five
// minutes. -buildvcs=auto stamps it with the revision when the module is a
// git clone, even if GOFLAGS turns that off (TestVersionCommand).
func build(out string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goCommand(), "build", "-race", "-buildvcs=auto", "-o", out, ".")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build -race ./cmd/azlease: %v\n%s", err, b)
	}
	return nil
}

// goCommand is the go command: go test puts the one that runs it first on
// the test binary's PATH (since Go 1.19).
func goCommand() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "go" // exec reports it missing
}

// The emulator process shared by the tests of this binary.
var emu struct {
	mu   sync.Mutex
	cmd  *exec.Cmd
	conn string
	err  error
}

// emulatorConn returns the connection string of the shared 'azlease
// emulator' process, starting it on a free port on first use.
func emulatorConn(t *testing.T) string {
	t.Helper()
	emu.mu.Lock()
	defer emu.mu.Unlock()
	if emu.cmd == nil && emu.err == nil {
		emu.cmd, emu.conn, emu.err = startEmulator()
	}
	if emu.err != nil {
		t.Fatal(emu.err)
	}
	return emu.conn
}

// startEmulator starts 'azlease emulator --addr 127.0.0.1:0' and reads the
// connection string it prints, within 30 s. Its output goes to a file, so
// that no goroutine of this test binary waits on it.
func startEmulator() (*exec.Cmd, string, error) {
	out, err := os.CreateTemp(filepath.Dir(bin), "emulator-*.out")
	if err != nil {
		return nil, "", err
	}
	defer out.Close()
	cmd := exec.Command(bin, "emulator", "--addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile(out.Name())
		if first, _, ok := strings.Cut(string(b), "\n"); ok && strings.Contains(first, "BlobEndpoint=") {
			return cmd, first, nil
		}
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	b, _ := os.ReadFile(out.Name())
	return nil, "", fmt.Errorf("azlease emulator did not print its connection string within 30 s:\n%s", b)
}

func stopEmulator() {
	emu.mu.Lock()
	defer emu.mu.Unlock()
	if emu.cmd == nil {
		return
	}
	_ = emu.cmd.Process.Signal(syscall.SIGTERM)
	timer := time.AfterFunc(5*time.Second, func() { _ = emu.cmd.Process.Kill() })
	_ = emu.cmd.Wait()
	timer.Stop()
	emu.cmd = nil
}

// backend is a storage service to run a scenario against.
type backend struct {
	name string
	conn func(t *testing.T) string
}

var backends = []backend{
	{"emulator", emulatorConn},
	{"azurite", func(t *testing.T) string { return azurite.Require(t).ConnectionString() }},
}

// onBoth runs scenario as a parallel subtest per backend.
func onBoth(t *testing.T, scenario func(t *testing.T, w *world)) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			scenario(t, newWorld(t, b.conn(t)))
		})
	}
}

// world is one scenario's storage (a container of its own) and directory.
type world struct {
	t         *testing.T
	conn      string
	container string
	dir       string
}

func newWorld(t *testing.T, conn string) *world {
	return &world{t: t, conn: conn, container: fmt.Sprintf("cli-%08x", rand.Uint32()), dir: t.TempDir()}
}

// path returns a file in the scenario's directory.
func (w *world) path(name string) string { return filepath.Join(w.dir, name) }

// proc is a running azlease. Its stdout and stderr go to files, so that
// no goroutine waits on pipes that a command's children may hold open.
type proc struct {
	t       *testing.T
	args    []string
	cmd     *exec.Cmd
	outPath string
	errPath string
	done    chan struct{}
}

func (p *proc) stdout() string { b, _ := os.ReadFile(p.outPath); return string(b) }
func (p *proc) stderr() string { b, _ := os.ReadFile(p.errPath); return string(b) }

// az starts azlease with args (the subcommand first) on the world's storage
// and container (--container for the commands that take it). The process
// dies with the test binary, and is killed (its guardian then kills the
// command's group) if still running at cleanup.
func (w *world) az(args ...string) *proc {
	w.t.Helper()
	full := args
	if len(args) > 0 && takesFlag(args[0], "container") {
		full = append([]string{args[0], "--container", w.container}, args[1:]...)
	}
	return startProc(w.t, w.env(), full...)
}

// takesFlag reports whether the subcommand cmd takes the flag name.
func takesFlag(cmd, name string) bool {
	c, _, err := newRoot(&globals{}).Find([]string{cmd})
	return err == nil && c.Name() == cmd && c.Flags().Lookup(name) != nil
}

func (w *world) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, connectionEnv+"=") && !strings.HasPrefix(kv, "AZLEASE_") && !strings.HasPrefix(kv, "GORACE=") && !strings.HasPrefix(kv, "TMPDIR=") {
			env = append(env, kv)
		}
	}
	// The race detector's runtime sleeps a second at exit by default, in
	// azlease and in every guardian: not here. A process the test kills
	// leaves its temporary files (shards' load files) in the scenario's
	// directory, which the test removes, not in /tmp.
	env = append(env, connectionEnv+"="+w.conn, "GORACE=atexit_sleep_ms=0")
	if w.dir != "" {
		env = append(env, "TMPDIR="+w.dir)
	}
	return env
}

func startProc(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	out, err := os.CreateTemp(t.TempDir(), "stdout-*")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	errf, err := os.CreateTemp(t.TempDir(), "stderr-*")
	if err != nil {
		t.Fatal(err)
	}
	defer errf.Close()
	p := &proc{t: t, args: args, outPath: out.Name(), errPath: errf.Name(), done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = out, errf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start azlease %v: %v", args, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait waits up to limit for azlease to exit and returns its status; past
// the limit it kills it and fails the test.
func (p *proc) wait(limit time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(limit):
		_ = p.cmd.Process.Kill()
		<-p.done
		p.t.Fatalf("azlease %v still running after %v; stderr:\n%s", p.args, limit, p.stderr())
	}
	return p.cmd.ProcessState.ExitCode()
}

// status is the exit status, 128+N for a signal (as a shell reports it).
func (p *proc) status() int {
	ws := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// expect waits for the exit and checks its status.
func (p *proc) expect(want int, limit time.Duration) {
	p.t.Helper()
	p.wait(limit)
	if got := p.status(); got != want {
		p.t.Fatalf("azlease %v exited %d, want %d; stderr:\n%s", p.args, got, want, p.stderr())
	}
}

func (p *proc) signal(s syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(s); err != nil {
		p.t.Fatalf("signal azlease: %v", err)
	}
}

// run runs azlease to completion within limit.
func (w *world) run(limit time.Duration, args ...string) *proc {
	w.t.Helper()
	p := w.az(args...)
	p.wait(limit)
	return p
}

// lines returns the lines of a file the commands append to ("" if none).
func lines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// waitLine waits up to limit for a line containing want in the file.
func waitLine(t *testing.T, path, want string, limit time.Duration) time.Time {
	t.Helper()
	end := time.Now().Add(limit)
	for {
		for _, l := range lines(t, path) {
			if strings.Contains(l, want) {
				return time.Now()
			}
		}
		if time.Now().After(end) {
			t.Fatalf("no line %q in %s after %v; it has:\n%s", want, filepath.Base(path), limit, strings.Join(lines(t, path), "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitLines waits until n lines of path start with prefix, and returns them.
func waitLines(t *testing.T, path, prefix string, n int, limit time.Duration) []string {
	t.Helper()
	end := time.Now().Add(limit)
	for {
		var got []string
		for _, l := range lines(t, path) {
			if strings.HasPrefix(l, prefix) {
				got = append(got, l)
			}
		}
		if len(got) >= n {
			return got
		}
		if time.Now().After(end) {
			t.Fatalf("fewer than %d lines starting %q in %s after %v; it has:\n%s", n, prefix, filepath.Base(path), limit, strings.Join(lines(t, path), "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lastNumber returns the last field of line as a number (an epoch).
func lastNumber(t *testing.T, line string) uint64 {
	t.Helper()
	f := strings.Fields(line)
	require.NotEmpty(t, f, "empty line")
	n, err := strconv.ParseUint(f[len(f)-1], 10, 64)
	require.NoError(t, err, "line %q", line)
	return n
}

// alive reports whether pid is a live process (not gone, not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	f := bytes.Fields(b[i+1:])
	return len(f) > 0 && f[0][0] != 'Z' && f[0][0] != 'X'
}

// waitDead waits up to limit for every pid to be dead.
func waitDead(t *testing.T, limit time.Duration, pids ...int) {
	t.Helper()
	end := time.Now().Add(limit)
	for {
		var live []int
		for _, p := range pids {
			if alive(p) {
				live = append(live, p)
			}
		}
		if len(live) == 0 {
			return
		}
		if time.Now().After(end) {
			for _, p := range live {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
			t.Fatalf("processes %v still alive %v later", live, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// oneLine checks that stderr is exactly one line starting "azlease: ".
func oneLine(t *testing.T, p *proc) string {
	t.Helper()
	s := strings.TrimRight(p.stderr(), "\n")
	if strings.Contains(s, "\n") || !strings.HasPrefix(s, "azlease: ") {
		t.Fatalf("azlease %v: want one line starting \"azlease: \" on stderr, got:\n%s", p.args, s)
	}
	return s
}

// waitStderr waits up to limit for azlease to print want on stderr.
func waitStderr(t *testing.T, p *proc, want string, limit time.Duration) {
	t.Helper()
	for end := time.Now().Add(limit); !strings.Contains(p.stderr(), want); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("azlease %v did not print %q within %v; stderr:\n%s", p.args, want, limit, p.stderr())
		}
	}
}
