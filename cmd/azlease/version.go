// version.go: 'azlease version', what the running binary was built from,
// read from the build information the Go toolchain records in it.

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

func newVersionCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "version",
		Short: "Print the module version and source revision this binary was built from",
		Long: `Print what this binary was built from: azlease's module version, the version
control revision and its commit time, whether the working tree had changes
not committed, the Go version, and the operating system and architecture.

The version is the release's tag for 'go install …@vX.Y.Z', a pseudo-version
(v0.0.0-DATE-REVISION, "+dirty" with uncommitted changes) for a build from a
git clone, and "(devel)" for a build without version control information:
from a source archive, from a git worktree, or with -buildvcs=false. The
revision is then "unknown". 'make build' keeps it (-buildvcs=auto).

It needs no storage account. --json prints one JSON object; fields that are
unknown are left out of it.`,
		Example: `  azlease version
  azlease version --json | jq -r .revision`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return printVersion(g.stdout, readVersion(), asJSON)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return c
}

// versionInfo is what 'azlease version' prints.
type versionInfo struct {
	Version  string     `json:"version"`            // the main module's version, "(devel)" without VCS information
	VCS      string     `json:"vcs,omitempty"`      // "git", or empty when unknown
	Revision string     `json:"revision,omitempty"` // the full commit hash, empty when unknown
	Time     *time.Time `json:"time,omitempty"`     // the commit's time
	Modified *bool      `json:"modified,omitempty"` // uncommitted changes in the working tree
	Go       string     `json:"go"`
	OS       string     `json:"os"`
	Arch     string     `json:"arch"`
}

// readVersion reads the running binary's build information.
func readVersion() versionInfo {
	v := versionInfo{Version: "(devel)", Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	return versionFrom(bi, v)
}

// versionFrom fills v from build information.
func versionFrom(bi *debug.BuildInfo, v versionInfo) versionInfo {
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		v.Go = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs":
			v.VCS = s.Value
		case "vcs.revision":
			v.Revision = s.Value
		case "vcs.time":
			if t, err := time.Parse(time.RFC3339, s.Value); err == nil {
				v.Time = &t
			}
		case "vcs.modified":
			m := s.Value == "true"
			v.Modified = &m
		case "GOOS":
			v.OS = s.Value
		case "GOARCH":
			v.Arch = s.Value
		}
	}
	return v
}

// String is the one line 'azlease version' prints:
//
//	azlease v1.2.0 revision 0123abcd… (2026-11-23T13:26:33Z) go1.26.8 linux/amd64
//	azlease (devel) revision unknown go1.26.8 linux/amd64
func (v versionInfo) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "azlease %s revision ", v.Version)
	if v.Revision == "" {
		b.WriteString("unknown")
	} else {
		b.WriteString(v.Revision)
		if v.Time != nil {
			fmt.Fprintf(&b, " (%s)", v.Time.UTC().Format(time.RFC3339))
		}
		if v.Modified != nil && *v.Modified {
			b.WriteString(" with uncommitted changes")
		}
	}
	fmt.Fprintf(&b, " %s %s/%s", v.Go, v.OS, v.Arch)
	return b.String()
}

func printVersion(w io.Writer, v versionInfo, asJSON bool) error {
	if !asJSON {
		_, err := fmt.Fprintln(w, v.String())
		return err
	}
	if err := json.NewEncoder(w).Encode(v); err != nil {
		return exitf(exitInternal, "version: %v", err)
	}
	return nil
}
