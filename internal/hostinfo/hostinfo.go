// Package hostinfo describes the machine a benchmark ran on, for the reports
// of internal/bench and internal/manybench.
package hostinfo

import (
	"os"
	"strings"
)

// CPUModel is the first "model name" in /proc/cpuinfo, or "unknown CPU".
func CPUModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "model name") {
			if _, model, ok := strings.Cut(line, ":"); ok {
				return strings.TrimSpace(model)
			}
		}
	}
	return "unknown CPU"
}
