//go:build linux

package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/azlease/azlease"
)

// The deployment examples (examples/kubernetes, examples/systemd) are
// checked offline: their azlease command lines parse with this build's
// flags, their stop timing leaves azlease the time it needs, and the
// systemd unit passes systemd-analyze verify.

// stopBudget is the least time a supervisor must give azlease between
// SIGTERM and SIGKILL, for a --kill-after of killAfter: the successor's
// acknowledgement (--handoff-wait, 10 s by default), killAfter for the
// command's group, the hand-off (two requests, at most 3 s each, answered
// or not; a release is one), and 2 s for scheduling.
func stopBudget(killAfter time.Duration) time.Duration {
	return azlease.DefaultHandOffWait + killAfter + 6*time.Second + 2*time.Second
}

// leadLine is what an example's 'azlease lead' command line says.
type leadLine struct {
	killAfter  time.Duration
	healthAddr string
	flags      map[string]string // the flags given, by name
	name       string
	command    []string
}

// parseLead parses args ("lead", flags, NAME, "--", CMD...) with the
// command's own flags, as azlease would.
func parseLead(t *testing.T, args []string) leadLine {
	t.Helper()
	require.NotEmpty(t, args)
	require.Equal(t, "lead", args[0])
	root := newRoot(&globals{stdout: io.Discard, stderr: io.Discard})
	c, _, err := root.Find(args)
	require.NoError(t, err)
	require.Equal(t, "lead", c.Name())
	ll := leadLine{flags: map[string]string{}}
	var kept []string
	for i, a := range args[1:] {
		if a == "--" {
			kept = append(kept, args[1+i:]...)
			break
		}
		name, value, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if strings.HasPrefix(a, "--") {
			ll.flags[name] = value
		}
		kept = append(kept, a)
	}
	require.NoError(t, c.ParseFlags(kept), "azlease %s", strings.Join(args, " "))
	rest := c.Flags().Args()
	dash := c.Flags().ArgsLenAtDash()
	require.Equal(t, 1, dash, "one election name before --: %q", rest)
	require.Greater(t, len(rest), 1, "a command after --")
	ll.name, ll.command = rest[0], rest[1:]
	ll.killAfter, err = c.Flags().GetDuration("kill-after")
	require.NoError(t, err)
	ll.healthAddr = ll.flags["health-addr"]
	if f := c.Flags().Lookup("health-addr"); f != nil {
		ll.healthAddr = f.Value.String()
	}
	_, secret := ll.flags["connection-string"]
	assert.False(t, secret, "no secret on the command line")
	return ll
}

// k8sObject is the part of a Kubernetes object the check reads.
type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name        string            `yaml:"name"`
		Annotations map[string]string `yaml:"annotations"`
	} `yaml:"metadata"`
	Spec struct {
		Replicas int `yaml:"replicas"`
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec struct {
				ServiceAccountName            string `yaml:"serviceAccountName"`
				TerminationGracePeriodSeconds *int   `yaml:"terminationGracePeriodSeconds"`
				SecurityContext               struct {
					RunAsNonRoot bool `yaml:"runAsNonRoot"`
					RunAsUser    int  `yaml:"runAsUser"`
					RunAsGroup   int  `yaml:"runAsGroup"`
				} `yaml:"securityContext"`
				Containers []struct {
					Name    string   `yaml:"name"`
					Command []string `yaml:"command"`
					Args    []string `yaml:"args"`
					Ports   []struct {
						Name          string `yaml:"name"`
						ContainerPort int    `yaml:"containerPort"`
					} `yaml:"ports"`
					LivenessProbe  *k8sProbe `yaml:"livenessProbe"`
					ReadinessProbe *k8sProbe `yaml:"readinessProbe"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type k8sProbe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
}

// TestKubernetesExample: examples/kubernetes/deployment.yaml is a service
// account with a workload identity and a Deployment whose pods use it, run
// 'azlease lead' with Entra ID, probe its health endpoints, and give it
// the time it needs to stop.
func TestKubernetesExample(t *testing.T) {
	t.Parallel()
	f, err := os.Open("../../examples/kubernetes/deployment.yaml")
	require.NoError(t, err)
	defer f.Close()
	objs := map[string]k8sObject{}
	dec := yaml.NewDecoder(f)
	for {
		var o k8sObject
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		require.NotContains(t, objs, o.Kind)
		objs[o.Kind] = o
	}
	sa, ok := objs["ServiceAccount"]
	require.True(t, ok, "a ServiceAccount")
	assert.Contains(t, sa.Metadata.Annotations, "azure.workload.identity/client-id")
	d, ok := objs["Deployment"]
	require.True(t, ok, "a Deployment")
	pod := d.Spec.Template
	assert.GreaterOrEqual(t, d.Spec.Replicas, 2, "a standby")
	for k, v := range d.Spec.Selector.MatchLabels {
		assert.Equal(t, v, pod.Metadata.Labels[k], "the selector selects the pods")
	}
	assert.Equal(t, "true", pod.Metadata.Labels["azure.workload.identity/use"])
	assert.Equal(t, sa.Metadata.Name, pod.Spec.ServiceAccountName)
	sc := pod.Spec.SecurityContext
	assert.True(t, sc.RunAsNonRoot)
	assert.Equal(t, dockerfileUser(t), strconv.Itoa(sc.RunAsUser)+":"+strconv.Itoa(sc.RunAsGroup), "the image's user")

	require.Len(t, pod.Spec.Containers, 1)
	ctr := pod.Spec.Containers[0]
	require.Len(t, ctr.Command, 1)
	assert.Equal(t, "azlease", filepath.Base(ctr.Command[0]))
	ll := parseLead(t, ctr.Args)
	assert.True(t, strings.HasPrefix(ll.flags["account-url"], "https://"), "Entra ID: --account-url")
	assert.Equal(t, "$(POD_NAME)", ll.flags["identity"])

	_, port, err := net.SplitHostPort(ll.healthAddr)
	require.NoError(t, err, "--health-addr %q", ll.healthAddr)
	var health string
	for _, p := range ctr.Ports {
		if strconv.Itoa(p.ContainerPort) == port {
			health = p.Name
		}
	}
	require.NotEmpty(t, health, "a container port for --health-addr")
	require.NotNil(t, ctr.LivenessProbe)
	require.NotNil(t, ctr.ReadinessProbe)
	assert.Equal(t, "/healthz", ctr.LivenessProbe.HTTPGet.Path)
	assert.Equal(t, health, ctr.LivenessProbe.HTTPGet.Port)
	assert.Equal(t, "/readyz", ctr.ReadinessProbe.HTTPGet.Path)
	assert.Equal(t, health, ctr.ReadinessProbe.HTTPGet.Port)

	require.NotNil(t, pod.Spec.TerminationGracePeriodSeconds)
	grace := time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	assert.GreaterOrEqual(t, grace, stopBudget(ll.killAfter), "terminationGracePeriodSeconds for --kill-after %v", ll.killAfter)
}

// dockerfileUser is the USER line of the repository's Dockerfile.
func dockerfileUser(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../Dockerfile")
	require.NoError(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if u, ok := strings.CutPrefix(l, "USER "); ok {
			return strings.TrimSpace(u)
		}
	}
	t.Fatal("no USER in the Dockerfile")
	return ""
}

// TestSystemdExample: examples/systemd/scheduler.service runs 'azlease
// lead' with the secret in an environment file, KillMode=mixed, a stop
// timeout that covers azlease's stop, and passes systemd-analyze verify.
func TestSystemdExample(t *testing.T) {
	t.Parallel()
	const unit = "../../examples/systemd/scheduler.service"
	sections := parseUnit(t, unit)
	svc := sections["Service"]
	require.NotNil(t, svc, "a [Service] section")
	assert.Equal(t, "mixed", svc["KillMode"])
	assert.NotEmpty(t, svc["EnvironmentFile"])
	assert.NotEmpty(t, svc["Restart"])
	exec0 := strings.Fields(svc["ExecStart"])
	require.NotEmpty(t, exec0)
	assert.Equal(t, "/usr/local/bin/azlease", exec0[0])
	ll := parseLead(t, exec0[1:])
	stop, err := strconv.Atoi(svc["TimeoutStopSec"])
	require.NoError(t, err, "TimeoutStopSec in seconds")
	assert.GreaterOrEqual(t, time.Duration(stop)*time.Second, stopBudget(ll.killAfter), "TimeoutStopSec for --kill-after %v", ll.killAfter)
	assert.NotEmpty(t, sections["Install"]["WantedBy"])

	t.Run("systemd-analyze verify", func(t *testing.T) {
		analyze, err := exec.LookPath("systemd-analyze")
		if err != nil {
			msg := "systemd-analyze not found (Debian's systemd package has it): the unit is not verified"
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
		// It checks that ExecStart's program exists: this build's azlease.
		b, err := os.ReadFile(unit)
		require.NoError(t, err)
		tmp := filepath.Join(t.TempDir(), filepath.Base(unit))
		require.NoError(t, os.WriteFile(tmp, []byte(strings.ReplaceAll(string(b), "/usr/local/bin/azlease", bin)), 0o644))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, analyze, "verify", tmp).CombinedOutput()
		require.NoError(t, err, "systemd-analyze verify:\n%s", out)
		assert.Empty(t, strings.TrimSpace(string(out)), "systemd-analyze verify warns")
	})
}

// parseUnit reads a systemd unit file: sections of Key=Value lines (the
// last value of a key wins; no line continuations).
func parseUnit(t *testing.T, path string) map[string]map[string]string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	out := map[string]map[string]string{}
	var cur map[string]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "" || l[0] == '#' || l[0] == ';':
		case l[0] == '[':
			cur = map[string]string{}
			out[strings.Trim(l, "[]")] = cur
		default:
			require.NotNil(t, cur, "a key outside a section: %q", l)
			require.False(t, strings.HasSuffix(l, `\`), "no line continuations: %q", l)
			k, v, ok := strings.Cut(l, "=")
			require.True(t, ok, "not Key=Value: %q", l)
			cur[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	require.NoError(t, sc.Err())
	return out
}
