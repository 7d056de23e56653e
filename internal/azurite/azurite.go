// Package azurite starts and stops the project's pinned Azurite (npm
// azurite@3.35.0, installed by `npm ci` into node_modules) for tests and
// benchmarks. Each instance listens on a free 127.0.0.1 port, keeps its data
// in memory, and dies with the process that started it.
package azurite

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
)

// Account and Key are Azurite's well-known development account.
const (
	Account = "devstoreaccount1"
	Key     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// SkipEnv is the variable a developer sets to 1 to skip the Azurite tests on
// a machine without Node.js. It is ignored when CI=true.
const SkipEnv = "AZLEASE_SKIP_AZURITE"

const startTimeout = 60 * time.Second

// Instance is one running Azurite blob service.
type Instance struct {
	// URL is the Blob service URL including the account.
	URL string
	cmd *exec.Cmd
	log string
	dir string
}

// ConnectionString returns an explicit connection string for the instance.
func (in *Instance) ConnectionString() string {
	return "DefaultEndpointsProtocol=http;AccountName=" + Account + ";AccountKey=" + Key +
		";BlobEndpoint=" + in.URL + ";"
}

// ContainerClient returns a client for the named container on this instance,
// using transport (nil: a new http.Client the caller never closes).
func (in *Instance) ContainerClient(name string, transport *http.Client) (*container.Client, error) {
	cred, err := container.NewSharedKeyCredential(Account, Key)
	if err != nil {
		return nil, err
	}
	opts := &container.ClientOptions{}
	if transport != nil {
		opts.ClientOptions = azcore.ClientOptions{Transport: transport}
	}
	return container.NewClientWithSharedKeyCredential(in.URL+"/"+name, cred, opts)
}

// ModuleRoot returns the directory of the azlease module, found by walking up
// from the working directory.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/azlease/azlease\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("azurite: cannot find the azlease module root above the working directory")
		}
		dir = parent
	}
}

// Start starts Azurite on a free loopback port and waits until it answers.
func Start(ctx context.Context) (*Instance, error) {
	root, err := ModuleRoot()
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(root, "node_modules", ".bin", "azurite-blob")
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("azurite: %s is missing: run `make test` (or `npm ci` in %s) with Node.js installed to install the pinned Azurite", bin, root)
	}
	var last error
	for range 3 { // the free port can be taken between probing and binding
		in, err := startOnce(ctx, bin)
		if err == nil {
			return in, nil
		}
		last = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, last
}

func startOnce(ctx context.Context, bin string) (*Instance, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "azlease-azurite-")
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "azurite.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	args := []string{
		"--blobHost", "127.0.0.1", "--blobPort", strconv.Itoa(port),
		"--inMemoryPersistence", "--skipApiVersionCheck", "--disableTelemetry",
	}
	if os.Getenv("AZLEASE_AZURITE_DEBUG") != "" {
		args = append(args, "--debug", filepath.Join(dir, "debug.log"))
	} else {
		args = append(args, "--silent")
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir                       // anything Azurite writes lands here, not in the checkout
	cmd.Stdout, cmd.Stderr = logf, logf // files: os/exec starts no copying goroutines
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("azurite: start %s: %w", bin, err)
	}
	in := &Instance{URL: fmt.Sprintf("http://127.0.0.1:%d/%s", port, Account), cmd: cmd, log: logPath, dir: dir}
	if err := in.waitReady(ctx, port); err != nil {
		in.Stop()
		return nil, err
	}
	return in, nil
}

func (in *Instance) waitReady(ctx context.Context, port int) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	for i := 0; ; i++ {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			_ = c.Close()
			return nil
		}
		if in.exited() {
			return fmt.Errorf("azurite: exited during start-up; its output is in %s:\n%s", in.log, tail(in.log))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("azurite: not answering on %s after %v; its output is in %s:\n%s", addr, startTimeout, in.log, tail(in.log))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (in *Instance) exited() bool {
	// Signal 0 checks the process without disturbing it; a zombie still
	// counts as alive, so also look at /proc.
	if err := in.cmd.Process.Signal(syscall.Signal(0)); err != nil {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", in.cmd.Process.Pid))
	return err == nil && strings.Contains(string(b), ") Z ")
}

// Stop terminates Azurite and its children and removes its directory.
func (in *Instance) Stop() {
	pgid := in.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = in.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-done
	}
	_ = os.RemoveAll(in.dir)
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

var shared struct {
	mu  sync.Mutex
	in  *Instance
	err error
}

// Require returns the Azurite instance shared by the tests of this test
// binary, starting it on first use. Azurite missing or failing to start fails
// the test with instructions; only a developer who sets AZLEASE_SKIP_AZURITE=1
// outside CI gets a skip instead. Call StopShared from TestMain.
func Require(t testing.TB) *Instance {
	t.Helper()
	if os.Getenv(SkipEnv) == "1" && os.Getenv("CI") != "true" {
		t.Skipf("Azurite tests skipped: %s=1 is set", SkipEnv)
	}
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.in == nil && shared.err == nil {
		shared.in, shared.err = Start(context.Background())
	}
	if shared.err != nil {
		t.Fatalf("%v\n(to skip the Azurite tests on a machine without Node.js, set %s=1; CI never skips)", shared.err, SkipEnv)
	}
	return shared.in
}

// StopShared stops the instance Require started, if any.
func StopShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.in != nil {
		shared.in.Stop()
		shared.in = nil
	}
}
