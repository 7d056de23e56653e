//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The container image test runs the repository's Dockerfile with podman,
// as an operator would: it builds the image from a static binary of this
// checkout, and runs azlease in it as the container's command (PID 1).
//
// podman needs these to run anything in a sandbox like the CI machine's:
//   - --runtime runc: crun fails there ("cgroups in hybrid mode not
//     supported");
//   - --ulimit nofile and nproc, low and explicit: podman's defaults ask for
//     more than the sandbox allows, and runc then fails to set the limits
//     ("error setting rlimit type 7: operation not permitted");
//   - --network=host to reach the host's loopback (the emulator), and
//     --network=none where no network is needed, so that podman's own
//     networking (CNI plugins) is never needed.
//
// The default storage (overlay, in /var/lib/containers) works there. The
// image and containers have names of their own and are removed at the end;
// the image is built without intermediate layers (--layers=false), so
// nothing is left behind, and every container is killed by podman after
// 300 s (--timeout) whatever becomes of this test.

// podmanGlobal are podman's options before the subcommand.
var podmanGlobal = []string{"--runtime", "runc"}

// podmanRun are the options of every 'podman run'.
var podmanRun = []string{"--rm", "--pull=never", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
	"--timeout", "300"}

// requirePodman returns the podman command, or skips the test when podman
// or runc is missing, naming the make target that installs them; with
// CI=true it fails instead.
func requirePodman(t *testing.T) string {
	t.Helper()
	podman, err := exec.LookPath("podman")
	if err == nil {
		_, err = exec.LookPath("runc")
	}
	if err == nil {
		return podman
	}
	msg := fmt.Sprintf("the container image test needs podman and runc (%v): 'make podman' installs them from Debian's packages (as root)", err)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// podmanCmd runs podman with args within limit and returns its standard
// output; it fails the test if podman fails.
func podmanCmd(t *testing.T, limit time.Duration, args ...string) string {
	t.Helper()
	out, err := podmanTry(limit, args...)
	if err != nil {
		t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// podmanTry runs podman with args within limit. Its error carries what
// podman printed on standard error.
func podmanTry(limit time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "podman", append(append([]string{}, podmanGlobal...), args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		err = fmt.Errorf("%w; stderr:\n%s", err, stderr.String())
	}
	return string(out), err
}

// TestContainerImage: the Dockerfile builds an image from a static binary
// (as 'make build' makes it) that runs as a user that is not root and has
// the binary's version stamp; 'azlease emulator' served from a container
// on the host's network takes the host's azlease lock and status; and
// 'azlease lock … -- /azlease version' as the container's command (PID 1)
// runs its command under the lease and exits 0.
func TestContainerImage(t *testing.T) {
	requirePodman(t)
	t.Parallel()
	arch := runtime.GOARCH
	suffix := fmt.Sprintf("%08x", rand.Uint32())
	image := "localhost/azlease-test:" + suffix

	// The build context: the Dockerfile, .dockerignore, and what make build
	// leaves in dist/ for this architecture.
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "dist"), 0o755))
	for _, f := range []string{"Dockerfile", ".dockerignore"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o644))
	}
	staticBin := filepath.Join(dir, "dist", "azlease-linux-"+arch)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, goCommand(), "build", "-trimpath", "-buildvcs=auto", "-ldflags=-s -w", "-o", staticBin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build (as make build does): %s", out)
	ca, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil {
		t.Logf("no CA bundle on this machine (%v): the image gets an empty one", err)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "dist", "ca-certificates.crt"), ca, 0o644))

	start := time.Now()
	podmanCmd(t, 2*time.Minute, "build", "--pull=never", "--layers=false", "--platform", "linux/"+arch, "-t", image, dir)
	t.Cleanup(func() { _, _ = podmanTry(time.Minute, "rmi", "-f", image) })
	t.Logf("podman build: %v", time.Since(start).Round(time.Millisecond))

	var cfg []struct {
		Architecture string
		Config       struct {
			User       string
			Entrypoint []string
		}
	}
	require.NoError(t, json.Unmarshal([]byte(podmanCmd(t, 30*time.Second, "image", "inspect", image)), &cfg))
	require.Len(t, cfg, 1)
	assert.Equal(t, arch, cfg[0].Architecture)
	assert.Equal(t, "65532:65532", cfg[0].Config.User)
	assert.Equal(t, []string{"/azlease"}, cfg[0].Config.Entrypoint)

	// The CA bundle is where Go looks for it.
	ctr := "azlease-test-files-" + suffix
	podmanCmd(t, 30*time.Second, "create", "--name", ctr, image)
	t.Cleanup(func() { _, _ = podmanTry(time.Minute, "rm", "-f", ctr) })
	podmanCmd(t, 30*time.Second, "cp", ctr+":/etc/ssl/certs/ca-certificates.crt", filepath.Join(dir, "copied.crt"))
	copied, err := os.ReadFile(filepath.Join(dir, "copied.crt"))
	require.NoError(t, err)
	assert.Equal(t, len(ca), len(copied), "the CA bundle in the image")

	// azlease version, with the same stamp as the binary the other tests run.
	run := func(args ...string) []string {
		return append(append([]string{"run"}, podmanRun...), args...)
	}
	version := podmanCmd(t, time.Minute, run("--network=none", image, "version", "--json")...)
	var v versionInfo
	require.NoError(t, json.Unmarshal([]byte(version), &v), "output: %s", version)
	assert.Equal(t, "linux", v.OS)
	assert.Equal(t, arch, v.Arch)
	host := newWorld(t, "").run(10*time.Second, "version", "--json")
	host.expect(0, time.Second)
	var hv versionInfo
	require.NoError(t, json.Unmarshal([]byte(host.stdout()), &hv))
	assert.Equal(t, hv.Revision, v.Revision, "the image's binary names the revision the test binary names")
	assert.Equal(t, hv.Version, v.Version)

	// The emulator in a container, on the host's loopback (any free port:
	// it prints which).
	emuName := "azlease-test-emulator-" + suffix
	emuOut := filepath.Join(dir, "emulator.out")
	t.Cleanup(func() { _, _ = podmanTry(time.Minute, "rm", "-f", "-t", "0", emuName) })
	emu := startPodman(t, emuOut, run("--name", emuName, "--network=host", image, "emulator", "--addr", "127.0.0.1:0")...)
	var conn string
	for end := time.Now().Add(30 * time.Second); conn == ""; time.Sleep(50 * time.Millisecond) {
		b, _ := os.ReadFile(emuOut)
		if first, _, ok := strings.Cut(string(b), "\n"); ok && strings.Contains(first, "BlobEndpoint=") {
			conn = first
		}
		if time.Now().After(end) {
			t.Fatalf("the containerised emulator printed no connection string within 30 s:\n%s", b)
		}
	}
	require.Contains(t, conn, "BlobEndpoint=http://127.0.0.1:")
	w := newWorld(t, conn)
	w.run(30*time.Second, "lock", "--identity", "host", "img", "--", "true").expect(0, time.Second)
	st := w.run(30*time.Second, "status", "--json", "img")
	st.expect(0, time.Second)
	var before statusJSON
	require.NoError(t, json.Unmarshal([]byte(st.stdout()), &before))
	assert.Equal(t, "host", before.Holder)

	// azlease lock as the container's command: PID 1, where azlease acts
	// as the container's init and does the work in a child (init_linux.go),
	// whose pid its default identity carries; a scratch image has no shell,
	// so the command is azlease itself.
	start = time.Now()
	out2 := podmanCmd(t, time.Minute, run("--network=host", image,
		"lock", "--connection-string", conn, "--container", w.container, "img", "--", "/azlease", "version")...)
	t.Logf("podman run azlease lock -- /azlease version: %v", time.Since(start).Round(time.Millisecond))
	assert.Regexp(t, `(?m)^azlease \S+ revision \S+`, out2)
	st = w.run(30*time.Second, "status", "--json", "img")
	st.expect(0, time.Second)
	var after statusJSON
	require.NoError(t, json.Unmarshal([]byte(st.stdout()), &after))
	assert.Greater(t, after.Epoch, before.Epoch)
	assert.Regexp(t, `-\d+$`, after.Holder, "the default identity, HOSTNAME-PID")
	assert.NotEqual(t, "host", after.Holder)
	assert.False(t, after.Leased, "released")

	// podman stop sends SIGTERM: the emulator stops cleanly.
	podmanCmd(t, 30*time.Second, "stop", "-t", "10", emuName)
	require.Equal(t, 0, emu.wait(30*time.Second), "the emulator's exit status; output:\n%s", readFile(emuOut))
	assert.Contains(t, readFile(emuOut), "emulator stopped (SIGTERM)")
}

func readFile(path string) string { b, _ := os.ReadFile(path); return string(b) }

// podmanProc is a podman command running in the background.
type podmanProc struct {
	t    *testing.T
	cmd  *exec.Cmd
	done chan struct{}
}

// startPodman starts podman with args, its output to the file out; it is
// killed at cleanup if still running.
func startPodman(t *testing.T, out string, args ...string) *podmanProc {
	t.Helper()
	f, err := os.Create(out)
	require.NoError(t, err)
	defer f.Close()
	p := &podmanProc{t: t, done: make(chan struct{})}
	p.cmd = exec.Command("podman", append(append([]string{}, podmanGlobal...), args...)...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, p.cmd.Start())
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

// wait waits up to limit for podman to exit and returns its status.
func (p *podmanProc) wait(limit time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(limit):
		_ = p.cmd.Process.Kill()
		<-p.done
		p.t.Fatalf("podman %v still running after %v", p.cmd.Args, limit)
	}
	return p.cmd.ProcessState.ExitCode()
}
