package main

import (
	"encoding/json"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestVersionFrom: build information to the version line and object.
func TestVersionFrom(t *testing.T) {
	base := versionInfo{Version: "(devel)", Go: "go0", OS: "plan9", Arch: "mips"}
	v := versionFrom(&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, base)
	assert.Equal(t, "azlease (devel) revision unknown go1.26.8 plan9/mips", v.String())
	b, err := json.Marshal(v)
	require.NoError(t, err)
	assert.JSONEq(t, `{"version":"(devel)","go":"go1.26.8","os":"plan9","arch":"mips"}`, string(b))

	v = versionFrom(&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.0"}, Settings: []debug.BuildSetting{
		{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "arm64"}, {Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: strings.Repeat("ab", 20)}, {Key: "vcs.time", Value: "2026-11-23T13:26:33Z"},
		{Key: "vcs.modified", Value: "true"},
	}}, base)
	assert.Equal(t, "azlease v1.2.0 revision "+strings.Repeat("ab", 20)+" (2026-11-23T13:26:33Z) with uncommitted changes go1.26.8 linux/arm64", v.String())
	b, err = json.Marshal(v)
	require.NoError(t, err)
	assert.JSONEq(t, `{"version":"v1.2.0","vcs":"git","revision":"`+strings.Repeat("ab", 20)+`","time":"2026-11-23T13:26:33Z",
		"modified":true,"go":"go1.26.8","os":"linux","arch":"arm64"}`, string(b))
}
