//go:build linux

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestVersionCommand: 'azlease version' names the revision the binary was
// built from, as the go command reads it from the binary, and that is the
// checked-out commit when the module is a git clone (not a worktree, which
// the go command does not stamp); --json prints the same.
func TestVersionCommand(t *testing.T) {
	t.Parallel()
	w := newWorld(t, "")
	p := w.run(10*time.Second, "version")
	p.expect(0, time.Second)
	text := strings.TrimSuffix(p.stdout(), "\n")
	require.NotContains(t, text, "\n")
	require.Regexp(t, `^azlease \S+ revision (unknown|[0-9a-f]{40}) .*go1\.\S+ linux/`+runtime.GOARCH+`$`, text)
	p = w.run(10*time.Second, "version", "--json")
	p.expect(0, time.Second)
	var v versionInfo
	require.NoError(t, json.Unmarshal([]byte(p.stdout()), &v), "output: %s", p.stdout())
	assert.Equal(t, runtime.Version(), v.Go)
	assert.Equal(t, "linux", v.OS)

	// What the go command reads from the binary.
	out, err := exec.Command(goCommand(), "version", "-m", bin).Output()
	require.NoError(t, err)
	revision := ""
	if m := regexp.MustCompile(`(?m)^\s*build\s+vcs\.revision=(\S+)$`).FindSubmatch(out); m != nil {
		revision = string(m[1])
	}
	assert.Equal(t, revision, v.Revision)

	// From a git clone the build is stamped with its HEAD (harness_test.go
	// builds with -buildvcs=auto, whatever GOFLAGS says).
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	if gitDir(root) {
		head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
		require.NoError(t, err)
		assert.Equal(t, strings.TrimSpace(string(head)), v.Revision)
		assert.Contains(t, text, " revision "+v.Revision)
		return
	}
	t.Logf("%s is not a git clone (no .git directory, or no git command): the build has no revision", root)
	assert.Empty(t, v.Revision)
	assert.Contains(t, text, " revision unknown ")
}

// gitDir reports whether root is a git clone the go command stamps builds
// from: a .git directory (a worktree's .git is a file) and git on PATH.
func gitDir(root string) bool {
	fi, err := os.Stat(filepath.Join(root, ".git"))
	if err != nil || !fi.IsDir() {
		return false
	}
	_, err = exec.LookPath("git")
	return err == nil
}
