package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// helpLimits: a subcommand's --help fits a screen.
const (
	helpLines     = 30
	helpColumns   = 100
	rootHelpLines = 40 // the root lists every command and the connection flags
)

// wantShared is which shared flags each command takes: those whose value it
// uses, and no other.
var wantShared = map[string][]string{
	"lock":          {"connection-string", "account-url", "sas-url", "container", "log-level", "identity", "lease-duration", "poll-interval", "kill-after"},
	"lead":          {"connection-string", "account-url", "sas-url", "container", "log-level", "identity", "lease-duration", "poll-interval", "kill-after"},
	"once":          {"connection-string", "account-url", "sas-url", "container", "log-level", "identity", "lease-duration", "poll-interval", "kill-after"},
	"shards":        {"connection-string", "account-url", "sas-url", "container", "log-level", "identity", "lease-duration", "poll-interval", "kill-after"},
	"shards-add":    {"connection-string", "account-url", "sas-url", "container", "log-level"},
	"shards-remove": {"connection-string", "account-url", "sas-url", "container", "log-level"},
	"status":        {"connection-string", "account-url", "sas-url", "container", "log-level"},
	"watch":         {"connection-string", "account-url", "sas-url", "container", "log-level"}, // its --poll-interval is its own
	"ui":            {"connection-string", "account-url", "sas-url", "container", "log-level"},
	"break":         {"connection-string", "account-url", "sas-url", "container", "log-level"},
	"yield":         {"connection-string", "account-url", "sas-url", "container", "log-level", "identity"},
	"reset-once":    {"connection-string", "account-url", "sas-url", "container", "log-level", "identity", "lease-duration"},
	"emulator":      nil,
	"version":       nil,
}

// sampleValue is a valid value for each shared flag.
var sampleValue = map[string]string{
	"connection-string": "UseDevelopmentStorage=true", "account-url": "https://a.blob.core.windows.net/",
	"sas-url": "https://a.blob.core.windows.net/c?sig=x", "container": "c", "log-level": "info", "identity": "me",
	"lease-duration": "30s", "poll-interval": "2s", "kill-after": "2s",
}

func help(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(append(args, "--help"), &out, &errb)
	require.Equal(t, exitOK, code, "azlease %s --help: %s", strings.Join(args, " "), errb.String())
	return out.String()
}

// helpFlags are the flags a help text names in its flag list and its
// "Connection:" line.
func helpFlags(text string) []string {
	var names []string
	listing := false
	for _, line := range strings.Split(text, "\n") {
		switch {
		case line == "Flags:":
			listing = true
		case strings.HasPrefix(line, "Connection: "):
			flags, _, _ := strings.Cut(line, " (") // "(azlease --help)" is no flag of its
			for _, m := range regexp.MustCompile(`--([a-z-]+)`).FindAllStringSubmatch(flags, -1) {
				names = append(names, m[1])
			}
			listing = false
		case listing && strings.HasPrefix(line, "  "):
			if m := regexp.MustCompile(`^\s+(?:-\w, )?--([a-z-]+)`).FindStringSubmatch(line); m != nil {
				names = append(names, m[1])
			}
		default:
			listing = false
		}
	}
	return names
}

// TestHelpFitsAScreen: every subcommand's --help is at most 30 lines of at
// most 100 columns, and lists exactly the flags the command takes: its own,
// and of the shared ones only those whose value it uses (wantShared). Every
// command has an entry in sharedFlags.
func TestHelpFitsAScreen(t *testing.T) {
	root := newRoot(&globals{})
	assert.Empty(t, root.PersistentFlags().FlagUsages(), "no flag is on every command")
	text := help(t)
	assert.LessOrEqual(t, strings.Count(text, "\n"), rootHelpLines, "azlease --help:\n%s", text)
	for _, c := range root.Commands() {
		if !c.IsAvailableCommand() {
			continue
		}
		name := c.Name()
		t.Run(name, func(t *testing.T) {
			_, ok := sharedFlags[name]
			assert.True(t, ok, "sharedFlags names the shared flags %s takes", name)
			want, ok := wantShared[name]
			require.True(t, ok, "wantShared names the shared flags %s takes", name)
			text := help(t, name)
			lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
			assert.LessOrEqual(t, len(lines), helpLines, "azlease %s --help:\n%s", name, text)
			for _, l := range lines {
				assert.LessOrEqual(t, len([]rune(l)), helpColumns, "azlease %s --help: a line too wide:\n%s", name, l)
			}
			listed := helpFlags(text)
			var own []string
			c.LocalFlags().VisitAll(func(f *pflag.Flag) {
				if f.Name != "help" && !f.Hidden && f.Annotations[groupAnnotation] == nil {
					own = append(own, f.Name)
				}
			})
			slices.Sort(listed)
			all := slices.Concat(own, want)
			slices.Sort(all)
			assert.Equal(t, all, listed, "azlease %s --help lists its own flags and the shared ones it takes", name)
			for shared := range sampleValue {
				if slices.Contains(want, shared) {
					// Accepted as before.
					if name == "watch" && shared == "poll-interval" {
						continue
					}
					help(t, name, "--"+shared+"="+sampleValue[shared])
					continue
				}
				if name == "watch" && shared == "poll-interval" {
					continue // watch's own
				}
				// Not taken: a usage error, not ignored.
				var out, errb bytes.Buffer
				code := run([]string{name, "--" + shared + "=" + sampleValue[shared], "x"}, &out, &errb)
				assert.Equal(t, exitUsage, code, "azlease %s --%s", name, shared)
				assert.Contains(t, errb.String(), "unknown flag: --"+shared)
			}
		})
	}
}

// TestNoCommandReadsTheRootsFlags: the shared flags are the command's own
// now, so c.Root().PersistentFlags().Changed(...) is always false: no
// source file of the command may ask the root for them (ask the command:
// c.Flags().Changed, or sharedFlag).
func TestNoCommandReadsTheRootsFlags(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		assert.NotContains(t, string(b), "PersistentFlags()", "%s: the shared flags are on each command (flags.go)", f)
	}
}

// TestPollIntervalSaysWhoLooks: the shared --poll-interval's usage line
// names who looks that often in each command that takes it: a lead
// instance stands by and a shards instance looks at its group; neither
// waits in a queue.
func TestPollIntervalSaysWhoLooks(t *testing.T) {
	for name, who := range map[string]string{
		"lock":   "how often a waiter looks again, 100ms to 1h (default 1s)",
		"lead":   "how often a standby looks again, 100ms to 1h (default 5s)",
		"once":   "how often a waiting caller looks again, 100ms to 1h (default 2s)",
		"shards": "how often it looks at the group, 100ms to 1h (default 2s)",
	} {
		assert.Contains(t, help(t, name), who, "azlease %s --help", name)
	}
}
