package uitest

// The processes the browser test runs: the azlease binary, built once,
// started as the emulator, the ui, leaders and shard replicas; and the
// Chromium binary it drives. Every process dies with the test binary
// (Pdeathsig) and is stopped at cleanup; every wait is bounded.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// azleaseBin is the azlease binary TestMain built.
var azleaseBin string

// buildAzlease compiles ../../cmd/azlease into dir within five minutes.
func buildAzlease(dir string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out := filepath.Join(dir, "azlease")
	// go test puts the go command that runs it first on PATH.
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/azlease")
	cmd.Dir = filepath.Join("..", "..")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/azlease: %v\n%s", err, b)
	}
	return out, nil
}

// chromiumNames are the binaries looked for on PATH, in order, when
// AZLEASE_CHROMIUM does not name one: what scripts/install-browser.sh
// installs first.
var chromiumNames = []string{"chromium-headless-shell", "chromium", "chromium-browser", "google-chrome"}

// chromium finds the browser, or fails (CI=true) or skips the test saying
// how to install it.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("AZLEASE_CHROMIUM"); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			t.Fatalf("AZLEASE_CHROMIUM=%s: %v", p, err)
		}
		return p
	}
	for _, n := range chromiumNames {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	msg := "no Chromium on PATH (" + strings.Join(chromiumNames, ", ") + "): make browser installs Debian's chromium-headless-shell as root; or set AZLEASE_CHROMIUM"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// proc is a running azlease; its output goes to files.
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

// start runs azlease with args and env; cleanup stops it (SIGTERM, then
// SIGKILL after 20 s) if it still runs.
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	dir := t.TempDir()
	p := &proc{t: t, args: args, outPath: filepath.Join(dir, "stdout"), errPath: filepath.Join(dir, "stderr"), done: make(chan struct{})}
	out, err := os.Create(p.outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	errf, err := os.Create(p.errPath)
	if err != nil {
		t.Fatal(err)
	}
	defer errf.Close()
	p.cmd = exec.Command(azleaseBin, args...)
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
	t.Cleanup(func() { p.stop(20 * time.Second) })
	return p
}

// stop sends SIGTERM and waits up to limit for the exit, then SIGKILL.
func (p *proc) stop(limit time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(limit):
		_ = p.cmd.Process.Kill()
		<-p.done
		p.t.Errorf("azlease %v did not stop within %v of SIGTERM; stderr:\n%s", p.args, limit, p.stderr())
	}
}

// firstLine waits up to limit for the first line of output containing want.
func (p *proc) firstLine(want string, limit time.Duration) string {
	p.t.Helper()
	for end := time.Now().Add(limit); ; time.Sleep(20 * time.Millisecond) {
		if first, _, ok := strings.Cut(p.stdout(), "\n"); ok && strings.Contains(first, want) {
			return first
		}
		select {
		case <-p.done:
			p.t.Fatalf("azlease %v exited; stderr:\n%s", p.args, p.stderr())
		default:
		}
		if time.Now().After(end) {
			p.t.Fatalf("azlease %v printed no line with %q within %v; stderr:\n%s", p.args, want, limit, p.stderr())
		}
	}
}

// environ is this process's environment without connection settings or
// azlease's variables, plus conn.
func environ(conn string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AZURE_STORAGE_CONNECTION_STRING=") && !strings.HasPrefix(kv, "AZLEASE_") {
			env = append(env, kv)
		}
	}
	return append(env, "AZURE_STORAGE_CONNECTION_STRING="+conn)
}

// waitFor polls cond every 50 ms until it holds, failing after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(limit); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %v", what, limit)
		}
	}
}
